"""What a decode is asked for, checked once: the Plan (what each round drafts) and the Request (the
plan with how tokens are drawn and how many).

The API, the CLI flags, the page's fields and the share link all say the drafting shape with two
keywords, k and tree. `parse_plan` is the one place they become a Plan, and `parse_request` the one
place a whole request's keywords are checked (against settings.RANGES); the decoder takes the
Request as it is. A trace's config keeps the plan as the same two keys it always had (`to_config`,
`from_config`), so the schema is unchanged and files written before the Plan read back.

    plain       no drafts: one target step a round (autoregressive decoding; config k = 0)
    chain       k drafts a round (k=N alone)
    tree        a fixed budget: at most `nodes` guesses in at most `depth` levels (tree=(N, D))
    auto_tree   the shape rule picks each round's tree (tree="auto", the default)
    auto_chain  the same rule on width 1 (k="auto", tree=None)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Optional, Union

from ..sampling import SamplingConfig
from ..settings import RANGES, SettingsError, check_k
from .tree import Shape, fanout

PLAIN, CHAIN, TREE, AUTO_CHAIN, AUTO_TREE = "plain", "chain", "tree", "auto_chain", "auto_tree"


@dataclass(frozen=True)
class Plan:
    """What every round of one decode drafts (k_schedule replays and the rule's choices aside)."""
    kind: str          # PLAIN, CHAIN, TREE, AUTO_CHAIN or AUTO_TREE
    k: int = 0         # CHAIN: drafts per round
    nodes: int = 0     # TREE: at most this many guesses per round (the root not counted) ...
    depth: int = 0     # ... in at most this many levels

    @property
    def auto(self) -> bool:
        """The shape rule decides each round (decoding/shape.py)."""
        return self.kind in (AUTO_CHAIN, AUTO_TREE)

    @property
    def branches(self) -> bool:
        """Rounds may draft a branching tree (else chains only)."""
        return self.kind in (TREE, AUTO_TREE)

    def to_config(self) -> dict:
        """The trace config's k and tree (TraceConfig; trace/schema.json, as written before the Plan):
        k is a chain's k, a tree's node budget, "auto" or 0; tree "auto", (nodes, depth) or None."""
        k = {PLAIN: 0, CHAIN: self.k, TREE: self.nodes}.get(self.kind, "auto")
        tree = "auto" if self.kind == AUTO_TREE else (self.nodes, self.depth) if self.kind == TREE else None
        return {"k": k, "tree": tree}

    @classmethod
    def from_config(cls, config) -> "Plan":
        """A trace's TraceConfig -> its Plan. /1 traces have no tree: their k was a chain's. Not range
        checked: a recorded run is read as it ran, even where today's caps are lower."""
        k, tree = config.k, config.tree
        if tree == "auto":
            return cls(AUTO_TREE)
        if isinstance(tree, (list, tuple)) and len(tree) == 2:
            return cls(TREE, nodes=int(tree[0]), depth=int(tree[1]))
        if tree is None and k == "auto":
            return cls(AUTO_CHAIN)
        if tree is None and isinstance(k, int) and not isinstance(k, bool) and k >= 0:
            return cls(CHAIN, k=k) if k else cls(PLAIN)
        raise ValueError(f"config k = {k!r}, tree = {tree!r} is not a drafting plan")

    def keywords(self) -> dict:
        """{k, tree}: the public keywords that parse back to this plan (speculative_generate,
        warm_up, the page's settings dict)."""
        if self.kind == PLAIN:
            raise ValueError("a plain decode has no speculative keywords")
        if self.kind == CHAIN or self.kind == AUTO_CHAIN:
            return {"k": self.k if self.kind == CHAIN else "auto", "tree": None}
        return {"k": None, "tree": (self.nodes, self.depth) if self.kind == TREE else "auto"}

    @property
    def tree_text(self) -> str:
        """The tree field's text (the page, the share link): "auto", "N,D" or "none" (chains)."""
        return "auto" if self.kind == AUTO_TREE else f"{self.nodes},{self.depth}" if self.kind == TREE else "none"

    def label(self) -> str:
        """How the page and the CLI name it: 'tree = auto', 'tree = 12,4', 'chain k = 4', 'plain'."""
        if self.kind == PLAIN:
            return "plain"
        return f"tree = {self.tree_text}" if self.branches else f"chain k = {self.keywords()['k']}"

    def fixed_shape(self) -> Union[int, Shape]:
        """What decode_round drafts every round of a fixed plan: a chain's k (0: a plain step) or the
        tree budget's Shape (tree.fanout). The rule's plans have none: it decides each round."""
        if self.auto:
            raise ValueError("the shape rule decides each round's shape")
        return fanout(self.nodes, self.depth) if self.kind == TREE else self.k

    def check_drafter(self, limit: Optional[int], drafter: str) -> None:
        """A drafter that drafts at most `limit` tokens per round (a block drafter's slots; None: no
        limit) refuses a chain k or a tree depth beyond it; the rule stays within it on its own."""
        asked = self.depth if self.kind == TREE else self.k if self.kind == CHAIN else None
        if limit is None or asked is None or asked <= limit:
            return
        what = f"tree depth {asked}" if self.kind == TREE else f"k = {asked}"
        raise SettingsError(f"{what} is too long for the {drafter}: it drafts at most {limit} tokens per "
                            f"round (one slot each); use k ≤ {limit}, a tree depth ≤ {limit}, or auto")


def _is(value, word: str) -> bool:
    return isinstance(value, str) and value.strip().lower() == word


def _tree(tree) -> Union[str, tuple, None]:
    """The tree keyword alone: "auto", None / "none" / "" (chains), or a budget (nodes, depth) given
    as a pair or as text "N,D" -> "auto", None or (nodes, depth) inside RANGES."""
    if tree is None or _is(tree, "none") or _is(tree, ""):
        return None
    if _is(tree, "auto"):
        return "auto"
    parts = re.split(r"\s*[,x×]\s*", tree.strip()) if isinstance(tree, str) else tree
    nodes, depth = RANGES["tree_nodes"], RANGES["tree_depth"]
    if isinstance(parts, (list, tuple)) and len(parts) == 2:
        return nodes.check(parts[0]), depth.check(parts[1])
    raise SettingsError(f'tree must be "auto", "none" or a budget "nodes,depth" (nodes {nodes.allowed()}, '
                        f"depth {depth.allowed()}); got {tree!r}")


def parse_plan(k=None, tree="auto", *, page: bool = False) -> Plan:
    """The public keywords -> a Plan, else SettingsError naming the field and its range. tree="auto"
    (the default) unless k is given: k=N alone is a chain of N, k="auto" the rule as a chain;
    tree=(nodes, depth) or "N,D" a fixed budget; a k beside a budget is refused. `page`: the page's
    fields, whose k field cannot be empty: its "auto" leaves the shape to the tree field unless that
    says "none" (the tree field is checked first)."""
    if page:
        tree = _tree(tree)
        k = None if _is(k, "auto") and tree is not None else k
    if k is not None and not _is(k, ""):
        k = check_k(k, page=page)
        tree = None if _is(tree, "auto") else tree      # k alone is a chain: the default tree gives way
    else:
        k = None
    budget = _tree(tree)
    if budget is not None and k is not None:
        raise SettingsError('give k (a chain) or tree (a token tree), not both: k=N alone is a chain of N, '
                            'tree="auto" or tree=(nodes, depth) a tree')
    if budget == "auto":
        return Plan(AUTO_TREE)
    if budget is not None:
        return Plan(TREE, nodes=budget[0], depth=budget[1])
    return Plan(CHAIN, k=k) if isinstance(k, int) else Plan(AUTO_CHAIN)


PLAIN_PLAN = Plan(PLAIN)


@dataclass(frozen=True)
class Request:
    """One decode as asked for, checked once by parse_request: what each round drafts, how every
    token is drawn, how many; the decoder, the trace config and the share link read it as it is."""
    plan: Plan
    sampling: SamplingConfig
    max_new_tokens: int
    seed: Optional[int]          # None: a fresh random seed

    def plain(self) -> "Request":
        """The same request decoded plainly (the race's other lane)."""
        return replace(self, plan=PLAIN_PLAN)

    def keywords(self) -> dict:
        """The public keywords that parse back to this request (speculative_generate's; k and tree
        left out of a plain request's)."""
        cfg = self.sampling
        shape = {} if self.plan.kind == PLAIN else self.plan.keywords()
        return {**shape, "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                "max_new_tokens": self.max_new_tokens, "seed": self.seed}


def parse_request(k=None, tree="auto", temperature=0.0, top_k=0, top_p=1.0, max_new_tokens=64, seed=0, *,
                  plain: bool = False, page: bool = False) -> Request:
    """The public keywords (numbers or text) -> a Request, else SettingsError naming the field and its
    range (the page's caps when `page`). `plain`: a plain decode, k and tree ignored. seed None or
    empty text: a fresh random seed."""
    plan = PLAIN_PLAN if plain else parse_plan(k, tree, page=page)
    no_seed = seed is None or (isinstance(seed, str) and not seed.strip())
    sampling = SamplingConfig(RANGES["temperature"].check(temperature, page), RANGES["top_k"].check(top_k, page),
                              RANGES["top_p"].check(top_p, page))
    return Request(plan, sampling, RANGES["max_new_tokens"].check(max_new_tokens, page),
                   None if no_seed else RANGES["seed"].check(seed, page))
