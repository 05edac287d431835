"""Prompt lookup and a model draft together: the lookup proposes when the recent text repeats an
earlier n-gram (its proposal costs nothing and copied passages are long), the model otherwise.

Still exact: a chain round's tokens come from one source, chosen from the committed text alone
(before any draw), and q is the distribution they were drawn from — one-hot for a lookup, the
model's q otherwise. A tree round holds both: the lookup's copy as a branch tried first, merged
with the model's tree (shared where they agree), every node a deterministic guess. Which sources
proposed is recorded per round (`Round.draft_source`, and per node in `Round.tree`).
"""
from __future__ import annotations

from .base import Drafter, chain_tree, merge_trees
from .ngram import NGramDrafter

LOOKUP, MODEL = "lookup", "model"


class CombinedDrafter(Drafter):
    """Lookup first (a match of ≥ min_ngram tokens), else the model drafter; both stay in step.
    Trees whose nodes the shape rule picks (tree = "auto") also get shorter matches (≥ offer_ngram
    tokens) as a branch: the rule weighs the lookup by its own measured record, so a 2-gram that
    keeps diverging is simply not kept."""

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
        self.max_k, self.one_pass = model.max_k, model.one_pass

    def start(self, prompt_ids):
        self.model.start(prompt_ids)

    def observe(self, hidden):
        self.model.observe(hidden)     # the model keeps every feature, also in lookup rounds

    def propose(self, committed, k, cfg, generator, stop_below=None):
        tokens = committed.tolist()
        n, start = self.lookup.match(tokens)   # one search decides the source and gives what to copy
        if n >= self.min_ngram:
            proposal = self.lookup.copy_proposal(tokens, start, k)
            if len(proposal.ids):
                proposal.source = LOOKUP
                return proposal
        proposal = self.model.propose(committed, k, cfg, generator, stop_below)
        proposal.source = MODEL
        return proposal

    def propose_tree(self, committed, depth, width, cfg, generator, nodes=None, frontier=1, until=None):
        """The model's tree with the lookup's copy merged in as a branch tried first (a match of
        ≥ min_ngram tokens for a fixed budget, which the copy then shares; any offered match when
        the shape rule picks the nodes, nodes=None: it weighs each source by its own record)."""
        tokens = committed.tolist()
        n, start = self.lookup.match(tokens)
        copy = None
        if n and (nodes is None or n >= self.min_ngram):
            proposal = self.lookup.copy_proposal(tokens, start, depth if nodes is None else min(depth, nodes))
            if len(proposal.ids):
                copy = chain_tree(proposal, LOOKUP, sampled=False)
        left = None if nodes is None else nodes - (len(copy) if copy is not None else 0)
        if left is not None and left <= 0:
            return copy
        tree = self.model.propose_tree(committed, depth, width, cfg, generator, nodes=left, frontier=frontier,
                                       until=until)
        tree.sources = [MODEL] * len(tree)
        if copy is None:
            return tree
        return merge_trees(copy, tree)

    def rollback(self, n_valid):
        self.model.rollback(n_valid)


def combined_factory(model_factory, min_ngram: int = 3):
    """A ModelPair drafter factory: prompt lookup + the drafter model_factory(pair) makes."""
    def factory(pair):
        return CombinedDrafter(model_factory(pair), pair.vocab_size, pair.input_device, min_ngram)
    factory.name = "lookup+" + getattr(model_factory, "name", "draft")
    return factory
