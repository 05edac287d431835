"""Prompt lookup and other guess sources together, as an ordered list of parts: the lookup's copy
(free, tried first: copied passages are long), then a model draft, then the recalled guesses
(`recycle`, drafters/recycle.py: free, after every other part). A round drafts from some of them:

    chain   one source, chosen from the committed text alone: the lookup's copy when a match of
            ≥ min_ngram tokens exists, else the first part after it (the model; recycle without one)
    tree    the lookup's copy as a branch tried first (when it matches), then every other part,
            merged where they agree (decoding/grow.py)

Still exact: every choice is made before any draw, and q is the distribution a chain's tokens were
drawn from — one-hot for a copy or a recalled chain guess, the model's q otherwise; a tree's nodes
are deterministic guesses. Which sources proposed is recorded per round (`Round.draft_source`, and
per node in `Round.tree`).
"""
from __future__ import annotations

from typing import Optional

from .base import Drafter, Source
from .ngram import NGramDrafter
from .recycle import RecycleDrafter


class CombinedDrafter(Drafter):
    """Lookup first (a match of ≥ min_ngram tokens), else the model drafter, then the recalled
    guesses in trees; every part stays in step. Trees whose nodes the shape rule picks (tree =
    "auto") also get shorter matches (≥ offer_ngram tokens) as a branch: the rule weighs the lookup
    by its own measured record, so a 2-gram that keeps diverging is simply not kept."""

    def __init__(self, model: Optional[Drafter], vocab_size: int, device="cpu", min_ngram: int = 3,
                 max_ngram: int = 4, offer_ngram: int = 2, recycle: Optional[RecycleDrafter] = None):
        super().__init__(vocab_size, device)
        if model is None and recycle is None:
            raise ValueError("a combined drafter needs a model draft or recalled guesses beside the lookup")
        self.model, self.min_ngram = model, min_ngram
        self.lookup = NGramDrafter(vocab_size, device, max_ngram=max_ngram, min_ngram=min(offer_ngram, min_ngram))
        self.members = [self.lookup] + [part for part in (model, recycle) if part is not None]   # in trial order
        self.name = "+".join(["lookup"] + [part.name for part in self.members[1:]])
        if model is not None:
            self.wants_hidden, self.kernels = model.wants_hidden, model.kernels
            self.feature_layers, self.version = model.feature_layers, model.version
            self.proposable = model.proposable     # the model's; lookup copies tokens from the context
            self.slots = model.slots
        self.wants_logits = any(part.wants_logits for part in self.members)

    @property
    def sources(self) -> tuple:
        return tuple(source for part in self.members for source in part.sources)

    def start(self, prompt_ids, recalled=None):
        for part in self.members:
            part.start(prompt_ids, recalled)

    def observe(self, hidden):
        self.model.observe(hidden)     # the model keeps every feature, also in lookup rounds

    def parts(self, committed, chain, budgeted):
        """A chain: the lookup's copy when a match of ≥ min_ngram tokens exists, else the next
        part's. A tree: the copy as a branch tried first (a match of ≥ min_ngram tokens for a fixed
        budget, which the copy then shares; any offered match when the shape rule picks the nodes:
        it weighs each source by its own record), then every other part in order."""
        n, _ = self.lookup.match(committed.tolist())   # one search decides; the lookup copies it
        if chain:
            return [self.lookup if n >= self.min_ngram else self.members[1]]
        copy = n and (not budgeted or n >= self.min_ngram)
        return self.members if copy else self.members[1:]

    def recall(self, tokens, logits):
        for part in self.members:
            if part.wants_logits:
                part.recall(tokens, logits)

    def rollback(self, n_valid):
        for part in self.members:
            part.rollback(n_valid)


def combined_factory(model_factory=None, min_ngram: int = 3, recycle: bool = False):
    """A ModelPair drafter factory: prompt lookup + the drafter model_factory(pair) makes (None:
    none) + recalled guesses (recycle)."""
    def factory(pair):
        recalled = RecycleDrafter(pair.vocab_size, pair.input_device) if recycle else None
        model = model_factory(pair) if model_factory is not None else None
        return CombinedDrafter(model, pair.vocab_size, pair.input_device, min_ngram, recycle=recalled)
    parts = ["lookup"] + ([getattr(model_factory, "name", "draft")] if model_factory is not None else [])
    factory.name = "+".join(parts + (["recycle"] if recycle else []))
    return factory


def recycle_factory(pair) -> RecycleDrafter:
    """A ModelPair drafter factory: recycling alone (training-free)."""
    return RecycleDrafter(pair.vocab_size, pair.input_device)


recycle_factory.name = RecycleDrafter.name
