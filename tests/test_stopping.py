"""Stopping at EOS and at max_new_tokens; k = 1 and k large; a one-token prompt."""
import pytest

from specdec_core import ModelPair, autoregressive_generate, speculative_generate

from .conftest import tiny_llama


def greedy_pair(eos=None):
    target = tiny_llama(seed=0, eos=eos)
    return ModelPair.from_models(target, tiny_llama(seed=1))


@pytest.mark.parametrize("shape", [dict(k=1), dict(k=3), dict(k=16), dict(tree=(6, 3)), dict(tree=(64, 16))])
@pytest.mark.parametrize("max_new", [1, 2, 7])
def test_max_new_tokens_is_exact(shape, max_new):
    pair = greedy_pair()
    plain = autoregressive_generate(pair, [1, 2], max_new_tokens=max_new)
    spec = speculative_generate(pair, [1, 2], max_new_tokens=max_new, **shape)
    assert len(plain.output_ids) == len(spec.output_ids) == max_new
    assert spec.output_ids == plain.output_ids
    assert spec.stop_reason == "max_new_tokens" and spec.finished
    # Never a guess past the last token: the round's own draw always ends it.
    for r in spec.rounds:
        assert r.tree_depth <= max_new - sum(len(x.committed) for x in spec.rounds[:r.index]) - 1
    if max_new > 1:
        assert spec.rounds[0].n_verified > 0


@pytest.mark.parametrize("k", [1, 4, 12])
def test_stops_at_eos_and_commits_it(k):
    reference = autoregressive_generate(greedy_pair(), [3, 1], max_new_tokens=30).output_ids
    # Take as EOS a token that first appears a few positions in, so the stop is mid-output.
    position, eos = next((i, t) for i, t in enumerate(reference) if i >= 2 and t not in reference[:i])
    pair = greedy_pair(eos=eos)
    for trace in (autoregressive_generate(pair, [3, 1], max_new_tokens=30),
                  speculative_generate(pair, [3, 1], k=k, max_new_tokens=30)):
        assert trace.output_ids == reference[: position + 1]
        assert trace.output_ids[-1] == eos and trace.stop_reason == "eos"


def test_eos_hidden_in_text_but_kept_in_ids():
    reference = autoregressive_generate(greedy_pair(), [3, 1], max_new_tokens=10).output_ids
    eos = reference[3]
    trace = speculative_generate(greedy_pair(eos=eos), [3, 1], k=4, max_new_tokens=10)
    assert trace.output_ids[-1] == eos
    assert f"<{eos}>" not in trace.text


@pytest.mark.parametrize("k", [1, 5])
def test_one_token_prompt(k):
    pair = greedy_pair()
    plain = autoregressive_generate(pair, [4], max_new_tokens=8)
    assert speculative_generate(pair, [4], k=k, max_new_tokens=8).output_ids == plain.output_ids
    sampled = speculative_generate(pair, [4], k=k, temperature=1.0, max_new_tokens=8, seed=1)
    assert len(sampled.output_ids) == 8


def test_same_seed_same_trace_different_seed_differs():
    pair = greedy_pair()
    runs = [speculative_generate(pair, [1, 2], k=3, temperature=1.0, max_new_tokens=24, seed=s)
            for s in (5, 5, 6)]
    strip = [[(r.committed, [(t.id, t.u) for t in r.drafted]) for r in tr.rounds] for tr in runs]
    assert strip[0] == strip[1]
    assert strip[0] != strip[2]


@pytest.mark.parametrize("bad", [dict(k=0), dict(k=-2), dict(k="many"), dict(max_new_tokens=0),
                                 dict(temperature=-0.5), dict(top_p=0.0), dict(top_k=-1)])
def test_bad_settings_raise_value_error(bad):
    with pytest.raises(ValueError):
        speculative_generate(greedy_pair(), [1, 2], **{"k": 2, **bad})


def test_empty_and_out_of_vocabulary_prompts_are_refused():
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(greedy_pair(), [], k=2)
    with pytest.raises(ValueError, match="prompt ids"):
        speculative_generate(greedy_pair(), [1, 99], k=2)
