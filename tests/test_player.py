"""The round player's frames (app/player.py) on hand-built traces, every expected frame worked out by
hand: a chain race (accepted / rejected / unchecked + resample; all accepted + bonus; a plain step),
a token tree (children tried in order, r(x)/Σr with rejected siblings removed), a lookup-only round,
a stopped race; and the HTML/JSON the browser plays."""
import json
import re

import pytest

from specdec_core.trace import Correction, Round, RoundPlan, Trace, TraceConfig, TreeNode
from specdec_core.trace import Source

from app import player
from tests.test_timeline import make_plain, make_spec, tok

F = player.Frame


def test_a_chain_race_step_by_step():
    """make_spec: round 0 (0.1–0.5 s, drafting 0.1 s, verify 0.25 s) drafts 3 — kept, rejected,
    unchecked — then a resample; round 1 (0.5–0.9 s) keeps both of 2, then a bonus; round 2
    (0.9–1.1 s) is a plain step. Plain makes one token per 0.2 s from 0.1 s: ends 0.3, 0.5, …, 1.3."""
    spec, plain = make_spec(), make_plain([40, 41, 42, 43, 44, 45])
    fs = player.frames(spec, plain)
    got = [(f.round, f.phase, f.level, round(f.t, 4), f.spec_tokens, f.plain_tokens) for f in fs]
    assert got == [
        (0, "draft", 1, 0.1333, 0, 0), (0, "draft", 2, 0.1667, 0, 0), (0, "draft", 3, 0.2, 0, 0),
        (0, "verify", 3, 0.45, 0, 1),            # 0.1 + 0.1 drafting + 0.25 verify; plain's first ended at 0.3
        (0, "decide", 3, 0.5, 2, 2),             # " the" kept + " cat" resampled; plain's second ends at 0.5
        (1, "draft", 1, 0.55, 2, 2), (1, "draft", 2, 0.6, 2, 2),
        (1, "verify", 2, 0.85, 2, 3),
        (1, "decide", 2, 0.9, 5, 4),             # 2 kept + the bonus "On"
        (2, "decide", 0, 1.1, 6, 5),             # a plain step: one token, no guesses
        (2, "finish", 0, 1.3, 6, 6),             # plain ends 0.2 s after speculative
    ]
    assert fs[0].caption == "The draft guesses: token 1 ahead, “␣the” (level 1 of 3)."
    assert fs[3].caption.startswith("The target checks all 3 guesses in one pass")
    assert fs[4].caption == ("Kept 1 of 3 guesses (“␣the”); rejected “<b>&”; in place of the rejected guess the "
                             "target adds “␣cat”, drawn from what it wanted and the draft did not offer, norm(max(0, p − q)): 2 tokens "
                             "from one pass.")
    assert fs[8].caption == ("Kept 2 of 2 guesses (“␣sat”, “↵”); every guess passed, so the target adds a bonus "
                             "token of its own, “On”: 3 tokens from one pass.")
    assert fs[9].caption == "No guesses this round: the target writes one token itself, “␣mat” (a plain step)."
    assert fs[10].caption == "Plain decoding reaches 6 tokens at 1.30 s; speculative decoding had 6 at 1.10 s."
    # The u test of each guess, against min(1, p/q) for a sampled chain: 0.9/0.8 → 1; 0.1/0.7 = 0.14.
    c = player.card(spec, spec.rounds[0])
    assert [g.decision for g in c.guesses] == ["accepted", "rejected", "not reached"]
    assert c.guesses[0].keep_at == 1.0 and c.guesses[1].keep_at == pytest.approx(0.1 / 0.7)
    page = player.player_html(spec, plain)
    assert "u = 0.30 &lt; min(1, p/q) = 1.00" in page and "u = 0.90 ≥ min(1, p/q) = 0.14" in page
    assert "never checked" in page


def tree_round(index=0, t=0.1):
    """A tree of 5 guesses verified in one pass, in the order tried:
    A (root child, p .5) rejected: u .7 ≥ r(A)/Σr = .5/1;
    B (root child, p .3) accepted: u .4 < .3/(1 − .5) = .6  (A removed from r);
    C (child of B, p .6) rejected: u .9 ≥ .6/1;
    D (child of B, p .2) accepted: u .1 < .2/(1 − .6) = .5;
    E (child of A) never reached. Then the bonus "F" after D."""
    def node(parent, text, p, q, u, decision, on_path=False):
        return TreeNode(id=50 + ord(text[0]) % 20, parent=parent, text=text, p=p, q=q, q_raw=q, u=u,
                        decision=decision, on_path=on_path, source="model")
    tree = [node(-1, "A", .5, .6, .7, "rejected"), node(-1, "B", .3, .2, .4, "accepted", True),
            node(1, "C", .6, .5, .9, "rejected"), node(1, "D", .2, .1, .1, "accepted", True),
            node(0, "E", .4, .3, None, "not reached")]
    drafted = [tok(tree[1].id, "B", .3, .2, .4, True), tok(tree[3].id, "D", .2, .1, .1, True)]
    return Round(index=index, t_start=t, t_end=t + 0.4, draft_s=0.1, verify_s=0.2, overhead_s=0.1, k=5,
                 drafted=drafted, n_accepted=2, correction=Correction("bonus", 77, "F", p_top=[[77, "F", .5]]),
                 committed=[tree[1].id, tree[3].id, 77], tree=tree,
                 plan=RoundPlan(depth=2, width=2, frontier=2, nodes=5, keep=None, levels=2))


def lone_trace(rounds, finished=True, temperature=0.8):
    ids = [i for r in rounds for i in r.committed]
    cfg = {"target": "t", "draft": "d", "k": "auto", "tree": "auto", "temperature": temperature, "top_k": 0,
           "top_p": 1.0, "seed": 0, "max_new_tokens": len(ids), "device": "cpu", "dtype": "float32",
           "mode": "speculative", "versions": {}}
    t = Trace(config=TraceConfig(**cfg), prompt={"text": "hi", "ids": [1]}, rounds=rounds, output={"ids": ids, "text": ""},
              prefill_s=0.1, finished=finished, stop_reason="max_new_tokens" if finished else None)
    return Trace.from_json(t.to_json())


def test_a_tree_round_grows_level_by_level_and_tries_children_in_order():
    spec = lone_trace([tree_round()])
    fs = player.frames(spec, None)
    assert [(f.phase, f.level, round(f.t, 3), f.spec_tokens, f.plain_tokens) for f in fs] == [
        ("draft", 1, 0.15, 0, 0), ("draft", 2, 0.2, 0, 0), ("verify", 2, 0.4, 0, 0), ("decide", 2, 0.5, 3, 0)]
    assert fs[0].caption == "The draft guesses: 2 alternatives for token 1 ahead, “A”, “B” (level 1 of 2)."
    assert fs[1].caption == "The draft guesses: 3 alternatives for token 2 ahead, “C”, “D”, “E” (level 2 of 2)."
    assert fs[2].caption.startswith("The target checks all 5 guesses in one pass")
    assert fs[3].caption == ("A token tree: guesses in one column are alternatives for the same position, tried "
                             "top to bottom, each kept if u < r(x)/Σr (what the target still wants there). "
                             "Kept 2 of 5 guesses (“B”, “D”); rejected “A”, “C”; the kept line ends there, so the "
                             "target adds a bonus token of its own, “F”: 3 tokens from one pass.")
    c = player.card(spec, spec.rounds[0])
    assert c.chosen and [g.depth for g in c.guesses] == [1, 1, 2, 2, 2]
    assert [g.decision for g in c.guesses] == ["rejected", "accepted", "rejected", "accepted", "not reached"]
    assert [round(g.keep_at, 3) for g in c.guesses[:4]] == [0.5, 0.6, 0.6, 0.5]
    page = player.player_html(spec, None)
    assert "u = 0.40 &lt; r(x)/Σr = 0.60" in page and "u = 0.10 &lt; r(x)/Σr = 0.50" in page


def test_a_lookup_round_says_it_copied_and_a_chosen_chain_is_tested_by_r():
    """A chain of 2 copied by prompt lookup (q = 1 on each) in a planned round of width 2: kept iff
    u < r(x)/Σr = p(x) (nothing rejected before it)."""
    rnd = Round(index=0, t_start=0.1, t_end=0.3, draft_s=0.02, verify_s=0.15, overhead_s=0.03, k=2,
                drafted=[tok(5, " the", .8, 1.0, .5, True), tok(6, " end", .3, 1.0, .6, False)], n_accepted=1,
                correction=Correction("resample", 7, " a", p_top=[[7, " a", .4]]), committed=[5, 7],
                draft_source=frozenset({Source.LOOKUP}), plan=RoundPlan(depth=2, width=2, frontier=1, nodes=4, keep=(0, 1), levels=2))
    spec = lone_trace([rnd])
    fs = player.frames(spec, None)
    assert fs[0].caption == "Prompt lookup copies from earlier text: token 1 ahead, “␣the” (level 1 of 2)."
    c = player.card(spec, spec.rounds[0])
    assert c.chosen and [g.keep_at for g in c.guesses] == [pytest.approx(.8), pytest.approx(.3)]
    page = player.player_html(spec, None)
    assert "copied" in page and "u = 0.60 ≥ r(x)/Σr = 0.30" in page


def test_a_stopped_race_ends_where_it_stopped():
    """Stopped after one tree round (0.1–0.5 s) while plain had made 3 tokens by 0.7 s: the last step
    says the race was stopped, with both counts."""
    spec = lone_trace([tree_round()], finished=False)
    plain = make_plain([1, 2, 3])
    plain.finished = False
    fs = player.frames(spec, plain)
    assert fs[-1].phase == "finish" and fs[-1].plain_tokens == 3 and fs[-1].spec_tokens == 3
    assert fs[-1].caption == "The race was stopped: plain decoding had 3 tokens at 0.70 s, speculative 3."
    # The speculative lane further on in time than plain: no finish step.
    assert player.frames(lone_trace([tree_round(), tree_round(1, 0.5)], finished=False),
                         make_plain([1, 2]))[-1].phase == "decide"


def test_greedy_guesses_say_how_they_are_checked():
    spec = make_spec(temperature=0.0)
    page = player.player_html(spec, None)
    assert "kept if it is the target&#x27;s top token" in page or "kept if it is the target's top token" in page
    assert "min(1, p/q)" not in page


def test_the_page_gets_the_frames_and_both_lanes_as_data():
    spec, plain = make_spec(), make_plain([40, 41, 42, 43, 44, 45])
    page = player.player_html(spec, plain, start_round=1)
    blob = re.search(r'<div class="sd-pl-data" hidden>(.*?)</div>', page, re.S).group(1)
    data = json.loads(blob.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert len(data["frames"]) == 11 and data["rounds"] == 3 and data["start"] == 1
    assert data["roundMs"] == player.ROUND_MS and data["classroomSlower"] == 2    # classroom mode: half the pace
    assert [r for r, _ in data["spec"]] == [0, 0, 1, 1, 1, 2]
    assert [t for t, _ in data["plain"]] == pytest.approx([0.3, 0.5, 0.7, 0.9, 1.1, 1.3])
    assert page.count('class="sd-pl-card"') == 3
    assert "appears after a race" in player.player_html(None, None)


def test_a_tree_round_whose_line_ended_early_never_says_every_guess_passed():
    """Issue 59: a tree round that kept its first guess, which had no guess after it, left its other
    branches unchecked: the caption says so, not "every guess passed"."""
    def node(parent, text, p, q, u, decision, on_path=False):
        return TreeNode(id=60 + ord(text[0]) % 20, parent=parent, text=text, p=p, q=q, q_raw=q, u=u,
                        decision=decision, on_path=on_path, source="model")
    tree = [node(-1, "A", .9, .6, .2, "accepted", True), node(-1, "B", .05, .2, None, "not reached"),
            node(-1, "C", .05, .1, None, "not reached"), node(1, "D", .5, .5, None, "not reached")]
    rnd = Round(index=0, t_start=0.1, t_end=0.5, draft_s=0.1, verify_s=0.2, overhead_s=0.1, k=4,
                drafted=[tok(tree[0].id, "A", .9, .6, .2, True)], n_accepted=1,
                correction=Correction("bonus", 77, "F", p_top=[[77, "F", .5]]), committed=[tree[0].id, 77], tree=tree,
                plan=RoundPlan(depth=2, width=3, frontier=1, nodes=4, keep=None, levels=2))
    caption = player.frames(lone_trace([rnd]), None)[-1].caption
    assert "every guess passed" not in caption
    assert "Kept 1 of 4 guesses (“A”)" in caption and "the other 3 were never checked" in caption
    assert caption.endswith("a bonus token of its own, “F”: 2 tokens from one pass.")


def test_the_views_open_on_the_round_the_player_rests_on():
    """views.views(rest_round=): the player, the round picker, the inspector and the tokens-vs-time
    marker on that round when the race has it; else on the default focus (the first rejection)."""
    from app import views
    spec, plain = make_spec(), make_plain([40, 41, 42, 43, 44, 45])
    assert views.default_focus(spec) == (0, 2)
    for rest, want in ((1, 1), (2, 2), (0, 0), (7, 0), (-1, 0), (None, 0)):   # 7, -1: rounds the race lacks
        v = views.views(spec, plain, rest_round=rest)
        assert v["round"] == want and v["round_plot"].layout.title.text.startswith(f"Round {want}:")
        assert f'"start": {want}' in v["player"]
        assert [s.x0 for s in v[views.CHART_NAMES[2]].layout.shapes] == [spec.rounds[want].t_end]
    assert views.views(spec, plain)["position"] == 2          # the default focus keeps its position
