"""Trace JSON round-trip, validation errors, and statistics definitions."""
import json

import pytest

from specdec_core import ModelPair, Trace, TraceFormatError, autoregressive_generate, speculative_generate
from specdec_core.trace import cost_ratios, greedy_check, json_schema

from .conftest import tiny_llama


@pytest.fixture(scope="module")
def traces():
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    spec = speculative_generate(pair, [1, 2, 3], k=3, temperature=1.0, max_new_tokens=20, seed=7)
    plain = autoregressive_generate(pair, [1, 2, 3], temperature=1.0, max_new_tokens=20, seed=7)
    return spec, plain


def test_round_trip_is_lossless(traces):
    for trace in traces:
        again = Trace.from_json(trace.to_json())
        assert again.to_dict() == trace.to_dict()
        assert again.output_ids == trace.output_ids


def test_schema_ships_with_package():
    assert json_schema()["properties"]["schema"]["const"] == "specdec.trace/1"


def test_stats_definitions(traces):
    spec, plain = traces
    s = spec.stats
    drafted = [t for r in spec.rounds for t in r.drafted]
    assert s["new_tokens"] == len(spec.output_ids) == sum(len(r.committed) for r in spec.rounds)
    assert s["acceptance_rate"] == pytest.approx(sum(t.accepted for t in drafted) / len(drafted))
    evaluated = [t.overlap for t in drafted if t.evaluated]
    assert s["alpha"] == pytest.approx(sum(evaluated) / len(evaluated))
    assert s["mean_committed_per_round"] == pytest.approx(s["new_tokens"] / s["rounds"])
    assert s["tokens_per_s"] == pytest.approx(s["new_tokens"] / s["wall_s"])
    # Plain traces: one bonus token per round, no drafts.
    p = plain.stats
    assert p["rounds"] == p["new_tokens"] and p["acceptance_rate"] is None and p["alpha"] is None
    assert all(r.k == 0 and r.correction.kind == "bonus" for r in plain.rounds)
    assert p["step_s"] > 0
    ratios = cost_ratios(spec, plain)
    assert ratios["c"] > 0 and all(v > 0 for v in ratios["v"].values())
    assert json.dumps(s, allow_nan=False)   # None, never NaN


def test_round_records_are_consistent(traces):
    spec, _ = traces
    for r in spec.rounds:
        assert r.committed[: r.n_accepted] == [t.id for t in r.drafted[: r.n_accepted]]
        assert all(t.accepted for t in r.drafted[: r.n_accepted])
        if r.n_accepted < len(r.drafted):
            rejected = r.drafted[r.n_accepted]
            assert rejected.evaluated and not rejected.accepted and rejected.u >= rejected.p / rejected.q
            assert r.correction.kind == "resample" and r.correction.residual_top
            assert not any(t.evaluated for t in r.drafted[r.n_accepted + 1:])
        else:
            assert r.correction.kind == "bonus"
        assert r.t_end >= r.t_start and r.draft_s >= 0 and r.verify_s > 0


def test_first_difference_on_real_traces(traces):
    """The greedy check (trace.compare) finds where two outputs first differ."""
    spec, _ = traces
    other = Trace.from_json(spec.to_json())
    assert greedy_check(spec, other.output_ids).kind == "identical"
    other.output["ids"] = list(spec.output_ids)
    other.output["ids"][2] = (other.output["ids"][2] + 1) % 8
    assert greedy_check(spec, other.output_ids).position == 2


@pytest.mark.parametrize("mutate,message", [
    (lambda d: "not json {", "invalid JSON"),
    (lambda d: json.dumps([1, 2]), "expected \"schema\""),
    (lambda d: json.dumps({**d, "schema": "other/2"}), "expected \"schema\""),
    (lambda d: json.dumps({k: v for k, v in d.items() if k != "rounds"}), "rounds"),
    (lambda d: json.dumps({**d, "rounds": [{**d["rounds"][0], "k": "four"}]}), "rounds/0/k"),
    (lambda d: json.dumps({**d, "output": {"ids": [1], "text": ""}}), "commit"),
])
def test_malformed_files_give_clear_errors(traces, mutate, message):
    d = traces[0].to_dict()
    with pytest.raises(TraceFormatError, match=message):
        Trace.from_json(mutate(d))


def test_the_verdict_explains_itself_from_the_two_traces():
    """speedup_why: measured α, c, v(k) at the most used k, and the theory's speedup from them."""
    from specdec_core import ModelPair, autoregressive_generate, speculative_generate
    from specdec_core.costs.theory import predicted_speedup
    from specdec_core.trace import cost_ratios
    from specdec_core.trace.compare import speedup_reasons, speedup_why

    from .conftest import tiny_llama
    pair = ModelPair.from_models(tiny_llama(vocab_size=16, seed=0), tiny_llama(vocab_size=16, seed=1))
    spec = speculative_generate(pair, [1, 2, 3], k=3, max_new_tokens=30)
    plain = autoregressive_generate(pair, [1, 2, 3], max_new_tokens=30)
    r = speedup_reasons(spec, plain)
    costs = cost_ratios(spec, plain)
    assert r["k"] == 3 and r["alpha"] == spec.stats["alpha"] and r["c"] == costs["c"] and r["v"] == costs["v"]["3"]
    n_plain = spec.stats["rounds_by_k"].get("0", 0)   # the last round cannot draft past max_new_tokens
    assert r["theory"] == predicted_speedup(r["alpha"], 3, r["c"], r["v"]) and r["plain_share"] == n_plain / len(spec.rounds)
    text = speedup_why(spec, plain)
    assert f"α = {r['alpha']:.2f}" in text and f"v(3) = {r['v']:.2f}" in text and f"{r['theory']:.2f}×" in text
    plain_only = speculative_generate(pair, [1, 2, 3], k=3, max_new_tokens=8, k_schedule=[0] * 8)
    assert speedup_reasons(plain_only, plain)["k"] is None and "plain target step" in speedup_why(plain_only, plain)


def test_stats_are_computed_once_per_trace_state(monkeypatch):
    """A finished trace computes its statistics once; a streaming one recomputes when it gains a round."""
    from specdec_core.decoding.speculative import stream_speculative
    from specdec_core.trace import record
    calls = []
    real = record.compute_stats
    monkeypatch.setattr(record, "compute_stats", lambda t: calls.append(len(t.rounds)) or real(t))
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1))
    seen = []
    for trace in stream_speculative(pair, [1, 2, 3], k=2, temperature=1.0, max_new_tokens=10, seed=0):
        seen.append(trace.stats["rounds"])
        assert trace.stats["rounds"] == len(trace.rounds)        # read twice, computed once
    assert calls == sorted(set(calls)) and len(calls) >= len(set(seen))
    n = len(calls)
    assert [trace.stats["new_tokens"] for _ in range(5)] == [10] * 5 and len(calls) == n
    trace.rounds.pop()                                              # a changed trace is recomputed
    assert trace.stats["rounds"] == len(trace.rounds) and len(calls) == n + 1
