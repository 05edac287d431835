"""After every round the cached path gives the same next-token logits as a fresh forward pass over
the whole committed sequence, for the target and for the draft (KV rollback is exact)."""
import copy

import pytest
import torch

from specdec_core import ModelPair
from specdec_core.drafters import ModelDrafter
from specdec_core.drafters.base import TokenTree
from specdec_core.models import draft_from_target_layers
from specdec_core.decoding import RoundOrder, parse_request
from specdec_core.decoding.speculative import decode_round, start_decode

from .conftest import tiny_llama


@torch.inference_mode()
def cached_vs_fresh(model, cache, n_cached, committed) -> float:
    """Max |logit difference| between the cached path and a fresh full forward, next position."""
    cached = model(committed[None, n_cached:], past_key_values=copy.deepcopy(cache)).logits[0, -1]
    fresh = model(committed[None]).logits[0, -1]
    return float((cached - fresh).abs().max())


@torch.inference_mode()
def passes_vs_fresh(target, st) -> float:
    """The same for the decode's own target passes (dynamic or static): one more pass of the last
    committed token alone, then rolled back."""
    n = len(st.committed)
    nothing = torch.zeros(0, target.config.vocab_size, device=st.committed.device)
    step, _ = st.passes.verify(st.committed[-1:], TokenTree(st.committed[:0], [], nothing, nothing, []), None)
    st.passes.keep(n - 2, [])       # back to the first n − 1 entries: the step's own entry dropped
    fresh = target(st.committed[None]).logits[0, -1]
    return float((step[-1] - fresh).abs().max())


def run_and_check(pair, k, rounds, atol, **settings):
    st = start_decode(pair, [3, 1, 4, 1, 5], parse_request(k, max_new_tokens=120, **settings))   # context 128
    seen_kinds = set()
    for i in range(rounds):
        rnd = decode_round(st, RoundOrder.fixed(k if i % 2 else 1))   # alternate so all-accepted rounds happen too
        seen_kinds.add(rnd.correction.kind)
        n = len(st.committed)
        # Invariant: each cache holds every committed token but the last one(s) not yet fed.
        assert st.passes.length == n - 1
        assert passes_vs_fresh(pair.target, st) < atol
        drafter = st.drafter
        if isinstance(drafter, ModelDrafter):
            assert drafter.cache.get_seq_length() == drafter.n_cached <= n - 1
            assert cached_vs_fresh(drafter.model, drafter.cache, drafter.n_cached, st.committed) < atol
        if st.done:
            break
    return seen_kinds


@pytest.mark.parametrize("fast_path", [True, False])
def test_rollback_tiny_models_sampling(fast_path):
    pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1), fast_path=fast_path)
    kinds = run_and_check(pair, k=3, rounds=30, atol=1e-4, temperature=1.0, seed=3)
    assert kinds == {"resample", "bonus"}   # both paths of the rollback were exercised


def test_rollback_all_accepted_keeps_draft_in_step():
    """Draft == target: every draft is accepted, the draft cache must catch up the unfed token."""
    target = tiny_llama(seed=5)
    pair = ModelPair.from_models(target, target)
    kinds = run_and_check(pair, k=4, rounds=10, atol=1e-4, temperature=0.0)
    assert kinds == {"bonus"}


def test_rollback_real_target_with_layer_draft(default_pair):
    draft = draft_from_target_layers(default_pair.target, 2)
    pair = ModelPair.from_models(default_pair.target, draft, default_pair.tokenizer)
    kinds = run_and_check(pair, k=3, rounds=6, atol=2e-3, temperature=0.0)
    assert "resample" in kinds
