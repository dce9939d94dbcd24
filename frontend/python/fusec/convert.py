"""Converts a captured ATen fx graph (capture.py) to a fusec @forward: ids -> logits.

Every fx node is run on its real example values as it is converted, so the converter knows
each node's real result. Nodes that depend on neither the ids nor the weights (RoPE tables,
causal masks, position ranges) are static: computed here first, and given a value in the
.fir only where a converted op reads them (Converter.materialize): a splat becomes a
`constant`; a persistent buffer (one that state_dict() holds) is a param with role buffer
under its state_dict name, and what is computed from those and from arange by ops the
converter maps is computed again in the .fir; anything else becomes a `_const.N` buffer.

weights.safetensors (Converter.finish) then holds what the module's state_dict() holds (the
parameters, a tied weight once, and the persistent buffers, as f32) plus the `_const.N` that
the function still reads: fusec binds every param of the .fir from that file, and its IR has
no tensor-valued constant, so a table computed from a non-persistent buffer (RoPE's cos and
sin) can only be stored there. A mask that the attention composite absorbed is not.

Each emitted op is kept as a record (Def), so patterns can be matched over what was emitted
(attention.py) and what ends up unused is dropped when the function is printed."""
import math

import torch

from . import attention
from .capture import ExportError

_FIR_DTYPES = {torch.float32: "f32", torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
               torch.bfloat16: "bf16"}


def fir_type(dtype, shape):
    if dtype not in _FIR_DTYPES:
        raise ExportError(f"dtype {dtype} has no fusec equivalent")
    return f"{_FIR_DTYPES[dtype]}[{','.join(str(int(d)) for d in shape)}]"


def permuted_layout(shape, stride):
    """For a tensor of `shape` laid out with `stride` densely in another order of its dims (a
    transpose), that order, outermost first: the tensor permuted by it is contiguous. None for
    a contiguous layout or any other (expanded, overlapping, with gaps)."""
    shape, stride = tuple(shape), tuple(stride)
    if len(shape) < 2 or any(n == 0 for n in shape):
        return None
    order = tuple(sorted(range(len(shape)), key=lambda d: (-stride[d], d)))
    expected = 1
    for d in reversed(order):
        if shape[d] != 1 and stride[d] != expected:
            return None
        expected *= shape[d]
    moved = [d for d in order if shape[d] != 1] != [d for d in range(len(shape)) if shape[d] != 1]
    return order if moved else None


def inverse_permutation(order):
    inv = [0] * len(order)
    for i, d in enumerate(order):
        inv[d] = i
    return inv


def number(x):
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "nan"
    return repr(x)



class _Empty:
    """A tensor with a zero-size dimension (an empty slice): fusec has none, so it is no value;
    a concatenation leaves it out, and any other use is refused with one line."""

    def __init__(self, shape):
        self.shape = shape

class _Shaped:
    """A result's shape and dtype where no tensor is at hand."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


class _Opaque:
    """A result with no fusec value (the RNG state an SDPA kernel returns): an error where an op
    reads it; the backend returns a placeholder tensor where it is a graph output."""

    def __init__(self, message, real):
        self.message, self.real = message, real


class Value:
    """A fusec value: its IR name, shape and dtype."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(int(d) for d in shape), dtype

    @property
    def type(self):
        return fir_type(self.dtype, self.shape)


class Def:
    """One emitted op: its results, operands, attribute text and the attributes patterns read
    (`meta`: a permute's perm, a constant's value, a softmax's axis)."""

    def __init__(self, op, results, operands, attrs, meta):
        self.op, self.results, self.operands, self.attrs, self.meta = op, results, operands, attrs, meta

    def line(self):
        names = ", ".join(f"%{r.name}" for r in self.results)
        ops = ", ".join(f"%{o.name}" for o in self.operands)
        types = ", ".join(r.type for r in self.results)
        return f"  {names} = {self.op}({ops}){' {' + self.attrs + '}' if self.attrs else ''} : {types}"


def op_name(target):
    """"aten.mm.default" for an ATen overload, "getitem" for a Python function."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


class Converter:
    def __init__(self, captured, sources):
        self.gm, self.sources = captured.gm, sources
        self.placeholders = {node: (leaf, kind, name) for node, leaf, kind, name in captured.placeholders}
        self.defs, self.order = {}, []  # value name -> its Def; Defs in emission order
        self.values, self.static = {}, {}  # fx node -> fusec value; fx node -> real tensor (export-time)
        self.dynamic = set()  # names of values that depend on the ids or a weight
        self.realv = {}  # value name -> its real tensor, for the values of converted nodes
        # The torch.compile backend: real values are dropped after their last reader (_releaser);
        # keep_reals: the nodes whose values stay (and are all realv holds), None: all stay.
        self.release_reals, self.keep_reals = False, None
        self.tensors = {}  # the parameters and persistent buffers, by name: weights.safetensors holds them all
        self.buffers = {}  # fx node of a persistent buffer -> its param
        self.consts = {}  # (shape, f32 bytes) -> a `_const` param (one per distinct tensor)
        self.replayable = {}  # fx node -> whether materialize computes it in the .fir
        self.counter = 0
        # A train-mode export (export.py): dropout becomes fusec's dropout op, keyed by the
        # step's `dropout_key` input; the recorded real values take each dropout as the
        # identity, so they are eval mode's (what the export is checked against).
        self.train_dropout = False
        # The torch.compile backend's forward (graph_compile.py): native_dropout also returns
        # its mask (the backward's native_dropout_backward reads it), drawn again from the key.
        self.dropout_masks = False
        self.key, self.streams = None, 0
        # input name -> the order of its dims in memory, for an argument laid out as a
        # permutation of them (convert_graph; graph_compile passes such a tensor as it lies)
        self.source_orders = {}
        # (value name, order) -> the value permuted to that order: a result returned laid out so
        self.permuted_outputs = {}

    # ---- emission
    def fresh(self, hint):
        self.counter += 1
        return f"{hint}.{self.counter}"

    def emit_multi(self, op, operands, types, attrs="", hint="v", meta=None, name=None):
        results = [Value(name or self.fresh(hint), shape, dtype) for shape, dtype in types]
        d = Def(op, results, list(operands), attrs, meta or {})
        self.order.append(d)
        for r in results:
            self.defs[r.name] = d
        if any(o.name in self.dynamic for o in operands):
            self.dynamic.update(r.name for r in results)
        return results

    def emit(self, op, operands, shape, dtype, attrs="", hint="v", meta=None):
        return self.emit_multi(op, operands, [(shape, dtype)], attrs, hint, meta)[0]

    def source(self, op, shape, dtype, attrs, hint, dynamic, name=None, meta=None):
        """An input or param; `dynamic`: it varies with the ids or the training."""
        v = self.emit_multi(op, [], [(shape, dtype)], attrs, hint, meta=meta, name=name)[0]
        if dynamic:
            self.dynamic.add(v.name)
        return v

    def constant(self, value, shape, dtype):
        return self.emit("constant", [], shape, dtype, f"value = {number(value)}", "c", {"value": float(value)})

    def scaled(self, v, c):
        """v * c for a Python number c (v itself for 1)."""
        return v if c == 1 else self.emit("mul", [v, self.constant(c, v.shape, v.dtype)], v.shape, v.dtype)

    def permute(self, v, perm):
        return self.emit("permute", [v], [v.shape[p] for p in perm], v.dtype, f"perm = {list(perm)}",
                         meta={"perm": list(perm)})

    def reshape(self, v, shape):
        return v if tuple(shape) == v.shape else self.emit("reshape", [v], shape, v.dtype)

    def typed(self, v, dtype):
        """An f32 param (fusec's params are f32) as `dtype`: a bool mask, int positions."""
        if dtype == torch.bool:
            return self.emit("ne", [v, self.constant(0, v.shape, torch.float32)], v.shape, torch.bool)
        return v if dtype == torch.float32 else self.emit("cast", [v], v.shape, dtype)

    def materialize(self, node):
        """The value of a static node (module docstring): a splat is a constant; a persistent
        buffer its param; what can be computed from those (replayable) is computed; anything
        else is a `_const` param, one per distinct tensor."""
        t = self.static[node].detach()
        if _splat(t):
            return self.constant(t.reshape(-1)[0].item(), t.shape, t.dtype)
        if node in self.buffers:
            return self.typed(self.buffers[node], t.dtype)
        if self.is_replayable(node):
            try:
                v = self.convert(node, t)
            except ExportError:  # a variant the op's mapping refuses: stored instead (what it emitted is unused)
                v = None
            if isinstance(v, Value) and v.shape == tuple(t.shape) and v.dtype == t.dtype:
                return v
        stored = t.to(torch.float32).cpu().contiguous()
        key = (tuple(stored.shape), stored.numpy().tobytes())
        if key not in self.consts:  # named when the function is printed (finish): only the used ones are
            self.consts[key] = self.source("param", t.shape, torch.float32, "", "buf", False, meta={"const": stored})
        return self.typed(self.consts[key], t.dtype)

    def is_replayable(self, node):
        """Whether a static node can be computed in the .fir from splats, persistent buffers
        and ops the converter maps, with no `_const` on the way."""
        if node not in self.replayable:
            t = self.static.get(node)
            ok = isinstance(t, torch.Tensor)
            if ok and not _splat(t) and node not in self.buffers:
                ok = node.op == "call_function" and self.handler(node) is not None and all(
                    a in self.static and self.is_replayable(a) for a in node.all_input_nodes)
            self.replayable[node] = ok
        return self.replayable[node]

    def value(self, a):
        """The fusec value of an fx argument (materializing export-time values)."""
        if isinstance(a, torch.fx.Node):
            if a in self.values:
                v = self.values[a]
                if isinstance(v, _Opaque):
                    raise ExportError(v.message)
                if isinstance(v, _Empty):
                    raise ExportError(f"unsupported use of an empty tensor {list(v.shape)} (a slice with nothing in it, "
                                      "which fusec does not represent; only a concatenation may take one)")
                return v
            if a in self.static and isinstance(self.static[a], torch.Tensor):
                v = self.materialize(a)
                self.values[a] = v
                return v
        raise ExportError(f"internal: no value for {a}")

    def like(self, v, shape):
        """`v` broadcast to `shape` (numpy rules), as the binary ops need equal types."""
        if v.shape == tuple(shape):
            return v
        lead = len(shape) - len(v.shape)
        r = v if lead == 0 else self.emit("reshape", [v], (1,) * lead + v.shape, v.dtype)
        return self.emit("broadcast", [r], shape, v.dtype)

    def operand(self, a, shape, dtype):
        """A tensor operand or a Python scalar, as a value of `shape` and `dtype`."""
        if isinstance(a, (int, float, bool)):
            return self.constant(a, shape, dtype)
        v = self.value(a)
        if v.dtype != dtype:
            v = self.emit("cast", [v], v.shape, dtype)
        return self.like(v, shape)

    # ---- the graph
    def run(self):
        """Converts the graph of a model (forward(ids) -> logits); returns the logits value."""
        out = self.convert_graph()
        out = out[0] if isinstance(out, (list, tuple)) else out
        logits = self.value(out)
        if logits.dtype != torch.float32:
            logits = self.emit("cast", [logits], logits.shape, torch.float32)
        return logits

    def convert_graph(self):
        """Converts every node that depends on an input; returns the output node's argument
        (fx nodes, as the graph returns them). Placeholders of kind "arg" (graph_compile.py)
        become inputs under their own names."""
        results = self.real = {}  # every node's real value on the example (while it is read: release_reals)
        by_id = {}  # id(parameter tensor) -> its fusec value: a tied weight reached twice is one param
        release = self._releaser(results) if self.release_reals else (lambda node: None)
        for node in self.gm.graph.nodes:
            release(node)
            if node.op == "get_attr":  # a tensor the trace kept as a constant
                t = getattr(self.gm, node.target)
                results[node] = t
                if id(t) in by_id:  # a parameter reached another way (a tied weight)
                    self.values[node] = by_id[id(t)]
                else:
                    self.static[node] = t
                continue
            if node.op == "placeholder":
                leaf, kind, name = self.placeholders[node]
                results[node] = leaf
                if kind == "arg":
                    # A tensor laid out as a permutation of its dims (a saved transpose) is
                    # read where it lies: the input is its memory's order, then a permute.
                    order = permuted_layout(leaf.shape, leaf.stride())
                    shape = tuple(leaf.shape) if order is None else tuple(leaf.shape[d] for d in order)
                    v = self.source("input", shape, leaf.dtype, f'name = "{name}"', "in", True, name=name)
                    if order is not None:
                        self.source_orders[name] = order
                        v = self.permute(v, inverse_permutation(order))
                    self.values[node] = v
                elif kind == "input":
                    # the input keeps its name: fusec binds inputs by it
                    self.values[node] = self.source("input", leaf.shape, leaf.dtype, 'name = "ids", role = "ids"', "ids",
                                                    True, name="ids")
                elif kind == "param" and id(leaf) in by_id:
                    self.values[node] = by_id[id(leaf)]
                elif kind == "param":
                    self.tensors[name] = leaf.detach().to(torch.float32)
                    v = self.source("param", leaf.shape, torch.float32, f'name = "{name}"', "w", True)
                    self.values[node] = by_id[id(leaf)] = v
                else:  # a buffer or a constant: known now
                    self.static[node] = leaf
                    if kind == "buffer":  # in state_dict(): a param under its name, used or not
                        self.tensors[name] = leaf.detach().to(torch.float32)
                        self.buffers[node] = self.source("param", leaf.shape, torch.float32,
                                                         f'name = "{name}", role = "buffer"', "buf", False)
                continue
            if node.op == "output":
                return node.args[0]
            args = torch.fx.node.map_arg(node.args, lambda n: results[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: results[n])
            if node.op != "call_function":
                raise ExportError(f"internal: fx node {node.op} {node.target}")
            out = self._eval_dropout(node, args) if self.train_dropout and _is_dropout(node) else \
                node.target(*args, **kwargs)
            results[node] = out
            # ones_like(ids) and the like read only their operand's shape: as static as a constant
            # (a causal mask built from them is still the static causal mask).
            # A random op is never static: computed once here, its draw would repeat every step.
            dynamic = is_random(node) or (op_name(node.target).split(".")[1:2] not in _SHAPE_ONLY and any(
                isinstance(a, torch.fx.Node) and a not in self.static for a in node.all_input_nodes))
            if not dynamic:
                self.static[node] = out
                continue
            if not node.users:  # dead in the trace (layer norm's mean and rstd): nothing to convert
                continue
            self.convert(node, out)
        raise ExportError("internal: the graph has no output")

    def _releaser(self, results):
        """A function called with each node before it is run: drops the real values that the
        node before it read last. So the example run holds what eager would, not every value
        of the graph at once (a training step's activations and gradients all together, which
        did not fit at small b64). Kept: constants, static values, placeholders, and the
        operands of batched matmuls (attention's recognition checks its hypothesis on Q, K
        and V at the second one: attention.py); realv holds those only."""
        nodes = list(self.gm.graph.nodes)
        last = {}
        for i, node in enumerate(nodes):
            for a in node.all_input_nodes:
                last[a] = i
        self.keep_reals = {a for node in nodes if node.op == "call_function"
                           and op_name(node.target) in ("aten.bmm.default", "aten.matmul.default")
                           for a in node.all_input_nodes}
        position = {node: i for i, node in enumerate(nodes)}
        state = {"prev": None}

        def release(node):
            prev = state["prev"]
            state["prev"] = node
            if prev is None:
                return
            for a in prev.all_input_nodes:
                if last[a] == position[prev] and a not in self.keep_reals and a not in self.static and \
                        a.op not in ("placeholder", "get_attr"):
                    results.pop(a, None)
        return release

    def handler(self, node):
        """The op_ method that converts `node`, or None."""
        op = op_name(node.target)
        return getattr(self, "op_" + (op.split(".")[1] if op.startswith(("aten.", "prims.")) else op), None)

    def convert(self, node, out):
        op = op_name(node.target)
        try:
            fn = self.handler(node)
            if fn is None:
                raise ExportError(f"unsupported op {op}")
            v = fn(node, out, *node.args, **node.kwargs)
        except ExportError as e:
            msg = str(e)
            if msg.startswith("unsupported"):
                msg += f" ({self.sources.of(op)})"
            raise ExportError(msg) from None
        self.values[node] = v
        if self.keep_reals is not None and node not in self.keep_reals:
            return v
        for value, real in (zip(v, out) if isinstance(v, list) else [(v, out)]):
            if isinstance(value, Value) and isinstance(real, torch.Tensor):
                self.realv.setdefault(value.name, real)
        return v

    def finish(self, logits):
        """(the function's body, what weights.safetensors holds, the number of ops). The body:
        the input, every parameter and persistent buffer (even an unused one: the weights file
        holds it), the `_const` buffers the logits need, named _const.0, _const.1, ... in
        order, then the ops the logits need, in emission order. `logits` may be a list: the
        function returns each."""
        results = list(logits) if isinstance(logits, (list, tuple)) else [logits]
        live, work = set(), list(results)
        while work:
            v = work.pop()
            d = self.defs[v.name]
            if id(d) not in live:
                live.add(id(d))
                work.extend(d.operands)
        tensors, lines, ops, k = dict(self.tensors), [], 0, 0
        for d in self.order:
            if "const" in d.meta and id(d) in live:
                while f"_const.{k}" in tensors:  # a module's own tensor of that name
                    k += 1
                tensors[f"_const.{k}"] = d.meta["const"]
                d.attrs = f'name = "_const.{k}", role = "buffer"'
                k += 1
            if id(d) in live or (d.op in ("input", "param") and "const" not in d.meta):
                lines.append(d.line())
                ops += d.op not in ("input", "param")
        return "\n".join(lines + ["  return " + ", ".join(f"%{r.name}" for r in results)]), tensors, ops

    # ---- ATen ops. Each returns the fusec value of the node; `out` is its real result.
    def _same(self, node, out, x, *rest, **kw):
        return self.value(x)

    op_clone = op_detach = op_alias = op_contiguous = op_lift_fresh_copy = _same

    def _reshape(self, node, out, x, *rest, **kw):
        return self.emit("reshape", [self.value(x)], out.shape, out.dtype)

    op_view = op__reshape_alias = op__unsafe_view = op_reshape = op_unsqueeze = op_squeeze = _reshape
    op_flatten = op_view_as = _reshape

    def op_t(self, node, out, x):
        return self.permute(self.value(x), [1, 0])

    def op_transpose(self, node, out, x, d0, d1):
        v = self.value(x)
        perm = list(range(len(v.shape)))
        d0, d1 = d0 % len(perm), d1 % len(perm)
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return self.permute(v, perm)

    def op_permute(self, node, out, x, perm):
        v = self.value(x)
        return self.permute(v, [p % len(v.shape) for p in perm])

    def op_expand(self, node, out, x, *rest, **kw):
        return self.like(self.value(x), out.shape)

    def op__to_copy(self, node, out, x, *rest, **kw):
        v = self.value(x)
        return v if out.dtype == v.dtype else self.emit("cast", [v], v.shape, out.dtype)

    op_to = op_convert_element_type = op__to_copy

    def op_embedding(self, node, out, w, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
        """weight[ids]. A padding_idx (nn.Embedding(padding_idx=p): transformers' pad token) is
        a row whose gradient is zero: where an id is p, the gathered row is read through a
        stop_gradient, so the same value is computed and no gradient reaches that row."""
        if scale_grad_by_freq:
            raise ExportError("unsupported op aten.embedding with scale_grad_by_freq")
        wv, iv = self.value(w), self.value(ids)
        n, d = int(math.prod(iv.shape)), wv.shape[1]
        idx = self.emit("broadcast", [self.emit("reshape", [iv], (n, 1), iv.dtype)], (n, d), iv.dtype)
        rows = self.emit("gather", [wv, idx], (n, d), wv.dtype, "axis = 0")
        if padding_idx is not None and 0 <= padding_idx < wv.shape[0]:
            pad = self.emit("eq", [idx, self.constant(padding_idx, (n, d), iv.dtype)], (n, d), torch.bool)
            frozen = self.emit("stop_gradient", [rows], (n, d), wv.dtype)
            rows = self.emit("select", [pad, frozen, rows], (n, d), wv.dtype)
        return self.emit("reshape", [rows], out.shape, out.dtype)

    def op_index(self, node, out, x, indices):
        """x[..., idx, ...] with one integer index tensor (aten.index.Tensor): the indexed axis
        moved first and the rest flattened, the embedding's gather (axis 0 of a matrix), and the
        result laid out as torch's: x.shape[:k] + idx.shape + x.shape[k+1:]. A negative index
        counts from the end, as in torch."""
        given = [(k, a) for k, a in enumerate(indices) if a is not None]
        if len(given) != 1:
            raise ExportError(f"unsupported op aten.index.Tensor with {len(given)} index tensors (one is supported)")
        k, a = given[0]
        real = self.real[a] if isinstance(a, torch.fx.Node) else torch.as_tensor(a)
        if real.dtype == torch.bool:
            raise ExportError("unsupported op aten.index.Tensor with a boolean mask (its result's shape depends on "
                              "the mask's values)")
        v = self.value(x)
        size, rest = v.shape[k], v.shape[:k] + v.shape[k + 1:]
        m, n = int(math.prod(rest)), real.numel()
        iv = self.operand(a, tuple(real.shape), torch.int64)
        if isinstance(a, torch.fx.Node) and a in self.static and not bool((real < 0).any()):
            pass  # known and in range: as it is
        else:
            shape = tuple(real.shape)
            neg = self.emit("lt", [iv, self.constant(0, shape, torch.int64)], shape, torch.bool)
            iv = self.emit("select", [neg, self.emit("add", [iv, self.constant(size, shape, torch.int64)], shape,
                                                     torch.int64), iv], shape, torch.int64)
        perm = [k] + [i for i in range(len(v.shape)) if i != k]
        table = self.reshape(self.permute(v, perm) if k else v, (size, m))
        idx = self.emit("broadcast", [self.reshape(iv, (n, 1))], (n, m), torch.int64)
        rows = self.emit("gather", [table, idx], (n, m), v.dtype, "axis = 0")
        lead = tuple(real.shape)
        rows = self.reshape(rows, lead + rest)
        if k:  # the index's axes back to where the indexed axis was
            r, j = len(rows.shape), len(lead)
            back = list(range(j, j + k)) + list(range(j)) + list(range(j + k, r))
            rows = self.permute(rows, back)
        return self.reshape(rows, out.shape)

    def op_mm(self, node, out, x, y):
        # P @ V at the end of an explicit attention (softmax of masked, scaled Q K^T) becomes
        # the attention composite, so the fused lowerings apply (attention.py).
        o = attention.match_softmax_attention(self, out, self.value(x), self.value(y))
        if o is not None:
            return o
        return self.emit("matmul", [self.value(x), self.value(y)], out.shape, out.dtype)

    def op_scaled_dot_product_attention(self, node, out, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                                        scale=None, enable_gqa=False):
        return attention.sdpa(self, out, q, k, v, attn_mask, dropout_p, is_causal, scale)[0]

    # The variants it dispatches to return (out, logsumexp, ...): the rest have no fusec value.
    def op__scaled_dot_product_flash_attention_for_cpu(self, node, out, q, k, v, dropout_p=0.0, is_causal=False,
                                                         attn_mask=None, scale=None):
        return list(attention.sdpa(self, out[0], q, k, v, attn_mask, dropout_p, is_causal, scale))

    def op__scaled_dot_product_flash_attention(self, node, out, q, k, v, dropout_p=0.0, is_causal=False,
                                               return_debug_mask=False, scale=None):
        o, lse = attention.sdpa(self, out[0], q, k, v, None, dropout_p, is_causal, scale)
        return [o, lse] + [None] * (len(out) - 2)

    def op__scaled_dot_product_efficient_attention(self, node, out, q, k, v, attn_bias=None, compute_log_sumexp=False,
                                                   dropout_p=0.0, is_causal=False, scale=None):
        o, lse = attention.sdpa(self, out[0], q, k, v, attn_bias, dropout_p, is_causal, scale)
        return [o, self._torch_lse(lse, out[1])] + [None] * (len(out) - 2)

    def op__scaled_dot_product_cudnn_attention(self, node, out, q, k, v, attn_bias=None, compute_log_sumexp=False,
                                               dropout_p=0.0, is_causal=False, return_debug_mask=False, scale=None):
        o, lse = attention.sdpa(self, out[0], q, k, v, attn_bias, dropout_p, is_causal, scale)
        return [o, self._torch_lse(lse, out[1])] + [None] * (len(out) - 2)

    def _torch_lse(self, lse, real):
        """fusec's lse [B, H, T] laid out as the SDPA variant's (the efficient kernel pads T to a
        multiple of 32, cuDNN adds a unit axis), so that a backward graph that takes it as a
        saved tensor gets the shape the trace recorded. Only fusec's attention_backward reads
        it (graph_compile.py compiles a forward and its backward together or neither). None (a
        train-mode export's attention with dropout has none) stays None."""
        if lse is None:
            return None
        shape = tuple(real.shape)
        if shape == lse.shape:
            return lse
        if len(shape) == len(lse.shape) + 1 and shape[-1] == 1:
            return self.reshape(lse, shape)
        if len(shape) == len(lse.shape) and shape[:-1] == lse.shape[:-1] and shape[-1] > lse.shape[-1]:
            pad = self.constant(0.0, lse.shape[:-1] + (shape[-1] - lse.shape[-1],), torch.float32)
            return self.emit("concat", [lse, pad], shape, torch.float32, f"axis = {len(shape) - 1}")
        raise ExportError(f"unsupported op scaled_dot_product_attention with a logsumexp of shape {list(shape)}")

    def _attention_backward(self, out, grad, q, k, v, o, lse, dropout_p, is_causal, scale, bias=None):
        """The backward of an SDPA variant as fusec's attention_backward: (dq, dk, dv)."""
        if dropout_p:
            raise ExportError("unsupported op scaled_dot_product_attention backward with dropout_p > 0")
        qv, kv, vv, ov, gv = (self.value(a) for a in (q, k, v, o, grad))
        is_causal = attention.causal_of(self, bias, is_causal, qv.shape[-2], kv.shape[-2])
        # K and V may have fewer heads than Q (grouped-query attention: SDPA's enable_gqa), as
        # fusec's attention_backward takes them (ops.def): dK and dV come out per kv head.
        r = len(qv.shape)
        grouped = r >= 3 and kv.shape[:-3] == qv.shape[:-3] and kv.shape[-3] <= qv.shape[-3] and \
            qv.shape[-3] % kv.shape[-3] == 0
        if len({qv.dtype, kv.dtype, vv.dtype, ov.dtype, gv.dtype}) != 1 or qv.shape[-2] != kv.shape[-2] or \
                (qv.shape[:-2] != kv.shape[:-2] and not grouped) or vv.shape[:-2] != kv.shape[:-2]:
            raise ExportError("unsupported op scaled_dot_product_attention backward with these operands")
        lv = self.value(lse)
        want = qv.shape[:-1]
        if lv.shape != want:
            if len(lv.shape) == len(want) + 1 and lv.shape[-1] == 1:
                lv = self.reshape(lv, want)
            elif len(lv.shape) == len(want) and lv.shape[-1] > want[-1]:
                lv = self.emit("slice", [lv], want, torch.float32, f"axis = {len(want) - 1}, start = 0, end = {want[-1]}")
            else:
                raise ExportError(f"unsupported op scaled_dot_product_attention backward with a logsumexp {list(lv.shape)}")
        scale = 1 / math.sqrt(qv.shape[-1]) if scale is None else float(scale)
        dq, dk, dv = self.emit_multi("attention_backward", [qv, kv, vv, ov, gv, lv],
                                     [(qv.shape, qv.dtype), (kv.shape, kv.dtype), (vv.shape, vv.dtype)],
                                     f"causal = {'true' if is_causal else 'false'}, scale = {scale!r}", "dattn")
        return [dq, dk, dv] + [None] * (len(out) - 3)

    def op__scaled_dot_product_flash_attention_backward(self, node, out, grad, q, k, v, o, lse, cum_q, cum_k, max_q,
                                                        max_k, dropout_p, is_causal, seed, offset, scale=None):
        return self._attention_backward(out, grad, q, k, v, o, lse, dropout_p, is_causal, scale)

    def op__scaled_dot_product_efficient_attention_backward(self, node, out, grad, q, k, v, bias, o, lse, seed, offset,
                                                            dropout_p, grad_input_mask, is_causal=False, scale=None):
        return self._attention_backward(out, grad, q, k, v, o, lse, dropout_p, is_causal, scale, bias)

    def op__scaled_dot_product_cudnn_attention_backward(self, node, out, grad, q, k, v, o, lse, seed, offset, bias,
                                                        cum_q, cum_k, max_q, max_k, dropout_p, is_causal, scale=None):
        return self._attention_backward(out, grad, q, k, v, o, lse, dropout_p, is_causal, scale, bias)

    def op_embedding_dense_backward(self, node, out, grad, ids, num_weights, padding_idx, scale_grad_by_freq):
        """The gradient of weight[ids]: grad's rows summed into the rows of the ids (zero rows
        elsewhere and at padding_idx), a scatter_add."""
        if scale_grad_by_freq:
            raise ExportError("unsupported op aten.embedding_dense_backward with scale_grad_by_freq")
        gv, iv = self.value(grad), self.value(ids)
        n, d = int(math.prod(iv.shape)), gv.shape[-1]
        rows = self.reshape(gv, (n, d))
        if rows.dtype != out.dtype:
            rows = self.emit("cast", [rows], rows.shape, out.dtype)
        idx = self.emit("broadcast", [self.reshape(iv, (n, 1))], (n, d), iv.dtype)
        if padding_idx is not None and padding_idx >= 0:
            pad = self.emit("eq", [idx, self.constant(padding_idx, (n, d), iv.dtype)], (n, d), torch.bool)
            rows = self.emit("select", [pad, self.constant(0.0, (n, d), rows.dtype), rows], (n, d), rows.dtype)
        base = self.constant(0.0, tuple(out.shape), out.dtype)
        return self.emit("scatter_add", [base, idx, rows], tuple(out.shape), out.dtype, "axis = 0")

    def op_slice_scatter(self, node, out, base, src, dim=0, start=None, end=None, step=1):
        """`base` with base[start:end] along `dim` replaced by `src` (slice_backward's form): the
        pieces before and after, concatenated around it. Step 1 only."""
        b, sv = self.value(base), self.value(src)
        dim %= len(b.shape)
        size = b.shape[dim]
        s, e, st = slice(start, end, step).indices(size)
        if st == 1:
            return self._replace_rows(b, sv, dim, s, max(e, s), out)
        # Every step-th element from s < step to the end (x[..., 1::2]'s backward, RoPE's): the
        # axis as (size/step, step), and slot s of the inner axis replaced.
        if size % st or s >= st or sv.shape[dim] != size // st:
            raise ExportError("unsupported op aten.slice_scatter with a step that does not tile the axis")
        split = b.shape[:dim] + (size // st, st) + b.shape[dim + 1:]
        inner = self.reshape(sv, b.shape[:dim] + (size // st, 1) + b.shape[dim + 1:])
        out2 = self._replace_rows(self.reshape(b, split), inner, dim + 1, s, s + 1, _Shaped(split, out.dtype))
        return self.reshape(out2, tuple(out.shape))

    def op_select_scatter(self, node, out, base, src, dim, index):
        b = self.value(base)
        dim %= len(b.shape)
        index %= b.shape[dim]
        shape = list(b.shape)
        shape[dim] = 1
        return self._replace_rows(b, self.reshape(self.value(src), tuple(shape)), dim, index, index + 1, out)

    def _replace_rows(self, b, sv, dim, s, e, out):
        if sv.dtype != b.dtype:
            sv = self.emit("cast", [sv], sv.shape, b.dtype)
        pieces = []
        if s > 0:
            pieces.append(self.emit("slice", [b], b.shape[:dim] + (s,) + b.shape[dim + 1:], b.dtype,
                                    f"axis = {dim}, start = 0, end = {s}, step = 1"))
        pieces.append(sv)
        if e < b.shape[dim]:
            pieces.append(self.emit("slice", [b], b.shape[:dim] + (b.shape[dim] - e,) + b.shape[dim + 1:], b.dtype,
                                    f"axis = {dim}, start = {e}, end = {b.shape[dim]}, step = 1"))
        if len(pieces) == 1:
            return pieces[0]
        return self.emit("concat", pieces, tuple(out.shape), out.dtype, f"axis = {dim}")

    def _filled(self, node, out, *args, **kw):
        """zeros_like(x), new_ones(x, ...), full_like(x, v): a constant of the result's shape."""
        t = out.detach()
        if not _splat(t):
            raise ExportError(f"unsupported op {op_name(node.target)} with a value that is not one number")
        return self.constant(t.reshape(-1)[0].item(), tuple(t.shape), t.dtype)

    op_zeros_like = op_ones_like = op_full_like = op_new_zeros = op_new_ones = op_new_full = _filled

    def op_empty_like(self, node, out, *args, **kw):
        """Uninitialised memory (what a functionalized fill_ then overwrites): zeros serve."""
        return self.constant(0, tuple(out.shape), out.dtype)

    def op_fill(self, node, out, x, value):
        return self.operand(value, tuple(out.shape), out.dtype)

    def op_var_mean(self, node, out, x, dims=None, correction=None, keepdim=False, **kw):
        """(var, mean) over `dims`, var with `correction` (1 unless given, torch's default)."""
        v = self.value(x)
        if kw.get("unbiased") is not None:
            correction = 1 if kw["unbiased"] else 0
        correction = 1 if correction is None else correction
        dims = list(range(len(v.shape))) if dims is None or dims == [] else dims
        dims = sorted(d % len(v.shape) for d in ([dims] if isinstance(dims, int) else dims))
        kept = tuple(1 if i in dims else n for i, n in enumerate(v.shape))
        count = math.prod(v.shape[i] for i in dims)
        attrs = f"axes = {dims}, keepdim = true"
        mean = self.emit("mean", [v], kept, v.dtype, attrs)
        dev = self.emit("sub", [v, self.like(mean, v.shape)], v.shape, v.dtype)
        sq = self.emit("sum", [self.emit("mul", [dev, dev], v.shape, v.dtype)], kept, v.dtype, attrs)
        var = self.scaled(sq, 1.0 / max(count - correction, 0) if count - correction > 0 else float("nan"))
        return [self.reshape(var, tuple(out[0].shape)), self.reshape(mean, tuple(out[1].shape))]

    op_bmm = op_matmul = op_mm

    def op_arange(self, node, out, *args, **kw):
        """An arange (positions): iota, scaled and shifted, where that gives its values exactly."""
        n = out.numel()
        start = out[0].item() if n else 0
        step = out[1].item() - start if n > 1 else 1
        exact = out.dim() == 1 and float(start).is_integer() and float(step).is_integer() and \
            max(abs(start), abs(start + step * n)) < 2 ** 24 and \
            torch.equal(out.cpu(), (start + step * torch.arange(n, dtype=torch.float64)).to(out.dtype))
        if not exact:
            raise ExportError(f"unsupported op aten.arange of {out.dtype} values that are not integers")
        dtype = out.dtype if out.dtype in (torch.int64, torch.float32) else torch.int64
        v = self.scaled(self.emit("iota", [], out.shape, dtype, "axis = 0"), step)
        if start != 0:
            v = self.emit("add", [v, self.constant(start, out.shape, dtype)], out.shape, dtype)
        return v if dtype == out.dtype else self.emit("cast", [v], out.shape, out.dtype)

    def op_addmm(self, node, out, bias, x, y, beta=1, alpha=1):
        """addmm and baddbmm: beta * bias + alpha * (x @ y), the bias broadcast (an additive
        attention mask, for baddbmm). beta 0 ignores the bias, as torch does (nan included)."""
        m = self.scaled(self.emit("matmul", [self.value(x), self.value(y)], out.shape, out.dtype), alpha)
        if beta == 0:
            return m
        return self.emit("add", [m, self.scaled(self.operand(bias, out.shape, out.dtype), beta)], out.shape, out.dtype)

    op_baddbmm = op_addmm

    def _binary(self, fop):
        def conv(node, out, x, y, alpha=1):
            # Compares take their operands' promoted dtype; the rest compute in the result's.
            dtype = out.dtype
            if fop in _COMPARES or fop in ("and", "or"):
                reals = [self.real[a] if isinstance(a, torch.fx.Node) else torch.tensor(a) for a in (x, y)]
                dtype = torch.result_type(*reals) if fop in _COMPARES else torch.bool
            ys = self.scaled(self.operand(y, out.shape, dtype), alpha)
            return self.emit(fop, [self.operand(x, out.shape, dtype), ys], out.shape, out.dtype)
        return conv

    def op_pow(self, node, out, x, e):
        v = self.operand(x, out.shape, out.dtype)
        if isinstance(e, (int, float)):
            if e == 2:
                return self.emit("mul", [v, v], out.shape, out.dtype)
            if e == 0.5:
                return self.emit("sqrt", [v], out.shape, out.dtype)
            if e == -0.5:
                return self.emit("rsqrt", [v], out.shape, out.dtype)
            if e == 1:
                return v
        return self.emit("pow", [v, self.operand(e, out.shape, out.dtype)], out.shape, out.dtype)

    def _unary(self, fop):
        def conv(node, out, x, *rest):
            return self.emit(fop, [self.operand(x, out.shape, out.dtype)], out.shape, out.dtype)
        return conv

    def op_gelu(self, node, out, x, approximate="none"):
        return self.emit("gelu", [self.value(x)], out.shape, out.dtype, f'approximate = "{approximate}"')

    def _reduce(self, fop):
        def conv(node, out, x, dims=None, keepdim=False, **kw):
            v = self.value(x)
            if dims is None or dims == []:
                dims = list(range(len(v.shape)))
            dims = sorted(d % len(v.shape) for d in ([dims] if isinstance(dims, int) else dims))
            if v.dtype != out.dtype:  # sum(x, dtype=...) and integer promotion: torch casts first
                v = self.emit("cast", [v], v.shape, out.dtype)
            return self.emit(fop, [v], out.shape, out.dtype, f"axes = {dims}, keepdim = {str(bool(keepdim)).lower()}")
        return conv

    def op__softmax(self, node, out, x, dim, half_to_float=False):
        v = self.value(x)
        return self.emit("softmax", [v], out.shape, out.dtype, f"axis = {dim % len(v.shape)}",
                         meta={"axis": dim % len(v.shape)})

    def op__log_softmax(self, node, out, x, dim, half_to_float=False):
        v = self.value(x)
        return self.emit("log_softmax", [v], out.shape, out.dtype, f"axis = {dim % len(v.shape)}")

    op_softmax = op__softmax
    op_log_softmax = op__log_softmax

    def op_masked_fill(self, node, out, x, mask, value):
        m = self.operand(mask, out.shape, torch.bool)
        return self.emit("select", [m, self.operand(value, out.shape, out.dtype), self.operand(x, out.shape, out.dtype)],
                         out.shape, out.dtype)

    def op_where(self, node, out, c, x, y):
        return self.emit("select", [self.operand(c, out.shape, torch.bool), self.operand(x, out.shape, out.dtype),
                                    self.operand(y, out.shape, out.dtype)], out.shape, out.dtype)

    def op_slice(self, node, out, x, dim=0, start=None, end=None, step=1):
        v = self.value(x)
        dim %= len(v.shape)
        size = v.shape[dim]
        s, e, _ = slice(start, end, step).indices(size)
        if (s, max(e, s), step) == (0, size, 1):  # x[:, :, None]'s full slices: no op
            return v
        if e <= s:  # nothing in it (Phi-3's pass-through part of a rotary embedding over the whole head)
            return _Empty(tuple(out.shape))
        return self.emit("slice", [v], out.shape, out.dtype, f"axis = {dim}, start = {s}, end = {max(e, s)}, step = {step}")

    def op_select(self, node, out, x, dim, index):
        v = self.value(x)
        dim %= len(v.shape)
        index %= v.shape[dim]
        shape = list(v.shape)
        shape[dim] = 1
        s = self.emit("slice", [v], shape, v.dtype, f"axis = {dim}, start = {index}, end = {index + 1}, step = 1")
        return self.emit("reshape", [s], out.shape, out.dtype)

    def op_split(self, node, out, x, size, dim=0):
        v = self.value(x)
        dim %= len(v.shape)
        parts, start = [], 0
        for piece in out:
            n = piece.shape[dim]
            parts.append(self.emit("slice", [v], piece.shape, piece.dtype,
                                   f"axis = {dim}, start = {start}, end = {start + n}, step = 1"))
            start += n
        return parts

    op_split_with_sizes = op_split

    # ---- dropout (a train-mode export)
    def dropout_key(self):
        """The step's dropout key: one input for the whole model (role dropout_key)."""
        if self.key is None:
            self.key = self.source("input", (), torch.int64, 'name = "dropout_key", role = "dropout_key"', "key", True,
                                   name="dropout_key")
        return self.key

    def dropout(self, x, p, stream=None):
        """fusec's dropout of value `x` with probability p: each site its own stream (or
        `stream`: another site's, whose elements it keeps)."""
        if stream is None:
            self.streams += 1
            stream = self.streams
        return self.emit("dropout", [x, self.dropout_key()], x.shape, x.dtype, f"p = {number(p)}, stream = {stream}")

    @staticmethod
    def _eval_dropout(node, args):
        """A dropout node's value as eval mode computes it: its input (and an all-kept mask)."""
        x = args[0]
        if op_name(node.target).split(".")[1] == "native_dropout":
            return (x.clone(), torch.ones_like(x, dtype=torch.bool))
        return x.clone()

    def _dropout_op(self, node, out, x, p, train):
        if not self.train_dropout:
            raise ExportError(f"unsupported op {op_name(node.target)} in train mode (export in eval mode, or with dropout)")
        v = self.value(x)
        native = op_name(node.target).split(".")[1] == "native_dropout"
        if not train or not p:
            kept, mask = v, (self.constant(1, v.shape, torch.bool) if native and self.dropout_masks else None)
        else:
            kept = self.dropout(v, float(p))
            mask = None
            if native and self.dropout_masks:  # the same stream over ones: the same elements kept
                ones = self.dropout(self.constant(1, v.shape, torch.float32), float(p), stream=self.streams)
                mask = self.emit("ne", [ones, self.constant(0, v.shape, torch.float32)], v.shape, torch.bool)
        return [kept, mask] if native else kept

    def op_native_dropout(self, node, out, x, p, train):
        return self._dropout_op(node, out, x, p, train)

    def op_dropout(self, node, out, x, p, train):
        return self._dropout_op(node, out, x, p, train)

    def op_getitem(self, node, out, xs, i):
        parts = self.values.get(xs)
        if isinstance(parts, list):
            if parts[i] is None:
                return _Opaque(f"unsupported op getitem {i} of {op_name(node.args[0].target)}", out)
            return parts[i]
        if node.args[0].target is torch.ops.aten.native_layer_norm.default and i == 0:
            return parts
        raise ExportError(f"unsupported op getitem of {op_name(node.args[0].target)}")

    def op_cat(self, node, out, xs, dim=0):
        # Empty pieces add nothing: left out (fusec has no zero-size tensors).
        xs = [x for x in xs if not (isinstance(x, torch.fx.Node) and self.real[x].numel() == 0)]
        if not xs:
            return _Empty(tuple(out.shape))
        vs = [self.operand(x, tuple(self.real[x].shape), out.dtype) for x in xs]
        if len(vs) == 1:
            return vs[0]
        return self.emit("concat", vs, out.shape, out.dtype, f"axis = {dim % len(out.shape)}")

    def op_stack(self, node, out, xs, dim=0):
        dim %= len(out.shape)
        vs = []
        for x in xs:
            v = self.value(x)
            shape = list(v.shape)
            shape.insert(dim, 1)
            vs.append(self.emit("reshape", [v], shape, v.dtype))
        return self.emit("concat", vs, out.shape, out.dtype, f"axis = {dim}")

    def op_native_layer_norm(self, node, out, x, shape, w, b, eps):
        """LayerNorm over the last axis; without a weight (elementwise_affine=False: OLMo's) or a
        bias (bias=False) the composite gets a constant 1 or 0 in its place."""
        v = self.value(x)
        if len(shape) != 1:
            raise ExportError("unsupported op aten.native_layer_norm over more than the last axis")
        d = (v.shape[-1],)
        wv = self.constant(1.0, d, torch.float32) if w is None else self.operand(w, d, torch.float32)
        bv = self.constant(0.0, d, torch.float32) if b is None else self.operand(b, d, torch.float32)
        return self.emit("layernorm", [v, wv, bv], out[0].shape, out[0].dtype, f"eps = {number(eps)}")


_COMPARES = {"eq", "ne", "lt", "le", "gt", "ge"}
# ATen ops that draw random numbers: never static (computed once, a draw would repeat every
# step). Only dropout has a mapping (fusec's dropout op); the others make a graph unsupported.
_RANDOM = {"rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "bernoulli", "native_dropout",
           "dropout", "normal", "uniform", "exponential", "geometric", "cauchy", "log_normal", "multinomial",
           "randperm", "poisson"}


def _is_dropout(node):
    return node.op == "call_function" and op_name(node.target).split(".")[1:2] in (["native_dropout"], ["dropout"])


def is_random(node):
    """Whether fx node `node` draws random numbers."""
    op = op_name(node.target)
    return node.op == "call_function" and op.split(".")[0] in ("aten", "prims") and op.split(".")[1] in _RANDOM
# ATen ops whose result depends on their tensor operand's shape and dtype only (as one-item lists:
# what op_name(...).split(".")[1:2] gives).
_SHAPE_ONLY = [[n] for n in ("zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full",
                             "new_empty", "sym_size")]


def _splat(t):
    """Whether a tensor is one value repeated (a `constant` in the .fir)."""
    return t.numel() > 0 and bool((t == t.reshape(-1)[0]).all())


for _name, _fop in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"), ("maximum", "max"),
                    ("minimum", "min"), ("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                    ("ge", "ge"), ("logical_and", "and"), ("logical_or", "or"), ("bitwise_and", "and"),
                    ("bitwise_or", "or")]:
    setattr(Converter, "op_" + _name, (lambda f: lambda self, *a, **k: self._binary(f)(*a, **k))(_fop))
for _name, _fop in [("neg", "neg"), ("abs", "abs"), ("relu", "relu"), ("exp", "exp"), ("log", "log"),
                    ("sqrt", "sqrt"), ("rsqrt", "rsqrt"), ("reciprocal", "recip"), ("tanh", "tanh"), ("sin", "sin"),
                    ("cos", "cos"), ("sigmoid", "sigmoid"), ("erf", "erf"), ("silu", "silu"),
                    ("logical_not", "not"), ("bitwise_not", "not")]:
    setattr(Converter, "op_" + _name, (lambda f: lambda self, *a, **k: self._unary(f)(*a, **k))(_fop))
for _name, _fop in [("mean", "mean"), ("sum", "sum"), ("amax", "reduce_max"), ("amin", "reduce_min")]:
    setattr(Converter, "op_" + _name, (lambda f: lambda self, *a, **k: self._reduce(f)(*a, **k))(_fop))


