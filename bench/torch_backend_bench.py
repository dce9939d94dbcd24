#!/usr/bin/env python3
"""torch.compile(backend="fusec") against Inductor on the CS336 LM, in one process and one run:
for each model and batch, the same training step (zero grads, forward under bf16 autocast,
f32 cross-entropy, backward, torch.optim.AdamW) compiled three ways:

  inductor      torch.compile(model)                              + torch.compile(opt.step)
  inductor-ro   torch.compile(model, mode="reduce-overhead")      + the same for opt.step
  fusec         torch.compile(model, backend="fusec")             + opt.step eager (fused AdamW)
  fusec-mincut  the same, forward and backward split by Inductor's min-cut partitioner (the
                backend's default where networkx is installed)
  fusec-default the same, split by AOTAutograd's default partitioner (saves every value)
  aot_eager     torch.compile(model, backend="aot_eager")        + opt.step eager (fused AdamW):
                Dynamo and AOTAutograd with no compiler, the floor of any backend's first call

and for each: the first call (trace, compile and one step, synchronised) in seconds, and the
step's median over --iters calls after --warmup, each between two CUDA events. The model is
bench/torch_bench.py's with SDPA attention (as bench/torch_ddp_ref.py's), its sizes read from
`fusec compile --model M --stats` (--fusec). Prints a markdown table; --json prints rows.

Needs torch >= 2 with CUDA and libfusec_c.so (frontend/python/fusec/runtime.py finds it)."""
import argparse
import gc
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "frontend", "python"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="small,medium")
    ap.add_argument("--batch", default="64,16", help="one per model, in order")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--impl", default="fusec,inductor,inductor-ro")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--fusec", default=os.environ.get("FUSEC", "fusec"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="after timing, profile 3 steps (torch.profiler) and print each impl's top GPU kernels to stderr")
    ap.add_argument("--trace-dir", default="", help="with --profile: write each impl's trace there (trace-IMPL.json)")
    ap.add_argument("--host-profile", type=int, default=0, metavar="N",
                    help="after timing, run N steps under cProfile and print each impl's top host functions to stderr")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import torch_bench
    from torch_compile_ref import model_config
    from torch_ddp_ref import sdpa_transformer
    import fusec.dynamo  # noqa: F401  registers backend="fusec"

    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    models, batches = a.model.split(","), [int(b) for b in a.batch.split(",")]
    for name, batch in zip(models, batches):
        config = model_config(a.fusec, name)
        for impl in a.impl.split(","):
            torch._dynamo.reset()
            gc.collect()  # the last impl's graphs (and fusec's COMPILED entries) go now
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            torch.manual_seed(0)
            model = sdpa_transformer(config).cuda()
            fused = impl.startswith("fusec") or impl == "aot_eager"
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=fused)
            gen = torch.Generator().manual_seed(1)
            ids = torch.randint(0, config["vocab"], (batch, a.ctx), generator=gen).cuda()
            targets = torch.randint(0, config["vocab"], (batch, a.ctx), generator=gen).cuda()
            if impl == "aot_eager":
                fwd, step, mark = torch.compile(model, backend="aot_eager", dynamic=False), opt.step, (lambda: None)
            elif impl.startswith("fusec"):  # fusec-mincut: AOTAutograd's split by Inductor's partitioner
                os.environ["FUSEC_BACKEND_PARTITION"] = {"fusec-mincut": "min-cut", "fusec-default": "default"}.get(impl, "")
                fwd, step, mark = torch.compile(model, backend="fusec", dynamic=False), opt.step, (lambda: None)
            else:
                mode = "reduce-overhead" if impl == "inductor-ro" else "default"
                fwd, step = torch.compile(model, mode=mode), torch.compile(opt.step, mode=mode)
                mark = torch.compiler.cudagraph_mark_step_begin if mode == "reduce-overhead" else (lambda: None)

            def train_step():
                mark()
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = fwd(ids)
                F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1)).backward()
                step()

            row = {"model": name, "batch": batch, "ctx": a.ctx, "impl": impl}
            try:
                t0 = time.perf_counter()
                train_step()
                torch.cuda.synchronize()
                row["first_call_s"] = time.perf_counter() - t0
                compile_peak = torch.cuda.max_memory_reserved()
                torch.cuda.reset_peak_memory_stats()
                ms = torch_bench.time_calls(train_step, a.warmup, a.iters)
                row["median_ms"] = statistics.median(ms)
                row["status"] = "OK"
                if impl.startswith("fusec"):  # how the graphs' calls went: copies, relinks, graph updates
                    row["fusec_graphs"] = [dict(c.program.stats(), launches=c.program.launches, seconds=round(c.compile_seconds, 2),
                                                host_ms_a_call=round(1e3 * c.host_seconds / max(c.calls - 1, 1), 3),
                                                shared=c.shared_outputs, strided_copies=sum(1 for p in c.plan if p[0] == "fusec" and p[2] is not None))
                                           for c in fusec.dynamo.COMPILED if c.program is not None]
                # Device memory: PyTorch's (its caching allocator's, CUDA graph pools
                # included) and what fusec's programs hold beside it; at the first call's peak
                # (compiling: reserved) and over the timed steps (allocated).
                held = sum(g.get("device_bytes", 0) for g in row.get("fusec_graphs", []))
                row["peak_gib"] = round((max(compile_peak, torch.cuda.max_memory_reserved()) + held) / 2 ** 30, 2)
                row["step_gib"] = round((torch.cuda.max_memory_allocated() + held) / 2 ** 30, 2)
                if a.profile:
                    profile(torch, train_step, impl, a.trace_dir)
                if a.host_profile:
                    host_profile(torch, train_step, impl, a.host_profile)
            except Exception as e:  # one impl's failure must not end the run
                row["status"] = (str(e).strip().splitlines() or [type(e).__name__])[0][:400]
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
            del model, opt, fwd, step
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"| model | batch | impl | first call (s) | step median (ms) | vs inductor-ro | peak memory (GiB) | steps' memory (GiB) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ro = next((x for x in rows if x["model"] == r["model"] and x["impl"] == "inductor-ro" and x["status"] == "OK"), None)
        if r["status"] != "OK":
            print(f"| {r['model']} | {r['batch']} | {r['impl']} | {r['status']} | | | | |")
            continue
        ratio = f"{r['median_ms'] / ro['median_ms']:.3f}x" if ro else ""
        print(f"| {r['model']} | {r['batch']} | {r['impl']} | {r['first_call_s']:.1f} | {r['median_ms']:.2f} | {ratio} | "
              f"{r['peak_gib']:.1f} | {r['step_gib']:.1f} |")
    return 0


def profile(torch, train_step, impl, trace_dir):
    """Where one impl's step goes: GPU time by kernel over 3 steps (CUPTI sees the kernels
    inside CUDA graphs too), against the steps' wall time."""
    from torch.profiler import ProfilerActivity, profile as prof
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            train_step()
        torch.cuda.synchronize()
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
        p.export_chrome_trace(os.path.join(trace_dir, f"trace-{impl}.json"))
    events = [e for e in p.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.self_device_time_total if hasattr(e, "self_device_time_total") else e.self_cuda_time_total,
                reverse=True)
    t = lambda e: (e.self_device_time_total if hasattr(e, "self_device_time_total") else e.self_cuda_time_total) / 3e3  # noqa: E731
    total = sum(t(e) for e in events)
    print(f"profile {impl}: GPU busy {total:.2f} ms a step in {len(events)} kernels", file=sys.stderr)
    for e in events[:25]:
        print(f"  {t(e):8.3f} ms  {e.count // 3:5d}x  {e.key[:110]}", file=sys.stderr)


def host_profile(torch, train_step, impl, steps):
    """Where one impl's step goes on the CPU: cProfile over `steps` synchronised steps, the
    functions by own time (tottime) and by cumulative time, per step."""
    import cProfile
    import io
    import pstats
    torch.cuda.synchronize()
    p = cProfile.Profile()
    t0 = time.perf_counter()
    p.enable()
    for _ in range(steps):
        train_step()
        torch.cuda.synchronize()
    p.disable()
    wall = (time.perf_counter() - t0) / steps
    for key in ("tottime", "cumtime"):
        buf = io.StringIO()
        pstats.Stats(p, stream=buf).sort_stats(key).print_stats(30)
        print(f"host profile {impl} by {key} ({steps} steps, {1e3 * wall:.2f} ms a step with the profiler on):\n"
              + buf.getvalue(), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
