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

The model sizes are fusec's own: each model's configuration (vocab, context length, d_model,
layers, heads, d_ff, RoPE theta, eps) is read from `fusec compile --model M --stats` (--fusec
names the binary; `fusec bench --vs-torch` passes itself), so nothing here restates them.

--help and --dry-run need neither torch nor a GPU (--dry-run needs fusec); otherwise, without
CUDA: "error: no CUDA device", exit 1.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ZOO = ("small", "medium", "large", "xl", "2.7B")  # --model all
CONFIGS = {}  # model name -> fusec's configuration of it (load_configs)
IMPLS = ("eager", "torch.compile", "torch.compile-ro")
# The row keys, in bench/report.cpp's order (a C++ test parses --dry-run rows to hold this).
KEYS = ("model", "ctx", "batch", "dtype", "pass", "impl", "warmup", "iters", "status", "mean_ms", "std_ms",
        "min_ms", "max_ms", "median_ms", "cv", "tokens_per_s", "peak_bytes", "allocated_bytes", "reserved_bytes",
        "arena_bytes", "resident_bytes", "speedup", "model_flops_per_token", "peak_tflops", "mfu",
        "gpus", "scaling_efficiency", "exposed_comm_ms")  # the last three: data parallel (one GPU here)


def model_config(fusec, name):
    """fusec's configuration of model `name` (the "config" object of `compile --stats`); raises
    ValueError with fusec's one-line message for a model it does not know."""
    cmd = [fusec, "compile", "--model", name, "--batch", "1", "--ctx", "1", "--passes=", "--stats"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise ValueError("--fusec: cannot run '%s': %s" % (fusec, e.strerror))
    if out.returncode != 0:
        raise ValueError((out.stderr.strip().splitlines() or ["fusec failed"])[-1].replace("error: ", "", 1))
    config = json.loads(out.stdout).get("config")
    if config is None:
        raise ValueError("--model %s: not a transformer of the zoo" % name)
    return config


def load_configs(fusec, names):
    for name in names:
        if name not in CONFIGS:
            CONFIGS[name] = model_config(fusec, name)


def model_flops_per_token(name, seq, pass_):
    """bench/flops.cpp's count: 2 * GEMM weights + 4 T d per layer forward; backward twice that."""
    c = CONFIGS[name]
    d, dff, layers = c["d_model"], c["d_ff"], c["layers"]
    forward = 2 * (layers * (4 * d * d + 3 * d * dff) + d * c["vocab"]) + layers * 4 * seq * d
    return float(forward if pass_ == "forward" else 3 * forward)


def summarize(ms):
    mean = statistics.fmean(ms)
    std = statistics.stdev(ms) if len(ms) > 1 else 0.0
    return {"mean_ms": mean, "std_ms": std, "min_ms": min(ms), "max_ms": max(ms),
            "median_ms": statistics.median(ms), "cv": std / mean if mean else 0.0}


def make_row(model, ctx, batch, dtype, pass_, impl, warmup, iters, peak_tflops):
    row = dict.fromkeys(KEYS)
    row.update(model=model, ctx=ctx, batch=batch, dtype=dtype, impl=impl, warmup=warmup, iters=iters, gpus=1,
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
    p.add_argument("--model", type=lst(str), default=["small"],
                   help="comma-separated: fusec's models, or all (%s)" % ", ".join(ZOO))
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
    p.add_argument("--fusec", default=os.environ.get("FUSEC", "fusec"),
                   help="the fusec binary the model sizes come from (default: $FUSEC, else fusec on PATH)")
    a = p.parse_args(argv)
    if a.model == ["all"]:
        a.model = list(ZOO)
    p.check_choices([("--dtype", a.dtype, ("fp32", "bf16")),
                     ("--passes", a.passes, ("forward", "fwd_bwd", "step")), ("--impl", a.impl, IMPLS)])
    for flag, values, least in (("--iters", [a.iters], 1), ("--ctx", a.ctx, 1), ("--batch", a.batch, 1),
                                ("--warmup", a.warmup, 0)):
        for v in values:
            if v < least:  # fusec's message (tools/fusec/common_flags.h)
                p.error("%s must be at least %d, got %d" % (flag, least, v))
    try:
        load_configs(a.fusec, a.model)
    except ValueError as e:
        p.error(str(e))
    # Run as a script this module is __main__, not the torch_compile_ref torch_bench could
    # import: the configurations travel with the arguments.
    a.configs = {name: CONFIGS[name] for name in a.model}
    for name in a.model:
        if max(a.ctx) > CONFIGS[name]["ctx"]:
            p.error("--ctx %d exceeds the context length %d of model '%s'" % (max(a.ctx), CONFIGS[name]["ctx"], name))
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
