"""The exporter checks what it wrote (issue 42): before the files of an export are renamed into
place (common.write_files' `check`), fusec's own CPU interpreter runs them, and the results
are compared with PyTorch's on the same weights and ids:

  * forward: `fusec run --fir --program forward` on the written model.fir and
    weights.safetensors, on the example ids, against the model's logits (eval mode), and
    again on ids drawn over the whole vocabulary (an export that holds something computed
    from the example ids as a constant matches on those alone);
  * backward: the gradient of a scalar of the logits, the mean cross entropy over fixed
    targets (the loss train_step appends), of every parameter, against autograd's, on the
    drawn ids. fusec has no program that returns gradients (`fusec run` runs forward and
    train_step), so they are read off one AdamW step whose update inverts exactly
    (Verifier.backward).

Past a bound, the export fails with one line. For the forward it names the first converted op
whose value diverges and the model's source line of that op (locate()); for the backward, the
parameter whose gradient diverges and the op that reads it. fusec is found as FUSEC_BIN, else
`fusec` on PATH, else this checkout's build/fusec; where there is none the export fails,
telling how to give one or to skip the check (--no-verify, export(verify=False)): an export
that is silently not checked is what this module exists to prevent."""
import math
import os
import shutil
import subprocess
import tempfile

import torch

from . import safetensors_io
from .common import ExportError
from .convert import Value, op_name

# Forward bound: max |fusec - PyTorch| over the logits <= LOGITS_BOUND * max(1, max |logits|).
# Both are fp32 evaluations of the same function by different kernels (summation orders,
# exp and erf implementations), so they differ by rounding: ~1e-7 relative per op, growing
# with depth to ~3e-7 on the Hugging Face corpus of issue 42 and ~1e-6 on the README's
# GPT-2 small. 1e-4 leaves two orders of magnitude for deeper and wider models, and is the
# fp32 bound the repository's other PyTorch comparisons use; an error in a mapping (a wrong
# op, a dropped scale, a transposed operand) moves the logits by a large fraction of their
# size, far past it. Relative to the largest logit, as rounding is; floored at 1 so that the
# near-zero logits of a freshly initialised model are not held to a tighter absolute bound
# than trained ones.
LOGITS_BOUND = 1e-4
LOSS_BOUND = 1e-4  # |loss difference| <= LOSS_BOUND * max(1, |loss|), for the same reasons
# Backward bound, per parameter: max |g_fusec - g_torch| <= GRAD_BOUND * max(its largest
# |g_torch|, GRAD_FLOOR * the largest |g_torch| of any parameter). Per parameter, so that a
# small parameter's wrong gradient is not hidden by a large one's; the floor, because some
# gradients are zero in exact arithmetic and computed as rounding noise (GPT-2's key bias: a
# softmax ignores a shift of its row), which two implementations do not share. A backward
# sums more terms than the forward and this one is read off a weight update (below), so the
# bound is 1e-3, the bound of the repository's AdamW-update comparisons; a wrong derivative
# is off by a large fraction of the gradient.
GRAD_BOUND = 1e-3
GRAD_FLOOR = 1e-3
# locate(): an op's value computed by fusec from PyTorch's own values of its operands, against
# PyTorch's value of it, by the forward's rule. One op on exact operands only rounds, so a
# mapping within the bound is right and the first one past it is the first wrong one.
LOCAL_BOUND = 1e-4

SKIP_HINT = "pass --no-verify (Python: export(..., verify=False)) to export without the check"


def find_fusec():
    """The fusec binary that checks an export: $FUSEC_BIN, else `fusec` on PATH, else this
    checkout's build/fusec. FUSEC_BIN set to something that is not an executable file is an
    error rather than a reason to look elsewhere (it says which binary the user wants)."""
    given = os.environ.get("FUSEC_BIN")
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return os.path.abspath(given)
        raise ExportError(f"FUSEC_BIN is '{given}', which is not an executable file; point it at the fusec binary "
                          f"that checks the export, or {SKIP_HINT}")
    on_path = shutil.which("fusec")
    if on_path:
        return os.path.abspath(on_path)
    built = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "fusec"))
    if os.path.isfile(built) and os.access(built, os.X_OK):
        return built
    raise ExportError(f"checking the export needs the fusec binary, and there is none in FUSEC_BIN, on PATH or at "
                      f"{built}: build it (scripts/build) or set FUSEC_BIN=/path/to/fusec, or {SKIP_HINT}")


class Verifier:
    """What the check needs from export(): the converted graph (for locate), the model and the
    example ids; check(paths) is write_files' callback, on the written temporaries."""

    def __init__(self, fusec, conv, logits_value, sources, model, ids, want):
        self.fusec, self.conv, self.logits_value, self.sources = fusec, conv, logits_value, sources
        self.model, self.ids, self.want = model, ids, want
        self.result = None  # after check(): what it measured, for the summary line

    def check(self, paths):
        fir, weights = paths["model.fir"], paths["weights.safetensors"]
        tmp = tempfile.mkdtemp(prefix="fusec-verify-")
        try:
            logits_err = self.forward(fir, weights, tmp)
            other_err, loss_err, grad_err = self.backward(fir, weights, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.result = {"logits": max(logits_err, other_err), "loss": loss_err, "gradients": grad_err}

    # ---- forward
    def forward(self, fir, weights, tmp):
        inputs = os.path.join(tmp, "ids.safetensors")
        _write(inputs, {"ids": self.ids})
        out = os.path.join(tmp, "forward.safetensors")
        self.run_fusec("the export's forward", "--fir", fir, "--weights", weights, "--inputs", inputs, "--out", out,
                       "--program", "forward", "--device", "cpu")
        got = safetensors_io.load(out)["logits"]
        want = self.want.detach().float()
        err = _max_diff(got, want)
        bound = LOGITS_BOUND * max(1.0, want.abs().max().item())
        if not err <= bound:  # NaN fails too
            where = self.locate(tmp)
            raise ExportError(f"the export does not compute the model: fusec's logits differ from PyTorch's by "
                              f"{err:.2e} (bound {bound:.1e}); {where}; {SKIP_HINT}")
        return err / max(1.0, want.abs().max().item())

    def locate(self, tmp):
        """Where the forward diverges, as a phrase for the error line. One fusec run of a probe:
        model.fir's function with every use of a converted node's value replaced by a param
        holding PyTorch's value of that node (its recorded run, Converter.realv), returning every
        such value. Each converted op is so evaluated by fusec on exactly PyTorch's operands,
        so its difference from PyTorch's result is its own (its mapping's, or fusec's op's),
        not one accumulated from the ops before it; the first op in the graph past
        LOCAL_BOUND is the first that diverges. A bisection over prefixes of the graph would
        name the first op whose accumulated error crosses a bound, which can lie well after
        the wrong one; and the converter's own Python evaluation would check its mappings
        against a second model of fusec's ops rather than fusec."""
        try:
            checked, text, tensors = self.probe()
        except Exception as e:  # a diagnosis that fails must not hide the failure it diagnoses
            return f"locating the op failed ({type(e).__name__}: {e})"
        if not checked:
            return "no converted op's value is recorded to compare"
        fir, weights = os.path.join(tmp, "probe.fir"), os.path.join(tmp, "probe.safetensors")
        with open(fir, "w") as f:
            f.write(text)
        _write(weights, tensors)
        out = os.path.join(tmp, "probe.out.safetensors")
        try:
            self.run_fusec("the probe that locates the divergence", "--fir", fir, "--weights", weights, "--inputs",
                           os.path.join(tmp, "ids.safetensors"), "--out", out, "--program", "forward",
                           "--device", "cpu", hint=False)
        except ExportError as e:
            return f"locating the op failed ({e})"
        flat = safetensors_io.load(out)["logits"].reshape(-1)
        worst, at = None, 0
        for value, want in checked:
            n = want.numel()
            got = flat[at:at + n].reshape(want.shape)
            at += n
            want = want.double()
            err = _max_diff(got, want)
            finite = want[torch.isfinite(want)]
            bound = LOCAL_BOUND * max(1.0, finite.abs().max().item() if finite.numel() else 0.0)
            if not err <= bound:
                return (f"the first op that diverges is {self.describe(value)}: given PyTorch's values of its "
                        f"operands, fusec's result differs from PyTorch's by {err:.2e} (bound {bound:.1e})")
            if worst is None or err / bound > worst[0]:
                worst = (err / bound, value, err)
        return (f"no single op diverges on its own (each converted op, given PyTorch's values of its operands, is "
                f"within {LOCAL_BOUND:.0e}); the largest such difference is {worst[2]:.2e}, at "
                f"{self.describe(worst[1])}")

    def probe(self):
        """(the values checked with PyTorch's value of each, the probe's .fir text, its weights)."""
        conv = self.conv
        live, work = set(), [self.logits_value]  # the Defs the logits need, as Converter.finish finds them
        while work:
            d = conv.defs[work.pop().name]
            if id(d) not in live:
                live.add(id(d))
                work.extend(d.operands)
        defs = [d for d in conv.order if id(d) in live]
        used = {self.logits_value.name} | {o.name for d in defs for o in d.operands}

        memo = {}

        def recorded(v):
            """PyTorch's value of `v` where it is a converted node's and fits its type, else None."""
            if v.name not in memo:
                memo[v.name] = _recorded(v)
            return memo[v.name]

        def _recorded(v):
            real = conv.realv.get(v.name)
            if not isinstance(real, torch.Tensor) or tuple(real.shape) != v.shape or real.dtype != v.dtype:
                return None
            real = real.detach()
            if real.dtype in (torch.int64, torch.int32) and real.numel() and real.abs().max().item() > 2 ** 24:
                return None  # not exact as the f32 param that would carry it
            return real

        taken = set(conv.tensors) | {_param_name(d) for d in defs if d.op == "param"}
        tensors, lines, checked, fed = {}, [], [], {}
        counter = [0]

        def fresh(hint):
            counter[0] += 1
            return f"verify.{hint}.{counter[0]}"

        def feed(v):
            """A param holding PyTorch's value of `v`, as `v`'s type (params are f32)."""
            if v.name in fed:
                return fed[v.name]
            real = recorded(v)
            name = f"_verify.{len(fed)}"
            while name in taken:  # a model's own tensor of that name
                name += "_"
            taken.add(name)
            tensors[name] = real.to(torch.float32).contiguous()
            p = Value(fresh("in"), v.shape, torch.float32)
            lines.append(f'  %{p.name} = param() {{name = "{name}", role = "buffer"}} : {p.type}')
            if v.dtype == torch.bool:
                zero = Value(fresh("c"), v.shape, torch.float32)
                lines.append(f"  %{zero.name} = constant() {{value = 0.0}} : {zero.type}")
                t = Value(fresh("in"), v.shape, v.dtype)
                lines.append(f"  %{t.name} = ne(%{p.name}, %{zero.name}) : {t.type}")
                p = t
            elif v.dtype != torch.float32:
                t = Value(fresh("in"), v.shape, v.dtype)
                lines.append(f"  %{t.name} = cast(%{p.name}) : {t.type}")
                p = t
            fed[v.name] = p
            return p

        def source(d):
            return d.op in ("input", "param", "constant")

        for d in defs:
            if d.op == "param":  # the model's params, under their names, from its own weights
                tensors[_param_name(d)] = d.meta["const"] if "const" in d.meta else conv.tensors[_param_name(d)]
            operands = [feed(o) if (recorded(o) is not None and not source(conv.defs[o.name])) else o
                        for o in d.operands]
            names = ", ".join(f"%{r.name}" for r in d.results)
            ops = ", ".join(f"%{o.name}" for o in operands)
            types = ", ".join(r.type for r in d.results)
            lines.append(f"  {names} = {d.op}({ops}){' {' + d.attrs + '}' if d.attrs else ''} : {types}")
            if not source(d):
                checked.extend((r, recorded(r)) for r in d.results
                               if r.name in used and recorded(r) is not None and recorded(r).numel())
        # Every checked value, flattened as f32, into one [B, T, N] "logits" (fusec's imported
        # forward returns one): N at least the vocabulary, which fusec checks the ids against.
        flats = []
        for v, _ in checked:
            n = int(math.prod(v.shape))
            f = Value(fresh("flat"), (n,), v.dtype)
            lines.append(f"  %{f.name} = reshape(%{v.name}) : {f.type}")
            if v.dtype != torch.float32:
                g = Value(fresh("flat"), (n,), torch.float32)
                if v.dtype == torch.bool:
                    one, zero = Value(fresh("c"), (n,), torch.float32), Value(fresh("c"), (n,), torch.float32)
                    lines.append(f"  %{one.name} = constant() {{value = 1.0}} : {one.type}")
                    lines.append(f"  %{zero.name} = constant() {{value = 0.0}} : {zero.type}")
                    lines.append(f"  %{g.name} = select(%{f.name}, %{one.name}, %{zero.name}) : {g.type}")
                else:
                    lines.append(f"  %{g.name} = cast(%{f.name}) : {g.type}")
                f = g
            flats.append(f)
        b, t = self.ids.shape
        total = sum(f.shape[0] for f in flats)
        vocab = self.want.shape[-1]
        width = max(vocab, -(-total // (b * t)))
        pad = b * t * width - total
        if pad:
            z = Value(fresh("pad"), (pad,), torch.float32)
            lines.append(f"  %{z.name} = constant() {{value = 0.0}} : {z.type}")
            flats.append(z)
        cat = Value(fresh("all"), (b * t * width,), torch.float32)
        lines.append(f"  %{cat.name} = concat({', '.join('%' + f.name for f in flats)}) {{axis = 0}} : {cat.type}")
        out = Value(fresh("out"), (b, t, width), torch.float32)
        lines.append(f"  %{out.name} = reshape(%{cat.name}) : {out.type}")
        text = "// fusec.export's probe: each converted op on PyTorch's values of its operands\nfunc @forward {\n" + \
            "\n".join(lines) + f"\n  return %{out.name}\n}}\n"
        return [(v, real) for v, real in checked], text, tensors

    def describe(self, value):
        """`aten.add.Tensor (model.py:12: x = x + h)`: the fx node whose value `value` is."""
        node = self.node_of().get(value.name)
        if node is None:
            return f"fusec op '{self.conv.defs[value.name].op}' (%{value.name})"
        return f"{op_name(node.target)} ({self.sources.at(node, self.conv.gm)})"

    def node_of(self):
        if not hasattr(self, "_node_of"):
            self._node_of = {}
            for node in self.conv.gm.graph.nodes:
                v = self.conv.values.get(node)
                for x in (v if isinstance(v, list) else [v]):
                    if isinstance(x, Value):
                        self._node_of.setdefault(x.name, node)
        return self._node_of

    # ---- backward
    def backward(self, fir, weights, tmp):
        """The mean cross entropy of the logits over fixed targets, differentiated by fusec
        (train_step) and by autograd, per parameter, on other ids than the example's: ids drawn
        over the whole vocabulary (the CLI's example ids are 0 and 1 only, which leave most
        embedding rows out) and not those the graph was captured with, so that an export that
        holds something computed from the example ids as a constant fails here. The logits
        on these ids are compared first, by the forward's rule. Returns (that logits error, the
        loss error, the worst gradient error), each relative to its bound's scale."""
        vocab = self.want.shape[-1]
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, tuple(self.ids.shape), generator=g)
        targets = torch.randint(0, vocab, tuple(self.ids.shape), generator=g)
        params = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]  # a tied weight once
        with torch.enable_grad():
            logits = self.model(ids)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
            grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        other_err = self.other_ids(fir, weights, tmp, ids, logits.detach().float())
        # f32 as autograd computed them (a copy in f64 of every gradient would double their memory).
        want = {n: (gr if gr is not None else torch.zeros_like(p)).detach() for (n, p), gr in zip(params, grads)}
        del logits, grads
        largest = max([x.abs().max().item() for x in want.values() if x.numel()] + [0.0])
        # One AdamW step with betas 0 and no weight decay moves each entry by lr g / (|g| + eps)
        # (its bias corrections are 1, m = g, v = g^2), which is inverted for g below. eps, the
        # power of two at or above the largest gradient, keeps |g| / eps <= ~1, where the
        # inversion is well conditioned; lr = 1024 eps makes the move larger than most weights,
        # so the f32 rounding of the updated weight (2^-24 of max(|w|, |move|)) costs at most
        # ~6e-8 eps in g. Powers of two are exact as fusec's f32 constants.
        eps = 2.0 ** math.ceil(math.log2(largest)) if largest > 0 else 1.0
        lr = 1024 * eps
        inputs = os.path.join(tmp, "ids_targets.safetensors")
        _write(inputs, {"ids": ids, "targets": targets})
        out = os.path.join(tmp, "step.safetensors")
        self.run_fusec("the export's train_step", "--fir", fir, "--weights", weights, "--inputs", inputs, "--out", out,
                       "--program", "train_step", "--steps", "1", "--lr", repr(lr), "--betas", "0,0", "--eps",
                       repr(eps), "--weight-decay", "0", "--no-dropout", "--device", "cpu")
        got = _Lazy(out)  # one tensor at a time: the updated weights are as large as the model
        fusec_loss, torch_loss = got["loss"].reshape(-1)[0].item(), loss.item()
        loss_err = abs(fusec_loss - torch_loss)
        loss_bound = LOSS_BOUND * max(1.0, abs(torch_loss))
        if not loss_err <= loss_bound:
            raise ExportError(f"the export does not compute the model's loss: fusec's mean cross entropy is "
                              f"{fusec_loss:.7g}, PyTorch's {torch_loss:.7g} (bound {loss_bound:.1e}); {SKIP_HINT}")
        before = self.conv.tensors
        bad, worst = [], 0.0
        for n, w in want.items():
            if n not in got:
                raise ExportError(f"fusec's train_step on the export does not update the parameter '{n}'; {SKIP_HINT}")
            d = before[n].double() - got[n].double()
            mine = d * eps / (lr - d.abs())
            w = w.double()
            scale = max(w.abs().max().item() if w.numel() else 0.0, GRAD_FLOOR * largest)
            err = _max_diff(mine, w) / scale if scale > 0 else _max_diff(mine, w)
            worst = err if not err <= worst else worst  # NaN stays
            if not err <= GRAD_BOUND:
                bad.append((n, err))
        if bad:
            # A wrong derivative at some op makes the gradients of the parameters read before it
            # wrong, and leaves those read after it right: of the wrong ones, the one read last
            # is nearest to it.
            order = self.first_reads()
            n, err = max(bad, key=lambda b: order.get(b[0], (-1, None))[0])
            reader = order.get(n, (-1, None))[1]
            where = f", read by {op_name(reader.target)} ({self.sources.at(reader, self.conv.gm)})" if reader else ""
            more = (f"; {len(bad)} parameters' gradients diverge and this is the one read last, so the wrong "
                    f"derivative is at or after that op" if len(bad) > 1 else "")
            raise ExportError(f"the export does not differentiate as the model does: fusec's gradient of '{n}'{where} "
                              f"differs from autograd's by {err:.2e} of its largest (bound {GRAD_BOUND:.0e}){more}; "
                              f"{SKIP_HINT}")
        return other_err, loss_err / max(1.0, abs(torch_loss)), worst

    def other_ids(self, fir, weights, tmp, ids, want):
        """fusec's forward on `ids` (not the example's) against PyTorch's logits `want`."""
        inputs, out = os.path.join(tmp, "other_ids.safetensors"), os.path.join(tmp, "other.safetensors")
        _write(inputs, {"ids": ids})
        self.run_fusec("the export's forward", "--fir", fir, "--weights", weights, "--inputs", inputs, "--out", out,
                       "--program", "forward", "--device", "cpu")
        err = _max_diff(safetensors_io.load(out)["logits"], want)
        scale = max(1.0, want.abs().max().item())
        if not err <= LOGITS_BOUND * scale:
            raise ExportError(f"the export computes the model on the example ids but not on others: fusec's logits "
                              f"differ from PyTorch's by {err:.2e} (bound {LOGITS_BOUND * scale:.1e}) on ids drawn "
                              f"over the vocabulary, so it holds something computed from the example ids (the ids must "
                              f"stay inputs of every op that reads them); {SKIP_HINT}")
        return err / scale

    def first_reads(self):
        """Parameter name -> (the graph position of the first op that reads it, that op)."""
        conv, where = self.conv, {}
        position = {node: i for i, node in enumerate(conv.gm.graph.nodes)}
        for node, (leaf, kind, name) in conv.placeholders.items():
            if kind == "param" and node.users:
                first = min(node.users, key=lambda u: position[u])
                where[name] = (position[first], first)
        return where

    def run_fusec(self, what, *args, hint=True):
        """`fusec run ARGS`; its failure is one line with fusec's own last line."""
        r = subprocess.run([self.fusec, "run", *args], capture_output=True, text=True)
        if r.returncode:
            said = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
            raise ExportError(f"fusec ({self.fusec}) cannot run {what}: {said}" + (f"; {SKIP_HINT}" if hint else ""))


class _Lazy:
    """A safetensors file's tensors read one at a time, by name (`in`, [])."""

    def __init__(self, path):
        import json
        import struct
        self.path = path
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            self.header = json.loads(f.read(n))
        self.header.pop("__metadata__", None)
        self.base = 8 + n

    def __contains__(self, name):
        return name in self.header

    def __getitem__(self, name):
        h = self.header[name]
        dtype = {"F32": torch.float32, "I64": torch.int64, "BF16": torch.bfloat16, "BOOL": torch.bool}[h["dtype"]]
        b, e = h["data_offsets"]
        if e == b:
            return torch.zeros(h["shape"], dtype=dtype)
        with open(self.path, "rb") as f:
            f.seek(self.base + b)
            buf = bytearray(f.read(e - b))
        return torch.frombuffer(buf, dtype=dtype).reshape(h["shape"])


def _param_name(d):
    a = d.attrs
    return a.split('name = "', 1)[1].split('"', 1)[0]


def _max_diff(got, want):
    """max |got - want|, where equal values (infinities, NaN with NaN) count as no difference."""
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        return float("inf")
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    diff = torch.where(same, torch.zeros_like(got), (got - want).abs())
    return diff.max().item() if diff.numel() else 0.0


def _write(path, tensors):
    """A plain write (the check's scratch files; write_files' renames are for the export's own)."""
    with open(path, "wb") as f:
        safetensors_io.write(f, tensors)
