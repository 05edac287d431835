"""Loading target/draft pairs: presets, HF ids, local paths, the embedded offline default.

One loaded copy of each (name, device, dtype) per process, shared by every caller; each decode
gets its own drafter (caches) from `ModelPair.new_drafter()`.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import torch

from . import embedded
from ..kernels import fastpath
from ..drafters import Drafter, ModelDrafter, NGramDrafter
from ..errors import ModelLoadError
from ..registry import REGISTRY

DEFAULT_PRESET = "smollm2-135m"


@dataclass(frozen=True)
class Preset:
    target: str
    draft: str
    description: str


PRESETS = {
    "smollm2-135m": Preset(embedded.NAME, "distilled",
                           "SmolLM2-135M-Instruct (Q4_1 GGUF, embedded, offline) + its distilled "
                           "feature-head draft (shipped in specdec_core/data/draft)"),
    "smollm2-1.7b": Preset("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
                           "SmolLM2-1.7B-Instruct + SmolLM2-135M-Instruct (downloads from the Hub)"),
    "qwen2.5-1.5b": Preset("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
                           "Qwen2.5-1.5B-Instruct + Qwen2.5-0.5B-Instruct (downloads from the Hub)"),
    "qwen2.5-7b": Preset("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
                         "Qwen2.5-7B-Instruct + Qwen2.5-0.5B-Instruct (padded vocabularies; GPU)"),
    "gpt2-large": Preset("gpt2-large", "distilgpt2", "gpt2-large + distilgpt2 (downloads from the Hub)"),
}

# Draft names that are not models: "ngram" (prompt lookup), "target-layers:N" (target's first N
# layers), "distilled" / "distilled:DIR" (a feature-head draft trained by specdec_core.lab;
# bare "distilled" is the one shipped in specdec_core/data/draft for the embedded target).
NGRAM = "ngram"
LAYERS_PREFIX = "target-layers:"
DISTILLED = "distilled"


DrafterFactory = Callable[["ModelPair"], Drafter]


@dataclass
class ModelPair:
    """A target model, its tokenizer, and how to make a drafter for one decode."""
    target: torch.nn.Module
    tokenizer: object                       # HF tokenizer, or None (token texts become "<id>")
    make_drafter: DrafterFactory
    target_name: str = "target"
    draft_name: str = NGRAM
    draft_model: Optional[torch.nn.Module] = None
    vocab_size: int = 0                     # logits size shared by target and draft
    eos_ids: frozenset = frozenset()
    _texts: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_models(cls, target, draft=None, tokenizer=None, *, fast_path: Optional[bool] = False) -> "ModelPair":
        """Models already in memory. draft: a causal LM, "ngram"/None, or a factory pair -> Drafter.
        fast_path=True swaps their linear layers for prepacked CPU kernels in place (fastpath.py;
        a no-op with a note on GPU or without the ops); None follows SPECDEC_FAST_PATH."""
        fast = fastpath.resolve(fast_path)
        fastpath.apply(target, enable=fast)        # a model already on the fast path stays on it
        if isinstance(draft, torch.nn.Module):
            fastpath.apply(draft, enable=fast)
        pair = cls(target=target.eval(), tokenizer=tokenizer, make_drafter=_ngram_factory,
                   target_name=_model_name(target), vocab_size=_logits_size(target))
        pair.eos_ids = _eos_ids(target, tokenizer)
        if callable(draft) and not isinstance(draft, torch.nn.Module):
            pair.make_drafter, pair.draft_name = draft, getattr(draft, "name", "custom")
        elif isinstance(draft, torch.nn.Module):
            pair.draft_model, pair.draft_name = draft.eval(), _model_name(draft)
            pair.vocab_size = min(pair.vocab_size, _logits_size(draft))
            pair.make_drafter = lambda p: ModelDrafter(p.draft_model, p.vocab_size, p.draft_name)
        elif draft not in (None, NGRAM):
            raise ModelLoadError(f"unknown draft {draft!r}: give a model, '{NGRAM}' or a drafter factory")
        return pair

    # -- what a decode needs ------------------------------------------------------------------
    def new_drafter(self) -> Drafter:
        """A fresh drafter with its own state; model weights are shared."""
        return self.make_drafter(self)

    @property
    def input_device(self) -> torch.device:
        return self.target.get_input_embeddings().weight.device

    @property
    def device_type(self) -> str:
        return self.input_device.type

    @property
    def dtype(self) -> torch.dtype:
        return self.target.get_input_embeddings().weight.dtype

    def token_text(self, token_id: int) -> str:
        """Text of one token as the tokenizer decodes it alone (cached)."""
        text = self._texts.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id]) if self.tokenizer is not None else f"<{token_id}>"
            self._texts[token_id] = text
        return text

    def decode(self, ids: list[int]) -> str:
        """Text of a sequence, special tokens (EOS) hidden."""
        if self.tokenizer is None:
            return "".join(self.token_text(i) for i in ids if i not in self.eos_ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode_prompt(self, text: str, chat: Optional[bool] = None) -> list[int]:
        """Prompt text -> ids; chat=None applies the chat template when the tokenizer has one."""
        if not text or not text.strip():
            raise ValueError("the prompt is empty: type some text")
        if self.tokenizer is None:
            raise ValueError("this pair has no tokenizer: pass token ids instead of text")
        if chat is None:
            chat = bool(getattr(self.tokenizer, "chat_template", None))
        if chat:
            if not getattr(self.tokenizer, "chat_template", None):
                raise ValueError(f"{self.target_name} has no chat template: turn the chat toggle off")
            templated = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
            return self.tokenizer(templated, add_special_tokens=False)["input_ids"]
        return self.tokenizer(text)["input_ids"]

    def kernels(self, drafter=None) -> dict:
        """Which matrix kernels the target (and the drafter's model, if any) run: one line each."""
        out = {"target": fastpath.kernels_of(self.target).label()}
        if drafter is not None and getattr(drafter, "kernels", None):
            out["draft"] = drafter.kernels
        return out

    def trace_config(self, *, k, drafter, cfg, seed, max_new_tokens, mode) -> dict:
        import transformers

        from .. import __version__
        return {"kernels": self.kernels(None if mode == "autoregressive" else drafter),
                "target": self.target_name, "draft": None if mode == "autoregressive" else drafter.name,
                "k": k, "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                "seed": seed, "max_new_tokens": max_new_tokens, "device": str(self.input_device),
                "dtype": str(self.dtype).replace("torch.", ""), "mode": mode,
                "eos_ids": sorted(self.eos_ids),
                "versions": {"specdec_core": __version__, "torch": torch.__version__,
                             "transformers": transformers.__version__}}


def _ngram_factory(pair: ModelPair) -> Drafter:
    return NGramDrafter(pair.vocab_size, pair.input_device)


def _model_name(model) -> str:
    return getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "") or type(model).__name__


def _logits_size(model) -> int:
    return model.get_output_embeddings().weight.shape[0]


def _eos_ids(model, tokenizer) -> frozenset:
    """The target's EOS ids: generation_config.eos_token_id (int or list), else the tokenizer's."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None and tokenizer is not None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return frozenset()
    return frozenset([eos] if isinstance(eos, int) else eos)


# -- loading ---------------------------------------------------------------------------------
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
               progress=None, fast_path: Optional[bool] = None):
    """(model, tokenizer) for a model name (embedded default, HF id or local dir), loaded once per
    (name, device, dtype, fast path). fast_path: prepacked CPU kernels (fastpath.py); None follows
    SPECDEC_FAST_PATH (on by default). The fast and the stock model are separate copies."""
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    fast = fastpath.resolve(fast_path)

    def loader():
        model, tokenizer = _load_uncached(name, device, torch_dtype, trust_remote_code, progress)
        fastpath.apply(model, enable=fast)   # stock, with a note, where it cannot apply
        return model, tokenizer
    return REGISTRY.model(model_key(name, device, dtype, fast), loader)


def model_key(name: str, device: str = "auto", dtype="auto", fast_path: Optional[bool] = None) -> tuple:
    """The registry key of a loaded model: (name, device, dtype, fast path)."""
    device = resolve_device(device)
    return (name, device, resolve_dtype(dtype, device), fastpath.resolve(fast_path))


def is_loaded(target: str, device: str = "auto", dtype="auto", fast_path: Optional[bool] = None) -> bool:
    """Whether the target of a preset / model name is in memory already (no loading)."""
    preset = PRESETS.get(target)
    return model_key(preset.target if preset else target, device, dtype, fast_path) in REGISTRY.loaded()


def _load_uncached(name, device, torch_dtype, trust_remote_code, progress):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = embedded.converted_dir(progress) if name == embedded.NAME else name
    if progress:
        progress(0.9, f"loading {name}")
    # A target too large for one GPU is spread over several by accelerate, filling GPU 0 first.
    multi_gpu = device == "cuda" and torch.cuda.device_count() > 1
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch_dtype, trust_remote_code=trust_remote_code,
            device_map="sequential" if multi_gpu else None)
    except (OSError, ValueError, KeyError) as e:
        hint = "" if os.path.isdir(str(path)) else " (not a local folder; a Hugging Face id needs internet)"
        raise ModelLoadError(f"could not load model {name!r}{hint}: {str(e).splitlines()[0]}") from None
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
    draft.name_or_path = f"{_model_name(target)}[:{n_layers} layers]"
    fastpath.inherit(draft, target)     # its layers are the target's: same kernels
    return draft.eval()


def load_pair(target: str = DEFAULT_PRESET, draft: Optional[str] = None, device: str = "auto",
              dtype="auto", *, trust_remote_code: bool = False, progress=None,
              fast_path: Optional[bool] = None) -> ModelPair:
    """Load a pair: target is a preset name, HF id or local dir; draft likewise, or "ngram",
    or "target-layers:N". draft=None takes the preset's draft, and the n-gram drafter otherwise.
    fast_path: prepacked CPU kernels for every model of the pair (None: SPECDEC_FAST_PATH, on by
    default; a no-op with a note in the trace config on GPU or where the ops are missing)."""
    fast = fastpath.resolve(fast_path)
    preset = PRESETS.get(target)
    target_ref = preset.target if preset else target
    draft_ref = draft if draft is not None else (preset.draft if preset else NGRAM)
    if draft_ref in PRESETS:
        draft_ref = PRESETS[draft_ref].target
    model, tokenizer = load_model(target_ref, device, dtype, trust_remote_code=trust_remote_code,
                                  progress=progress, fast_path=fast)
    target_name = target if preset else target_ref
    if draft_ref == DISTILLED or draft_ref.startswith(DISTILLED + ":"):
        from ..drafters import feature_head   # a factory, not a model: the head needs the target's features
        path = draft_ref[len(DISTILLED) + 1:]
        draft_model = feature_head.drafter_factory(model, os.path.expanduser(path) if path else None)
    elif draft_ref == NGRAM:
        draft_model = None
    elif draft_ref.startswith(LAYERS_PREFIX):
        try:
            n = int(draft_ref[len(LAYERS_PREFIX):])
        except ValueError:
            raise ModelLoadError(f"bad draft {draft_ref!r}: use {LAYERS_PREFIX}N with an integer N") from None
        draft_model = draft_from_target_layers(model, n)
    else:
        draft_model, draft_tok = load_model(draft_ref, device, dtype, trust_remote_code=trust_remote_code,
                                            progress=progress, fast_path=fast)
        if str(draft_model.device) != str(model.get_input_embeddings().weight.device):
            draft_model = draft_model.to(model.get_input_embeddings().weight.device)
        check_tokenizers(tokenizer, draft_tok, target_name, draft_ref)
    pair = ModelPair.from_models(model, draft_model, tokenizer, fast_path=False)   # applied above
    pair.target_name = target_name
    if isinstance(draft_model, torch.nn.Module) and not draft_ref.startswith(LAYERS_PREFIX):
        pair.draft_name = draft_ref
    return pair
