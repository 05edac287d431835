"""tree = "auto": one shape rule decides each round's draft tree (k = "auto" is its width-1 case).

Everything is in units of one target step, from this run's own measurements:
  v(n)   the target pass over n + 1 tokens, 1 + slope·n: costs.theory.verify_cost on this decode's
         measured v(m) (costs.run_costs, the page's definitions), else the machine's pass costs;
  c      one draft call (costs.run_costs.c); a prompt-lookup level needs none;
  a(x)   a guess's estimated acceptance: the product along its path of min(1, s · conf), conf the
         draft's confidence in the node (its q at temperature 1; for a sampled chain the top of its
         row, known before the draw: a cut that looked at the drawn token would bias the output),
         s its source's calibration, (PRIOR + hits) / (PRIOR + Σ conf) over verified guesses whose
         parent was reached (trace.trees: a hit is the token the round committed there).
One test decides growing and pruning alike (`pays`): a guess is added while it raises the round's
expected tokens E = 1 + Σ a per unit of its cost C — a ÷ (its marginal cost) ≥ E ÷ C — and the
rule stops at the first that would not (`take`):
  - plan: no level at all (a plain step) unless a first guess, at the measured rate first guesses
    hit, pays for slope + c;
  - growth (`more`, asked by decoding/grow.py after each level): a tree grows another level while
    the best guess it can hold (the best of the level before times the rate at which a reached
    guess's first child hits) pays for slope + c against what would be kept so far; a sampled
    chain while its last row's calibrated top probability pays for slope + c as a first guess
    would (the chain's early stop); a level that needs no draft call (a copy, a block's later
    slots) is drafted, its guesses left to the pruning;
  - pruning (`choose`): of the guesses drafted, best first, each is kept while a ÷ slope ≥ E ÷ C,
    C counting the levels drafted.
A chain is drafted at most one level deeper than the last round kept (a drafter whose one call
fills every level: DEPTH_MAX). Evidence fades (half-life HALF_LIFE rounds), so the rule follows the
text and a run that fell back to plain steps tries drafting again once its old evidence has faded;
after HALF_LIFE plain steps in a row it drafts one round regardless, so costs measured once (a cold
first round) are measured again. Calibration and hit rates are kept per Source (drafters.base).
Each round records its inputs and the candidates it kept, so a replay reproduces it (`Replay`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..costs import run_costs as M
from ..costs.theory import verify_cost
from ..drafters.base import Source, TokenTree
from ..trace.trees import child_outcomes
from .tree import Shape

# Levels at most: depths 4, 5 and 6 hold the same tokens per pass at every node budget
# (docs/bench/smollm2-135m-head-trees: 1.86 at 12 nodes, 1.94 at 16, greedy), so a level past 8
# does not pay; 8 is also the shipped block drafter's slots.
DEPTH_MAX = 8
# Children per expanded node and nodes expanded per level (head-trees report): width 4 holds
# 1.76 tokens per pass against 1.73 at width 3 (siblings, depth 4, greedy), and a level of 4
# expanded nodes costs 2.94 ms against 2.51 for one (8: 3.49).
WIDTH = 4
# Pseudo-count of the calibration s: one pseudo-guess, so s starts at 1 (the draft's confidence as
# it is) and the run's own record outweighs it within a round. Not tuned by a measurement.
PRIOR = 1.0
# Pseudo-tries of the first-child hit rates, half of them hits: a prior of 0.5 (about the first-
# guess acceptance measured for the shipped head, 0.36-0.47) worth a round or two of evidence.
# Not tuned by a measurement.
FIRST_PRIOR = 4.0
# Rounds after which evidence counts half, and plain steps in a row after which one round drafts
# anyway: a cold first call (the block drafter's from the CLI measured c = 0.47) kept runs at plain
# steps before the re-measuring round. 16 is not tuned by a measurement.
HALF_LIFE = 16


def pays(a: float, extra: float, tokens: float = 1.0, cost: float = 1.0) -> bool:
    """The rule's one test: does a guess of estimated acceptance `a` that adds `extra` to the
    round's cost raise its expected tokens per unit cost? (E + a) ÷ (C + extra) ≥ E ÷ C, i.e.
    a·C ≥ E·extra (E = tokens, C = cost; before any guess 1 and 1)."""
    return a * cost >= tokens * extra


def take(values: list, tokens: float, cost: float, extra: float) -> tuple:
    """Add `values` (best first), each adding `extra`, while each pays; stop at the first that
    does not. -> (how many were added, E, C)."""
    n = 0
    for a in values:
        if not pays(a, extra, tokens, cost):
            break
        n, tokens, cost = n + 1, tokens + a, cost + extra
    return n, tokens, cost


@dataclass
class ShapeRule:
    """The per-decode state of tree = "auto" (chain: width 1): `plan()` before a round, `more()`
    while it grows, `choose(tree)` which guesses to verify, `update(...)` after the round."""
    chain: bool
    prior_v: dict                          # {m: v(m)} the machine's pass costs (costs.machine_costs)
    prior_step_s: float                    # its one-token pass, seconds
    hits: dict = field(default_factory=dict)    # Source -> faded Σ hits
    confs: dict = field(default_factory=dict)   # Source -> faded Σ conf
    first: list = field(default_factory=lambda: [0.0, 0.0])    # faded [hits, tries] of first children at the root
    follow: list = field(default_factory=lambda: [0.0, 0.0])   # ... of first children of a reached guess
    slots: Optional[int] = None            # the drafter's: one call fills every level (drafters.base)
    stop_below: Optional[float] = None     # a chain's round: the top probability its growth needs (recorded)
    kept_depth: int = 0                    # a chain: how deep the last round kept
    plain_run: int = 0                     # plain steps in a row since the last round that drafted
    sums: M.RoundSums = field(default_factory=M.RoundSums)
    _values: list = field(default_factory=list)   # this round's tree guesses so far (calibrated)

    @classmethod
    def for_decode(cls, pair, chain: bool, slots: Optional[int] = None) -> "ShapeRule":
        from ..costs.machine_costs import pass_costs
        costs = pass_costs(pair.target, pair.vocab_size)
        return cls(chain, costs.v_table(), costs.seconds[1], slots=slots)

    # -- estimates ---------------------------------------------------------------------------
    def calibration(self, source: Source) -> float:
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
        """What this round may grow: nothing (a plain step) unless a first guess pays for its
        level; a tree of up to DEPTH_MAX levels; a chain one level deeper than the last round kept."""
        _, slope, c = self.costs()
        self._values = []
        # After HALF_LIFE plain steps in a row the rule drafts once anyway: a cost measured once
        # (a cold first round) would otherwise never be re-measured.
        if not pays(self.first_rate(), slope + c) and self.plain_run < HALF_LIFE:
            return Shape(0, 0)
        if self.chain:
            self.stop_below = (slope + c) / self.calibration(Source.MODEL)
            # One call fills any depth (a block drafter): it drafts all it can, cut the same way.
            return Shape(None, DEPTH_MAX if self.slots else min(DEPTH_MAX, self.kept_depth + 1))
        return Shape(None, DEPTH_MAX, WIDTH, WIDTH)

    def more(self, grown) -> bool:
        """After a level (decoding.grow.Grown): is the next one worth drafting?"""
        if grown.source.free or not (grown.sampled or grown.costed):
            return True              # no draft call to pay for: its guesses are left to choose()
        _, slope, c = self.costs()
        s = self.calibration(grown.source)
        if grown.sampled:            # the next draw pays for a level as a first guess would (read before it)
            return pays(s * float(grown.top), slope + c)
        # The best guess the next level can hold: this level's best, times the follow rate; it must
        # raise E ÷ C of what would be kept so far (the levels drafted counted in C).
        scores = grown.scores.tolist() if torch.is_tensor(grown.scores) else list(grown.scores)
        level = [min(1.0, (s ** grown.depth) * math.exp(x)) for x in scores]
        self._values += level
        _, tokens, cost = take(sorted(self._values, reverse=True), 1.0, 1.0 + c * grown.depth, slope)
        return grown.depth < DEPTH_MAX and pays(max(level) * self.follow_rate(), slope + c, tokens, cost)

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
        model_levels = max((depths[i] for i in range(n) if not Source(tree.sources[i]).free), default=0)
        # Highest estimate first; a child never beats its parent (a ≤ 1) and ties go to the parent,
        # so what is taken is a tree.
        order = sorted(range(n), key=lambda j: (-est[j], j))
        # C counts the model calls made (`grown`: a copy or a recall costs none), at most one per model level kept.
        n_kept, tokens, cost = take([est[i] for i in order], 1.0, 1.0 + c * min(grown, model_levels or grown), slope)
        kept = sorted(order[:n_kept])
        depth = max((depths[i] for i in kept), default=0)
        decision = {"kind": "shape", "nodes": len(kept), "depth": depth, "grown": grown,
                    "expected_tokens": tokens, "cost": cost, "slope": slope, "c": c, "step_s": step,
                    "calibration": {Source(s).value: self.calibration(s) for s in sorted(set(tree.sources))},
                    "first_rate": self.first_rate(), "follow_rate": self.follow_rate(),
                    **({"stop_below": self.stop_below} if self.chain else {}),
                    "why": describe(len(kept), depth, tokens, cost)}
        return kept, decision

    def update(self, rnd, tree: TokenTree, path: list, committed: list) -> None:
        """Fold a finished round in: its timings, and the outcome of every verified guess whose
        parent was reached (committed: the round's tokens before any cut, one per depth)."""
        self.sums = self.sums + M.round_sums([rnd])
        self.kept_depth = rnd.tree_depth
        self.plain_run = 0 if rnd.levels or rnd.n_verified else self.plain_run + 1
        fade = 0.5 ** (1 / HALF_LIFE)
        for table in (self.hits, self.confs):
            for key in table:
                table[key] *= fade
        self.first[:] = [x * fade for x in self.first]
        self.follow[:] = [x * fade for x in self.follow]
        conf = confidences(tree)
        seen = set()
        for i, hit in child_outcomes(tree.parents, tree.ids.tolist(), path, committed):
            src, parent = Source(tree.sources[i]), tree.parents[i]
            self.hits[src] = self.hits.get(src, 0.0) + hit
            self.confs[src] = self.confs.get(src, 0.0) + conf[i]
            if parent not in seen and not src.free:   # the parent's first model guess
                seen.add(parent)
                rate = self.first if parent < 0 else self.follow
                rate[0] += hit
                rate[1] += 1


@dataclass(frozen=True)
class Replay:
    """A recorded round (k_schedule), a decider like the rule: it grows as many draft calls as the
    round made (Round.plan's levels; None: every level its depth allows) and keeps what it kept."""
    levels: Optional[int]
    keep: Optional[tuple] = None

    def more(self, grown) -> bool:
        return self.levels is None or not grown.costed or grown.calls < self.levels

    def choose(self, tree: TokenTree, grown: int) -> tuple:
        """(the recorded pick, no decision): the nodes the round verified."""
        return self.keep, None

    def update(self, rnd, tree: TokenTree, path: list, committed: list) -> None:
        """A replay learns nothing."""


def confidences(tree: TokenTree) -> list:
    """[n] the draft's confidence in each node: its q at temperature 1, or for a sampled chain
    the top of its row (decided before the draw)."""
    if len(tree) == 0:
        return []
    if tree.sampled:
        return tree.q_raw_rows.amax(-1).tolist()
    return tree.node_q(raw=True).tolist()


def describe(nodes: int, depth: int, tokens: float, cost: float) -> str:
    """The one line the page shows: '12 nodes, depth 4: 2.9 tokens expected for 1.5 steps'."""
    if nodes == 0:
        return "plain step: no guess was likely enough to pay for its place in the pass"
    return (f"{nodes} node{'s' * (nodes != 1)}, depth {depth}: {tokens:.2f} tokens expected "
            f"for {cost:.2f} steps")
