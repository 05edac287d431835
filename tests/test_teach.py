"""Teaching views on hand-built traces and known distributions: the walkthrough's steps (rejection
and fully accepted rounds, real numbers in the text, the right strip and chart), the exactness
statistics (the core's rule passes, the broken variant fails), the cost chart from given timings,
share links (the round player's round included)."""
import plotly.graph_objects as go
import pytest
import torch

from specdec_core import ModelPair
from specdec_core.decoding.exactness import chi_square, first_token_distributions, sample_plain, sample_speculative
from specdec_core.sampling import warp_probs, SamplingConfig
from specdec_core.trace import Source

from app import form_fields
from app.teach import classroom, figures, lab, steps, tab, walkthrough
from tests.conftest import tiny_llama
from tests.test_timeline import make_plain, make_spec

REJECTION, ALL_ACCEPTED, NO_DRAFTS = 0, 1, 2     # the rounds of make_spec()


def render_all(spec, plain, r):
    first = walkthrough.render_step(spec, plain, r, 0)
    return [walkthrough.render_step(spec, plain, r, i) for i in range(first["n_steps"])]


def test_steps_are_data_with_one_alternative_each():
    ids = [s.id for s in steps.STEPS]
    assert len(ids) == len(set(ids)) == 10
    assert [s.id for s in steps.steps_for(True)] == ["plain", "draft", "verify", "accept", "rejection", "committed",
                                                    "exact", "theory"]
    assert [s.id for s in steps.steps_for(False)] == ["plain", "draft", "verify", "accept", "bonus", "committed",
                                                     "exact", "theory"]
    assert [s.id for s in steps.steps_for(True, tree=True)] == ["plain", "draft", "verify", "tree", "accept",
                                                               "rejection", "committed", "exact", "theory"]


def test_rejection_round_narrates_its_real_numbers():
    spec, plain = make_spec(), make_plain([5, 6, 7, 8, 9])
    views = render_all(spec, plain, REJECTION)
    by_id = {v["step_id"]: v for v in views}
    assert len(views) == 8 and len({v["title"] for v in views}) == 8
    # the drafted tokens as code spans (model text never renders as HTML), q, k
    assert "`␣the`" in by_id["draft"]["text"] and "`<b>&`" in by_id["draft"]["text"] and "k = 3" in by_id["draft"]["text"]
    # the verify pass answers k + 1 questions; its target time is the round's clock minus its draft
    # (0.5 − 0.1 − 0.1 = 0.3 s) and v is that over plain's step (a 0.2 s round): 1.50
    assert "4 “what comes next?” questions" in by_id["verify"]["text"]
    assert "300.0 ms" in by_id["verify"]["text"] and "v = 1.50" in by_id["verify"]["text"]
    # accept: p, q, the test min(1, p/q) (the strip's number; p/q itself beside it when above 1) and
    # u of each checked draft; the unchecked one is named as such
    text = by_id["accept"]["text"]
    assert "p = 0.900, q = 0.800; u = 0.300 < min(1, p/q) = 1.000 → ✓ accepted" in text
    assert "p = 0.100, q = 0.700; u = 0.900 ≥ min(1, p/q) = 0.143 → ✗ rejected" in text and "not checked" in text
    assert "p/q = 1.00" in by_id["accept"]["strip"] and "p/q = 0.14" in by_id["accept"]["strip"]
    # the rejection: its position, u vs p/q, the residual's token and its probability there
    text = by_id["rejection"]["text"]
    assert "draft position 2" in text and "u = 0.900 ≥ min(1, p/q) = 0.143" in text and "`␣cat`" in text and "0.600" in text
    assert "1 draft(s) after it" in text
    assert "**2 token(s)**" in by_id["committed"]["text"] and "1 accepted" in by_id["committed"]["text"]
    assert by_id["rejection"]["strip"].count("sd-resampled") == 1
    for v in views:
        assert isinstance(v["chart"], go.Figure) and v["chart"].layout.title.text


def test_fully_accepted_round_shows_the_bonus():
    spec, plain = make_spec(), make_plain([5, 6, 7])
    by_id = {v["step_id"]: v for v in render_all(spec, plain, ALL_ACCEPTED)}
    assert "rejection" not in by_id
    assert "`On`" in by_id["bonus"]["text"] and "p = 0.700" in by_id["bonus"]["text"]
    assert 'class="sd-tok sd-bonus' in by_id["bonus"]["strip"] and "sd-rejected" not in by_id["bonus"]["strip"]
    assert "(2 accepted draft(s) + 1 bonus token)" in by_id["committed"]["text"]
    bonus = by_id["bonus"]["chart"]
    assert list(bonus.data[0].y) == [0.7] and bonus.data[0].x[0].startswith("▶")


def test_strip_stages_reveal_the_round_step_by_step():
    spec = make_spec()
    drafted = walkthrough.strip_html(spec, REJECTION, "drafted")
    assert "sd-accepted" not in drafted and "q = 0.70" in drafted           # decisions not yet known
    decided = walkthrough.strip_html(spec, REJECTION, "decided")
    assert [c in decided for c in ("sd-accepted", "sd-rejected", "sd-not-reached")] == [True] * 3
    assert "sd-resampled" not in decided and "u = 0.90" in decided
    questions = walkthrough.strip_html(spec, ALL_ACCEPTED, "questions")
    assert questions.count('class="sd-wt-q"') == 3                          # k + 1 = 3 questions
    assert "&lt;b&gt;&amp;" in walkthrough.strip_html(spec, REJECTION, "committed")   # escaped


def test_greedy_rounds_use_the_greedy_texts_and_drafts_nothing_round_says_so():
    spec = make_spec(temperature=0.0)
    accept = walkthrough.render_step(spec, None, REJECTION, 3)
    assert accept["step_id"] == "accept" and "At temperature 0" in accept["text"] and "u =" not in accept["text"]
    draft = walkthrough.render_step(spec, None, NO_DRAFTS, 1)
    assert "drafted nothing" in draft["text"]


def test_draft_step_says_how_the_guesses_were_made():
    """The draft step reads from the trace how a round's k guesses were made: k sequential passes
    (a call per token, Round.levels = k), one block-drafter pass for all of them (Round.levels = 1),
    or a copy of earlier text (prompt lookup, no model pass)."""
    from specdec_core import speculative_generate
    from tests.test_debugger import tiny_block_pair
    spec, plain = make_spec(), make_plain([5, 6, 7])
    text = walkthrough.render_step(spec, plain, REJECTION, 1)["text"]
    assert "**3 small draft passes**, one per token, each reading the guess before it" in text
    assert "this round made 3)" in text and "block" not in text
    block = speculative_generate(tiny_block_pair(), [1, 5, 2], 4, temperature=0.7, max_new_tokens=12, seed=0)
    r = next(x.index for x in block.rounds if len(x.drafted) == 4)
    draft = walkthrough.render_step(block, None, r, 1)
    assert draft["step_id"] == "draft" and "k = 4" in draft["text"]
    assert "**One pass** of the block drafter filled all 4 slots at once" in draft["text"]
    assert "no slot saw another's guess" in draft["text"] and "this round made one)" in draft["text"]
    assert "small draft passes" not in draft["text"]
    spec.rounds[REJECTION].draft_source = frozenset({Source.LOOKUP})          # a combined drafter's copy round
    text = walkthrough.render_step(spec, plain, REJECTION, 1)["text"]
    assert "**copied from earlier text**" in text and "**no model pass**" in text and "this round made none: a lookup in the text is free" in text
    spec.rounds[REJECTION].draft_source = frozenset({Source.LOOKUP, Source.MODEL})    # a copy and the model's guesses
    text = walkthrough.render_step(spec, plain, REJECTION, 1)["text"]
    assert "Two sources made this tree" in text and "the rest — one small pass per level" in text
    assert set(steps.DRAFT_HOW) >= {"sequential", "sequential_tree", "single", "block", "lookup", "mixed"}


def test_default_round_prefers_a_rejection_after_an_accepted_draft():
    spec = make_spec()
    assert walkthrough.default_round(spec) == REJECTION
    assert walkthrough.rounds_with(spec, "all_accepted") == [ALL_ACCEPTED]
    assert [label for label, _ in tab.round_choices(spec)] == [
        "round 0 · rejection at d2", "round 1 · all 2 accepted + bonus", "round 2 · no drafts (a plain step)"]


def test_routes_chart_adds_up_to_p():
    fig = figures.routes(make_spec(), REJECTION)
    kept, resampled, p_marks = fig.data[0], fig.data[1], fig.data[2]
    for a, b, p in zip(kept.y, resampled.y, p_marks.y):
        assert a + b == pytest.approx(p)


def test_bundled_walkthrough_has_both_kinds_of_round():
    bundled = tab.load_bundled()
    spec, plain = bundled["spec"], bundled["plain"]
    assert spec.config.temperature > 0 and spec.prompt["text"] == "I saw a dog ride"
    full = [r for r in walkthrough.rounds_with(spec, "all_accepted") if len(spec.rounds[r].drafted) == spec.config.k]
    assert walkthrough.rounds_with(spec, "rejection") and full
    for r in (walkthrough.default_round(spec), full[0]):
        assert len(render_all(spec, plain, r)) == 8


# -- exactness ------------------------------------------------------------------------------------
P = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
Q = torch.tensor([0.05, 0.05, 0.10, 0.20, 0.30, 0.30])


def test_core_rule_passes_and_broken_variant_fails_on_known_p():
    n = 20_000
    speculative = sample_speculative(P, Q, n, torch.Generator().manual_seed(1))
    broken = lab.sample_broken(P, Q, n, torch.Generator().manual_seed(2))
    plain = sample_plain(P, n, torch.Generator().manual_seed(3))
    for ids in (speculative, plain):
        assert chi_square(torch.bincount(ids, minlength=6), P).p_value > 1e-3
    assert chi_square(torch.bincount(broken, minlength=6), P).p_value < 1e-6


def test_tree_sampler_passes_and_one_that_keeps_rejected_guesses_fails():
    """The root of a token tree (3 guesses tried in order) gives exactly p; a rule that forgets to
    remove a rejected guess (u < p(x) against the full mass, then a draw from p) does not."""
    from specdec_core.decoding.exactness import sample_tree_first
    n, guesses = 20_000, torch.tensor([5, 3, 0])
    ids = sample_tree_first(P, guesses, n, torch.Generator().manual_seed(5))
    assert chi_square(torch.bincount(ids, minlength=6), P).p_value > 1e-3
    g = torch.Generator().manual_seed(6)
    u = torch.rand(n, 3, generator=g)
    kept = u < P[guesses][None]                                      # no renormalisation: the bug
    first = torch.where(kept.any(-1), kept.float().argmax(-1), 3)
    bad = torch.where(first < 3, guesses[first.clamp_max(2)], torch.multinomial(P, n, replacement=True, generator=g))
    assert chi_square(torch.bincount(bad, minlength=6), P).p_value < 1e-6


def test_one_hot_draft_and_impossible_tokens():
    q_lookup = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])          # prompt lookup proposes token 4
    ids = sample_speculative(P, q_lookup, 20_000, torch.Generator().manual_seed(4))
    assert chi_square(torch.bincount(ids, minlength=6), P).p_value > 1e-3
    zero = torch.tensor([0.5, 0.5, 0.0])
    assert chi_square(torch.tensor([10, 10, 1]), zero).p_value == 0.0       # a probability-0 token was drawn


def test_lab_summary_bins_and_counts():
    counts = None
    for frac, counts in lab.draw_counts(P, Q, 4000, seed=0):
        pass
    assert frac == 1.0 and all(int(c.sum()) == 4000 for c in counts.values())
    result = lab.summarise(P, Q, counts, lambda i: f"t{i}")
    assert result["alpha"] == pytest.approx(float(torch.minimum(P, Q).sum()))
    assert len(result["labels"]) == min(lab.TOP_BINS, 6) + 1 == len(result["exact"]) and result["labels"][-1] == "other"
    assert sum(result["speculative"]) == pytest.approx(1.0) and sum(result["exact"]) == pytest.approx(1.0)
    assert result["p_speculative"] > 1e-3 and result["p_broken"] < 1e-6
    assert "not** the target's distribution" in lab.summary_markdown(result)
    with pytest.raises(form_fields.UserError, match="between"):
        lab.check_n(100)


def test_first_token_distributions_are_the_models():
    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)
    pair = ModelPair.from_models(target, draft)
    prompt = [1, 5, 2]
    p_target, q_draft = first_token_distributions(pair, prompt)
    with torch.no_grad():
        p_ref = warp_probs(target(torch.tensor([prompt])).logits[0, -1], SamplingConfig(1.0))
        q_ref = warp_probs(draft(torch.tensor([prompt])).logits[0, -1], SamplingConfig(1.0))
    torch.testing.assert_close(p_target, p_ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(q_draft, q_ref, atol=1e-5, rtol=1e-4)


# -- the cost chart ----------------------------------------------------------------------------
def curve(seconds):
    return {"costs": {"seconds": {str(n): s for n, s in enumerate(seconds, 1)}},
            "floor": {"floor_ms": 5.0, "weight_bytes": 538e6, "read_bandwidth_gb_s": 100.0, "step_over_floor": 2.0}}


def test_cost_chart_from_given_timings():
    c = curve([0.010 + 0.001 * i for i in range(12)])
    spec, plain = make_spec(), make_plain([5, 6, 7, 8])
    fig = figures.cost_chart(c, spec, plain)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["measured pass"].y) == pytest.approx([10 + i for i in range(12)])
    assert list(by_name["n separate steps (no speculation)"].y) == pytest.approx([10 * n for n in range(1, 13)])
    assert list(by_name["flat ideal (one read serves all)"].y) == pytest.approx([10.0] * 12)
    assert set(by_name["weight-streaming floor"].y) == {5.0}
    marks = by_name["this run's v(k) × one pass"]                           # rounds with 2 and 3 drafts
    # v = a round's target time (clock 0.4 s − draft 0.1 s) ÷ plain's step (its 0.2 s rounds) = 1.5
    assert list(marks.x) == [3, 4] and list(marks.y) == pytest.approx([1.5 * 10] * 2)
    summary = figures.cost_summary(c)
    assert "2.10×" in summary and "Not flat" in summary and "538 MB" in summary
    assert "Nearly flat" in figures.cost_summary(curve([0.010] * 12))


# -- classroom ---------------------------------------------------------------------------------
def test_share_link_round_trip_and_bad_parameters():
    values = {"prompt": "Say hi & bye?", "chat": False, "target": "smollm2-135m", "drafter": form_fields.NGRAM_CHOICE,
              "draft": "target-layers:2", "k": "3", "temperature": 0.8, "seed": 7, "top_k": 0, "top_p": 0.9,
              "max_new_tokens": 40, "classroom": True}
    query = classroom.share_query(values)
    assert query.startswith("?") and "prompt=Say+hi+%26+bye%3F" in query
    from urllib.parse import parse_qsl
    restored, problems = classroom.restore(dict(parse_qsl(query[1:])))
    assert restored == values and problems == []
    restored, problems = classroom.restore({"k": "99", "temperature": "hot", "prompt": "ok", "evil": "1",
                                            "prompt2": "x", "seed": "-1"})
    assert restored == {"prompt": "ok"} and len(problems) == 5


def test_a_share_link_carries_the_players_round():
    values, problems = classroom.restore({"round": "7", "prompt": "hi"})
    assert values["player_round"] == 7 and not problems
    assert "round=7" in classroom.share_query({"prompt": "hi", "player_round": 7})
    assert "round" not in classroom.share_query({"prompt": "hi", "player_round": None})
    assert classroom.restore({"round": "-2"})[1] and classroom.restore({"round": "x"})[1]


@pytest.mark.model
def test_a_tree_round_gets_the_tree_step_with_its_real_numbers():
    """A round that verified a token tree: the walkthrough's tree step names its size, the path it
    kept and the cost of its pass on the run's fitted line, and draws that cost chart."""
    from specdec_core import autoregressive_generate, load_pair, speculative_generate
    pair = load_pair("smollm2-135m", device="cpu")          # the preset: lookup + the distilled head
    ids = pair.encode_prompt("List the days of the week.")
    spec = speculative_generate(pair, ids, tree=(6, 3), max_new_tokens=16)
    plain = autoregressive_generate(pair, ids, max_new_tokens=16)
    r = next(x.index for x in spec.rounds if x.tree)
    views = render_all(spec, plain, r)
    tree = next(v for v in views if v["step_id"] == "tree")
    rnd = spec.rounds[r]
    assert f"**{len(rnd.tree)} guesses**" in tree["text"] and "same single target pass" in tree["text"]
    assert "plain steps**" in tree["text"] and "its budget was fixed" in tree["text"]
    assert tree["chart"].layout.title.text.startswith(f"The cost of one pass: this round verified {len(rnd.tree)}")


def test_a_tree_round_walks_its_children_in_order_with_r_over_sum_r():
    """tests/test_player.tree_round: A rejected (r(A)/Σr = .5, u .7), then B kept (.3/(1 − .5) =
    .6, u .4); after B: C rejected (.6, u .9), then D kept (.2/(1 − .6) = .5, u .1); E (after A)
    never tried. The tree step lists exactly that; the accept and rejection steps use r(x)/Σr, and
    the strip shows the same numbers as the text."""
    from app.teach.walkthrough import render_step
    from tests.test_player import lone_trace, tree_round
    spec = lone_trace([tree_round()])
    steps = {}
    for i in range(12):
        v = render_step(spec, None, 0, i)
        steps.setdefault(v["step_id"], v)
        if i >= v["n_steps"] - 1:
            break
    text = steps["tree"]["text"]
    assert ("- After the committed text: `A`: u = 0.700 ≥ r(x)/Σr = 0.500 → rejected, so r(`A`) ← 0; then `B`: "
            "u = 0.400 < r(x)/Σr = 0.600 (0.300/0.500) → **kept**") in text
    assert ("- After `B`: `C`: u = 0.900 ≥ r(x)/Σr = 0.600 → rejected, so r(`C`) ← 0; then `D`: "
            "u = 0.100 < r(x)/Σr = 0.500 (0.200/0.400) → **kept**") in text
    assert "`E`" not in text                               # its parent A was never kept
    accept = steps["accept"]
    assert "u < r(x)/Σr" in accept["text"] and "p/q =" not in accept["text"] and "r(x)/Σr" in accept["title"]
    # the main line is B, D (the accepted path): their tests in the text and on the strip agree
    assert "`B`: p = 0.300; u = 0.400 < r(x)/Σr = 0.600 → ✓ accepted" in accept["text"]
    assert "r/Σr = 0.60" in accept["strip"] and "r/Σr = 0.50" in accept["strip"]
    assert "bonus" in steps and "rejection" not in steps    # the round ended with a bonus after D
    # the accept step's chart tests the same numbers: regions [0, 0.6) for B and [0, 0.5) for D
    from app.teach import figures
    fig = figures.accept_line(spec, 0)
    assert "u < r(x)/Σr" in fig.layout.title.text
    regions = {tr.y[0]: tr.x[1] for tr in fig.data if tr.name and tr.name.startswith("accept region")}
    assert sorted(round(x, 3) for x in regions.values()) == [0.5, 0.6]
