#!/usr/bin/env python3
"""The attention tuning harness lays shared memory out as the generator does (issue 40).

codegen/attention_smem.cpp is where the attention launches' shared memory is laid out; the
generated sources carry it as FA_SMEM_<LAUNCH>_<ARRAY> offsets and kernels.json as each launch's
bytes. bench/attention_mma_tune/make_variant.py builds standalone tuning variants on the GPU
host without fusec, so it keeps a copy of those rules (smem_layouts). This test generates the
bf16 attention kernels for several head dims, lengths and both templates (wgmma and mma.sync),
reads the tiling each source was given (FA_WARPS, FA_BC, FA_BQ, FA_DQ_OTILE), and requires the
copy to give every offset and every launch's bytes exactly.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "attention_mma_tune"))
import make_variant  # noqa: E402


def macros(src):
    return {m.group(1): m.group(2) for m in re.finditer(r"^#define (FA_\w+) (\S+)", src, re.M)}


def check(fusec, work, d, ctx, program, wgmma, producer):
    name = f"d{d}-{program}-{ctx}-wg{wgmma}-p{producer}"
    env = dict(os.environ, FUSEC_WGMMA=str(wgmma), FUSEC_WGMMA_PRODUCER=str(producer),
               FUSEC_WGMMA_PRODUCER_BWD=str(producer))
    fir = os.path.join(work, name + ".fir")
    with open(fir, "w") as f:
        subprocess.run([fusec, "compile", "--model", "small", "--program", program, "--d-head", str(d), "--ctx", str(ctx),
                        "--batch", "2", "--dtype", "bf16", "--context-length", "4096", "--attention", "fused"],
                       stdout=f, env=env, check=True)
    out = os.path.join(work, name)
    subprocess.run([fusec, "codegen", fir, "--passes=decompose-keep-attention,fuse", "--emit", "cuda", "--out-dir", out],
                   stdout=subprocess.DEVNULL, env=env, check=True)
    kernels = json.load(open(os.path.join(out, "kernels.json")))
    checked = 0
    for k in kernels:
        if k["family"] != "attention":
            continue
        src = open(os.path.join(out, k["image"] + ".cu")).read()
        m = macros(src)
        uses_wgmma = "FA_SMEM_WG_FWD_Q" in m
        layouts = make_variant.smem_layouts(uses_wgmma, int(m["FA_D"]), 16 * int(m["FA_WARPS"]), int(m["FA_BC"]),
                                            int(m["FA_BQ"]), int(m["FA_DQ_OTILE"]), int(m.get("FA_WG_STAGES", 0)),
                                            m.get("FA_SHORT") == "1", m.get("FA_SHORT_DS") == "1")
        expected = {f"FA_SMEM_{launch}_{a}": str(off) for launch, arrays, _ in layouts for a, off in arrays}
        generated = {key: value for key, value in m.items() if key.startswith("FA_SMEM_")}
        if generated != expected:
            raise SystemExit(f"FAIL {name} {k['name']}: make_variant.py's layout differs from the generator's:\n"
                             f"  generator: {sorted(generated.items())}\n  make_variant: {sorted(expected.items())}")
        by_launch = {launch: size for launch, _, size in layouts}
        for launch in k["launches"]:
            fn = launch["function"]
            kind = "DKDV" if fn.endswith("_dkdv") else "DQ" if fn.endswith("_dq") else "SHORT" if fn.endswith("_bwd_bwd") \
                else "FWD"
            # The template the function calls: the first fa_ call of its body (the dependent-launch
            # prologue, griddepcontrol, comes before it on Hopper).
            call = re.search(r"\bfa_\w+\(", src.split(fn + "(", 1)[1].split("{", 1)[1]).group(0)
            if "wgmma_ws(" in call:
                kind = "DKS" if kind == "DKDV" else "FWS"
            want = by_launch[("WG_" if "wgmma(" in call or "wgmma_ws(" in call else "") + kind]
            if launch["smem"] != want:
                raise SystemExit(f"FAIL {name} {fn}: launched with {launch['smem']} bytes, make_variant.py's layout "
                                 f"gives {want}")
            checked += 1
    if checked == 0:
        raise SystemExit(f"FAIL {name}: no attention launch generated")
    return checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    args = ap.parse_args()
    total = 0
    with tempfile.TemporaryDirectory() as work:
        for d in (64, 128):
            for program in ("attention", "attention_backward"):
                for ctx, wgmma, producer in ((256, 0, 0), (256, 1, 0), (2048, 1, 0), (2048, 1, 1)):
                    total += check(args.fusec, work, d, ctx, program, wgmma, producer)
    print(f"attention shared-memory layouts: {total} launches agree")


if __name__ == "__main__":
    main()
