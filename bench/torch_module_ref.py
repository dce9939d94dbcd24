#!/usr/bin/env python3
"""An imported model's PyTorch side of `fusec bench --fir DIR/model.fir`: the nn.Module that
python3 -m fusec.export exported (rebuilt from DIR/export.json, the exporter's record of its
file, class, constructor arguments, seed and shape), timed eager, torch.compile (default) and
torch.compile(mode="reduce-overhead") at the exported shape, printing the same JSON rows as
`fusec bench --format json` (bench/report.h lists the keys). The passes, the timing and bf16
autocast are bench/torch_compile_ref.py's (bench/torch_bench.py make_call, time_calls).

    torch_module_ref.py --fir DIR/model.fir --name NAME --forward-flops-per-token F
                        [--dtype fp32,bf16] [--passes forward,fwd_bwd,step] [--warmup 5]
                        [--iters 10] [--impl eager,torch.compile,torch.compile-ro] [--seed 0]

fusec passes --name (its name of the model, so rows pair up) and the model FLOPs per token of
the forward, counted on the traced graph (bench/flops.h); fwd_bwd and step count three times
that. Errors: one line, exit 1.
"""
import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compile_ref as ref  # noqa: E402  (the row keys, parsing, speedups)

IMPLS = ref.IMPLS


def parse_args(argv):
    p = ref.Parser(description=__doc__.split("\n\n")[0])
    lst = lambda kind: (lambda s: [kind(x) for x in s.split(",")])
    p.add_argument("--fir", required=True, help="DIR/model.fir written by python3 -m fusec.export")
    p.add_argument("--name", help="the model's name in the rows (default: DIR's name)")
    p.add_argument("--forward-flops-per-token", type=float, default=0.0)
    p.add_argument("--dtype", type=lst(str), default=["fp32", "bf16"])
    p.add_argument("--passes", type=lst(str), default=["forward", "fwd_bwd", "step"])
    p.add_argument("--warmup", type=lst(int), default=[5])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--impl", type=lst(str), default=list(IMPLS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=["json"], default="json")
    a = p.parse_args(argv)
    p.check_choices([("--dtype", a.dtype, ("fp32", "bf16")),
                     ("--passes", a.passes, ("forward", "fwd_bwd", "step")), ("--impl", a.impl, IMPLS)])
    if a.iters < 1:
        p.error("--iters must be at least 1, got %d" % a.iters)
    record = os.path.join(os.path.dirname(os.path.abspath(a.fir)), "export.json")
    try:
        with open(record) as f:
            a.record = json.load(f)
        a.record["model"], a.record["batch"], a.record["seq"]
    except (OSError, ValueError, KeyError) as e:
        p.error("%s: no usable exporter record (%s); export the model with python3 -m fusec.export" % (record, e))
    a.name = a.name or os.path.basename(os.path.dirname(os.path.abspath(a.fir)))
    return a


def build_module(record):
    """The module as the exporter built it: constructed (after the exporter's seed) from its
    file, class and kwargs, its state dict loaded."""
    import torch
    path, cls = record["model"].rsplit(":", 1)
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    torch.manual_seed(record.get("seed", 0))
    model = getattr(mod, cls)(**record.get("kwargs", {}))
    if record.get("state_dict"):
        model.load_state_dict(torch.load(record["state_dict"], map_location="cpu"))
    return model


def main(argv):
    a = parse_args(argv)
    if not ref.torch_with_cuda():
        return 1
    import torch
    import torch_bench
    ceilings = torch_bench.strict_f32_and_ceilings()
    batch, seq = a.record["batch"], a.record["seq"]
    with torch.no_grad():  # the vocabulary: the logits' last dim
        vocab = build_module(a.record)(torch.zeros(1, seq, dtype=torch.long)).shape[-1]
    rows = []
    for dtype in a.dtype:
        for pass_ in a.passes:
            for warmup in a.warmup:
                for impl in a.impl:
                    row = dict.fromkeys(ref.KEYS)
                    row.update(model=a.name, ctx=seq, batch=batch, dtype=dtype, impl=impl, warmup=warmup, gpus=1,
                               iters=a.iters, peak_tflops=ceilings[dtype],
                               model_flops_per_token=a.forward_flops_per_token * (1 if pass_ == "forward" else 3))
                    row["pass"] = pass_
                    torch_bench.time_row(row, lambda: build_module(a.record).train(), vocab, a.seed, a.iters,
                                         ref.finish_row)
                    rows.append(row)
    ref.fill_speedups(rows)
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
