"""Named pairs (presets) and the draft names that are not models."""
from __future__ import annotations

from dataclasses import dataclass

from . import embedded

DEFAULT_PRESET = "smollm2-135m"


@dataclass(frozen=True)
class Preset:
    target: str
    draft: str
    description: str


PRESETS = {
    "smollm2-135m": Preset(embedded.NAME, "lookup+distilled",
                           "SmolLM2-135M-Instruct (Q4_1 GGUF, embedded, offline) + prompt lookup where the "
                           "text repeats, else its distilled feature-head draft (specdec_core/data/draft)"),
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
# bare "distilled" is the one shipped in specdec_core/data/draft for the embedded target),
# "block" / "block:DIR" (the block drafter: a whole chain of k ≤ 8 guesses from one draft pass,
# drafters/block_head.py; bare "block" is the one shipped in specdec_core/data/block), and
# "lookup+<draft>" for prompt lookup combined with any of the others (drafters/combined.py).
NGRAM = "ngram"
LAYERS_PREFIX = "target-layers:"
DISTILLED = "distilled"
BLOCK = "block"
LOOKUP_PREFIX = "lookup+"   # "lookup+<draft>": prompt lookup where the text repeats, <draft> elsewhere
