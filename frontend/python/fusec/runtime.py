"""fusec's C interface (api/c_api.h, libfusec_c.so) from Python, through ctypes: compile a .fir
function once and run it on torch tensors the caller owns, zero-copy (their data pointers),
on PyTorch's current CUDA stream. ctypes rather than a compiled extension module: the library
is the same for every Python and every torch build, and nothing here is compiled against
Python's or torch's headers.

The library is found at $FUSEC_LIB, else in the build folders of the checkout this package
sits in (build, build-gpu, build-release)."""
import ctypes
import os
import re

import torch

from .common import OneLineError

_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i64": torch.int64,
           "i32": torch.int32, "bool": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


class FusecError(OneLineError):
    """What the C interface reported, as its one line."""


def parse_type(text):
    """"bf16[4,256,512]" -> (torch.bfloat16, (4, 256, 512))."""
    m = re.fullmatch(r"([a-z0-9]+)\[([0-9,]*)\]", text)
    if not m or m.group(1) not in _DTYPES:
        raise FusecError(f"internal: unknown fusec type '{text}'")
    return _DTYPES[m.group(1)], tuple(int(d) for d in m.group(2).split(",") if d)


def fir_dtype(dtype):
    if dtype not in _NAMES:
        raise FusecError(f"unsupported dtype {dtype} (fusec has {', '.join(map(str, _DTYPES.values()))})")
    return _NAMES[dtype]


def _candidates():
    if os.environ.get("FUSEC_LIB"):
        return [os.environ["FUSEC_LIB"]]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return [os.path.join(root, d, "libfusec_c.so") for d in ("build", "build-gpu", "build-release")]


_lib = None


def library():
    """The loaded libfusec_c.so (loaded once); FusecError naming where it looked if absent."""
    global _lib
    if _lib is not None:
        return _lib
    tried = _candidates()
    path = next((p for p in tried if os.path.isfile(p)), None)
    if path is None:
        raise FusecError(f"libfusec_c.so not found (looked at {', '.join(tried)}; build fusec or set FUSEC_LIB)")
    lib = ctypes.CDLL(path)
    P, S, C = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    lib.fusec_compile.restype = P
    lib.fusec_compile.argtypes = [C, C, C, ctypes.c_char_p, S]
    for name in ("fusec_num_sources", "fusec_num_outputs", "fusec_num_launches"):
        getattr(lib, name).restype = S
        getattr(lib, name).argtypes = [P]
    for name in ("fusec_source_name", "fusec_source_type", "fusec_output_type"):
        getattr(lib, name).restype = C
        getattr(lib, name).argtypes = [P, S]
    lib.fusec_output_alias.restype = ctypes.c_ssize_t
    lib.fusec_output_alias.argtypes = [P, S]
    lib.fusec_run.restype = ctypes.c_int
    lib.fusec_run.argtypes = [P, ctypes.POINTER(P), ctypes.POINTER(P), P, ctypes.c_char_p, S]
    lib.fusec_destroy.restype = None
    lib.fusec_destroy.argtypes = [P]
    lib.fusec_version.restype = C
    lib.fusec_stats.restype = C
    lib.fusec_stats.argtypes = [P]
    _lib = lib
    return lib


class Program:
    """One compiled function. sources: [(name, dtype, shape)] in the order run() takes them;
    outputs: [(dtype, shape)]; aliases: per output, the earlier output it is the same value as
    (fusec_output_alias: run() may be given one tensor for both, written once), or -1."""

    def __init__(self, fir_text, device="cuda", options=""):
        lib = library()
        err = ctypes.create_string_buffer(1024)
        handle = lib.fusec_compile(fir_text.encode(), device.encode(), options.encode(), err, len(err))
        if not handle:
            raise FusecError(err.value.decode(errors="replace"))
        self._lib, self._handle, self.device = lib, handle, device
        self.sources = [(lib.fusec_source_name(handle, i).decode(),) + parse_type(lib.fusec_source_type(handle, i).decode())
                        for i in range(lib.fusec_num_sources(handle))]
        self.outputs = [parse_type(lib.fusec_output_type(handle, i).decode()) for i in range(lib.fusec_num_outputs(handle))]
        self.aliases = [lib.fusec_output_alias(handle, i) for i in range(len(self.outputs))]
        self.launches = lib.fusec_num_launches(handle)
        self._err = err
        self._src = (ctypes.c_void_p * len(self.sources))()
        self._out = (ctypes.c_void_p * len(self.outputs))()

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.fusec_destroy(self._handle)
            self._handle = None

    def check(self, sources, outputs):
        """FusecError unless sources and outputs are the program's types, contiguous, on its device."""
        want = "cuda" if self.device == "cuda" else "cpu"
        if len(sources) != len(self.sources) or len(outputs) != len(self.outputs):
            raise FusecError(f"{len(sources)} sources and {len(outputs)} outputs; the program takes {len(self.sources)} "
                             f"and writes {len(self.outputs)}")
        for k, ((name, dtype, shape), t) in enumerate(zip(self.sources, sources)):
            if t.dtype != dtype or tuple(t.shape) != shape or not t.is_contiguous() or t.device.type != want:
                raise FusecError(f"source {k} ('{name}') is {t.dtype}{list(t.shape)} on {t.device}"
                                 f"{'' if t.is_contiguous() else ', not contiguous'}; the program takes {dtype}{list(shape)}"
                                 f" on {want}")
        for k, ((dtype, shape), t) in enumerate(zip(self.outputs, outputs)):
            if t.dtype != dtype or tuple(t.shape) != shape or not t.is_contiguous() or t.device.type != want:
                raise FusecError(f"output {k} is {t.dtype}{list(t.shape)}; the program writes {dtype}{list(shape)}")

    def stats(self):
        """What the calls so far did (fusec_stats): {"calls": n, "copied_in": n, ...}."""
        line = self._lib.fusec_stats(self._handle).decode()
        return {k: int(v) for k, v in (item.split("=") for item in line.split())}

    def run(self, sources, outputs, check=True):
        """Runs once on `sources` (tensors of the types self.sources names, contiguous, on the
        program's device) into `outputs` (likewise); on CUDA, ordered on the current stream.
        check=False skips the per-tensor checks, for a caller that guarantees them (the
        backend: Dynamo's guards fix every argument's dtype and shape, and it makes the
        outputs itself)."""
        if check:
            self.check(sources, outputs)
        self.run_pointers([t.data_ptr() for t in sources], [t.data_ptr() for t in outputs])

    def run_pointers(self, sources, outputs):
        """run() on device addresses (ints) the caller vouches for: the types, contiguity and
        sizes run() checks are the caller's to guarantee."""
        self._src[:] = sources
        self._out[:] = outputs
        stream = torch.cuda.current_stream().cuda_stream if self.device == "cuda" else 0
        if self._lib.fusec_run(self._handle, self._src, self._out, stream, self._err, len(self._err)):
            raise FusecError(self._err.value.decode(errors="replace"))
