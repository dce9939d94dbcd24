#!/usr/bin/env python3
"""Tiny safetensors helper for the `fusec run` lit tests (standard library only, no numpy).

  st.py write OUT NAME=DTYPE[d0,d1,...]:v0,v1,...  [...]   write tensors (I64 I32 F32 BOOL)
  st.py cut IN OUT NBYTES                                  copy the first NBYTES of IN
  st.py show IN                                            print "name dtype [shape]" per tensor
  st.py values IN NAME                                     print a tensor's values, comma-separated
"""
import json
import re
import struct
import sys

FMT = {"I64": "q", "I32": "i", "F32": "f", "BOOL": "B", "F16": "e"}


def write(out, specs):
    header, data = {}, b""
    for spec in specs:
        m = re.fullmatch(r"([^=]+)=([A-Z0-9]+)\[([0-9,]*)\]:(.*)", spec)
        if not m:
            sys.exit("bad tensor spec: " + spec)
        name, dtype, shape, vals = m.groups()
        shape = [int(d) for d in shape.split(",") if d]
        conv = float if dtype.startswith("F") else int
        vals = [conv(v) for v in vals.split(",") if v]
        raw = struct.pack("<%d%s" % (len(vals), FMT[dtype]), *vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def read(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8 : 8 + n])
    header.pop("__metadata__", None)
    return header, b[8 + n :]


def main(argv):
    cmd = argv[1]
    if cmd == "write":
        write(argv[2], argv[3:])
    elif cmd == "cut":
        open(argv[3], "wb").write(open(argv[2], "rb").read()[: int(argv[4])])
    elif cmd == "show":
        header, _ = read(argv[2])
        for name in sorted(header):
            e = header[name]
            print(name, e["dtype"], "[" + ",".join(str(d) for d in e["shape"]) + "]")
    elif cmd == "values":
        header, data = read(argv[2])
        e = header[argv[3]]
        b, end = e["data_offsets"]
        n = (end - b) // struct.calcsize(FMT[e["dtype"]])
        vals = struct.unpack("<%d%s" % (n, FMT[e["dtype"]]), data[b:end])
        print(",".join("%.6g" % v for v in vals))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
