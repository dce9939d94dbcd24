"""The exporter checks what it wrote (issue 42, fusec/verify.py): before an export is renamed
into place, fusec's CPU interpreter runs the written model.fir and weights.safetensors (forward
on the example ids, and one train_step, whose update gives each parameter's gradient) against
PyTorch's logits, loss and autograd gradients.

  - Correct models pass, and say so: the four architectures of export_test.py (a CS336 LM,
    nanoGPT's GPT-2 with a tied weight and a key bias whose gradient is rounding noise, a
    Llama with grouped-query attention, nn.MultiheadAttention), and the CLI's one line reports
    what was measured. So do the ops Hugging Face families need beyond theirs (models/hf_ops.py:
    an embedding's padding_idx, LayerNorm without affine, aten.index.Tensor); with the
    padding_idx ignored, the pad row's gradient fails the export naming the embedding.
  - A planted wrong mapping (one ATen mapping of the converter broken on purpose: mean emitting
    sum, add emitting sub, only one of GPT-2's several adds emitting sub) fails the export with
    one line naming that op and its own source line in the model; the directory is left as it
    was (the previous export, byte for byte, no temporary).
  - A planted mapping that computes the right forward but cuts the gradient (a node that reads
    a weight replaced by a stored constant of its value) fails it naming that weight's gradient.
  - A planted mapping that bakes the example ids in (the embedding stored as a constant of its
    value on them: right on the example ids alone) fails it, on other ids.
  - No fusec to check with (FUSEC_BIN naming no executable) fails before the model runs, with
    one line saying how to give one or to pass --no-verify; --no-verify exports unchecked and
    says so. A fusec that cannot run the export fails it with fusec's own line.
  - A planted wrong VJP (fusec's autodiff with FUSEC_TEST_WRONG_VJP=silu: every derivative
    rule of silu doubled, passes/autodiff.cpp) fails the export naming a weight whose gradient
    goes through it; the forward is untouched.

    FUSEC_BIN=build/fusec python3 tests/python/export_verify_test.py --fusec build/fusec
Exits 77 (ctest's skip) with the reason when this python has no torch."""
import argparse
import contextlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
FRONTEND = os.path.join(HERE, "..", "..", "frontend", "python")
sys.path.insert(0, FRONTEND)
sys.path.insert(0, os.path.join(HERE, "models"))
sys.path.insert(0, HERE)  # tally

try:
    import torch
    from fusec import export as fx
    from fusec.common import ExportError
    from fusec.convert import Converter, op_name
except ImportError:
    torch = None

from tally import check, exit_code  # noqa: E402

MODELS = {  # name -> (file, class, constructor kwargs), export_test.py's odd configurations
    "cs336": ("cs336_lm.py", "TransformerLM",
              dict(vocab_size=37, context_length=16, d_model=32, num_layers=2, num_heads=2, d_ff=64)),
    "gpt2": ("gpt2.py", "GPT", dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=32)),
    "llama": ("llama.py", "Transformer",
              dict(vocab_size=37, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, max_seq_len=16)),
    "mha": ("mha.py", "MultiheadAttentionLM", dict(vocab_size=37, context_length=16, d_model=32, n_head=4, n_layer=2)),
}
B, T, V = 2, 12, 37


def build(name):
    import importlib
    file, cls, kwargs = MODELS[name]
    torch.manual_seed(0)
    return getattr(importlib.import_module(os.path.splitext(file)[0]), cls)(**kwargs)


def example_ids():
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))


def source_line(file, text):
    """`file:N: <line>` of the first line of models/file that contains `text`."""
    with open(os.path.join(HERE, "models", file)) as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return f"{file}:{n}: {line.strip()}"
    raise AssertionError(f"{file} has no line with {text!r}")


def listing(d):
    if not os.path.isdir(d):
        return None
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def export_fails(out, plant, model_name):
    """Exports `model_name` into `out` under the mock.patch `plant`; the ExportError's message
    (None if it exported) and whether `out` is as it was."""
    before = listing(out)
    with plant:
        try:
            fx.export(build(model_name), example_ids(), out)
            msg = None
        except ExportError as e:
            msg = str(e)
    return msg, listing(out) == before


def correct_models_pass(tmp):
    for name in MODELS:
        out = os.path.join(tmp, name)
        try:
            done = fx.export(build(name), example_ids(), out)
            v, err = done.verified, ""
        except ExportError as e:
            v, err = None, str(e)
        ok = v is not None and v["logits"] < 1e-5 and v["loss"] < 1e-5 and v["gradients"] < 1e-4
        check(ok and os.path.isfile(os.path.join(out, "model.fir")),
              f"{name}: the export checks itself and passes: logits, loss and gradients within {v} ({err})")


def hf_ops(tmp):
    """The ops Hugging Face families need beyond the plain LMs' (models/hf_ops.py: an
    embedding with a padding_idx, LayerNorm without affine or bias, aten.index.Tensor by the
    ids and by a static index with negative entries) export and pass the check; with the
    embedding's padding_idx ignored (the pad token's row getting a gradient, which
    nn.Embedding(padding_idx=...) never gives it) the export fails naming that weight."""
    import importlib
    def model():
        torch.manual_seed(0)
        return importlib.import_module("hf_ops").PadNormIndexLM()
    ids = torch.randint(0, 7, (2, 12), generator=torch.Generator().manual_seed(1))
    out = os.path.join(tmp, "hf_ops")
    try:
        done = fx.export(model(), ids, out)
        v, err = done.verified, ""
    except ExportError as e:
        v, err = None, str(e)
    text = open(os.path.join(out, "model.fir")).read() if os.path.isfile(os.path.join(out, "model.fir")) else ""
    ok = v is not None and v["logits"] < 1e-5 and v["loss"] < 1e-5 and v["gradients"] < 1e-4
    check(ok and "stop_gradient(" in text and text.count(" = gather(") == 3 and text.count(" = layernorm(") == 2,
          f"hf_ops: a padding_idx, LayerNorm without affine or bias and aten.index.Tensor export and pass the check "
          f"({v} {err})")
    real = Converter.op_embedding
    plant = mock.patch.object(Converter, "op_embedding", lambda self, node, o, w, i, *rest: real(self, node, o, w, i))
    before = listing(out)
    with plant:
        try:
            fx.export(model(), ids, out)
            msg = None
        except ExportError as e:
            msg = str(e)
    check(msg is not None and "fusec's gradient of 'emb.weight'" in msg and listing(out) == before,
          f"hf_ops: the embedding's padding_idx ignored fails the export naming emb.weight ({msg})")


def planted_forward(tmp):
    # mean emits sum: the first mean is the CS336 LM's RMSNorm's.
    out = os.path.join(tmp, "cs336")  # correct_models_pass's export: it must stay
    plant = mock.patch.object(Converter, "op_mean", lambda self, *a, **k: self._reduce("sum")(*a, **k))
    msg, kept = export_fails(out, plant, "cs336")
    where = source_line("cs336_lm.py", "x.pow(2).mean(-1, keepdim=True)")
    check(msg is not None and "the first op that diverges is aten.mean.dim (" + where + ")" in msg and kept,
          f"mean emitting sum fails the export naming aten.mean.dim and {where}, the previous export as it was "
          f"({msg})")

    # add emits sub: GPT-2's first add, the token and position embeddings'.
    out = os.path.join(tmp, "gpt2")
    plant = mock.patch.object(Converter, "op_add", lambda self, *a, **k: self._binary("sub")(*a, **k))
    msg, kept = export_fails(out, plant, "gpt2")
    where = source_line("gpt2.py", "x = self.transformer.wte(idx) + self.transformer.wpe(pos)")
    check(msg is not None and "the first op that diverges is aten.add.Tensor (" + where + ")" in msg and kept,
          f"add emitting sub fails the export naming aten.add.Tensor and {where} ({msg})")

    # Only the third add of GPT-2 emits sub (its first block's residual after the MLP; the
    # first is the embeddings', the second the residual after attention): the line named is
    # that add's own, not the first add's (SourceLines.at: the k-th add of the graph is the
    # k-th add the eager run called).
    real_add, count = Converter.op_add, [0]

    def third_add(self, *a, **k):
        count[0] += 1
        return self._binary("sub")(*a, **k) if count[0] == 3 else real_add(self, *a, **k)
    msg, _ = export_fails(os.path.join(tmp, "gpt2_third"), mock.patch.object(Converter, "op_add", third_add), "gpt2")
    where = source_line("gpt2.py", "return x + self.mlp(self.ln_2(x))")
    check(msg is not None and "the first op that diverges is aten.add.Tensor (" + where + ")" in msg,
          f"only GPT-2's third add emitting sub: the line named is that add's own, {where} ({msg})")


def planted_backward(tmp):
    """The first node that reads a weight (not an embedding, whose value is a tensor) becomes a
    stored constant of its PyTorch value: the forward is exact, the weight gets no gradient."""
    real_convert, planted = Converter.convert, []

    def convert(self, node, out):
        reads = [a for a in node.all_input_nodes if a.op == "placeholder" and self.placeholders[a][1] == "param"]
        if not planted and reads and isinstance(out, torch.Tensor) and op_name(node.target) != "aten.embedding.default":
            planted.append(self.placeholders[reads[0]][2])
            self.static[node] = out
            v = self.values[node] = self.materialize(node)
            return v
        return real_convert(self, node, out)
    msg, kept = export_fails(os.path.join(tmp, "gpt2_cut"), mock.patch.object(Converter, "convert", convert), "gpt2")
    check(msg is not None and planted and f"fusec's gradient of '{planted[0]}'" in msg and "gpt2.py:" in msg and kept,
          f"a mapping that cuts a weight's gradient fails the export naming the weight "
          f"({planted[0] if planted else None}) and its line, nothing written ({msg})")


def planted_vjp(tmp):
    """fusec's own derivative of silu doubled (the planted fault passes/autodiff.cpp reads from
    FUSEC_TEST_WRONG_VJP): the CS336 LM's SwiGLU weights before it get wrong gradients."""
    msg, kept = export_fails(os.path.join(tmp, "cs336_vjp"), mock.patch.dict(os.environ, {"FUSEC_TEST_WRONG_VJP": "silu"}),
                             "cs336")
    check(msg is not None and "fusec's gradient of '" in msg and kept,
          f"a wrong VJP in fusec's autodiff fails the export naming a weight's gradient, nothing written ({msg})")


def planted_baked_ids(tmp):
    """The embedding's result on the example ids stored as a constant: the forward on those ids
    is exact, on any others it is not."""
    def baked(self, node, out, *args):
        self.static[node] = out
        return self.materialize(node)
    msg, kept = export_fails(os.path.join(tmp, "cs336_baked"), mock.patch.object(Converter, "op_embedding", baked),
                             "cs336")
    check(msg is not None and msg.startswith("the export computes the model on the example ids but not on others") and
          kept, f"an export that bakes the example ids in fails on other ids, nothing written ({msg})")


def cli(tmp):
    """The CLI: a success says what the check measured; a planted wrong mapping is one line and
    exit 1 (in this process, for the patch); no fusec to check with is one line before the
    model runs; --no-verify exports unchecked and says so; a fusec that cannot run the export
    fails it with fusec's own words."""
    file, cls, kwargs = MODELS["cs336"]
    spec = os.path.join(HERE, "models", file) + ":" + cls
    args = ["--model", spec, "--kwargs", json.dumps(kwargs), "--batch", str(B), "--seq", str(T)]
    env = dict(os.environ, PYTHONPATH=FRONTEND)

    def exporter(out, *more, fusec_bin=None):
        e = dict(env, FUSEC_BIN=fusec_bin) if fusec_bin is not None else env
        return subprocess.run([sys.executable, "-m", "fusec.export", *args, "--out", out, *more], capture_output=True,
                              text=True, env=e, timeout=300)

    out = os.path.join(tmp, "cli")
    r = exporter(out)
    said = re.search(r"; checked by fusec's CPU interpreter against PyTorch: logits, loss and gradients within (\S+), "
                     r"(\S+) and (\S+) relative$", r.stdout.strip())
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 1 and said is not None and
          all(float(x) < 1e-4 for x in said.groups()),
          f"the CLI's one line says what the check measured ({r.stdout.strip()} {r.stderr.strip()[-300:]})")

    err = io.StringIO()
    before = listing(out)
    with mock.patch.object(Converter, "op_mean", lambda self, *a, **k: self._reduce("sum")(*a, **k)), \
            contextlib.redirect_stderr(err):
        rc = fx.main(args + ["--out", out])
    lines = err.getvalue().strip().splitlines()
    check(rc == 1 and len(lines) == 1 and lines[0].startswith("fusec.export: error: the export does not compute") and
          "aten.mean.dim (cs336_lm.py:" in lines[0] and "--no-verify" in lines[0] and listing(out) == before,
          f"a planted wrong mapping through the CLI: one line naming the op, exit 1, the export as it was "
          f"({lines})")

    missing = os.path.join(tmp, "no", "fusec")
    never = os.path.join(tmp, "never")
    r = exporter(never, fusec_bin=missing)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and f"FUSEC_BIN is '{missing}'" in lines[0] and
          "--no-verify" in lines[0] and not os.path.exists(never),
          f"FUSEC_BIN naming no executable: one line naming it and --no-verify, exit 1, nothing written ({lines})")
    r = exporter(never, "--no-verify", fusec_bin=missing)
    check(r.returncode == 0 and r.stdout.strip().endswith("; not checked against PyTorch (--no-verify)") and
          os.path.isfile(os.path.join(never, "model.fir")),
          f"--no-verify exports without a fusec, and says it did not check ({r.stdout.strip()} "
          f"{r.stderr.strip()[-300:]})")

    broken = os.path.join(tmp, "broken-fusec")
    with open(broken, "w") as f:
        f.write("#!/bin/sh\necho 'run: something fusec says' >&2\nexit 1\n")
    os.chmod(broken, os.stat(broken).st_mode | stat.S_IEXEC)
    before = listing(never)
    r = exporter(never, fusec_bin=broken)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and "cannot run the export's forward: run: something fusec says" in
          lines[0] and listing(never) == before,
          f"a fusec that cannot run the export: one line with fusec's own, exit 1, the export as it was ({lines})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True, help="the fusec binary that checks the exports (set as FUSEC_BIN)")
    a = ap.parse_args()
    if torch is None:
        print("SKIP: this python3 has no torch (Debian: apt-get install python3-torch)")
        return 77
    os.environ["FUSEC_BIN"] = os.path.abspath(a.fusec)
    with tempfile.TemporaryDirectory() as tmp:
        correct_models_pass(tmp)
        hf_ops(tmp)
        planted_forward(tmp)
        planted_backward(tmp)
        planted_vjp(tmp)
        planted_baked_ids(tmp)
        cli(tmp)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
