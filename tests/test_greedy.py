"""Greedy speculative output equals greedy plain output and transformers' own greedy generate(),
token for token, on the real embedded target (fp32) with the n-gram drafter, a draft model and the shipped distilled draft."""
import pytest
import torch

from specdec_core import ModelPair, autoregressive_generate, speculative_generate
from specdec_core.models import draft_from_target_layers

PROMPTS = [
    "List the planets of the solar system in order, one per line.",
    "Write a short poem about a lighthouse keeper who talks to the sea.",
    "def fibonacci(n):",
]
MAX_NEW = 40


@pytest.fixture(scope="module")
def layers_pair(default_pair):
    """The default target with a draft made of its own first 2 layers (a real draft model)."""
    draft = draft_from_target_layers(default_pair.target, 2)
    return ModelPair.from_models(default_pair.target, draft, default_pair.tokenizer)


@pytest.fixture(scope="module")
def references(default_pair):
    """transformers' greedy generate() continuation of each prompt."""
    out = {}
    for text in PROMPTS:
        ids = default_pair.encode_prompt(text, chat=not text.startswith("def"))
        gen = default_pair.target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=MAX_NEW)
        out[text] = (ids, gen[0, len(ids):].tolist())
    return out


@pytest.mark.parametrize("text", PROMPTS)
def test_plain_greedy_equals_transformers_generate(default_pair, references, text):
    ids, expected = references[text]
    assert autoregressive_generate(default_pair, ids, max_new_tokens=MAX_NEW).output_ids == expected


@pytest.mark.parametrize("text", PROMPTS)
@pytest.mark.parametrize("k", [1, 4, "auto"])
def test_speculative_greedy_ngram_equals_generate(default_pair, references, text, k):
    ids, expected = references[text]
    trace = speculative_generate(default_pair, ids, k=k, max_new_tokens=MAX_NEW)
    assert trace.output_ids == expected


@pytest.mark.parametrize("text,k", [(PROMPTS[0], 2), (PROMPTS[1], 6)])
def test_speculative_greedy_draft_model_equals_generate(layers_pair, references, text, k):
    ids, expected = references[text]
    trace = speculative_generate(layers_pair, ids, k=k, max_new_tokens=MAX_NEW)
    assert trace.output_ids == expected
    # The draft model really proposed tokens, some were rejected, and none was accepted wrongly.
    assert trace.stats["drafted"] > 0
    assert any(r.correction.kind == "resample" for r in trace.rounds)


def test_greedy_never_touches_an_rng(default_pair, references):
    ids, expected = references[PROMPTS[0]]
    state = torch.get_rng_state()
    trace = speculative_generate(default_pair, ids, k=4, max_new_tokens=12, seed=None)
    assert torch.equal(state, torch.get_rng_state())
    assert all(t.u is None for r in trace.rounds for t in r.drafted)


@pytest.fixture(scope="module")
def distilled_pair():
    """The default preset as users get it: the embedded target and its shipped distilled draft."""
    from specdec_core import load_pair
    return load_pair("smollm2-135m", draft="distilled", device="cpu")


@pytest.mark.parametrize("text,shape", [(PROMPTS[0], dict(k=3)), (PROMPTS[1], dict(k=5)),
                                        (PROMPTS[2], dict(tree=(8, 4))), (PROMPTS[0], dict(tree="auto")),
                                        (PROMPTS[1], dict(k="auto", tree=None))])
def test_speculative_greedy_distilled_draft_equals_generate(distilled_pair, references, text, shape):
    ids, expected = references[text]
    trace = speculative_generate(distilled_pair, ids, max_new_tokens=MAX_NEW, **shape)
    assert trace.config.draft == "distilled-feature-head"
    assert trace.output_ids == expected
    # It drafted, guesses were kept (fewer target passes than tokens), and trees branched.
    assert trace.stats["drafted"] > 0 and len(trace.rounds) < len(expected)
    assert (trace.stats["tree_rounds"] > 0) == (shape.get("tree") is not None)
