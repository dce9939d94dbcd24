"""A corpus of Hugging Face `transformers` causal-LM families (issue 42), each exported with no
wrapper file, as a user would (`python3 -m fusec.export --hf TYPE --config JSON`, the export's
own check against PyTorch on), then run by fusec against PyTorch on the same weights and
tokens: the forward logits, and three AdamW steps (their losses and every parameter after
them). Small random configurations: 2 layers, d_model 128, 4 heads of 32 (grouped where the
family groups them), vocab 1000, dropout 0.

  --device cuda: fusec on the GPU against CUDA eager, fp32 (strict, no TF32) and bf16
      (autocast), with export_test.py's bounds and exclusions: fp32 logits and losses within
      1e-4 and every parameter after 3 steps within 1e-3, norm-wise relative; bf16 logits and
      losses within 2e-2, every parameter within max(2e-2, twice eager bf16's own distance from
      eager fp32), and every gradient as close to float64 as eager bf16's (1.25x the farthest of eager
      with PyTorch's attention backend and with each SDPA backend that takes the model, + 2e-4).
      Entries whose gradient is zero in exact arithmetic (float64) are left out of the
      parameter comparison, and in bf16 those whose sign bf16 rounding decides (export_test.py
      says why). Ids [4, 64].
  --device cpu: fusec's CPU interpreter against PyTorch on the CPU, fp32 only. Ids [2, 16].

Each family either matches, or is refused at export with one line (`fusec.export: error:
...`, exit 1, no traceback; "refused (check)" where the line is the export's own check finding
fusec and PyTorch apart, "refused" where the converter has no mapping): the test records which
and prints a table (family, status, the
largest errors, how many layers' attention became fusec's attention composite). It fails on a
mismatch, on a crash (a traceback, a fusec run that fails, an export that exits otherwise), on
a family that times out, and on a --config the family's config refuses (the corpus's own
mistake, not the model's). A family whose model type this transformers lacks is listed as
unavailable. Each family runs in its own process (--jobs at a time), so one family's crash
or hang is its own row.

    python3 tests/python/hf_corpus_test.py --device cuda --out-table hf_corpus.md
    python3 tests/python/hf_corpus_test.py --device cpu --families gpt2,llama --fusec build/fusec

fusec is --fusec, else $FUSEC_BIN, else `fusec` on PATH, else build/fusec (the exporter's own
rule). Exits 77 (ctest's skip) with the reason where this python3 has no torch, no
transformers, or (cuda) no CUDA device."""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
FRONTEND = os.path.join(HERE, "..", "..", "frontend", "python")
sys.path.insert(0, FRONTEND)
sys.path.insert(0, HERE)  # export_test's helpers, tally

V = 1000  # vocab
SHAPES = {"cuda": (4, 64), "cpu": (2, 16)}  # ids [B, T] per device
BOUNDS = {"fp32": 1e-4, "bf16": 2e-2}  # logits and losses; fp32 weights: WEIGHTS_FP32
WEIGHTS_FP32 = 1e-3


def _llama_like(**more):
    """The fields most decoder families share: 2 layers, d_model 128, 4 heads (head dim 32), MLP 256."""
    c = dict(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=256)
    c.update(more)
    return c


# (family, model type, config overrides). The six the issue names first, then families users
# commonly bring. Dropouts are 0.0 (floats: transformers 5's configs check field types), token
# ids stay inside the vocabulary where a model builds an embedding's padding_idx from them,
# head_dim is set where a family's default is not d_model / heads.
FAMILIES = [
    ("gpt2", "gpt2", dict(vocab_size=V, n_embd=128, n_layer=2, n_head=4, n_positions=256, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0)),
    ("llama", "llama", _llama_like(num_key_value_heads=2)),
    ("qwen2", "qwen2", _llama_like(num_key_value_heads=2)),
    ("mistral", "mistral", _llama_like(num_key_value_heads=2)),
    ("gpt-neox", "gpt_neox", _llama_like()),
    ("phi", "phi", _llama_like()),
    ("opt", "opt", dict(vocab_size=V, hidden_size=128, ffn_dim=256, num_hidden_layers=2, num_attention_heads=4,
                        max_position_embeddings=256, dropout=0.0, attention_dropout=0.0)),
    ("gemma", "gemma", _llama_like(num_key_value_heads=1, head_dim=32)),
    ("gemma2", "gemma2", _llama_like(num_key_value_heads=2, head_dim=32)),
    ("qwen3", "qwen3", _llama_like(num_key_value_heads=2, head_dim=32)),
    ("stablelm", "stablelm", _llama_like(num_key_value_heads=4)),
    ("falcon", "falcon", dict(vocab_size=V, hidden_size=128, num_hidden_layers=2, num_attention_heads=4)),
    ("bloom", "bloom", dict(vocab_size=V, hidden_size=128, n_layer=2, n_head=4)),
    ("gpt-j", "gptj", dict(vocab_size=V, n_embd=128, n_layer=2, n_head=4, rotary_dim=16, n_positions=256,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    ("olmo", "olmo", _llama_like()),
    ("olmo2", "olmo2", _llama_like()),
    ("granite", "granite", _llama_like(num_key_value_heads=2, embedding_multiplier=12.0, logits_scaling=8.0,
                                       residual_multiplier=0.22, attention_multiplier=0.0078125)),
    ("phi3", "phi3", dict(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                          eos_token_id=2)),
    ("starcoder2", "starcoder2", _llama_like(num_key_value_heads=2)),
    ("gpt-bigcode", "gpt_bigcode", dict(vocab_size=V, n_embd=128, n_layer=2, n_head=4, n_positions=256,
                                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
]
REQUIRED = ("gpt2", "llama", "qwen2", "mistral", "gpt-neox", "phi")
FAILING = ("mismatch", "crash", "timeout", "config")  # statuses that fail the test


# ---------------------------------------------------------------- one family (a worker process)
def worker(a):
    """Runs one family; writes its result (a JSON object) to a.result. Any exception is the
    family's crash, with its traceback in the result."""
    started = time.time()
    result = {"family": a.worker, "status": "crash", "checks": [], "errors": {}, "note": ""}
    try:
        family(a, result)
    except BaseException as e:  # noqa: BLE001 - the row says what happened
        result["status"] = "crash"
        result["note"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        result["traceback"] = traceback.format_exc()
    result["seconds"] = round(time.time() - started, 1)
    with open(a.result, "w") as f:
        json.dump(result, f)
    return 0


def family(a, result):
    import torch
    import export_test as et  # its comparison helpers (gradients, exclusions), on the same torch
    from fusec import safetensors_io
    from fusec.hf import HFCausalLM, quiet

    name, model_type, config = next(f for f in FAMILIES if f[0] == a.worker)
    quiet()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    if model_type not in CONFIG_MAPPING:
        result["status"], result["note"] = "unavailable", f"this transformers has no model type '{model_type}'"
        return
    B, T = SHAPES[a.device]
    checks = result["checks"]

    def check(ok, what):
        checks.append(("ok   " if ok else "FAIL ") + f"{name}: {what}")
        return ok

    # The export, as a user runs it.
    out = os.path.join(a.tmp, "export")
    cmd = [sys.executable, "-m", "fusec.export", "--hf", model_type, "--config", json.dumps(config), "--batch", str(B),
           "--seq", str(T), "--seed", "0", "--out", out]
    env = dict(os.environ, PYTHONPATH=FRONTEND + os.pathsep + os.environ.get("PYTHONPATH", ""), FUSEC_BIN=a.fusec)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    lines = r.stderr.strip().splitlines()
    result["export"] = r.stdout.strip() or (lines[-1] if lines else "")
    if r.returncode == 1 and lines and lines[-1].startswith("fusec.export: error: ") and "Traceback" not in r.stderr:
        line = lines[-1][len("fusec.export: error: "):]
        # A refusal by the export's own check (fusec's interpreter disagreeing with PyTorch) is
        # told apart from one by the converter (an op it does not map): both are one line.
        checked = line.startswith(("the export does not", "the export computes", "fusec's train_step on the export"))
        result["status"] = "config" if line.startswith("--config") else "refused (check)" if checked else "refused"
        result["note"] = line + (f" (and {len(lines) - 1} more line(s) on stderr)" if len(lines) > 1 else "")
        check(result["status"] != "config", f"refused at export in one line: {lines[-1]}")
        return
    if r.returncode != 0:
        result["note"] = f"the export exited {r.returncode}: " + " | ".join(lines[-3:])[-400:]
        result["traceback"] = r.stderr[-4000:]
        check(False, result["note"])
        return
    check(True, f"exports and passes its own check: {r.stdout.strip()}")
    fir, wfile = os.path.join(out, "model.fir"), os.path.join(out, "weights.safetensors")
    text = open(fir).read()
    result["attention"] = text.count(" = attention(")
    weights = safetensors_io.load(wfile)

    def build():
        """The family's PyTorch model with the exported weights (what fusec runs), in eval mode:
        the export is of the eval-mode function (no dropout; the configs have none)."""
        torch.manual_seed(0)
        m = HFCausalLM(model_type, config)
        sd = m.state_dict()
        missing = [n for n, _ in m.named_parameters() if n not in weights]
        if missing:
            raise AssertionError(f"weights.safetensors lacks the parameters {missing[:5]}")
        with torch.no_grad():
            for n, t in sd.items():
                if n in weights and weights[n].shape == t.shape:
                    t.copy_(weights[n].to(t.dtype))
        return m.eval()

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    inputs = os.path.join(a.tmp, "inputs.safetensors")
    safetensors_io.save(inputs, {"ids": ids, "targets": targets})
    dev = a.device
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    reference = build()
    try:
        g64 = et.exact_gradients(reference, ids, targets, V)
        zero = et.noise_only(g64)
    except Exception as e:  # a family that does not run in float64: nothing left out
        g64, zero = None, {n: torch.zeros_like(p, dtype=torch.bool) for n, p in reference.named_parameters()}
        result["note"] += f"no float64 reference ({type(e).__name__}); "
    eager_fp32 = {}
    for dtype in (("fp32", "bf16") if dev == "cuda" else ("fp32",)):
        errs = result["errors"].setdefault(dtype, {})
        bound = BOUNDS[dtype]
        model = build().to(dev)
        autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if dtype == "bf16" else _nothing
        fwd = os.path.join(a.tmp, f"{dtype}.fwd.safetensors")
        on = ["--device", dev] + (["--dtype", dtype] if dev == "cuda" else [])
        r = fusec(a.fusec, "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", fwd, "--program", "forward",
                  *on)
        if check(r.returncode == 0, f"{dtype}: fusec run forward exits 0 ({r.stderr.strip()[-300:]})"):
            with torch.no_grad(), autocast():
                want = model(ids.to(dev)).float().cpu()
            errs["logits"] = et.rel(safetensors_io.load(fwd)["logits"].float(), want)
            check(errs["logits"] < bound, f"{dtype}: forward logits match PyTorch, {errs['logits']:.2e} < {bound}")
        steps = os.path.join(a.tmp, f"{dtype}.steps.safetensors")
        r = fusec(a.fusec, "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", steps, "--program",
                  "train_step", "--steps", "3", *on)
        if not check(r.returncode == 0, f"{dtype}: fusec run train_step --steps 3 exits 0 ({r.stderr.strip()[-300:]})"):
            continue
        got = safetensors_io.load(steps)
        noise = zero
        if dtype == "bf16":
            g_eagers = et.eager_bf16_references(model, ids, targets, V)
            if g64 is not None:
                decided = et.rounding_decided(g64, g_eagers["default"])
                noise = {n: zero[n] | decided[n] for n in zero}
                g_fusec = fusec_gradients(a.fusec, fir, wfile, inputs, os.path.join(a.tmp, "grads.safetensors"),
                                          dtype, {n: weights[n] for n in g64})
                if check(g_fusec is not None, "bf16: fusec run train_step --lr 1024 --eps 1 exits 0"):
                    worst, which, allowed = et.bf16_gradient_margin(g_fusec, g_eagers, g64, zero)
                    errs["gradients"] = worst
                    check(worst < allowed, f"bf16: every gradient is as close to float64 as eager bf16's, worst "
                          f"{worst:.2e} < {allowed:.2e} ({which})")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            with autocast():
                logits = model(ids.to(dev))
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), targets.to(dev).reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        mine = got["loss"].reshape(-1).tolist()
        errs["loss"] = max(abs(x - y) / abs(y) for x, y in zip(mine, losses))
        check(errs["loss"] < bound, f"{dtype}: three AdamW steps' losses {[round(x, 5) for x in mine]} vs "
              f"{[round(x, 5) for x in losses]}, worst {errs['loss']:.2e} < {bound}")
        worst, which, allowed = 0.0, "", WEIGHTS_FP32 if dtype == "fp32" else bound
        for n, p in model.named_parameters():
            p = p.detach().float().cpu()
            if n not in got:
                check(False, f"{dtype}: fusec's train_step returns no '{n}'")
                continue
            if dtype == "fp32":
                eager_fp32[n] = p
            err = et.rel_kept(got[n].float(), p, noise[n])
            limit = WEIGHTS_FP32 if dtype == "fp32" else max(bound, 2 * et.rel_kept(p, eager_fp32.get(n, p), noise[n]))
            if err / limit > worst / allowed:
                worst, which, allowed = err, n, limit
        errs["weights"] = worst
        left = sum(int(m.sum()) for m in noise.values())
        check(worst < allowed, f"{dtype}: every parameter after 3 steps matches, worst {worst:.2e} < {allowed:.2e} "
              f"({which}; {left} entries left out)")
    failed = [c for c in checks if c.startswith("FAIL")]
    result["status"] = "mismatch" if failed else "match"
    if failed:
        result["note"] += failed[0][len("FAIL "):][:300]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fusec(binary, *args):
    return subprocess.run([binary, "run", *args], capture_output=True, text=True)


def fusec_gradients(binary, fir, wfile, inputs, out, dtype, params):
    """export_test.fusec_gradients over `params` alone (not the buffers the weights file holds):
    each parameter's gradient read off one AdamW step (export_test.read_off)."""
    from fusec import safetensors_io
    import export_test as et
    r = fusec(binary, "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", out, "--program", "train_step",
              "--steps", "1", "--lr", str(et.READ_OFF_LR), "--eps", "1", "--weight-decay", "0", "--device", "cuda",
              "--dtype", dtype)
    if r.returncode:
        return None
    got = safetensors_io.load(out)
    grads = {}
    for n, w in params.items():
        grads[n] = et.read_off(w.double() - got[n].double())
    return grads


# ---------------------------------------------------------------- the corpus (the parent)
def find_fusec(given):
    if given:
        return os.path.abspath(given)
    from fusec.common import ExportError
    from fusec.verify import find_fusec as exporters_rule
    try:
        return exporters_rule()
    except ExportError:
        return None


def run_family(a, name, tmp):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    res = os.path.join(d, "result.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--device", a.device, "--fusec", a.fusec,
           "--tmp", d, "--result", res, "--timeout", str(a.timeout)]
    threads = str(max(1, (os.cpu_count() or 2) // max(1, a.jobs)))
    env = dict(os.environ, PYTHONPATH=FRONTEND + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS=threads)
    started = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {"family": name, "status": "timeout", "checks": [], "errors": {},
                "note": f"no result within {a.timeout} s", "seconds": round(time.time() - started, 1)}
    if os.path.isfile(res):
        with open(res) as f:
            out = json.load(f)
    else:
        out = {"family": name, "status": "crash", "checks": [], "errors": {},
               "note": f"the worker exited {r.returncode} with no result: " +
                       " | ".join(r.stderr.strip().splitlines()[-2:])[-300:], "traceback": r.stderr[-4000:],
               "seconds": round(time.time() - started, 1)}
    return out


def table(results, device, header):
    dtypes = ("fp32", "bf16") if device == "cuda" else ("fp32",)
    cols = ["family", "status"] + [f"{d} {k}" for d in dtypes for k in ("logits", "loss", "weights")] + \
        ["attention composite", "note"]
    rows = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        cells = [r["family"], r["status"]]
        for d in dtypes:
            e = r["errors"].get(d, {})
            cells += [f"{e[k]:.1e}" if k in e else "" for k in ("logits", "loss", "weights")]
        att = r.get("attention")
        cells.append("" if att is None else f"{att} of 2 layers")
        cells.append(" ".join(r.get("note", "").split()).replace("|", "/")[:240])
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cpu: fusec's interpreter against PyTorch, fp32; cuda: the GPU against CUDA eager, fp32 and "
                         "bf16")
    ap.add_argument("--fusec", help="the fusec binary (default: $FUSEC_BIN, fusec on PATH, build/fusec)")
    ap.add_argument("--families", help="a comma-separated subset (default all: " +
                    ", ".join(f[0] for f in FAMILIES) + ")")
    ap.add_argument("--jobs", type=int, default=0,
                    help="families run at once (default: half the CPU cores, at most 8, on cuda; 2 on cpu)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds one family may take (default 300)")
    ap.add_argument("--out-table", help="also write the table (markdown) to this file")
    ap.add_argument("--keep", help="keep each family's export and outputs under this directory")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    try:
        import torch
    except ImportError:
        print("SKIP: this python3 has no torch; the Hugging Face corpus needs torch >= 2 and transformers")
        return 77
    try:
        import transformers
    except Exception as e:  # not installed, or refusing this torch
        print(f"SKIP: this python3 cannot import transformers ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
              f"the Hugging Face corpus runs where it is installed (pip install transformers)")
        return 77
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: this torch sees no CUDA device")
        return 77
    a.fusec = find_fusec(a.fusec)
    if not a.fusec or not os.access(a.fusec, os.X_OK):
        print(f"FAIL: no fusec binary to run (--fusec, $FUSEC_BIN, fusec on PATH or build/fusec): {a.fusec}")
        return 1
    names = [f[0] for f in FAMILIES]
    chosen = names if not a.families else [x.strip() for x in a.families.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in names]
    if unknown:
        print(f"FAIL: no family {unknown} in the corpus ({', '.join(names)})")
        return 1
    if a.jobs < 1:
        a.jobs = max(1, min(8, (os.cpu_count() or 2) // 2)) if a.device == "cuda" else 2
    a.jobs = min(a.jobs, len(chosen))
    B, T = SHAPES[a.device]
    header = (f"Hugging Face corpus (tests/python/hf_corpus_test.py --device {a.device}): transformers "
              f"{transformers.__version__}, torch {torch.__version__}"
              f"{', ' + torch.cuda.get_device_name(0) if a.device == 'cuda' else ''}; ids [{B}, {T}], vocab {V}, "
              f"2 layers, d_model 128; errors norm-wise relative (fp32 bounds: logits and losses 1e-4, weights after 3 "
              f"AdamW steps 1e-3; bf16: 2e-2)")
    print(header, flush=True)
    started = time.time()
    tmp_ctx = tempfile.TemporaryDirectory() if not a.keep else None
    tmp = a.keep if a.keep else tmp_ctx.name
    os.makedirs(tmp, exist_ok=True)
    results = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            futures = {pool.submit(run_family, a, n, tmp): n for n in chosen}
            for fut in concurrent.futures.as_completed(futures):
                r = fut.result()
                results[r["family"]] = r
                for line in r["checks"]:
                    print(line)
                print(f"--  {r['family']}: {r['status']} ({r.get('seconds', 0):.0f} s){': ' + r['note'] if r.get('note') else ''}",
                      flush=True)
                if r["status"] in ("crash",) and r.get("traceback"):
                    print(r["traceback"].rstrip())
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    ordered = [results[n] for n in chosen]
    text = table(ordered, a.device, header)
    print()
    print(text)
    if a.out_table:
        with open(a.out_table, "w") as f:
            f.write(text)
    failed = [r["family"] for r in ordered if r["status"] in FAILING]
    missing = [n for n in REQUIRED if n in chosen and results[n]["status"] == "unavailable"]
    counts = {s: sum(r["status"] == s for r in ordered)
              for s in ("match", "refused", "refused (check)", "unavailable") + FAILING}
    print(", ".join(f"{v} {k}" for k, v in counts.items() if v) + f" of {len(ordered)} families in "
          f"{time.time() - started:.0f} s")
    if missing:
        print(f"FAIL: this transformers lacks families the corpus requires: {missing}")
    passed = len(ordered) - len(failed)
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
