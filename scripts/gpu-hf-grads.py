#!/usr/bin/env python3
"""On a GPU machine with transformers: where a Hugging Face family's bf16 gradients differ.
For each family of --families (tests/python/hf_corpus_test.py's configs, ids and targets), the
export as the corpus makes it, then every parameter's gradient at the initial weights from
  * float64 on the CPU (the reference),
  * eager PyTorch with bf16 autocast,
  * fusec bf16 with fused attention and with naive attention (read off one AdamW step),
and one line a parameter: each one's norm-wise relative error against float64 (the entries
exactly zero in float64 and those whose sign bf16 rounding decides left out, as the corpus
test does), sorted by fusec's error over eager's, worst first (--top lines). Beside eager's own
error, eager's with SDPA's math backend: how far another correct bf16 computation lands.

    python3 scripts/gpu-hf-grads.py --fusec build-gpu/fusec --families granite,starcoder2

A family may carry config overrides, to find which of its settings matters:
"granite+residual_multiplier=1+attention_multiplier=0.1767767" (numbers; --no-steps skips
the three-step comparison).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "frontend", "python"))
import hf_corpus_test as corpus  # noqa: E402


def number(text):
    """An override's value: an int where it reads as one (a head count), else a float."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    ap.add_argument("--families", default="granite,starcoder2")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--no-steps", action="store_true", help="gradients only, not the three AdamW steps")
    a = ap.parse_args()
    import torch
    import export_test as et
    from fusec import safetensors_io
    from fusec.hf import HFCausalLM, quiet
    quiet()
    torch.backends.cuda.matmul.allow_tf32 = False
    fusec = os.path.abspath(a.fusec)
    for fam in a.families.split(","):
        base, *overrides = fam.split("+")
        name, model_type, config = next(f for f in corpus.FAMILIES if f[0] == base)
        config = dict(config, **{k: number(v) for k, v in (o.split("=", 1) for o in overrides)})
        B, T = corpus.SHAPES["cuda"]
        V = corpus.V
        tmp = tempfile.mkdtemp()
        out = os.path.join(tmp, "export")
        env = dict(os.environ, PYTHONPATH=corpus.FRONTEND, FUSEC_BIN=fusec)
        r = subprocess.run([sys.executable, "-m", "fusec.export", "--hf", model_type, "--config", json.dumps(config),
                            "--batch", str(B), "--seq", str(T), "--seed", "0", "--out", out],
                           capture_output=True, text=True, env=env)
        if r.returncode:
            print(f"{fam}: export failed: {r.stderr.strip()[-300:]}")
            continue
        fir, wfile = os.path.join(out, "model.fir"), os.path.join(out, "weights.safetensors")
        weights = safetensors_io.load(wfile)
        torch.manual_seed(0)
        model = HFCausalLM(model_type, config)
        with torch.no_grad():
            for n, t in model.state_dict().items():
                if n in weights and weights[n].shape == t.shape:
                    t.copy_(weights[n].to(t.dtype))
        model.eval()
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, V, (B, T), generator=g)
        targets = torch.randint(0, V, (B, T), generator=g)
        inputs = os.path.join(tmp, "inputs.safetensors")
        safetensors_io.save(inputs, {"ids": ids, "targets": targets})
        g64 = et.exact_gradients(model, ids, targets, V)
        zero = et.noise_only(g64)
        # Eager's own spread: the same bf16 gradients with SDPA's math backend instead of the
        # one PyTorch picks, as far from float64 as another correct bf16 computation lands.
        from torch.nn.attention import SDPBackend
        g_eager = et.eager_bf16_gradients(model, ids, targets, V)
        g_math = et.eager_bf16_gradients(model, ids, targets, V, SDPBackend.MATH)
        decided = et.rounding_decided(g64, g_eager)
        keep = {n: zero[n] | decided[n] for n in zero}
        params = {n: weights[n] for n in g64}
        fusec_g = {}
        for attention in ("fused", "naive"):
            got = os.path.join(tmp, f"g-{attention}.safetensors")
            r = subprocess.run([fusec, "run", "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", got,
                                "--program", "train_step", "--steps", "1", "--lr", str(et.READ_OFF_LR), "--eps", "1", "--weight-decay",
                                "0", "--device", "cuda", "--dtype", "bf16", "--attention", attention],
                               capture_output=True, text=True)
            if r.returncode:
                print(f"{fam}: fusec --attention {attention} failed: {r.stderr.strip()[-300:]}")
                continue
            w = safetensors_io.load(got)
            fusec_g[attention] = {n: et.read_off(params[n].double() - w[n].double()) for n in params}
        rows = []
        for n, g64n in g64.items():
            e = et.rel_kept(g_eager[n], g64n, zero[n])
            cells = {k: et.rel_kept(v[n], g64n, zero[n]) for k, v in fusec_g.items()}
            also = {k: et.rel_kept(v[n], g64n, keep[n]) for k, v in fusec_g.items()}
            rows.append((cells.get("fused", 0) / max(e, 1e-12), n, e, cells, also, et.rel_kept(g_eager[n], g64n, keep[n]),
                         et.rel_kept(g_math[n], g64n, zero[n])))
        rows.sort(key=lambda r: -r[0])
        print(f"== {fam}: gradient error against float64 (zeros left out; in brackets: rounding-decided left out too)")
        print(f"{'parameter':48s} {'eager bf16':>20s} {'eager math':>10s} {'fusec fused':>20s} {'fusec naive':>20s}  "
              f"fused/eager  math/eager")
        for ratio, n, e, cells, also, e2, em in rows[:a.top]:
            def c(k):
                return f"{cells[k]:.2e} [{also[k]:.2e}]" if k in cells else "-"
            print(f"{n:48s} {e:.2e} [{e2:.2e}] {em:10.2e} {c('fused'):>20s} {c('naive'):>20s}  {ratio:11.2f}  "
                  f"{em / max(e, 1e-12):.2f}")
        if not a.no_steps:
            three_steps(fam, model, fusec, fir, wfile, inputs, ids, targets, V, keep, tmp, a.top)
    return 0


def three_steps(fam, model, fusec, fir, wfile, inputs, ids, targets, V, keep, tmp, top):
    """The corpus test's weights after 3 AdamW steps: fusec bf16 against eager bf16 beside eager
    bf16 against eager fp32 (the corpus allows max(2e-2, twice the latter)), per parameter."""
    import copy
    import torch
    import export_test as et
    from fusec import safetensors_io

    def eager(dtype):
        m = copy.deepcopy(model).cuda()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        for _ in range(3):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                logits = m(ids.cuda())
            torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), targets.cuda().reshape(-1)).backward()
            opt.step()
        return {n: p.detach().float().cpu() for n, p in m.named_parameters()}

    e16, e32 = eager("bf16"), eager("fp32")
    out = {}
    for attention in ("fused", "naive"):
        got = os.path.join(tmp, f"s-{attention}.safetensors")
        r = subprocess.run([fusec, "run", "--fir", fir, "--weights", wfile, "--inputs", inputs, "--out", got, "--program",
                            "train_step", "--steps", "3", "--device", "cuda", "--dtype", "bf16", "--attention", attention],
                           capture_output=True, text=True)
        if r.returncode == 0:
            out[attention] = safetensors_io.load(got)
    rows = []
    for n in e16:
        base = et.rel_kept(e16[n], e32[n], keep[n])
        cells = {k: et.rel_kept(v[n].float(), e16[n], keep[n]) for k, v in out.items()}
        vs32 = {k: et.rel_kept(v[n].float(), e32[n], keep[n]) for k, v in out.items()}
        rows.append((cells.get("fused", 0) / max(2e-2, 2 * base), n, base, cells, vs32))
    rows.sort(key=lambda r: -r[0])
    print(f"== {fam}: weights after 3 AdamW steps (rounding-decided entries left out)")
    print(f"{'parameter':48s} {'eager16 vs eager32':>18s} {'fused vs eager16':>16s} {'fused vs eager32':>16s} "
          f"{'naive vs eager16':>16s} {'naive vs eager32':>16s}")
    for ratio, n, base, cells, vs32 in rows[:top]:
        print(f"{n:48s} {base:18.2e} {cells.get('fused', 0):16.2e} {vs32.get('fused', 0):16.2e} "
              f"{cells.get('naive', 0):16.2e} {vs32.get('naive', 0):16.2e}")


if __name__ == "__main__":
    sys.exit(main())
