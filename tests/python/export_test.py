"""Bring-your-own-model, end to end on the CPU: four PyTorch models fusec has never seen (a
CS336-style LM, nanoGPT's GPT-2, a Llama-style model with grouped-query attention, an LM on
nn.MultiheadAttention; under models/) are exported (python3 -m fusec.export), then `fusec run
--fir` runs each one's forward and three AdamW steps on the interpreter, and both are
compared with PyTorch itself:
  - forward logits to 1e-4 relative (fp32);
  - three AdamW steps: the losses to 1e-4, every updated parameter to 1e-3 relative.
Each runs at an odd configuration (vocab 37, not a multiple of 8; head dim 8 or 16; seq 12 <
ctx 16), and each layer's attention must have become the attention composite. Each one's
weights.safetensors holds its state_dict() (persistent buffers in, non-persistent ones out)
plus only the `_const.N` tables its model.fir reads; the nn.MultiheadAttention model's, none,
loads back into a fresh module with load_state_dict(strict=True) (state_dict_round_trip). The
export's one line names the files and counts model.fir's ops and the parameters. Also: an unsupported op fails the export with one line naming the op and the model's
source line, exit 1, nothing written; wrong inputs fail `fusec run` with one line, exit 1,
nothing written. The exporter's own failures (failures(), without_torch()): a broken model file,
constructor or forward, bad flags, a bad --state-dict or --out, a model's sys.exit, a full disk,
a python3 without torch, --hf's misuses (hf_failures(): with --model, a missing transformers, a
name that is no model type, a --config key the config lacks), each one line `fusec.export:
error: ...`, exit 1, no traceback (but with --debug), and the output directory as it was; a success is one line, and the three
files are renamed into place model.fir last. A model with dropout keeps it (dropout_kept).

    python3 tests/python/export_test.py --fusec build/fusec
Exits 77 (ctest's skip) with the reason when this python has no torch, after the checks that
need none."""
import argparse
import json
import os
import re
import resource
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
    from fusec import safetensors_io
except ImportError:
    torch = None  # main() runs the checks that need no torch, then skips

from tally import check, exit_code  # noqa: E402


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def exact_gradients(model, ids, targets, vocab):
    """Each parameter's gradient at the model's initial weights, in float64 on the CPU."""
    import copy
    m = copy.deepcopy(model).cpu().double()
    loss = torch.nn.functional.cross_entropy(m(ids.cpu()).reshape(-1, vocab), targets.cpu().reshape(-1))
    loss.backward()
    return {n: p.grad for n, p in m.named_parameters()}


def noise_only(g64):
    """Per parameter, the entries whose gradient is zero in exact arithmetic: at most 1e-9 of the
    model's largest gradient entry in float64 (an embedding row of a token absent from the batch, which
    only weight decay moves, is one too).
    GPT-2's key bias is one (softmax ignores a shift of every score of a row, so d loss / d b_k
    = 0, computed as rounding noise): AdamW turns such noise into steps of +-lr whose signs no
    two implementations share, so these entries are left out of the parameter comparison (and
    counted)."""
    # The scale is the largest gradient of the whole model, not of the parameter: a
    # parameter whose gradient is all noise (OPT's separate k_proj.bias) has no real entry
    # to measure its noise against.
    scale = max(g.abs().max() for g in g64.values())
    return {n: g.abs() <= 1e-9 * scale for n, g in g64.items()}


def eager_bf16_gradients(model, ids, targets, vocab, attention=None):
    """CUDA eager bf16 autocast's gradient of each parameter at the model's initial weights;
    with `attention` (an SDPBackend), through that SDPA backend instead of the one PyTorch picks.
    None where that backend refuses the model's attention."""
    import contextlib
    import copy
    m = copy.deepcopy(model).cuda()
    backend = contextlib.nullcontext()
    if attention is not None:
        from torch.nn.attention import sdpa_kernel
        backend = sdpa_kernel([attention])
    try:
        with backend, torch.autocast("cuda", dtype=torch.bfloat16):
            logits = m(ids.cuda())
        torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), targets.cuda().reshape(-1)).backward()
    except RuntimeError as e:  # only "No available kernel": this backend does not take these shapes
        if attention is None or "No available kernel" not in str(e):
            raise
        return None
    return {n: p.grad.double().cpu() for n, p in m.named_parameters()}


def eager_bf16_references(model, ids, targets, vocab):
    """Correct bf16 computations of the gradients: eager with the attention backend PyTorch
    picks, and eager through each other SDPA backend that takes the model (math, memory-efficient,
    flash, cuDNN). How far from float64 a correct bf16 gradient lands varies between them: a
    per-head norm weight's gradient (Qwen3's q_norm, a short sum of dQ's entries) was 1.12x and
    1.25x further with one than with the other (H200, two configs), and a final norm's bias
    (GPT-2's ln_f.bias, a sum over 512 tokens of entries that cancel) moves with the rounding of
    every upstream value. So fusec's is held to the farthest of them. By name ("default" first,
    then "math", "efficient", "flash", "cudnn"), for the reports to say which set the bound."""
    from torch.nn.attention import SDPBackend
    refs = {"default": eager_bf16_gradients(model, ids, targets, vocab)}
    for name, b in (("math", SDPBackend.MATH), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                    ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        g = eager_bf16_gradients(model, ids, targets, vocab, b)
        if g is not None:
            refs[name] = g
    return refs


# The learning rate of the step gradients are read off. With lr 1 a gradient of 1e-7 moved a
# weight of 0.02 by 1e-7, below what the f32 weight after the step resolves to 1% (its ulp is
# 1.9e-9): Granite's query and key gradients (attention_multiplier 1/128, residual_multiplier
# 0.22) read off with errors of 3e-2 where the gradients themselves were as close to float64
# as eager's. lr 1024 moves every entry by 1024 g / (|g| + 1), far above the weight's ulp.
READ_OFF_LR = 1024.0


def read_off(d):
    """The gradient a first AdamW step (lr READ_OFF_LR, eps 1, no weight decay) moved a weight
    by d = w - w_new: d = lr g / (|g| + 1) (bias correction makes m = g and v = g^2)."""
    return d / (READ_OFF_LR - d.abs())


def fusec_gradients(fusec, fir, wfile, inputs, out, dtype, weights):
    """fusec's gradient of each parameter at the initial weights, read off one AdamW step
    (read_off). None if the run fails."""
    r = run(fusec, "run", "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", out, "--program",
            "train_step", "--steps", "1", "--lr", str(READ_OFF_LR), "--eps", "1", "--weight-decay", "0", "--device",
            "cuda", "--dtype", dtype)
    if r.returncode:
        return None
    got = safetensors_io.load(out)
    grads = {}
    for n, w in weights.items():
        if n.startswith("_const."):
            continue
        grads[n] = read_off(w.double() - got[n].double())
    return grads


def rounding_decided(g64, g_bf16):
    """bf16: per parameter, the entries whose gradient is smaller than 3 sigma of bf16's own
    gradient error, sigma being the RMS error of eager bf16's gradient of that parameter
    against float64. AdamW's first step moves an entry by +-lr by its gradient's sign, so where
    bf16 rounding decides the sign, two correct bf16 implementations (eager's and fusec's)
    differ by 2 lr, and a zero-initialised bias's value after 3 steps is its updates alone:
    one such entry of 256 decides the norm-wise error. (Measured: GPT-2's
    h.1.mlp.c_proj.bias[85] is a sum over the 512 tokens with sum|dy| / |sum dy| = 9617, far
    beyond bf16's 2^8, and its sign differs between eager and fusec.) That these entries hide
    no error of fusec's is checked on the gradients themselves (bf16_gradients_as_exact)."""
    out = {}
    for n, g in g64.items():
        sigma = (g_bf16[n] - g).pow(2).mean().sqrt()
        out[n] = g.abs() < 3 * sigma
    return out


def bf16_gradient_margin(g_fusec, g_eagers, g64, zero):
    """(worst, which, allowed) over the parameters: fusec's bf16 gradient's norm-wise relative
    error against float64, and its allowance, 1.25x the farthest of the eager references'
    (eager_bf16_references) plus 2e-4 (the precision of reading a gradient off an f32 weight of
    about 1); `which` names the parameter nearest its allowance and the reference that set it."""
    worst, which, allowed = 0.0, "", 1.0
    for n, g in g64.items():
        mine = rel_kept(g_fusec[n], g, zero[n])
        theirs, ref = max((rel_kept(e[n], g, zero[n]), name) for name, e in g_eagers.items())
        limit = 1.25 * theirs + 2e-4
        if mine / limit > worst / allowed:
            worst, which, allowed = mine, f"{n}, bound from eager {ref} of {len(g_eagers)}", limit
    return worst, which, allowed


def bf16_gradients_as_exact(name, g_fusec, g_eagers, g64, zero):
    """Every parameter's bf16 gradient from fusec is as close to float64 as eager bf16's
    (bf16_gradient_margin)."""
    worst, which, allowed = bf16_gradient_margin(g_fusec, g_eagers, g64, zero)
    check(worst < allowed, f"{name} bf16: every gradient is as close to float64 as eager bf16's, worst {worst:.2e} < "
          f"{allowed:.2e} ({which})")


def rel_kept(a, b, noise):
    keep = ~noise
    return rel(a[keep], b[keep])


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def export_cli(spec, out, batch, seq, kwargs="{}", *more, **how):
    return exporter("--model", spec, "--kwargs", kwargs, "--batch", str(batch), "--seq", str(seq), "--out", out,
                    *more, **how)


def exporter(*args, with_torch=True, file_limit=None):
    """python3 -m fusec.export ARGS. with_torch=False: where `import torch` fails, as on a machine
    without it. file_limit: RLIMIT_FSIZE in bytes, a write past it failing as on a full disk
    (EFBIG; python ignores SIGXFSZ), which needs no small filesystem to be mounted."""
    cmd = [sys.executable, "-m", "fusec.export"] if with_torch else \
        [sys.executable, "-c", "import runpy, sys; sys.modules['torch'] = None; "
         "runpy.run_module('fusec.export', run_name='__main__', alter_sys=True)"]
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))) if file_limit else None
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=FRONTEND),
                          preexec_fn=limit, timeout=300)


def one_line_error(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 1 and len(lines) == 1 and "error" in lines[0]


def listing(d):
    """Every file under d (hidden temporaries included) with its bytes; None if d is absent."""
    if not os.path.isdir(d):
        return None
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


# The three architectures fusec has never seen, each at an odd configuration: vocab 37 (not a
# multiple of 8), head dim 16, seq 12 < context 16.
MODELS = [
    # (name, file, class, constructor kwargs, layers)
    ("cs336", "cs336_lm.py", "TransformerLM",
     dict(vocab_size=37, context_length=16, d_model=32, num_layers=2, num_heads=2, d_ff=64), 2),
    ("gpt2", "gpt2.py", "GPT", dict(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=32), 2),
    ("llama", "llama.py", "Transformer",
     dict(vocab_size=37, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, max_seq_len=16), 2),
    # nn.MultiheadAttention (aten.baddbmm on torch 1.13), a non-persistent and a persistent mask.
    ("mha", "mha.py", "MultiheadAttentionLM", dict(vocab_size=37, context_length=16, d_model=32, n_head=4, n_layer=2),
     2),
]
B, T, V = 2, 12, 37


def build(file, cls, kwargs):
    """The model as the exporter built it (seed 0)."""
    import importlib
    module = importlib.import_module(os.path.splitext(file)[0])
    torch.manual_seed(0)
    return getattr(module, cls)(**kwargs)


def matches_pytorch(fusec, tmp, name, file, cls, kwargs, layers):
    out = os.path.join(tmp, name)
    r = export_cli(os.path.join(HERE, "models", file) + ":" + cls, out, B, T, json.dumps(kwargs))
    check(r.returncode == 0, f"{name}: export exits 0 ({r.stderr.strip()[-300:]})")
    if r.returncode:
        return None
    fir = os.path.join(out, "model.fir")
    text = open(fir).read()
    model = build(file, cls, kwargs)
    summary_line(name, r.stdout, out, text, model)
    check(sorted(os.listdir(out)) == ["export.json", "model.fir", "weights.safetensors"],
          f"{name}: the directory holds the three files ({sorted(os.listdir(out))})")
    # Form: every layer's attention became the composite (no [T, T] softmax left).
    check(text.count(" = attention(") == layers and " softmax(" not in text,
          f"{name}: each of the {layers} layers' attention is the attention composite")
    weights = safetensors_io.load(os.path.join(out, "weights.safetensors"))
    holds_state_dict(name, weights, text, model)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    inputs = os.path.join(tmp, name + ".in.safetensors")
    safetensors_io.save(inputs, {"ids": ids, "targets": targets})

    fwd = os.path.join(tmp, name + ".fwd.safetensors")
    r = run(fusec, "run", "--fir", fir, "--weights", os.path.join(out, "weights.safetensors"),
            "--inputs", inputs, "--out", fwd, "--program", "forward", "--device", "cpu")
    check(r.returncode == 0, f"{name}: fusec run forward exits 0 ({r.stderr.strip()})")
    if r.returncode == 0:
        with torch.no_grad():
            want = model(ids)
        err = rel(safetensors_io.load(fwd)["logits"], want)
        check(err < 1e-4, f"{name}: forward logits match PyTorch, relative error {err:.2e} < 1e-4")

    steps = os.path.join(tmp, name + ".steps.safetensors")
    r = run(fusec, "run", "--fir", fir, "--weights", os.path.join(out, "weights.safetensors"),
            "--inputs", inputs, "--out", steps, "--program", "train_step", "--steps", "3", "--device", "cpu")
    check(r.returncode == 0, f"{name}: fusec run train_step --steps 3 exits 0 ({r.stderr.strip()})")
    if r.returncode:
        return out
    got = safetensors_io.load(steps)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses, noise = [], noise_only(exact_gradients(model, ids, targets, V))
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids).reshape(-1, V), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    lerr = max(abs(a - b) / abs(b) for a, b in zip(got["loss"].tolist(), losses))
    check(lerr < 1e-4, f"{name}: three AdamW steps, losses {got['loss'].tolist()} vs {losses}, worst {lerr:.2e} < 1e-4")
    # The update (not the weight, which barely moves) is what must match; a tied weight's
    # update comes from the sum of both uses' gradients.
    worst, which = max((rel_kept(got[n] - weights[n], p.detach() - weights[n], noise[n]), n)
                       for n, p in model.named_parameters())
    left = sum(int(m.sum()) for m in noise.values())
    check(worst < 1e-3, f"{name}: every parameter's update matches, worst relative error {worst:.2e} < 1e-3 ({which}; "
          f"{left} entries with noise-only gradients left out)")

    # The GPU's pipeline (every optimisation pass, kernels planned) takes the imported step too.
    r = run(fusec, "compile", "--fir", fir, "--program", "train_step", "--stats")
    check(r.returncode == 0 and '"kernels"' in r.stdout,
          f"{name}: fusec compile --program train_step runs the optimisation pipeline ({r.stderr.strip()})")
    return out


def summary_line(name, stdout, out, text, model):
    """The export's stdout is one line: the three files, model.fir's ops (its lines but the
    params, the input and the return), the parameters (a tied weight once) and what its check
    against PyTorch measured (export_verify_test.py tests the check)."""
    ops = sum(1 for line in text.splitlines() if " = " in line and not (" = param(" in line or " = input(" in line))
    size = os.path.getsize(os.path.join(out, "weights.safetensors"))
    params = sum(p.numel() for p in model.parameters())
    want = re.compile(re.escape(f"fusec.export: wrote {out}/model.fir ({ops:,} ops, {params:,} parameters, ") +
                      r"(\d+(\.\d)? (bytes|KiB|MiB|GiB)) of weights\), " +
                      re.escape(f"{out}/weights.safetensors and {out}/export.json, for ids [{B}, {T}]; checked by "
                                "fusec's CPU interpreter against PyTorch: logits, loss and gradients within ") +
                      r"\S+, \S+ and \S+ relative$")
    m = want.match(stdout.strip())
    shown = m and float(m.group(1).split()[0]) * {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(3)]
    check(len(stdout.splitlines()) == 1 and m is not None and abs(shown - size) <= 0.05 * size,
          f"{name}: one line names the files, {ops} ops, {params:,} parameters and {size} bytes of weights "
          f"({stdout.strip()})")


def holds_state_dict(name, weights, text, model):
    """weights.safetensors is the module's state_dict() (a tied weight once, under its first
    name; every value as f32), persistent buffers in and non-persistent ones out, plus the
    `_const.N` tables that model.fir reads (what no state_dict() entry gives: RoPE tables
    computed from a non-persistent buffer), each one read there."""
    sd = model.state_dict()
    first = {}
    for n, t in sd.items():
        first.setdefault((t.data_ptr(), t.dtype, tuple(t.shape)), n)
    want = sorted(set(first.values()))
    consts = sorted(k for k in weights if k.startswith("_const."))
    got = sorted(k for k in weights if not k.startswith("_const."))
    same = got == want and all(torch.equal(weights[n], sd[n].float()) for n in want)
    used = all(reads(text, k) for k in consts)
    check(same and used, f"{name}: weights.safetensors holds the {len(want)} tensors of state_dict() by their names, "
          f"plus {len(consts)} _const tables model.fir reads (missing {sorted(set(want) - set(got))}, extra "
          f"{sorted(set(got) - set(want))}, consts {consts})")


def reads(text, name):
    """Whether model.fir declares the param `name` once and an op reads it."""
    decl = re.findall(r'%(\S+) = param\(\) \{name = "' + re.escape(name) + '"', text)
    return len(decl) == 1 and re.search(r"[(\s]%" + re.escape(decl[0]) + r"[,)]", text) is not None


def state_dict_round_trip(tmp, out):
    """The nn.MultiheadAttention model's weights.safetensors (its block 0's mask registered with
    persistent=False, block 1's persistent) is exactly its state_dict(): no mask table, the
    persistent mask under its name and not the other, and it loads into a fresh module (another
    seed) with load_state_dict(strict=True), which then computes the exported model's logits."""
    kwargs = MODELS[3][3]
    model = build("mha.py", "MultiheadAttentionLM", kwargs)
    weights = safetensors_io.load(os.path.join(out, "weights.safetensors"))
    keys = sorted(weights) == sorted(model.state_dict()) and "blocks.1.mask" in weights and \
        "blocks.0.mask" not in weights
    check(keys, f"mha: weights.safetensors has exactly the keys of state_dict(), the persistent mask and not the "
          f"non-persistent one ({sorted(set(weights) ^ set(model.state_dict()))} differ)")
    import importlib
    torch.manual_seed(1)
    fresh = importlib.import_module("mha").MultiheadAttentionLM(**kwargs).eval()
    try:
        result = fresh.load_state_dict(weights, strict=True)
        loaded = not result.missing_keys and not result.unexpected_keys
    except RuntimeError as e:
        loaded, result = False, " ".join(str(e).split())[:300]
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        same = loaded and torch.equal(fresh(ids), model.eval()(ids))
    check(loaded and same, f"mha: weights.safetensors loads into a fresh module with load_state_dict(strict=True), "
          f"and it computes the exported module's logits ({result})")


def wrong_inputs(fusec, tmp, out):
    """Wrong inputs: one line, exit 1, nothing written."""
    bad = os.path.join(tmp, "bad.safetensors")
    safetensors_io.save(bad, {"ids": torch.zeros(B, T + 1, dtype=torch.int64)})
    o = os.path.join(tmp, "never.safetensors")
    r = run(fusec, "run", "--fir", os.path.join(out, "model.fir"), "--inputs", bad, "--out", o, "--program", "forward",
            "--device", "cpu")
    check(one_line_error(r) and "exported for ids i64[2,12]" in r.stderr and not os.path.exists(o),
          f"ids of another shape are one line, exit 1, nothing written ({r.stderr.strip()})")
    safetensors_io.save(bad, {"ids": torch.full((B, T), V, dtype=torch.int64)})
    r = run(fusec, "run", "--fir", os.path.join(out, "model.fir"), "--inputs", bad, "--out", o, "--program", "forward",
            "--device", "cpu")
    check(one_line_error(r) and "out of range for vocab 37" in r.stderr and not os.path.exists(o),
          f"an id out of the vocabulary is one line, exit 1, nothing written ({r.stderr.strip()})")


def not_causal(fusec, tmp):
    """A banded mask is not the causal composite: the softmax stays, and the forward matches."""
    out = os.path.join(tmp, "band")
    r = export_cli(os.path.join(HERE, "models", "band_attention.py") + ":BandAttentionLM", out, B, T)
    check(r.returncode == 0, f"band: export exits 0 ({r.stderr.strip()[-300:]})")
    if r.returncode:
        return
    text = open(os.path.join(out, "model.fir")).read()
    check(" = attention(" not in text and " softmax(" in text, "band: a non-causal mask keeps the explicit softmax")
    model = build("band_attention.py", "BandAttentionLM", {})
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    inputs, fwd = os.path.join(tmp, "band.in.safetensors"), os.path.join(tmp, "band.fwd.safetensors")
    safetensors_io.save(inputs, {"ids": ids})
    r = run(fusec, "run", "--fir", os.path.join(out, "model.fir"), "--weights", os.path.join(out, "weights.safetensors"),
            "--inputs", inputs, "--out", fwd, "--program", "forward", "--device", "cpu")
    with torch.no_grad():
        err = rel(safetensors_io.load(fwd)["logits"], model(ids)) if r.returncode == 0 else float("inf")
    check(err < 1e-4, f"band: forward logits match PyTorch, relative error {err:.2e} < 1e-4 ({r.stderr.strip()})")


def dropout_kept(fusec, tmp):
    """A model with dropout is exported in train mode: its three dropout sites (embeddings,
    attention weights, residual branches) become fusec's dropout ops on the step's key, and
    the export still checks itself (forward and its gradients without dropout, as PyTorch's
    eval mode). fusec's train_step draws the masks from --dropout-seed: one seed repeats its
    losses, another changes them, --no-dropout trains without; --no-dropout at export writes none."""
    out = os.path.join(tmp, "dropout")
    spec = os.path.join(HERE, "models", "dropout_lm.py") + ":DropoutLM"
    r = export_cli(spec, out, B, T)
    check(r.returncode == 0, f"dropout: export exits 0 ({r.stderr.strip()[-300:]})")
    if r.returncode:
        return
    text = open(os.path.join(out, "model.fir")).read()
    sites = len(re.findall(r" = dropout\(", text))
    check('role = "dropout_key"' in text and sites >= 4 and " = attention(" not in text,
          f"dropout: model.fir keeps the dropout ({sites} ops on the dropout_key), explicit attention around it")
    fir = os.path.join(out, "model.fir")

    def losses(*flags):
        r = run(fusec, "run", "--fir", fir, "--program", "train_step", "--random-inputs", "--steps", "3",
                "--device", "cpu", *flags)
        return r.stdout if r.returncode == 0 else r.stderr

    a, b, c, none = losses("--dropout-seed", "1"), losses("--dropout-seed", "1"), losses("--dropout-seed", "2"), \
        losses("--no-dropout")
    check("step 3/3" in a and a == b and a != c and a != none,
          "dropout: one --dropout-seed repeats its losses, another and --no-dropout change them")
    out2 = os.path.join(tmp, "dropout-eval")
    r = export_cli(spec, out2, B, T, "{}", "--no-dropout")
    check(r.returncode == 0 and " = dropout(" not in open(os.path.join(out2, "model.fir")).read(),
          f"dropout: --no-dropout exports without it ({r.stderr.strip()[-200:]})")


def unsupported(tmp):
    out = os.path.join(tmp, "cumsum")
    r = export_cli(os.path.join(HERE, "models", "unsupported.py") + ":CumsumLM", out, 2, 4)
    ok = one_line_error(r) and "unsupported op aten.cumsum" in r.stderr and "unsupported.py:" in r.stderr
    check(ok and not os.path.exists(out), f"an unsupported op is one line naming it and its source line, exit 1, "
          f"nothing written ({r.stderr.strip()})")


def without_torch():
    """Where torch cannot be imported, --help and argument errors still work, and an export is
    one line saying what is missing. Bad arguments are one line and exit 1 (not argparse's
    usage text and exit 2)."""
    r = exporter("--help", with_torch=False)
    check(r.returncode == 0 and all(f in r.stdout for f in ("--model", "--batch", "--seq", "--out", "--debug")),
          f"--help, torch unimportable: exit 0 and the flags (rc {r.returncode}, {r.stderr.strip()[-300:]})")
    r = exporter("--model", "m.py:M", "--batch", "1", "--seq", "1", "--out", "never", with_torch=False)
    check(one_line_error(r) and "cannot import torch" in r.stderr,
          f"an export, torch unimportable: one line, exit 1 ({r.stderr.strip()[-300:]})")
    for what, args, says in [("--batch abc", ["--batch", "abc", "--seq", "1", "--out", "never"], "--batch"),
                             ("no --seq or --out", ["--batch", "1"], "required"),
                             ("--capture x", ["--batch", "1", "--seq", "1", "--out", "never", "--capture", "x"],
                              "--capture")]:
        r = exporter("--model", "m.py:M", *args, with_torch=False)
        check(one_line_error(r) and r.stderr.startswith("fusec.export: error: ") and says in r.stderr and not r.stdout,
              f"{what}: one line, exit 1 (rc {r.returncode}: {r.stderr.strip()[-300:]})")
    # --hf (a transformers model, fusec/hf.py): its flags are checked before torch is imported.
    shape = ["--batch", "1", "--seq", "1", "--out", "never"]
    for what, args, says in [("--hf and --model", ["--hf", "gpt2", "--model", "m.py:M"], "not allowed with"),
                             ("neither --hf nor --model", [], "one of the arguments --model --hf is required"),
                             ("--hf with --kwargs", ["--hf", "gpt2", "--kwargs", "{}"], "--kwargs goes with --model"),
                             ("--hf with --state-dict", ["--hf", "gpt2", "--state-dict", "x.pt"],
                              "--state-dict goes with --model"),
                             ("--model with --config", ["--model", "m.py:M", "--config", "{}"], "--config goes with --hf"),
                             ("--config not an object", ["--hf", "gpt2", "--config", "[1]"], "must be a JSON object"),
                             ("--hf naming no directory", ["--hf", "./no/such/dir"], "no directory"),
                             ("--hf, torch unimportable", ["--hf", "gpt2"], "cannot import torch")]:
        r = exporter(*args, *shape, with_torch=False)
        check(one_line_error(r) and r.stderr.startswith("fusec.export: error: ") and says in r.stderr and not r.stdout,
              f"{what}: one line, exit 1 (rc {r.returncode}: {r.stderr.strip()[-300:]})")


CS336 = (os.path.join(HERE, "models", "cs336_lm.py") + ":TransformerLM", json.dumps(MODELS[0][3]))


def failures(tmp):
    """Whatever fails (the model file, its constructor or forward, the flags, the state dict,
    the output directory), the exporter says so in one line, exits 1, writes nothing."""
    broken = os.path.join(HERE, "models", "broken.py")
    syntax = os.path.join(tmp, "syntax.py")
    with open(syntax, "w") as f:
        f.write("import torch\nclass LM(torch.nn.Module:\n    pass\n")
    junk, wrong = os.path.join(tmp, "junk.pt"), os.path.join(tmp, "wrong.pt")
    with open(junk, "wb") as f:
        f.write(b"not a state dict")
    torch.save({"nosuch.weight": torch.zeros(2)}, wrong)
    a_file = os.path.join(tmp, "a_file")
    open(a_file, "w").close()
    gpt2 = os.path.join(HERE, "models", "gpt2.py") + ":GPT"
    gpt2_kwargs = json.dumps(MODELS[1][3])  # context 16
    cases = [  # (what, the flags after --out's, what the line must say)
        ("a syntax error in the model file", ["--model", syntax + ":LM"], "SyntaxError"),
        ("a constructor that raises", ["--model", broken + ":RaisesInInit"],
         "constructing RaisesInInit: ValueError: d_model must be even (broken.py:"),
        ("a model that calls sys.exit(3)", ["--model", broken + ":ExitsInInit"], "sys.exit(3) was called"),
        ("a forward with an extra argument", ["--model", broken + ":ForwardNeedsTargets"], "'targets'"),
        ("--seq past the model's context", ["--model", gpt2, "--kwargs", gpt2_kwargs, "--seq", "20"],
         "AssertionError (gpt2.py:"),
        ("--kwargs that are not JSON", ["--model", gpt2, "--kwargs", "{x"], "--kwargs is not JSON"),
        ("--kwargs that are not an object", ["--model", gpt2, "--kwargs", "[1]"], "must be a JSON object"),
        ("--kwargs the constructor does not take", ["--model", gpt2, "--kwargs", '{"nosuch": 1}'], "nosuch"),
        ("a missing --state-dict", ["--model", CS336[0], "--kwargs", CS336[1], "--state-dict", junk + ".no"],
         "--state-dict: no file"),
        ("a junk --state-dict", ["--model", CS336[0], "--kwargs", CS336[1], "--state-dict", junk], "--state-dict"),
        ("a --state-dict of another model", ["--model", CS336[0], "--kwargs", CS336[1], "--state-dict", wrong],
         "Missing key"),
        ("--batch 0", ["--model", CS336[0], "--batch", "0"], "at least 1"),
    ]
    for i, (what, args, says) in enumerate(cases):
        out = os.path.join(tmp, f"fail{i}")
        r = exporter("--batch", "2", "--seq", "12", "--out", out, *args)
        check(one_line_error(r) and r.stderr.startswith("fusec.export: error: ") and says in r.stderr and
              not os.path.exists(out), f"{what}: one line, exit 1, nothing written ({r.stderr.strip()[-300:]})")
    hf_failures(tmp)
    r = exporter("--model", CS336[0], "--kwargs", CS336[1], "--batch", "2", "--seq", "12", "--out", a_file)
    check(one_line_error(r) and "is not a directory" in r.stderr and os.path.getsize(a_file) == 0,
          f"an --out that is a file: one line, exit 1, the file untouched ({r.stderr.strip()[-300:]})")
    if os.geteuid() == 0:
        print("skip a read-only --out: running as root, which may write anywhere")
    else:
        ro = os.path.join(tmp, "read_only")
        os.mkdir(ro, 0o555)
        r = exporter("--model", CS336[0], "--kwargs", CS336[1], "--batch", "2", "--seq", "12", "--out",
                     os.path.join(ro, "out"))
        check(one_line_error(r) and "is not writable" in r.stderr and not os.listdir(ro),
              f"a read-only --out: one line, exit 1, nothing written ({r.stderr.strip()[-300:]})")
    r = exporter("--model", broken + ":RaisesInInit", "--batch", "2", "--seq", "12", "--out", "never", "--debug")
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and "Traceback" in r.stderr and lines[-1].startswith("fusec.export: error: constructing"),
          f"--debug: the traceback, then the line, exit 1 ({lines[-1] if lines else ''})")


def hf_failures(tmp):
    """--hf's own failures, each one line, exit 1, nothing written: without transformers, that it
    is missing; with it (tests/python/hf_corpus_test.py runs the models), a name that is neither
    a directory nor a model type (nothing is downloaded), a model type with no causal LM, a
    --config key the config does not have, a directory without config.json."""
    try:
        import transformers  # noqa: F401
        have = True
    except Exception:
        have = False
    empty = os.path.join(tmp, "hf_empty")
    os.makedirs(empty, exist_ok=True)
    cases = [("--hf without transformers", ["--hf", "gpt2"], "needs the transformers package")] if not have else [
        ("--hf naming no model type", ["--hf", "nosuch-model"], "is neither a local checkpoint directory nor a model type"),
        ("--hf naming an encoder", ["--hf", "bert"], "has no causal-LM class"),
        ("--hf with a --config key gpt2's config lacks", ["--hf", "gpt2", "--config", '{"num_layers": 2}'],
         "has no field 'num_layers'"),
        ("--hf with a directory without config.json", ["--hf", empty], "has no config.json")]
    for i, (what, args, says) in enumerate(cases):
        out = os.path.join(tmp, f"hf_fail{i}")
        r = exporter(*args, "--batch", "2", "--seq", "12", "--out", out)
        check(one_line_error(r) and r.stderr.startswith("fusec.export: error: ") and says in r.stderr and
              not os.path.exists(out), f"{what}: one line, exit 1, nothing written ({r.stderr.strip()[-300:]})")


def atomic(tmp):
    """The three files are written as a set: renamed into place model.fir last; a write that
    fails (a full disk) or a rename that fails leaves no temporary, and never a model.fir
    beside weights of another export."""
    from fusec import export as fx
    out = os.path.join(tmp, "atomic")
    renamed, real_replace = [], os.replace

    def main(*more):  # in this process, so that os.replace can be watched; an exception is a failure too
        try:
            return fx.main(["--model", CS336[0], "--kwargs", CS336[1], "--batch", "2", "--seq", "12", "--out", out,
                            *more])
        except BaseException as e:
            return f"{type(e).__name__}: {e}"

    def spy(src, dst):
        renamed.append(os.path.basename(dst))
        real_replace(src, dst)
    with mock.patch("os.replace", spy):
        rc = main()
    check(rc == 0 and renamed == ["weights.safetensors", "export.json", "model.fir"],
          f"the files are renamed into place model.fir last ({renamed})")
    before = listing(out)

    # A full disk: a write past 16 KiB fails (weights.safetensors is 92 KiB). The previous
    # export must stay, byte for byte, with no temporary beside it.
    r = export_cli(CS336[0], out, 2, 12, CS336[1], "--seed", "1", file_limit=16384)
    check(one_line_error(r) and "cannot write the export" in r.stderr and listing(out) == before,
          f"a full disk: one line, exit 1, the previous export as it was, no temporary ({r.stderr.strip()[-300:]})")
    fresh = os.path.join(tmp, "atomic_fresh")
    r = export_cli(CS336[0], os.path.join(fresh, "sub"), 2, 12, CS336[1], file_limit=16384)
    check(one_line_error(r) and not os.path.exists(fresh),
          f"a full disk, a new --out two levels deep: one line, exit 1, no directory left ({r.stderr.strip()[-300:]})")

    def fail_last(src, dst):
        if dst.endswith("model.fir"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)
    with mock.patch("os.replace", fail_last):
        rc = main("--seed", "1")
    check(rc == 1 and sorted(listing(out)) == ["export.json", "weights.safetensors"],
          f"model.fir's rename failing: exit 1, no temporary, and no model.fir beside the new weights "
          f"(rc {rc}, {sorted(listing(out))})")


# On the GPU: larger configurations (head dim 64, tensor-core attention), still odd vocab.
GPU_MODELS = [
    ("cs336", "cs336_lm.py", "TransformerLM",
     dict(vocab_size=997, context_length=256, d_model=256, num_layers=2, num_heads=4, d_ff=688), 2),
    ("gpt2", "gpt2.py", "GPT", dict(vocab_size=997, block_size=256, n_layer=2, n_head=4, n_embd=256), 2),
    ("llama", "llama.py", "Transformer",
     dict(vocab_size=997, dim=256, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=688, max_seq_len=256), 2),
]
GB, GT, GV = 4, 128, 997


def matches_cuda_eager(fusec, tmp, name, file, cls, kwargs, layers):
    """Exported here (torch.export on torch >= 2.1), run by fusec on the GPU in fp32 and bf16,
    against PyTorch CUDA eager (strict f32; bf16 autocast): logits, the losses of three AdamW
    steps and every parameter after them within 1e-4 (fp32) or 2e-2 (bf16) norm-wise relative,
    the bounds of the zoo's compiled-vs-eager test; in bf16 also every gradient as close to
    float64 as eager bf16's."""
    out = os.path.join(tmp, name)
    r = export_cli(os.path.join(HERE, "models", file) + ":" + cls, out, GB, GT, json.dumps(kwargs))
    check(r.returncode == 0, f"{name}: export exits 0 ({r.stderr.strip()[-300:]})")
    if r.returncode:
        return
    fir, wfile = os.path.join(out, "model.fir"), os.path.join(out, "weights.safetensors")
    head = open(fir).readline().strip()
    check(open(fir).read().count(" = attention(") == layers, f"{name}: attention composite per layer ({head})")
    weights = safetensors_io.load(wfile)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, GV, (GB, GT), generator=g)
    targets = torch.randint(0, GV, (GB, GT), generator=g)
    inputs = os.path.join(tmp, name + ".in.safetensors")
    safetensors_io.save(inputs, {"ids": ids, "targets": targets})
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    eager_fp32 = {}  # CUDA eager's parameters after 3 fp32 steps: bf16's own drift from them
    for dtype in ("fp32", "bf16"):
        bound = 1e-4 if dtype == "fp32" else 2e-2
        model = build(file, cls, kwargs).cuda()
        autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16")
        fwd = os.path.join(tmp, f"{name}.{dtype}.fwd.safetensors")
        r = run(fusec, "run", "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", fwd, "--program", "forward",
                "--device", "cuda", "--dtype", dtype)
        check(r.returncode == 0, f"{name} {dtype}: fusec run forward on cuda exits 0 ({r.stderr.strip()})")
        if r.returncode == 0:
            with torch.no_grad(), autocast():
                want = model(ids.cuda()).float().cpu()
            err = rel(safetensors_io.load(fwd)["logits"].float(), want)
            check(err < bound, f"{name} {dtype}: forward logits match CUDA eager, {err:.2e} < {bound}")
        steps = os.path.join(tmp, f"{name}.{dtype}.steps.safetensors")
        r = run(fusec, "run", "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", steps, "--program",
                "train_step", "--steps", "3", "--device", "cuda", "--dtype", dtype)
        check(r.returncode == 0, f"{name} {dtype}: fusec run train_step --steps 3 on cuda exits 0 ({r.stderr.strip()})")
        if r.returncode:
            continue
        got = safetensors_io.load(steps)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        losses = []
        if dtype == "fp32":
            g64 = exact_gradients(model, ids, targets, GV)
            noise = noise_only(g64)
        else:
            zero, g_eagers = noise_only(g64), eager_bf16_references(model, ids, targets, GV)
            decided = rounding_decided(g64, g_eagers["default"])
            noise = {n: zero[n] | decided[n] for n in g64}
            g_fusec = fusec_gradients(fusec, fir, wfile, inputs, os.path.join(tmp, f"{name}.grads.safetensors"), dtype,
                                      weights)
            check(g_fusec is not None, f"{name} bf16: fusec run train_step --lr 1024 --eps 1 on cuda exits 0")
            if g_fusec is not None:
                bf16_gradients_as_exact(name, g_fusec, g_eagers, g64, zero)
        for _ in range(3):
            opt.zero_grad()
            with autocast():
                logits = model(ids.cuda())
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, GV), targets.cuda().reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        lerr = max(abs(a - b) / abs(b) for a, b in zip(got["loss"].tolist(), losses))
        check(lerr < bound, f"{name} {dtype}: three AdamW steps, losses {[round(x, 5) for x in got['loss'].tolist()]} "
              f"vs {[round(x, 5) for x in losses]}, worst {lerr:.2e} < {bound}")
        # Each parameter within the bound, or, in bf16, within twice eager bf16's own distance
        # from eager fp32 (the zoo's curve test bounds drift the same way), over the entries
        # whose gradient is neither zero nor of a sign that bf16 rounding decides.
        worst, which, allowed = 0.0, "", bound
        for n, p in model.named_parameters():
            p = p.detach().float().cpu()
            if dtype == "fp32":
                eager_fp32[n] = p
            err = rel_kept(got[n].float(), p, noise[n])
            limit = bound if dtype == "fp32" else max(bound, 2 * rel_kept(p, eager_fp32[n], noise[n]))
            if err / limit > worst / allowed:
                worst, which, allowed = err, n, limit
        left = sum(int(m.sum()) for m in noise.values())
        check(worst < allowed, f"{name} {dtype}: every parameter after 3 steps matches, worst {worst:.2e} < {allowed:.2e} "
              f"({which}; {left} entries with noise-only{' or rounding-decided' if dtype == 'bf16' else ''} gradients "
              f"left out)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cpu: the interpreter against PyTorch (CI); cuda: the GPU against CUDA eager")
    ap.add_argument("--only", default="", help="cuda: the one model of this name (cs336, gpt2, llama)")
    a = ap.parse_args()
    os.environ["FUSEC_BIN"] = os.path.abspath(a.fusec)  # what the exports check themselves with (fusec/verify.py)
    if a.device == "cpu":
        without_torch()  # where this python3 has torch too: it is made unimportable
    if torch is None:
        print("SKIP: this python3 has no torch (Debian: apt-get install python3-torch); only the checks that need "
              "none ran")
        return exit_code() or 77
    if a.device == "cuda":
        if not torch.cuda.is_available():
            print("SKIP: this torch sees no CUDA device")
            return 77
        with tempfile.TemporaryDirectory() as tmp:
            for m in GPU_MODELS:
                if a.only in ("", m[0]):
                    matches_cuda_eager(a.fusec, tmp, *m)
        return exit_code()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [matches_pytorch(a.fusec, tmp, *m) for m in MODELS]
        if outs[2]:
            wrong_inputs(a.fusec, tmp, outs[2])
        if outs[3]:
            state_dict_round_trip(tmp, outs[3])
        not_causal(a.fusec, tmp)
        dropout_kept(a.fusec, tmp)
        unsupported(tmp)
        failures(tmp)
        atomic(tmp)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
