"""tree = "auto": the shape rule (decoding/shape.py) on synthetic trees, and in the decoder.

The rule keeps guesses in order of estimated acceptance while each raises the round's expected
tokens per unit of cost. These tests check that promise itself (against the neighbouring shapes),
the calibration's direction, that it reads the run's own cost measurements, that its rounds
replay, and that its output stays exact."""
import math

import pytest
import torch

from specdec_core import ModelPair, Trace, autoregressive_generate, speculative_generate
from specdec_core.costs import run_costs as M
from specdec_core.costs.theory import verify_cost
from specdec_core.decoding.grow import Grown
from specdec_core.decoding.shape import ShapeRule, confidences, pays, take
from specdec_core.drafters.base import Source, TokenTree
from specdec_core.sampling import SamplingConfig

from .conftest import tiny_llama
from .test_exactness import check_exact

V = 16


def synthetic_tree(parents, conf, sources=None, sampled=False) -> TokenTree:
    """A tree whose node i has draft confidence conf[i] (q at temperature 1 of its token)."""
    n = len(parents)
    ids = torch.arange(n, dtype=torch.long) % V
    q = torch.full((n, V), 0.0)
    for i, c in enumerate(conf):
        q[i] = (1 - c) / (V - 1)
        q[i, ids[i]] = c
    return TokenTree(ids, list(parents), q, q, sources or [Source.MODEL] * n, sampled)


def rule_with(slope, c, **kw) -> ShapeRule:
    """A rule whose cost model is v(n) = 1 + slope·n and c per level (priors only: no rounds yet)."""
    rule = ShapeRule(chain=False, prior_v={m: 1 + slope * m for m in range(1, 9)}, prior_step_s=0.02, **kw)
    rule.sums = M.RoundSums(draft_s=c * 0.02 * 10, draft_steps=10)      # c measured over 10 levels
    return rule


def rate(kept, est, slope, c, grown):
    """Expected tokens ÷ cost of verifying `kept` after drafting `grown` levels:
    (1 + Σ a) / (1 + c·grown + slope·n)."""
    return (1 + sum(est[i] for i in kept)) / (1 + c * grown + slope * len(kept))


PARENTS = [-1, 0, 1, 2, 0, -1, 5, 1, 3]
CONF = [0.9, 0.8, 0.6, 0.5, 0.3, 0.2, 0.5, 0.1, 0.4]


@pytest.mark.parametrize("slope,c", [(0.02, 0.05), (0.1, 0.1), (0.3, 0.2), (0.01, 0.0)])
def test_the_kept_tree_beats_its_neighbours(slope, c):
    """The kept nodes are a tree (each parent kept); removing the last kept guess or adding the
    next one never raises the expected tokens per unit cost."""
    tree = synthetic_tree(PARENTS, CONF)
    grown = max(tree.depths)
    kept, decision = rule_with(slope, c).choose(tree, grown)
    assert kept == sorted(kept) and all(tree.parents[i] in kept or tree.parents[i] == -1 for i in kept)
    est = {}
    for i, p in enumerate(tree.parents):
        est[i] = CONF[i] * (est[p] if p >= 0 else 1.0)
    order = sorted(range(len(CONF)), key=lambda i: (-est[i], i))
    best = rate(kept, est, slope, c, grown)
    assert decision["expected_tokens"] == pytest.approx(1 + sum(est[i] for i in kept))
    assert decision["cost"] == pytest.approx(1 + c * grown + slope * len(kept))
    if kept:   # without the last guess taken: no better
        assert rate([i for i in kept if i != order[len(kept) - 1]], est, slope, c, grown) <= best + 1e-12
    if len(kept) < len(order):   # with the next one: no better
        assert rate(kept + [order[len(kept)]], est, slope, c, grown) <= best + 1e-12


def test_cheap_passes_keep_every_guess_dear_ones_none():
    tree = synthetic_tree(PARENTS, CONF)
    assert len(rule_with(0.0, 0.1).choose(tree, 4)[0]) == len(CONF)
    kept, decision = rule_with(5.0, 0.1).choose(tree, 4)
    assert kept == [] and decision["nodes"] == 0 and "plain step" in decision["why"]


def test_a_level_is_drafted_only_when_its_best_guess_can_pay():
    """plan(): no level at all (a plain step) while the first guess's hit rate is below the cost of a
    level (slope + c); faded evidence returns to the prior, so drafting resumes. more(): the
    growth stops when the best guess the next level can hold would not pay for slope + c."""
    rule = rule_with(0.05, 0.1)
    assert rule.plan().depth > 0                                   # prior: half of first guesses hit
    rule.first[:] = [0.0, 40.0]                                    # 40 misses in a row
    assert rule.plan().depth == 0
    tree = synthetic_tree([], [])
    for _ in range(200):                                           # plain rounds: evidence fades
        rule.update(_round(), tree, [], [1])
    assert rule.plan().depth > 0
    rule = rule_with(0.05, 0.1)
    level = lambda p: Grown(1, 1, Source.MODEL, sampled=False, costed=True, scores=[math.log(p)])
    assert rule.more(level(0.9))                                   # a 0.9 guess: a deeper level pays
    assert not rule.more(level(0.05))                              # a 0.05 one: it would not


def test_a_dear_first_measurement_is_measured_again():
    """A draft cost that says never draft (c = 0.9: a cold first round) keeps the rule at plain
    steps for HALF_LIFE rounds, then it drafts once to measure again."""
    from specdec_core.decoding.shape import HALF_LIFE
    rule = rule_with(0.05, 0.9)
    tree = synthetic_tree([], [])
    for _ in range(HALF_LIFE):
        assert rule.plan().depth == 0
        rule.update(_round(), tree, [], [1])
    assert rule.plan().depth > 0


def test_calibration_follows_what_was_committed():
    """A source whose guesses are always what the target committed is trusted more (s > 1); one
    whose guesses never are falls below its prior, until its nodes are not kept."""
    rule = rule_with(0.05, 0.05)
    tree = synthetic_tree([-1, 0, -1], [0.5, 0.5, 0.5], [Source.LOOKUP, Source.LOOKUP, Source.MODEL])
    ids = tree.ids.tolist()
    for _ in range(10):   # the target committed lookup's two tokens (path 0 -> 1), never model's
        rule.update(_round(), tree, [0, 1], [ids[0], ids[1], 99])
    assert rule.calibration(Source.LOOKUP) > 1.5 and rule.calibration(Source.MODEL) < 0.2
    assert rule.first_rate() < 0.2                                 # the model's first guesses missed
    kept, decision = rule.choose(tree, 2)
    assert kept == [0, 1] and decision["calibration"]["model"] < 0.2


def test_a_drafter_used_alone_stops_its_chain_by_its_own_calibration(monkeypatch):
    """k = "auto" with a drafter used alone (a draft model): the chain's early stop reads the
    acceptance measured for its source's guesses — the calibration its own decision records — and
    cuts the chain after the first row whose calibrated top probability cannot pay for slope + c.
    (Fails where a lone drafter's guesses were tagged with its name while the stop looked the
    calibration up under "model" or "head": it read the prior, s = 1, whatever was measured.)
    Costs are fixed (slope 0.05, c 0.1) so the decisions depend on the models alone."""
    monkeypatch.setattr(ShapeRule, "costs", lambda self: (0.02, 0.05, 0.1))
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1, init=0.3))
    trace = speculative_generate(pair, [1, 5, 2, 7], "auto", tree=None, max_new_tokens=48)
    measured = cut = 0
    for r in trace.rounds:
        if not r.drafted:
            continue
        policy = r.k_policy
        (s,) = policy["calibration"].values()
        level = policy["slope"] + policy["c"]
        measured += abs(s - 1.0) > 0.05
        assert policy["stop_below"] * s == pytest.approx(level)
        if len(r.drafted) == r.levels:                  # nothing pruned: every drafted row is here
            pays_next = [s * t.q_top_raw[0][2] >= level for t in r.drafted]
            assert all(pays_next[:-1])                  # each row but the last paid for the next level
            if r.levels < r.plan.depth:
                assert not pays_next[-1]                # stopped short: the last one did not
                cut += 1
    assert measured >= 3 and cut >= 1                   # the calibration moved off its prior, and cut


def test_growth_reads_each_sources_own_record():
    """more(): a sampled chain grows while s·top pays for slope + c, s its source's calibration; a
    copy's level (no draft call) always grows, its guesses left to the pruning."""
    rule = rule_with(0.05, 0.1)
    row = lambda source, top: Grown(1, 1, source, sampled=True, costed=not source.free, scores=[0.0], top=top)
    assert rule.more(row(Source.MODEL, 0.2))             # s = 1: 0.2 ≥ 0.15
    rule.hits[Source.MODEL], rule.confs[Source.MODEL] = 1.0, 9.0      # its guesses hit 1 in 5 of what q said
    assert not rule.more(row(Source.MODEL, 0.2))         # s = 0.2: 0.04 < 0.15
    assert rule.more(row(Source.LOOKUP, 1.0))
    assert pays(0.5, 0.1) and not pays(0.05, 0.1) and take([0.9, 0.5, 0.01], 1.0, 1.2, 0.1)[0] == 2


def _round():
    from specdec_core.trace.schema import Correction, Round
    return Round(0, 0.0, 0.02, 0.0, 0.02, 0.0, 0, [], 0, Correction("bonus", 1, "x"), [1])


def test_a_sampled_chain_is_judged_before_its_draws():
    """A sampled chain's confidence is the top of each row (known before the draw): cutting it by
    the drawn token's own q would bias the output."""
    tree = synthetic_tree([-1, 0], [0.9, 0.9], sampled=True)
    tree.ids = torch.tensor([3, 4])             # drawn tokens of low q
    assert confidences(tree) == pytest.approx([0.9, 0.9])


def test_the_rule_reads_the_runs_own_costs(default_pair, fake_clock):
    """Each round's recorded slope and c are costs.run_costs's v(m) and c over the rounds before it
    (the page's definitions), fitted by costs.theory.verify_cost; its inputs are in the trace."""
    ids = default_pair.encode_prompt("List the days of the week, then list them again in the same order.")
    trace = speculative_generate(default_pair, ids, max_new_tokens=24)
    rule = ShapeRule.for_decode(default_pair, chain=False)
    for r in trace.rounds:
        sums = M.round_sums(trace.rounds[:r.index])
        step = M.step_s(sums) or rule.prior_step_s
        rounds = {m: n for m, (_, n) in sums.target_by_m.items()}
        assert r.k_policy["slope"] == pytest.approx(verify_cost(M.v(sums, step), rule.prior_v, rounds=rounds).slope)
        assert r.k_policy["c"] == pytest.approx(M.c(sums, step) or 0.0)
        assert {"expected_tokens", "cost", "calibration", "nodes", "depth", "grown"} <= set(r.k_policy)
        assert r.k_reason == r.k_policy["why"]


def test_auto_rounds_replay_and_chains_stay_chains():
    """Sampling, tree = "auto": the recorded plans (Round.plan) replayed with the same seed give the
    same tokens; k = "auto" with tree = None never branches."""
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    run = speculative_generate(pair, [1, 5, 2], temperature=0.9, max_new_tokens=16, seed=4)
    assert all(r.plan is not None for r in run.rounds)
    back = Trace.from_json(run.to_json())
    replay = speculative_generate(pair, [1, 5, 2], 1, k_schedule=back.k_schedule(), temperature=0.9,
                                  max_new_tokens=16, seed=4)
    assert replay.output_ids == run.output_ids
    assert [r.n_verified for r in replay.rounds] == [r.n_verified for r in run.rounds]
    chain = speculative_generate(pair, [1, 5, 2], "auto", tree=None, temperature=0.9, max_new_tokens=16, seed=4)
    assert chain.config.tree is None and all(r.tree is None for r in chain.rounds)
    assert greedy_equal(pair)


def greedy_equal(pair) -> bool:
    plain = autoregressive_generate(pair, [3, 1], max_new_tokens=20)
    return all(speculative_generate(pair, [3, 1], max_new_tokens=20, **kw).output_ids == plain.output_ids
               for kw in (dict(), dict(k="auto", tree=None)))


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_auto_sampling_matches_the_target(temperature, top_p):
    """Whatever shapes the rule picks (and its picks depend on the clock), the first two tokens
    follow the target's joint distribution."""
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    assert check_exact(pair, None, SamplingConfig(temperature, 0, top_p), 3) > 1e-3
