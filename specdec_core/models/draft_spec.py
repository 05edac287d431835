"""What drafts for a pair, as one value: a DraftSpec (kind, reference, prompt lookup first or not).

The API and the CLI name a draft with text ("distilled", "lookup+block", "target-layers:2", a model
id); `parse_draft` is the one place that text becomes a DraftSpec, and `DraftSpec.name` the one
place it becomes text again (trace configs, labels). The page builds its DraftSpec from its own
fields (a drafter choice and a draft field) and never joins strings for the loader to split.

    ngram       prompt lookup alone: copies what followed the last repeat of the recent tokens
    model       a draft model: a preset, a Hugging Face id or a local folder (ref)
    layers      the target's first N layers (ref = N)
    distilled   a feature-head draft trained by specdec_core.lab (ref: its folder; "" = the shipped one)
    block       the block drafter: a whole chain of k ≤ 8 guesses from one pass (ref as distilled)
    recycle     token recycling alone: the target's own earlier top next tokens (drafters/recycle.py)

lookup=True puts prompt lookup first where the text repeats, the kind's drafter elsewhere
(drafters/combined.py); written "lookup+<draft>". recycle=True adds the recalled guesses to every
tree round as a third source (with lookup); written "lookup+<draft>+recycle". "lookup+recycle" is
the training-free drafter for any pair: prompt lookup, then recycling.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

from ..errors import ModelLoadError

NGRAM, MODEL, LAYERS, DISTILLED, BLOCK, RECYCLE = "ngram", "model", "layers", "distilled", "block", "recycle"
KINDS = (NGRAM, MODEL, LAYERS, DISTILLED, BLOCK, RECYCLE)
LAYERS_PREFIX = "target-layers:"
LOOKUP_PREFIX = "lookup+"
RECYCLE_SUFFIX = "+recycle"
HEADS = (DISTILLED, BLOCK)          # drafters trained on the target's features: loaded from a folder


@dataclass(frozen=True)
class DraftSpec:
    """One draft source for a pair: `kind` (KINDS), `ref` (MODEL: id or folder; LAYERS: "N"; a head:
    its folder, "" for the shipped one) and `lookup` (prompt lookup first where the text repeats)."""
    kind: str
    ref: str = ""
    lookup: bool = False
    recycle: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ModelLoadError(f"unknown draft kind {self.kind!r}: one of {', '.join(KINDS)}")
        if self.kind == MODEL and not self.ref.strip():
            raise ModelLoadError("a draft model needs a name: a preset, a Hugging Face id or a folder")
        if self.kind == NGRAM and self.lookup:
            raise ModelLoadError(f"'{LOOKUP_PREFIX}' needs a model draft after it (e.g. {LOOKUP_PREFIX}{DISTILLED}); "
                                 f"prompt lookup alone is '{NGRAM}'")
        if self.recycle and (self.kind in (NGRAM, RECYCLE) or not self.lookup):
            raise ModelLoadError(f"'{RECYCLE_SUFFIX}' goes after a model draft with prompt lookup first "
                                 f"(e.g. {LOOKUP_PREFIX}{DISTILLED}{RECYCLE_SUFFIX}); recycling alone is '{RECYCLE}', "
                                 f"with prompt lookup '{LOOKUP_PREFIX}{RECYCLE}'")

    @property
    def name(self) -> str:
        """The text that parses back to this spec: "ngram", "lookup+distilled", "target-layers:2",
        "block:/dir", "HuggingFaceTB/SmolLM2-135M-Instruct"."""
        base = {NGRAM: NGRAM, RECYCLE: RECYCLE, MODEL: self.ref, LAYERS: f"{LAYERS_PREFIX}{self.ref}"}.get(
            self.kind, f"{self.kind}:{self.ref}" if self.ref else self.kind)
        return (LOOKUP_PREFIX if self.lookup else "") + base + (RECYCLE_SUFFIX if self.recycle else "")

    @property
    def layers(self) -> int:
        """LAYERS: how many of the target's layers draft."""
        try:
            return int(self.ref)
        except ValueError:
            raise ModelLoadError(f"bad draft {self.name!r}: use {LAYERS_PREFIX}N with an integer N") from None

    def with_lookup(self, lookup: bool = True) -> "DraftSpec":
        """The same source with prompt lookup first (or not)."""
        return replace(self, lookup=lookup)

    def __str__(self) -> str:
        return self.name


def parse_draft(draft: Union[str, DraftSpec]) -> DraftSpec:
    """A draft's text (API, CLI) -> its DraftSpec; a DraftSpec is returned as it is. Raises
    ModelLoadError for an empty name or "lookup+" without a draft after it."""
    if isinstance(draft, DraftSpec):
        return draft
    text = (draft or "").strip()
    lookup = text.startswith(LOOKUP_PREFIX)
    text = text[len(LOOKUP_PREFIX):].strip() if lookup else text
    recycle = text.endswith(RECYCLE_SUFFIX)
    text = text[:-len(RECYCLE_SUFFIX)].strip() if recycle else text
    if lookup and text in (NGRAM, ""):
        raise ModelLoadError(f"'{LOOKUP_PREFIX}' needs a model draft after it (e.g. {LOOKUP_PREFIX}{DISTILLED}); "
                             f"prompt lookup alone is '{NGRAM}'")
    if not text:
        raise ModelLoadError("the draft field is empty: give a preset, a Hugging Face id, a folder, 'ngram', "
                             f"'{DISTILLED}', '{BLOCK}' or '{LAYERS_PREFIX}N'")
    if text == NGRAM:
        return DraftSpec(NGRAM, recycle=recycle)
    if text == RECYCLE:
        return DraftSpec(RECYCLE, lookup=lookup, recycle=recycle)
    if text.startswith(LAYERS_PREFIX):
        return DraftSpec(LAYERS, text[len(LAYERS_PREFIX):].strip(), lookup, recycle)
    for head in HEADS:
        if text == head or text.startswith(head + ":"):
            return DraftSpec(head, text[len(head) + 1:].strip(), lookup, recycle)
    return DraftSpec(MODEL, text, lookup, recycle)
