"""Exports a PyTorch language model (an nn.Module: forward(ids) -> logits) to fusec:
DIR/model.fir, a @forward from the token ids to the logits in fusec's IR, and
DIR/weights.safetensors, its weights by their named_parameters() names (a tied weight once,
under its first name) plus the tensors the graph needs that are not trained (role buffer).

    python3 -m fusec.export --model FILE.py:ClassName [--kwargs JSON] [--state-dict SD.pt]
                            --batch B --seq T --out DIR
    fusec.export.export(model, example_ids, out_dir)          # the same from Python

The model is captured at the ATen level (capture.py: torch.export with the core-ATen
decompositions where torch >= 2.1, make_fx on older torch), on real example ids, and each ATen
op is mapped to fusec ops (convert.py); attention is recognised as fusec's composite
(attention.py). Whatever does not depend on the ids or the weights (RoPE tables, causal
masks, position ranges) is computed here, once: a splat becomes a `constant`, anything else a
buffer. An op without a mapping
fails the export with one line naming it and the model's source line that called it; no file
is written then.
"""
import argparse
import importlib.util
import json
import os
import sys

import torch

from . import safetensors_io
from .capture import ExportError, SourceLines, capture
from .convert import Converter


def export(model, example_ids, out_dir, how="auto", record=None):
    """Writes out_dir/model.fir and out_dir/weights.safetensors for `model` at the shape of
    `example_ids` (int64 [B, T]). `how`: "auto" (torch.export where torch >= 2.1, else
    make_fx), "torch.export" or "make_fx". `record` (the CLI's: the model's file, class,
    kwargs, seed) goes to out_dir/export.json with the shape and capture, which is how
    `fusec bench --fir` rebuilds the PyTorch module (bench/torch_module_ref.py). Returns the
    PyTorch logits of the example, for checks."""
    if not isinstance(example_ids, torch.Tensor) or example_ids.dtype != torch.int64 or example_ids.dim() != 2:
        raise ExportError("the example ids must be an int64 tensor [B, T]")
    model = model.eval()
    sources = SourceLines(model, (example_ids,))
    captured = capture(model, example_ids, how)
    conv = Converter(captured, sources)
    with torch.no_grad():
        logits = conv.run()
        want = model(example_ids)
    if not isinstance(want, torch.Tensor) or want.dim() != 3:
        raise ExportError("forward(ids) must return the logits as one tensor [B, T, V]")
    text = (f"// Exported by fusec.export ({captured.how}) from {type(model).__name__}, ids [{example_ids.shape[0]}, "
            f"{example_ids.shape[1]}], torch {torch.__version__}.\nfunc @forward {{\n" + conv.text(logits) + "\n}\n")
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, "model.fir.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    safetensors_io.save(os.path.join(out_dir, "weights.safetensors"), conv.tensors,
                        {"format": "pt", "fusec_model": type(model).__name__})
    if record is not None:
        record = dict(record, batch=int(example_ids.shape[0]), seq=int(example_ids.shape[1]), capture=captured.how,
                      torch=torch.__version__)
        with open(os.path.join(out_dir, "export.json.tmp"), "w") as f:
            json.dump(record, f, indent=1)
        os.replace(os.path.join(out_dir, "export.json.tmp"), os.path.join(out_dir, "export.json"))
    os.replace(tmp, os.path.join(out_dir, "model.fir"))
    return want


def _load_class(spec):
    if ":" not in spec:
        raise ExportError(f"--model must be FILE.py:ClassName, got '{spec}'")
    path, cls = spec.rsplit(":", 1)
    if not os.path.isfile(path):
        raise ExportError(f"--model: no file '{path}'")
    mod_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    mod = importlib.util.module_from_spec(mod_spec)
    sys.modules[mod_spec.name] = mod
    mod_spec.loader.exec_module(mod)
    if not hasattr(mod, cls):
        raise ExportError(f"--model: {path} has no class '{cls}'")
    return getattr(mod, cls)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m fusec.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="FILE.py:ClassName")
    ap.add_argument("--kwargs", default="{}", help="the class's constructor arguments, as JSON")
    ap.add_argument("--state-dict", help="a torch.save'd state dict to load (default: the model's own init)")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed before constructing (default 0)")
    ap.add_argument("--out", required=True, help="the output directory")
    ap.add_argument("--capture", default="auto", choices=["auto", "torch.export", "make_fx"],
                    help="how the model is traced (default auto: torch.export where torch >= 2.1, else make_fx)")
    a = ap.parse_args(argv)
    try:
        if a.batch < 1 or a.seq < 1:
            raise ExportError(f"--batch and --seq must be at least 1, got {a.batch} and {a.seq}")
        try:
            kwargs = json.loads(a.kwargs)
        except json.JSONDecodeError as e:
            raise ExportError(f"--kwargs is not JSON: {e}") from None
        torch.manual_seed(a.seed)
        model = _load_class(a.model)(**kwargs)
        if a.state_dict:
            model.load_state_dict(torch.load(a.state_dict, map_location="cpu"))
        ids = torch.randint(0, 2, (a.batch, a.seq), dtype=torch.int64)  # values do not shape the graph
        path, cls = a.model.rsplit(":", 1)
        record = {"model": os.path.abspath(path) + ":" + cls, "kwargs": kwargs, "seed": a.seed,
                  "state_dict": os.path.abspath(a.state_dict) if a.state_dict else None}
        export(model, ids, a.out, a.capture, record)
    except ExportError as e:
        print(f"fusec.export: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
