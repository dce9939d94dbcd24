"""Bring-your-own-model, end to end on the CPU: a PyTorch model fusec has never seen is exported
(python3 -m fusec.export), then `fusec run --fir` runs its forward and three AdamW steps on the
interpreter, and both are compared with PyTorch itself:
  - forward logits to 1e-4 relative (fp32);
  - three AdamW steps: the losses to 1e-4, every updated parameter to 1e-3 relative.
The model runs at an odd configuration (vocab 37, not a multiple of 8; head dim 16; seq 12 <
ctx 16). Also: an unsupported op fails the export with one line naming the op and the model's
source line, exit 1, nothing written; wrong inputs fail `fusec run` with one line, exit 1,
nothing written.

    python3 tests/python/export_test.py --fusec build/fusec
Exits 77 (ctest's skip) with the reason when this python has no torch."""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "frontend", "python"))
sys.path.insert(0, os.path.join(HERE, "models"))

try:
    import torch
except ImportError:
    print("SKIP: this python3 has no torch (Debian: apt-get install python3-torch)")
    sys.exit(77)

from fusec import safetensors_io  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def export_cli(spec, out, batch, seq, kwargs="{}"):
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "frontend", "python"))
    return subprocess.run([sys.executable, "-m", "fusec.export", "--model", spec, "--kwargs", kwargs, "--batch",
                           str(batch), "--seq", str(seq), "--out", out], capture_output=True, text=True, env=env)


def one_line_error(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 1 and len(lines) == 1 and "error" in lines[0]


def cs336(fusec, tmp):
    from cs336_lm import TransformerLM
    B, T, V = 2, 12, 37
    kwargs = '{"vocab_size": 37, "context_length": 16, "d_model": 32, "num_layers": 2, "num_heads": 2, "d_ff": 64}'
    out = os.path.join(tmp, "cs336")
    r = export_cli(os.path.join(HERE, "models", "cs336_lm.py") + ":TransformerLM", out, B, T, kwargs)
    check(r.returncode == 0, f"cs336: export exits 0 ({r.stderr.strip()[-300:]})")
    if r.returncode:
        return
    # The same model as the exporter built (seed 0), its weights from the exported file.
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=37, context_length=16, d_model=32, num_layers=2, num_heads=2, d_ff=64)
    weights = safetensors_io.load(os.path.join(out, "weights.safetensors"))
    for name, p in model.named_parameters():
        check(torch.equal(weights[name], p.detach()), f"cs336: weights.safetensors holds {name} as the model has it")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    inputs = os.path.join(tmp, "in.safetensors")
    safetensors_io.save(inputs, {"ids": ids, "targets": targets})

    fwd = os.path.join(tmp, "fwd.safetensors")
    r = run(fusec, "run", "--fir", os.path.join(out, "model.fir"), "--weights", os.path.join(out, "weights.safetensors"),
            "--inputs", inputs, "--out", fwd, "--program", "forward", "--device", "cpu")
    check(r.returncode == 0, f"cs336: fusec run forward exits 0 ({r.stderr.strip()})")
    if r.returncode == 0:
        with torch.no_grad():
            want = model(ids)
        err = rel(safetensors_io.load(fwd)["logits"], want)
        check(err < 1e-4, f"cs336: forward logits match PyTorch, relative error {err:.2e} < 1e-4")

    steps = os.path.join(tmp, "steps.safetensors")
    r = run(fusec, "run", "--fir", os.path.join(out, "model.fir"), "--weights", os.path.join(out, "weights.safetensors"),
            "--inputs", inputs, "--out", steps, "--program", "train_step", "--steps", "3", "--device", "cpu")
    check(r.returncode == 0, f"cs336: fusec run train_step --steps 3 exits 0 ({r.stderr.strip()})")
    if r.returncode:
        return
    got = safetensors_io.load(steps)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids).reshape(-1, V), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    lerr = max(abs(a - b) / abs(b) for a, b in zip(got["loss"].tolist(), losses))
    check(lerr < 1e-4, f"cs336: three AdamW steps, losses {got['loss'].tolist()} vs {losses}, worst {lerr:.2e} < 1e-4")
    # The update (not the weight, which barely moves) is what must match.
    initial = safetensors_io.load(os.path.join(out, "weights.safetensors"))
    worst = max(rel(got[n] - initial[n], p.detach() - initial[n]) for n, p in model.named_parameters())
    check(worst < 1e-3, f"cs336: every parameter's update matches, worst relative error {worst:.2e} < 1e-3")

    # The GPU's pipeline (every optimisation pass, kernels planned) takes the imported step too.
    r = run(fusec, "compile", "--fir", os.path.join(out, "model.fir"), "--program", "train_step", "--stats")
    check(r.returncode == 0 and '"kernels"' in r.stdout,
          f"cs336: fusec compile --program train_step runs the optimisation pipeline ({r.stderr.strip()})")

    # Wrong inputs: one line, exit 1, nothing written.
    bad = os.path.join(tmp, "bad.safetensors")
    safetensors_io.save(bad, {"ids": torch.zeros(B, T + 1, dtype=torch.int64)})
    o = os.path.join(tmp, "never.safetensors")
    r = run(fusec, "run", "--fir", os.path.join(out, "model.fir"), "--inputs", bad, "--out", o, "--program", "forward",
            "--device", "cpu")
    check(one_line_error(r) and "exported for ids i64[2,12]" in r.stderr and not os.path.exists(o),
          f"cs336: ids of another shape are one line, exit 1, nothing written ({r.stderr.strip()})")
    safetensors_io.save(bad, {"ids": torch.full((B, T), V, dtype=torch.int64)})
    r = run(fusec, "run", "--fir", os.path.join(out, "model.fir"), "--inputs", bad, "--out", o, "--program", "forward",
            "--device", "cpu")
    check(one_line_error(r) and "out of range for vocab 37" in r.stderr and not os.path.exists(o),
          f"cs336: an id out of the vocabulary is one line, exit 1, nothing written ({r.stderr.strip()})")


def unsupported(tmp):
    out = os.path.join(tmp, "cumsum")
    r = export_cli(os.path.join(HERE, "models", "unsupported.py") + ":CumsumLM", out, 2, 4)
    ok = one_line_error(r) and "unsupported op aten.cumsum" in r.stderr and "unsupported.py:" in r.stderr
    check(ok and not os.path.exists(out), f"an unsupported op is one line naming it and its source line, exit 1, "
          f"nothing written ({r.stderr.strip()})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cs336(a.fusec, tmp)
        unsupported(tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
