"""One ATen fx graph (an AOTAutograd forward or backward, any graph of ATen ops over tensor
inputs) compiled by fusec and returned as a callable over torch tensors: the exporter's
converter (convert.py) writes it as a .fir function whose inputs are the graph's placeholders,
libfusec_c.so (runtime.py) lowers it with fusec's optimisation pipeline (fusion, memory plan)
and runs it, on the GPU as one CUDA graph on torch's current stream.

The converter runs every node once on real tensors as it converts (so it knows what is static:
masks, position tables, zeros). The backend (dynamo.py) compiles a graph at its first call and
hands that call's own tensors; given fake tensors (AOTAutograd's examples), those are random
tensors of their types, integers as zeros so that they index in range.
Static tensors that the function reads become `_const.N` inputs, uploaded once.

Outputs come back as the graph returns them: a converted value (written by fusec into a
tensor allocated per call), an input returned as it is or a view of one (made from the
caller's tensor, so it aliases it as the graph's did), None, a static tensor (computed once
here, a copy per call) or, for the random-number state an SDPA kernel returns beside its result (fusec's
attention has none), an empty placeholder tensor of the traced shape."""
import contextlib
import itertools
import math
import os
import time

import torch

from .capture import Captured
from .common import ExportError
from .convert import Converter, Value, _Opaque, is_random, op_name, permuted_layout
from .runtime import Program


class _NoSourceLines:
    """The graph has no model source to point at: an unsupported op is named as it is."""

    def of(self, op):
        return "in a graph compiled by the fusec backend"


def _unfaked():
    """A context where new tensors are real even inside a fake-tensor trace."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        return unset_fake_temporarily()
    except ImportError:
        return contextlib.nullcontext()


def _checked(x):
    """x, an input fusec can compile a graph for: a tensor of static shape on the CPU or
    cuda:0 (else ExportError)."""
    if not isinstance(x, torch.Tensor):
        raise ExportError(f"unsupported graph input {type(x).__name__} (fusec compiles graphs of tensors)")
    if any(not isinstance(d, int) for d in x.shape):
        raise ExportError("unsupported dynamic shape (compile with torch.compile(..., dynamic=False))")
    if x.device.type == "cuda" and x.device.index not in (None, 0):
        raise ExportError(f"unsupported device {x.device}: fusec's runtime runs on cuda:0")
    return x


def _real_like(x):
    """A real tensor of x's dtype, shape and device: random floats, zero integers."""
    _checked(x)
    device = torch.device(x.device.type)
    # Laid out as the trace's (a saved tensor may be a transpose that the graph views as is).
    shape, stride = tuple(x.shape), tuple(x.stride())
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, stride) if n > 0)
    if x.dtype.is_floating_point:
        base = torch.randn(extent, dtype=x.dtype, device=device)
    else:
        base = torch.zeros(extent, dtype=x.dtype, device=device)
    return base.as_strided(shape, stride)


def _as_traced(x, layout):
    """x, or a copy of it laid out as `layout` ((shape, stride), the trace's) where its strides
    differ; x where the layout is unknown or overlaps itself (a stride 0 over a dim of 2 or
    more: no copy can be written into it)."""
    if layout is None:
        return x
    shape, stride = layout
    if tuple(x.shape) != tuple(shape) or x.numel() <= 1 or tuple(x.stride()) == tuple(stride):
        return x
    if any(st == 0 and n > 1 for n, st in zip(shape, stride)):
        return x
    return torch.empty_strided(shape, stride, dtype=x.dtype, device=x.device).copy_(x)


@contextlib.contextmanager
def _example_run_context(tensors):
    """Where the converter's example run (and the random example inputs) compute: torch's
    random-number state of the devices involved is restored afterwards (compiling must not
    shift the user's random stream: dropout masks, sampling), and autocast is off (the graph's
    casts are explicit ATen ops; the caller's autocast context must not recast them)."""
    cuda = sorted({t.device.index or 0 for t in tensors if isinstance(t, torch.Tensor) and t.device.type == "cuda"})
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=cuda))
        stack.enter_context(torch.autocast("cpu", enabled=False))
        if cuda:
            stack.enter_context(torch.autocast("cuda", enabled=False))
        yield


def unsupported_ops(gm):
    """The ops of `gm` the converter has no mapping for, by name, in graph order. Nodes that
    read no input (masks, tables: the converter computes them with PyTorch) do not count."""
    conv = Converter.__new__(Converter)
    missing, dynamic = [], set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" or is_random(node) or any(a in dynamic for a in node.all_input_nodes):
            dynamic.add(node)
        if node.op == "call_function" and node in dynamic and conv.handler(node) is None:
            name = op_name(node.target)
            if name not in missing:
                missing.append(name)
    return missing


_VIEWS = {"view", "_unsafe_view", "reshape", "slice", "select", "transpose", "t", "permute", "expand", "unsqueeze",
          "squeeze", "alias", "as_strided", "unflatten", "narrow", "detach", "diagonal"}


def _view_chain(node, index):
    """For an output that is views of one placeholder only (x[1:], x.t()): (the fx nodes from
    the placeholder to it, in order; the placeholder; its argument index), which _replay runs
    on the caller's tensor. Else None."""
    chain, n = [], node
    while isinstance(n, torch.fx.Node) and n not in index:
        name = op_name(n.target)
        if n.op != "call_function" or not name.startswith("aten.") or name.split(".")[1] not in _VIEWS:
            return None
        if len(n.all_input_nodes) != 1:
            return None
        chain.append(n)
        n = n.all_input_nodes[0]
    if not chain or n not in index:
        return None
    chain.reverse()
    return chain, n, index[n]


def _traced_layout(node):
    """(shape, stride) of an fx node's result as the trace laid it out (its "val" meta, or
    "tensor_meta" where the trace recorded only that: functorch in torch 1.13); (None, None)
    where neither is known."""
    meta = getattr(node, "meta", {})
    val = meta.get("val")
    if isinstance(val, torch.Tensor):
        return tuple(val.shape), tuple(val.stride())
    tm = meta.get("tensor_meta")
    if tm is not None and getattr(tm, "stride", None) is not None:
        return tuple(tm.shape), tuple(tm.stride)
    return None, None


def _contiguous_strides(shape):
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= max(d, 1)
    return tuple(reversed(strides))


def _fresh_key(device):
    """A dropout key for one call, from torch's generator on `device` (so torch.manual_seed
    makes a run's masks repeat), drawn there: no copy from the host."""
    return torch.randint(-2 ** 62, 2 ** 62, (), dtype=torch.int64, device=device)


def _allocator(device, outputs):
    """A function that makes one fresh tensor for each of `outputs` ([(shape, stride, dtype)])
    on `device`. On CUDA through the allocation Inductor's own generated code uses
    (torch._C._dynamo.guards._empty_strided_cuda: no argument parsing of keywords, a few
    microseconds less a tensor, and a forward returns hundreds), where this torch has it."""
    args = [(tuple(shape), tuple(stride), dtype) for shape, stride, dtype in outputs]
    fast = None
    if device == "cuda":
        try:
            fast = torch._C._dynamo.guards._empty_strided_cuda
        except AttributeError:
            pass
    if fast is not None:
        return lambda: [fast(shape, stride, dtype) for shape, stride, dtype in args]
    dev = torch.device(device)
    empty = torch.empty_strided
    return lambda: [empty(shape, stride, dtype=dtype, device=dev) for shape, stride, dtype in args]


_DUMPED = itertools.count()


def _dump(text):
    """$FUSEC_BACKEND_DUMP=DIR: each graph's .fir, as fusec receives it, in DIR/graph-N.fir
    (N counts the process's graphs), before it is compiled (so a graph that fails is there)."""
    folder = os.environ.get("FUSEC_BACKEND_DUMP")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"graph-{next(_DUMPED)}.fir"), "w") as f:
            f.write(text)


class CompiledGraph:
    """The callable: compiled(*tensors) -> list, as the graph returns."""

    def __init__(self, gm, example_inputs, options="", static_inputs=None, saved_from=None, guarded=False,
                 real_examples=False, example_layouts=None):
        """static_inputs: placeholder name -> the tensor it always is (a backward's saved
        tensor that its forward computed from no input, such as a causal mask): converted as
        a constant, so a mask is still seen to be causal; the argument is not read.
        saved_from: in a forward, the index of its first output that only the backward
        (fusec's too) reads: those come back as fusec wrote them, contiguous, whatever the
        trace's strides (the backward reads its arguments contiguous), and static ones are
        not cloned (the backward has them as constants).
        guarded: every call's arguments have the example's dtypes and shapes (Dynamo's guards
        say so): only the first call checks them.
        real_examples: example_inputs are the first call's own tensors (the backend compiles
        at a graph's first call), used as they are: no random copies beside them (a
        backward's would double its saved activations), and the example run sees real data.
        example_layouts: with real_examples, each input's (shape, stride) in the trace (None
        where unknown). A real tensor laid out otherwise (fusec's forward writes its saved
        activations contiguous, whatever the trace's layout) is copied into the trace's layout
        for the example run alone, as the random stand-ins were made: the graph's views were
        traced on that layout and may not apply to another. The compiled program reads its
        arguments by value, whatever their strides.
        Either way the example run leaves torch's random-number state as it found it, and
        computes as the graph says whatever autocast context the caller is in."""
        start = time.perf_counter()
        self.guarded, self.calls = guarded, 0
        self.host_seconds = 0.0  # the calls' time on the CPU after the first (what the step's launch waits for)
        static_inputs = static_inputs or {}
        self.static_outputs = {}  # output node name -> its tensor, for the backward's static_inputs
        self.shared_outputs = 0  # program outputs that are an earlier one's tensor (_shared_outputs)
        if real_examples:
            reals = [_as_traced(_checked(x), layout) for x, layout in
                     zip(example_inputs, example_layouts or [None] * len(example_inputs))]
        else:
            with _unfaked(), _example_run_context(example_inputs):
                reals = [_real_like(x) for x in example_inputs]
        devices = {r.device.type for r in reals}
        if len(devices) > 1:
            raise ExportError("unsupported graph with inputs on both the CPU and a GPU")
        self.device = devices.pop() if devices else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ExportError(f"unsupported device {self.device}")
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(reals):
            raise ExportError("internal: the graph's placeholders and its example inputs differ in number")
        names = [f"in{i}" for i in range(len(reals))]
        kinds = []
        for n, r, name in zip(placeholders, reals, names):
            known = static_inputs.get(n.name)
            if isinstance(known, torch.Tensor) and known.shape == r.shape and known.dtype == r.dtype:
                kinds.append((n, known.to(r.device), "constant", name))
            else:
                kinds.append((n, r, "arg", name))
        captured = Captured(gm, kinds, "aot")
        conv = Converter(captured, _NoSourceLines())
        conv.train_dropout = conv.dropout_masks = True  # native_dropout: fusec's, keyed per call
        conv.release_reals = True  # nothing verifies against the recorded values afterwards
        with _unfaked(), torch.no_grad(), _example_run_context(reals):
            result = conv.convert_graph()
            self.tuple_output = isinstance(result, (list, tuple))
            flat = list(result) if self.tuple_output else [result]
            index = {n: i for i, n in enumerate(placeholders)}
            self.plan, values = [], []
            self._layouts = {}  # program output index -> (shape, stride, order) of a result laid out as the trace's
            for k, a in enumerate(flat):
                self.plan.append(self._place(a, conv, index, values, saved_from is not None and k >= saved_from))
                if self.plan[-1][0] == "static":
                    self.static_outputs[a.name] = self.plan[-1][1]
            if not values:  # nothing for fusec to compute: every output is an input, a constant or None
                self.program, self.consts = None, {}
            else:
                body, tensors, self.ops = conv.finish(values)
                text = "func @graph {\n" + body + "\n}\n"
                self.fir = text
                _dump(text)
                # The example run's values go before fusec allocates its own memory, and
                # PyTorch's cache hands their blocks back to the driver: else fusec's arena
                # is allocated beside a cache as large as a step's activations.
                for held in (conv.real, conv.realv, conv.placeholders, kinds, reals):
                    held.clear()
                if self.device == "cuda":
                    torch.cuda.empty_cache()
                self.program = Program(text, self.device, options)
                self.consts = {name: t.to(self.device).contiguous() for name, t in tensors.items()}
                # What feeds each source, decided here once: an argument's index, a constant,
                # or (None) a fresh dropout key each call.
                # An argument laid out as a permutation of its dims is read where it lies
                # (convert.py source_orders): fusec's input is it permuted to that order.
                self._feeds = [None if name == "dropout_key" else self.consts[name] if name in self.consts
                               else (int(name[2:]), conv.source_orders.get(name)) for name, _, _ in self.program.sources]
                # One tensor an output, made each call: the caller keeps them. (Views of one
                # block per call cost more: splitting it, and AOTAutograd detaching each view.)
                # A result the trace lays out as a permutation of its dims is made so, and
                # fusec writes its memory's order (_place).
                # A saved output that fusec found to be an earlier saved one (cse: an activation
                # the trace returns once for each GEMM that reads it) is that one's tensor:
                # written once, nothing copied out.
                share = self._shared_outputs(saved_from)
                kept = [k for k in range(len(self.program.outputs)) if k not in share]
                allocate = _allocator(self.device, [
                    self._layouts[k][:2] + (dtype,) if k in self._layouts else (shape, _contiguous_strides(shape), dtype)
                    for k, (dtype, shape) in enumerate(self.program.outputs) if k not in share])
                if share:
                    slot = {k: i for i, k in enumerate(kept)}
                    made_for = [slot[share.get(k, k)] for k in range(len(self.program.outputs))]
                    self._allocate = lambda: [made[i] for made in (allocate(),) for i in made_for]
                else:
                    self._allocate = allocate
                self.shared_outputs = len(share)
                # The placeholder tensors of saved positions (SDPA's random-number state,
                # which fusec's attention does not have) are made once.
                self._empties = {k: torch.empty(p[1], dtype=p[2], device=self.device)
                                 for k, p in enumerate(self.plan) if p[0] == "empty" and saved_from is not None
                                 and k >= saved_from}
        self.compile_seconds = time.perf_counter() - start

    def _shared_outputs(self, saved_from):
        """{program output k: the earlier output j it is the same value as (fusec_output_alias)}
        where both are read by the backward only, contiguous: one tensor serves both. (A tensor
        the caller sees stays its own: it may write to one of two outputs.)"""
        if saved_from is None:
            return {}
        readers = {}  # program output -> the plan positions that return it
        for pos, p in enumerate(self.plan):
            if p[0] == "fusec":
                readers.setdefault(p[1], []).append(pos)

        def saved_only(k):
            return k not in self._layouts and all(pos >= saved_from and self.plan[pos][2] is None for pos in readers.get(k, ()))
        return {k: j for k, j in enumerate(self.program.aliases) if j >= 0 and saved_only(k) and saved_only(j)}

    def _place(self, a, conv, index, values, saved=False):
        if a is None:
            return ("none",)
        if not isinstance(a, torch.fx.Node):
            raise ExportError(f"unsupported graph output {type(a).__name__}")
        if a in index:
            return ("input", index[a])
        chain = _view_chain(a, index)
        if chain is not None:  # x[1:], x.t(): returned as a view of the caller's input, not a copy
            return ("view", chain)
        if a in conv.static and isinstance(conv.static[a], torch.Tensor):  # positions, masks: computed once here
            return ("static", conv.static[a].clone(), saved)
        v = conv.values.get(a)
        if isinstance(v, Value):
            shape, stride = _traced_layout(a)
            # A result the trace lays out as a permutation of its dims (a transpose returned
            # or saved as it is: autocast's t(cast(w)) for the backward) comes in that layout:
            # fusec writes the permuted value, whose memory order it is, into a tensor made
            # with the trace's strides. Saved, the backward reads it where it lies; a weight's
            # transpose is then the cast the GEMM already reads, not a second copy.
            order = permuted_layout(v.shape, stride) if shape == v.shape else None
            if order is not None:
                key = (v.name, order)
                if key not in conv.permuted_outputs:
                    conv.permuted_outputs[key] = conv.permute(v, order)
                v = conv.permuted_outputs[key]
            names = [u.name for u in values]
            if v.name not in names:
                values.append(v)
                names.append(v.name)
            if order is not None:
                self._layouts[names.index(v.name)] = (shape, stride, order)
                return ("fusec", names.index(v.name), None)
            # Any other layout (expanded, with gaps): fusec writes the value contiguous, and
            # the caller gets the trace's layout, a copy (saved ones stay contiguous: the
            # backward reads them so).
            if not saved and stride is not None and math.prod(shape) > 1 and 0 not in stride and stride != _contiguous_strides(shape):
                return ("fusec", names.index(v.name), stride)
            return ("fusec", names.index(v.name), None)
        if isinstance(v, _Opaque):
            return ("empty", tuple(v.real.shape), v.real.dtype)
        raise ExportError(f"unsupported graph output {op_name(a.target)}")

    @staticmethod
    def _replay(view, args):
        chain, placeholder, i = view
        values = {placeholder: args[i]}
        for node in chain:
            call_args = torch.fx.node.map_arg(node.args, lambda n: values[n])
            call_kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
            values[node] = node.target(*call_args, **call_kwargs)
        return values[chain[-1]]

    def __call__(self, *args):
        start, warm = time.perf_counter(), self.calls > 0
        try:
            return self._call(args)
        finally:
            if warm:  # the first call also tunes GEMMs and captures nothing yet: not counted
                self.host_seconds += time.perf_counter() - start

    def _plan_guarded_sources(self, args):
        """For calls whose arguments Dynamo guards (dtype, shape and strides as the first
        call's): each source as an argument read in place, an argument that needs a contiguous
        copy, a constant's address, or a fresh dropout key; constants' addresses taken once."""
        self._guarded_feeds = []
        for feed in self._feeds:
            if isinstance(feed, tuple):
                i, order = feed
                t = args[i] if order is None else args[i].permute(order)
                self._guarded_feeds.append(("arg", i) if t.is_contiguous() else ("copy", feed))
            elif feed is None:
                self._guarded_feeds.append(("key", None))
            else:
                self._guarded_feeds.append(("const", feed.data_ptr()))
        self._all_in_place = [f[1] for f in self._guarded_feeds] if all(f[0] == "arg" for f in self._guarded_feeds) else None

    def _guarded_sources(self, args):
        """(the sources' addresses for a guarded call, as _plan_guarded_sources decided; the
        tensors made for them: contiguous copies and dropout keys)."""
        if self._all_in_place is not None:
            return [args[i].data_ptr() for i in self._all_in_place], ()
        ptrs, keep = [], []
        for kind, x in self._guarded_feeds:
            if kind == "arg":
                ptrs.append(args[x].data_ptr())
            elif kind == "const":
                ptrs.append(x)
            else:
                if kind == "copy":
                    i, order = x
                    t = (args[i] if order is None else args[i].permute(order)).contiguous()
                else:
                    t = _fresh_key(self.device)
                keep.append(t)
                ptrs.append(t.data_ptr())
        return ptrs, keep

    def _call(self, args):
        outs = []
        if self.program is not None:
            outs = self._allocate()
            if self.guarded and self.calls > 0:
                ptrs, keep = self._guarded_sources(args)  # keep: copies the run reads, alive until it is enqueued
                self.program.run_pointers(ptrs, [t.data_ptr() for t in outs])
                del keep
            else:
                sources = []
                for feed in self._feeds:
                    if isinstance(feed, tuple):
                        t = args[feed[0]] if feed[1] is None else args[feed[0]].permute(feed[1])
                    else:
                        t = feed if feed is not None else _fresh_key(self.device)
                    sources.append(t if t.is_contiguous() else t.contiguous())
                self.program.check(sources, [t.permute(self._layouts[k][2]) if k in self._layouts else t
                                             for k, t in enumerate(outs)])
                if self.guarded:  # what each later call's sources are, decided from this one's
                    self._plan_guarded_sources(args)
                self.program.run_pointers([t.data_ptr() for t in sources], [t.data_ptr() for t in outs])
            self.calls += 1
        result = []
        for k, p in enumerate(self.plan):
            kind = p[0]
            if kind == "fusec":
                t = outs[p[1]]
                if p[2] is not None:
                    t = torch.empty_strided(t.shape, p[2], dtype=t.dtype, device=t.device).copy_(t)
                result.append(t)
            elif kind == "input":
                result.append(args[p[1]])
            elif kind == "none":
                result.append(None)
            elif kind == "static":
                result.append(p[1] if p[2] else p[1].clone())  # the caller's own: it may write to it
            elif kind == "view":  # a view of an input, made from the input itself (aliasing kept)
                result.append(self._replay(p[1], args))
            else:
                e = self._empties.get(k) if self.program is not None else None
                result.append(e if e is not None else torch.empty(p[1], dtype=p[2], device=self.device))
        return result if self.tuple_output else result[0]
