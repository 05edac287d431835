"""Named pairs (presets): a target and the DraftSpec that drafts for it."""
from __future__ import annotations

from dataclasses import dataclass

from . import embedded
from .draft_spec import DraftSpec, parse_draft

DEFAULT_PRESET = "smollm2-135m"


@dataclass(frozen=True)
class Preset:
    target: str
    draft: DraftSpec
    description: str


PRESETS = {
    "smollm2-135m": Preset(embedded.NAME, parse_draft("lookup+distilled"),
                           "SmolLM2-135M-Instruct (Q4_1 GGUF, embedded, offline) + prompt lookup where the "
                           "text repeats, else its distilled feature-head draft (specdec_core/data/draft)"),
    "smollm2-1.7b": Preset("HuggingFaceTB/SmolLM2-1.7B-Instruct", parse_draft("HuggingFaceTB/SmolLM2-135M-Instruct"),
                           "SmolLM2-1.7B-Instruct + SmolLM2-135M-Instruct (downloads from the Hub)"),
    "qwen2.5-1.5b": Preset("Qwen/Qwen2.5-1.5B-Instruct", parse_draft("Qwen/Qwen2.5-0.5B-Instruct"),
                           "Qwen2.5-1.5B-Instruct + Qwen2.5-0.5B-Instruct (downloads from the Hub)"),
    "qwen2.5-7b": Preset("Qwen/Qwen2.5-7B-Instruct", parse_draft("Qwen/Qwen2.5-0.5B-Instruct"),
                         "Qwen2.5-7B-Instruct + Qwen2.5-0.5B-Instruct (padded vocabularies; GPU)"),
    "gpt2-large": Preset("gpt2-large", parse_draft("distilgpt2"), "gpt2-large + distilgpt2 (downloads from the Hub)"),
}
