"""bench/plot.py on fixtures, without a GPU: the JSON that `fusec bench --format json`, `fusec bench
attention --format json`, `fusec bench --gpus --format json` and `fusec profile --format json` write (fixtures/, in the writers'
exact formats: bench/report.cpp, bench/attention_bench.cpp, bench/profile.cpp) becomes PNGs:
  - each expected PNG exists, is a PNG, is over a few KB, and has sensible dimensions (read
    from the IHDR chunk: no PIL);
  - only the plots whose inputs are given are written;
  - bad input (a missing file, a text table, a file of the wrong kind, an object of the wrong
    shape) is one stderr line `plot.py: error: ...`, exit 1, no traceback, nothing written.

    python3 tests/python/plot_test.py
Exits 77 (ctest's skip) with the reason when this python has no matplotlib."""
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "..", "bench", "plot.py")
FIX = os.path.join(HERE, "fixtures")

try:
    import matplotlib  # noqa: F401
except ImportError as e:
    print("SKIP: this python3 has no matplotlib (%s; Debian: apt-get install python3-matplotlib)" % e)
    sys.exit(77)

sys.path.insert(0, HERE)
from tally import check, exit_code  # noqa: E402


def plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True, timeout=300)


def png_size(path):
    """(width, height) from the IHDR chunk, which the PNG format puts first after the signature."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def fixture(name):
    return os.path.join(FIX, name)


BENCH, ATTENTION, SCALING = fixture("bench.jsonl"), fixture("attention.jsonl"), fixture("scaling.jsonl")
PROFILES = [fixture("profile_small_fp32.json"), fixture("profile_small_bf16.json")]
EXPECTED = ["bench_speedup.png", "attention_sweep.png", "profile_categories.png"]

with tempfile.TemporaryDirectory() as tmp:
    # All three plots; --out-dir is created.
    out = os.path.join(tmp, "all", "plots")
    r = plot("--bench", BENCH, "--attention", ATTENTION, "--profile", *PROFILES, "--out-dir", out)
    check(r.returncode == 0, "all three inputs: exit 0 (stderr: %s)" % r.stderr.strip()[-500:])
    printed = r.stdout.split()
    check(printed == [os.path.join(out, n) for n in EXPECTED], "prints each PNG's path: %s" % printed)
    for name in EXPECTED:
        path = os.path.join(out, name)
        if not os.path.exists(path):
            check(False, "%s exists" % name)
            continue
        size = os.path.getsize(path)
        check(size > 8000, "%s is non-trivial: %d bytes" % (name, size))
        dims = png_size(path)
        check(dims is not None, "%s is a PNG" % name)
        if dims:
            w, h = dims
            # Figures are a few inches at 110 dpi: hundreds to a couple of thousand pixels a
            # side, wider than tall or near square, never a sliver.
            check(400 <= w <= 4000 and 300 <= h <= 4000 and 0.5 <= w / h <= 5,
                  "%s has sensible dimensions: %dx%d" % (name, w, h))

    # Only the plots whose inputs are given; several --profile flags add up.
    out = os.path.join(tmp, "profile")
    r = plot("--profile", PROFILES[0], "--profile", PROFILES[1], "--out-dir", out)
    written = sorted(os.listdir(out)) if os.path.isdir(out) else r.stderr
    check(r.returncode == 0 and written == ["profile_categories.png"],
          "--profile alone writes only profile_categories.png: %s" % written)

    # --scaling (bench --gpus rows, a series a file, LABEL=FILE naming it): only scaling.png.
    out = os.path.join(tmp, "scaling")
    r = plot("--scaling", "unsharded=" + SCALING, SCALING, "--out-dir", out)
    written = sorted(os.listdir(out)) if os.path.isdir(out) else r.stderr
    check(r.returncode == 0 and written == ["scaling.png"], "--scaling writes only scaling.png: %s" % written)
    if r.returncode == 0:
        dims = png_size(os.path.join(out, "scaling.png"))
        check(dims is not None and os.path.getsize(os.path.join(out, "scaling.png")) > 8000,
              "scaling.png is a non-trivial PNG: %s" % (dims,))
    one_gpu = os.path.join(tmp, "one_gpu.jsonl")
    with open(one_gpu, "w") as f, open(SCALING) as b:
        for line in b:
            if '"gpus":1,' in line:
                f.write(line)

    # Bad input: one line on stderr, exit 1, nothing written.
    table = os.path.join(tmp, "table.txt")
    with open(table, "w") as f:
        f.write("| model | ctx | batch |\n|---|---|---|\n| small | 256 | 4 |\n")
    no_programs = os.path.join(tmp, "no_programs.json")
    with open(no_programs, "w") as f:
        f.write('{"header":"small fp32 batch=4 ctx=256 iters=10 on NVIDIA H200","programs":[]}\n')
    bad_value = os.path.join(tmp, "bad_value.jsonl")
    with open(bad_value, "w") as f:
        with open(BENCH) as b:
            f.write(b.readline().replace('"ctx":256', '"ctx":"256"'))
    # `fusec bench --impl compiled`: rows without an eager baseline have no speedup.
    no_eager = os.path.join(tmp, "no_eager.jsonl")
    with open(no_eager, "w") as f, open(BENCH) as b:
        for line in b:
            if '"impl":"compiled"' in line:
                f.write(re.sub(r'"speedup":[^,]*,', '"speedup":null,', line))
    cases = [
        ("a missing file", ["--bench", os.path.join(tmp, "missing.jsonl")], "missing.jsonl"),
        ("a text table, not JSON", ["--bench", table], "not JSON"),
        ("an attention file given as --bench", ["--bench", ATTENTION], 'lacks "model"'),
        ("a bench file given as --profile", ["--profile", BENCH], "not JSON"),
        ("a profile given as --attention", ["--attention", PROFILES[0]], 'lacks "batch"'),
        ("a profile with no programs", ["--profile", no_programs], '"programs"'),
        ("a mistyped value", ["--bench", bad_value], '"ctx"'),
        ("a good file beside a bad one", ["--bench", BENCH, "--attention", table], "not JSON"),
        ("bench rows with no eager row (and a good profile)", ["--bench", no_eager, "--profile", PROFILES[0]],
         "no speedup"),
        ("a bench file given as --scaling", ["--scaling", BENCH], 'lacks "gpus"'),
        ("scaling rows of one GPU only", ["--scaling", one_gpu], "no row of 2 GPUs"),
    ]
    for what, args, says in cases:
        out = os.path.join(tmp, "bad")
        r = plot(*args, "--out-dir", out)
        lines = r.stderr.splitlines()
        check(r.returncode == 1 and len(lines) == 1 and lines[0].startswith("plot.py: error: ") and says in lines[0]
              and not os.path.exists(out),
              "%s: exit 1 and one line naming it (rc %d, stderr %r)" % (what, r.returncode, r.stderr))

sys.exit(exit_code())
