"""Interleaved lanes (decoding.interleave, issue 35): the lanes take turns a round at a time, each
lane's output is what it would be alone, each lane's clock counts only its own work, Stop ends
every lane, the trace says it was interleaved, and the unstable-timings rule judges the paired
comparison of interleaved lanes rather than the machine."""
import json
import re
import time
from dataclasses import replace
from functools import partial

import pytest
import torch

from specdec_core import (ModelPair, Trace, autoregressive_generate, interleave, speculative_generate,
                          stream_autoregressive, stream_speculative)
from specdec_core.costs import run_costs
from specdec_core.drafters.base import Drafter, Level
from specdec_core.registry import REGISTRY
from specdec_core.trace.compare import timings_unstable

from tests.conftest import tiny_llama
from tests.test_honest import STEP, plain_of, trace_of


def tiny_pair():
    return ModelPair.from_models(tiny_llama(vocab_size=16, seed=0), tiny_llama(vocab_size=16, seed=1))


PROMPT = [1, 2, 3]
SHAPES = [dict(k=3, tree=None), dict(tree=(6, 3))]
SAMPLERS = [dict(temperature=0.0), dict(temperature=1.0, seed=7), dict(temperature=0.7, top_p=0.9, seed=3)]


def lanes_of(pair, shape, sampler, n=20):
    return {"speculative": partial(stream_speculative, pair, PROMPT, **shape, **sampler, max_new_tokens=n),
            "plain": partial(stream_autoregressive, pair, PROMPT, **sampler, max_new_tokens=n)}


@pytest.mark.parametrize("shape", SHAPES, ids=["chain-k3", "tree-6-3"])
@pytest.mark.parametrize("sampler", SAMPLERS, ids=["greedy", "T1", "T0.7-top-p"])
def test_each_interleaved_lane_decodes_what_it_decodes_alone(shape, sampler):
    """Same seeds, a fixed shape: the interleaved lanes' tokens, drafts, u draws and decisions equal
    those of each lane run alone (each lane has its own RNG, caches and drafter)."""
    pair = tiny_pair()
    alone_spec = speculative_generate(pair, PROMPT, **shape, **sampler, max_new_tokens=20)
    alone_plain = autoregressive_generate(pair, PROMPT, **sampler, max_new_tokens=20)
    done = dict(interleave(lanes_of(pair, shape, sampler)))
    assert done["speculative"].output_ids == alone_spec.output_ids
    assert done["plain"].output_ids == alone_plain.output_ids
    drafts = lambda t: [[(d.id, d.u, d.accepted) for d in r.drafted] for r in t.rounds]
    assert drafts(done["speculative"]) == drafts(alone_spec)
    assert done["speculative"].finished and done["plain"].finished


def test_the_lane_behind_in_tokens_moves_and_ties_alternate():
    """Turn by turn: only a lane with no more tokens than the other moves; at equal counts the lane
    that moved less recently goes (the mapping's first lane at the start)."""
    pair = tiny_pair()
    seen, finished, order = {"speculative": 0, "plain": 0}, set(), []
    other = {"speculative": "plain", "plain": "speculative"}
    for name, trace in interleave(lanes_of(pair, dict(k=3, tree=None), dict(temperature=0.0), n=16)):
        if other[name] not in finished:
            assert seen[name] <= seen[other[name]]
            if seen[name] == seen[other[name]] and order:
                assert order[-1] != name
        seen[name] = len(trace.output_ids)
        order.append(name)
        if trace.finished:
            finished.add(name)
    assert order[:2] == ["speculative", "plain"]
    assert seen == {"speculative": 16, "plain": 16} and order.count("plain") == 16


def test_a_lane_that_waits_is_not_charged_for_the_other_lanes_work():
    """A draft that sleeps 200 ms per proposal makes the speculative lane's rounds slow; the plain
    lane beside it keeps its own clock: its wall time stays that of its own steps (far under the
    other lane's sleeps), and the sleeping lane's own clock includes every sleep."""
    pair = tiny_pair()
    sleeps = []

    class Sleepy(Drafter):
        name = "sleepy"

        def draft(self, committed, frontier, width, depth, cfg, generator):
            if frontier is None:                   # a round's first level
                time.sleep(0.2)
                sleeps.append(0.2)
            one = torch.ones(1, dtype=torch.long)
            return Level(one, one - 1, torch.zeros(1), torch.zeros(1, 16), torch.full((1, 16), 1 / 16), sampled=True)

    pair_sleepy = ModelPair.from_models(pair.target, lambda p: Sleepy(16, p.input_device))
    lanes = {"speculative": partial(stream_speculative, pair_sleepy, PROMPT, k=2, tree=None, max_new_tokens=12),
             "plain": partial(stream_autoregressive, pair, PROMPT, max_new_tokens=12)}
    done = dict(interleave(lanes))
    slept = sum(sleeps)
    assert slept >= 0.8
    assert done["speculative"].stats["wall_s"] >= slept
    assert done["plain"].stats["wall_s"] < 0.5 * slept


def test_each_lane_has_the_clock_it_has_alone(fake_clock):
    """The fake clock ticks 10 ms per reading, whoever reads it: a lane's rounds read the same
    timestamps interleaved as alone, so its clock never counts the other lane's readings."""
    pair = tiny_pair()
    alone = speculative_generate(pair, PROMPT, tree="auto", max_new_tokens=16)
    alone_plain = autoregressive_generate(pair, PROMPT, max_new_tokens=16)
    done = dict(interleave({"plain": partial(stream_autoregressive, pair, PROMPT, max_new_tokens=16),
                            "speculative": partial(stream_speculative, pair, PROMPT, tree="auto", max_new_tokens=16)}))
    clocks = lambda t: [(round(r.t_start, 6), round(r.t_end, 6), round(r.draft_s, 6)) for r in t.rounds]
    assert clocks(done["speculative"]) == clocks(alone) and clocks(done["plain"]) == clocks(alone_plain)
    assert done["speculative"].stats["tokens_per_s"] == pytest.approx(alone.stats["tokens_per_s"])


def test_stop_ends_every_lane_after_its_current_round():
    """should_stop() says yes after 5 turns: no more rounds anywhere, both traces unfinished, both
    decodes closed (the registry holds no model for them any more)."""
    pair = tiny_pair()
    turns = []
    for name, trace in interleave(lanes_of(pair, dict(k=2, tree=None), dict(temperature=0.0), n=30),
                                  should_stop=lambda: len(turns) >= 5):
        turns.append((name, trace))
    assert len(turns) == 5
    last = {name: trace for name, trace in turns}
    assert not any(t.finished for t in last.values())
    assert sum(len(t.rounds) for t in last.values()) == 5
    assert not REGISTRY._held


def test_closing_the_race_closes_every_lane():
    pair = tiny_pair()
    race = interleave(lanes_of(pair, dict(k=2, tree=None), dict(temperature=0.0), n=30))
    next(race), next(race), next(race)
    race.close()
    assert not REGISTRY._held


def test_the_trace_records_its_lanes_and_loads_with_and_without_the_field(tmp_path):
    pair = tiny_pair()
    done = dict(interleave(lanes_of(pair, dict(k=2, tree=None), dict(temperature=0.0), n=8)))
    assert done["plain"].config.interleaved == ("speculative", "plain")
    path = tmp_path / "t.json"
    done["speculative"].save(path)
    loaded = Trace.load(path)
    assert loaded.config.interleaved == ("speculative", "plain")
    assert json.loads(path.read_text())["config"]["interleaved"] == ["speculative", "plain"]
    alone = speculative_generate(pair, PROMPT, k=2, tree=None, max_new_tokens=8)
    assert alone.config.interleaved is None
    alone.save(tmp_path / "alone.json")
    assert "interleaved" not in json.loads((tmp_path / "alone.json").read_text())["config"]
    assert Trace.load(tmp_path / "alone.json").config.interleaved is None


# -- the unstable-timings rule on interleaved lanes ---------------------------------------------------
def switching(times, factor=2.5, period=6):
    """Times under a load that is on for `period` tokens, off for the next `period` (×factor on)."""
    return [t * (factor if (i // period) % 2 else 1.0) for i, t in enumerate(times)]


def interleaved(*traces):
    for t in traces:
        t.config = replace(t.config, interleaved=("speculative", "plain"))
    return traces


def test_a_switching_load_trips_the_per_lane_rule_but_not_the_paired_one():
    """Plain steps of STEP, 2.5× slower for 6 tokens out of every 12; the speculative lane's rounds
    (2 drafts, 1 accepted on alternate rounds: 1.5 tokens per round) slowed on the same tokens.
    Judged lane by lane, plain's spread p90 ÷ p10 ≈ 2.5 > 2 (2.7 with the jitter): unstable. Interleaved, each round is
    judged against the plain steps of its moment: every ratio is ~1.2 (v(2)), steady: explained."""
    plain_t = switching([STEP * (0.97 if i % 2 else 1.03) for i in range(36)])
    rows, n = [], 0
    for i in range(24):
        accepted = i % 2
        slow = 2.5 if (n // 6) % 2 else 1.0
        rows.append((2, accepted, 1.2 * STEP * slow, 0.1 * 2 * STEP * slow, 0.6))
        n += accepted + 1
    spec, plain = trace_of(rows, 2), plain_of(plain_t[:n])
    assert "plain steps vary 2.7× in time" in timings_unstable(spec, plain)   # 2.5 · 1.03 / 0.97, interpolated
    spec, plain = interleaved(spec, plain)
    assert timings_unstable(spec, plain) is None
    by_m, plain_rel = run_costs.paired_times(spec.rounds, plain.rounds)
    assert all(0.4 < x < 3 for x in by_m[2])


def test_a_stall_in_one_interleaved_lane_is_still_flagged():
    """A contradictory run: one speculative round stalled 20× while the plain steps of its moment
    ran at speed, in a steady run otherwise (stall share above PAIRED_STALL_MAX),
    and a run whose passes cost less than the plain steps beside them."""
    plain = plain_of([STEP] * 40)
    rows = [(2, 1, 1.2 * STEP * (20 if i == 5 else 1), 0.02 * STEP, 0.6) for i in range(20)]
    spec, plain = interleaved(trace_of(rows, 2), plain)
    why = timings_unstable(spec, plain)
    # the stalled round: 24 plain steps' worth (1.2 · 20) beyond 3 × 1.2 → (24 − 3.6) / (19 · 1.2 + 24) = 44 %
    assert why is not None and "stalled speculative rounds of 2 drafts" in why and "took 44% of their lane's time" in why
    # a stall of half that size (24 %) stays under PAIRED_STALL_MAX: loaded interleaved races reach 31 %
    rows = [(2, 1, 1.2 * STEP * (10 if i == 5 else 1), 0.02 * STEP, 0.6) for i in range(20)]
    assert timings_unstable(*interleaved(trace_of(rows, 2), plain_of([STEP] * 40))) is None
    # passes over 3 tokens at 0.6 of the plain steps beside them: v(2) = 0.60 in paired units is
    # below the floor, whatever the machine's load (here a load that doubles every 6 tokens)
    rows = [(2, 1, 0.6 * STEP * (2 if (i // 3) % 2 else 1), 0.02 * STEP, 0.6) for i in range(20)]
    spec, plain = interleaved(trace_of(rows, 2), plain_of(switching([STEP] * 40, factor=2.0)))
    why = timings_unstable(spec, plain)
    assert re.search(r"v\(2\) = 0\.[56]\d plain steps, each pass against the plain steps beside it", why)
    assert "floor of 0.75" in why


# -- the page's race -------------------------------------------------------------------------------
def count_in(lane_html: str) -> int:
    import re
    return int(re.search(r'class="sd-count">(\d+)<', lane_html).group(1))


def test_the_page_shows_both_lanes_at_one_clock_so_the_faster_pulls_ahead():
    """Interleaved lanes stay level in tokens (10 each here), not in time: the speculative lane made
    its 10 tokens in 5 rounds of 0.05 s (2 each, clock 0.1 + 0.25 = 0.35 s), plain its 10 in 10
    steps of 0.05 s (clock 0.6 s). Both shown at the race's clock, 0.35 s: speculative 10 tokens,
    plain the 5 whose steps ended by then (0.1 + 5 · 0.05 = 0.35 s)."""
    from app import handlers, race
    spec = trace_of([(2, 1, STEP * 0.8, STEP * 0.2, 0.6) for _ in range(5)], 2)
    plain = plain_of([STEP] * 10)
    for t in (spec, plain):
        t.finished = False
    assert race.race_clock(spec, plain) == pytest.approx(0.35)
    lanes = handlers.race_lanes(spec, plain)
    assert count_in(lanes["spec_lane"]) == 10 and count_in(lanes["plain_lane"]) == 5
    assert "running" in lanes["plain_lane"]
    # Once the speculative lane has finished, the race's clock is plain's own: it catches up.
    spec.finished = True
    assert race.race_clock(spec, plain) == pytest.approx(0.6)
    lanes = handlers.race_lanes(spec, plain)
    assert count_in(lanes["plain_lane"]) == 10 and "finished" in lanes["spec_lane"]
    # Both finished: no clock, every lane whole; the bars fill to what each lane produced.
    plain.finished = True
    assert race.race_clock(spec, plain) is None
    assert "width:100%" in handlers.race_lanes(spec, plain)["plain_lane"]


def test_stop_with_no_race_running_says_there_was_nothing_to_stop():
    """Stop before any Run (the recorded race on the page): the views keep the race whole; the
    banner does not claim a lane was stopped."""
    from app import handlers
    spec, plain = trace_of([(2, 1, STEP, STEP * 0.2, 0.6)] * 4, 2), plain_of([STEP] * 8)
    out = handlers.after_stop({"spec": spec, "plain": plain, "banner": "Recorded race"})
    assert out["banner"].startswith("■ No race is running: nothing to stop.") and "stopped after" not in out["banner"]
    assert "Stopped" not in out["verdict"]


def test_a_stopped_interleaved_race_on_the_page_claims_no_speedup():
    """Stop during an interleaved race: both lanes unfinished, each says how far it got, no speedup."""
    from app import handlers
    pair = tiny_pair()
    done = {}
    for name, trace in interleave(lanes_of(pair, dict(k=2, tree=None), dict(temperature=0.0), n=30),
                                  should_stop=lambda: len(done) == 2 and sum(len(t.rounds) for t in done.values()) >= 6):
        done[name] = trace
    out = handlers.after_stop({"spec": done["speculative"], "plain": done["plain"]})
    assert "Stopped" in out["verdict"] and "×" not in out["verdict"] and "A speedup needs both lanes" in out["verdict"]
    assert f"stopped after {len(done['plain'].output_ids)} tokens" in out["plain_lane"]
    assert f"stopped after {len(done['speculative'].output_ids)} tokens" in out["spec_lane"]


def test_repeated_lanes_run_every_lane_each_repeat_and_rotate_who_starts():
    """The k sweep and Two drafts repeat their lanes (bench.sweep.repeated_lanes): every lane runs
    once per repeat, interleaved, and the lane that takes the first turn rotates between repeats."""
    from specdec_core.bench.sweep import repeated_lanes
    pair = tiny_pair()
    lanes = lanes_of(pair, SHAPES[0], SAMPLERS[0], n=6)
    turns = [(rep, name, trace.finished, list(trace.output_ids)) for rep, name, trace in repeated_lanes(lanes, 3)]
    finished = [(rep, name) for rep, name, done, _ in turns if done]
    assert sorted(finished) == [(r, n) for r in range(3) for n in ("plain", "speculative")]
    first = [next(name for rep, name, _, _ in turns if rep == r) for r in range(3)]
    assert first == ["speculative", "plain", "speculative"]
    outputs = {(rep, name): ids for rep, name, done, ids in turns if done}
    assert all(outputs[(r, n)] == outputs[(0, n)] for r in range(3) for n in ("plain", "speculative"))   # greedy


def test_a_stream_hands_out_snapshots_that_the_decode_leaves_alone():
    """Issue 60: a stream yielded its live Trace, which the decoder goes on appending to while the
    page's and the race pump's threads read it (one reader met a round without its output text and
    was patched). Every yielded trace now stays as it was: its rounds and its output agree, and
    the last one is the whole decode."""
    seen = []
    for trace in stream_speculative(tiny_pair(), PROMPT, 2, tree=None, temperature=0.0, max_new_tokens=10):
        seen.append((trace, len(trace.rounds), list(trace.output_ids)))
    assert len(seen) > 2
    for i, (trace, n_rounds, ids) in enumerate(seen):
        assert len(trace.rounds) == n_rounds == i + 1 and trace.output_ids == ids
        assert sum(len(r.committed) for r in trace.rounds) == len(trace.output_ids)
        assert len(trace.output["spans"]) == len(trace.output_ids)
    assert seen[-1][0].finished and not seen[0][0].finished
