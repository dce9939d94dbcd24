"""bench/torch_ddp_ref.py, the PyTorch DDP + torch.compile baseline of `fusec bench --gpus`, without a GPU:
  - --help works with neither torch nor a GPU and names the flags fusec passes;
  - importing it turns NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
    NVSHMEM_DISABLE_NVLS=1), over whatever the caller's environment said;
  - --dry-run (it needs fusec, for the model sizes): one "step" row per GPU count, ascending,
    torch_compile_ref.py's keys in their order (its last: gpus, scaling_efficiency, exposed_comm_ms), impl
    "torch.compile" at 1 GPU and "torch.compile+DDP" above, and the model FLOPs per token of
    torch_compile_ref.py's own step row;
  - bad flags: one stderr line "error: ...", exit 1, nothing on stdout;
  - without CUDA (CUDA_VISIBLE_DEVICES empty): "error: no CUDA device" (with no torch: "error:
    python3 has no torch module"), exit 1, nothing on stdout.
With --cuda, on a GPU machine instead: the tiny model's training step at 1 GPU and, where there
are two, at 2 (DDP), each row "OK" with consistent statistics, throughput and scaling efficiency,
and stdout holding the rows alone.

    python3 tests/python/torch_ddp_ref_test.py [--fusec build/fusec] [--cuda]
Without a runnable fusec the --dry-run checks are skipped with the reason (the rest still run);
--cuda exits 77 (ctest's skip) with the reason when torch, torch.compile or CUDA is missing."""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
SCRIPT = os.path.join(BENCH, "torch_ddp_ref.py")
sys.path.insert(0, HERE)
from tally import check, exit_code  # noqa: E402

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def script(*args, env=None, timeout=300, torch=True):
    """Runs the script; torch=False runs it where `import torch` fails, as on a machine without it."""
    if torch:
        cmd = [sys.executable, SCRIPT, *args]
    else:
        cmd = [sys.executable, "-c", "import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')", SCRIPT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def json_rows(stdout):
    """Every stdout line as a JSON object (in key order), or None when one is not."""
    try:
        return [json.loads(line) for line in stdout.splitlines()]
    except ValueError:
        return None


def compile_ref_keys_and_flops(fusec, model, ctx):
    """torch_compile_ref.py's keys and its step row's model FLOPs per token (its --dry-run)."""
    r = subprocess.run([sys.executable, os.path.join(BENCH, "torch_compile_ref.py"), "--fusec", fusec, "--dry-run",
                        "--model", model, "--ctx", str(ctx), "--passes", "step", "--dtype", "bf16",
                        "--impl", "torch.compile"], capture_output=True, text=True, timeout=300)
    rows = json_rows(r.stdout) if r.returncode == 0 else None
    return (list(rows[0]), rows[0]["model_flops_per_token"]) if rows else (None, None)


def help_without_torch():
    r = script("--help", torch=False)
    check(r.returncode == 0 and all(f in r.stdout for f in ("--gpus", "--batch", "--ctx", "--warmup", "--iters",
                                                             "--dtype", "--model", "--fusec", "--dry-run")),
          "--help, torch unimportable: exit 0 and the flags (rc %d, stderr %r)" % (r.returncode, r.stderr[-300:]))


def multicast_off_at_import():
    code = ("import os, sys; sys.path.insert(0, %r); import torch_ddp_ref; "
            "print(' '.join(os.environ.get(k, '-') for k in %r))" % (BENCH, sorted(MULTICAST_OFF)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, NCCL_NVLS_ENABLE="1", TORCH_SYMM_MEM_DISABLE_MULTICAST="0"))
    want = " ".join(MULTICAST_OFF[k] for k in sorted(MULTICAST_OFF))
    check(r.returncode == 0 and r.stdout.strip() == want,
          "importing it sets %s over the caller's environment (got %r, stderr %r)"
          % (", ".join("%s=%s" % kv for kv in sorted(MULTICAST_OFF.items())), r.stdout.strip(), r.stderr[-300:]))


def dry_run_rows(fusec):
    keys, flops = compile_ref_keys_and_flops(fusec, "small", 128)
    check(keys is not None, "torch_compile_ref.py --dry-run gives the reference row")
    r = script("--fusec", fusec, "--dry-run", "--model", "small", "--ctx", "128", "--batch", "8", "--gpus", "4,1,2",
               "--warmup", "3", "--iters", "7", torch=False)
    rows = json_rows(r.stdout)
    check(r.returncode == 0 and rows is not None and len(rows) == 3,
          "--dry-run --gpus 4,1,2, torch unimportable: exit 0, three JSON rows (rc %d, stderr %r)"
          % (r.returncode, r.stderr[-300:]))
    if not rows or keys is None:
        return
    check([row["gpus"] for row in rows] == [1, 2, 4], "rows in ascending GPU count: %s" % [row["gpus"] for row in rows])
    for row in rows:
        what = "gpus=%s row" % row.get("gpus")
        check(list(row) == keys and keys[-3:] == ["gpus", "scaling_efficiency", "exposed_comm_ms"],
              "%s: torch_compile_ref.py's keys in order, the data-parallel ones last" % what)
        check(row["impl"] == ("torch.compile" if row["gpus"] == 1 else "torch.compile+DDP"), "%s: impl %s" % (what, row["impl"]))
        check(row["pass"] == "step" and row["status"] == "dry-run" and row["dtype"] == "bf16",
              "%s: pass step, status dry-run, default dtype bf16" % what)
        check((row["model"], row["ctx"], row["batch"], row["warmup"], row["iters"]) == ("small", 128, 8, 3, 7),
              "%s: the model, ctx, per-GPU batch, warmup and iters asked for" % what)
        check(row["model_flops_per_token"] == flops, "%s: torch_compile_ref.py's FLOPs per token (%s, %s)"
              % (what, row["model_flops_per_token"], flops))
        check(row["median_ms"] is None and row["tokens_per_s"] is None and row["scaling_efficiency"] is None,
              "%s: no measurements" % what)
    r = script("--fusec", fusec, "--dry-run", "--model", "tiny", "--ctx", "16", "--gpus", "2", "--dtype", "fp32,bf16")
    rows = json_rows(r.stdout) or []
    check([(row["dtype"], row["gpus"]) for row in rows] == [("fp32", 2), ("bf16", 2)],
          "--dtype fp32,bf16 --gpus 2: one row per dtype (%s)" % [(row["dtype"], row["gpus"]) for row in rows])


def bad_flags(fusec):
    cases = [(["--gpus", "0"], "--gpus must be at least 1"), (["--gpus", "1,x"], "--gpus"),
             (["--dtype", "fp16"], "--dtype"), (["--batch", "0"], "--batch must be at least 1"),
             (["--iters", "0"], "--iters must be at least 1")]
    if fusec:
        cases += [(["--model", "nosuch"], "nosuch"), (["--model", "tiny", "--ctx", "17"], "exceeds the context length")]
    else:
        cases += [(["--fusec", os.path.join(HERE, "no-such-fusec")], "cannot run")]
    for args, says in cases:
        r = script(*(["--fusec", fusec] if fusec else []), "--dry-run", *args)
        lines = r.stderr.splitlines()
        check(r.returncode == 1 and r.stdout == "" and len(lines) == 1 and lines[0].startswith("error: ")
              and says in lines[0], "%s: one line naming it, exit 1 (rc %d, stderr %r)" % (" ".join(args), r.returncode,
                                                                                       r.stderr[-300:]))


def no_cuda(fusec):
    try:
        import torch  # noqa: F401
        says = "error: no CUDA device"
    except ImportError:
        says = "error: python3 has no torch module"
    r = script("--fusec", fusec, "--model", "tiny", "--ctx", "16", "--gpus", "1,2", env={"CUDA_VISIBLE_DEVICES": ""})
    check(r.returncode == 1 and r.stdout == "" and r.stderr.strip() == says,
          "no CUDA: %r, exit 1, nothing on stdout (rc %d, stderr %r)" % (says, r.returncode, r.stderr[-300:]))


def runnable_fusec(path):
    """The fusec to use, or None with the reason printed."""
    found = shutil.which(path) if path else None
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    print("SKIP (the --dry-run, no-CUDA and model checks): no runnable fusec (%s); pass --fusec build/fusec"
          % (path or "none given"))
    return None


def cuda_rows(fusec):
    """The real thing on a GPU machine: the tiny model at 1 GPU, and 2 (DDP) where there are two."""
    try:
        import torch
    except ImportError:
        print("SKIP: this python3 has no torch")
        return 77
    if not hasattr(torch, "compile") or not torch.cuda.is_available():
        print("SKIP: this torch (%s) has no torch.compile or sees no CUDA device" % torch.__version__)
        return 77
    gpus = [1, 2] if torch.cuda.device_count() >= 2 else [1]
    batch, ctx = 4, 16
    r = script("--fusec", fusec, "--model", "tiny", "--ctx", str(ctx), "--batch", str(batch),
               "--gpus", ",".join(map(str, gpus)), "--warmup", "2", "--iters", "5", timeout=900)
    rows = json_rows(r.stdout)
    check(r.returncode == 0 and rows is not None and len(rows) == len(gpus),
          "--gpus %s: exit 0, stdout one JSON row per count and nothing else (rc %d, stderr %r)"
          % (gpus, r.returncode, r.stderr[-1000:]))
    for row in rows or []:
        what = "gpus=%s" % row["gpus"]
        check(row["status"] == "OK", "%s: status OK (%s)" % (what, row["status"]))
        if row["status"] != "OK":
            continue
        check(0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"], "%s: min <= median <= max" % what)
        want = row["gpus"] * batch * ctx / (row["median_ms"] / 1e3)
        check(abs(row["tokens_per_s"] - want) <= 1e-6 * want, "%s: tokens/s counts every rank's tokens" % what)
        check(row["peak_tflops"] > 0 and row["allocated_bytes"] > 0 and row["mfu"] > 0,
              "%s: a GEMM ceiling, memory and MFU" % what)
        base = rows[0]["median_ms"] if rows[0]["status"] == "OK" else None
        check(base is not None and abs(row["scaling_efficiency"] - base / row["median_ms"]) <= 1e-9,
              "%s: scaling efficiency = 1-GPU median / its median (%s)" % (what, row["scaling_efficiency"]))
    return exit_code()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", default=os.environ.get("FUSEC", "fusec"))
    ap.add_argument("--cuda", action="store_true", help="run the tiny model on the GPUs instead")
    a = ap.parse_args()
    fusec = runnable_fusec(a.fusec)
    if a.cuda:
        if not fusec:
            return 77
        return cuda_rows(fusec)
    help_without_torch()
    multicast_off_at_import()
    bad_flags(fusec)
    if fusec:
        dry_run_rows(fusec)
        no_cuda(fusec)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
