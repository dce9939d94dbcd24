"""Safetensors files without the safetensors package (Debian has none): an 8-byte little-endian
header length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw data, in the
layout fusec's reader (frontend/safetensors.h) and PyTorch's tools expect."""
import json
import os
import struct

import torch

from .common import write_files

_DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.bfloat16: "BF16", torch.bool: "BOOL"}


def save(path, tensors, metadata=None):
    """Writes `tensors` (name -> torch.Tensor) to `path` atomically (a hidden temporary beside
    it, renamed; removed if the write fails)."""
    write_files(os.path.dirname(path) or ".", [(os.path.basename(path), lambda f: write(f, tensors, metadata))])


def write(f, tensors, metadata=None):
    """Writes `tensors` in safetensors layout to the binary file `f`, one tensor at a time (the
    header needs only their sizes, so no second copy of all the data is held)."""
    header, offset = {}, 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name}: dtype {t.dtype} cannot be written (f32, i64, bf16, bool)")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        f.write((t.view(torch.uint8) if t.dtype == torch.bfloat16 else t).numpy().tobytes())


def load(path):
    """The tensors of a safetensors file (F32, I64, BF16, BOOL), by name."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    kinds = {code: dtype for dtype, code in _DTYPES.items()}
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        buf = bytearray(raw[8 + n + b:8 + n + e])
        if h["dtype"] not in kinds:
            raise ValueError(f"{path}: {name} has dtype {h['dtype']}, which this reader does not know (F32, I64, BF16, BOOL)")
        out[name] = torch.frombuffer(buf, dtype=kinds[h["dtype"]]).reshape(h["shape"]).clone() if e > b else \
            torch.zeros(h["shape"], dtype=kinds[h["dtype"]])
    return out
