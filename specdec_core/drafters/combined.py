"""Prompt lookup and a model draft together: the lookup proposes when the recent text repeats an
earlier n-gram (its proposal costs nothing and copied passages are long), the model otherwise.

Still exact: each round's tokens come from one source, chosen from the committed text alone
(before any draw; k = "auto" may decline an offered lookup from its estimates of earlier rounds),
and q is the distribution they were drawn from — one-hot for a lookup, the
model's q otherwise. Which source proposed is recorded per round (`Round.draft_source`).
"""
from __future__ import annotations

from .base import Drafter, chain_tree
from .ngram import NGramDrafter

LOOKUP, MODEL = "lookup", "model"


class CombinedDrafter(Drafter):
    """Lookup first (a match of ≥ min_ngram tokens), else the model drafter; both stay in step.

    k = "auto" is also offered shorter matches (≥ offer_ngram tokens): it estimates their α apart
    and takes one only when predicted faster (a 2-gram continues right about half the time on the
    default target, a 3-gram three times in four: a fixed k would take them blindly)."""

    def __init__(self, model: Drafter, vocab_size: int, device="cpu", min_ngram: int = 3,
                 max_ngram: int = 4, offer_ngram: int = 2):
        super().__init__(vocab_size, device)
        self.model = model
        self.min_ngram = min_ngram
        self.lookup = NGramDrafter(vocab_size, device, max_ngram=max_ngram, min_ngram=min(offer_ngram, min_ngram))
        self.name = f"lookup+{model.name}"
        self.wants_hidden, self.kernels = model.wants_hidden, model.kernels
        self.feature_layers, self.version = model.feature_layers, model.version
        self.proposable = model.proposable     # the model's; lookup copies tokens from the context
        self.source = None                     # set by use_source() for one round

    def next_source(self, committed) -> str:
        """Which source it offers next, from the committed text alone (k = "auto" asks first);
        match_n holds the offered match's length."""
        self.match_n = self.lookup.match(committed.tolist())[0] or None
        return LOOKUP if self.match_n else MODEL

    def use_source(self, source):
        self.source = source

    def start(self, prompt_ids):
        self.model.start(prompt_ids)

    def observe(self, hidden):
        self.model.observe(hidden)     # the model keeps every feature, also in lookup rounds

    def propose(self, committed, k, cfg, generator, stop_below=None):
        source, self.source = self.source, None
        if source != MODEL:   # one search decides the source and gives what to copy
            tokens = committed.tolist()
            n, start = self.lookup.match(tokens)
            if n and (source == LOOKUP or n >= self.min_ngram):   # no policy (fixed k): long matches only
                proposal = self.lookup.copy_proposal(tokens, start, k)
                if len(proposal.ids):
                    proposal.source = LOOKUP
                    return proposal
        proposal = self.model.propose(committed, k, cfg, generator, stop_below)
        proposal.source = MODEL
        return proposal

    def propose_tree(self, committed, depth, width, cfg, generator, nodes=None, frontier=1):
        """The lookup's chain where propose() would copy (sources "lookup"), else the model's tree."""
        source, self.source = self.source, None
        if source != MODEL:
            tokens = committed.tolist()
            n, start = self.lookup.match(tokens)
            if n and (source == LOOKUP or n >= self.min_ngram):
                proposal = self.lookup.copy_proposal(tokens, start, depth if nodes is None else min(depth, nodes))
                if len(proposal.ids):
                    return chain_tree(proposal, LOOKUP)
        return self.model.propose_tree(committed, depth, width, cfg, generator, nodes=nodes, frontier=frontier)

    def rollback(self, n_valid):
        self.model.rollback(n_valid)


def combined_factory(model_factory, min_ngram: int = 3):
    """A ModelPair drafter factory: prompt lookup + the drafter model_factory(pair) makes."""
    def factory(pair):
        return CombinedDrafter(model_factory(pair), pair.vocab_size, pair.input_device, min_ngram)
    factory.name = "lookup+" + getattr(model_factory, "name", "draft")
    return factory
