"""Bench smoke test on a tiny random pair: every lane and field is in the report, greedy lanes
agree token for token, the reports are written, and a greedy mismatch is caught. No timing asserts."""
import json

import pytest

from specdec_core import ModelPair
from specdec_core.bench import parse_sweep, run_bench
from specdec_core.bench.report import write_reports

from .conftest import tiny_llama

K = 2


@pytest.fixture(scope="module")
def report():
    def tiny_pair(fast_path):
        target, draft = tiny_llama(vocab_size=32, seed=0, layers=2), tiny_llama(vocab_size=32, seed=1)
        return ModelPair.from_models(target, draft, fast_path=fast_path)
    prompts = [{"name": "rep", "ids": [1, 2, 3, 4, 1, 2, 3]}, {"name": "short", "ids": [5, 6, 7]}]
    return run_bench(tiny_pair(True), prompts, k=K, max_new_tokens=8, repeats=1, sweep=[1, 2], progress=False,
                     stock_pair=tiny_pair(False), trees=[(4, 2)])


def test_every_lane_and_field(report):
    greedy = report["results"]["greedy"]["lanes"]
    sampling = report["results"]["sampling"]["lanes"]
    main = {"plain", f"spec_k{K}", "spec_auto", "spec_chain_auto", "tree_4x2", "hf_plain", f"hf_assisted_k{K}", "hf_assisted_dynamic",
            f"hf_prompt_lookup_k{K}", f"ngram_k{K}", "plain_stock", f"spec_k{K}_stock", "hf_plain_stock"}
    assert set(greedy) == main | {"spec_k1"}          # + the sweep (k = 2 is the main lane)
    assert set(sampling) == main
    for lanes in (greedy, sampling):
        for name, row in lanes.items():
            assert row["tokens"] > 0 and row["tokens_per_s"] > 0, name
            for key in ("vs_plain", "vs_hf_ref", "outside_forward_share", "vs_plain_min_prompt"):
                assert row[key] is not None, (name, key)
            assert set(row["per_prompt"]) == {"rep", "short"}
            if row["impl"] == "ours" and row["k"] != 0:     # plain lanes draft nothing
                th = row["theory"]
                for key in ("alpha", "c", "mean_committed", "guesses_per_pass", "measured_decode_speedup",
                            "predicted_mix"):
                    # the shape rule may have decoded with plain steps only (nothing drafted: no α, c);
                    # a chain's E[τ] mix predicts no tree
                    assert key in th and (th[key] is not None or name in ("spec_auto", "spec_chain_auto")
                                          or (key == "predicted_mix" and row["tree"] is not None)), (name, key)
                assert set(row["time_split"]) == {"prefill_share", "draft_share", "verify_share",
                                                  "overhead_share", "between_rounds_share"}
        assert lanes["plain"]["vs_plain"] == pytest.approx(1.0)
        assert lanes["plain"]["vs_plain_equal_length_median"] == pytest.approx(1.0)
        for name, row in lanes.items():     # ours: traces, so a per-prompt ratio at equal length
            assert (row["vs_plain_equal_length_min"] is not None) == (row["impl"] == "ours"), name
        assert lanes["hf_assisted_dynamic"]["vs_hf_ref"] == pytest.approx(1.0)
        assert lanes[f"spec_k{K}"]["theory"]["predicted"] is not None
        decisions = lanes["spec_auto"]["auto"]["decisions"]     # the shape rule's decisions
        assert decisions and all(isinstance(k, str) for k in decisions)
        # a stock lane's theory is against plain decoding on stock kernels
        assert lanes[f"spec_k{K}_stock"]["stock"] and lanes[f"spec_k{K}_stock"]["theory"]["c"] is not None
    h = report["headline"]["greedy"]
    for key in ("plain_vs_hf_plain_stock", "plain_vs_plain_stock", f"spec_k{K}_vs_spec_k{K}_stock",
                "auto_vs_hf_assisted_dynamic", f"spec_k{K}_vs_hf_assisted_k{K}",
                f"ours_ngram_k{K}_vs_hf_prompt_lookup_k{K}", "auto_vs_plain", "auto_vs_best_fixed_k",
                f"spec_k{K}_measured_over_predicted"):
        assert h[key] is not None, key


def test_greedy_lanes_agree(report):
    g = report["greedy_check"]
    n_greedy_lanes = len(report["results"]["greedy"]["lanes"])
    assert g["checked"] == 2 * (n_greedy_lanes - 1)    # every lane but plain itself: 2 prompts × 1 repeat
    assert g["identical"] == g["checked"] and not g["mismatches"] and not g["ties"]


def test_a_greedy_mismatch_is_caught():
    """A lane whose output differs from plain where the target's top-2 logits are far apart is
    reported as a mismatch (and the command exits non-zero on it); an identical lane is not."""
    from specdec_core import autoregressive_generate
    from specdec_core.bench.lanes import Run
    from specdec_core.bench.run import check_greedy
    from specdec_core.trace import logit_gap_at
    pair = ModelPair.from_models(tiny_llama(vocab_size=32, seed=0), "ngram")
    plain = autoregressive_generate(pair, [1, 2, 3], max_new_tokens=8)
    ids = plain.output_ids
    pos = max(range(len(ids)), key=lambda i: logit_gap_at(plain, i))       # a clear argmax, no tie
    wrong = ids[:pos] + [(ids[pos] + 1) % 32] + ids[pos + 1:]
    runs = [Run("plain", "greedy", "p", 0, 1.0, ids, {}, plain), Run("spec_k2", "greedy", "p", 0, 1.0, ids, {}, None),
            Run("broken", "greedy", "p", 0, 1.0, wrong, {}, None)]
    g = check_greedy(runs)
    assert g["checked"] == 2 and g["identical"] == 1 and not g["ties"]
    assert [(m["lane"], m["position"]) for m in g["mismatches"]] == [("broken", pos)]
    assert g["mismatches"][0]["logit_gap"] > g["tolerance"]


def test_kernel_section(report):
    """Pass costs, breakdown and the weight-streaming floor, for the fast-path and the stock pair."""
    sec = report["kernels"]
    assert set(sec["kernels"]) == {"onednn-prepacked", "stock"}
    for name, k in sec["kernels"].items():
        # fp32 matrices of 2 layers (q, o 16×16; k, v 8×16; gate, up, down 16×32) + lm_head 32×16
        assert k["weight_bytes"] == 4 * (2 * (2 * 16 * 16 + 2 * 8 * 16 + 3 * 16 * 32) + 32 * 16)
        assert k["floor_ms"] > 0 and k["step_over_floor"] > 0 and k["read_bandwidth_gb_s"] > 0
        lo, hi = k["read_bandwidth_range_gb_s"]
        assert lo <= k["read_bandwidth_gb_s"] <= hi
        assert sorted(k["pass_costs"]["v"]) == ["1", "2"]        # k up to max(K, sweep) = 2
        assert set(k["breakdown_ms"]) == {"step (1 token)", "verify (3 tokens)"}
    assert report["config"]["kernels"]["lanes"]["target"].startswith("onednn-prepacked")
    assert report["config"]["kernels"]["*_stock lanes"]["target"] == "stock (fast path turned off)"


def test_reports_written(report, tmp_path):
    paths = write_reports(report, tmp_path)
    assert json.loads(paths[0].read_text())["schema"] == "specdec.bench/1"
    md = paths[1].read_text()
    for name in report["results"]["greedy"]["lanes"]:
        assert f"| {name} |" in md
    assert "plotly" in paths[2].read_text().lower()
    assert "weight-streaming floor" in md and "| stock (fast path turned off) |" in md
    # the acceptance each speculative lane would need, for every goal, where its model predicts a gain
    needs = {n: r["theory"]["alpha_for"] for n, r in report["results"]["greedy"]["lanes"].items()
             if (r.get("theory") or {}).get("alpha_for")}
    assert needs and all(set(a) == {"1.35", "1.6", "2.0"} for a in needs.values())
    assert all(x is None or 0 < x <= 1 for a in needs.values() for x in a.values())
    section = md.split("What acceptance would it take (greedy)")[1].split("\n\n")[1]     # its table
    assert section.startswith("| lane | α | c | measured decode | α for 1.35× | α for 1.6× | α for 2.0× |")
    assert {row.split(" | ")[0][2:] for row in section.splitlines()[2:]} == set(needs)


def test_parse_sweep():
    assert parse_sweep("1-4") == [1, 2, 3, 4]
    assert parse_sweep("1,2,8") == [1, 2, 8]
    assert parse_sweep("none") == []


def test_equal_length_ratio_times_both_lanes_to_the_shorter_answer():
    """A 5-token sampled answer against plain's 10: tokens/s with the prefill in it reads 1.0x, while
    to the same 5 tokens plain took 0.35 s and the lane 0.30 s (1.17x)."""
    from types import SimpleNamespace as NS

    from specdec_core.bench.stats import equal_length_ratio, time_to_tokens
    trace = lambda rounds: NS(rounds=[NS(committed=[0] * n, t_end=t) for n, t in rounds],
                              stats={"new_tokens": sum(n for n, _ in rounds)})
    plain = trace([(1, 0.1 + 0.05 * i) for i in range(1, 11)])
    spec = trace([(2, 0.2), (3, 0.3)])
    assert time_to_tokens(plain, 5) == pytest.approx(0.35) and time_to_tokens(spec, 4) == pytest.approx(0.3)
    assert time_to_tokens(spec, 6) is None
    assert (5 / 0.3) / (10 / 0.6) == pytest.approx(1.0)                # what tokens/s per prompt reads
    assert equal_length_ratio([spec], [plain]) == pytest.approx(0.35 / 0.3)
    assert equal_length_ratio([spec, spec], [plain]) == pytest.approx(0.35 / 0.3)   # medians over repeats
    assert equal_length_ratio([None], [plain]) is None                 # an HF lane: no trace
