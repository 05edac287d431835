"""tree = "auto": one shape rule decides each round's draft tree (k = "auto" is its width-1 case).

Everything is in units of one target step, from this run's own measurements:
  v(n)   the target pass over n + 1 tokens, 1 + slope·n: costs.theory.verify_cost on this decode's
         measured v(m) (costs.run_costs, the page's definitions), else the machine's pass costs;
  c      one draft level (costs.run_costs.c); a prompt-lookup branch costs no level;
  a(x)   a guess's estimated acceptance: the product along its path of min(1, s · conf), conf the
         draft's confidence in the node (its q at temperature 1; for a sampled chain the top of its
         row, known before the draw: a cut that looked at the drawn token would bias the output),
         s its source's calibration, (PRIOR + hits) / (PRIOR + Σ conf) over verified guesses whose
         parent was reached (trace.trees: a hit is the token the round committed there).
The rule adds the guess with the highest a while a ÷ (its marginal cost) ≥ E ÷ C — it raises the
round's expected tokens E = 1 + Σ a per unit of its cost C — and stops at the first that would not:
  - a new draft level is added while the best guess it can hold (the best of the level before
    times the measured rate at which a first child hits) pays for slope + c; so the head grows the
    tree level by level (one head call each) and stops there; no level at all is a plain step;
  - of the guesses drafted, each is kept while a ÷ slope ≥ E ÷ C, C counting the levels drafted;
  - a chain (width 1) is drafted at most one level deeper than the last round kept (a block
    drafter, whose one call fills any depth: DEPTH_MAX), and only while its last row's calibrated
    top probability pays for a level (the drafter's early stop), then cut the same way.
Evidence fades (half-life HALF_LIFE rounds), so the rule follows the text and a run that fell back
to plain steps tries drafting again once its old evidence has faded; after HALF_LIFE plain steps in
a row it drafts one round regardless, so costs measured once (a cold first round) are measured again. Each round records its inputs
and the candidates it kept, so a replay reproduces it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ..costs import run_costs as M
from ..costs.theory import verify_cost
from ..drafters.base import TokenTree
from ..trace.trees import child_outcomes
from .tree import Shape

DEPTH_MAX = 8              # levels at most (E[τ] gains little beyond at any measured acceptance)
WIDTH = 4                  # children per expanded node, nodes expanded per level (head-trees report)
PRIOR = 1.0                # pseudo-count of the calibration s (prior 1: the draft's confidence as it is)
FIRST_PRIOR = 4.0          # pseudo-tries of the first-child hit rates (prior: half of them hit)
HALF_LIFE = 16             # rounds after which a piece of evidence counts half
FREE_SOURCES = ("lookup",)  # sources whose levels cost no model call


@dataclass
class ShapeRule:
    """The per-decode state of tree = "auto" (chain: width 1): `plan()` before a round, the growth
    callback `until` while the drafter grows, `choose(tree)` which guesses to verify,
    `update(...)` after the round."""
    chain: bool
    prior_v: dict                          # {m: v(m)} the machine's pass costs (costs.machine_costs)
    prior_step_s: float                    # its one-token pass, seconds
    hits: dict = field(default_factory=dict)    # source -> faded Σ hits
    confs: dict = field(default_factory=dict)   # source -> faded Σ conf
    first: list = field(default_factory=lambda: [0.0, 0.0])    # faded [hits, tries] of first children at the root
    follow: list = field(default_factory=lambda: [0.0, 0.0])   # ... of first children of a reached guess
    stop_below: Optional[float] = None     # a chain's early stop this round (drafters' stop_below)
    one_pass: bool = False                 # the drafter fills any depth in one call (a block drafter)
    kept_depth: int = 0                    # a chain: how deep the last round kept
    plain_run: int = 0                     # plain steps in a row since the last round that drafted
    sums: M.RoundSums = field(default_factory=M.RoundSums)
    _grown: int = 0                        # levels grown this round (the growth callback's count)
    _values: list = field(default_factory=list)

    @classmethod
    def for_decode(cls, pair, chain: bool, one_pass: bool = False) -> "ShapeRule":
        from ..costs.machine_costs import pass_costs
        costs = pass_costs(pair.target, pair.vocab_size)
        return cls(chain, costs.v_table(), costs.seconds[1], one_pass=one_pass)

    # -- estimates ---------------------------------------------------------------------------
    def calibration(self, source: str) -> float:
        return (PRIOR + self.hits.get(source, 0.0)) / (PRIOR + self.confs.get(source, 0.0))

    def first_rate(self) -> float:
        return (0.5 * FIRST_PRIOR + self.first[0]) / (FIRST_PRIOR + self.first[1])

    def follow_rate(self) -> float:
        return (0.5 * FIRST_PRIOR + self.follow[0]) / (FIRST_PRIOR + self.follow[1])

    def costs(self) -> tuple:
        """(step seconds, v slope, c) from this decode's rounds (priors before they exist)."""
        step = M.step_s(self.sums) or self.prior_step_s
        rounds = {m: n for m, (_, n) in self.sums.target_by_m.items()}
        slope = verify_cost(M.v(self.sums, step), self.prior_v, rounds=rounds).slope
        return step, slope, M.c(self.sums, step) or 0.0

    # -- the rule ----------------------------------------------------------------------------
    def plan(self) -> Shape:
        """What the drafter grows this round: nothing (a plain step) unless a first guess is
        expected to pay for its level; a tree grown level by level under `until` (cap DEPTH_MAX);
        a chain one level deeper than the last round kept, drafted under `stop_below`."""
        _, slope, c = self.costs()
        self._grown, self._values = 0, []
        # E ÷ C = 1 before any guess. After HALF_LIFE plain steps in a row the rule drafts once
        # anyway: a cost measured once (a cold first round) would otherwise never be re-measured.
        if self.first_rate() < slope + c and self.plain_run < HALF_LIFE:
            return Shape(0, 0)
        if self.chain:
            # A chain grows while its next guess can pay for a level: the drafter stops after a
            # row whose top probability, calibrated, is below slope + c (decided before the draw).
            self.stop_below = (slope + c) / self.calibration("model" if "model" in self.hits else "head")
            # A block drafter's depth costs nothing more: it drafts all it can, cut the same way.
            return Shape(None, DEPTH_MAX if self.one_pass else min(DEPTH_MAX, self.kept_depth + 1))
        return Shape(None, DEPTH_MAX, WIDTH, WIDTH)

    def until(self, scores: list, depth: int) -> bool:
        """The growth callback (drafters.head_tree.grow_tree): the candidates of level `depth`
        were just made (scores: their log path probabilities at the round's temperature). True
        stops growing: the best guess the next level can hold would not pay for slope + c."""
        _, slope, c = self.costs()
        s = self.calibration("model") if "model" in self.hits else self.calibration("head")
        level = [min(1.0, (s ** depth) * math.exp(x)) for x in scores]
        self._grown, self._values = depth, self._values + level
        tokens, cost = _select(sorted(self._values, reverse=True), 1.0 + c * depth, slope)
        return depth >= DEPTH_MAX or max(level) * self.follow_rate() * cost < tokens * (slope + c)

    def choose(self, tree: TokenTree, grown: int) -> tuple:
        """Candidates (drafted `grown` levels deep) -> (kept node indices, ascending; the
        decision as data for the trace)."""
        conf = confidences(tree)
        depths, n = tree.depths, len(tree)
        est = []
        for i in range(n):
            a = min(1.0, self.calibration(tree.sources[i]) * conf[i])
            est.append(a * (est[tree.parents[i]] if tree.parents[i] >= 0 else 1.0))
        step, slope, c = self.costs()
        model_levels = max((depths[i] for i in range(n) if tree.sources[i] not in FREE_SOURCES), default=0)
        tokens, cost, kept = 1.0, 1.0 + c * min(grown, model_levels or grown), []
        # Highest estimate first; a child never beats its parent (a ≤ 1), ties go to the parent.
        for i in sorted(range(n), key=lambda j: (-est[j], j)):
            if est[i] * cost < tokens * slope:          # a ÷ slope < E ÷ C: it would slow the round
                break
            if tree.parents[i] < 0 or tree.parents[i] in kept:
                kept.append(i)
                tokens, cost = tokens + est[i], cost + slope
        kept.sort()
        depth = max((depths[i] for i in kept), default=0)
        decision = {"kind": "shape", "nodes": len(kept), "depth": depth, "grown": grown,
                    "expected_tokens": tokens, "cost": cost, "slope": slope, "c": c, "step_s": step,
                    "calibration": {s: self.calibration(s) for s in sorted(set(tree.sources))},
                    "first_rate": self.first_rate(), "follow_rate": self.follow_rate(),
                    **({"stop_below": self.stop_below} if self.chain else {}),
                    "why": describe(len(kept), depth, tokens, cost)}
        return kept, decision

    def update(self, rnd, tree: TokenTree, path: list, committed: list) -> None:
        """Fold a finished round in: its timings, and the outcome of every verified guess whose
        parent was reached (committed: the round's tokens before any cut, one per depth)."""
        self.sums = self.sums + M.round_sums([rnd])
        self.kept_depth = rnd.tree_depth
        self.plain_run = 0 if rnd.levels else self.plain_run + 1
        fade = 0.5 ** (1 / HALF_LIFE)
        for table in (self.hits, self.confs):
            for key in table:
                table[key] *= fade
        self.first[:] = [x * fade for x in self.first]
        self.follow[:] = [x * fade for x in self.follow]
        conf = confidences(tree)
        seen = set()
        for i, hit in child_outcomes(tree.parents, tree.ids.tolist(), path, committed):
            src, parent = tree.sources[i], tree.parents[i]
            self.hits[src] = self.hits.get(src, 0.0) + hit
            self.confs[src] = self.confs.get(src, 0.0) + conf[i]
            if parent not in seen and src not in FREE_SOURCES:   # the parent's first model guess
                seen.add(parent)
                rate = self.first if parent < 0 else self.follow
                rate[0] += hit
                rate[1] += 1


def _select(values: list, cost: float, slope: float) -> tuple:
    """(E, C) after taking `values` (descending) while a ÷ slope ≥ E ÷ C, from E = 1 and C = cost."""
    tokens = 1.0
    for a in values:
        if a * cost < tokens * slope:
            break
        tokens, cost = tokens + a, cost + slope
    return tokens, cost


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
