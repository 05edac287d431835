"""Everything that proposes tokens, behind one small interface.

A drafter proposes up to k tokens after the committed sequence and says with what probability it
drew each one: q is a distribution over the *target's* vocabulary (one-hot for the n-gram drafter,
zero outside a truncated draft vocabulary). The decoder tells it which of its positions stay valid
(`rollback`), and may hand it the target's last hidden states (`observe`) when it asks for them.

The calls, in the order the decoder makes them (decoding/speculative.py):

    drafter.observe(hidden)      # prefill: the target's hidden states of prompt[:-1] (if wants_hidden)
    drafter.start(prompt_ids)    # once per decode
    # each round:
    proposal = drafter.propose(committed, k, cfg, generator, stop_below)
    drafter.rollback(n_valid)    # keep state for committed[:n_valid] only (the accepted prefix)
    drafter.observe(hidden)      # the verify pass' hidden states of the newly committed positions

Every round is verified as a token tree (decoding/tree.py): a chain round wraps `propose`'s
tokens as the tree of width 1 (chain_tree); a tree round calls `propose_tree` instead. rollback
and observe then follow the accepted path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from transformers import DynamicCache

from ..sampling import SamplingConfig


@dataclass
class Proposal:
    ids: torch.Tensor        # [m] proposed token ids (m ≤ k), on the decode device
    q_probs: torch.Tensor    # [m, V] the distributions they were drawn from (after warps)
    q_raw: torch.Tensor      # [m, V] raw temperature-1 distributions, for display
    stop_reason: Optional[str] = None  # why fewer than k were proposed, if so
    source: Optional[str] = None       # which source proposed them (combined drafter), if several


def node_depths(parents: list) -> list:
    """[n] depth of each node of a tree given its parents (topological, -1: a child of the root,
    which is depth 1)."""
    depths = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def sibling_ranks(parents: list) -> list:
    """[n] 1-based place of each node among its parent's children (the order they are tried)."""
    seen, ranks = {}, []
    for parent in parents:
        seen[parent] = seen.get(parent, 0) + 1
        ranks.append(seen[parent])
    return ranks


@dataclass
class TokenTree:
    """Guesses for one round as a tree rooted at the last committed token (the root is no node).

    Nodes are in topological order (a parent before its children) and a node's children in the
    order the rule tries them. A chain of m drafts is the tree with parents [-1, 0, .., m-2]."""
    ids: torch.Tensor        # [n] node token ids, on the decode device
    parents: list            # [n] parent node index; -1: a child of the root
    q_probs: torch.Tensor    # [n, V] the draft distribution each node came from (after warps)
    q_raw: torch.Tensor      # [n, V] the same, raw temperature-1, for display
    sources: list            # [n] which source proposed each node ("head", "lookup", ...)
    sampled: bool = False    # every node drawn from its q row (a chain from propose): the chain rule applies

    def __len__(self) -> int:
        return len(self.parents)

    @property
    def depths(self) -> list:
        """[n] depth of each node (1: a child of the root)."""
        return node_depths(self.parents)

    def children(self) -> dict:
        """{node (-1: root): its children in trial order}, every node and the root present."""
        kids = {i: [] for i in range(-1, len(self))}
        for i, parent in enumerate(self.parents):
            kids[parent].append(i)
        return kids

    @property
    def is_chain(self) -> bool:
        """Width 1 everywhere: node i's parent is i − 1."""
        return self.parents == list(range(-1, len(self.parents) - 1))

    def subtree(self, keep: list) -> "TokenTree":
        """The tree of the nodes `keep` (ascending; each kept node's parent kept too), re-indexed."""
        index = {old: new for new, old in enumerate(keep)}
        rows = torch.tensor(keep, dtype=torch.long, device=self.ids.device)
        return TokenTree(self.ids[rows], [index.get(self.parents[i], -1) for i in keep], self.q_probs[rows],
                         self.q_raw[rows], [self.sources[i] for i in keep], self.sampled)

    def path_to(self, node: int) -> list:
        """The nodes from the root's child down to `node` (empty for the root, -1)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def chain_tree(proposal: Proposal, source: str, sampled: bool = True) -> TokenTree:
    """A chain proposal as the tree of width 1; `sampled`: its tokens were drawn from q_probs
    (propose's contract), so it is verified with the chain rule min(1, p/q)."""
    m = len(proposal.ids)
    return TokenTree(proposal.ids, list(range(-1, m - 1)), proposal.q_probs, proposal.q_raw,
                     [proposal.source or source] * m, sampled)


def merge_trees(first: TokenTree, second: TokenTree) -> TokenTree:
    """One tree holding both (deterministic guesses): a node of `second` with the same token under
    the same parent as a node of `first` is that node (first's q and source kept); the rest of
    `second` follows first's nodes, so at every node first's children are tried first."""
    if len(second) == 0:
        return first
    ids1, ids2 = first.ids.tolist(), second.ids.tolist()
    where = {(p, t): i for i, (p, t) in enumerate(zip(first.parents, ids1))}
    parents, index, new = list(first.parents), {-1: -1}, []
    for j, (p, t) in enumerate(zip(second.parents, ids2)):
        key = (index[p], t)
        if key in where:
            index[j] = where[key]
        else:
            index[j] = where[key] = len(parents)
            parents.append(index[p])
            new.append(j)
    rows = torch.tensor(new, dtype=torch.long, device=second.ids.device)
    dev = first.ids.device
    return TokenTree(torch.cat([first.ids, second.ids[rows].to(dev)]), parents,
                     torch.cat([first.q_probs, second.q_probs[rows].to(dev)]),
                     torch.cat([first.q_raw, second.q_raw[rows].to(dev)]),
                     first.sources + [second.sources[j] for j in new], False)


def empty_proposal(vocab_size: int, device) -> Proposal:
    z = torch.zeros(0, vocab_size, device=device)
    return Proposal(torch.zeros(0, dtype=torch.long, device=device), z, z)


READ_NOW = {"cpu"}   # device types where a drafter may read a value back per step (no sync cost)


def unsure_now(q_raw_row: torch.Tensor, stop_below: Optional[float]) -> bool:
    """Adaptive k's early stop, decided at once: only on the CPU, where reading the draft's top
    probability [V] back costs nothing. On a GPU that read would be a host sync per draft token."""
    return stop_below is not None and q_raw_row.device.type in READ_NOW and q_raw_row.max().item() < stop_below


def finish_proposal(drafter: "Drafter", ids: list, q_probs: list, q_raw: list, stop_below: Optional[float],
                    stop_reason: Optional[str] = None) -> Proposal:
    """Stack per-step draws into a Proposal. Off the CPU the early stop was not read per step: the
    chain is cut here after its first step whose top probability is < stop_below (one host sync;
    the drafted-then-dropped steps are rolled back like rejected ones)."""
    if not ids:
        return empty_proposal(drafter.vocab_size, drafter.device)
    ids, q_probs, q_raw = torch.cat(ids), torch.stack(q_probs), torch.stack(q_raw)
    if stop_below is not None and ids.device.type not in READ_NOW and len(ids) > 1:
        unsure = (q_raw[:-1].amax(-1) < stop_below).tolist()
        if any(unsure):
            m = unsure.index(True) + 1
            ids, q_probs, q_raw = ids[:m], q_probs[:m], q_raw[:m]
            stop_reason = f"draft top probability < {stop_below:g}"
    return Proposal(ids, q_probs, q_raw, stop_reason)


def crop_cache(cache: DynamicCache, keep: int) -> None:
    """Drop cache entries beyond the first `keep` positions (transformers 5: crop(-n) drops n)."""
    n_drop = cache.get_seq_length() - keep
    if n_drop > 0:
        cache.crop(-n_drop)


def fit_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Cut padded logit rows, or pad a smaller vocabulary with -inf (q = 0 there): [..., V'] -> [..., V]."""
    n = logits.shape[-1]
    if n == vocab_size:
        return logits
    if n > vocab_size:
        return logits[..., :vocab_size]
    pad = logits.new_full((*logits.shape[:-1], vocab_size - n), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


class Drafter:
    """Base drafter: proposes nothing (a plain target step each round)."""

    name = "none"
    wants_hidden = False
    feature_layers: tuple = (-1,)      # hidden_states indices observe() is handed (wants_hidden)
    version: Optional[str] = None      # of its trained weights (traces record it), if any
    kernels: Optional[str] = None      # matrix kernels of the drafter's model (fastpath.py), if any
    proposable: Optional[torch.Tensor] = None  # target ids its model can ever propose (None: any)
    max_k: Optional[int] = None        # most tokens it drafts per round (a block's slots; None: no limit)
    one_pass: bool = False             # one draft call fills a round's whole chain (a block drafter)

    def levels(self, depth: int) -> int:
        """Sequential draft calls a round of `depth` levels took (costs.run_costs's c is per call):
        one per level; one whatever the depth for a one_pass drafter."""
        return min(depth, 1) if self.one_pass else depth

    def __init__(self, vocab_size: int, device="cpu"):
        self.vocab_size = vocab_size
        self.device = torch.device(device)

    def start(self, prompt_ids: torch.Tensor) -> None:
        """prompt_ids [T]: the decode starts; forget any earlier state."""

    def propose(self, committed: torch.Tensor, k: int, cfg: SamplingConfig,
                generator: Optional[torch.Generator], stop_below: Optional[float] = None) -> Proposal:
        """committed [L] -> up to k proposed tokens with their q (over the target vocabulary)."""
        return empty_proposal(self.vocab_size, self.device)

    def propose_tree(self, committed: torch.Tensor, depth: int, width: int, cfg: SamplingConfig,
                     generator: Optional[torch.Generator], nodes: Optional[int] = None,
                     frontier: int = 1, until=None) -> TokenTree:
        """committed [L] -> a TokenTree of at most `depth` levels and `nodes` nodes (None: no
        budget), each expanded node offering `width` children, `frontier` nodes expanded per level;
        until(scores, depth) -> bool, when given, may stop the growth after any level (scores: that
        level's candidates' log path probabilities).
        Default: the drafter's chain of min(depth, nodes) (width 1, whatever `width` and
        `frontier` say), drawn from q and verified with the chain rule."""
        k = depth if nodes is None else min(depth, nodes)
        return chain_tree(self.propose(committed, k, cfg, generator), self.name)

    def observe(self, hidden: torch.Tensor) -> None:
        """hidden [n, len(feature_layers)·H]: the target's tapped hidden states (tapped()) of newly
        committed input positions."""

    def rollback(self, n_valid: int) -> None:
        """Only committed[:n_valid] is still valid: forget state for later positions."""


def tapped(hidden_states: tuple, layers: tuple) -> torch.Tensor:
    """The decoder's hand-over to observe(): HF `hidden_states` (a tuple of [B, T, H]; -1 is the
    final post-norm state) at `layers`, concatenated -> [B, T, len(layers)·H]."""
    if len(layers) == 1:
        return hidden_states[layers[0]]
    return torch.cat([hidden_states[i] for i in layers], -1)
