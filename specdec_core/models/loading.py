"""Loading target/draft pairs: presets, HF ids, local folders, the embedded offline default.

One loaded copy of each (name, device, dtype, fast path) per process, kept in the registry and
shared by every caller; each decode gets its own drafter (caches) from `ModelPair.new_drafter()`.
"""
from __future__ import annotations

import copy
from pathlib import Path
import os
from typing import Optional, Union

import torch

from ..errors import ModelLoadError
from ..kernels import fastpath
from ..registry import REGISTRY
from . import embedded
from .pair import ModelPair, model_name
from .passes import PATHS
from .refs import ref_kind
from .draft_spec import DISTILLED, HEADS, LAYERS, NGRAM, RECYCLE, DraftSpec, parse_draft
from .presets import DEFAULT_PRESET, PRESETS

def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but no CUDA GPU is available here")
    return device


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype: Union[str, torch.dtype], device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in _DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return _DTYPES[dtype]


def load_model(name: str, device: str = "auto", dtype="auto", *, trust_remote_code: bool = False,
               progress=None, fast_path: Optional[bool] = None, max_params: Optional[int] = None):
    """(model, tokenizer) for a model name (embedded default, HF id or local dir), loaded once per
    (name, device, dtype, fast path). fast_path: prepacked CPU kernels (fastpath.py); None follows
    SPECDEC_FAST_PATH (on by default). The fast and the stock model are separate copies.
    max_params: refuse a larger model (from its config: before its weights are read)."""
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    fast = fastpath.resolve(fast_path)

    def loader():
        model, tokenizer = _load_uncached(name, device, torch_dtype, trust_remote_code, progress, max_params)
        # Stock, with a note, where it cannot apply; the weights file backs the stock matrices.
        fastpath.apply(model, enable=fast, weights_from=_weights_folder(name) if fast else None)
        return model, tokenizer
    model, tokenizer = REGISTRY.model(model_key(name, device, dtype, fast), loader)
    check_size(name, model.config, max_params)   # a model loaded earlier without the cap
    return model, tokenizer


def model_key(name: str, device: str = "auto", dtype="auto", fast_path: Optional[bool] = None) -> tuple:
    """The registry key of a loaded model: (name, device, dtype, fast path)."""
    device = resolve_device(device)
    return (name, device, resolve_dtype(dtype, device), fastpath.resolve(fast_path))


def is_loaded(target: str, device: str = "auto", dtype="auto", fast_path: Optional[bool] = None) -> bool:
    """Whether the target of a preset / model name is in memory already (no loading)."""
    preset = PRESETS.get(target)
    return model_key(preset.target if preset else target, device, dtype, fast_path) in REGISTRY.loaded()


def model_config(name: str, trust_remote_code: bool = False):
    """The model's config (no weights), refusing what this project cannot decode with: a model
    that needs its own code without trust_remote_code, and anything that is not a causal LM."""
    from transformers import AutoConfig

    path = embedded.converted_dir() if name == embedded.NAME else name
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as e:
        raise _load_error(name, path, e) from None
    archs = list(getattr(config, "architectures", None) or [])
    causal = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    if getattr(config, "is_encoder_decoder", False) or (archs and not causal):
        raise ModelLoadError(f"{name!r} is not a causal language model ({', '.join(archs) or config.model_type}): "
                             "speculative decoding needs a decoder-only LM")
    return config


def estimate_params(config) -> int:
    """Parameters of a decoder-only transformer from its config (embeddings, attention, MLP; the
    output layer unless tied): a size check before any weight is read."""
    text = getattr(config, "get_text_config", lambda: config)()
    h = getattr(text, "hidden_size", 0) or getattr(text, "n_embd", 0) or 0
    layers = getattr(text, "num_hidden_layers", 0) or getattr(text, "n_layer", 0) or 0
    vocab = getattr(text, "vocab_size", 0) or 0
    inter = getattr(text, "intermediate_size", None) or 4 * h
    heads = getattr(text, "num_attention_heads", 1) or 1
    kv = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or h // heads
    attn = h * head_dim * (2 * heads + 2 * kv)
    mlp = (3 if getattr(text, "hidden_act", "gelu") in ("silu", "swiglu") else 2) * h * inter
    tied = getattr(config, "tie_word_embeddings", True)
    return vocab * h * (1 if tied else 2) + layers * (attn + mlp)


def _load_error(name: str, path, e: Exception) -> ModelLoadError:
    """One line saying why a model did not load (config, tokenizer or weights)."""
    text = str(e)
    if "trust_remote_code" in text or "custom code" in text:
        return ModelLoadError(f"{name!r} needs its own code to load (trust_remote_code); that is off: "
                              "only models transformers implements are loaded")
    hint = "" if os.path.isdir(str(path)) else " (not a local folder; a Hugging Face id needs internet)"
    return ModelLoadError(f"could not load model {name!r}{hint}: {text.splitlines()[0]}")


def check_size(name: str, config, max_params: Optional[int]) -> None:
    """Refuse a model above max_params parameters (estimated from its config)."""
    if max_params is None:
        return
    n = estimate_params(config)
    if n > max_params:
        raise ModelLoadError(f"{name!r} has about {n / 1e9:.1f} B parameters, above the cap of "
                             f"{max_params / 1e9:.1f} B here")


def _weights_folder(name: str):
    """The local folder holding a model's safetensors weights (None when unknown): the converted
    embedded model, a local folder, or a Hugging Face id already in the local hub cache."""
    if name == embedded.NAME:
        return embedded.converted_dir()
    if Path(name).is_dir():
        return Path(name)
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(name, local_files_only=True, allow_patterns=["*.safetensors"]))
    except (OSError, ValueError, ImportError):   # not cached, not an id: the matrices stay in RAM
        return None


def _load_uncached(name, device, torch_dtype, trust_remote_code, progress, max_params=None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = embedded.converted_dir(progress) if name == embedded.NAME else name
    config = model_config(name, trust_remote_code)     # clear refusals before any weight is read
    check_size(name, config, max_params)
    if progress:
        progress(0.9, f"loading {name}")
    # A target too large for one GPU is spread over several by accelerate, filling GPU 0 first.
    multi_gpu = device == "cuda" and torch.cuda.device_count() > 1
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            path, config=config, dtype=torch_dtype, trust_remote_code=trust_remote_code,
            device_map="sequential" if multi_gpu else None)
    except (OSError, ValueError, KeyError) as e:
        raise _load_error(name, path, e) from None
    if not multi_gpu:
        model = model.to(device)
    model.name_or_path = name
    return model.eval(), tokenizer


def check_tokenizers(target_tok, draft_tok, target_name: str, draft_name: str) -> None:
    """Refuse a draft whose tokenizer maps shared ids to other tokens than the target's."""
    if target_tok is None or draft_tok is None:
        return
    t_vocab, d_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if t_vocab == d_vocab:
        return
    t_by_id = {i: tok for tok, i in t_vocab.items()}
    for tok, i in d_vocab.items():
        if i in t_by_id and t_by_id[i] != tok:
            raise ModelLoadError(
                f"incompatible tokenizers: draft {draft_name!r} ({type(draft_tok).__name__}, "
                f"{len(draft_tok)} tokens) and target {target_name!r} ({type(target_tok).__name__}, "
                f"{len(target_tok)} tokens) disagree, e.g. id {i} is {tok!r} vs {t_by_id[i]!r}. "
                f"Speculative decoding needs the same tokenizer.")


def draft_from_target_layers(target, n_layers: int):
    """A draft made of the target's first n_layers (shared weights, no copy) + its norm and head."""
    n_total = target.config.num_hidden_layers
    if not 1 <= n_layers < n_total:
        raise ModelLoadError(f"target-layers:N needs 1 ≤ N < {n_total}, got {n_layers}")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:n_layers]
    with torch.device("meta"):
        draft = type(target)(cfg)
    for name, child in target.model.named_children():
        setattr(draft.model, name, torch.nn.ModuleList(child[:n_layers]) if name == "layers" else child)
    draft.lm_head = target.lm_head
    draft.generation_config = target.generation_config
    draft.name_or_path = f"{model_name(target)}[:{n_layers} layers]"
    fastpath.inherit(draft, target)     # its layers are the target's: same kernels
    return draft.eval()


def load_pair(target: str = DEFAULT_PRESET, draft: Union[str, DraftSpec, None] = None, device: str = "auto",
              dtype="auto", *, trust_remote_code: bool = False, progress=None,
              fast_path: Optional[bool] = None, max_params: Optional[int] = None,
              passes: str = "auto") -> ModelPair:
    """Load a pair: target is a preset name, HF id or local dir; draft a DraftSpec or its text
    (models/draft_spec.py: a model id or dir, "ngram", "target-layers:N", "distilled[:DIR]",
    "block[:DIR]", "lookup+<draft>"). draft=None takes the preset's draft, and the n-gram drafter
    otherwise. fast_path: prepacked CPU kernels for every model of the pair (None:
    SPECDEC_FAST_PATH, on by default; a no-op with a note in the trace config on GPU or where the ops
    are missing). max_params: refuse a target or draft model larger than this (estimated from its
    config, before its weights are read; the app sets it for public deployments). passes: how the
    target's passes run (models/passes.py: auto, dynamic, static, graphs), checked before loading."""
    if passes not in PATHS:
        raise ValueError(f"passes must be one of {', '.join(PATHS)}, not {passes!r}")
    fast = fastpath.resolve(fast_path)
    preset = PRESETS.get(target)
    spec = parse_draft(draft) if draft is not None else (preset.draft if preset else DraftSpec(NGRAM))
    for ref in (target, spec):
        ref_kind(ref)      # one line for a name that cannot be a model, before anything loads
    target_ref = preset.target if preset else target
    model, tokenizer = load_model(target_ref, device, dtype, trust_remote_code=trust_remote_code,
                                  progress=progress, fast_path=fast, max_params=max_params)
    target_name = target if preset else target_ref
    draft_name = None
    if spec.kind in HEADS:
        # a factory, not a model: the feature head and the block drafter need the target's features
        from ..drafters import block_head, feature_drafter
        factory = (feature_drafter if spec.kind == DISTILLED else block_head).drafter_factory
        draft_model = factory(model, os.path.expanduser(spec.ref) if spec.ref else None)
    elif spec.kind in (NGRAM, RECYCLE):
        draft_model = None
    elif spec.kind == LAYERS:
        draft_model = draft_from_target_layers(model, spec.layers)
    else:
        model_ref = PRESETS[spec.ref].target if spec.ref in PRESETS else spec.ref
        draft_model, draft_tok = load_model(model_ref, device, dtype, trust_remote_code=trust_remote_code,
                                            progress=progress, fast_path=fast, max_params=max_params)
        if str(draft_model.device) != str(model.get_input_embeddings().weight.device):
            draft_model = draft_model.to(model.get_input_embeddings().weight.device)
        check_tokenizers(tokenizer, draft_tok, target_name, model_ref)
        draft_name = model_ref
    pair = ModelPair.from_models(model, draft_model, tokenizer, fast_path=False, passes=passes)   # fast path applied above
    pair.target_name = target_name
    if draft_name is not None:
        pair.draft_name = draft_name
    # Token recycling (drafters/recycle.py): guesses from the target's own earlier passes, alone
    # ("recycle") or after every other part of a combined drafter (combined.py), one placement.
    from ..drafters.combined import combined_factory, recycle_factory
    if spec.lookup:
        # prompt lookup first, the spec's drafter where the text does not repeat (none for
        # "lookup+recycle"), then the recalled guesses with recycle
        model_factory = None if spec.kind == RECYCLE else pair.make_drafter
        pair.make_drafter = combined_factory(model_factory, recycle=spec.recycle or spec.kind == RECYCLE)
        pair.draft_name = spec.name
    elif spec.kind == RECYCLE:
        pair.make_drafter, pair.draft_name = recycle_factory, spec.name
    return pair
