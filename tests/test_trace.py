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
    schema = json_schema()
    assert schema["$id"] == "specdec.trace/2"
    assert schema["properties"]["schema"]["enum"] == ["specdec.trace/1", "specdec.trace/2"]


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
    """speedup_why: measured α, c, v(k) at the most used k, and the theory's speedup from them —
    checked against numbers worked out by hand from synthetic rounds."""
    from specdec_core import ModelPair, autoregressive_generate, speculative_generate
    from specdec_core.trace.compare import cost_ratios, speedup_reasons, speedup_why

    from .conftest import tiny_llama
    from .test_timeline import make_plain, make_spec
    # Rounds verifying 3, 2 and 0 drafts (k = 3 wins the tie: the larger k). α = mean(0.5, 0.5, 0.9,
    # 0.8) = 0.675; c = 0.2 s of drafting for 5 drafts ÷ plain's 0.2 s step = 0.2; measured v(3) =
    # v(2) = (0.4 s clock − 0.1 s draft) ÷ 0.2 s = 1.5; the theory's line through (0, 1): slope =
    # (2·0.5 + 3·0.5)/(2² + 3²) = 0.19231, v(3) = 1.57692; theory (1 − 0.675⁴)/(1 − 0.675) = 2.43818
    # / (3·0.2 + 1.57692) = 1.12001.
    spec, plain = make_spec(), make_plain([5, 6, 7, 8], step=0.2)
    r = speedup_reasons(spec, plain)
    assert r["k"] == 3 and r["alpha"] == pytest.approx(0.675) and r["c"] == pytest.approx(0.2)
    assert r["v_measured"] == pytest.approx(1.5) and r["v"] == pytest.approx(1.57692, abs=1e-5)
    assert r["theory"] == pytest.approx(1.12001, abs=1e-4) and r["unstable"] is None
    assert r["plain_share"] == pytest.approx(1 / 3) and cost_ratios(spec, plain)["v"] == pytest.approx({2: 1.5, 3: 1.5})
    text = speedup_why(spec, plain)
    assert "α = 0.68" in text and "c = 0.20" in text and "v(3) = 1.58" in text and "1.12×" in text
    # and the α this cost would need for 2×: the line's best k reaches 2 there, and not just below it
    from specdec_core.costs.theory import best_k, line_v
    need, v = r["alpha_for_2x"], lambda k: line_v(r["slope"], k)
    assert best_k(need, 0.2, v)[1] >= 2.0 > best_k(need - 1e-3, 0.2, v)[1]
    assert text.endswith(f"For 2× at this c and v the theory needs α ≥ {need:.2f}.")
    pair = ModelPair.from_models(tiny_llama(vocab_size=16, seed=0), tiny_llama(vocab_size=16, seed=1))
    plain = autoregressive_generate(pair, [1, 2, 3], max_new_tokens=30)
    plain_only = speculative_generate(pair, [1, 2, 3], k=3, max_new_tokens=8, k_schedule=[0] * 8)
    assert speedup_reasons(plain_only, plain)["k"] is None and "plain target step" in speedup_why(plain_only, plain)


def test_stats_are_computed_once_per_trace_state(monkeypatch):
    """A finished trace computes its statistics once; a streaming one recomputes when it gains a round."""
    from specdec_core.decoding.speculative import stream_speculative
    from specdec_core.trace import schema as record
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
