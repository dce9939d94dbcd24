#!/usr/bin/env python3
"""Writes the safetensors fuzz target's seed files (tests/fuzz/seeds/safetensors): small valid
files of every dtype fusec reads, with and without metadata, so that the fuzzer starts from
inputs that get past the header. Standard library only; rerun to regenerate."""
import json
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors")


def write(name, tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for tname, dtype, shape, raw in tensors:
        header[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


os.makedirs(HERE, exist_ok=True)
f32 = struct.pack("<6f", 1.0, -2.5, 0.125, 3.0e5, -0.0, 7.0)
write("f32.safetensors", [("w", "F32", [2, 3], f32)], {"format": "pt"})
write("mixed.safetensors", [
    ("ids", "I64", [2, 2], struct.pack("<4q", 0, 5, 9, 2)),
    ("mask", "BOOL", [3], bytes([1, 0, 1])),
    ("n", "I32", [2], struct.pack("<2i", -7, 40000)),
], {"fusec_model": "toy", "fusec_config": "vocab=10"})
write("halves.safetensors", [
    ("b", "BF16", [2, 2], struct.pack("<4H", 0x3f80, 0xc020, 0x0000, 0x7f80)),
    ("h", "F16", [3], struct.pack("<3H", 0x3c00, 0xbc00, 0x7bff)),
])
write("scalar.safetensors", [("loss", "F32", [], struct.pack("<f", 2.25))])
write("empty.safetensors", [], {})
