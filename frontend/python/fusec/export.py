"""Exports a PyTorch language model (an nn.Module: forward(ids) -> logits) to fusec:
DIR/model.fir, a @forward from the token ids to the logits in fusec's IR, and
DIR/weights.safetensors, what the module's state_dict() holds (its parameters, a tied weight
once under its first name, and its persistent buffers, by their state_dict names, as f32),
so that it loads back with load_state_dict(strict=True) wherever the model ties no weights
and its graph needs no `_const.N` (below).

    python3 -m fusec.export --model FILE.py:ClassName [--kwargs JSON] [--state-dict SD.pt]
                            --batch B --seq T --out DIR [--no-verify] [--debug]
    python3 -m fusec.export --hf MODEL [--config JSON] --batch B --seq T --out DIR [...]
    fusec.export.export(model, example_ids, out_dir)          # the same from Python
    fusec.export.export_hf(model_or_path, example_ids, out_dir, config=None, seed=0)

--hf exports a Hugging Face `transformers` causal LM with no wrapper file (hf.py): MODEL is a
local checkpoint directory (config.json, with its weights or, without, randomly initialised
from it) or a model type such as gpt2, llama or qwen2 (its default config with --config's
overrides, a JSON object, randomly initialised after torch.manual_seed(--seed)); nothing is
downloaded. What is exported is forward(ids) -> model(input_ids=ids, use_cache=False).logits,
with the attention implementation that the exporter recognises (sdpa; eager for a model
without it or with attention-logit softcapping), and the parameters under the model's own
names. --hf and --model exclude each other; --config goes with --hf, --kwargs and
--state-dict with --model.

The model is captured at the ATen level (capture.py: torch.export with the core-ATen
decompositions where torch >= 2.1, make_fx on older torch), on real example ids, and each ATen
op is mapped to fusec ops (convert.py); attention is recognised as fusec's composite
(attention.py). Whatever does not depend on the ids or the weights (RoPE tables, causal
masks, position ranges) is computed here: a splat becomes a `constant`, a persistent buffer a
param with role buffer, and what is computed from those (a slice of a mask, arange's
positions) is computed in the .fir too; anything else, such as a table computed from a
non-persistent buffer, is a `_const.N` buffer that weights.safetensors holds as well (fusec
binds every param from that file, and its IR has no tensor-valued constant). A mask that
attention absorbed is not written. An op without a mapping fails the export with one line
naming it and the model's source line that called it.

The export checks itself before it is renamed into place (verify.py): fusec's CPU interpreter
runs the written model.fir and weights.safetensors forward on the example ids, and one
train_step, and its logits, loss and every parameter's gradient must match PyTorch's (fp32
bounds); past them the export fails with one line naming the first op whose value diverges
(or the parameter whose gradient does) and the model's source line. It needs the fusec
binary (FUSEC_BIN, else `fusec` on PATH, else this checkout's build/fusec) and runs the model
on the CPU once more, with gradients; --no-verify (verify=False) skips it, for a model too
large for the CPU.

The three files are written as a set (common.write_files): to hidden temporaries in DIR, then
renamed, model.fir last, so a DIR with a model.fir holds one complete export, and a failed
export leaves DIR as it was. On success the CLI prints one line to stdout: what it wrote, the
number of ops, parameters and the size of the weights. It turns every failure (the model's own errors and
sys.exit included) into one line, `fusec.export: error: ...`, and exit 1; --debug adds the
Python traceback. torch is imported only when an export runs, so --help works without it.
"""
import contextlib
import importlib.util
import json
import os
import sys
from collections import namedtuple

from .common import ExportError, Parser, cli, describe, write_files

# What export() returns: the PyTorch logits of the example (for checks), the number of ops in
# model.fir's @forward (params and the input not counted), the number of parameters (a tied
# weight once) and the size of weights.safetensors in bytes.
# `verified`: verify.Verifier's measurements (the logits', loss's and gradients' errors, each
# relative to its bound's scale), None when not checked.
Exported = namedtuple("Exported", "logits ops parameters weight_bytes verified")


def has_dropout(model):
    """Whether `model` has a dropout module that drops anything (p > 0)."""
    import torch
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())


def export(model, example_ids, out_dir, how="auto", record=None, verify=True, dropout="auto"):
    """Writes out_dir/model.fir and out_dir/weights.safetensors for `model` at the shape of
    `example_ids` (int64 [B, T]). `how`: "auto" (torch.export where torch >= 2.1, else
    make_fx), "torch.export" or "make_fx". `record` (the CLI's: the model's file, class,
    kwargs, seed) goes to out_dir/export.json with the shape and capture, which is how
    `fusec bench --fir` rebuilds the PyTorch module (bench/torch_module_ref.py). `verify`:
    check the written files with fusec against PyTorch before they are renamed into place
    (the module's docstring); False skips it. Returns an Exported (the PyTorch logits of the
    example, counts for a summary and what the check measured). `dropout`: "auto" (a model
    with a dropout module of p > 0 is traced in train mode, its dropout kept as fusec's
    `dropout` ops, which `fusec run`'s forward drops and train_step keeps), True or False
    (traced in eval mode: no dropout)."""
    import torch  # here, not at the top: the CLI's --help and argument errors need no torch
    from . import safetensors_io
    from .capture import SourceLines, capture
    from .convert import Converter

    if not isinstance(example_ids, torch.Tensor) or example_ids.dtype != torch.int64 or example_ids.dim() != 2:
        raise ExportError("the example ids must be an int64 tensor [B, T]")
    check_out_dir(out_dir)  # before the model runs, which can take minutes
    fusec = None
    if verify:
        from .verify import find_fusec
        fusec = find_fusec()  # likewise: no binary to check with is known before anything runs
    model = model.eval()
    train = has_dropout(model) if dropout == "auto" else bool(dropout)
    sources = SourceLines(model, (example_ids,))
    captured = capture(model, example_ids, how, train=train)
    conv = Converter(captured, sources)
    conv.train_dropout = train
    with torch.no_grad():
        logits = conv.run()
        want = model(example_ids)
    if not isinstance(want, torch.Tensor) or want.dim() != 3:
        raise ExportError("forward(ids) must return the logits as one tensor [B, T, V]")
    body, tensors, ops = conv.finish(logits)
    text = (f"// Exported by fusec.export ({captured.how}) from {type(model).__name__}, ids [{example_ids.shape[0]}, "
            f"{example_ids.shape[1]}], torch {torch.__version__}.\nfunc @forward {{\n" + body + "\n}\n")
    meta = {"format": "pt", "fusec_model": type(model).__name__}
    files = [("weights.safetensors", lambda f: safetensors_io.write(f, tensors, meta))]
    if record is not None:
        record = dict(record, batch=int(example_ids.shape[0]), seq=int(example_ids.shape[1]), capture=captured.how,
                      torch=torch.__version__)
        files.append(("export.json", lambda f: f.write(json.dumps(record, indent=1).encode())))
    files.append(("model.fir", lambda f: f.write(text.encode())))  # last: it marks a complete export
    verifier = None
    if verify:
        from .verify import Verifier
        verifier = Verifier(fusec, conv, logits, sources, model, example_ids, want)
    try:
        write_files(out_dir, files, verifier.check if verifier else None)
    except OSError as e:  # a full disk, a read-only directory: the filesystem's words, one line
        raise ExportError(f"cannot write the export to '{out_dir}': {e.strerror or e}") from e
    return Exported(want, ops, sum(p.numel() for p in model.parameters()),  # parameters(): a tied weight once
                    os.path.getsize(os.path.join(out_dir, "weights.safetensors")),
                    verifier.result if verifier else None)


def export_hf(model_or_path, example_ids, out_dir, config=None, seed=0, how="auto", verify=True):
    """export() for a Hugging Face `transformers` causal LM, with no wrapper file (hf.py):
    `model_or_path` is a transformers model object (switched in place to a recognised
    attention implementation and fp32), a local checkpoint directory or a model type such as
    "llama" (`config`: a dict of its config's overrides; a random initialisation draws after
    torch.manual_seed(seed)). A directory or model type is recorded in out_dir/export.json, so
    that `fusec bench --fir` rebuilds the module; a model object is not (no export.json).
    Returns export()'s Exported."""
    import torch
    from . import hf
    check_out_dir(out_dir)  # before the model is loaded, which can take minutes
    hf.quiet()
    if isinstance(model_or_path, (str, os.PathLike)):
        source = os.fspath(model_or_path)
        torch.manual_seed(seed)
        model, record = hf.HFCausalLM(source, config), _hf_record(source, config, seed)
    else:
        model, record = hf.HFCausalLM(model_or_path, config), None
    return export(model, example_ids, out_dir, how, record, verify)


def check_out_dir(path):
    """Refuses an output directory that cannot be written, by its nearest existing ancestor
    (the directory is created only when the files are written, so a failed export creates
    nothing)."""
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        raise ExportError(f"cannot write the export to '{path}': '{p}' is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write the export to '{path}': '{p}' is not writable")


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


@contextlib.contextmanager
def _doing(what, model_file=None):
    """Turns any failure inside, the model's own included, into an ExportError that says what
    was being done; ExportErrors (already one line that says it) pass unchanged."""
    try:
        yield
    except ExportError:
        raise
    except BaseException as e:  # a model's sys.exit or a Ctrl-C too: still one line and exit 1
        raise ExportError(f"{what}: {describe(e, model_file)}") from e


def main(argv=None):
    ap = Parser(prog="python3 -m fusec.export", description=__doc__.split("\n\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="FILE.py:ClassName, an nn.Module whose forward(ids) returns the logits")
    which.add_argument("--hf", metavar="MODEL",
                       help="a Hugging Face transformers causal LM, no wrapper file needed: a local checkpoint "
                            "directory (config.json, and its weights if any) or a model type such as gpt2, llama, "
                            "qwen2 (randomly initialised from its default config and --config); nothing is downloaded")
    ap.add_argument("--kwargs", help="with --model: the class's constructor arguments, as a JSON object")
    ap.add_argument("--state-dict", help="with --model: a torch.save'd state dict to load (default: the model's own "
                                         "init)")
    ap.add_argument("--config", help="with --hf: overrides of the model's config, as a JSON object (e.g. "
                                     "'{\"n_layer\": 2, \"n_embd\": 128}' for gpt2)")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed before constructing (default 0)")
    ap.add_argument("--out", required=True, help="the output directory")
    ap.add_argument("--capture", default="auto", choices=["auto", "torch.export", "make_fx"],
                    help="how the model is traced (default auto: torch.export where torch >= 2.1, else make_fx)")
    ap.add_argument("--no-verify", action="store_true",
                    help="do not check the export with fusec's CPU interpreter against PyTorch (forward and one "
                         "gradient) before writing it: for a model too large for the CPU, or with no fusec binary "
                         "(found as $FUSEC_BIN, fusec on PATH or this checkout's build/fusec)")
    ap.add_argument("--no-dropout", action="store_true",
                    help="trace in eval mode, without the model's dropout (default: a model with a dropout module of "
                         "p > 0 is traced in train mode and keeps its dropout for fusec's train_step)")
    ap.add_argument("--debug", action="store_true", help="on failure, print the Python traceback before the error line")
    return cli("fusec.export", ap, _run, argv)


def _json_object(flag, text, what):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExportError(f"{flag} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ExportError(f"{flag} must be a JSON object ({what}), got {text}")
    return value


def _run(a):
    if a.batch < 1 or a.seq < 1:
        raise ExportError(f"--batch and --seq must be at least 1, got {a.batch} and {a.seq}")
    if a.hf is not None:
        return _run_hf(a)
    if a.config is not None:
        raise ExportError("--config goes with --hf (a transformers model's config); a --model class takes --kwargs")
    kwargs = _json_object("--kwargs", "{}" if a.kwargs is None else a.kwargs, "the constructor's keyword arguments")
    if a.state_dict and not os.path.isfile(a.state_dict):
        raise ExportError(f"--state-dict: no file '{a.state_dict}'")
    check_out_dir(a.out)  # before anything is loaded or run
    try:
        import torch
    except ImportError as e:
        raise ExportError(f"cannot import torch ({e}); the exporter needs it (Debian: apt-get install python3-torch)")
    if not a.no_verify:
        from .verify import find_fusec
        find_fusec()  # likewise: without a binary to check the export with, nothing is loaded or run
    path, cls_name = a.model.rsplit(":", 1) if ":" in a.model else (a.model, "")
    with _doing(f"loading {path}", path):
        cls = _load_class(a.model)
    with _doing(f"constructing {cls_name}", path):
        torch.manual_seed(a.seed)
        model = cls(**kwargs)
    if a.state_dict:
        with _doing(f"loading --state-dict {a.state_dict}", path):
            model.load_state_dict(torch.load(a.state_dict, map_location="cpu"))
    ids = torch.randint(0, 2, (a.batch, a.seq), dtype=torch.int64)  # values do not shape the graph
    record = {"model": os.path.abspath(path) + ":" + cls_name, "kwargs": kwargs, "seed": a.seed,
              "state_dict": os.path.abspath(a.state_dict) if a.state_dict else None}
    with _doing(f"exporting {cls_name} at ids [{a.batch}, {a.seq}]", path):
        done = export(model, ids, a.out, a.capture, record, verify=not a.no_verify,
                      dropout=False if a.no_dropout else "auto")
    print(summary(a.out, done, a.batch, a.seq), flush=True)


def _run_hf(a):
    """--hf MODEL: a transformers causal LM (hf.py), checked and refused as --model's are."""
    for flag, value in (("--kwargs", a.kwargs), ("--state-dict", a.state_dict)):
        if value is not None:
            raise ExportError(f"{flag} goes with --model; with --hf, the model's config overrides are --config and its "
                              f"weights are the checkpoint directory's")
    config = _json_object("--config", "{}" if a.config is None else a.config, "the model config's fields")
    if not os.path.isdir(a.hf) and (os.sep in a.hf or a.hf.startswith(".")):
        raise ExportError(f"--hf: no directory '{a.hf}'; nothing is downloaded, so a Hub model must be a directory "
                          f"you downloaded (its config.json and weights)")
    check_out_dir(a.out)  # before anything is loaded or run
    try:
        import torch
    except ImportError as e:
        raise ExportError(f"cannot import torch ({e}); the exporter needs it (Debian: apt-get install python3-torch)")
    from . import hf
    hf.import_transformers()  # before the fusec binary is looked for: the first thing missing is said first
    if not a.no_verify:
        from .verify import find_fusec
        find_fusec()
    ids = torch.randint(0, 2, (a.batch, a.seq), dtype=torch.int64)  # values do not shape the graph
    with contextlib.ExitStack() as quiet:
        if not a.debug:  # transformers' and torch's warnings are not the one line (--debug keeps them)
            import logging
            import warnings
            quiet.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            logging.getLogger("torch").setLevel(logging.ERROR)
            hf.quiet()
        with _doing(f"loading {a.hf}"):
            torch.manual_seed(a.seed)
            model = hf.HFCausalLM(a.hf, config)
        name = type(model.hf).__name__
        with _doing(f"exporting {name} at ids [{a.batch}, {a.seq}]"):
            done = export(model, ids, a.out, a.capture, _hf_record(a.hf, config, a.seed), verify=not a.no_verify,
                          dropout=False if a.no_dropout else "auto")
    print(summary(a.out, done, a.batch, a.seq), flush=True)


def _hf_record(source, config, seed):
    """export.json's record of an --hf export: bench/torch_module_ref.py rebuilds the module as
    HFCausalLM(**kwargs) (hf.py, loaded as a file) after torch.manual_seed(seed)."""
    from . import hf
    return {"model": os.path.abspath(hf.__file__) + ":HFCausalLM",
            "kwargs": {"model": os.path.abspath(source) if os.path.isdir(source) else source,
                       "config": dict(config or {})},
            "seed": seed, "state_dict": None, "hf": source, "transformers": hf.import_transformers().__version__}


def summary(out_dir, done, batch, seq):
    """The CLI's line on success: what was written, for which ids, and how big it is."""
    size = next((f"{done.weight_bytes / scale:.1f} {unit}" for unit, scale in (("GiB", 2**30), ("MiB", 2**20),
                 ("KiB", 2**10)) if done.weight_bytes >= scale), f"{done.weight_bytes} bytes")
    return (f"fusec.export: wrote {os.path.join(out_dir, 'model.fir')} ({done.ops:,} ops, {done.parameters:,} "
            f"parameters, {size} of weights), {os.path.join(out_dir, 'weights.safetensors')} and "
            f"{os.path.join(out_dir, 'export.json')}, for ids [{batch}, {seq}]; " + checked(done.verified))


def checked(verified):
    """What the summary line says of the check: its measurements, or that there was none."""
    if verified is None:
        return "not checked against PyTorch (--no-verify)"
    return (f"checked by fusec's CPU interpreter against PyTorch: logits, loss and gradients within "
            f"{verified['logits']:.1e}, {verified['loss']:.1e} and {verified['gradients']:.1e} relative")


if __name__ == "__main__":
    sys.exit(main())
