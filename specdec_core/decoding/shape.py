"""tree = "auto": one shape rule decides each round's draft tree (k = "auto" is its width-1 case).

Each round the drafter grows candidates: a tree `depth` levels deep, WIDTH children per expanded
node, WIDTH nodes expanded per level (a chain of `depth` for width 1). Then, in units of one target
step:
  a(x)   estimated acceptance of node x = Π over its path of min(1, s · conf): conf is the draft's
         confidence in the node (its q at temperature 1; for a sampled chain the top of its row,
         known before the draw: a cut that looked at the drawn token would bias the output), s the
         calibration of the node's source measured in this run, (PRIOR + Σ hits) / (PRIOR + Σ conf)
         over the verified nodes whose parent was reached (hit: the round committed that token
         there; its chance is p(x) for a guessed child, the chain rule's for a sampled one);
  v(n)   the target pass over n + 1 tokens, 1 + slope·n: costs.theory.verify_cost on this decode's
         measured v(m) (costs.measured, the page's definitions), else the machine's pass costs;
  c      one draft level (costs.measured.c), 0 for a prompt-lookup level (a search, no model).
The round takes nodes in order of a(x) while a(x) ÷ (slope + c if x opens a level) ≥ E ÷ C, where
E = 1 + Σ a is the round's expected tokens so far and C = v(n) + c·levels its cost: it adds a guess
while the guess raises tokens per unit time, and stops at the first that would not. Nothing kept
is a plain step. The next round grows one level deeper than this round kept (DEPTH0 at first).
Each round records its inputs and the candidates it kept, so a replay reproduces it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

from ..costs import measured as M
from ..costs.theory import verify_cost
from ..drafters.base import TokenTree
from ..trace.trees import child_outcomes

DEPTH0, DEPTH_MAX = 4, 8   # levels grown in the first round; at most (E[τ] gains little beyond)
WIDTH = 4                  # children per expanded node and nodes expanded per level (head-trees report)
PRIOR = 1.0                # pseudo-count of the calibration (s = 1 before any evidence)
FREE_SOURCES = ("lookup",)  # sources whose levels cost no model call


@dataclass
class ShapeRule:
    """The per-decode state of tree = "auto" (chain: width 1): `grow()` says what to draft,
    `choose(tree)` which candidates to verify, `update(round, tree, committed)` learns."""
    chain: bool
    prior_v: dict                          # {m: v(m)} the machine's pass costs (costs.measure)
    prior_step_s: float                    # its one-token pass, seconds
    depth: int = DEPTH0
    hits: dict = field(default_factory=dict)    # source -> Σ hits
    confs: dict = field(default_factory=dict)   # source -> Σ conf
    sums: M.RoundSums = field(default_factory=M.RoundSums)

    @classmethod
    def for_decode(cls, pair, chain: bool) -> "ShapeRule":
        from ..costs.measure import pass_costs
        costs = pass_costs(pair.target, pair.vocab_size)
        return cls(chain, costs.v_table(), costs.seconds[1])

    def width(self) -> int:
        return 1 if self.chain else WIDTH

    def calibration(self, source: str) -> float:
        return (PRIOR + self.hits.get(source, 0.0)) / (PRIOR + self.confs.get(source, 0.0))

    def costs(self) -> tuple:
        """(step seconds, v slope, c) from this decode's rounds (priors before they exist)."""
        step = M.step_s(self.sums) or self.prior_step_s
        slope = verify_cost(M.v(self.sums, step), self.prior_v, rounds={m: n for m, (_, n) in
                                                                       self.sums.target_by_m.items()}).slope
        return step, slope, M.c(self.sums, step) or 0.0

    def choose(self, tree: TokenTree) -> tuple:
        """Candidates -> (kept node indices, ascending; the decision as data for the trace)."""
        conf = confidences(tree)
        depths, n = tree.depths, len(tree)
        est = []
        for i in range(n):
            a = min(1.0, self.calibration(tree.sources[i]) * conf[i])
            est.append(a * (est[tree.parents[i]] if tree.parents[i] >= 0 else 1.0))
        step, slope, c = self.costs()
        tokens, cost, levels, kept = 1.0, 1.0, {}, []
        # Highest estimate first; a child never beats its parent (a ≤ 1), ties go to the parent.
        for i in sorted(range(n), key=lambda j: (-est[j], j)):
            if tree.parents[i] >= 0 and tree.parents[i] not in kept:
                continue
            free = tree.sources[i] in FREE_SOURCES
            new_level = depths[i] > levels.get(free, 0)
            marginal = slope + (c if new_level and not free else 0.0)
            if est[i] * cost < tokens * marginal:     # a / marginal < E / C: it would slow the round
                break
            kept.append(i)
            tokens, cost = tokens + est[i], cost + marginal
            levels[free] = max(levels.get(free, 0), depths[i])
        kept.sort()
        depth = max((depths[i] for i in kept), default=0)
        decision = {"kind": "shape", "nodes": len(kept), "depth": depth, "grown": self.depth,
                    "expected_tokens": tokens, "cost": cost, "slope": slope, "c": c, "step_s": step,
                    "calibration": {s: self.calibration(s) for s in sorted(set(tree.sources))},
                    "why": describe(len(kept), depth, tokens, cost)}
        self.depth = min(DEPTH_MAX, depth + 1)
        return kept, decision

    def update(self, rnd, tree: TokenTree, path: list, committed: list) -> None:
        """Fold a finished round in: its timings, and hits of every verified child of a reached
        node (committed: the round's tokens before any cut, one per depth along the path)."""
        self.sums = self.sums + M.round_sums([rnd])
        conf = confidences(tree)
        for i, hit in child_outcomes(tree.parents, tree.ids.tolist(), path, committed):
            src = tree.sources[i]
            self.hits[src] = self.hits.get(src, 0.0) + hit
            self.confs[src] = self.confs.get(src, 0.0) + conf[i]


def confidences(tree: TokenTree) -> list:
    """[n] the draft's confidence in each node: its q at temperature 1, or for a sampled chain
    the top of its row (decided before the draw)."""
    if len(tree) == 0:
        return []
    if tree.sampled:
        return tree.q_raw.amax(-1).tolist()
    return tree.q_raw.gather(-1, tree.ids.to(tree.q_raw.device)[:, None]).squeeze(-1).tolist()


def describe(nodes: int, depth: int, tokens: float, cost: float) -> str:
    """The one line the page shows: '12 nodes, depth 4: 2.9 tokens expected for 1.5 steps'."""
    if nodes == 0:
        return "plain step: no guess was likely enough to pay for its place in the pass"
    return (f"{nodes} node{'s' * (nodes != 1)}, depth {depth}: {tokens:.2f} tokens expected "
            f"for {cost:.2f} steps")
