"""Exports a PyTorch language model (an nn.Module: forward(ids) -> logits) to fusec:
DIR/model.fir, a @forward from the token ids to the logits in fusec's IR, and
DIR/weights.safetensors, its weights by their named_parameters() names (a tied weight once,
under its first name) plus the tensors the graph needs that are not trained (role buffer).

    python3 -m fusec.export --model FILE.py:ClassName [--kwargs JSON] [--state-dict SD.pt]
                            --batch B --seq T --out DIR
    fusec.export.export(model, example_ids, out_dir)          # the same from Python

The model is captured at the ATen level with make_fx (torch.fx.experimental.proxy_tensor),
on real example ids, and each ATen op is mapped to fusec ops (_Converter). Whatever does not
depend on the ids or the weights (RoPE tables, causal masks, position ranges) is computed
here, once: a splat becomes a `constant`, anything else a buffer. An op without a mapping
fails the export with one line naming it and the model's source line that called it; no file
is written then.
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import traceback

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten

from . import safetensors_io

try:  # torch >= 2.0
    from torch.func import functional_call
except ImportError:  # torch 1.13
    from torch.nn.utils.stateless import functional_call


class ExportError(Exception):
    """An export that cannot be done faithfully; its message is one line."""


_FIR_DTYPES = {torch.float32: "f32", torch.int64: "i64", torch.int32: "i32", torch.bool: "bool",
               torch.bfloat16: "bf16"}


def _fir_type(dtype, shape):
    if dtype not in _FIR_DTYPES:
        raise ExportError(f"dtype {dtype} has no fusec equivalent")
    return f"{_FIR_DTYPES[dtype]}[{','.join(str(int(d)) for d in shape)}]"


def _number(x):
    x = float(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "nan"
    return repr(x)


class _Value:
    """A fusec value: its IR name, shape and dtype."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(int(d) for d in shape), dtype

    @property
    def type(self):
        return _fir_type(self.dtype, self.shape)


def _op_name(target):
    """"aten.mm.default" for an ATen overload, "getitem" for a Python function."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


class _SourceLines:
    """The model's source line of the first call of each ATen op, from an eager run under a
    dispatch mode: what an unsupported-op error points at."""

    def __init__(self, model, args):
        self.first = {}
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
        except ImportError:
            return
        lines = self.first
        torch_dir = os.path.dirname(torch.__file__)
        here = os.path.dirname(os.path.abspath(__file__))

        class Recorder(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                key = str(func.overloadpacket).split("::")[-1].split(".")[-1]
                if key not in lines:
                    for fr in reversed(traceback.extract_stack()[:-1]):
                        f = os.path.abspath(fr.filename)
                        if not f.startswith(torch_dir) and not f.startswith(here):
                            lines[key] = f"{os.path.basename(fr.filename)}:{fr.lineno}: {(fr.line or '').strip()}"
                            break
                return func(*args, **(kwargs or {}))

        with torch.no_grad(), Recorder():
            model(*args)

    def of(self, op):
        key = op.split(".")[1] if op.startswith("aten.") else op
        return self.first.get(key, "source line unknown")


class _Converter:
    def __init__(self, gm, leaves, kinds, names, sources):
        self.gm, self.sources = gm, sources
        self.lines, self.values, self.static = [], {}, {}
        self.tensors = {}  # what weights.safetensors holds
        self.counter = 0
        self.placeholders = dict(zip([n for n in gm.graph.nodes if n.op == "placeholder"], zip(leaves, kinds, names)))

    # ---- emission
    def fresh(self, hint):
        self.counter += 1
        return f"{hint}.{self.counter}"

    def emit(self, op, operands, shape, dtype, attrs="", hint="v"):
        v = _Value(self.fresh(hint), shape, dtype)
        ops = ", ".join(f"%{o.name}" for o in operands)
        self.lines.append(f"  %{v.name} = {op}({ops}){' {' + attrs + '}' if attrs else ''} : {v.type}")
        return v

    def constant(self, value, shape, dtype):
        return self.emit("constant", [], shape, dtype, f"value = {_number(value)}", "c")

    def materialize(self, t):
        """A value known at export time: a splat becomes a constant, anything else a buffer."""
        t = t.detach()
        if t.numel() > 0 and bool((t == t.reshape(-1)[0]).all()):
            return self.constant(t.reshape(-1)[0].item(), t.shape, t.dtype)
        name = f"_const.{len(self.tensors)}"
        self.tensors[name] = t.to(torch.float32)
        v = self.emit("param", [], t.shape, torch.float32, f'name = "{name}", role = "buffer"', "buf")
        if t.dtype == torch.bool:
            return self.emit("ne", [v, self.constant(0, t.shape, torch.float32)], t.shape, torch.bool)
        if t.dtype != torch.float32:
            return self.emit("cast", [v], t.shape, t.dtype)
        return v

    def value(self, a):
        """The fusec value of an fx argument (materializing export-time values)."""
        if isinstance(a, torch.fx.Node):
            if a in self.values:
                return self.values[a]
            if a in self.static:
                v = self.materialize(self.static[a])
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
        results = self.real = {}  # every node's real value on the example
        by_id = {id(leaf): node for node, (leaf, kind, _) in self.placeholders.items() if kind == "param"}
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":  # a tensor the trace kept as a constant
                t = getattr(self.gm, node.target)
                if id(t) in by_id:  # a parameter reached another way (a tied weight)
                    results[node] = t
                    self.values[node] = self.values[by_id[id(t)]]
                    continue
                results[node] = t
                self.static[node] = t
                continue
            if node.op == "placeholder":
                leaf, kind, name = self.placeholders[node]
                results[node] = leaf
                if kind == "input":
                    self.values[node] = _Value("ids", leaf.shape, leaf.dtype)
                    self.lines.append(f'  %ids = input() {{name = "ids", role = "ids"}} : {_fir_type(leaf.dtype, leaf.shape)}')
                elif kind == "param":
                    self.tensors[name] = leaf.detach().to(torch.float32)
                    v = _Value(self.fresh("w"), leaf.shape, torch.float32)
                    self.lines.append(f'  %{v.name} = param() {{name = "{name}"}} : {v.type}')
                    self.values[node] = v
                else:  # a buffer: known now
                    self.static[node] = leaf
                continue
            if node.op == "output":
                out = node.args[0]
                out = out[0] if isinstance(out, (list, tuple)) else out
                logits = self.value(out)
                if logits.dtype != torch.float32:
                    logits = self.emit("cast", [logits], logits.shape, torch.float32)
                self.lines.append(f"  return %{logits.name}")
                return logits
            args = torch.fx.node.map_arg(node.args, lambda n: results[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: results[n])
            if node.op != "call_function":
                raise ExportError(f"internal: fx node {node.op} {node.target}")
            out = node.target(*args, **kwargs)
            results[node] = out
            dynamic = any(isinstance(a, torch.fx.Node) and a not in self.static
                          for a in node.all_input_nodes)
            if not dynamic:
                self.static[node] = out
                continue
            self.convert(node, out)
        raise ExportError("internal: the graph has no output")

    def convert(self, node, out):
        op = _op_name(node.target)
        name = op.split(".")[1] if op.startswith("aten.") else op
        a = node.args
        try:
            fn = getattr(self, "op_" + name, None)
            if fn is None:
                raise ExportError(f"unsupported op {op}")
            v = fn(node, out, *a, **node.kwargs)
        except ExportError as e:
            msg = str(e)
            if msg.startswith("unsupported"):
                msg += f" ({self.sources.of(op)})"
            raise ExportError(msg) from None
        self.values[node] = v

    # ---- ATen ops. Each returns the fusec value of the node; `out` is its real result.
    def _same(self, node, out, x, *rest, **kw):
        return self.value(x)

    op_clone = op_detach = op_alias = op_contiguous = op_lift_fresh_copy = _same

    def _reshape(self, node, out, x, *rest, **kw):
        return self.emit("reshape", [self.value(x)], out.shape, out.dtype)

    op_view = op__reshape_alias = op__unsafe_view = op_reshape = op_unsqueeze = op_squeeze = _reshape
    op_flatten = op_view_as = _reshape

    def op_t(self, node, out, x):
        return self.emit("permute", [self.value(x)], out.shape, out.dtype, "perm = [1, 0]")

    def op_transpose(self, node, out, x, d0, d1):
        v = self.value(x)
        perm = list(range(len(v.shape)))
        d0, d1 = d0 % len(perm), d1 % len(perm)
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return self.emit("permute", [v], out.shape, out.dtype, f"perm = {perm}")

    def op_permute(self, node, out, x, perm):
        v = self.value(x)
        return self.emit("permute", [v], out.shape, out.dtype, f"perm = {[p % len(v.shape) for p in perm]}")

    def op_expand(self, node, out, x, *rest, **kw):
        return self.like(self.value(x), out.shape)

    def op__to_copy(self, node, out, x, **kw):
        v = self.value(x)
        return v if out.dtype == v.dtype else self.emit("cast", [v], v.shape, out.dtype)

    op_to = op__to_copy

    def op_embedding(self, node, out, w, ids, *rest):
        wv, iv = self.value(w), self.value(ids)
        n, d = int(math.prod(iv.shape)), wv.shape[1]
        idx = self.emit("broadcast", [self.emit("reshape", [iv], (n, 1), iv.dtype)], (n, d), iv.dtype)
        rows = self.emit("gather", [wv, idx], (n, d), wv.dtype, "axis = 0")
        return self.emit("reshape", [rows], out.shape, out.dtype)

    def op_mm(self, node, out, x, y):
        return self.emit("matmul", [self.value(x), self.value(y)], out.shape, out.dtype)

    op_bmm = op_matmul = op_mm

    def op_addmm(self, node, out, bias, x, y, beta=1, alpha=1):
        if beta != 1 or alpha != 1:
            raise ExportError("unsupported op aten.addmm with beta or alpha other than 1")
        m = self.emit("matmul", [self.value(x), self.value(y)], out.shape, out.dtype)
        return self.emit("add", [m, self.operand(bias, out.shape, out.dtype)], out.shape, out.dtype)

    def _binary(self, fop):
        def conv(node, out, x, y, alpha=1):
            # Compares take their operands' promoted dtype; the rest compute in the result's.
            dtype = out.dtype
            if fop in _COMPARES or fop in ("and", "or"):
                reals = [self.real[a] if isinstance(a, torch.fx.Node) else torch.tensor(a) for a in (x, y)]
                dtype = torch.result_type(*reals) if fop in _COMPARES else torch.bool
            ys = self.operand(y, out.shape, dtype)
            if alpha != 1:
                ys = self.emit("mul", [ys, self.constant(alpha, out.shape, dtype)], out.shape, dtype)
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
            return self.emit(fop, [v], out.shape, out.dtype, f"axes = {dims}, keepdim = {str(bool(keepdim)).lower()}")
        return conv

    def op__softmax(self, node, out, x, dim, half_to_float=False):
        v = self.value(x)
        return self.emit("softmax", [v], out.shape, out.dtype, f"axis = {dim % len(v.shape)}")

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

    def op_getitem(self, node, out, xs, i):
        parts = self.values.get(xs)
        if isinstance(parts, list):
            return parts[i]
        if node.args[0].target is torch.ops.aten.native_layer_norm.default and i == 0:
            return parts
        raise ExportError(f"unsupported op getitem of {_op_name(node.args[0].target)}")

    def op_cat(self, node, out, xs, dim=0):
        vs = [self.operand(x, tuple(self.real[x].shape), out.dtype) for x in xs]
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
        v = self.value(x)
        if len(shape) != 1 or w is None or b is None:
            raise ExportError("unsupported op aten.native_layer_norm over more than the last axis or without affine")
        return self.emit("layernorm", [v, self.value(w), self.value(b)], out[0].shape, out[0].dtype, f"eps = {_number(eps)}")


_COMPARES = {"eq", "ne", "lt", "le", "gt", "ge"}


for _name, _fop in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"), ("maximum", "max"),
                    ("minimum", "min"), ("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                    ("ge", "ge"), ("logical_and", "and"), ("logical_or", "or"), ("bitwise_and", "and"),
                    ("bitwise_or", "or")]:
    setattr(_Converter, "op_" + _name, (lambda f: lambda self, *a, **k: self._binary(f)(*a, **k))(_fop))
for _name, _fop in [("neg", "neg"), ("abs", "abs"), ("relu", "relu"), ("exp", "exp"), ("log", "log"),
                    ("sqrt", "sqrt"), ("rsqrt", "rsqrt"), ("reciprocal", "recip"), ("tanh", "tanh"), ("sin", "sin"),
                    ("cos", "cos"), ("sigmoid", "sigmoid"), ("erf", "erf"), ("silu", "silu"),
                    ("logical_not", "not"), ("bitwise_not", "not")]:
    setattr(_Converter, "op_" + _name, (lambda f: lambda self, *a, **k: self._unary(f)(*a, **k))(_fop))
for _name, _fop in [("mean", "mean"), ("sum", "sum"), ("amax", "reduce_max"), ("amin", "reduce_min")]:
    setattr(_Converter, "op_" + _name, (lambda f: lambda self, *a, **k: self._reduce(f)(*a, **k))(_fop))


def _capture(model, ids):
    params = dict(model.named_parameters())  # a tied weight once, under its first name
    buffers = dict(model.named_buffers())

    def forward(p, b, x):
        return functional_call(model, {**p, **b}, (x,))

    with torch.no_grad():
        gm = make_fx(forward)(params, buffers, ids)
    leaves, _ = tree_flatten((params, buffers, ids))
    kinds = ["param"] * len(params) + ["buffer"] * len(buffers) + ["input"]
    names = list(params) + list(buffers) + ["ids"]
    if len(leaves) != len(kinds):
        raise ExportError("internal: the captured graph's inputs do not match the model's parameters and buffers")
    return gm, leaves, kinds, names


def export(model, example_ids, out_dir):
    """Writes out_dir/model.fir and out_dir/weights.safetensors for `model` at the shape of
    `example_ids` (int64 [B, T]). Returns the PyTorch logits of the example, for checks."""
    if not isinstance(example_ids, torch.Tensor) or example_ids.dtype != torch.int64 or example_ids.dim() != 2:
        raise ExportError("the example ids must be an int64 tensor [B, T]")
    model = model.eval()
    sources = _SourceLines(model, (example_ids,))
    gm, leaves, kinds, names = _capture(model, example_ids)
    conv = _Converter(gm, leaves, kinds, names, sources)
    with torch.no_grad():
        conv.run()
        want = model(example_ids)
    if not isinstance(want, torch.Tensor) or want.dim() != 3:
        raise ExportError("forward(ids) must return the logits as one tensor [B, T, V]")
    text = ("// Exported by fusec.export from " + type(model).__name__ + f", ids [{example_ids.shape[0]}, "
            f"{example_ids.shape[1]}], torch {torch.__version__}.\nfunc @forward {{\n" + "\n".join(conv.lines) + "\n}\n")
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "model.fir.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    safetensors_io.save(os.path.join(out_dir, "weights.safetensors"), conv.tensors,
                        {"format": "pt", "fusec_model": type(model).__name__})
    os.replace(tmp, os.path.join(out_dir, "model.fir"))
    return want


def _load_class(spec):
    if ":" not in spec:
        raise ExportError(f"--model must be FILE.py:ClassName, got '{spec}'")
    path, cls = spec.rsplit(":", 1)
    if not os.path.isfile(path):
        raise ExportError(f"--model: no file '{path}'")
    mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    mod = importlib.util.module_from_spec(mod_spec)
    sys.modules[mod_spec.name] = mod
    mod_spec.loader.exec_module(mod)
    if not hasattr(mod, cls):
        raise ExportError(f"--model: {path} has no class '{cls}'")
    return getattr(mod, cls)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m fusec.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="FILE.py:ClassName")
    ap.add_argument("--kwargs", default="{}", help="the class's constructor arguments, as JSON")
    ap.add_argument("--state-dict", help="a torch.save'd state dict to load (default: the model's own init)")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed before constructing (default 0)")
    ap.add_argument("--out", required=True, help="the output directory")
    a = ap.parse_args(argv)
    try:
        if a.batch < 1 or a.seq < 1:
            raise ExportError(f"--batch and --seq must be at least 1, got {a.batch} and {a.seq}")
        try:
            kwargs = json.loads(a.kwargs)
        except json.JSONDecodeError as e:
            raise ExportError(f"--kwargs is not JSON: {e}") from None
        torch.manual_seed(a.seed)
        model = _load_class(a.model)(**kwargs)
        if a.state_dict:
            model.load_state_dict(torch.load(a.state_dict, map_location="cpu"))
        ids = torch.randint(0, 2, (a.batch, a.seq), dtype=torch.int64)  # values do not shape the graph
        export(model, ids, a.out)
    except ExportError as e:
        print(f"fusec.export: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
