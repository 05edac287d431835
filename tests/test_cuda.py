"""On a GPU, what CI runs on the CPU: exactness (chi-square on tiny models), greedy equality with
transformers' generate(), KV rollback, the default pair in fp32 and bf16 (bf16 with the core's fp
policy for numerics ties), the distilled head, and a model placed by `device_map` on one GPU.

Marked `cuda` and skipped where torch sees no CUDA device: `make test-cuda` runs them (on a GPU
`make test` runs them too). CI has no GPU; these ran where a GPU was lent (see README)."""
import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, load_pair, speculative_generate
from specdec_core.kernels import fastpath
from specdec_core.models import draft_from_target_layers
from specdec_core.sampling import SamplingConfig
from specdec_core.trace.compare import greedy_check

from .conftest import tiny_llama
from .test_exactness import CASES, check_exact
from .test_greedy import MAX_NEW, PROMPTS
from .test_rollback import run_and_check

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (make test-cuda on a GPU)")]
CUDA = "cuda"


def on_gpu(pair) -> ModelPair:
    """The pair is on the GPU, and the CPU fast path stood aside for it (stock kernels, saying why)."""
    kernels = fastpath.kernels_of(pair.target)
    assert pair.input_device.type == CUDA and kernels.name == fastpath.STOCK
    assert kernels.note in ("on cuda: the fast path is for CPU", "fast path turned off"), kernels.note
    return pair


@pytest.fixture(scope="module")
def tiny_pair():
    return on_gpu(ModelPair.from_models(tiny_llama(seed=0).to(CUDA), tiny_llama(seed=1).to(CUDA), fast_path=True))


@pytest.mark.parametrize("k,temperature,top_k,top_p,max_new", CASES)
def test_cuda_speculative_sampling_matches_target(tiny_pair, k, temperature, top_k, top_p, max_new):
    assert check_exact(tiny_pair, k, SamplingConfig(temperature, top_k, top_p), max_new) > 1e-3


def test_cuda_rollback_is_exact():
    pair = on_gpu(ModelPair.from_models(tiny_llama(seed=0).to(CUDA), tiny_llama(seed=1).to(CUDA)))
    assert run_and_check(pair, k=3, rounds=30, atol=1e-4, temperature=1.0, seed=3) == {"resample", "bonus"}


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def gpu_pair(request):
    return on_gpu(load_pair("smollm2-135m", draft="ngram", device=CUDA, dtype=request.param))


@pytest.fixture(scope="module")
def references(gpu_pair):
    out = {}
    for text in PROMPTS:
        ids = gpu_pair.encode_prompt(text, chat=not text.startswith("def"))
        gen = gpu_pair.target.generate(torch.tensor([ids], device=CUDA), do_sample=False, max_new_tokens=MAX_NEW)
        out[text] = (ids, gen[0, len(ids):].tolist())
    return out


def same_or_tie(pair, ids, output_ids):
    """fp32: token for token; bf16: identical or a numerics tie by the core's one greedy check."""
    plain = autoregressive_generate(pair, ids, max_new_tokens=MAX_NEW)
    verdict = greedy_check(plain, output_ids)
    if pair.dtype == torch.float32:
        assert verdict.kind == "identical", verdict
    else:
        assert verdict.kind in ("identical", "tie"), verdict
    return plain


@pytest.mark.parametrize("text", PROMPTS)
def test_cuda_plain_greedy_equals_generate(gpu_pair, references, text):
    ids, expected = references[text]
    same_or_tie(gpu_pair, ids, expected)


@pytest.mark.parametrize("text", PROMPTS)
@pytest.mark.parametrize("draft", ["ngram", "target-layers:2", "distilled"])
def test_cuda_speculative_greedy_equals_plain(gpu_pair, references, text, draft):
    ids, _ = references[text]
    target = gpu_pair.target
    if draft == "ngram":
        pair = gpu_pair
    elif draft == "distilled":
        from specdec_core.drafters.feature_drafter import drafter_factory
        pair = ModelPair.from_models(target, drafter_factory(target), gpu_pair.tokenizer)
    else:
        pair = ModelPair.from_models(target, draft_from_target_layers(target, 2), gpu_pair.tokenizer)
    trace = speculative_generate(pair, ids, k=3, max_new_tokens=MAX_NEW)
    same_or_tie(pair, ids, trace.output_ids)
    assert trace.stats["drafted"] > 0


def test_cuda_distilled_head_lives_on_the_gpu():
    from specdec_core.drafters.feature_head import load_head
    pair = on_gpu(load_pair("smollm2-135m", draft="distilled", device=CUDA))
    head = load_head(pair.target)
    assert {t.device.type for t in list(head.parameters()) + list(head.buffers())} == {CUDA}
    trace = speculative_generate(pair, pair.encode_prompt("Write a haiku about trains."), k=4, temperature=0.7,
                                 seed=1, max_new_tokens=24)
    assert trace.finished and len(trace.output_ids) == 24


def test_cuda_device_map_on_one_gpu():
    """A target placed by accelerate (`device_map`) decodes like one moved with .to()."""
    from transformers import AutoModelForCausalLM

    from specdec_core.models import embedded
    ref = load_pair("smollm2-135m", draft="ngram", device=CUDA, dtype="float32")
    mapped = AutoModelForCausalLM.from_pretrained(embedded.converted_dir(), dtype=torch.float32, device_map={"": 0})
    pair = on_gpu(ModelPair.from_models(mapped, "ngram", ref.tokenizer))
    ids = ref.encode_prompt(PROMPTS[0])
    want = autoregressive_generate(ref, ids, max_new_tokens=MAX_NEW).output_ids
    assert speculative_generate(pair, ids, k=4, max_new_tokens=MAX_NEW).output_ids == want


# ---- the static path with captured passes (issue 58): the default on CUDA --------------------

def test_cuda_auto_passes_are_captured_graphs():
    pair = ModelPair.from_models(tiny_llama(seed=0).to(CUDA), "ngram")
    assert pair.passes == "graphs" and pair.kernels()["passes"].startswith("static cache, captured")
    assert ModelPair.from_models(tiny_llama(seed=0).to(CUDA), "ngram", passes="dynamic").passes == "dynamic"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_graphs_greedy_equals_the_dynamic_cache(dtype):
    """The default pair (lookup + distilled head, tree = auto) on captured passes decodes every
    prompt to the tokens plain decoding on the dynamic cache gives (bf16: up to a numerics tie)."""
    graphs = load_pair("smollm2-135m", device=CUDA, dtype=dtype, passes="graphs")
    dynamic = load_pair("smollm2-135m", device=CUDA, dtype=dtype, passes="dynamic")
    allowed = ("identical",) if dtype == "float32" else ("identical", "tie")
    for text in PROMPTS:
        ids = graphs.encode_prompt(text, chat=not text.startswith("def"))
        plain = autoregressive_generate(dynamic, ids, max_new_tokens=MAX_NEW)
        runs = [autoregressive_generate(graphs, ids, max_new_tokens=MAX_NEW),
                speculative_generate(graphs, ids, max_new_tokens=MAX_NEW),
                speculative_generate(graphs, ids, k=4, tree=None, max_new_tokens=MAX_NEW)]
        for trace in runs:
            assert trace.config.kernels["passes"].startswith("static cache, captured")
            verdict = greedy_check(plain, trace.output_ids)
            assert verdict.kind in allowed, (text, verdict)


def test_cuda_graphs_tree_sampling_matches_the_target():
    """Trees verified by captured passes sample the target exactly (χ², the CPU test's power)."""
    from .test_static import PROMPT
    from .conftest import samples_for_power
    from .test_exactness import exact_two_token_distribution
    from specdec_core.decoding.exactness import chi_square
    pair = ModelPair.from_models(tiny_llama(vocab_size=8, seed=0).to(CUDA), tiny_llama(vocab_size=8, seed=1).to(CUDA),
                                 passes="graphs")
    plan = {"depth": 2, "width": 3, "frontier": 1, "nodes": None, "keep": None}
    counts = torch.zeros(8, 8)
    for seed in range(samples_for_power(64)):
        out = speculative_generate(pair, PROMPT, 1, k_schedule=[plan] * 3, max_new_tokens=3, seed=seed,
                                   temperature=1.0).output_ids
        counts[out[0], out[1]] += 1
    result = chi_square(counts, exact_two_token_distribution(pair.target, PROMPT, SamplingConfig(1.0), 8))
    assert result.impossible == 0 and result.p_value > 1e-3
