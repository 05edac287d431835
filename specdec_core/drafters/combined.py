"""Prompt lookup and a model draft together: the lookup proposes when the recent text repeats an
earlier n-gram (its proposal costs nothing and copied passages are long), the model otherwise.

With `recycle` (drafters/recycle.py) a tree round also holds the guesses recalled from the target's
own earlier passes, as a third part after the model's.

Still exact: a chain round's tokens come from one source, chosen from the committed text alone
(before any draw), and q is the distribution they were drawn from — one-hot for a lookup, the
model's q otherwise. A tree round holds them all: the lookup's copy as a branch tried first, merged
with the model's tree and the recalled one (shared where they agree; decoding/grow.py), every node
a deterministic guess. Which sources proposed is recorded per round (`Round.draft_source`, and per
node in `Round.tree`).
"""
from __future__ import annotations

from typing import Optional

from .base import Drafter, Source
from .ngram import NGramDrafter
from .recycle import WIDTH_ALONE, WIDTH_BESIDE_MODEL, RecycleDrafter, table_for


class CombinedDrafter(Drafter):
    """Lookup first (a match of ≥ min_ngram tokens), else the model drafter; both stay in step.
    Trees whose nodes the shape rule picks (tree = "auto") also get shorter matches (≥ offer_ngram
    tokens) as a branch: the rule weighs the lookup by its own measured record, so a 2-gram that
    keeps diverging is simply not kept."""

    def __init__(self, model: Drafter, vocab_size: int, device="cpu", min_ngram: int = 3,
                 max_ngram: int = 4, offer_ngram: int = 2, recycle: Optional[Drafter] = None):
        super().__init__(vocab_size, device)
        self.model, self.recycle = model, recycle
        self.min_ngram = min_ngram
        self.lookup = NGramDrafter(vocab_size, device, max_ngram=max_ngram, min_ngram=min(offer_ngram, min_ngram))
        self.name = f"lookup+{model.name}" + ("+recycle" if recycle is not None else "")
        self.wants_hidden, self.kernels = model.wants_hidden, model.kernels
        self.wants_logits = model.wants_logits or recycle is not None
        self.feature_layers, self.version = model.feature_layers, model.version
        self.proposable = model.proposable     # the model's; lookup copies tokens from the context
        self.slots = model.slots

    @property
    def wants_prompt_logits(self) -> bool:
        """A part that recalls (the model part too: lookup + recycle) is seeded from the prompt."""
        return any(part is not None and part.wants_prompt_logits for part in (self.model, self.recycle))

    @property
    def sources(self) -> tuple:
        return (Source.LOOKUP, *self.model.sources, *((Source.RECYCLE,) if self.recycle is not None else ()))

    def start(self, prompt_ids):
        self.model.start(prompt_ids)

    def observe(self, hidden):
        self.model.observe(hidden)     # the model keeps every feature, also in lookup rounds

    def parts(self, committed, chain, budgeted):
        """A chain: the lookup's copy when a match of ≥ min_ngram tokens exists, else the model's.
        A tree: the copy as a branch tried first (a match of ≥ min_ngram tokens for a fixed budget,
        which the copy then shares; any offered match when the shape rule picks the nodes: it
        weighs each source by its own record), then the model's tree."""
        n, _ = self.lookup.match(committed.tolist())   # one search decides; the lookup copies it
        if chain:
            return [self.lookup if n >= self.min_ngram else self.model]
        copy = n and (not budgeted or n >= self.min_ngram)
        recalled = [self.recycle] if self.recycle is not None else []
        return ([self.lookup] if copy else []) + [self.model] + recalled

    def recall(self, tokens, logits):
        for part in (self.model, self.recycle):
            if part is not None and part.wants_logits:
                part.recall(tokens, logits)

    def rollback(self, n_valid):
        self.model.rollback(n_valid)


def combined_factory(model_factory, min_ngram: int = 3, recycle: bool = False):
    """A ModelPair drafter factory: prompt lookup + the drafter model_factory(pair) makes (+ the
    target's recycle table as a third source in trees)."""
    def factory(pair):
        recalled = recycle_drafter(pair, WIDTH_BESIDE_MODEL) if recycle else None
        return CombinedDrafter(model_factory(pair), pair.vocab_size, pair.input_device, min_ngram, recycle=recalled)
    factory.name = "lookup+" + getattr(model_factory, "name", "draft") + ("+recycle" if recycle else "")
    return factory


def recycle_drafter(pair, width: int = WIDTH_ALONE) -> RecycleDrafter:
    """A RecycleDrafter on the pair's target's table (kept across requests: recycle.table_for)."""
    return RecycleDrafter(table_for(pair.target, pair.vocab_size, pair.input_device), pair.vocab_size,
                          pair.input_device, width)


def recycle_factory(pair) -> RecycleDrafter:
    """A ModelPair drafter factory: recycling alone (training-free)."""
    return recycle_drafter(pair)


recycle_factory.name = RecycleDrafter.name
