"""The one sampling function against hand-computed distributions."""
import math

import pytest
import torch

from specdec_core.sampling import SamplingConfig, warp_probs

LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0]])


def softmax(xs):
    e = [math.exp(x) for x in xs]
    return [v / sum(e) for v in e]


def test_greedy_is_one_hot_on_first_argmax():
    probs = warp_probs(torch.tensor([[1.0, 3.0, 3.0, 0.0]]), SamplingConfig(0.0))
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_temperature():
    probs = warp_probs(LOGITS, SamplingConfig(temperature=2.0))[0].tolist()
    assert probs == pytest.approx(softmax([1.0, 0.5, 0.0, -0.5]), abs=1e-6)


def test_top_k_keeps_k_largest():
    probs = warp_probs(LOGITS, SamplingConfig(temperature=1.0, top_k=2))[0].tolist()
    assert probs == pytest.approx(softmax([2.0, 1.0]) + [0.0, 0.0], abs=1e-6)


def test_top_p_keeps_smallest_set_reaching_p():
    full = softmax([2.0, 1.0, 0.0, -1.0])      # 0.644, 0.237, 0.087, 0.032
    probs = warp_probs(LOGITS, SamplingConfig(temperature=1.0, top_p=0.85))[0].tolist()
    assert full[0] + full[1] > 0.85 > full[0]
    assert probs == pytest.approx(softmax([2.0, 1.0]) + [0.0, 0.0], abs=1e-6)


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("spread", [0.5, 3.0, 8.0])
def test_top_p_keeps_what_transformers_keeps(top_p, spread):
    """The partial-sort nucleus (sampling.top_p_scores) keeps exactly the tokens transformers'
    TopPLogitsWarper keeps, on flat rows (nucleus beyond the candidates: the warper's own path)
    and peaked ones, over a real-size vocabulary."""
    from transformers.generation.logits_process import TopPLogitsWarper
    from specdec_core.sampling import top_p_scores
    scores = torch.randn(6, 49_152, generator=torch.Generator().manual_seed(int(spread * 10))) * spread
    ours, theirs = top_p_scores(scores, top_p), TopPLogitsWarper(top_p=top_p)(None, scores.clone())
    assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs))
    assert torch.equal(ours[torch.isfinite(ours)], scores[torch.isfinite(ours)])


def test_batched_shapes_are_kept():
    logits = torch.randn(3, 5, 11)
    probs = warp_probs(logits, SamplingConfig(0.8, top_k=4, top_p=0.9))
    assert probs.shape == logits.shape
    assert torch.allclose(probs.sum(-1), torch.ones(3, 5))
    assert ((probs > 0).sum(-1) <= 4).all()


@pytest.mark.parametrize("cfg", [SamplingConfig(-1.0), SamplingConfig(1.0, top_k=-2),
                                 SamplingConfig(1.0, top_p=0.0), SamplingConfig(1.0, top_p=1.5)])
def test_bad_settings_are_refused(cfg):
    with pytest.raises(ValueError):
        cfg.check()
