"""theory.py against values computed by hand (Leviathan et al. 2023, with a k-dependent verify cost)."""
import pytest

from specdec_core.costs.theory import (best_k, committed_distribution, expected_tokens,
                                 linear_verify_cost, predicted_speedup)


def test_expected_tokens_hand_values():
    # (1 − α^(k+1)) / (1 − α): α = 0.5, k = 2 -> (1 − 1/8) / (1/2) = 1.75
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    # α = 0.8, k = 4 -> (1 − 0.32768) / 0.2 = 3.3616
    assert expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert expected_tokens(0.0, 5) == pytest.approx(1.0)      # every draft rejected: the correction
    assert expected_tokens(1.0, 3) == pytest.approx(4.0)      # every draft accepted + the bonus


def test_committed_distribution_is_a_distribution_with_mean_e_tau():
    assert committed_distribution(0.5, 2) == pytest.approx([0.5, 0.25, 0.25])
    for alpha, k in [(0.3, 1), (0.7, 5), (0.95, 8)]:
        dist = committed_distribution(alpha, k)
        assert sum(dist) == pytest.approx(1.0)
        assert sum(j * p for j, p in enumerate(dist, 1)) == pytest.approx(expected_tokens(alpha, k))


def test_speedup_hand_values():
    # E[τ] / (k·c + v): 3.3616 / (4·0.05 + 1) = 2.801333…
    assert predicted_speedup(0.8, 4, 0.05, 1.0) == pytest.approx(3.3616 / 1.2)
    # verify cost growing with k: v(2) = 1 + 0.25·2 = 1.5 -> 1.75 / (0.2 + 1.5)
    assert predicted_speedup(0.5, 2, 0.1, linear_verify_cost(0.25)) == pytest.approx(1.75 / 1.7)
    assert predicted_speedup(0.9, 0, 0.5, 3.0) == 1.0                    # k = 0 is plain decoding


def test_best_k_hand_values():
    # α = 0.8, c = 0.1, v = 1: speedups 1.636, 2.033, 2.271, 2.401, 2.460, 2.470, 2.448 -> k = 6
    k, s = best_k(0.8, 0.1, 1.0, k_max=8)
    assert (k, s) == (6, pytest.approx(3.95142 / 1.6, rel=1e-4))
    # α = c with v = 1: k = 1 only breaks even, (1 + α) / (1 + c) = 1, so plain (k = 0) is kept
    assert best_k(0.5, 0.5, 1.0) == (0, 1.0)
    # free drafts, perfect-ish acceptance, flat verify: the longest draft allowed
    assert best_k(0.9, 0.0, 1.0, k_max=16)[0] == 16
    # a verify cost growing with k pulls the best k down
    assert best_k(0.8, 0.0, linear_verify_cost(0.3), k_max=16)[0] < best_k(0.8, 0.0, 1.0, k_max=16)[0]
