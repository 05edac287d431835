"""The one greedy check (trace.compare): identical / numerics tie / real difference, on hand-built
plain traces with known top-2 logit gaps; the bench, the CLI and the app all use it."""
import math

import pytest

from specdec_core.bench import check_greedy
from specdec_core.bench.lanes import Run
from specdec_core.trace import Correction, Round, Trace, TraceConfig, greedy_check, measured_speedup, tie_tolerance


def plain_trace(ids, gaps, dtype="float32") -> Trace:
    """A plain trace whose target had top-2 logit gap gaps[i] at output position i."""
    rounds = []
    for i, (t, gap) in enumerate(zip(ids, gaps)):
        p1 = 1 / (1 + math.exp(-gap))      # two tokens: log p1 − log p2 = gap
        top = [[t, f"w{t}", p1], [t + 1, "z", 1 - p1]]
        rounds.append(Round(index=i, t_start=0.1 * i, t_end=0.1 * (i + 1), draft_s=0.0, verify_s=0.09,
                            overhead_s=0.01, k=0, drafted=[], n_accepted=0,
                            correction=Correction("bonus", t, f"w{t}", p_top=top, p_top_raw=top), committed=[t]))
    cfg = {"target": "t", "draft": None, "k": 0, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0,
           "max_new_tokens": len(ids), "dtype": dtype, "mode": "autoregressive"}
    return Trace(config=TraceConfig(**cfg), prompt={"text": "", "ids": [1]}, rounds=rounds, output={"ids": list(ids), "text": ""},
                 prefill_s=0.0, finished=True, stop_reason="max_new_tokens")


def test_identical_tie_and_difference():
    plain = plain_trace([5, 6, 7, 8], [2.0, 4e-4, 0.3, 1.0])
    assert greedy_check(plain, [5, 6, 7, 8]).kind == "identical"
    tie = greedy_check(plain, [5, 9, 7, 8])               # flips where the gap is 4e-4 < 1e-3
    assert (tie.kind, tie.position, tie.ok) == ("tie", 1, True)
    assert tie.logit_gap == pytest.approx(4e-4, rel=1e-6)
    real = greedy_check(plain, [5, 6, 9, 8])              # flips where the gap is 0.3: a bug
    assert (real.kind, real.position, real.ok) == ("different", 2, False)
    assert "real difference" in real.text() and "numerics tie" in tie.text()
    assert "identical token for token (4 tokens)" in greedy_check(plain, [5, 6, 7, 8]).text()
    # stopping early is never a tie, whatever the gap at the cut
    assert greedy_check(plain, [5]).kind == "different"


def test_tolerance_follows_the_dtype():
    assert tie_tolerance("float32") == 1e-3 and tie_tolerance("torch.bfloat16") == 0.5
    plain = plain_trace([5, 6], [2.0, 0.3], dtype="bfloat16")
    assert greedy_check(plain, [5, 9]).kind == "tie"     # 0.3 < 0.5 in bf16


def test_bench_uses_the_same_check():
    plain = plain_trace([1, 2, 3], [1.0, 2e-4, 1.0])
    runs = [Run("plain", "greedy", "p", 0, 1.0, [1, 2, 3], {}, plain),
            Run("spec_k2", "greedy", "p", 0, 1.0, [1, 2, 3], {}),
            Run("spec_k3", "greedy", "p", 0, 1.0, [1, 4, 3], {}),     # tie at 1
            Run("hf_plain", "greedy", "p", 0, 1.0, [1, 2, 5], {})]    # real difference at 2
    g = check_greedy(runs)
    assert g["identical"] == 1 and g["checked"] == 3 and g["tolerance"] == 1e-3     # plain is the reference
    assert [(m["lane"], m["position"]) for m in g["ties"]] == [("spec_k3", 1)]
    assert [(m["lane"], m["position"]) for m in g["mismatches"]] == [("hf_plain", 2)]


def test_measured_speedup():
    plain = plain_trace([1, 2, 3, 4], [1.0] * 4)
    fast = plain_trace([1, 2, 3, 4], [1.0] * 4)
    fast.rounds[-1].t_end = 0.35        # the same 4 tokens, finished at 0.35 s instead of 0.4 s
    assert measured_speedup(fast, plain) == pytest.approx(0.4 / 0.35)
