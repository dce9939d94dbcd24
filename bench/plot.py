#!/usr/bin/env python3
"""Plots of fusec's JSON benchmark output, as PNGs (matplotlib: Debian's python3-matplotlib).

    python3 bench/plot.py [--bench FILE...] [--attention FILE...] [--profile FILE...]
                          [--scaling [LABEL=]FILE...] [--out-dir DIR]

  --bench      `fusec bench --format json` (one row object per line, bench/report.cpp), with
               `--vs-torch`'s torch.compile rows where present -> bench_speedup.png: the speedup
               over LibTorch eager per model, dtype and pass, one bar per implementation.
  --attention  `fusec bench attention --format json` (one row object per line,
               bench/attention_bench.cpp) -> attention_sweep.png: forward time, fwd+bwd time and
               peak memory against N on log axes, one line per head dim d and implementation,
               out-of-memory shapes marked with an x at the bottom of each panel.
  --profile    `fusec profile --format json` (one object: header and programs, bench/profile.cpp)
               -> profile_categories.png: launch time per category, stacked, one bar per file
               (e.g. an fp32 and a bf16 profile), one panel per program (forward, train_step).
  --scaling    `fusec bench --gpus LIST --format json` rows ([LABEL=]FILE: a file's rows are one
               series, named LABEL or the file's name; --vs-torch's PyTorch DDP rows a series of
               their own) -> scaling.png: per model, batch and dtype, the step time and the
               weak-scaling efficiency against the GPU count, the issue's 95% marked.

Only the plots whose inputs are given are written; each PNG's path is printed. Several files of
one kind are read as one list of rows. Bad input (a missing file, text that is not JSON, JSON
of the wrong shape) is one line `plot.py: error: ...` on stderr and exit 1.
"""
import argparse
import json
import os
import re
import sys

PROG = "plot.py"

# Fixed orders and colours, so the same implementation or category looks the same in every
# figure and across runs.
PASS_LABELS = {"forward": "forward", "fwd_bwd": "fwd+bwd", "step": "step"}
BENCH_IMPLS = {  # impl -> (legend label, colour); "eager" is the baseline (speedup 1)
    "compiled": ("fusec compiled", "tab:blue"),
    "torch.compile": ("torch.compile (default)", "tab:orange"),
    "torch.compile-ro": ("torch.compile (reduce-overhead)", "tab:green"),
}
CATEGORIES = {  # bench/profile.cpp categoryName(), in its order
    "gemm": "tab:blue", "pointwise": "tab:orange", "row_reduce": "tab:green", "col_reduce": "tab:red",
    "attention": "tab:purple", "optimizer": "tab:brown", "other": "tab:gray",
}
PALETTE = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
           "tab:cyan", "tab:gray"]
LINE_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "P")]
MiB = 1 << 20


class InputError(Exception):
    """A problem with an input file: reported as one line, exit 1."""


# ---------------------------------------------------------------------------------------------
# Reading. The writers put every key on every row (null where it does not apply), so a missing
# key means the file is not what the flag says it is.

def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Per key: the check and what it expects (for the message).
STR = (lambda v: isinstance(v, str), "a string")
INT = (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
NUM_OR_NULL = (lambda v: v is None or is_number(v), "a number or null")
BENCH_KEYS = {"model": STR, "ctx": INT, "batch": INT, "dtype": STR, "pass": STR, "impl": STR, "warmup": INT,
              "status": STR, "median_ms": NUM_OR_NULL, "speedup": NUM_OR_NULL}
SCALING_KEYS = {"model": STR, "ctx": INT, "batch": INT, "dtype": STR, "impl": STR, "gpus": INT, "status": STR,
                "median_ms": NUM_OR_NULL, "scaling_efficiency": NUM_OR_NULL}
ATTENTION_KEYS = {"batch": INT, "d": INT, "seq": INT, "dtype": STR, "impl": STR, "status": STR,
                  "forward_ms": NUM_OR_NULL, "fwd_bwd_ms": NUM_OR_NULL, "peak_bytes": NUM_OR_NULL}


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InputError("%s: %s" % (path, e.strerror or e))
    except UnicodeDecodeError:
        raise InputError("%s: not a text file" % path)


def check_keys(obj, keys, where, what):
    if not isinstance(obj, dict):
        raise InputError("%s: not a JSON object (is this %s?)" % (where, what))
    for key, (ok, expected) in keys.items():
        if key not in obj:
            raise InputError('%s: lacks "%s" (is this %s?)' % (where, key, what))
        if not ok(obj[key]):
            raise InputError('%s: "%s" is %s, not %s' % (where, key, json.dumps(obj[key]), expected))


def read_rows(paths, keys, what):
    """JSON Lines, as `--format json` writes rows: one object per line, every key present."""
    rows = []
    for path in paths:
        lines = [(n, line) for n, line in enumerate(read_text(path).splitlines(), 1) if line.strip()]
        if not lines:
            raise InputError("%s: empty (expected %s)" % (path, what))
        for n, line in lines:
            where = "%s:%d" % (path, n)
            try:
                row = json.loads(line)
            except ValueError:
                raise InputError("%s: not JSON (expected %s: one object per line)" % (where, what))
            check_keys(row, keys, where, what)
            rows.append(row)
    return rows


def read_profile(path):
    """One object: {"header": ..., "programs": [{"program", "graph_ms", "categories": [...]}, ...]}."""
    what = "`fusec profile --format json` output"
    try:
        j = json.loads(read_text(path))
    except ValueError:
        raise InputError("%s: not JSON (expected %s)" % (path, what))
    check_keys(j, {"header": STR, "programs": (lambda v: isinstance(v, list) and v, "a non-empty list")}, path, what)
    for i, p in enumerate(j["programs"]):
        where = "%s: programs[%d]" % (path, i)
        keys = {"program": STR, "graph_ms": NUM_OR_NULL, "categories": (lambda v: isinstance(v, list), "a list")}
        check_keys(p, keys, where, what)
        for k, c in enumerate(p["categories"]):
            check_keys(c, {"name": STR, "ms": (is_number, "a number")}, "%s.categories[%d]" % (where, k), what)
    return j


# ---------------------------------------------------------------------------------------------
# Plots. Each takes pyplot (imported only once the inputs have been read, so bad input fails
# fast and the test can tell "no matplotlib" from a bad file) and returns the figure.

def first_seen(items):
    out = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def plot_bench(plt, rows):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    # Baseline rows are the bars' unit; the rest in a fixed order, unknown impls after.
    impls = first_seen(r["impl"] for r in rows if r["impl"] != "eager")
    impls = [i for i in BENCH_IMPLS if i in impls] + [i for i in impls if i not in BENCH_IMPLS]
    if not impls or not any(r["speedup"] is not None and r["impl"] != "eager" for r in rows):
        raise InputError("--bench: no speedup to plot: no compiled or torch.compile row has an OK eager row beside it "
                         "(run fusec bench with --impl eager,compiled)")
    dtypes = first_seen(r["dtype"] for r in rows)
    # ctx, batch and warm-up go into the group's label only when the files hold several.
    varying = [k for k in ("ctx", "batch", "warmup") if len({r[k] for r in rows}) > 1]
    key = lambda r: (r["model"], r["ctx"], r["batch"], r["warmup"], r["pass"])
    ngroups = max(len(first_seen(key(r) for r in rows if r["dtype"] == dt)) for dt in dtypes)
    width = min(24, max(6, 1.5 + ngroups * (0.4 + 0.3 * len(impls))))
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(width, 3.8 * len(dtypes)), squeeze=False)
    colours = {i: BENCH_IMPLS.get(i, (i, PALETTE[(k + 3) % len(PALETTE)]))[1] for k, i in enumerate(impls)}
    bar = 0.8 / len(impls)
    for ax, dtype in zip(axes[:, 0], dtypes):
        mine = [r for r in rows if r["dtype"] == dtype]
        groups = first_seen(key(r) for r in mine)
        top = 1.0
        for g, gk in enumerate(groups):
            # The group's bars side by side, centred on its tick: an implementation that was
            # not run for it (torch.compile on one pass only) leaves no gap.
            present = []
            for impl in impls:
                r = next((r for r in mine if key(r) == gk and r["impl"] == impl), None)  # first file wins
                if r is not None:
                    present.append((impl, r))
            for k, (impl, r) in enumerate(present):
                x = g + bar * (k + 0.5 - len(present) / 2)
                if r["status"] == "OK" and r["speedup"] is not None:
                    ax.bar(x, r["speedup"], bar, color=colours[impl])
                    ax.annotate("%.2f×" % r["speedup"], (x, r["speedup"]), xytext=(0, 2), textcoords="offset points",
                                ha="center", va="bottom", fontsize=7, rotation=90 if len(impls) > 1 else 0)
                    top = max(top, r["speedup"])
                else:
                    # A row that did not run (OOM, an error) or has no eager row to compare with:
                    # say so where its bar would be, rather than leaving a silent gap.
                    note = "OOM" if r["status"] == "OOM" else "no eager" if r["status"] == "OK" else "failed"
                    ax.annotate(note, (x, 0), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                                fontsize=7, rotation=90, color=colours[impl])
        # Bars are labelled above their tops: leave room for the text.
        ax.set_ylim(0, top * 1.25)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        labels = []
        for model, ctx, batch, warmup, pss in groups:
            shown = {"ctx": "ctx %d" % ctx, "batch": "b%d" % batch, "warmup": "w%d" % warmup}
            extra = " ".join(shown[v] for v in varying)
            labels.append("%s%s\n%s" % (model, " " + extra if extra else "", PASS_LABELS.get(pss, pss)))
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_xlim(-0.6, len(groups) - 0.4)
        # A faint line between models (or shapes): the passes of one model read as one cluster.
        for g in range(1, len(groups)):
            if groups[g][:4] != groups[g - 1][:4]:
                ax.axvline(g - 0.5, color="0.85", lw=0.8)
        ax.set_ylabel("speedup over eager (×)")
        ax.set_title(dtype, fontsize=10, loc="left")
    handles = [Rectangle((0, 0), 1, 1, color=colours[i]) for i in impls]
    handles.append(Line2D([], [], color="black", lw=0.8, ls="--"))
    names = [BENCH_IMPLS.get(i, (i,))[0] for i in impls] + ["eager (= 1)"]
    axes[0, 0].legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    # Eager is LibTorch for the zoo's models, an imported model's own PyTorch module for --fir.
    fig.suptitle("Speedup over eager (eager median / median)", fontsize=11)
    fig.tight_layout()
    return fig


def plot_attention(plt, rows):
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullLocator

    runs = [r for r in rows if r["status"] in ("OK", "OOM")]
    if not runs:
        raise InputError("--attention: no row ran or ran out of memory: nothing to plot")
    blocks = first_seen((r["dtype"], r["batch"]) for r in runs)
    # Colour = head dim, line style and marker = implementation, fixed over the whole figure.
    ds = sorted({r["d"] for r in runs})
    impls = first_seen(r["impl"] for r in runs)
    colour = {d: PALETTE[k % len(PALETTE)] for k, d in enumerate(ds)}
    style = {impl: LINE_STYLES[k % len(LINE_STYLES)] for k, impl in enumerate(impls)}
    panels = [("forward_ms", "forward ms (median)", 1.0), ("fwd_bwd_ms", "fwd+bwd ms (median)", 1.0),
              ("peak_bytes", "peak memory (MiB)", 1.0 / MiB)]
    fig, axes = plt.subplots(len(blocks), len(panels), figsize=(15, 4.2 * len(blocks)), squeeze=False)
    for row_axes, (dtype, batch) in zip(axes, blocks):
        mine = [r for r in runs if (r["dtype"], r["batch"]) == (dtype, batch)]
        seqs = sorted({r["seq"] for r in mine})
        lines = first_seen((r["d"], r["impl"]) for r in mine)
        oom = [r for r in mine if r["status"] == "OOM"]
        for ax, (field, label, scale) in zip(row_axes, panels):
            for d, impl in lines:
                pts = sorted((r["seq"], r[field] * scale) for r in mine
                             if (r["d"], r["impl"]) == (d, impl) and r["status"] == "OK" and r[field])  # > 0: log
                if pts:
                    ls, marker = style[impl]
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, marker=marker, ms=4, color=colour[d])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            # Plain numbers (0.1, 10, 1000) rather than 10^k; a panel spanning less than a
            # decade also gets labels between the decades (LogFormatter's minor thresholds).
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
            ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
            # An OOM shape has no value to plot: an x at the bottom of the panel at its N, in
            # its d's colour; raised by implementation and nudged sideways by d, so that
            # shapes out of memory for several d and implementations stay distinct.
            oom_impls = first_seen(r["impl"] for r in oom)
            for r in oom:
                nudge = 1.1 ** (ds.index(r["d"]) - (len(ds) - 1) / 2)
                ax.plot(r["seq"] * nudge, 0.04 + 0.06 * oom_impls.index(r["impl"]), marker="x", ms=7, mew=2,
                        color=colour[r["d"]], transform=ax.get_xaxis_transform(), clip_on=False, ls="none")
            # Ticks at the swept N, written out (256, 1024, ...), not as powers of two.
            ax.xaxis.set_major_locator(FixedLocator(seqs))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticklabels([str(n) for n in seqs], fontsize=8)
            ax.set_xlim(seqs[0] / 1.4, seqs[-1] * 1.4)
            ax.grid(True, which="major", color="0.9", lw=0.6)
            ax.set_xlabel("sequence length N")
            ax.set_ylabel(label)
            ax.set_title("%s, batch %d: %s" % (dtype, batch, label.split(" (")[0]), fontsize=10, loc="left")
        handles = [Line2D([], [], color=colour[d], lw=2) for d in ds if any(r["d"] == d for r in mine)]
        names = ["d = %d" % d for d in ds if any(r["d"] == d for r in mine)]
        for impl in first_seen(r["impl"] for r in mine):
            ls, marker = style[impl]
            handles.append(Line2D([], [], color="black", ls=ls, marker=marker, ms=4))
            names.append(impl)
        if oom:
            handles.append(Line2D([], [], color="black", marker="x", ms=8, mew=2, ls="none"))
            names.append("out of memory\n(one x per d and impl)")
        row_axes[-1].legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.suptitle("Causal attention sweep (fwd+bwd: compiled and fused run their own forward; eager and sdpa-*: "
                 "forward + autograd backward)", fontsize=10)
    fig.tight_layout()
    return fig


def profile_label(path, header):
    """`fusec profile`'s header is "MODEL DTYPE batch=B ctx=N iters=I on DEVICE (...)" (cmd_profile.cpp)."""
    m = re.match(r"(.+?) (\S+) batch=(\d+) ctx=(\d+)", header)
    if m:
        return "%s %s\nbatch %s, ctx %s" % m.groups()
    return header.split(" on ")[0] or os.path.basename(path)


def plot_profile(plt, profiles):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    programs = first_seen(p["program"] for _, j in profiles for p in j["programs"])
    cats = list(CATEGORIES) + first_seen(c["name"] for _, j in profiles for p in j["programs"]
                                         for c in p["categories"] if c["name"] not in CATEGORIES)
    colour = {c: CATEGORIES.get(c, PALETTE[(k + 7) % len(PALETTE)]) for k, c in enumerate(cats)}
    fig, axes = plt.subplots(1, len(programs), figsize=(1.5 + len(programs) * (1.5 + 1.3 * len(profiles)), 5.2),
                             squeeze=False)
    graph_shown = False
    for ax, name in zip(axes[0], programs):
        bars = [(profile_label(path, j["header"]), p)
                for path, j in profiles for p in j["programs"] if p["program"] == name]
        top = max(sum(c["ms"] for c in p["categories"]) for _, p in bars) or 1.0
        for x, (label, p) in enumerate(bars):
            ms = {c["name"]: c["ms"] for c in p["categories"]}
            total = sum(ms.values())
            bottom = 0.0
            for c in cats:
                h = ms.get(c, 0.0)
                if h <= 0:
                    continue
                ax.bar(x, h, 0.6, bottom=bottom, color=colour[c])
                # The share inside the segment, where it is tall enough to hold the text.
                if h > 0.06 * top:
                    ax.text(x, bottom + h / 2, "%.0f%%" % (100 * h / total), ha="center", va="center", fontsize=7,
                            color="white")
                bottom += h
            ax.annotate("%.2f ms" % total, (x, total), xytext=(0, 2), textcoords="offset points", ha="center",
                        va="bottom", fontsize=8)
            # The CUDA-graph replay of the same program: the sum of launches less launch overhead.
            if p["graph_ms"] is not None:
                ax.plot([x - 0.36, x + 0.36], [p["graph_ms"]] * 2, color="black", lw=1.5, ls="--")
                graph_shown = True
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars], fontsize=8)
        ax.set_xlim(-0.6, len(bars) - 0.4)
        ax.set_ylim(0, top * 1.1)
        ax.set_ylabel("summed launch time (ms)")
        ax.set_title(name, fontsize=10, loc="left")
    # Legend top to bottom in stacking order read downwards, as the bars are.
    used = [c for c in cats if any(c2["name"] == c and c2["ms"] > 0 for _, j in profiles for p in j["programs"]
                                   for c2 in p["categories"])]
    handles = [Rectangle((0, 0), 1, 1, color=colour[c]) for c in reversed(used)]
    names = list(reversed(used))
    if graph_shown:
        handles.append(Line2D([], [], color="black", lw=1.5, ls="--"))
        names.append("the program as one CUDA graph")
    axes[0, -1].legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    devices = first_seen(m.group(1) for _, j in profiles for m in [re.search(r" on (.+?) \(", j["header"])] if m)
    fig.suptitle("Launch time by category (median per launch)" + (" on " + devices[0] if len(devices) == 1 else ""),
                 fontsize=11)
    fig.tight_layout()
    return fig


def read_scaling(specs):
    """[LABEL=]FILE specs -> rows, each with its series: the label (or the file's name) for fusec's
    rows, and PyTorch's DDP rows (torch.compile on 1 GPU, torch.compile+DDP on more) apart."""
    rows = []
    for spec in specs:
        label, path = spec.split("=", 1) if "=" in spec and not os.path.exists(spec) else (None, spec)
        label = label or os.path.splitext(os.path.basename(path))[0]
        for r in read_rows([path], SCALING_KEYS, "`fusec bench --gpus LIST --format json` output"):
            torch = r["impl"].startswith("torch.compile")
            rows.append(dict(r, series="PyTorch DDP + torch.compile" if torch else "fusec " + label))
    return rows


def plot_scaling(plt, rows):
    ok = [r for r in rows if r["status"] == "OK" and r["median_ms"] is not None]
    if not any(r["gpus"] > 1 for r in ok):
        raise InputError("--scaling: no row of 2 GPUs or more ran (run fusec bench --gpus 1,2,...)")
    panels = first_seen((r["model"], r["batch"], r["dtype"], r["ctx"]) for r in rows)
    series = first_seen(r["series"] for r in rows)
    colours = {name: PALETTE[k % len(PALETTE)] for k, name in enumerate(series)}
    gpus = sorted({r["gpus"] for r in rows})
    fig, axes = plt.subplots(2, len(panels), figsize=(max(6, 4.2 * len(panels)), 7), squeeze=False)
    for col, (model, batch, dtype, ctx) in enumerate(panels):
        top, eff = axes[0, col], axes[1, col]
        for k, name in enumerate(series):
            mine = sorted((r for r in ok if r["series"] == name and (r["model"], r["batch"], r["dtype"], r["ctx"]) ==
                           (model, batch, dtype, ctx)), key=lambda r: r["gpus"])
            if not mine:
                continue
            ls, marker = LINE_STYLES[k % len(LINE_STYLES)]
            top.plot([r["gpus"] for r in mine], [r["median_ms"] for r in mine], ls=ls, marker=marker,
                     color=colours[name], label=name)
            scaled = [r for r in mine if r["scaling_efficiency"] is not None]
            eff.plot([1] + [r["gpus"] for r in scaled], [100] + [100 * r["scaling_efficiency"] for r in scaled], ls=ls,
                     marker=marker, color=colours[name], label=name)
        top.set_title("%s b%d %s ctx %d" % (model, batch, dtype, ctx), fontsize=10, loc="left")
        top.set_ylabel("step (ms, median)")
        top.set_ylim(bottom=0)
        eff.axhline(95, color="black", lw=0.8, ls="--")
        eff.set_ylabel("weak-scaling efficiency (%)")
        eff.set_ylim(0, 105)
        for ax in (top, eff):
            ax.set_xticks(gpus)
            ax.set_xlabel("GPUs (the same batch on each)")
    axes[0, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.suptitle("Data parallel, weak scaling (1-GPU step / N-GPU step; dashed: 95%)", fontsize=11)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    # extend: `--bench a.json b.json` and `--bench a.json --bench b.json` both work.
    ap.add_argument("--bench", nargs="+", action="extend", default=[], metavar="FILE",
                    help="fusec bench --format json output")
    ap.add_argument("--attention", nargs="+", action="extend", default=[], metavar="FILE",
                    help="fusec bench attention --format json output")
    ap.add_argument("--profile", nargs="+", action="extend", default=[], metavar="FILE",
                    help="fusec profile --format json output (one per file, e.g. fp32 and bf16)")
    ap.add_argument("--scaling", nargs="+", action="extend", default=[], metavar="[LABEL=]FILE",
                    help="fusec bench --gpus LIST --format json output, a series a file")
    ap.add_argument("--out-dir", default=".", metavar="DIR", help="where the PNGs go (default: .)")
    a = ap.parse_args(argv)
    if not (a.bench or a.attention or a.profile or a.scaling):
        ap.error("give at least one of --bench, --attention, --profile, --scaling")

    # Every input is read and checked before anything is drawn or written.
    jobs = []
    if a.bench:
        rows = read_rows(a.bench, BENCH_KEYS, "`fusec bench --format json` output")
        jobs.append(("bench_speedup.png", plot_bench, rows))
    if a.attention:
        rows = read_rows(a.attention, ATTENTION_KEYS, "`fusec bench attention --format json` output")
        jobs.append(("attention_sweep.png", plot_attention, rows))
    if a.profile:
        jobs.append(("profile_categories.png", plot_profile, [(p, read_profile(p)) for p in a.profile]))
    if a.scaling:
        jobs.append(("scaling.png", plot_scaling, read_scaling(a.scaling)))

    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display, and no GUI toolkit needed
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise InputError("matplotlib is not importable (%s); Debian: apt-get install python3-matplotlib" % e)

    # Every figure is drawn before any is written: input with nothing to plot (no eager row to
    # compare with, say) then leaves no partial set of PNGs behind.
    figures = [(name, plot(plt, data)) for name, plot, data in jobs]
    try:
        os.makedirs(a.out_dir, exist_ok=True)
    except OSError as e:
        raise InputError("--out-dir %s: %s" % (a.out_dir, e.strerror or e))
    for name, fig in figures:
        path = os.path.join(a.out_dir, name)
        try:
            fig.savefig(path, dpi=110, bbox_inches="tight")  # keeps the legends outside the axes
        except OSError as e:
            raise InputError("%s: %s" % (path, e.strerror or e))
        plt.close(fig)
        print(path)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        sys.exit(1)
