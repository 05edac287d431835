"""app.timeline / app.race on hand-built traces: decisions, escaping, whitespace, lanes, verdict."""
import html
import re
from dataclasses import replace

from specdec_core.trace.decisions import DECISIONS
from specdec_core.trace import Correction, DraftToken, Round, Trace, TraceConfig

from app import legend, race, timeline


def tok(id, text, p, q, u, accepted, evaluated=True, overlap=0.5):
    return DraftToken(id=id, text=text, q=q, p=p, u=u, accepted=accepted, evaluated=evaluated,
                      overlap=overlap if evaluated else None,
                      p_top=[[id, text, p], [99, "x", 0.1]], q_top=[[id, text, q], [98, "y", 0.2]],
                      p_top_raw=[[id, text, p], [99, "x", 0.1]], q_top_raw=[[id, text, q]])


def make_spec(temperature=0.7, finished=True, cut_last=False, eos_last=False) -> Trace:
    """Three rounds: (accepted, rejected, unchecked) + resample; (accepted ×2) + bonus; nothing + bonus."""
    r0 = Round(index=0, t_start=0.1, t_end=0.5, draft_s=0.1, verify_s=0.25, overhead_s=0.05, k=3,
               drafted=[tok(10, " the", 0.9, 0.8, 0.3, True), tok(11, "<b>&", 0.1, 0.7, 0.9, False),
                        tok(12, "\n", 0.5, 0.6, None, False, evaluated=False)],
               n_accepted=1, correction=Correction("resample", 13, " cat", p_top=[[13, " cat", 0.4]],
                                                   residual_top=[[13, " cat", 0.6], [14, " dog", 0.3]]),
               committed=[10, 13])
    r1 = Round(index=1, t_start=0.5, t_end=0.9, draft_s=0.1, verify_s=0.25, overhead_s=0.05, k=3,
               drafted=[tok(20, " sat", 0.95, 0.9, 0.2, True, overlap=0.9),
                        tok(21, "\n", 0.8, 0.85, 0.5, True, overlap=0.8)],
               n_accepted=2, correction=Correction("bonus", 22, "On", p_top=[[22, "On", 0.7]]),
               committed=[20, 21] + ([] if cut_last else [22]))
    r2 = Round(index=2, t_start=0.9, t_end=1.1, draft_s=0.0, verify_s=0.15, overhead_s=0.05, k=3,
               drafted=[], n_accepted=0, correction=Correction("bonus", 2 if eos_last else 30,
                                                               "</s>" if eos_last else " mat"),
               committed=[2 if eos_last else 30])
    rounds = [r0, r1, r2]
    ids = [i for r in rounds for i in r.committed]
    cfg = {"target": "t", "draft": "d", "k": 3, "temperature": temperature, "top_k": 0, "top_p": 1.0,
           "seed": 0, "max_new_tokens": len(ids), "device": "cpu", "dtype": "float32", "mode": "speculative",
           "versions": {}}
    trace = Trace(config=TraceConfig(**cfg), prompt={"text": "hi", "ids": [1]}, rounds=rounds,
                  output={"ids": ids, "text": "the cat"}, prefill_s=0.1, finished=finished,
                  stop_reason=("eos" if eos_last else "max_new_tokens") if finished else None)
    return Trace.from_json(trace.to_json())   # schema-valid, as a file would be


def make_plain(ids, step=0.2, temperature=0.7) -> Trace:
    rounds = [Round(index=i, t_start=0.1 + i * step, t_end=0.1 + (i + 1) * step, draft_s=0.0, verify_s=step * 0.9,
                    overhead_s=step * 0.1, k=0, drafted=[], n_accepted=0,
                    correction=Correction("bonus", t, f" w{t}", p_top=[[t, f" w{t}", 0.5], [t + 1, "z", 0.3]],
                                          p_top_raw=[[t, f" w{t}", 0.5], [t + 1, "z", 0.3]]),
                    committed=[t]) for i, t in enumerate(ids)]
    cfg = {"target": "t", "draft": None, "k": 0, "temperature": temperature, "top_k": 0, "top_p": 1.0,
           "seed": 0, "max_new_tokens": len(ids), "device": "cpu", "dtype": "float32", "mode": "autoregressive",
           "versions": {}}
    return Trace.from_json(Trace(config=TraceConfig(**cfg), prompt={"text": "hi", "ids": [1]}, rounds=rounds,
                                 output={"ids": list(ids), "text": ""}, prefill_s=0.1, finished=True,
                                 stop_reason="max_new_tokens").to_json())


def spans(html_text):
    return re.findall(r'<span class="sd-tok sd-([\w-]+)[^"]*" data-decision="([\w ]+)" data-round="(\d+)" '
                      r'data-pos="\d+" title="([^"]*)">(.*?)</span>(?=<br>|<span class="sd-tok|</span>)', html_text, flags=re.S)


def test_every_decision_gets_its_class_in_round_order():
    out = spans(timeline.timeline_html(make_spec()))
    assert [(cls, rnd) for cls, _, rnd, _, _ in out] == [
        ("accepted", "0"), ("rejected", "0"), ("not-reached", "0"), ("resampled", "0"),
        ("accepted", "1"), ("accepted", "1"), ("bonus", "1"), ("own", "2")]
    assert all("sd-" + cls == DECISIONS[dec].css for cls, dec, *_ in out)
    # round 2 drafted nothing: its one token is the target's own, said so (issue 44), not a "bonus"
    assert "no guess this round: the target wrote one token itself" in out[-1][3]
    assert "no guess" in legend.legend_html()


def test_rounds_are_bordered_groups_with_index_and_count():
    html = timeline.timeline_html(make_spec())
    assert html.count('class="sd-round"') == 3
    # each round's head says, without hovering, how many tokens its one pass produced (issue 59)
    assert '<span class="sd-rn">1: <b class="sd-rcount" data-count="3">3 tokens</b></span>' in html
    assert '<span class="sd-rn">2: <b class="sd-rcount" data-count="1">1 token</b></span>' in html
    # ... and the line above it names the best round
    assert "Most from one pass: <b>3</b> (round 1)" in html


def test_token_text_is_escaped_and_whitespace_visible():
    html = timeline.timeline_html(make_spec())
    assert "<b>&" not in html and "&lt;b&gt;&amp;" in html
    assert '<span class="sd-ws">␣</span>the' in html
    # a committed newline is shown as ↵ and also breaks the line; a discarded one only shows ↵
    assert html.count("↵") == 2 and html.count("<br>") == 1


def test_tooltip_has_p_q_ratio_u_and_decision():
    out = spans(timeline.timeline_html(make_spec()))
    rejected = out[1][3]
    assert "p (target) = 0.100" in rejected and "q (draft) = 0.700" in rejected
    assert "u = 0.900 ≥ min(1, p/q) = 0.143" in rejected and "rejected draft" in rejected
    accepted = out[0][3]
    assert "u = 0.300 &lt; min(1, p/q) = 1.000" in accepted        # p/q capped at 1 on the 0–1 line
    assert "not drawn" in out[2][3]                         # unchecked draft: no u
    assert "norm(max(0, p − q))" in out[3][3] and "its probability under the residual = 0.600" in out[3][3]


def test_greedy_tooltip_explains_no_draw():
    out = spans(timeline.timeline_html(make_spec(temperature=0.0)))
    assert "temperature 0" in out[0][3]


def test_cut_at_max_new_tokens_hides_uncommitted_correction_and_marks_eos():
    out = spans(timeline.timeline_html(make_spec(cut_last=True)))
    assert [c for c, _, r, _, _ in out if r == "1"] == ["accepted", "accepted"]
    eos = make_spec(eos_last=True)
    html = timeline.timeline_html(eos)
    assert 'sd-own sd-eos' in html and "&lt;/s&gt;" in html        # the timeline shows the EOS token ...
    assert '<span class="sd-said">end of answer</span>' in html      # ... said in words (issue 59)
    assert '<span class="sd-said">new line</span>' in html            # a token of a new line, likewise
    lane = timeline.spec_lane_html(eos)
    assert "&lt;/s&gt;" not in lane and '<b class="sd-count">6</b>' in lane   # the lane hides its text


def test_empty_and_partial_timeline():
    assert "No tokens yet" in timeline.timeline_html(None)
    assert timeline.timeline_html(make_spec(), max_rounds=1).count('class="sd-round"') == 1


def test_css_and_legend_come_from_the_shared_legend():
    css, shown = timeline.timeline_css(), legend.legend_html()
    for key, d in DECISIONS.items():
        assert f".{d.css}{{background:{d.colour}" in css
        assert html.escape(d.words) in shown and f"sd-tok {d.css}" in shown
    assert "line-through" in css and "underline" in css and "overline" in css and "opacity" in css


def test_lanes_show_counts_rate_and_replay_cut():
    spec = make_spec()
    lane = timeline.spec_lane_html(spec, status="finished")
    assert '<b class="sd-count">6</b>' in lane and "k = 3" in lane and "sd-burst-1" in lane
    assert '<b class="sd-rate">5.5</b>' in lane          # 6 tokens / 1.1 s
    early = timeline.spec_lane_html(spec, upto_t=0.6)
    assert '<b class="sd-count">2</b>' in early and " sat" not in early
    assert "waiting" in timeline.plain_lane_html(None)


def test_verdict_speedup_and_greedy_check():
    spec = make_spec(temperature=0.0)
    same = make_plain(spec.output_ids, temperature=0.0)
    html = race.verdict_html(spec, same)
    assert "speedup" in html and "identical token for token" in html
    s = spec.stats["tokens_per_s"] / same.stats["tokens_per_s"]
    assert f"{s:.2f}×" in html
    other = make_plain([10, 13, 20, 99, 22, 30], temperature=0.0)
    check = race.greedy_check(spec, other)
    assert not check["ok"] and "first difference at token 3" in check["text"]
    assert "different samples" in race.verdict_html(make_spec(), make_plain(spec.output_ids))
    assert "appears when both lanes finish" in race.verdict_html(make_spec(finished=False), same)


def test_no_speedup_is_claimed_when_nothing_was_drafted():
    """A run whose rounds drafted nothing (max new tokens 1, or k = auto always plain) did the same
    work in both lanes: the verdict says so and names no speedup, whatever the clocks measured."""
    from specdec_core import Trace
    quick = make_plain([5], step=0.2)                    # 1 token, 0.3 s
    slow = make_plain([5], step=0.3)                     # 1 token, 0.4 s: a "1.33×" that means nothing
    spec = Trace.from_dict({**quick.to_dict(), "config": {**quick.config.to_dict(), "k": 4, "mode": "speculative", "draft": "d"}})
    text = race.verdict_html(spec, slow)
    assert "No speculation in this run" in text and "one new token" in text and "timing noise" in text
    assert "× speedup" not in text and "every round was a plain target step" in text   # the why line agrees
    auto = Trace.from_dict({**spec.to_dict(), "output": {"ids": [5, 6], "text": ""},
                            "rounds": spec.to_dict()["rounds"] * 2})
    auto.rounds[1].index, auto.rounds[1].committed = 1, [6]
    auto.config = replace(auto.config, k="auto")
    assert "the shape rule found no guess likely enough" in race.verdict_html(auto, make_plain([5, 6]))
    assert "× speedup" in race.verdict_html(make_spec(), make_plain(make_spec().output_ids))   # drafted: claimed


def test_a_stopped_race_claims_no_speedup_and_says_what_each_lane_did():
    from app import handlers
    spec, plain = make_spec(finished=False), make_plain([5, 6, 7])
    text = race.stopped_verdict_html(spec, plain)
    n = len(spec.output_ids)
    assert f"speculative stopped after {n} tokens" in text and "plain finished (3 tokens)" in text
    assert "× speedup" not in text and "needs both lanes to finish" in text
    assert "plain did not start" in race.stopped_verdict_html(spec, None)
    out = handlers.after_stop({"spec": spec, "plain": None})
    assert f"stopped after {n} tokens" in out["spec_lane"] and "not run: stopped before it started" in out["plain_lane"]
    assert f"speculative stopped after {n} tokens" in out["banner"] and out["verdict"] == race.stopped_verdict_html(spec, None)
    assert "None" not in out["stats"]                   # no "v(k = None)" for a lane that never ran
    assert "| **speedup** | — (needs both lanes finished) |" in out["stats"]
    assert out["traces"]["banner"] == out["banner"]     # a later refusal says what is still shown


def test_a_stop_asked_while_the_run_waits_in_the_queue_ends_it_when_it_starts():
    from app.handlers import RunSessions
    sessions = RunSessions()
    assert not sessions.stop("a")                       # no run: nothing to ask
    sessions.pressed("a")                               # Run pressed, the run waits in the queue
    assert sessions.stop("a")
    sessions.started("a")                               # the run starts: the stop still stands
    assert sessions.should_stop("a") and not sessions.should_stop("b")
    sessions.finished("a")
    assert not sessions.should_stop("a") and not sessions.stop("a")
    sessions.pressed("a")                               # a new press forgets an old stop
    assert not sessions.should_stop("a")


def test_a_long_job_stops_by_itself_and_only_its_own_session_and_job():
    """The A/B, k sweep and exactness lab (app/jobs.py): Stop asks, the job's loop reads it and its
    own last update says so. Another visitor's job, or the same visitor's race, is not asked."""
    from types import SimpleNamespace
    from app import jobs
    from app.handlers import RunSessions
    sessions = RunSessions()
    me, other = SimpleNamespace(session_hash="me"), SimpleNamespace(session_hash="other")
    seen = []

    def job(request, stop_after):
        with jobs.running(sessions, request, "ab") as stop_asked:
            for step in range(5):
                if stop_asked():
                    seen.append((request.session_hash, "stopped at", step))
                    return
                if step == stop_after:        # I press Stop (what my page's button does)
                    seen.append(("asked", sessions.stop(jobs.session_key(me, "ab"))))
        seen.append((request.session_hash, "done"))

    job(other, stop_after=2)          # my Stop does not reach another visitor's A/B
    job(me, stop_after=2)
    assert seen == [("asked", False), ("other", "done"), ("asked", True), ("me", "stopped at", 3)]
    assert not sessions.stop(jobs.session_key(me, "ab"))         # ended: nothing left to stop
    sessions.pressed(jobs.session_key(me, "ab"))
    assert not sessions.stop(jobs.session_key(me))               # my race is not my A/B
    assert jobs.session_key(me, "ab") != jobs.session_key(me, "sweep") != jobs.session_key(me)


def test_classroom_scaling_reaches_every_font_of_a_figure():
    import plotly.graph_objects as go
    from app.charts import _layout
    from app.scale import scale_figure
    from app.teach.figures import cost_chart
    fig = _layout(go.Figure(), "t", "x", "y")
    fig.add_annotation(text="note", font=dict(size=10))
    big = scale_figure(fig, 1.5)
    assert big.layout.annotations[0].font.size == 15 and big.layout.title.font.size == 1.5 * fig.layout.title.font.size
    assert big.layout.font.size == 18 and fig.layout.annotations[0].font.size == 10     # a copy; the default too
    assert cost_chart(None, scale=1.5).layout.font.size == 18                          # the teaching charts alike


def test_lane_order_alternates():
    assert race.lane_order(0) == ("plain", "speculative")
    assert race.lane_order(1) == ("speculative", "plain")


def test_stats_table():
    spec, plain = make_spec(), make_plain([5, 6, 7, 8])
    md = race.stats_markdown(spec, plain)
    assert "| acceptance rate | 0.600 |" in md and "| new tokens | 6 | 4 |" in md and "speedup" in md
    # round 2 drafted nothing: counted and named (issue 47: auto switching drafting off was never said)
    assert spec.stats["no_guess_rounds"] == 1 and plain.stats["no_guess_rounds"] is None
    assert "| rounds without a guess (auto switched drafting off" in md and "target wrote one token) | 1 | — |" in md
    # which numbers hold still (issue 47): a fixed chain's are timing-free, the shape rule's follow the clock
    assert f"| drafting shape | chain k = {spec.config.k} (timing-free: acceptance, α repeat exactly) |" in md
    auto = replace(spec.config, k="auto", tree="auto")
    spec.config = auto
    assert "| drafting shape | tree = auto (timing-driven: acceptance can differ run to run) |" in race.stats_markdown(spec, plain)
    spec.config = replace(auto, k_schedule=(3, 2, 0))       # a replayed schedule: timing-free again
    assert "tree = auto (timing-free" in race.stats_markdown(spec, plain)


def test_cli_show_hides_eos_like_the_live_cli(tmp_path, capsys):
    from specdec_core.cli.main import show
    spec = make_spec(eos_last=True)
    spec.config = replace(spec.config, eos_ids=(2,))
    path = tmp_path / "t.json"
    spec.save(path)
    show(str(path), colour=False)
    out = capsys.readouterr().out
    assert " mat" not in out and "</s>" not in out and "cat" in out


def test_the_verdict_speaks_plainly_first_and_keeps_the_numbers_behind_details():
    """make_spec: 3 passes for 6 tokens, 1 + 2 + 0 = 3 of them kept guesses; plain: 6 steps of 0.2 s.
    Drafting 0.1 + 0.1 s over 3 + 2 levels = 0.04 s a level, a fifth of plain's 0.2 s step."""
    import html
    import re as _re
    from specdec_core.glossary import SYMBOLS
    spec = make_spec(temperature=0.0)
    html_text = race.verdict_html(spec, make_plain(spec.output_ids, temperature=0.0))
    first = html.unescape(_re.sub(r"<[^>]+>", "", html_text.split("<br>")[0]))
    assert first.endswith("the big model ran 3 passes instead of 6: 3 of the 6 tokens were the draft's guesses that "
                          "it kept, the other 3 it wrote itself; each guessing step cost about a fifth of a pass "
                          "(on a CPU mostly the fixed cost of starting the small draft model each time, not its "
                          "size).")
    for term in SYMBOLS:        # no symbol of the glossary in the first line
        assert not _re.search(rf"(?<![\w.]){_re.escape(term.key)}(?![\w\]])", first.split("×", 1)[1]), term.key
    details = html_text.split('<details class="sd-details">')[1]
    assert "tok/s" in details and 'id="sd-why"' in details and "tok/s" not in html_text.split("<details")[0]
    assert race._fraction(0.09) == "about a tenth" and race._fraction(0.34) == "about a third"
    assert race._fraction(0.75) == "about 75%" and race._fraction(None) is None
    assert race._fraction(0.1327) == "about an eighth" and race._fraction(0.08) == "about 8%"
    # sampled lanes that stop at different lengths: passes per token, not "3 instead of 9"
    longer = make_plain(spec.output_ids + [5, 6, 7], temperature=0.0)
    assert race.plain_words(spec, longer).startswith(
        "the big model ran 3 passes for 6 tokens, where plain decoding runs one per token (9 for its 9): 3 of the 6")


def test_the_stats_table_prints_v_where_the_why_line_does():
    """A tree run (issue 39: no panel shows "—" for a number another panel prints): the stats row
    gives v at the run's mean guesses per pass, the number the why-line names."""
    from specdec_core.trace.compare import speedup_reasons
    from tests.test_player import lone_trace, tree_round
    spec = lone_trace([tree_round(i, 0.1 + 0.4 * i) for i in range(4)], temperature=0.8)
    plain = make_plain(list(range(40, 52)), temperature=0.8)
    v = speedup_reasons(spec, plain)["v"]
    md = race.stats_markdown(spec, plain)
    assert f"| v at 5.0 guesses per pass (verify ÷ target step, fitted line) | {v:.2f} |" in md
