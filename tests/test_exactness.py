"""Speculative sampling reproduces the target's distribution exactly (chi-square against the exact
joint distribution of the first two generated tokens, computed from the target's logits). Sample
sizes come from the stated power target (conftest.TV_DETECT): over V² outcomes, enough seeded
decodes that a sampler off by a total variation of 0.12 or more fails with probability ≥ 0.9."""
import itertools

import pytest
import torch

from specdec_core import ModelPair, speculative_generate
from specdec_core.decoding import rule as rule_module
from specdec_core.decoding.exactness import chi_square
from specdec_core.drafters import NGramDrafter
from specdec_core.sampling import SamplingConfig, warp_probs

from .conftest import samples_for_power, tiny_llama

pytestmark = pytest.mark.slow      # chi-square over thousands of seeded decodes

PROMPT = [1, 5, 2]


@torch.inference_mode()
def exact_two_token_distribution(target, prompt, cfg: SamplingConfig, vocab_size: int) -> torch.Tensor:
    """P(x1, x2 | prompt) [V, V] under the target with the sampling warps applied at each step
    (on the CPU, whatever device the target is on: the counts it is compared with live there)."""
    device = next(target.parameters()).device
    first = warp_probs(target(torch.tensor([prompt], device=device)).logits[0, -1, :vocab_size], cfg)       # [V]
    batch = torch.tensor([prompt + [x] for x in range(vocab_size)], device=device)
    second = warp_probs(target(batch).logits[:, -1, :vocab_size], cfg)                                    # [V, V]
    return (first[:, None] * second).cpu()


def chi_square_p_value(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    """The core's Pearson test; a sample of a probability-0 token fails outright."""
    result = chi_square(counts, expected_probs)
    assert result.impossible == 0, "sampled a token of probability 0"
    return result.p_value


def sample_two_tokens(pair, prompt, k, cfg, max_new_tokens, drafter_factory=None, **decode) -> torch.Tensor:
    """Counts [V, V] of the first two output tokens over samples_for_power(V²) seeded runs (decode:
    more speculative_generate arguments, e.g. tree= or k_schedule=)."""
    V = pair.vocab_size
    counts = torch.zeros(V, V)
    for seed in range(samples_for_power(V * V)):
        drafter = drafter_factory() if drafter_factory else None
        out = speculative_generate(pair, prompt, k=k, temperature=cfg.temperature, top_k=cfg.top_k,
                                   top_p=cfg.top_p, max_new_tokens=max_new_tokens, seed=seed,
                                   drafter=drafter, **decode).output_ids
        counts[out[0], out[1]] += 1
    return counts


def check_exact(pair, k, cfg, max_new_tokens, prompt=PROMPT, drafter_factory=None, **decode) -> float:
    exact = exact_two_token_distribution(pair.target, prompt, cfg, pair.vocab_size)
    counts = sample_two_tokens(pair, prompt, k, cfg, max_new_tokens, drafter_factory, **decode)
    return chi_square_p_value(counts, exact)


@pytest.fixture(scope="module")
def tiny_pair():
    """Target and draft on the CPU fast path (fastpath.py), as load_pair gives them by default."""
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1), fast_path=True)
    assert pair.kernels()["target"].startswith("onednn-prepacked")
    return pair


CASES = [  # (k, temperature, top_k, top_p, max_new_tokens): the first round drafts min(k, max_new-1)
    (1, 1.0, 0, 1.0, 2),      # one draft, then the bonus token from p is the second token
    (2, 1.0, 0, 1.0, 3),
    (4, 1.0, 0, 1.0, 5),      # long chain: rejections at any of 4 positions
    (3, 0.7, 4, 1.0, 4),      # top-k on both models
    (2, 1.3, 0, 0.8, 3),      # top-p on both models
]


@pytest.mark.parametrize("k,temperature,top_k,top_p,max_new", CASES)
def test_speculative_sampling_matches_target(tiny_pair, k, temperature, top_k, top_p, max_new):
    cfg = SamplingConfig(temperature, top_k, top_p)
    assert check_exact(tiny_pair, k, cfg, max_new) > 1e-3


def test_padded_vocabulary_pair_is_exact():
    """Draft with 3 padded logit rows (like Qwen2.5 0.5B vs 7B): logits are cut to the shared size."""
    pair = ModelPair.from_models(tiny_llama(vocab_size=8, seed=0), tiny_llama(vocab_size=11, seed=2))
    assert pair.vocab_size == 8
    assert check_exact(pair, 2, SamplingConfig(1.0), 3) > 1e-3


def test_padded_target_is_exact():
    pair = ModelPair.from_models(tiny_llama(vocab_size=11, seed=3), tiny_llama(vocab_size=8, seed=4))
    assert pair.vocab_size == 8
    assert check_exact(pair, 3, SamplingConfig(0.9), 4) > 1e-3


def test_ngram_drafter_is_exact(tiny_pair):
    """One-hot q (prompt lookup): acceptance is p(x) and the residual is p without x."""
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    drafter = NGramDrafter(tiny_pair.vocab_size)
    assert drafter.lookup(prompt, 2) == [3, 1]   # it does propose on this prompt
    assert check_exact(tiny_pair, 2, SamplingConfig(1.0), 3, prompt=prompt,
                       drafter_factory=lambda: NGramDrafter(tiny_pair.vocab_size)) > 1e-3


def test_test_has_power_when_residual_is_wrong(tiny_pair, monkeypatch):
    """Resampling from p instead of norm(max(0, p − q)) after a rejection must be detected."""
    monkeypatch.setattr(rule_module, "residual", lambda p, q: p)      # the bug: resample from p
    assert check_exact(tiny_pair, 2, SamplingConfig(1.0), 3) < 1e-3


def test_exact_reference_is_a_distribution(tiny_pair):
    exact = exact_two_token_distribution(tiny_pair.target, PROMPT, SamplingConfig(1.0), 8)
    assert float(exact.sum()) == pytest.approx(1.0, abs=1e-5)
    # The tiny models are far from uniform and from each other, so the test is not trivial.
    q = exact_two_token_distribution(tiny_pair.draft_model, PROMPT, SamplingConfig(1.0), 8)
    assert 0.5 * float((exact - q).abs().sum()) > 0.2
    assert max(itertools.chain.from_iterable(exact.tolist())) > 3 / 64


def test_stock_kernels_are_exact():
    """The cases above run on the CPU fast path (prepacked, fused layers); the stock kernels too."""
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1), fast_path=False)
    assert pair.kernels()["target"] == "stock (fast path turned off)"
    assert check_exact(pair, 3, SamplingConfig(1.0, 0, 1.0), 4) > 1e-3
