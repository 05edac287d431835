"""app.charts on hand-built traces: expected traces, values, axis titles, purity; views on upload."""
import json

import plotly.graph_objects as go
import pytest

from specdec_core import TraceFormatError
from specdec_core.costs import theory
from specdec_core.trace import measured_speedup
from specdec_core.trace.decisions import DECISIONS, DRAFT_COLOUR, RESIDUAL_COLOUR, TARGET_COLOUR

from specdec_core.trace.stats import wilson_interval
from app import charts, round_charts, views
from tests.test_timeline import make_plain, make_spec


def axis_titles(fig, n=""):
    return fig.layout[f"xaxis{n}"].title.text, fig.layout[f"yaxis{n}"].title.text


def test_run_charts_are_figures_with_axis_titles_and_units():
    spec, plain = make_spec(), make_plain([5, 6, 7, 8, 9, 10])
    figs = charts.all_run_charts(spec, plain)
    assert len(figs) == 5 and all(isinstance(f, go.Figure) for f in figs)
    for f in figs:
        x, y = axis_titles(f)
        assert x and y and f.layout.title.text
    assert "(s)" in axis_titles(figs[2])[0] and "(ms)" in axis_titles(figs[3])[1]
    assert "(×)" in axis_titles(figs[4])[1]


def test_charts_are_pure():
    spec, plain = make_spec(), make_plain([5, 6, 7])
    before = spec.to_json()
    a = [f.to_json() for f in charts.all_run_charts(spec, plain)]
    b = [f.to_json() for f in charts.all_run_charts(spec, plain)]
    assert a == b and spec.to_json() == before


def test_acceptance_by_position_values_and_theory_line():
    spec = make_spec()
    fig = charts.acceptance_by_position(spec)
    bar, line = fig.data
    assert list(bar.x) == [1, 2, 3] and list(bar.y) == pytest.approx([1.0, 0.5, 0.0])
    alpha = spec.stats["alpha"]
    assert list(line.y) == pytest.approx([alpha, alpha ** 2, alpha ** 3])
    assert bar.marker.color == DECISIONS["accepted"].colour
    # every bar carries its count (kept/drafted on hover, rounds under the axis) and a 95 % (Wilson)
    # interval: position 3 is 0 of 1, not a sure 0
    assert list(bar.text) == ["2/2", "1/2", "0/1"]
    assert list(fig.layout.xaxis.ticktext) == ["1<br>2", "2<br>2", "3<br>1"]
    lo3, hi3 = wilson_interval(0, 1)
    assert lo3 == 0.0 and hi3 == pytest.approx(0.79, abs=0.01) and bar.error_y.array[2] == pytest.approx(hi3)


def test_wilson_interval():
    assert wilson_interval(0, 0) == (None, None)
    lo, hi = wilson_interval(1, 1)
    assert hi == 1.0 and lo == pytest.approx(0.207, abs=0.001)
    lo, hi = wilson_interval(50, 100)
    assert (lo, hi) == (pytest.approx(0.404, abs=0.001), pytest.approx(0.596, abs=0.001))


def test_committed_histogram_vs_geometric_prediction():
    spec = make_spec()
    fig = charts.committed_histogram(spec)
    bar, line = fig.data
    assert list(bar.x) == [1, 2, 3, 4]
    assert list(bar.y) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0.0])   # rounds commit 2, 3, 1 tokens
    # Each round's own geometric law, averaged (α = 0.675): the 3-draft round gives (0.325, 0.219375,
    # 0.148078, 0.307547), the 2-draft round (0.325, 0.219375, 0.455625), the plain step (1):
    assert list(line.y) == pytest.approx([(0.325 + 0.325 + 1) / 3, 2 * 0.219375 / 3,
                                          (0.148078125 + 0.455625) / 3, 0.307546875 / 3])
    assert not fig.layout.annotations                          # a fixed k from one source: no caption


def test_tokens_vs_time_has_both_lanes_as_step_curves():
    spec, plain = make_spec(), make_plain([5, 6, 7, 8])
    fig = charts.tokens_vs_time(spec, plain)
    names = [d.name for d in fig.data]
    assert names == ["plain", "speculative"]
    sp = fig.data[1]
    assert list(sp.x) == pytest.approx([0, 0.1, 0.5, 0.9, 1.1]) and list(sp.y) == [0, 0, 2, 5, 6]
    assert sp.line.shape == "hv"
    assert len(charts.tokens_vs_time(spec, None).data) == 1


def test_time_split_stacks_draft_verify_overhead_in_ms():
    fig = charts.time_split(make_spec())
    assert [d.name.split()[0] for d in fig.data] == ["draft", "verify", "overhead"]
    assert fig.layout.barmode == "stack"
    assert list(fig.data[1].y) == pytest.approx([250, 250, 150])


def test_speedup_vs_k_uses_measured_alpha_c_v_and_marks_the_run():
    spec, plain = make_spec(), make_plain([5, 6, 7, 8], step=0.2)
    fig = charts.speedup_vs_k(spec, plain)
    curve, point = fig.data
    assert list(curve.x) == list(range(1, charts.K_MAX + 1))
    # By hand from the synthetic rounds: α = mean(0.5, 0.5, 0.9, 0.8) = 0.675; c = 0.2 s of drafting
    # for 5 drafts ÷ plain's 0.2 s step = 0.2; v(2) = v(3) = (0.4 s clock − 0.1 s draft) ÷ 0.2 s = 1.5,
    # one round each → the line through (0, 1): slope = (2·0.5 + 3·0.5)/(2² + 3²) = 2.5/13, v(3) =
    # 1.57692. E[τ] = (1 − 0.675⁴)/(1 − 0.675) = 2.43818 → 2.43818 / (3·0.2 + 1.57692) = 1.12001.
    assert curve.y[2] == pytest.approx(1.12001, abs=1e-4)
    # the theory's numbers are on the chart, in its caption (short legend names survive a projector)
    assert "v(k) = 1 + 0.192·k" in " ".join(a.text for a in fig.layout.annotations)
    # measured: 6 tokens in 1.1 s against 4 tokens in 0.9 s
    assert list(point.x) == [3] and point.y[0] == pytest.approx((6 / 1.1) / (4 / 0.9))
    # without a plain lane there is nothing to compare with: an explained empty figure
    empty = charts.speedup_vs_k(spec, None)
    assert not empty.data and empty.layout.annotations


def test_round_figure_p_q_and_decisions():
    fig = round_charts.round_figure(make_spec(), 0)
    p, q, marks = fig.data
    assert p.marker.color == TARGET_COLOUR and q.marker.color == DRAFT_COLOUR
    assert list(p.y) == pytest.approx([0.9, 0.1, 0.5]) and list(q.y) == pytest.approx([0.8, 0.7, 0.6])
    assert list(marks.marker.color) == [DECISIONS[k].colour for k in ("accepted", "rejected", "not reached")]
    assert "␣the" in p.x[0] and "&" in p.x[1]
    assert axis_titles(fig) == ("drafted token (position: text)", "probability")
    assert not round_charts.round_figure(make_spec(), 2).data          # nothing drafted: explained, no bars


def test_position_figure_rejection_shows_u_ratio_and_residual():
    fig = round_charts.position_figure(make_spec(), 0, 2)
    names = [d.name for d in fig.data]
    assert names[:2] == ["p (target)", "q (draft)"]
    region = next(d for d in fig.data if d.name and d.name.startswith("accept region"))
    assert region.y[1] == pytest.approx(0.1 / 0.7)
    u = next(d for d in fig.data if d.name == "uniform draw u")
    assert u.y[0] == pytest.approx(0.9) and u.marker.color == DECISIONS["rejected"].colour
    res = next(d for d in fig.data if (d.name or "").startswith("residual"))
    assert res.marker.color == RESIDUAL_COLOUR and list(res.y) == pytest.approx([0.6, 0.3])
    assert res.x[0].startswith("▶")
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text and fig.layout.yaxis2.title.text


def test_position_figure_accepted_has_no_residual_and_greedy_uses_raw():
    fig = round_charts.position_figure(make_spec(), 1, 1)
    assert not any(d.name and d.name.startswith("residual") for d in fig.data)
    greedy = round_charts.position_figure(make_spec(temperature=0.0), 0, 1)
    assert "raw" in greedy.data[0].name


def test_views_from_uploaded_files_and_bad_file(tmp_path):
    spec, plain = make_spec(), make_plain([5, 6])
    a, b = tmp_path / "s.json", tmp_path / "p.json"
    spec.save(a), plain.save(b)
    got_spec, got_plain, names = views.read_uploads([str(b), str(a)])
    assert got_spec.output_ids == spec.output_ids and got_plain.config.k == 0
    v = views.views(got_spec, got_plain, "upload", files=names)
    assert "Loaded from file" in v["banner"] and v["round_max"] == 2 and (v["round"], v["position"]) == (0, 2)
    assert "sd-rejected" in v["timeline"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "nope"}))
    with pytest.raises(TraceFormatError, match="bad.json"):
        views.read_uploads([str(bad)])
    files = views.write_files(got_spec, got_plain)
    assert len(files) == 2 and all(f.endswith(".trace.json") for f in files)


def test_example_assets_load_and_render():
    """The two recorded races the page opens on: bundled, recorded at the page's defaults (T 0.7,
    top-p 0.9, seed 0, lanes interleaved) on a named machine; the switch's labels carry each race's
    measured speedup and the sentence its kept guesses, all read from the traces."""
    from app import explain, form_fields, handlers
    from app.ui import DEFAULT_SAMPLER
    races = views.recorded_races()
    assert list(races) == [stem for stem, _, _ in explain.FIRST_PAINT]
    for stem, (spec, plain) in races.items():
        assert spec.config.k != 0 and plain.config.mode == "autoregressive"
        for t in (spec, plain):
            assert (t.config.temperature, t.config.top_p, t.config.seed) == (
                DEFAULT_SAMPLER["temperature"], DEFAULT_SAMPLER["top_p"], DEFAULT_SAMPLER["seed"])
            assert t.config.interleaved and t.config.machine
        v = views.views(spec, plain, "example")
        assert "Recorded race" in v["banner"] and spec.config.machine in v["banner"]
        assert "sd-accepted" in v["timeline"] and "sd-rejected" in v["timeline"]     # sampled: rejections
        shown = handlers.show_recorded(stem)
        assert shown["traces"]["spec"] is not None and shown["prompt"] == explain.EXAMPLES[
            next(i for s, i, _ in explain.FIRST_PAINT if s == stem)][1]
    copy, everyday = (stem for stem, _, _ in explain.FIRST_PAINT)      # the reuse task first (issue 44)
    (spec_e, plain_e), (spec_c, plain_c) = races[everyday], races[copy]
    labels = dict((stem, label) for label, stem in views.recorded_choices(races))
    assert labels[everyday].endswith(f"{measured_speedup(spec_e, plain_e):.2f}×")
    assert labels[copy].endswith(f"{measured_speedup(spec_c, plain_c):.2f}×")
    # the copy-heavy race wins more, because more of its tokens were the draft's kept guesses
    assert measured_speedup(spec_c, plain_c) > measured_speedup(spec_e, plain_e)
    kept = [sum(r.n_accepted for r in s.rounds) for s in (spec_e, spec_c)]
    why = views.recorded_why()
    assert f"**{kept[0]} of {len(spec_e.output_ids)}**" in why and f"**{kept[1]} of {len(spec_c.output_ids)}**" in why
    # after a Run the sentence speaks of that race, beside the recorded ones
    mine = views.views(spec_e, plain_e, "run")["recorded_why"]
    assert mine.startswith("**Your race:**") and f"**{kept[0]} of {len(spec_e.output_ids)}** tokens" in mine
    with pytest.raises(form_fields.UserError):
        handlers.show_recorded("no-such-race")


def test_a_recorded_race_names_its_machine_beside_this_one(monkeypatch):
    """Issue 61: recorded races quoted 21–37 tok/s where this machine gave 6–13, without saying where
    they were recorded: the banner names the recording machine and this one."""
    from specdec_core import Trace, data
    from app import views
    plain = Trace.load(data.file("examples", "example_plain.trace.json"))
    monkeypatch.setattr(views, "describe_machine", lambda device: "8-core test CPU")
    for kind in ("example", "upload"):
        text = views.banner(None, plain, kind, "x.json")
        assert f"**{plain.config.machine}**" in text and "**8-core test CPU**" in text, text
