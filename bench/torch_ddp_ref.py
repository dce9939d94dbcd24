#!/usr/bin/env python3
"""PyTorch's data-parallel baseline for `fusec bench --gpus 1,2,4 --vs-torch`: the training step of
the CS336 TransformerLM under torch.compile, wrapped in DistributedDataParallel, one process per
GPU, weak scaling (the same per-GPU batch at every GPU count), printing the same JSON rows as
`fusec bench --format json` (torch_compile_ref.KEYS, "gpus" and "scaling_efficiency" filled in).

The model, its init and the ceilings are bench/torch_bench.py's (shared with
torch_compile_ref.py), with attention as torch.nn.functional.scaled_dot_product_attention
(is_causal=True): the fused kernel a real PyTorch training run uses. bf16 is torch.autocast over
f32 master weights. The one pass is "step": forward, cross-entropy, backward, AdamW(fused=True).
A GPU count N > 1 is torch.compile(DDP(model)) (PyTorch's recommended order: dynamo splits the
graph at DDP's gradient buckets so their all-reduces overlap the backward); N = 1 is plain
torch.compile(model), the baseline of "scaling_efficiency" = 1-GPU median / N-GPU median (null
when this run did not measure 1 GPU). Each rank draws its own tokens, as data parallelism does;
"tokens_per_s" counts every rank's, "mfu" is per GPU, the memory keys are the largest rank's.

Timing: each rank runs W warm-up steps, a barrier, then I steps each between two CUDA events and
synchronised (torch_bench.time_calls); a row's iteration time is the slowest rank's for that
iteration (all_reduce MAX), summarised as torch_compile_ref.py does (median, mean, ...).

Processes: for each row, N ranks started with torch.multiprocessing ("spawn"), NCCL over
127.0.0.1 on a free port, rank r on cuda:r. A rank out of memory makes the row "OOM" and the sweep
goes on; any other failure of a rank ends the run: one line "error: rank R: ...", exit 1 (the
traceback too with --verbose). The other ranks are stopped, so nothing hangs.

--help and --dry-run need neither torch nor a GPU (--dry-run needs fusec, as torch_compile_ref.py);
otherwise, without CUDA: "error: no CUDA device", exit 1.
"""
import os

# NVLink multicast (NVLS) stays off in NCCL, PyTorch's symmetric memory and NVSHMEM: on shared
# multi-GPU hosts a program that uses it can take the GPUs out of service. Set here, at import,
# before anything can initialise CUDA or NCCL; spawned ranks inherit the environment and import
# this module again, so they are covered twice.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compile_ref as ref  # noqa: E402  (keys, config loading, FLOPs, statistics, parser)

PASS = "step"
DTYPES = ("fp32", "bf16")
KEYS = ref.KEYS  # its last: gpus, scaling_efficiency, exposed_comm_ms (null: DDP's is not measured here)


def impl_name(gpus):
    return "torch.compile" if gpus == 1 else "torch.compile+DDP"


# ---- arguments and rows (no torch) ------------------------------------------------------------

def parse_args(argv):
    p = ref.Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    lst = lambda kind: (lambda s: [kind(x) for x in s.split(",")])
    p.add_argument("--model", type=lst(str), default=["small"],
                   help="comma-separated: fusec's models, or all (%s)" % ", ".join(ref.ZOO))
    p.add_argument("--ctx", type=lst(int), default=[256])
    p.add_argument("--batch", type=lst(int), default=[4], help="per GPU (weak scaling)")
    p.add_argument("--gpus", type=lst(int), default=[1, 2, 4],
                   help="GPU counts, one row each, in ascending order (1 is the baseline: no DDP)")
    p.add_argument("--dtype", type=lst(str), default=["bf16"], help="fp32, bf16 (autocast)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=int, default=900,
                   help="seconds one row's ranks may take, start and compile included (default 900)")
    p.add_argument("--format", choices=["json"], default="json")
    p.add_argument("--verbose", action="store_true", help="a failed rank's traceback too")
    p.add_argument("--dry-run", action="store_true", help="print the rows' fixed fields (no torch, no GPU)")
    p.add_argument("--fusec", default=os.environ.get("FUSEC", "fusec"),
                   help="the fusec binary the model sizes come from (default: $FUSEC, else fusec on PATH)")
    a = p.parse_args(argv)
    if a.model == ["all"]:
        a.model = list(ref.ZOO)
    p.check_choices([("--dtype", a.dtype, DTYPES)])
    for flag, values, least in (("--iters", [a.iters], 1), ("--ctx", a.ctx, 1), ("--batch", a.batch, 1),
                                ("--gpus", a.gpus, 1), ("--warmup", [a.warmup], 0), ("--timeout", [a.timeout], 1)):
        for v in values:
            if v < least:  # fusec's message (tools/fusec/common_flags.h)
                p.error("%s must be at least %d, got %d" % (flag, least, v))
    # Ascending, so the 1-GPU baseline is measured (and its row printed) before the counts it scales.
    a.gpus = sorted(set(a.gpus))
    try:
        ref.load_configs(a.fusec, a.model)
    except ValueError as e:
        p.error(str(e))
    for name in a.model:
        if max(a.ctx) > ref.CONFIGS[name]["ctx"]:
            p.error("--ctx %d exceeds the context length %d of model '%s'" % (max(a.ctx), ref.CONFIGS[name]["ctx"], name))
    return a


def grid(a):
    """(model, ctx, batch, dtype, gpus), GPU counts innermost: a row's baseline comes just before it."""
    for model in a.model:
        for batch in a.batch:
            for ctx in a.ctx:
                for dtype in a.dtype:
                    for gpus in a.gpus:
                        yield model, ctx, batch, dtype, gpus


def make_row(a, model, ctx, batch, dtype, gpus, peak_tflops):
    row = dict.fromkeys(KEYS)  # torch_compile_ref's keys in their order
    row.update(ref.make_row(model, ctx, batch, dtype, PASS, impl_name(gpus), a.warmup, a.iters, peak_tflops))
    row["gpus"] = gpus
    return row


def finish_row(row, ms, allocated, reserved, baseline_ms):
    """torch_compile_ref's statistics, per-GPU MFU and memory; then the throughput of all ranks
    (MFU stays per GPU: N times the tokens over N times the peak) and the scaling efficiency."""
    ref.finish_row(row, ms, allocated, reserved)
    row["tokens_per_s"] *= row["gpus"]
    if row["gpus"] == 1:
        baseline_ms = row["median_ms"]
    if baseline_ms is not None and row["median_ms"]:
        row["scaling_efficiency"] = baseline_ms / row["median_ms"]


def baseline_key(row):
    return row["model"], row["ctx"], row["batch"], row["dtype"]


# ---- one rank (a spawned process; torch imported there) --------------------------------------

def sdpa_transformer(config):
    """torch_bench's TransformerLM with its attention replaced by SDPA (causal)."""
    import torch.nn.functional as F
    import torch_bench

    class SdpaBlock(torch_bench.Block):
        def attend(self, q, k, v, causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return torch_bench.TransformerLM(config, block=SdpaBlock)


def training_step(rank, world, job):
    """The callable one timed iteration runs on this rank: zero grads, forward under autocast,
    f32 cross-entropy, backward (DDP all-reduces the gradients in buckets during it), AdamW."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(job["seed"])  # same weights on every rank (DDP also broadcasts rank 0's)
    model = sdpa_transformer(job["config"]).cuda()
    # Fused AdamW, the optimizer a tuned PyTorch training run takes: already a few multi-tensor
    # kernel launches, so it stays eager (torch_compile_ref.py compiles the default one instead).
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                            fused=True)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = torch.compile(DDP(model, device_ids=[rank]))
    else:
        net = torch.compile(model)
    gen = torch.Generator().manual_seed(job["seed"] + 1 + rank)  # rank 0 draws torch_compile_ref's tokens
    shape = (job["batch"], job["ctx"])
    ids = torch.randint(0, job["config"]["vocab"], shape, generator=gen).cuda()
    targets = torch.randint(0, job["config"]["vocab"], shape, generator=gen).cuda()
    bf16 = job["dtype"] == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = net(ids)
        F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1)).backward()
        opt.step()
    return step


def join_group(rank, world, port, timeout_s):
    import datetime
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("nccl", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s))


def slowest_rank(ms, allocated, reserved, world):
    """Per iteration the slowest rank's time (a step is done when every rank is), and the largest
    rank's memory: one all_reduce(MAX) of all of them, f64 so byte counts stay exact."""
    if world == 1:
        return ms, allocated, reserved
    import torch
    import torch.distributed as dist
    t = torch.tensor(ms + [allocated, reserved], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    values = t.tolist()
    return values[:-2], int(values[-2]), int(values[-1])


def time_rank(rank, world, port, job):
    """One rank's part of a row: the slowest rank's times and memory (the same on every rank)
    and this GPU's GEMM ceiling (rank 0's goes into the row)."""
    import torch
    import torch.distributed as dist
    import torch_bench
    torch.cuda.set_device(rank)
    if world > 1:
        join_group(rank, world, port, job["timeout"])
    # Strict f32 GEMMs (as fusec's fp32) and this GPU's GEMM ceiling for the MFU.
    peak_tflops = torch_bench.strict_f32_and_ceilings()[job["dtype"]]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step = training_step(rank, world, job)
    torch_bench.time_calls(step, job["warmup"], 0)  # warm-up: compile, DDP's buckets, the allocator
    if world > 1:
        dist.barrier(device_ids=[rank])  # every rank compiled and warm before the first timed step
    torch.cuda.synchronize()
    ms = torch_bench.time_calls(step, 0, job["iters"])
    ms, allocated, reserved = slowest_rank(ms, torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(),
                                           world)
    if world > 1:
        dist.destroy_process_group()
    return {"ms": ms, "allocated": allocated, "reserved": reserved, "peak_tflops": peak_tflops}


def first_line(e):
    """An exception's type and first line, or first two where the first only introduces the
    next (dynamo's "backend='inductor' raised:")."""
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    text = lines[0] if lines else ""
    if text.endswith(":") and len(lines) > 1:
        text += " " + lines[1]
    return "%s: %s" % (type(e).__name__, text) if text else type(e).__name__


def one_line(e):
    """An exception as one line; with its root cause where it has one, since dynamo re-raises
    a user-code error under its own vaguer one ("RuntimeError when making fake tensor call")."""
    cause = e.__cause__
    while cause is not None and cause.__cause__ is not None:
        cause = cause.__cause__
    return first_line(e) + (" (from %s)" % first_line(cause) if cause is not None else "")


def is_oom(e):
    """OutOfMemoryError itself, or under dynamo's or inductor's own error when it struck inside
    a compile."""
    while e is not None:
        if type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower():
            return True
        e = e.__cause__
    return False


def rank_main(rank, world, port, job, conn):
    """A spawned rank: sends the parent exactly one message, ("ok", rank, result) or
    ("oom" | "error", rank, one line, traceback)."""
    # stdout carries the rows alone (fusec parses every line of it): whatever a rank or a library
    # prints there (NCCL_DEBUG's lines, say) goes to stderr instead.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        message = ("ok", rank, time_rank(rank, world, port, job))
    except BaseException as e:  # noqa: B902  (KeyboardInterrupt too: the parent must hear of every end)
        message = ("oom" if is_oom(e) else "error", rank, one_line(e), traceback.format_exc())
    conn.send(message)
    conn.close()
    if message[0] != "ok":
        # Skip the process group's teardown: the other ranks may be blocked in a collective that
        # this rank will never join, and the parent stops them now.
        sys.stderr.flush()
        os._exit(1)


# ---- the parent: starts a row's ranks and waits for them -------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive(rank, conn, proc):
    """The rank's message; a rank that ended without one (killed, crashed in native code) gets an
    error naming its exit code."""
    try:
        if conn.poll(2):
            return conn.recv()
    except (EOFError, OSError):
        pass
    proc.join(5)
    code = proc.exitcode
    why = "killed by signal %d" % -code if code is not None and code < 0 else "exit code %s" % code
    return ("error", rank, "ended without a result (%s)" % why, "")


def wait_for_ranks(procs, conns, timeout_s):
    """Every rank's message, or the first failure: (messages by rank, failed message or None)."""
    from multiprocessing.connection import wait
    messages = {}
    deadline = time.monotonic() + timeout_s
    while len(messages) < len(procs):
        pending = [r for r in range(len(procs)) if r not in messages]
        # A rank's pipe (its message, or EOF) or its process sentinel (it ended) wakes us.
        watch = {conns[r]: r for r in pending}
        watch.update({procs[r].sentinel: r for r in pending})
        ready = wait(list(watch), timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            late = ", ".join(str(r) for r in pending)
            return messages, ("error", pending[0], "no result after %d s (--timeout); ranks %s stopped" % (timeout_s, late), "")
        for r in sorted({watch[obj] for obj in ready}):
            messages[r] = receive(r, conns[r], procs[r])
            if messages[r][0] != "ok":
                return messages, messages[r]
    return messages, None


def stop(procs, grace_s):
    """Ends this row's ranks (its own processes, by their handles): ranks that reported give
    `grace_s` to exit by themselves (inductor's compile workers shut down with them), then all
    still running are terminated, killed if that is not enough."""
    procs = [p for p in procs if p.pid is not None]  # started ones (a start can fail midway)
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()


def run_ranks(world, job):
    """Runs one row on `world` ranks; returns rank 0's result, or the failed rank's message."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")  # fork would copy a CUDA-initialised parent into every rank
    port = free_port()
    pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
    # Not daemonic: inductor's compile workers are the ranks' own child processes.
    procs = [ctx.Process(target=rank_main, args=(r, world, port, job, pipes[r][1])) for r in range(world)]
    failure = ("error", 0, "interrupted", "")  # until the ranks have answered
    try:
        for p in procs:
            p.start()
        for _, writer in pipes:
            writer.close()  # the ranks hold the write ends now: a rank's end reads as EOF
        messages, failure = wait_for_ranks(procs, [reader for reader, _ in pipes], job["timeout"])
    finally:
        # A failed row's other ranks may be blocked in a collective forever: no grace for them.
        stop(procs, 0 if failure else 30)
    return failure or messages[0]


def check_torch(most_gpus):
    """Why this torch cannot run the rows (one line), or None."""
    import torch
    if not hasattr(torch, "compile"):
        return "torch %s has no torch.compile (2.0 or later)" % torch.__version__
    if most_gpus > 1:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_nccl_available():
            return "this torch has no NCCL (torch.distributed), which --gpus %d needs" % most_gpus
    count = torch.cuda.device_count()
    if most_gpus > count:
        return "--gpus %d: this machine has %d CUDA device%s" % (most_gpus, count, "" if count == 1 else "s")
    return None


def progress(row):
    status = row["status"] if row["status"] != "OK" else "median %.3f ms" % row["median_ms"]
    print("%s ctx=%d batch=%d %s %s %s gpus=%d warmup=%d: %s" % (row["model"], row["ctx"], row["batch"], row["dtype"],
          row["pass"], row["impl"], row["gpus"], row["warmup"], status), file=sys.stderr, flush=True)


def run(a):
    baselines = {}  # baseline_key -> the 1-GPU median of this run
    for model, ctx, batch, dtype, gpus in grid(a):
        job = {"config": ref.CONFIGS[model], "ctx": ctx, "batch": batch, "dtype": dtype, "warmup": a.warmup,
               "iters": a.iters, "seed": a.seed, "timeout": a.timeout}
        kind, rank, *rest = run_ranks(gpus, job)
        if kind == "error":
            line, tb = rest
            if a.verbose and tb:
                print(tb, file=sys.stderr, end="")
            print("error: rank %d: %s" % (rank, line), file=sys.stderr)
            return 1
        result = rest[0] if kind == "ok" else None
        if kind == "oom":
            print("rank %d: %s" % (rank, rest[0]), file=sys.stderr)
        row = make_row(a, model, ctx, batch, dtype, gpus, result["peak_tflops"] if result else None)
        if result:
            finish_row(row, result["ms"], result["allocated"], result["reserved"], baselines.get(baseline_key(row)))
            if gpus == 1:
                baselines[baseline_key(row)] = row["median_ms"]
        else:
            row["status"] = "OOM"
        progress(row)
        print(json.dumps(row), flush=True)  # row by row: a later failure keeps the rows before it
    return 0


def main(argv):
    a = parse_args(argv)
    if a.dry_run:
        for model, ctx, batch, dtype, gpus in grid(a):
            row = make_row(a, model, ctx, batch, dtype, gpus, 0.0)
            row["status"] = "dry-run"
            print(json.dumps(row))
        return 0
    if not ref.torch_with_cuda():
        return 1
    problem = check_torch(max(a.gpus))
    if problem:
        print("error: " + problem, file=sys.stderr)
        return 1
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
