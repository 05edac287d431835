"""ModelPair: a target, its tokenizer, and how to make a drafter for one decode."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from ..drafters import Drafter, ModelDrafter, NGramDrafter
from ..errors import ModelLoadError
from ..kernels import fastpath
from ..settings import check_prompt_text
from .detokenize import decode_with_spans, token_bytes
from .draft_spec import NGRAM
from .passes import LABEL as PASSES_LABEL, resolve_path

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
    passes: str = "dynamic"                 # the target's passes: dynamic, static or graphs (decoding/passes.py)
    _texts: dict = field(default_factory=dict, repr=False)
    _bytes: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_models(cls, target, draft=None, tokenizer=None, *, fast_path: Optional[bool] = False,
                    passes: str = "auto") -> "ModelPair":
        """Models already in memory. draft: a causal LM, "ngram"/None, or a factory pair -> Drafter.
        fast_path=True swaps their linear layers for prepacked CPU kernels in place (fastpath.py;
        a no-op with a note on GPU or without the ops); None follows SPECDEC_FAST_PATH. passes: how
        the target's passes run (decoding/passes.py: auto = captured graphs on CUDA where the
        static path supports the model, else the dynamic cache; dynamic; static; graphs)."""
        fast = fastpath.resolve(fast_path)
        fastpath.apply(target, enable=fast)        # a model already on the fast path stays on it
        if isinstance(draft, torch.nn.Module):
            fastpath.apply(draft, enable=fast)
        pair = cls(target=target.eval(), tokenizer=tokenizer, make_drafter=_ngram_factory,
                   target_name=model_name(target), vocab_size=_logits_size(target),
                   passes=resolve_path(passes, target))
        pair.eos_ids = _eos_ids(target, tokenizer)
        if callable(draft) and not isinstance(draft, torch.nn.Module):
            pair.make_drafter, pair.draft_name = draft, getattr(draft, "name", "custom")
        elif isinstance(draft, torch.nn.Module):
            pair.draft_model, pair.draft_name = draft.eval(), model_name(draft)
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

    def token_bytes(self, token_id: int) -> Optional[bytes]:
        """The raw bytes a token stands for (None when the tokenizer does not say; cached)."""
        if token_id not in self._bytes:
            self._bytes[token_id] = token_bytes(self.tokenizer, token_id)
        return self._bytes[token_id]

    def decode_output(self, ids: list[int], previous_spans: Optional[list] = None) -> tuple[str, list]:
        """(text, spans) of output ids: the text as the tokenizer decodes the whole sequence (an
        incomplete last character left out) and the characters each token completes, with the
        bytes of one it only begins (models/detokenize.py); `previous_spans` of a prefix are reused."""
        return decode_with_spans(ids, self.decode, self.token_bytes, previous_spans)

    def decode(self, ids: list[int]) -> str:
        """Text of a sequence, special tokens (EOS) hidden."""
        if self.tokenizer is None:
            return "".join(self.token_text(i) for i in ids if i not in self.eos_ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode_prompt(self, text: str, chat: Optional[bool] = None) -> list[int]:
        """Prompt text -> ids; chat=None applies the chat template when the tokenizer has one."""
        check_prompt_text(text)
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

    @property
    def context_length(self) -> Optional[int]:
        """Longest sequence the target handles (config.max_position_embeddings), None if unknown."""
        n = getattr(getattr(self.target, "config", None), "max_position_embeddings", None)
        return int(n) if isinstance(n, int) and n > 0 else None

    def kernels(self, drafter=None) -> dict:
        """Which matrix kernels the target (and the drafter's model, if any) run: one line each."""
        out = {"target": fastpath.kernels_of(self.target).label(), "passes": PASSES_LABEL[self.passes]}
        if drafter is not None and getattr(drafter, "kernels", None):
            out["draft"] = drafter.kernels
        return out

    def trace_config(self, *, plan, drafter, cfg, seed, max_new_tokens, mode, k_schedule=None,
                     interleaved=None, recalled_runs=None):
        """The TraceConfig of a decode of this pair: what it was asked for (plan, sampling, seed,
        tokens, a replayed k_schedule, the lanes it is timed beside, how many earlier runs warmed
        its recycle table) and where it runs."""
        import transformers

        from ..version import __version__
        from ..trace.schema import TraceConfig
        from ..trace.tokens import encode_vocab
        from .machine import describe
        spec = mode != "autoregressive"
        versions = {"specdec_core": __version__, "torch": torch.__version__, "transformers": transformers.__version__}
        if spec and getattr(drafter, "version", None):
            versions["draft"] = drafter.version
        proposable = getattr(drafter, "proposable", None) if spec else None
        return TraceConfig(
            target=self.target_name, draft=drafter.name if spec else None, **plan.to_config(),
            temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p, seed=seed,
            max_new_tokens=max_new_tokens, mode=mode, device=str(self.input_device),
            dtype=str(self.dtype).replace("torch.", ""), machine=describe(self.input_device),
            eos_ids=tuple(sorted(self.eos_ids)), versions=versions,
            kernels=self.kernels(drafter if spec else None),
            k_schedule=None if k_schedule is None else tuple(k_schedule),
            interleaved=None if interleaved is None else tuple(interleaved),
            draft_slots=drafter.slots if spec else None, recalled_runs=recalled_runs if spec else None,
            draft_vocab=encode_vocab(proposable.tolist(), self.vocab_size) if proposable is not None else None)


def _ngram_factory(pair: ModelPair) -> Drafter:
    return NGramDrafter(pair.vocab_size, pair.input_device)


def model_name(model) -> str:
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
