"""fusec as a torch.compile backend:

    import fusec.dynamo                       # registers backend="fusec"
    model = torch.compile(model, backend="fusec")
    ...                                       # the user's own loop, loss and optimizer

Dynamo captures each graph of the model (a graph break gives several), AOTAutograd traces its
forward and backward to ATen and partitions them, and each of the two is compiled by fusec
(graph_compile.py: the exporter's converter, fusec's pipeline, one CUDA graph a call) and
runs on torch's tensors and current stream. The backward ops that fusec has no mapping for
(layer norm's, softmax's, the activations') are decomposed into primitive ATen ops first;
SDPA and its backward map to fusec's attention and attention_backward.

A graph with an op fusec cannot map runs in PyTorch, its forward and its backward both (the
two share saved tensors, so they are compiled together or not at all), after a one-line
warning naming the op; backend(strict=True) raises FusecBackendError instead:

    torch.compile(model, backend=fusec.dynamo.backend(strict=True))

Needs torch >= 2.0 (Dynamo). aot_backend() gives the same compilers to functorch's
aot_module, which torch 1.13 has: how the CPU tests check the backend without Dynamo."""
import functools
import importlib.util
import os
import traceback
import warnings
import weakref

import torch

from .common import OneLineError
from .graph_compile import CompiledGraph, _checked, unsupported_ops


class FusecBackendError(OneLineError):
    """A graph that the fusec backend refuses (strict=True), or that it failed to compile."""


def _decompositions():
    """The backward ops (and layer norm, whose backward reads its mean and rstd) as primitive
    ATen ops, which the converter maps; everything else stays as traced."""
    from torch._decomp import get_decompositions
    aten = torch.ops.aten
    names = ["native_layer_norm", "native_layer_norm_backward", "_softmax_backward_data",
             "_log_softmax_backward_data", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
             "threshold_backward", "slice_backward", "select_backward", "nll_loss_forward", "nll_loss_backward",
             "rsub", "native_dropout_backward", "_unsafe_view", "t"]
    return get_decompositions([getattr(aten, n) for n in names if hasattr(aten, n)])


try:  # torch >= 2.0
    from torch._functorch.aot_autograd import aot_module as _aot_module, make_boxed_func
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition
except ImportError:  # torch 1.13: functorch
    from functorch.compile import aot_module as _aot_module, default_partition, make_boxed_func
    from functorch.compile import min_cut_rematerialization_partition


def _partitioner():
    """AOTAutograd's split of the joint graph: "min-cut" (Inductor's, needs networkx)
    recomputes cheap values in the backward instead of saving them; "default" saves every
    forward value the backward reads. $FUSEC_BACKEND_PARTITION picks; min-cut where networkx
    is installed: measured faster at both bench shapes (small b64, medium b16), with a shorter
    first call and less memory (bench/RESULTS.md)."""
    name = os.environ.get("FUSEC_BACKEND_PARTITION") or \
        ("min-cut" if importlib.util.find_spec("networkx") is not None else "default")
    if name == "default":
        return default_partition
    if name == "min-cut":
        return min_cut_rematerialization_partition
    raise FusecBackendError(f"FUSEC_BACKEND_PARTITION must be default or min-cut, got '{name}'")


# Graphs compiled by fusec and graphs left to PyTorch, since import (what the tests check); a
# graph fusec compiles counts at its first call, when it is compiled.
STATS = {"fusec": 0, "pytorch": 0}
# The CompiledGraphs alive (for reports: their programs' fusec_stats).
COMPILED = weakref.WeakSet()


class _Pair:
    """One AOTAutograd compilation: its forward and backward, compiled by fusec or both left
    to PyTorch (decided once, from both graphs' ops, when they are partitioned)."""

    def __init__(self, strict, options, guarded=False):
        self.strict, self.options, self.guarded = strict, options, guarded
        self.fallback = None  # None: undecided; else the reason both run in PyTorch
        self.compiled = []
        self.partitioned = False  # a training pair (partition screened both graphs' ops), not an inference graph
        self.saved_from = None  # the forward's first output that is saved for the backward

    def partition(self, joint, joint_inputs, **kw):
        fw, bw = _partitioner()(joint, joint_inputs, **kw)
        self.saved_from = kw.get("num_fwd_outputs")
        if self.saved_from is None:  # torch 1.13 passes no count: its partitioners read the joint's spec
            spec = getattr(joint, "_out_spec", None)
            self.saved_from = spec.children_specs[0].num_leaves if spec is not None else None
        self.partitioned = True
        missing = unsupported_ops(fw)
        missing += [op for op in unsupported_ops(bw) if op not in missing]
        if missing:
            self.refuse(_missing(missing))
        return fw, bw

    def refuse(self, reason):
        if self.strict:
            raise FusecBackendError(f"fusec backend (strict): {reason}")
        self.fallback = reason
        warnings.warn(f"fusec backend: {reason}; this graph runs in PyTorch", stacklevel=2)

    def compiler(self, gm, example_inputs, forward):
        """AOTAutograd's compiler of the forward (forward=True, also an inference graph's) and
        of the backward. What the graph and its fake examples tell is judged here (an inference
        graph's ops, which no partition screened; tensors of static shapes); the graph itself
        compiles at its first call, from that call's own tensors (_FirstCall)."""
        if self.fallback is None:
            try:
                missing = [] if self.partitioned else unsupported_ops(gm)
                if missing:
                    self.refuse(_missing(missing))
                else:
                    for x in example_inputs:
                        _checked(x)
            except FusecBackendError:
                raise
            except Exception as e:
                self.fail(e)
        if self.fallback is not None:
            STATS["pytorch"] += 1
            return make_boxed_func(gm.forward)
        layouts = [(tuple(x.shape), tuple(x.stride())) if isinstance(x, torch.Tensor) else None for x in example_inputs]
        return make_boxed_func(_FirstCall(self, gm, forward, layouts))

    def fail(self, e):
        """A graph fusec could not compile: one line, raised where the pair cannot run in
        PyTorch instead (strict, or its forward already fusec's), else the refusal's warning.
        $FUSEC_BACKEND_DEBUG=1 prints the traceback before it (stderr)."""
        if os.environ.get("FUSEC_BACKEND_DEBUG") == "1":
            traceback.print_exception(type(e), e, e.__traceback__)
        line = str(e) if isinstance(e, OneLineError) else f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        if self.compiled or self.strict:  # the forward is fusec's: its backward cannot be PyTorch's
            raise FusecBackendError(f"fusec backend: {line}") from None
        self.refuse(line)

    def build(self, gm, args, forward, layouts):
        """The graph's callable, compiled by fusec from its first call's tensors `args` (their
        (shape, stride) in the trace: `layouts`), or gm.forward where this pair runs in
        PyTorch (a refusal, or a failure to compile the forward when not strict)."""
        if self.fallback is None:
            try:
                # The backward's saved tensors that its forward computed from no input (masks)
                # are constants to it as well.
                known = {k: v for c in self.compiled for k, v in c.static_outputs.items()}
                compiled = CompiledGraph(gm, args, self.options, known, self.saved_from if forward else None,
                                         self.guarded, real_examples=True, example_layouts=layouts)
                self.compiled.append(compiled)
                COMPILED.add(compiled)
                STATS["fusec"] += 1
                return compiled
            except Exception as e:  # a mapping's refusal, or anything else: one line either way
                self.fail(e)
        STATS["pytorch"] += 1
        return gm.forward


def _missing(ops):
    return f"fusec has no mapping for {ops[0]}" + (f" (and {len(ops) - 1} more)" if len(ops) > 1 else "")


def _any_fake(args):
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:
        return False
    return any(isinstance(a, FakeTensor) for a in args)


class _FirstCall:
    """A graph compiled at its first call, from that call's tensors. AOTAutograd hands the
    compilers fake tensors; compiling from them meant an example run on random stand-ins,
    which for a backward doubled its saved activations (the real ones, held by autograd, and
    the stand-ins) at the peak of the first step. Here the example run reads the real ones.
    A failure is kept: later calls raise it again rather than compile again. (Slots: no
    __dict__ for make_boxed_func's wraps to copy, which would keep the graph alive.)"""
    __slots__ = ("pair", "gm", "forward", "layouts", "run")

    def __init__(self, pair, gm, forward, layouts):
        self.pair, self.gm, self.forward, self.layouts, self.run = pair, gm, forward, layouts, None

    def __call__(self, *args):
        if self.run is None:
            if _any_fake(args):  # a trace through the graph, not a run: nothing to compile from
                return self.gm.forward(*args)
            try:
                run = self.pair.build(self.gm, args, self.forward, self.layouts)
            except FusecBackendError as e:
                error = e

                def again(*_):
                    raise error
                self.run, self.pair, self.gm, self.layouts = again, None, None, None
                raise
            self.run, self.pair, self.gm, self.layouts = run, None, None, None  # what runs holds what it needs
        return self.run(*args)


def backend(gm=None, example_inputs=None, *, strict=False, options=""):
    """The torch.compile backend. backend(strict=True) (no graph) returns a backend that
    refuses unmappable graphs instead of running them in PyTorch; `options` go to
    fusec_compile (api/c_api.h: passes=..., cuda_graph=0, dump=FILE); $FUSEC_BACKEND_OPTIONS
    gives them where none are passed."""
    if gm is None:
        return functools.partial(backend, strict=strict, options=options)
    options = options or os.environ.get("FUSEC_BACKEND_OPTIONS", "")
    from torch._dynamo.backends.common import aot_autograd
    pair = _Pair(strict, options, guarded=True)  # Dynamo guards each graph's argument types
    return aot_autograd(fw_compiler=functools.partial(pair.compiler, forward=True),
                        bw_compiler=functools.partial(pair.compiler, forward=False), partition_fn=pair.partition,
                        decompositions=_decompositions())(gm, example_inputs)


def aot_module(module, strict=False, options="", guarded=False):
    """`module` with its forward and backward compiled by fusec through functorch's aot_module
    (torch 1.13 and later; the tests' way where Dynamo is missing). guarded=True: the caller
    vouches, as Dynamo's guards do, that every call's arguments have the first call's dtypes,
    shapes and strides (the calls after the first then skip the per-tensor checks)."""
    pair = _Pair(strict, options, guarded)
    return _aot_module(module, fw_compiler=functools.partial(pair.compiler, forward=True),
                       bw_compiler=functools.partial(pair.compiler, forward=False), partition_fn=pair.partition,
                       decompositions=_decompositions())


def _register():
    try:
        from torch._dynamo import register_backend
    except ImportError:  # torch < 2.0: no Dynamo (aot_module still works)
        return
    try:
        register_backend(name="fusec")(backend)
    except Exception:  # already registered (the module imported twice under two names)
        pass


_register()
