"""The trace schema policy (docs/ARCHITECTURE.md): fields older readers can ignore are optional and
keep the id; token trees, which a /1 reader would misread, made "specdec.trace/2"; old files always
load; a newer schema is refused with a clear message."""
import json
from pathlib import Path

import pytest

from app import charts, race, timeline
from specdec_core import ModelPair, Trace, TraceFormatError, speculative_generate

from .conftest import tiny_llama

DATA = Path(__file__).resolve().parent / "data"


def test_traces_from_before_the_regroup_still_load_and_render():
    """Written by the code of stop 7 (no kernels, no k_policy, no k_schedule fields)."""
    spec = Trace.load(DATA / "trace_v1_before_regroup.speculative.json")
    plain = Trace.load(DATA / "trace_v1_before_regroup.plain.json")
    assert spec.config.kernels is None and all(r.k_policy is None for r in spec.rounds)
    assert spec.stats["new_tokens"] == len(spec.output_ids) > 0
    assert "sd-tok" in timeline.timeline_html(spec)
    assert "kernels" not in race.stats_markdown(spec, plain)          # nothing invented
    assert len(charts.all_run_charts(spec, plain)) == 5


def test_traces_from_before_spans_read_as_recorded():
    """Written before output.spans / token_bytes existed (an emoji answer: its tokens read "�"
    alone): they load, every view reads the recorded token texts, nothing is invented."""
    from specdec_core.trace.token_text import display_texts
    spec = Trace.load(DATA / "trace_v1_before_spans.speculative.json")
    plain = Trace.load(DATA / "trace_v1_before_spans.plain.json")
    assert "spans" not in spec.output and spec.token_bytes is None
    recorded = [text for r in spec.rounds
                for text in ([t.text for t in r.drafted[: r.n_accepted]] + [r.correction.text])[: len(r.committed)]]
    texts = display_texts(spec)
    assert [t.text for t in texts.output] == recorded and all(t.part == "" for t in texts.output)
    assert "sd-tok" in timeline.timeline_html(spec) and "sd-lane-text" in timeline.spec_lane_html(spec)
    assert len(charts.all_run_charts(spec, plain)) == 5


def test_new_fields_round_trip_under_version_2():
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1), fast_path=True)
    trace = speculative_generate(pair, [1, 2, 3], k="auto", tree=None, max_new_tokens=10)
    d = json.loads(trace.to_json())
    assert d["schema"] == "specdec.trace/2" and d["config"]["tree"] is None
    assert d["config"]["kernels"]["target"].startswith("onednn-prepacked")
    assert all(r["k_policy"]["kind"] for r in d["rounds"])
    assert len(d["output"]["spans"]) == len(d["output"]["ids"]) and d["token_bytes"] == {}
    back = Trace.from_json(trace.to_json())
    assert back.config.kernels == trace.config.kernels
    assert back.output["spans"] == trace.output["spans"]
    assert [r.k_policy for r in back.rounds] == [r.k_policy for r in trace.rounds]


def test_a_future_schema_is_refused_with_a_clear_message():
    d = json.loads((DATA / "trace_v1_before_regroup.plain.json").read_text())
    d["schema"] = "specdec.trace/3"
    with pytest.raises(TraceFormatError, match='expected "schema": "specdec.trace/2" \\(or an older "specdec.trace/1"\\), '
                                               'found \'specdec.trace/3\''):
        Trace.from_dict(d)


def test_tree_traces_are_version_2_and_checked():
    """A tree round round-trips and renders; a /1 document may not carry tree fields (a /1 reader
    would misread them), and a node's parent must come before it."""
    from .test_tree import tiny_head_pair
    pair = tiny_head_pair()
    plans = [{"depth": 2, "width": 3, "frontier": 1, "nodes": None, "keep": None}] * 8
    trace = speculative_generate(pair, [1, 2, 3], 1, k_schedule=plans, max_new_tokens=8)
    d = json.loads(trace.to_json())
    assert d["schema"] == "specdec.trace/2" and d["rounds"][0]["plan"]["width"] == 3
    back = Trace.from_json(trace.to_json())
    assert back.to_dict() == trace.to_dict() and back.k_schedule() == trace.k_schedule()
    old = dict(d, schema="specdec.trace/1")
    with pytest.raises(TraceFormatError, match="token trees .* need \"schema\": \"specdec.trace/2\""):
        Trace.from_dict(old)
    tree_round = next(r for r in d["rounds"] if r.get("tree"))
    tree_round["tree"][0]["parent"] = 0
    with pytest.raises(TraceFormatError, match="a node's parent must come before it"):
        Trace.from_dict(d)


def test_a_64_token_tree_trace_stays_small():
    """Big trees (up to 64 nodes a round) on the default target: far below the 10 MB upload cap."""
    from specdec_core import load_pair
    pair = load_pair("smollm2-135m", device="cpu")
    ids = pair.encode_prompt("Tell me a long story about a lighthouse keeper.")
    trace = speculative_generate(pair, ids, tree=(64, 8), max_new_tokens=64)
    assert sum(bool(r.tree) for r in trace.rounds) > 0
    size = len(trace.to_json(indent=1).encode())
    print(f"\n64-token trace with 64-node trees: {size / 1e6:.2f} MB")
    assert size < 2_000_000
