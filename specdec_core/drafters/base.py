"""Everything that proposes tokens, behind one small interface: one draft call per level.

A drafter proposes candidates for the next token after the committed sequence, level by level:
given `expand` (which of the last level's candidates to expand: the loop's frontier) it returns the next level's
candidates with the distribution q each came from, over the *target's* vocabulary (one-hot for
prompt lookup, zero outside a truncated draft vocabulary). It says nothing about how far to grow
or what to keep: that is the round loop's and the shape rule's (decoding/grow.py, shape.py).
The decoder tells it which of its positions stay valid (`rollback`), and may hand it the target's
last hidden states (`observe`) when it asks for them.

The calls, in the order the decoder makes them (decoding/speculative.py, grow.py):

    drafter.observe(hidden)      # prefill: the target's hidden states of prompt[:-1] (if wants_hidden)
    drafter.start(prompt_ids, recalled)   # once per decode (recalled: the caller's recycle table, if it recalls)
    # each round, for each part (a combined drafter is two: lookup, then its model):
    level = part.draft(committed, None, width, depth, cfg, generator)   # the root's children
    level = part.draft(committed, pick, width, depth, cfg, generator)   # children of the picked
    drafter.recall(tokens, logits)   # the verify pass' inputs and raw logits (if wants_logits: recycling)
    drafter.rollback(n_valid)    # keep state for committed[:n_valid] only (the accepted prefix)
    drafter.observe(hidden)      # the verify pass' hidden states of the newly committed positions

Every guess carries its Source, the closed set below: the shape rule calibrates per source and
the trace records it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Optional

import torch
from transformers import DynamicCache

from ..sampling import SamplingConfig


class Source(str, Enum):
    """Who proposed a guess (the closed set): the trace writes its value."""
    __str__, __format__ = str.__str__, str.__format__   # printed as its value (StrEnum, Python ≥ 3.11)
    LOOKUP = "lookup"    # prompt lookup: a copy of earlier text, q one-hot; no model call
    MODEL = "model"      # the drafter's model: a draft LM, the distilled feature head, the block head
    RECYCLE = "recycle"  # recalled: the target's own earlier top choices after this token (recycle.py); no model call

    @property
    def free(self) -> bool:
        """Its levels need no model call (costs.run_costs's c is not spent on them)."""
        return self in (Source.LOOKUP, Source.RECYCLE)


@dataclass
class Level:
    """One draft call's answer: the next level's candidates, children of the frontier it was given
    (f entries; the root alone at the first level), and the q each came from."""
    ids: torch.Tensor        # [m] candidate token ids (target vocabulary), on the drafter's device
    parents: torch.Tensor    # [m] long: the frontier entry each is a child of (0 at the root)
    logq: torch.Tensor       # [m] its ranking log q (a path's score adds its ancestors')
    logits: torch.Tensor     # [f, V] each frontier entry's next-token logits (-inf: q = 0); [f, C] with cols
    q_probs: Optional[torch.Tensor] = None  # [f, V] warp_probs(logits), when made already (to draw); [f, C] with cols
    sampled: bool = False    # each candidate was drawn from its row (width 1): a sampled chain
    reason: Optional[str] = None            # why it is empty, if the drafter can say (lookup)
    # [C] ascending target ids: logits and q_probs hold only these columns (q = 0 elsewhere), so a
    # truncated draft vocabulary's rows are warped over C, not V, and widened once per kept node.
    cols: Optional[torch.Tensor] = None
    vocab_size: Optional[int] = None        # V, with cols

    def __len__(self) -> int:
        return self.ids.shape[0]

    def full_rows(self) -> "Level":
        """The same level with [f, V] rows (-inf / 0 outside cols)."""
        if self.cols is None:
            return self
        V = self.vocab_size
        logits = widen(self.logits, self.cols, V, float("-inf"))
        q = None if self.q_probs is None else widen(self.q_probs, self.cols, V)
        return Level(self.ids, self.parents, self.logq, logits, q, self.sampled, self.reason)

    def over(self, cols: torch.Tensor) -> "Level":
        """The same level with its rows over `cols` [C'] (ascending, a superset of its own cols)."""
        if cols is self.cols:
            return self
        logits = regrid(self.logits, self.cols, cols, float("-inf"))
        q = None if self.q_probs is None else regrid(self.q_probs, self.cols, cols)
        return Level(self.ids, self.parents, self.logq, logits, q, self.sampled, self.reason, cols, self.vocab_size)


def widen(rows: torch.Tensor, cols: torch.Tensor, vocab_size: int, fill: float = 0.0) -> torch.Tensor:
    """Rows over columns cols [C] -> over the whole vocabulary: [m, C] -> [m, V], `fill` elsewhere
    (0 for probabilities, -inf for logits)."""
    return rows.new_full((len(rows), vocab_size), fill).index_copy_(1, cols, rows)


def regrid(rows: torch.Tensor, cols: torch.Tensor, wider: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Rows over cols [C] -> over `wider` [C'] (ascending, holding every id of cols): [m, C] -> [m, C']."""
    if wider is cols:
        return rows
    return rows.new_full((len(rows), len(wider)), fill).index_copy_(1, torch.searchsorted(wider, cols), rows)


def union_cols(cols: list) -> Optional[torch.Tensor]:
    """The columns rows over each of `cols` ([C_i] ascending ids; None: the whole vocabulary) fit
    in: the one object when they are all it, None when any is None, else the sorted union."""
    if any(c is None for c in cols):
        return None
    first = cols[0]
    if all(c is first for c in cols):
        return first
    big = max(cols, key=len)
    # Usually the small ones (a copy's few tokens, a recalled level) lie inside the draft model's
    # columns: then those are the union, and no sort runs.
    rest = torch.cat([c for c in cols if c is not big])
    at = torch.searchsorted(big, rest).clamp_max(len(big) - 1)
    if bool((big[at] == rest).all()):
        return big
    return torch.unique(torch.cat([big, rest]))


def values_at(rows: torch.Tensor, cols: Optional[torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """rows [m, W] over cols [W] (None: the whole vocabulary), tokens [m] -> [m] each row's value at
    its token (0 where the token is outside cols)."""
    if cols is None:
        return rows.gather(-1, tokens[:, None]).squeeze(-1)
    at = torch.searchsorted(cols, tokens).clamp_max(len(cols) - 1)
    return torch.where(cols[at] == tokens, rows.gather(-1, at[:, None]).squeeze(-1), 0.0)


def empty_level(vocab_size: int, device, reason: Optional[str] = None) -> Level:
    """No candidates (nothing to draft from, or a copy that ended)."""
    none = torch.zeros(0, dtype=torch.long, device=device)
    return Level(none, none, torch.zeros(0, device=device), torch.zeros(0, vocab_size, device=device),
                 reason=reason)


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
    q_rows: torch.Tensor     # [n, W] the draft distribution each node came from (after warps), over cols
    q_raw_rows: torch.Tensor  # [n, W] the same, raw temperature-1, for display
    sources: list            # [n] the Source that proposed each node
    sampled: bool = False    # every node drawn from its q row (a sampled chain): the chain rule applies
    # [W] ascending target ids the rows hold (q = 0 elsewhere; None: all V): a round's rows stay over
    # the draft's own columns (8,192 of 49,152 for the distilled head, a copy's few tokens) until
    # something needs them over V (q_probs: a sampled chain's residual, a test).
    cols: Optional[torch.Tensor] = None
    vocab_size: Optional[int] = None   # V, with cols

    def __len__(self) -> int:
        return len(self.parents)

    @property
    def q_probs(self) -> torch.Tensor:
        """[n, V] the draft distribution each node came from, over the target's vocabulary."""
        return self.q_rows if self.cols is None else widen(self.q_rows, self.cols, self.vocab_size)

    @property
    def q_raw(self) -> torch.Tensor:
        """[n, V] the same at temperature 1."""
        return self.q_raw_rows if self.cols is None else widen(self.q_raw_rows, self.cols, self.vocab_size)

    def node_q(self, raw: bool = False) -> torch.Tensor:
        """[n] each node's q (raw: at temperature 1) of its own token."""
        rows = self.q_raw_rows if raw else self.q_rows
        return values_at(rows, self.cols, self.ids.to(rows.device))

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
        # index_select, not advanced indexing: [n, V] rows gathered ~2.7x faster on the CPU
        return TokenTree(self.ids.index_select(0, rows), [index.get(self.parents[i], -1) for i in keep],
                         self.q_rows.index_select(0, rows), self.q_raw_rows.index_select(0, rows),
                         [self.sources[i] for i in keep], self.sampled, self.cols, self.vocab_size)

    def path_to(self, node: int) -> list:
        """The nodes from the root's child down to `node` (empty for the root, -1)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def merge_trees(first: TokenTree, second: TokenTree) -> TokenTree:
    """One tree holding both (deterministic guesses; a combined drafter's parts): a node of `second` with the same token under
    the same parent as a node of `first` is that node (first's q and source kept); the rest of
    `second` follows first's nodes, so at every node first's children are tried first."""
    if len(second) == 0:
        return first
    if len(first) == 0:
        return dataclasses.replace(second, sampled=False)
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
    # Both trees' rows over the columns they fit in together (the whole vocabulary if either is).
    cols = union_cols([first.cols, second.cols])

    def rows_of(tree, q, take=None):
        q = q if take is None else q.index_select(0, take)
        if cols is None:
            return (q if tree.cols is None else widen(q, tree.cols, tree.vocab_size)).to(dev)
        return regrid(q, tree.cols, cols).to(dev)
    return TokenTree(torch.cat([first.ids, second.ids.index_select(0, rows).to(dev)]), parents,
                     torch.cat([rows_of(first, first.q_rows), rows_of(second, second.q_rows, rows)]),
                     torch.cat([rows_of(first, first.q_raw_rows), rows_of(second, second.q_raw_rows, rows)]),
                     first.sources + [second.sources[j] for j in new], False, cols,
                     None if cols is None else first.vocab_size)


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
    source = Source.MODEL              # what its guesses are tagged with
    wants_hidden = False
    wants_logits = False               # recall() is handed every verify pass's logits
    feature_layers: tuple = (-1,)      # hidden_states indices observe() is handed (wants_hidden)
    version: Optional[str] = None      # of its trained weights (traces record it), if any
    kernels: Optional[str] = None      # matrix kernels of the drafter's model (fastpath.py), if any
    proposable: Optional[torch.Tensor] = None  # target ids its model can ever propose (None: any)
    # One call fills every level, up to this many (a block drafter's slots); None: a call per level.
    slots: Optional[int] = None

    def __init__(self, vocab_size: int, device="cpu"):
        self.vocab_size = vocab_size
        self.device = torch.device(device)

    @property
    def sources(self) -> tuple:
        """Every Source its guesses may carry (a combined drafter: several)."""
        return (self.source,)

    def start(self, prompt_ids: torch.Tensor, recalled=None) -> None:
        """prompt_ids [T]: the decode starts; forget any earlier per-decode state. recalled: the
        RecycleTable a recalling source (wants_logits) reads and writes, its owner's, claimed by the
        decoder (None for every other drafter)."""

    def parts(self, committed: torch.Tensor, chain: bool, budgeted: bool) -> list:
        """The single-source drafters that draft this round after committed [L], in the order their
        guesses are tried (chain: a width-1 round; budgeted: a fixed node budget). Itself."""
        return [self]

    def draft(self, committed: torch.Tensor, expand: Optional[torch.Tensor], width: int, depth: int,
              cfg: SamplingConfig, generator: Optional[torch.Generator]) -> Level:
        """One draft call: the next level's candidates. expand None: the root's children (a new
        round after committed [L] of at most `depth` levels); else [f] indices into the last
        level's candidates, best first, whose children to offer. width 1: one draw from each q (a
        sampled chain); width > 1: each expanded node's top-`width` guesses (deterministic)."""
        return empty_level(self.vocab_size, self.device)

    def recall(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """tokens [n]: a verify pass's input tokens (the last committed, then every guess); logits
        [n, V]: the target's raw next-token logits at each (only when wants_logits)."""

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
