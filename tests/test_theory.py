"""theory.py against values computed by hand (Leviathan et al. 2023, with a k-dependent verify cost)."""
import pytest

from specdec_core.costs.theory import (alpha_for, best_k, committed_distribution, expected_tokens,
                                 predicted_speedup, verify_cost)


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
    assert predicted_speedup(0.5, 2, 0.1, verify_cost({}, default_slope=0.25)) == pytest.approx(1.75 / 1.7)
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
    assert best_k(0.8, 0.0, verify_cost({}, default_slope=0.3), k_max=16)[0] < best_k(0.8, 0.0, 1.0, k_max=16)[0]


def test_alpha_for_is_the_least_acceptance_that_reaches_a_speedup():
    # one draft, free: (1 + α) / 1 = 1.5 at α = 0.5; at c = 0.25, (1 + α) / 1.25 = 1.2 at α = 0.5
    assert alpha_for(1.5, 0.0, 1.0, k_max=1) == pytest.approx(0.5, abs=1e-5)
    assert alpha_for(1.2, 0.25, 1.0, k_max=1) == pytest.approx(0.5, abs=1e-5)
    # out of reach: even α = 1 gives 2 / 1.5 = 1.33 with one draft at c = 0.5
    assert alpha_for(1.4, 0.5, 1.0, k_max=1) is None
    # the inverse of best_k: at the α found the goal is met, just below it it is not
    v = verify_cost({}, default_slope=0.06)
    for goal, c in [(1.35, 0.08), (1.6, 0.08), (1.6, 0.105), (2.0, 0.05)]:
        a = alpha_for(goal, c, v)
        assert best_k(a, c, v)[1] >= goal > best_k(a - 1e-4, c, v)[1]
    # a dearer draft needs a better one
    assert alpha_for(1.6, 0.105, v) > alpha_for(1.6, 0.08, v)


def test_one_verify_cost_model():
    """costs.theory.verify_cost: one line v(k) = 1 + slope·k through (0, 1), fitted to the run's
    measured v(m) weighted by their rounds; without any, to the measured pass costs; else the
    default slope. Smooth by construction: a noisy point moves the slope, never one k alone."""
    from specdec_core.costs.theory import verify_cost
    v = verify_cost({"2": 1.2, "4": 1.4}, prior={5: 1.3, 6: 9.0})
    assert v.slope == pytest.approx((2 * 0.2 + 4 * 0.4) / (4 + 16)) == pytest.approx(0.1)
    assert [v(k) for k in range(7)] == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6])   # the prior unused
    # weighted by rounds: one noisy round at k = 1 barely moves a slope 30 rounds at k = 4 measured
    w = verify_cost({"1": 3.0, "4": 1.4}, rounds={"1": 1, "4": 30})
    assert w.slope == pytest.approx((1 * 1 * 2.0 + 30 * 4 * 0.4) / (1 * 1 + 30 * 16))        # 0.10395
    assert w(1) == pytest.approx(1.10395, abs=1e-5)                                          # not 3.0
    noisy = verify_cost({"2": 1.2, "3": 0.6, "4": 1.4})
    steps = [noisy(k + 1) - noisy(k) for k in range(8)]
    assert max(steps) - min(steps) < 1e-12                                                   # no spike at k = 3
    only_prior = verify_cost({}, prior={1: 1.1, 2: 1.2})
    assert only_prior.slope == pytest.approx(0.1) and only_prior(3) == pytest.approx(1.3)
    assert verify_cost({}, default_slope=0.12)(5) == pytest.approx(1.6)
    assert verify_cost({"3": 0.5}).slope == 0.0                              # never decreasing


def test_cost_terms_and_the_theory_model():
    """The three losses of a round, in target steps, by hand: α = 0.5, k = 2 → E[τ] = 1.75; c = 0.1;
    v(2) = 1.4. The speedup is what the ideal k + 1 keeps after the acceptance loss, over one step
    plus the draft cost and the verify overhead."""
    from specdec_core.costs.theory import Theory, cost_terms, fit
    terms = cost_terms(0.5, 2, 0.1, 1.4)
    assert terms == pytest.approx({"acceptance": 1.25, "draft": 0.2, "verify": 0.4})
    assert (3 - terms["acceptance"]) / (1 + terms["draft"] + terms["verify"]) == pytest.approx(
        predicted_speedup(0.5, 2, 0.1, 1.4))
    model = Theory(0.5, 0.1, 0.2)                      # v(k) = 1 + 0.2·k
    assert model.v(2) == pytest.approx(1.4) and model.terms(2) == pytest.approx(terms)
    assert model.speedup(2) == pytest.approx(1.75 / 1.6) and model.best(8) == best_k(0.5, 0.1, model.v, 8)
    fitted = fit(0.5, 0.1, {"2": 1.4})
    assert (fitted.alpha, fitted.c) == (0.5, 0.1) and fitted.slope == pytest.approx(0.2)
    assert fit(None, 0.1, {"2": 1.4}) is None
