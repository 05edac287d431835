"""Prompt lookup + a model draft (drafters/combined.py): exact (chi-square on tiny models, with a
forced n-gram match and without), greedy-identical to plain decoding on the default target, the
source of every round recorded and round-tripped through a trace file, and in trees the lookup's
copy merged in as a branch, exactly."""
import pytest
import torch

from specdec_core import ModelPair, Trace, autoregressive_generate, load_pair, speculative_generate
from specdec_core.drafters import ModelDrafter, Source
from specdec_core.drafters.combined import CombinedDrafter
from specdec_core.errors import ModelLoadError
from specdec_core.sampling import SamplingConfig

from .conftest import tiny_llama
from .test_exactness import check_exact

REPEATING = [1, 5, 2, 7, 1, 5, 2]          # ends with "1 5 2", seen before: a 3-gram match
SHORT = [1, 5, 2, 7, 3, 5, 2]              # "5 2" seen before, "3 5 2" not: a 2-gram match
FRESH = [1, 5, 2]                          # no earlier 2-gram: the model proposes
LOOKUP, MODEL = Source.LOOKUP, Source.MODEL


def tiny_combined():
    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)
    pair = ModelPair.from_models(target, draft)
    return pair, lambda: CombinedDrafter(ModelDrafter(draft, pair.vocab_size), pair.vocab_size)


@pytest.mark.slow
@pytest.mark.parametrize("prompt, source", [(REPEATING, LOOKUP), (FRESH, MODEL)])
def test_combined_drafter_is_exact(prompt, source):
    pair, make = tiny_combined()
    trace = speculative_generate(pair, prompt, k=3, temperature=1.0, max_new_tokens=4, seed=0, drafter=make())
    assert trace.rounds[0].draft_source == {source}
    assert check_exact(pair, 3, SamplingConfig(1.0), 4, prompt=prompt, drafter_factory=make) > 1e-3


@pytest.mark.slow
def test_a_short_match_becomes_a_tree_branch_exactly():
    """A 2-gram match: a fixed chain does not copy it; a tree grown for the shape rule (no node
    budget) tries the copy as its first branch, merged with the model's guesses (shared where they
    agree), and the output is still the target's."""
    pair, make = tiny_combined()
    fixed = speculative_generate(pair, SHORT, k=3, temperature=1.0, max_new_tokens=4, seed=0, drafter=make())
    assert fixed.rounds[0].draft_source == {MODEL}
    plans = [{"depth": 2, "width": 2, "frontier": 2, "nodes": None, "keep": None}] * 3
    trace = speculative_generate(pair, SHORT, 1, k_schedule=plans, temperature=1.0, max_new_tokens=3, seed=0,
                                 drafter=make())
    tree = trace.rounds[0].tree
    assert [n.id for n in tree[:2]] == [7, 3] and tree[0].source == LOOKUP and tree[1].parent == 0
    assert any(n.source == MODEL for n in tree)
    ids = [(n.parent, n.id) for n in tree]
    assert len(set(ids)) == len(ids)                               # one node per token per parent
    assert check_exact(pair, 1, SamplingConfig(1.0), 3, prompt=SHORT, drafter_factory=make, k_schedule=plans) > 1e-3


def test_combined_rounds_record_their_source_and_round_trip(default_pair, fake_clock):
    pair = load_pair("smollm2-135m", draft="lookup+distilled", device="cpu")
    assert pair.draft_name == "lookup+distilled"
    text = ("Summarize the following meeting notes in three bullet points, reusing their wording.\n\n"
            "Meeting notes: The team agreed that the release will move to Friday. Alice will update the "
            "release notes. Bob will run the full test suite on Thursday.")
    ids = pair.encode_prompt(text)
    trace = speculative_generate(pair, ids, k=4, max_new_tokens=40)
    plain = autoregressive_generate(pair, ids, max_new_tokens=40)
    assert trace.output_ids == plain.output_ids                     # greedy: identical to plain
    sources = [r.draft_source for r in trace.rounds if r.drafted]
    assert {LOOKUP} in sources and {MODEL} in sources
    back = Trace.from_json(trace.to_json())
    assert [r.draft_source for r in back.rounds] == [r.draft_source for r in trace.rounds]
    # tree = "auto" keeps the lookup's branch on this copy-heavy prompt: decided on the fake clock
    # (every round's parts one tick), so the outcome depends on the models' numbers, not the load.
    auto = speculative_generate(pair, ids, max_new_tokens=40)
    assert auto.output_ids == plain.output_ids
    assert all(r.draft_s == pytest.approx(0.01) for r in auto.rounds)      # the fake clock ran it
    copied = sum(r.n_accepted for r in auto.rounds if LOOKUP in (r.draft_source or ()))
    assert copied >= 5


def test_lookup_alone_is_not_a_combined_draft():
    with pytest.raises(ModelLoadError, match="needs a model draft"):
        load_pair("smollm2-135m", draft="lookup+ngram", device="cpu")


