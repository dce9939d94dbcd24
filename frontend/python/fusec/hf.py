"""Hugging Face `transformers` causal LMs, exported with no wrapper file (issue 42):

    python3 -m fusec.export --hf MODEL [--config JSON] [--seed S] --batch B --seq T --out DIR
    fusec.export.export_hf(model_or_path, example_ids, out_dir, config=None, seed=0)

MODEL is one of
  * a local checkpoint directory: its config.json, and its weights where it has them
    (model.safetensors, pytorch_model.bin, or their sharded index); a directory with a
    config.json and no weights is randomly initialised from that config;
  * a model type of transformers (`gpt2`, `llama`, `qwen2`, `mistral`, ...: the keys of
    transformers' CONFIG_MAPPING, the `model_type` of a config.json): its default config, with
    the overrides of --config (a JSON object of the config's fields), randomly initialised
    (AutoConfig.for_model + AutoModelForCausalLM.from_config) after torch.manual_seed(--seed).
Nothing is downloaded: a name that is neither is refused. A --config key that the model type's
config does not have is refused too (transformers would keep it as an unused attribute, so a
typo such as `num_layers` for GPT-2's `n_layer` would silently export the default depth).

HFCausalLM(model) is the nn.Module that is exported: forward(ids) is
model(input_ids=ids, use_cache=False).logits, in fp32, with the model's parameters and
buffers under the model's own names (its state_dict() is the model's, so the exported
weights.safetensors loads back into the transformers model by name). The KV cache is off
(use_cache=False: a cache object is state the graph cannot return), and the attention
implementation is one the exporter recognises (`attention_implementation`, below).
"""
import inspect
import os
import sys

try:
    from .common import ExportError
except ImportError:  # loaded as a file, by bench/torch_module_ref.py rebuilding an export from its export.json
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fusec.common import ExportError

import torch

# The files that hold a checkpoint's weights (transformers' names, single or sharded).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# The attention implementations the exporter recognises (attention.py); the first is preferred.
RECOGNISED = ("sdpa", "eager")


def attention_implementation(config):
    """The attention implementation the export asks transformers for.

    attention.py recognises two forms of attention and turns both into fusec's fused
    `attention` composite: `aten.scaled_dot_product_attention` (transformers' "sdpa") and the
    explicit softmax(Q K^T * scale + mask) @ V chain (its "eager"). "sdpa" is preferred:
      * it is recognised by its arguments alone (attention.sdpa): is_causal, the scale, and a
        mask that must be the static causal one; transformers materialises that mask as a
        static bool tensor while it is traced (masking_utils.sdpa_mask turns its is_causal
        shortcut off under torch.export), which the exporter checks is exactly causal, and a
        sliding window longer than the sequence is that mask too;
      * grouped-query attention arrives either as enable_gqa (K and V with fewer heads) or
        through repeat_kv, and attention.py reads both without copying K and V;
      * the eager chain is matched structurally, then checked on the example values: each
        family spells it a little differently (an upcast to fp32 before the softmax, a
        finfo.min additive mask, dropout), and a spelling the matcher does not follow is left
        as an explicit [T, T] softmax (still exported correctly, but not fused).
    "eager" where sdpa would change the function: transformers' sdpa ignores a config's
    attn_logit_softcapping (Gemma 2), which only its eager attention applies, so a model with
    softcapping keeps eager attention (its tanh stays an explicit op: correct, not fused). And
    "eager" for a model class that has no sdpa path (load() falls back to it)."""
    return "eager" if getattr(config, "attn_logit_softcapping", None) else "sdpa"


def import_transformers():
    try:
        import transformers
    except Exception as e:  # ImportError, or transformers refusing this torch (it needs torch >= 2)
        raise ExportError(f"--hf needs the transformers package, which this python3 cannot import ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]}); install it (pip install transformers) or export an "
                          f"nn.Module with --model") from None
    return transformers


def quiet():
    """transformers' logging down to errors: its warnings (a token id past a small vocabulary, a
    deprecated argument) are not the exporter's one line."""
    transformers = import_transformers()
    transformers.logging.set_verbosity_error()


class HFCausalLM(torch.nn.Module):
    """forward(ids) -> model(input_ids=ids, use_cache=False).logits, for a transformers causal LM.

    `model`: a transformers model (PreTrainedModel, e.g. from AutoModelForCausalLM), or a
    checkpoint directory or model type (load()), with `config` the overrides of its config.
    A model given as an object is switched to a recognised attention implementation in place
    (set_attn_implementation, as transformers itself does it), and to fp32.

    The model's own submodules, parameters and buffers are this module's (the same dicts, not
    copies, and the model is not registered as a child), so named_parameters() and
    state_dict() have the model's names: "model.layers.0.self_attn.q_proj.weight", not
    "hf.model.layers...". Moving or re-typing this module moves the model's."""

    def __init__(self, model, config=None):
        super().__init__()
        if isinstance(model, (str, os.PathLike)):
            model = load(os.fspath(model), config)
        elif config:
            raise ExportError("config overrides apply to a model built here (a checkpoint directory or a model type); "
                              "a model object already has its config")
        else:
            model = prepare(model)
        object.__setattr__(self, "hf", model)  # not a child: its children are this module's own (below)
        for name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            object.__setattr__(self, name, getattr(model, name))

    def train(self, mode=True):
        self.hf.train(mode)
        return super().train(mode)

    def forward(self, ids):
        out = self.hf(input_ids=ids, use_cache=False)
        logits = getattr(out, "logits", None)
        if logits is None and isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            logits = out[0]
        if not isinstance(logits, torch.Tensor):
            raise ExportError(f"{type(self.hf).__name__} returns no logits (its output is {type(out).__name__}); "
                              f"--hf exports a causal LM, a class AutoModelForCausalLM builds")
        return logits


def prepare(model):
    """A transformers model object made ready for export: a recognised attention
    implementation, fp32. Refused, in one line, where it is not a transformers model or its
    attention cannot be set to one the exporter recognises."""
    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or config is None or not hasattr(config, "model_type"):
        raise ExportError(f"export_hf takes a transformers model (PreTrainedModel) or a checkpoint directory or model "
                          f"type, not {type(model).__name__}")
    want = attention_implementation(config)
    if getattr(config, "_attn_implementation", None) != want and hasattr(model, "set_attn_implementation"):
        for impl in (want, "eager") if want != "eager" else (want,):
            try:
                model.set_attn_implementation(impl)
                break
            except (ValueError, ImportError):  # this class has no such path: the next one
                continue
    have = getattr(config, "_attn_implementation", None)
    if have not in RECOGNISED:
        raise ExportError(f"{type(model).__name__}'s attention implementation is '{have}' and cannot be set to "
                          f"{' or '.join(RECOGNISED)}, the ones fusec.export recognises")
    return model.float()


def has_weights(directory):
    return any(os.path.isfile(os.path.join(directory, f)) for f in WEIGHT_FILES)


def load(source, overrides=None):
    """The causal LM `source` names (the module docstring), in fp32, with a recognised attention
    implementation. A random initialisation draws from torch's global generator: seed it first."""
    transformers = import_transformers()
    if overrides is not None and not isinstance(overrides, dict):
        raise ExportError(f"--config must be a JSON object (the config's fields), got {overrides!r}")
    overrides = dict(overrides or {})
    given = overrides.pop("attn_implementation", None)
    if given is not None and given not in RECOGNISED:
        raise ExportError(f"--config: attn_implementation '{given}' is not one fusec.export recognises "
                          f"({', '.join(RECOGNISED)}); leave it out to let the exporter choose")
    if os.path.isdir(source):
        if not os.path.isfile(os.path.join(source, "config.json")):
            raise ExportError(f"--hf: the directory '{source}' has no config.json (a transformers checkpoint directory "
                              f"has one)")
        model_type = _model_type(source)
        cls = _config_class(transformers, model_type)
        if isinstance(model_type, str):  # an old config.json without one: AutoConfig infers it
            _causal_lm(transformers, model_type, f"the model type '{model_type}' of '{source}'")
        _check_overrides(cls, overrides, f"the config of '{source}'")
        config = transformers.AutoConfig.from_pretrained(source, local_files_only=True, **overrides)
        if has_weights(source):
            def build(impl):
                return transformers.AutoModelForCausalLM.from_pretrained(
                    source, config=config, local_files_only=True, dtype=torch.float32, attn_implementation=impl)
        else:
            def build(impl):
                return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                                     attn_implementation=impl)
    else:
        if os.sep in source or source.startswith(".") or source.endswith(".json"):
            raise ExportError(f"--hf: no directory '{source}'; nothing is downloaded, so a Hub model must be a "
                              f"directory you downloaded (its config.json and weights)")
        cls = _config_class(transformers, source)
        if cls is None:
            raise ExportError(f"--hf: '{source}' is neither a local checkpoint directory nor a model type this "
                              f"transformers {transformers.__version__} knows (gpt2, llama, qwen2, mistral, ...: a "
                              f"config.json's model_type); nothing is downloaded, so a Hub name must be a downloaded "
                              f"directory")
        _causal_lm(transformers, source, f"the model type '{source}'")
        _check_overrides(cls, overrides, f"{source}'s config")
        config = transformers.AutoConfig.for_model(source, **overrides)

        def build(impl):
            return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=impl)
    impl = given or attention_implementation(config)
    try:
        model = build(impl)
    except ValueError as first:  # e.g. "does not support an attention implementation through sdpa": eager then
        if impl == "eager" or given:
            raise
        try:
            model = build("eager")
        except Exception:
            raise first from None
    return prepare(model)


def _model_type(directory):
    import json
    try:
        with open(os.path.join(directory, "config.json")) as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        raise ExportError(f"--hf: cannot read '{os.path.join(directory, 'config.json')}': {e}") from None


def _config_class(transformers, model_type):
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        return None
    try:
        return CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
    except Exception:  # a model type whose config module cannot be imported here
        return None


def _causal_lm(transformers, model_type, what):
    """Refuses a model type that AutoModelForCausalLM does not build (an encoder, a classifier)."""
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        return  # transformers will say so itself
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ExportError(f"--hf: {what} has no causal-LM class in transformers {transformers.__version__} "
                          f"(AutoModelForCausalLM does not build it); fusec.export exports causal LMs")


def _check_overrides(cls, overrides, what):
    """Refuses an override key that `cls` (a config class) neither takes nor has."""
    if not overrides or cls is None:
        return
    try:
        default = cls()
    except Exception:  # a config without defaults: nothing to check against
        return
    try:
        named = set(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        named = set()
    unknown = [k for k in overrides if k not in named and not hasattr(default, k)]
    if unknown:
        fields = sorted(k for k in getattr(default, "to_dict", dict)() if not k.startswith("_"))
        shown = ", ".join(fields[:40]) + (", ..." if len(fields) > 40 else "")
        raise ExportError(f"--config: {what} has no field {', '.join(repr(k) for k in unknown)} (it has: {shown})")
