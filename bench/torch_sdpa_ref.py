#!/usr/bin/env python3
"""PyTorch's own fused attention (torch.nn.functional.scaled_dot_product_attention, causal) on the
grid of `fusec bench attention`, one backend per row, printing the same JSON rows as
`fusec bench attention --format json` (bench/attention_bench.cpp's keys, in its order):
`fusec bench attention --vs-torch` merges them into its table.

Backends (impl names): sdpa-flash (FlashAttention-2, bf16 only), sdpa-cudnn (cuDNN's fused
attention, bf16, where the build has it) and sdpa-efficient (xFormers' memory-efficient kernel,
the one PyTorch uses for fp32). A backend that cannot run a row (dtype, head dim, missing from
the build) gives that row the status "unsupported" and the sweep goes on; out of memory gives
"OOM".

Operands are [batch, 1 head, seq, d], as the seeds' single-head grid and fusec's @attention
program, drawn from a normal distribution. The forward is timed with autograd on, as the eager
rows' (so it computes what the backward needs: the log-sum-exp); the backward is autograd's
backward of a fresh forward (as the eager rows: fwd+bwd is their sum). Each time is
W warm-up calls, then I calls each between two CUDA events and synchronised, the median over
iterations. "Saved for backward" is the memory a forward with grad keeps alive (o and the
log-sum-exp: O(N)); "peak" is the allocator's peak over a forward and backward.

--help and --dry-run need neither torch nor a GPU; otherwise, without CUDA: "error: no CUDA
device", exit 1.
"""
import argparse
import json
import statistics
import sys
import warnings

from torch_compile_ref import Parser, torch_with_cuda

IMPLS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")
DTYPES = ("fp32", "bf16")
# bench/attention_bench.cpp's toJson order (a C++ test parses --dry-run rows to hold this).
KEYS = ("batch", "d", "seq", "dtype", "impl", "status", "forward_ms", "forward_std_ms", "backward_ms",
        "backward_std_ms", "fwd_bwd_ms", "forward_tflops", "fwd_bwd_tflops", "saved_for_backward_bytes", "peak_bytes")


def parse_args(argv):
    p = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    lst = lambda kind: (lambda s: [kind(x) for x in s.split(",")])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--d", type=lst(int), default=[16, 32, 64, 128])
    p.add_argument("--seq", type=lst(int), default=[256, 1024, 4096, 8192, 16384])
    p.add_argument("--dtype", type=lst(str), default=["fp32"], help="fp32, bf16")
    p.add_argument("--impl", type=lst(str), default=list(IMPLS), help=", ".join(IMPLS))
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--format", choices=["json"], default="json")
    p.add_argument("--dry-run", action="store_true", help="print the rows' fixed fields (no torch, no GPU)")
    a = p.parse_args(argv)
    p.check_choices([("--dtype", a.dtype, DTYPES), ("--impl", a.impl, IMPLS)])
    if a.batch < 1 or a.iters < 1 or a.warmup < 0 or min(a.d) < 1 or min(a.seq) < 1:
        p.error("--batch, --d, --seq and --iters must be positive, --warmup not negative")
    return a


def grid(a):
    # bench/attention_bench.cpp's nesting: dtype, d, seq, impl.
    for dtype in a.dtype:
        for d in a.d:
            for seq in a.seq:
                for impl in a.impl:
                    yield dtype, d, seq, impl


def make_row(a, dtype, d, seq, impl):
    row = dict.fromkeys(KEYS)
    row.update(batch=a.batch, d=d, seq=seq, dtype=dtype, impl=impl)
    return row


def causal_forward_flops(batch, seq, d):
    """bench/attention_bench.cpp's count (FlashAttention's): 4 B N^2 d / 2; fwd+bwd 3.5 times."""
    return 4.0 * batch * seq * seq * d / 2


def finish_row(row, fwd_ms, bwd_ms, saved, peak):
    std = lambda ms: statistics.stdev(ms) if len(ms) > 1 else 0.0
    fwd, bwd = statistics.median(fwd_ms), statistics.median(bwd_ms)
    flops = causal_forward_flops(row["batch"], row["seq"], row["d"])
    row.update(status="OK", forward_ms=fwd, forward_std_ms=std(fwd_ms), backward_ms=bwd, backward_std_ms=std(bwd_ms),
               fwd_bwd_ms=fwd + bwd, forward_tflops=flops / (fwd * 1e-3) / 1e12 if fwd > 0 else None,
               fwd_bwd_tflops=3.5 * flops / ((fwd + bwd) * 1e-3) / 1e12 if fwd + bwd > 0 else None,
               saved_for_backward_bytes=saved, peak_bytes=peak)


def run(a):
    import torch
    import torch.nn.functional as F
    from torch_bench import time_calls  # CUDA-event timing, as the torch.compile rows
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print("error: torch %s has no torch.nn.attention.sdpa_kernel (2.3 or later)" % torch.__version__,
              file=sys.stderr)
        return 1
    backends = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION",
                "sdpa-efficient": "EFFICIENT_ATTENTION"}
    torch.manual_seed(0)
    # A backend without a kernel for a row warns at length for every reason before raising;
    # the row's status and one stderr line say it instead.
    warnings.filterwarnings("ignore", category=UserWarning)

    for dtype, d, seq, impl in grid(a):
        row = make_row(a, dtype, d, seq, impl)
        backend = getattr(SDPBackend, backends[impl], None)
        if backend is None:
            row["status"] = "unsupported"
            print(json.dumps(row), flush=True)
            continue
        tdt = torch.float32 if dtype == "fp32" else torch.bfloat16
        q = k = v = dout = None
        state = {}
        try:
            with sdpa_kernel(backend):
                shape = (a.batch, 1, seq, d)
                q, k, v = (torch.randn(shape, device="cuda", dtype=tdt, requires_grad=True) for _ in range(3))
                dout = torch.randn(shape, device="cuda", dtype=tdt)
                fwd_ms = time_calls(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.warmup, a.iters)
                torch.cuda.synchronize()
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                saved = torch.cuda.memory_allocated() - before
                out.backward(dout)
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated()
                del out

                def forward_for_backward():
                    q.grad = k.grad = v.grad = None
                    state["out"] = F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def backward():
                    forward_for_backward()
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    state["out"].backward(dout)
                    end.record()
                    torch.cuda.synchronize()
                    return start.elapsed_time(end)

                for _ in range(a.warmup):
                    backward()
                bwd_ms = [backward() for _ in range(a.iters)]
                finish_row(row, fwd_ms, bwd_ms, saved, peak)
        except torch.cuda.OutOfMemoryError:
            row["status"] = "OOM"
        except RuntimeError as e:
            # No kernel of this backend for the row (dtype, head dim, not built in) is
            # "unsupported"; anything else (a CUDA error) is reported as the error it is.
            first = str(e).strip().splitlines()[0] if str(e).strip() else "error"
            if "out of memory" in first:
                row["status"] = "OOM"
            elif "No available kernel" in first or "not supported" in first.lower():
                row["status"] = "unsupported"
            else:
                row["status"] = "error: " + first
            print("%s d=%d seq=%d %s: %s" % (impl, d, seq, dtype, first), file=sys.stderr)
        # The last graph (state["out"]) holds q, k, v and their grads: free it with them, so
        # the next row's memory starts from nothing.
        state = {}
        del q, k, v, dout
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
    return 0


def main(argv):
    a = parse_args(argv)
    if a.dry_run:
        for cfg in grid(a):
            row = make_row(a, *cfg)
            row["status"] = "dry-run"
            print(json.dumps(row))
        return 0
    if not torch_with_cuda():
        return 1
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
