"""The rule records what it did: every verified guess carries the test its u met (KeepTest, keep_at) and
every round what its last token was drawn from (DrawnFrom), written by rule.accept_tree as it
decides. Checked against thresholds worked out by hand, against the decisions themselves (kept iff
u < keep_at), and against the derivation an older trace gets on load (the same rule steps)."""
import copy
import json

import pytest
import torch

from specdec_core import load_pair
from specdec_core.decoding import rule, speculative_generate
from specdec_core.trace import Source, Trace
from specdec_core.trace.decisions import DrawnFrom, KeepTest, draft_decision
from specdec_core.trace.trees import round_sources

P = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
AFTER = torch.tensor([0.10, 0.10, 0.20, 0.20, 0.20, 0.20])


def test_guesses_record_r_over_sigma_r_worked_by_hand():
    """Three guesses at the root tried in order: the thresholds of those tried are r(x)/Σr with the
    earlier ones removed, computed here by hand; kept iff u < it; all rejected, the last token comes
    from norm(r), one kept (a leaf), from p."""
    guesses, hand = [5, 3, 0], [0.03 / 1.0, 0.15 / (1 - 0.03), 0.30 / (1 - 0.03 - 0.15)]
    seen = set()
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        d = rule.accept_tree([-1] * 3, torch.tensor(guesses), torch.stack([P] + [AFTER] * 3), False, gen)
        for test, got, want, u, decision in zip(d.tests, d.keep_at, hand, d.u, d.decisions):
            if decision == "not reached":
                assert test is None and got is None
                continue
            assert test == KeepTest.CHOSEN and got == pytest.approx(want, rel=1e-6)
            assert (u < got) == (decision == "accepted")
        assert d.drawn_from == (DrawnFrom.P if d.path else DrawnFrom.REST)
        seen.add(d.drawn_from)
    assert seen == {DrawnFrom.P, DrawnFrom.REST}


def test_a_sampled_chain_records_p_over_q_and_the_residual():
    """A one-node sampled chain: min(1, p/q) by hand; a rejection draws from norm(max(0, p − q)),
    a kept leaf from p; at T = 0 the top-token test, no threshold."""
    q = torch.tensor([0.05, 0.05, 0.10, 0.20, 0.30, 0.30])
    seen = set()
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        d = rule.accept_tree([-1], torch.tensor([4]), torch.stack([P, AFTER]), False, gen, q[None])
        assert d.tests == [KeepTest.SAMPLED] and d.keep_at[0] == pytest.approx(0.07 / 0.30)
        assert d.drawn_from == (DrawnFrom.P if d.path else DrawnFrom.RESIDUAL)
        seen.add(d.drawn_from)
    assert seen == {DrawnFrom.P, DrawnFrom.RESIDUAL}
    d = rule.accept_tree([-1], torch.tensor([0]), torch.stack([P, AFTER]), True, None)
    assert d.tests == [KeepTest.TOP] and d.keep_at == [None] and d.drawn_from == DrawnFrom.TOP


@pytest.fixture(scope="module")
def preset_pair(default_pair):
    """The default preset as users get it: prompt lookup + the shipped distilled head."""
    return load_pair("smollm2-135m", device="cpu")


def _strip(d: dict) -> dict:
    """The trace as written before the rule recorded its tests."""
    old = copy.deepcopy(d)
    for r in old["rounds"]:
        r["correction"].pop("drawn_from", None)
        for x in r["drafted"] + (r.get("tree") or []):
            x.pop("test", None)
            x.pop("keep_at", None)
    return old


@pytest.mark.parametrize("settings", [
    dict(temperature=0.7, top_p=0.9, tree="auto"),          # the page's defaults
    dict(temperature=0.7, top_p=0.9, tree=(10, 3)),         # a fixed token tree: chosen guesses
    dict(temperature=0.7, top_p=0.9, k="auto"),             # sampled chains
    dict(temperature=0.0, tree="auto"),
], ids=["defaults", "tree", "chain", "greedy"])
def test_every_guess_of_a_decode_records_its_test(preset_pair, settings):
    """A real decode: every tried guess has a test, and its decision is u < keep_at; untried ones
    none; a tree's guesses are never tested against p/q; an older (stripped) copy of the trace read
    back derives the same records; the main line repeats its tree nodes' records."""
    ids = preset_pair.encode_prompt("Summarise these notes in two lines: the meeting moves to Tuesday, "
                                    "Anna brings the slides, Tom books the room, lunch is at noon.")
    trace = speculative_generate(preset_pair, ids, seed=3, max_new_tokens=24, **settings)
    data = json.loads(trace.to_json())
    fresh, older = Trace.from_dict(data), Trace.from_dict(_strip(data))
    greedy, tested = settings["temperature"] == 0, 0
    for rnd, old in zip(fresh.rounds, older.rounds):
        nodes = rnd.tree or rnd.drafted
        for node, was, decision in zip(nodes, old.tree or old.drafted, _decisions(rnd)):
            assert (was.test, was.keep_at is None) == (node.test, node.keep_at is None)
            if node.keep_at is not None:
                assert was.keep_at == pytest.approx(node.keep_at, abs=2e-6)   # the trace's p, q are rounded floats
            if decision == "not reached":
                assert node.test is None and node.keep_at is None
                continue
            tested += 1
            if greedy:
                assert node.test == KeepTest.TOP and node.keep_at is None and node.u is None
            else:
                assert (node.u < node.keep_at) == (decision == "accepted")
                chosen = bool(rnd.tree) or rnd.plan is not None and (rnd.plan.width > 1 or rnd.plan.frontier > 1)
                assert node.test == (KeepTest.CHOSEN if chosen else KeepTest.SAMPLED)    # a chain's draws: p/q
        for t in rnd.drafted:
            assert t.test is not None or not t.evaluated
        assert rnd.correction.drawn_from == old.correction.drawn_from
        if rnd.n_verified and not greedy:
            want = {"bonus": {DrawnFrom.P}, "resample": {DrawnFrom.REST, DrawnFrom.RESIDUAL}}[rnd.correction.kind]
            assert rnd.correction.drawn_from in want
    assert tested > 0
    if settings.get("tree") == (10, 3):
        assert any(n.test == KeepTest.CHOSEN for r in fresh.rounds for n in r.tree or [])


def _decisions(rnd) -> list:
    """Each verified guess's decision: a tree's nodes say theirs, a chain's drafts draft_decision."""
    return [n.decision for n in rnd.tree] if rnd.tree else [draft_decision(t) for t in rnd.drafted]


@pytest.mark.parametrize("temperature", [0.7, 0.0])
def test_a_lookup_and_model_tree_auto_run_replays_with_its_draft_calls(preset_pair, temperature, fake_clock):
    """The default pair (prompt lookup + the distilled head) at tree = auto on prompts lookup copies
    from: the replayed schedule gives the same tokens, decisions and draft calls per round. Calls are
    counted where they happen (lookup's copy is one call whatever its depth), and the replay grows
    the model as far as the recorded calls say."""
    mixed = 0
    for text in ("Copy this list and add one item: apples, pears, plums, cherries, apricots, peaches, figs, "
                 "dates, grapes, lemons.",
                 "Summarise these notes in two lines: the meeting moves to Tuesday, Anna brings the slides, "
                 "Tom books the room."):
        ids = preset_pair.encode_prompt(text)
        run = dict(seed=5, max_new_tokens=32, temperature=temperature, top_p=0.9)
        first = speculative_generate(preset_pair, ids, **run)
        again = speculative_generate(preset_pair, ids, **run, k_schedule=first.k_schedule())
        assert again.output_ids == first.output_ids
        assert [_decisions(r) for r in again.rounds] == [_decisions(r) for r in first.rounds]
        assert [r.levels for r in again.rounds] == [r.levels for r in first.rounds]
        mixed += sum(round_sources(first.config, r) == {Source.LOOKUP, Source.MODEL} for r in first.rounds)
    # The clock ticks alike on every machine (fake_clock), so the shape rule decides alike.
    assert mixed > 0, "no round merged a copy and the model's guesses: these prompts do not test the count"


@pytest.mark.parametrize("shape", [dict(tree=(10, 3)), dict(tree="auto")], ids=["budget", "auto"])
def test_draft_calls_are_the_calls_the_drafter_got(preset_pair, shape, fake_clock):
    """Each round's recorded draft calls equal the model calls counted on the drafter itself: the
    model's draft() calls, never prompt lookup's copy (free: issue 60; it was counted as one call,
    which diluted c) nor the depth of the merged tree, which the copy may set."""
    from specdec_core.decoding import stream_speculative

    drafter = preset_pair.new_drafter()
    counts = {"model": 0, "lookup": 0}
    model_draft, parts = drafter.model.draft, drafter.parts

    def draft(*args, **kwargs):
        counts["model"] += 1
        return model_draft(*args, **kwargs)

    def counted_parts(*args, **kwargs):
        chosen = parts(*args, **kwargs)
        counts["lookup"] += drafter.lookup in chosen
        return chosen

    drafter.model.draft, drafter.parts = draft, counted_parts
    seen, mixed = 0, 0
    # two prompts lookup copies from (which rounds merge a copy with the model's levels depends on the draft)
    for text in ("Summarise these notes in two lines: the meeting moves to Tuesday, Anna brings the slides, Tom "
                 "books the room.", "Copy this list and add one item: apples, pears, plums, cherries, apricots, "
                 "peaches, figs, dates, grapes, lemons."):
        ids = preset_pair.encode_prompt(text)
        for trace in stream_speculative(preset_pair, ids, seed=5, max_new_tokens=32, temperature=0.7, top_p=0.9,
                                        drafter=drafter, **shape):
            rnd, calls = trace.rounds[-1], counts["model"]
            assert rnd.levels == calls - seen, f"round {rnd.index}"
            seen = calls
            mixed += {n.source for n in rnd.tree or []} == {Source.LOOKUP, Source.MODEL}
    assert mixed > 0, "no round merged a copy and the model's levels: the prompts do not test the count"
    assert counts["lookup"] > 0
