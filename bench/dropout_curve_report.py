#!/usr/bin/env python3
"""The dropout training curves of fusec and PyTorch side by side (issue 42), from
scripts/gpu-dropout-curve.sh's runs: a markdown table of each group's loss (the mean over its
seeds, each step's loss averaged over a window of steps around it) at a few steps; for each
group the mean of its whole curve (how fast it learned and where it ended) and of its last
--tail steps, per seed; and two verdicts on what dropout does to each implementation's curve
mean (its runs with dropout against its run without, on the same batches: the two
implementations draw different batches, so their curves are compared through this effect):
  * fusec's effect is PyTorch's within the noise;
  * PyTorch's effect is larger than the noise (else the comparison could not tell a fusec that
    trains with dropout from one that ignores it).
The noise is the larger of the two implementations' spreads (max - min) of the seeds' curve
means with dropout: in these runs the seeds change the dropout masks only.

    dropout_curve_report.py --torch TORCH.jsonl --fusec DROPOUT:LOG ... [--tail 50]

TORCH.jsonl holds bench/torch_dropout_curve.py's rows; each --fusec names a `fusec run` log
(its "step k/N  loss X" lines) after whether dropout was on in it (1 or 0). Exit 0 when
both verdicts hold, 1 otherwise or on bad input (one line).
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


def spread(means):
    return max(means) - min(means)


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
            drop, sep, log = spec.partition(":")
            if not sep or drop not in ("0", "1"):
                raise ValueError(f"--fusec takes DROPOUT:LOG with DROPOUT 0 or 1, got '{spec}'")
            groups.setdefault(("fusec", drop == "1"), []).append(fusec_losses(log))
        if not any(groups.values()) or any(not c for runs in groups.values() for c in runs):
            raise ValueError(f"{a.torch}: a run without losses")
    except (OSError, ValueError, KeyError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    n = min(len(c) for runs in groups.values() for c in runs)
    tail = max(1, min(a.tail, n))
    steps = sorted({1, 10, 25, 50, 100, 150, n} & set(range(1, n + 1)))
    order = [k for k in (("fusec", True), ("torch", True), ("fusec", False), ("torch", False)) if k in groups]
    print("| step | " + " | ".join(f"{impl}, dropout {'on' if d else 'off'} ({len(groups[(impl, d)])} seeds)"
                                    for impl, d in order) + " |")
    print("|---:|" + "---:|" * len(order))
    for s in steps:
        print(f"| {s} | " + " | ".join(f"{statistics.fmean(smooth(c, s - 1) for c in groups[k]):.4f}"
                                       for k in order) + " |")

    curve, noise = {}, {}
    for k in order:
        whole = [statistics.fmean(c[:n]) for c in groups[k]]
        last = [statistics.fmean(c[n - tail:n]) for c in groups[k]]
        curve[k], noise[k] = statistics.fmean(whole), spread(whole)
        print(f"{k[0]}, dropout {'on' if k[1] else 'off'}: curve mean {curve[k]:.4f} (seeds "
              f"{', '.join(f'{m:.4f}' for m in whole)}; spread {noise[k]:.4f}), last {tail} steps "
              f"{statistics.fmean(last):.4f} (seeds {', '.join(f'{m:.4f}' for m in last)})")
    if any(k not in curve for k in (("fusec", True), ("torch", True), ("fusec", False), ("torch", False))):
        print(f"{PROG}: error: runs with and without dropout of both fusec and torch are needed", file=sys.stderr)
        return 1
    effect = {impl: curve[(impl, True)] - curve[(impl, False)] for impl in ("fusec", "torch")}
    bound = max(noise[("fusec", True)], noise[("torch", True)])
    diff = abs(effect["fusec"] - effect["torch"])
    ok = diff <= bound
    print(f"verdict: dropout raises fusec's curve mean by {effect['fusec']:+.4f} and PyTorch's by {effect['torch']:+.4f}: "
          f"{'the same' if ok else 'NOT the same'} within the noise ({diff:.4f} {'<=' if ok else '>'} {bound:.4f})")
    visible = abs(effect["torch"]) > bound
    print(f"verdict: dropout's effect on PyTorch's curve is {'larger' if visible else 'NOT larger'} than the noise "
          f"({abs(effect['torch']):.4f} {'>' if visible else '<='} {bound:.4f})")
    ok = ok and visible
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
