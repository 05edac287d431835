"""Issue 59: the Race tab teaches the rule with the run's own numbers. The worked round
(app/teach/worked.py) on hand-built traces (a sampled chain, the same at T = 0, a token tree) and on a
bundled real race, checked against the trace's recorded numbers; the line saying what limited a race
(app/limit.py); the timeline's counts and words; the captions the issue found untrue or unexplained."""
import html
import re

from specdec_core.trace import race_sum, recorded_reference

from app import explain, limit, race, views
from app.legend import legend_html
from app.teach.worked import pct, spot_words, worked_html, worked_round
from app.timeline import timeline_html
from tests.test_player import lone_trace, tree_round
from tests.test_timeline import make_plain, make_spec


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_a_sampled_run_works_one_kept_and_one_replaced_guess_in_words():
    """make_spec at T 0.7: round 0 keeps “the” (p .9 ≥ q .8: always kept, the draw did not matter),
    turns down “<b>&” (p .1, q .7, u .9 ≥ 1/7) and writes “cat”; round 1 keeps a new line (p .8, q .85,
    u .5 < 80/85). The kept example is the one whose draw mattered."""
    worked = worked_round(make_spec())
    assert not worked.greedy and (worked.kept.round, worked.replaced.round) == (1, 0)
    assert spot_words(worked.kept, False) == (
        "The draft guessed a new line. The target liked it 80 %, the draft 85 %, so it is kept with chance "
        "80/85 = 94 %; the draw was 0.50, under 0.94, so it stayed.")
    assert spot_words(worked.replaced, False) == (
        "The draft guessed “<b>&”. The target liked it 10 %, the draft 70 %, so it is kept with chance 10/70 = 14 %; "
        "the draw was 0.90, not under 0.14, so it was dropped, and the target wrote “cat” in its place, drawn from "
        "what it wanted more than the draft did.")
    page = worked_html(make_spec())
    assert "“&lt;b&gt;&amp;”" in page and "<b>&amp;" not in page         # model text escaped
    shown = text_of(page)
    assert "one guess kept, one replaced" in shown and "Kept (round 1):" in shown and "Replaced (round 0):" in shown
    # the symbols after the words, behind details
    details = shown.split("the same in symbols", 1)[1]
    assert "u = 0.50 < min(1, p/q) = 0.94" in details and "norm(max(0, p − q))" in details


def test_at_temperature_0_the_worked_round_speaks_of_agreement():
    worked = worked_round(make_spec(temperature=0.0))
    assert worked.greedy
    assert spot_words(worked.kept, True) == ("The draft guessed “the”, and “the” was the target's own first choice "
                                             "too: they agree, so it stayed (at temperature 0 there is no draw).")
    assert spot_words(worked.replaced, True) == (
        "The draft guessed “<b>&”, but the target's own first choice was “cat”: they disagree, so “<b>&” was dropped "
        "and the target wrote “cat”.")
    shown = text_of(worked_html(make_spec(temperature=0.0)))
    assert "one agreement, one disagreement" in shown and "Agreement (round 0):" in shown
    assert "Disagreement (round 0):" in shown and "the draw was" not in shown


def test_a_tree_round_says_the_target_tried_the_alternatives_in_turn():
    """tree_round: A turned down (u .7 ≥ .5), then B kept (u .4 < .3/(1 − .5) = .6); no replacement."""
    worked = worked_round(lone_trace([tree_round()]))
    assert [t.text for t in worked.kept.tries] == ["A", "B"] and worked.replaced is None
    words = spot_words(worked.kept, False)
    assert words.startswith("The target tried these alternatives in turn")
    assert "“A” (chance 50 %, draw 0.70: turned down), then “B” (chance 60 %, draw 0.40: kept)" in words
    assert "no guess of this run was replaced" in text_of(worked_html(lone_trace([tree_round()])))


def test_on_a_real_race_the_numbers_are_the_traces():
    """The bundled recorded races (real decodes at the page's defaults): every number the words give is
    the recorded guess's own."""
    for spec, _ in views.recorded_races().values():
        worked = worked_round(spec)
        for spot in (worked.kept, worked.replaced):
            rnd = spec.rounds[spot.round]
            nodes = rnd.tree or rnd.drafted
            words = spot_words(spot, worked.greedy)
            for t in spot.tries:
                node = next(n for n in nodes if n.u == t.u and n.p == t.p)
                assert pct(node.keep_at) in words and f"{node.u:.2f}" in words
            if spot.written is not None:
                assert rnd.correction.text.strip() in words
        assert worked.kept.kept and not worked.replaced.kept


def test_nothing_to_work_through():
    assert worked_round(None) is None and worked_round(make_plain([1, 2])) is None
    assert 'id="sd-worked"' in worked_html(None)


def test_the_limiting_line_names_the_races_biggest_reason_with_its_numbers():
    for spec, plain in views.recorded_races().values():
        total = race_sum(spec, plain, recorded_reference(plain.config.target))
        line = limit.limit_line(spec, plain)
        assert line.startswith("What limited this run: ")
        assert f"{total.kept} of {total.spec_tokens} tokens came from kept guesses" in line
        words = {"acceptance": "wording the draft could not guess", "draft": "the cost of guessing",
                 "verify": "made each pass bigger"}
        assert words[total.reason] in line, (total.reason, line)
        assert 'id="sd-limit"' in limit.limit_html(spec, plain)
    # shown beside the verdict, not inside its sentence
    spec, plain = next(iter(views.recorded_races().values()))
    verdict = views.views(spec, plain, "example")["verdict"]
    assert verdict.index('id="sd-verdict"') < verdict.index('id="sd-limit"')
    assert limit.limit_line(spec, None) == "" and limit.limit_html(None, plain) == ""


def test_the_timeline_says_counts_and_marks_in_words():
    spec, plain = next(iter(views.recorded_races().values()))
    page = timeline_html(spec)
    counts = [int(c) for c in re.findall(r'data-count="(\d+)"', page)]
    assert counts == [len(r.committed) for r in spec.rounds]                   # a count per round, shown
    best = max(range(len(counts)), key=lambda i: (counts[i], -i))
    assert f"Most from one pass: <b>{counts[best]}</b> (round {best})" in page
    assert page.count("· tree of ") == sum(bool(r.tree) for r in spec.rounds) and "⋔" not in page
    stats = views.views(spec, plain, "example")["stats"]
    assert f"| most tokens from one pass (the best round) | {counts[best]} (round {best}) | 1 |" in stats
    legend = text_of(legend_html())
    for words in ("a space", "a new line", "end of answer", "tree of 12", "one pass of the big model",
                  "a free extra token"):
        assert words in legend, words
    assert "from p)" not in legend


def test_captions_are_true_and_plain():
    """The captions the issue found: each now reads plainly (the page's texts, from their producers)."""
    assert "middle of 5 of its prompt" not in explain.RECORDED_LABEL
    assert "each prompt raced 5 times, the middle speedup shown" in explain.RECORDED_LABEL
    assert "uncounted" not in explain.RACE_HELP and "warm-up run that is not timed" in explain.RACE_HELP
    spec, plain = next(iter(views.recorded_races().values()))
    assert "fixed work of one call" not in race.plain_words(spec, plain)
    banner = views.banner(spec, plain, "example")
    assert "smollm2-135m + prompt lookup and a small head, a tree of guesses, sized each round, T = 0.7" in banner
    assert "lookup+distilled-feature-head" not in banner and "tree = auto" not in banner


def test_a_copied_guess_is_said_to_be_copied_not_the_drafts_certainty():
    """A chain copied by prompt lookup (q = 1, a one-hot): the words say it was copied, and never that
    the draft "gave it 100 %"."""
    from specdec_core.trace import Correction, Round, RoundPlan, Source
    from tests.test_timeline import tok
    rnd = Round(index=0, t_start=0.1, t_end=0.3, draft_s=0.02, verify_s=0.15, overhead_s=0.03, k=2,
                drafted=[tok(5, " the", .8, 1.0, .5, True), tok(6, " end", .3, 1.0, .6, False)], n_accepted=1,
                correction=Correction("resample", 7, " a", p_top=[[7, " a", .4]]), committed=[5, 7],
                draft_source=frozenset({Source.LOOKUP}),
                plan=RoundPlan(depth=2, width=2, frontier=1, nodes=4, keep=(0, 1), levels=2))
    worked = worked_round(lone_trace([rnd]))
    kept, replaced = spot_words(worked.kept, False), spot_words(worked.replaced, False)
    assert kept.startswith("Prompt lookup copied “the” from earlier text. The target liked it 80 %")
    assert "the draw was 0.50, under 0.80, so it stayed" in kept and "100 %" not in kept + replaced
    assert replaced.startswith("Prompt lookup copied “end” from earlier text") and "the target wrote “a”" in replaced


def test_a_guess_the_target_gave_nothing_could_never_stay():
    """A guess with p = 0 has chance 0: the words say it could never stay, not "not under 0.00"."""
    from specdec_core.trace import Correction, Round, RoundPlan
    from tests.test_timeline import tok
    rnd = Round(index=0, t_start=0.1, t_end=0.3, draft_s=0.02, verify_s=0.15, overhead_s=0.03, k=1,
                drafted=[tok(6, " end", 0.0, 0.4, .6, False)], n_accepted=0,
                correction=Correction("resample", 7, " a", p_top=[[7, " a", .4]]), committed=[7],
                plan=RoundPlan(depth=1, width=2, frontier=1, nodes=2, keep=(0,), levels=1))
    words = spot_words(worked_round(lone_trace([rnd])).replaced, False)
    assert words.startswith("The draft offered “end” (it gave it 40 %). The target gave it 0 %, so it could never "
                            "stay (the draw was 0.60) and was dropped, and the target wrote “a” in its place")
    assert "not under 0.00" not in words
