"""Captures a PyTorch language model (forward(ids) -> logits) as an ATen-level fx graph:
torch.export with the core-ATen decompositions where torch >= 2.1, make_fx on older torch
(Debian's 1.13, what CI has). Either way the result is a Captured: the graph module and, for
each of its placeholders, the real tensor it stands for, its kind and its name:
  "param":    a parameter, under its first name in named_parameters() (a tied weight is one);
  "buffer":   a persistent buffer, one that state_dict() holds, under its state_dict name;
  "constant": a tensor that state_dict() does not hold (a buffer registered with
              persistent=False, a tensor constant the trace lifted), under its own name;
  "input":    the ids."""
import contextlib
import linecache
import os
import sys
from collections import namedtuple

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten

try:  # torch >= 2.0
    from torch.func import functional_call
except ImportError:  # torch 1.13
    from torch.nn.utils.stateless import functional_call

from .common import ExportError  # convert.py and attention.py import it from here too


# placeholders: [(fx node, real tensor, kind, name)] in graph order; how: "torch.export" or "make_fx".
Captured = namedtuple("Captured", "gm placeholders how")


def has_torch_export():
    return hasattr(torch, "export") and hasattr(torch.export, "export")


@contextlib.contextmanager
def _dropout_as_native():
    """F.dropout as aten.native_dropout while a train-mode model is captured: torch 1.13's
    make_fx would otherwise trace dropout's CPU decomposition (bernoulli_, div_, mul), a draw
    the converter cannot tell from any other random op."""
    import torch.nn.functional as F
    original = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if training and p > 0:
            return torch.ops.aten.native_dropout(input, p, True)[0]
        return input

    F.dropout = dropout
    try:
        yield
    finally:
        F.dropout = original


def capture(model, ids, how="auto", train=False):
    """train: capture the model in train mode, its dropout as aten.native_dropout (the
    model is left in eval mode)."""
    if train:
        model.train()
        try:
            with _dropout_as_native():
                return capture(model, ids, how)
        finally:
            model.eval()
    if how == "auto":
        how = "torch.export" if has_torch_export() else "make_fx"
    if how == "torch.export":
        if not has_torch_export():
            raise ExportError(f"torch.export needs torch >= 2.1, this is {torch.__version__}")
        return _capture_export(model, ids)
    if how == "make_fx":
        return _capture_make_fx(model, ids)
    raise ExportError(f"unknown capture '{how}' (auto, torch.export or make_fx)")


def _capture_make_fx(model, ids):
    params = dict(model.named_parameters())  # a tied weight once, under its first name
    buffers = dict(model.named_buffers())
    persistent = set(model.state_dict())  # state_dict() holds the persistent buffers only

    def forward(p, b, x):
        return functional_call(model, {**p, **b}, (x,))

    with torch.no_grad():
        gm = make_fx(forward)(params, buffers, ids)
    leaves, _ = tree_flatten((params, buffers, ids))
    kinds = ["param"] * len(params) + ["buffer" if n in persistent else "constant" for n in buffers] + ["input"]
    names = list(params) + list(buffers) + ["ids"]
    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not (len(leaves) == len(kinds) == len(nodes)):
        raise ExportError("internal: the captured graph's inputs do not match the model's parameters and buffers")
    return Captured(gm, list(zip(nodes, leaves, kinds, names)), "make_fx")


def _decompositions():
    """Core ATen, except scaled_dot_product_attention, which stays whole: it maps to fusec's
    attention composite directly (decomposed, it becomes the math form with a "safe softmax"
    whose fully-masked-row test has no fusec equivalent)."""
    table = torch.export.default_decompositions()
    for op in (torch.ops.aten.scaled_dot_product_attention.default,):
        table.pop(op, None)
    return table


def _capture_export(model, ids):
    from torch.export.graph_signature import InputKind
    with torch.no_grad():
        try:
            ep = torch.export.export(model, (ids,), strict=False)
        except Exception as e:  # torch's own message, first line: what could not be traced
            raise ExportError(f"torch.export failed: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None
        ep = ep.run_decompositions(_decompositions())
    first = {}  # a tensor's first name in named_parameters(): the name a tied weight keeps
    for name, p in model.named_parameters():
        first.setdefault(id(p), name)
    specs = {spec.arg.name: spec for spec in ep.graph_signature.input_specs}
    persistent = set(model.state_dict())
    placeholders = []
    for node in (n for n in ep.graph_module.graph.nodes if n.op == "placeholder"):
        spec = specs[node.name]
        if spec.kind == InputKind.USER_INPUT:
            placeholders.append((node, ids, "input", "ids"))
        elif spec.kind == InputKind.PARAMETER:
            p = model.get_parameter(spec.target)
            placeholders.append((node, p, "param", first.get(id(p), spec.target)))
        elif spec.kind == InputKind.BUFFER:
            t = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            placeholders.append((node, t, "buffer" if spec.target in persistent else "constant", spec.target))
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            placeholders.append((node, ep.constants[spec.target], "constant", spec.target))
        else:
            raise ExportError(f"unsupported graph input kind {spec.kind} ({spec.target})")
    return Captured(ep.graph_module, placeholders, "torch.export")


class SourceLines:
    """The model's source line of each ATen op call, from an eager run under a dispatch mode:
    what an unsupported-op error (of(): the op's first call) and a failed check of the export
    (at(): that node's own call) point at."""

    def __init__(self, model, args):
        self.first = {}
        self.calls = {}  # op key ("add") -> [(file, line number)] of each call, in order
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
        except ImportError:
            return
        calls = self.calls
        torch_dir = os.path.dirname(torch.__file__)
        here = os.path.dirname(os.path.abspath(__file__))
        ours = {}  # file name -> whether it is torch's or the exporter's (the frames skipped)

        class Recorder(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                key = str(func.overloadpacket).split("::")[-1].split(".")[-1]
                f = sys._getframe(1)  # frames, not traceback.extract_stack(): no source read per call
                while f is not None:
                    name = f.f_code.co_filename
                    if name not in ours:
                        path = os.path.abspath(name)
                        ours[name] = path.startswith(torch_dir) or path.startswith(here)
                    if not ours[name]:
                        break
                    f = f.f_back
                calls.setdefault(key, []).append((f.f_code.co_filename, f.f_lineno) if f is not None else None)
                return func(*args, **(kwargs or {}))

        with torch.no_grad(), Recorder():
            model(*args)
        for key, sites in calls.items():
            site = next((s for s in sites if s is not None), None)
            if site is not None:
                self.first[key] = _line(site)

    def of(self, op):
        key = op.split(".")[1] if op.startswith("aten.") else op
        return self.first.get(key, "source line unknown")

    def at(self, node, gm):
        """The source line of fx node `node` of `gm`: its op's k-th call in the eager run for
        the node that is the graph's k-th of that op, where the two count the op's calls
        alike (the trace and the eager run dispatch the same ops: make_fx's; a decomposition
        can change the count, and then the op's first call is what is known). torch.export
        records each node's own stack, which is used where present."""
        trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
        if trace:
            mine = [ln for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
            here = os.path.dirname(os.path.abspath(__file__))
            torch_dir = os.path.dirname(torch.__file__)
            for ln in reversed(mine):  # innermost first: the model's own frame nearest the op
                try:
                    path = ln.split('"')[1]
                    lineno = int(ln.split("line ")[1].split(",")[0])
                except (IndexError, ValueError):
                    continue
                full = os.path.abspath(path)
                if not full.startswith(torch_dir) and not full.startswith(here):
                    return _line((path, lineno))
        op = op_name_of(node)
        key = op.split(".")[1] if op.startswith("aten.") else op
        same = [n for n in gm.graph.nodes if n.op == "call_function" and _key(op_name_of(n)) == key]
        sites = self.calls.get(key, [])
        if len(same) == len(sites) and node in same and sites[same.index(node)] is not None:
            return _line(sites[same.index(node)])
        return self.first.get(key, "source line unknown")


def op_name_of(node):
    t = node.target
    return str(t) if isinstance(t, torch._ops.OpOverload) else getattr(t, "__name__", str(t))


def _key(op):
    return op.split(".")[1] if op.startswith("aten.") else op


def _line(site):
    path, lineno = site
    return f"{os.path.basename(path)}:{lineno}: {linecache.getline(path, lineno).strip()}"
