#!/usr/bin/env python3
"""Compares two `fusec run` outputs (safetensors: `loss` and every weight) as the data-parallel
acceptance test does: losses within --loss-rtol relative (each step), weights within --weight-rtol
(relative L2 norm of the difference, each tensor). Prints one line per check and the worst
values; exit 1 when a bound is broken. Reads safetensors with numpy alone (no torch needed)."""
import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[a:b], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(info["shape"])
        else:
            out[name] = np.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("reference")
    p.add_argument("candidate")
    p.add_argument("--loss-rtol", type=float, default=1e-5)
    p.add_argument("--weight-rtol", type=float, default=1e-4)
    a = p.parse_args()
    ref, cand = load(a.reference), load(a.candidate)
    if set(ref) != set(cand):
        print("error: the files hold different tensors: %s" % sorted(set(ref) ^ set(cand)))
        return 1
    lr, lc = ref["loss"].astype(np.float64), cand["loss"].astype(np.float64)
    loss_err = float(np.max(np.abs(lr - lc) / np.abs(lr)))
    worst, worst_name = 0.0, ""
    for name in ref:
        if name == "loss":
            continue
        r, c = ref[name].astype(np.float64), cand[name].astype(np.float64)
        e = float(np.linalg.norm(r - c) / max(np.linalg.norm(r), 1e-30))
        if e > worst:
            worst, worst_name = e, name
    ok = loss_err <= a.loss_rtol and worst <= a.weight_rtol
    print("losses (%d steps): max relative difference %.3g (bound %.3g); first %.6f last %.6f" %
          (len(lr), loss_err, a.loss_rtol, lr[0], lr[-1]))
    print("weights: worst relative L2 difference %.3g in %s (bound %.3g)" % (worst, worst_name, a.weight_rtol))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
