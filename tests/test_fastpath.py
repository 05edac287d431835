"""The CPU fast path (prepacked oneDNN linears, fused Llama layers): same numbers as the stock
model, same greedy tokens, a clean fallback when the ops are missing, and the cost measurement."""
import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from specdec_core import ModelPair, autoregressive_generate, load_pair, speculative_generate
from specdec_core.kernels import fastpath
from specdec_core.costs import measure_pass_costs, step_breakdown, weight_bytes
from specdec_core.models import draft_from_target_layers

from .conftest import tiny_llama

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def stock_pair():
    return load_pair("smollm2-135m", draft="ngram", device="cpu", fast_path=False)


@pytest.fixture(scope="module")
def fast_pair():
    return load_pair("smollm2-135m", draft="ngram", device="cpu", fast_path=True)


def test_default_target_runs_the_fast_path(fast_pair, stock_pair):
    fast, stock = fastpath.kernels_of(fast_pair.target), fastpath.kernels_of(stock_pair.target)
    assert fast.name == fastpath.FAST and fast.fused and fast.n_packed == 4 * 30 + 1
    assert stock.name == fastpath.STOCK and stock.note == "fast path turned off"
    assert fast_pair.target is not stock_pair.target
    # No dense matrix beside a packed one: the stock matrices are maps of the weights file.
    assert fast.extra_bytes == 0
    assert fast_pair.target.get_output_embeddings().weight is fast_pair.target.get_input_embeddings().weight
    linears = [m for m in fast_pair.target.modules() if isinstance(m, torch.nn.Linear)]
    assert sum(isinstance(m, fastpath.PackedLinear) for m in linears) == 2 * 30 + 1   # o, down, lm_head
    assert len(linears) == 7 * 30 + 1                            # q/k/v and gate/up: fused packs
    # Same matrices, each counted once (tied lm_head once): the bytes a step must read.
    assert weight_bytes(fast_pair.target) == weight_bytes(stock_pair.target)
    assert 530e6 < weight_bytes(fast_pair.target) < 545e6


@torch.inference_mode()
def test_fast_logits_equal_stock_logits(fast_pair, stock_pair):
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 49152, (1, 30), generator=gen)
    caches = [DynamicCache(config=p.target.config) for p in (fast_pair, stock_pair)]
    for pair, cache in zip((fast_pair, stock_pair), caches):
        pair.target(prompt, past_key_values=cache, use_cache=True)
    for n in (1, 3, 8):
        x = torch.randint(0, 49152, (1, n), generator=gen)
        fast = fast_pair.target(x, past_key_values=caches[0], use_cache=True).logits
        stock = stock_pair.target(x, past_key_values=caches[1], use_cache=True).logits
        assert fast.shape == stock.shape == (1, n, 49152)
        assert float((fast - stock).abs().max()) < 1e-3


def test_fast_greedy_tokens_equal_stock(fast_pair, stock_pair):
    ids = fast_pair.encode_prompt("Name three rivers in Europe and say where they flow.")
    fast = autoregressive_generate(fast_pair, ids, max_new_tokens=32)
    stock = autoregressive_generate(stock_pair, ids, max_new_tokens=32)
    assert fast.output_ids == stock.output_ids and len(fast.output_ids) == 32
    assert fast.config.kernels["target"].startswith("onednn-prepacked")
    assert stock.config.kernels["target"] == "stock (fast path turned off)"
    # transformers' generate() runs the fused model too, and agrees.
    ref = fast_pair.target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=32)
    assert ref[0, len(ids):].tolist() == fast.output_ids


def test_fallback_when_the_ops_are_missing(monkeypatch):
    """Another torch build / CPU: loading and decoding work on stock kernels, the trace says so."""
    def missing(*args, **kwargs):
        raise RuntimeError("no oneDNN here")
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", missing)
    fastpath.unavailable_reason.cache_clear()
    try:
        pair = ModelPair.from_models(tiny_llama(seed=0), tiny_llama(seed=1), fast_path=True)
        trace = speculative_generate(pair, [1, 2, 3], k=3, max_new_tokens=12, temperature=1.0, seed=0)
    finally:
        monkeypatch.undo()
        fastpath.unavailable_reason.cache_clear()
    assert trace.stats["new_tokens"] == 12
    kernels = trace.config.kernels
    assert kernels["target"].startswith("stock (prepacked oneDNN ops missing")
    assert kernels["draft"].startswith("stock (")
    assert any(isinstance(m, torch.nn.Linear) for m in pair.target.modules())


def test_env_switch_and_gpu_like_models_stay_stock(monkeypatch):
    monkeypatch.setenv(fastpath.ENV, "0")
    assert fastpath.resolve(None) is False and fastpath.resolve(True) is True
    monkeypatch.delenv(fastpath.ENV)
    assert fastpath.resolve(None) is True
    half = tiny_llama(seed=0).to(torch.bfloat16)
    assert fastpath.apply(half).note.endswith("the fast path is for float32")


def test_fast_tiny_model_matches_stock_and_generate():
    """A GQA Llama with biases on q|k|v (Qwen2-like) and an MLP bias: the fused layers agree."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
                      max_position_embeddings=64, tie_word_embeddings=True)
    stock = LlamaForCausalLM(cfg).eval()
    fast = LlamaForCausalLM(cfg).eval()
    fast.load_state_dict(stock.state_dict())
    assert fastpath.apply(fast).fused
    x = torch.randint(0, 40, (1, 12))
    with torch.inference_mode():
        assert float((fast(x).logits - stock(x).logits).abs().max()) < 1e-4
        a = stock.generate(x, do_sample=False, max_new_tokens=10)
        b = fast.generate(x, do_sample=False, max_new_tokens=10)
    assert torch.equal(a, b)


def test_layer_draft_and_distilled_head_share_the_fast_path(fast_pair):
    draft = draft_from_target_layers(fast_pair.target, 2)
    assert fastpath.kernels_of(draft) == fastpath.kernels_of(fast_pair.target)
    distilled = load_pair("smollm2-135m", draft="distilled", device="cpu", fast_path=True)
    trace = speculative_generate(distilled, distilled.encode_prompt("Say hi."), k=2, max_new_tokens=6)
    # the head's matrices in bf16 where the CPU has bf16 math (fastpath.draft_matrix_dtype), and its label says so
    bf16 = fastpath.draft_matrix_dtype() is torch.bfloat16
    assert trace.config.kernels["draft"] == (fastpath.FAST + ", bf16 matrices" if bf16 else fastpath.FAST)
    stock = load_pair("smollm2-135m", draft="distilled", device="cpu", fast_path=False)
    assert speculative_generate(stock, stock.encode_prompt("Say hi."), k=2,
                                max_new_tokens=6).config.kernels["draft"].startswith("stock")
    # the fast head multiplies q|k|v and gate|up as one matrix each: the same layer output as three
    # (two) products of its own packed matrices, and as the stock head's within bf16's rounding
    head = distilled.new_drafter().head
    assert head.packed_qkv is not None and head.packed_gate_up is not None
    x, pos = torch.randn(1, 3, head.fc.out_features), torch.arange(3)
    with torch.inference_mode():
        fused = head.finish(x, F.scaled_dot_product_attention(*head.qkv(x, pos), is_causal=True, enable_gqa=True))
        packs = head.packed_qkv, head.packed_gate_up
        head.packed_qkv = head.packed_gate_up = None
        try:
            apart = head.finish(x, F.scaled_dot_product_attention(*head.qkv(x, pos), is_causal=True, enable_gqa=True))
        finally:
            head.packed_qkv, head.packed_gate_up = packs
    torch.testing.assert_close(fused, apart, rtol=1e-4, atol=1e-4)


def test_pass_cost_measurement_and_breakdown():
    target = tiny_llama(vocab_size=32, seed=0, layers=2)
    fastpath.apply(target)
    costs = measure_pass_costs(target, 32, n_max=4, context=8, reps=2)
    assert sorted(costs.seconds) == [1, 2, 3, 4] and all(s > 0 for s in costs.seconds.values())
    assert sorted(costs.v_table()) == [1, 2, 3] and all(v > 0 for v in costs.v_table().values())
    assert costs.kernels.startswith(fastpath.FAST)
    parts = step_breakdown(target, 32, n_tokens=3, context=8, reps=2)
    assert set(parts) == {"linears", "attention", "norms", "lm_head", "other", "total"}
    assert all(parts[c] > 0 for c in ("linears", "attention", "norms", "lm_head", "total"))
    assert sum(parts[c] for c in ("linears", "attention", "norms", "lm_head", "other")) == pytest.approx(parts["total"])


def test_layer_weights_read_the_same_matrices_fused_or_not(fast_pair, stock_pair):
    """The distillation lab starts its head from a target layer: the fused layout gives it back."""
    from specdec_core.drafters.feature_head import FeatureHead, target_cfg
    from specdec_core.kernels.fused_llama import layer_weights
    fast, stock = layer_weights(fast_pair.target.model.layers[7]), layer_weights(stock_pair.target.model.layers[7])
    assert set(fast) == set(stock) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    for name in fast:
        assert torch.equal(fast[name], stock[name]), name
    heads = []
    for pair in (fast_pair, stock_pair):
        head = FeatureHead(target_cfg(pair.target), torch.arange(16))
        torch.manual_seed(0)
        head.init_from_target(pair.target, 29)
        heads.append(head.state_dict())
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])


@torch.inference_mode()
def test_a_repacked_twin_computes_what_the_model_does_and_leaves_it_alone(fast_pair, stock_pair):
    """fastpath.repacked: a copy packed anew (the lab's writer); in fp32 it computes what the model
    does, from a fast-path model or a stock one, and the model keeps its own packs, still current."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 49152, (2, 40), generator=gen)
    ref = stock_pair.target(x).logits
    before = fastpath.kernels_of(fast_pair.target)
    for source in (fast_pair.target, stock_pair.target):
        twin32 = fastpath.repacked(source, torch.float32)
        assert twin32 is not source and fastpath.kernels_of(twin32).matrices == "fp32"
        assert fastpath.kernels_of(twin32).name == fastpath.FAST and fastpath.kernels_of(twin32).fused
        assert float((twin32(x).logits - ref).abs().max()) < 1e-3
    assert fastpath.kernels_of(fast_pair.target) == before
    assert float((fast_pair.target(x).logits - ref).abs().max()) < 1e-3


@pytest.mark.skipif(fastpath.draft_matrix_dtype() is not torch.bfloat16,
                    reason="this CPU has no bf16 math that oneDNN runs (avx512_bf16 or AMX)")
@torch.inference_mode()
def test_a_bf16_twin_stays_close_to_the_fp32_model(fast_pair, stock_pair):
    """Where the CPU has bf16 math: the twin's products in bf16 stay close to the fp32 model (its
    argmax the same on nearly every position), and the model it was copied from is unchanged."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 49152, (2, 40), generator=gen)
    ref = stock_pair.target(x).logits
    before = fastpath.kernels_of(fast_pair.target)
    twin16 = fastpath.repacked(fast_pair.target, torch.bfloat16)
    k16 = fastpath.kernels_of(twin16)
    assert k16.name == fastpath.FAST and k16.matrices == "bf16" and k16.n_packed == before.n_packed
    low = twin16(x).logits
    agree = float((low.argmax(-1) == ref.argmax(-1)).float().mean())
    assert agree >= 0.9 and float((low - ref).abs().max()) < 2.0 and not torch.equal(low, ref)
    assert fastpath.kernels_of(fast_pair.target) == before
    assert float((fast_pair.target(x).logits - ref).abs().max()) < 1e-3
