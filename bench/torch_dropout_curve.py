#!/usr/bin/env python3
"""PyTorch's side of the dropout training curve (issue 42): the model that python3 -m
fusec.export wrote (rebuilt from DIR/export.json, its weights loaded from
DIR/weights.safetensors), trained with torch.optim.AdamW on windows drawn from a token file,
the way `fusec run --fir DIR/model.fir --data TOKENS` trains it: cross entropy of the next
token, mean over the batch, strict fp32 on the GPU (no TF32).

    torch_dropout_curve.py --fir DIR/model.fir --data TOKENS --batch B --ctx T --steps N
                           --seeds 1,2 [--no-dropout-seeds 1] [--data-seed S] [--lr 1e-3]
                           [--betas 0.9,0.999] [--eps 1e-8] [--weight-decay 0.01] [--device cuda]

One JSON object a run on stdout: {"impl": "torch", "seed": S, "dropout": true|false,
"losses": [...]}. A run with dropout trains the module in train mode (its dropout modules and
SDPA's dropout_p active, PyTorch's own RNG seeded with S); a --no-dropout-seeds run trains it in
eval mode. Each run draws its windows uniformly over the file from a generator seeded with
--data-seed (default: the run's own seed): with one --data-seed every run sees the same
batches and only the dropout masks differ between seeds. The data order is not fusec's
(fusec's sampler is libstdc++'s), so the curves are compared through what dropout does to each
(with against without, on each one's own data), not step by step. Errors: one line, exit 1.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frontend", "python"))

PROG = "torch_dropout_curve.py"


class Failure(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]
    p.add_argument("--fir", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--data-dtype", default="uint16", choices=["uint16", "int32"])
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--ctx", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seeds", type=ints, default=[1])
    p.add_argument("--no-dropout-seeds", type=ints, default=[])
    p.add_argument("--data-seed", type=int, default=None)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--betas", default="0.9,0.999")
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--device", default="cuda")
    p.error = lambda msg: (_ for _ in ()).throw(Failure(msg))
    a = p.parse_args(argv)
    try:
        a.betas = tuple(float(x) for x in a.betas.split(","))
        assert len(a.betas) == 2
    except (ValueError, AssertionError):
        raise Failure(f"--betas takes two numbers, 'b1,b2': got '{a.betas}'")
    if min(a.batch, a.ctx, a.steps) < 1:
        raise Failure("--batch, --ctx and --steps must be at least 1")
    return a


def load_tokens(path, dtype):
    import numpy as np
    import torch
    try:
        tokens = np.fromfile(path, dtype=np.uint16 if dtype == "uint16" else np.int32)
    except OSError as e:
        raise Failure(f"{path}: {e.strerror}")
    return torch.from_numpy(tokens.astype(np.int64))


def build(fir):
    """The exported module with the exported weights (what fusec trains), every parameter
    checked present."""
    import torch
    import torch_module_ref
    from fusec import safetensors_io
    d = os.path.dirname(os.path.abspath(fir))
    try:
        with open(os.path.join(d, "export.json")) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure(f"{d}/export.json: no usable exporter record ({e})")
    model = torch_module_ref.build_module(record)
    weights = safetensors_io.load(os.path.join(d, "weights.safetensors"))
    missing = [n for n, _ in model.named_parameters() if n not in weights]
    if missing:
        raise Failure(f"{d}/weights.safetensors lacks the parameters {missing[:5]}")
    with torch.no_grad():
        for n, t in model.state_dict().items():
            if n in weights and tuple(weights[n].shape) == tuple(t.shape):
                t.copy_(weights[n].to(t.dtype))
    return model


def train(a, tokens, seed, dropout):
    import torch
    model = build(a.fir).to(a.device)
    torch.manual_seed(seed)  # after build(): rebuilding the module reseeds with the export's seed
    model.train(dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=a.betas, eps=a.eps, weight_decay=a.weight_decay)
    windows = torch.Generator().manual_seed(seed if a.data_seed is None else a.data_seed)
    span = torch.arange(a.ctx + 1)
    losses = []
    for _ in range(a.steps):
        starts = torch.randint(0, tokens.numel() - a.ctx, (a.batch,), generator=windows)
        rows = tokens[starts[:, None] + span].to(a.device)
        ids, targets = rows[:, :-1], rows[:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(argv):
    try:
        a = parse_args(argv)
        import torch
        if a.device == "cuda":
            if not torch.cuda.is_available():
                raise Failure("--device cuda: this PyTorch sees no GPU")
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        tokens = load_tokens(a.data, a.data_dtype)
        if tokens.numel() < a.ctx + 1:
            raise Failure(f"{a.data} holds {tokens.numel()} tokens, fewer than --ctx + 1 = {a.ctx + 1}")
        for dropout, seeds in ((True, a.seeds), (False, a.no_dropout_seeds)):
            for s in seeds:
                print(json.dumps({"impl": "torch", "seed": s, "dropout": dropout,
                                  "losses": train(a, tokens, s, dropout)}), flush=True)
        return 0
    except Failure as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
