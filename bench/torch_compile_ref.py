#!/usr/bin/env python3
"""The CS336 TransformerLM in plain PyTorch, timed eager, torch.compile (default) and
torch.compile(mode="reduce-overhead"), printing the same JSON rows as `fusec bench --format json`
(bench/report.h lists the keys; `fusec bench --vs-torch` merges these rows into its table).

The model follows frontend/models/transformer.cpp and bench/eager_model.cpp: token embedding,
pre-norm blocks x += attn(rmsnorm(x)); x += ffn(rmsnorm(x)), RMSNorm in f32 (eps 1e-5), RoPE on
adjacent pairs of q and k, naive causal softmax(q k^T / sqrt(d_head)) v, SwiGLU
w2(silu(w1 x) * w3 x), no biases, final RMSNorm and an untied lm_head. Init is CS336's (truncated
normals, ones for the norms) from torch's generator: the values differ from fusec's, the work
does not. bf16 is torch.autocast over f32 master weights, as fusec's autocast pass.

Passes: forward (no grad), fwd_bwd (loss.backward(), grads set to None first), step (fwd_bwd
plus AdamW; under torch.compile the optimizer step is compiled too, as PyTorch's
"compiled optimizer" recipe does). Each row: W warm-up calls, then I calls each between two
CUDA events and synchronised, median over iterations (bench/timer.h does the same).

--help and --dry-run need neither torch nor a GPU; otherwise, without CUDA: "error: no CUDA
device", exit 1.
"""
import argparse
import json
import math
import statistics
import sys

# name: (d_model, d_ff, layers, heads); vocab 10000, context 1024, RoPE theta 10000 for all.
SIZES = {
    "small": (768, 3072, 12, 12),
    "medium": (1024, 4096, 24, 16),
    "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25),
    "2.7B": (2560, 10240, 32, 32),
}
VOCAB, CTX, THETA, EPS = 10000, 1024, 10000.0, 1e-5
IMPLS = ("eager", "torch.compile", "torch.compile-ro")
# The row keys, in bench/report.cpp's order (a C++ test parses --dry-run rows to hold this).
KEYS = ("model", "ctx", "batch", "dtype", "pass", "impl", "warmup", "iters", "status", "mean_ms", "std_ms",
        "min_ms", "max_ms", "median_ms", "cv", "tokens_per_s", "peak_bytes", "allocated_bytes", "reserved_bytes",
        "arena_bytes", "resident_bytes", "speedup", "model_flops_per_token", "peak_tflops", "mfu")


def model_flops_per_token(name, seq, pass_):
    """bench/flops.cpp's count: 2 * GEMM weights + 4 T d per layer forward; backward twice that."""
    d, dff, layers, _ = SIZES[name]
    forward = 2 * (layers * (4 * d * d + 3 * d * dff) + d * VOCAB) + layers * 4 * seq * d
    return float(forward if pass_ == "forward" else 3 * forward)


def summarize(ms):
    mean = statistics.fmean(ms)
    std = statistics.stdev(ms) if len(ms) > 1 else 0.0
    return {"mean_ms": mean, "std_ms": std, "min_ms": min(ms), "max_ms": max(ms),
            "median_ms": statistics.median(ms), "cv": std / mean if mean else 0.0}


def make_row(model, ctx, batch, dtype, pass_, impl, warmup, iters, peak_tflops):
    row = dict.fromkeys(KEYS)
    row.update(model=model, ctx=ctx, batch=batch, dtype=dtype, impl=impl, warmup=warmup, iters=iters,
               model_flops_per_token=model_flops_per_token(model, ctx, pass_), peak_tflops=peak_tflops)
    row["pass"] = pass_
    return row


def finish_row(row, ms, allocated, reserved):
    row.update(summarize(ms), status="OK", allocated_bytes=allocated, reserved_bytes=reserved, peak_bytes=allocated)
    tokens_per_s = row["batch"] * row["ctx"] / (row["median_ms"] / 1e3)
    row["tokens_per_s"] = tokens_per_s
    if row["peak_tflops"]:
        row["mfu"] = tokens_per_s * row["model_flops_per_token"] / (row["peak_tflops"] * 1e12)


def fill_speedups(rows):
    key = lambda r: (r["model"], r["ctx"], r["batch"], r["dtype"], r["pass"], r["warmup"])
    eager = {key(r): r["median_ms"] for r in rows if r["impl"] == "eager" and r["status"] == "OK"}
    for r in rows:
        base = eager.get(key(r))
        r["speedup"] = base / r["median_ms"] if base and r["status"] == "OK" and r["median_ms"] else None


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 1, as every fusec command
        print("error: " + message, file=sys.stderr)
        sys.exit(1)

    def check_choices(self, checks):  # (flag, values given, values known) per list flag
        for flag, values, known in checks:
            for v in values:
                if v not in known:
                    self.error("%s: unknown '%s' (known: %s)" % (flag, v, ", ".join(known)))


def parse_args(argv):
    p = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    lst = lambda kind: (lambda s: [kind(x) for x in s.split(",")])
    p.add_argument("--model", type=lst(str), default=["small"], help="comma-separated: %s or all" % ", ".join(SIZES))
    p.add_argument("--ctx", type=lst(int), default=[256])
    p.add_argument("--batch", type=lst(int), default=[4])
    p.add_argument("--dtype", type=lst(str), default=["fp32", "bf16"], help="fp32, bf16 (autocast)")
    p.add_argument("--passes", type=lst(str), default=["forward", "fwd_bwd", "step"])
    p.add_argument("--warmup", type=lst(int), default=[5], help="a list sweeps warm-up counts, e.g. 0,1,5")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--impl", type=lst(str), default=list(IMPLS), help=", ".join(IMPLS))
    p.add_argument("--format", choices=["json"], default="json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the rows' fixed fields (no torch, no GPU)")
    a = p.parse_args(argv)
    if a.model == ["all"]:
        a.model = list(SIZES)
    p.check_choices([("--model", a.model, SIZES), ("--dtype", a.dtype, ("fp32", "bf16")),
                     ("--passes", a.passes, ("forward", "fwd_bwd", "step")), ("--impl", a.impl, IMPLS)])
    if a.iters < 1 or min(a.warmup) < 0 or min(a.ctx) < 1 or min(a.batch) < 1:
        p.error("--iters, --ctx and --batch must be positive, --warmup not negative")
    if max(a.ctx) > CTX:
        p.error("--ctx %d exceeds the context length %d" % (max(a.ctx), CTX))
    return a


def grid(a):
    for model in a.model:
        for batch in a.batch:
            for ctx in a.ctx:
                for dtype in a.dtype:
                    for pass_ in a.passes:
                        for warmup in a.warmup:
                            for impl in a.impl:
                                yield model, ctx, batch, dtype, pass_, impl, warmup


def torch_with_cuda():
    """True when torch imports and sees a CUDA device; else prints why (one line) and False.
    Shared with bench/torch_sdpa_ref.py."""
    try:
        import torch
    except ImportError:
        print("error: python3 has no torch module", file=sys.stderr)
        return False
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return False
    return True


def main(argv):
    a = parse_args(argv)
    if a.dry_run:
        for cfg in grid(a):
            row = make_row(*cfg, iters=a.iters, peak_tflops=0.0)
            row["status"] = "dry-run"
            print(json.dumps(row))
        return 0
    if not torch_with_cuda():
        return 1
    import torch_bench  # the model and the timing: needs torch, so imported only now
    return torch_bench.run(a, grid, make_row, finish_row, fill_speedups)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
