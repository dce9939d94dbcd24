#!/usr/bin/env python3
"""The dropout training curves of fusec and PyTorch side by side (issue 42), from
scripts/gpu-dropout-curve.sh's runs: a markdown table of each group's loss (the mean over its
seeds, each step's loss averaged over a window of steps around it) at a few steps; for each
group the mean of its whole curve (how fast it learned and where it ended: dropout slows the
learning, and on a learnable stream both end near the same floor) and of its last --tail
steps, with the spread between its seeds; and two verdict lines on the curve means: fusec's
with dropout is within the noise of PyTorch's, and PyTorch's with and without dropout are
further apart than that noise (else the comparison could not tell a fusec that trains with
dropout from one that ignores it).

    dropout_curve_report.py --torch TORCH.jsonl --fusec NAME=SEED:DROPOUT:LOG ... [--tail 50]

TORCH.jsonl holds bench/torch_dropout_curve.py's rows; each --fusec names a `fusec run` log
(its "step k/N  loss X" lines) with its seed and whether dropout was on (1 or 0). The noise is
the larger of the two dropout groups' seed spreads (max - min of the seeds' means). Exit 0
when both verdicts hold, 1 otherwise or on bad input (one line).
"""
import argparse
import json
import re
import statistics
import sys

PROG = "dropout_curve_report.py"
STEP = re.compile(r"^step (\d+)/(\d+)\s+loss (\S+)")


def fusec_losses(path):
    losses = []
    with open(path) as f:
        for line in f:
            m = STEP.match(line)
            if m:
                losses.append(float(m.group(3)))
    if not losses:
        raise ValueError(f"{path}: no 'step k/N  loss X' lines")
    return losses


def smooth(losses, at, half=5):
    lo, hi = max(0, at - half), min(len(losses), at + half + 1)
    return statistics.fmean(losses[lo:hi])


def main(argv):
    p = argparse.ArgumentParser(prog=PROG)
    p.add_argument("--torch", required=True)
    p.add_argument("--fusec", action="append", default=[], required=True)
    p.add_argument("--tail", type=int, default=50)
    a = p.parse_args(argv)
    try:
        groups = {}
        with open(a.torch) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    groups.setdefault(("torch", r["dropout"]), []).append(r["losses"])
        for spec in a.fusec:
            name, rest = spec.split("=", 1)
            seed, drop, log = rest.split(":", 2)
            groups.setdefault(("fusec", drop == "1"), []).append(fusec_losses(log))
    except (OSError, ValueError, KeyError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    n = min(len(c) for runs in groups.values() for c in runs)
    steps = sorted({1, 10, 25, 50, 100, 150, n} & set(range(1, n + 1)))
    order = [k for k in (("fusec", True), ("torch", True), ("fusec", False), ("torch", False)) if k in groups]
    print("| step | " + " | ".join(f"{impl}, dropout {'on' if d else 'off'} ({len(groups[(impl, d)])} seeds)"
                                    for impl, d in order) + " |")
    print("|---:|" + "---:|" * len(order))
    for s in steps:
        print(f"| {s} | " + " | ".join(f"{statistics.fmean(smooth(c, s - 1) for c in groups[k]):.4f}"
                                       for k in order) + " |")
    def spread(means):
        return max(means) - min(means)

    curve, noise = {}, {}
    for k in order:
        whole = [statistics.fmean(c[:n]) for c in groups[k]]
        tail = [statistics.fmean(c[n - a.tail:n]) for c in groups[k]]
        curve[k], noise[k] = statistics.fmean(whole), spread(whole)
        print(f"{k[0]}, dropout {'on' if k[1] else 'off'}: curve mean {curve[k]:.4f} (seeds "
              f"{', '.join(f'{m:.4f}' for m in whole)}; spread {noise[k]:.4f}), last {a.tail} steps "
              f"{statistics.fmean(tail):.4f} (seeds {', '.join(f'{m:.4f}' for m in tail)})")
    if ("fusec", True) not in curve or ("torch", True) not in curve:
        print(f"{PROG}: error: no dropout runs of both fusec and torch", file=sys.stderr)
        return 1
    diff = abs(curve[("fusec", True)] - curve[("torch", True)])
    bound = max(noise[("fusec", True)], noise[("torch", True)])
    ok = diff <= bound
    print(f"verdict: fusec's curve mean with dropout is {'within' if ok else 'OUTSIDE'} PyTorch's noise: "
          f"|{curve[('fusec', True)]:.4f} - {curve[('torch', True)]:.4f}| = {diff:.4f} "
          f"{'<=' if ok else '>'} {bound:.4f}")
    if ("torch", False) in curve:
        effect = abs(curve[("torch", True)] - curve[("torch", False)])
        visible = effect > bound
        print(f"verdict: dropout's effect on PyTorch's curve mean is {'larger' if visible else 'NOT larger'} than the "
              f"noise: |{curve[('torch', True)]:.4f} - {curve[('torch', False)]:.4f}| = {effect:.4f} "
              f"{'>' if visible else '<='} {bound:.4f}")
        ok = ok and visible
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
