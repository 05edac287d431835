"""Prompt lookup + a model draft (drafters/combined.py): exact (chi-square on tiny models, with a
forced n-gram match and without), greedy-identical to plain decoding on the default target, the
source of every round recorded and round-tripped through a trace file, and k = "auto" estimating
the lookup apart from the model."""
from types import SimpleNamespace

import pytest
import torch

from specdec_core import ModelPair, Trace, autoregressive_generate, load_pair, speculative_generate
from specdec_core.decoding.kpolicy import AutoK
from specdec_core.drafters import ModelDrafter
from specdec_core.drafters.combined import LOOKUP, MODEL, CombinedDrafter
from specdec_core.errors import ModelLoadError
from specdec_core.sampling import SamplingConfig

from .conftest import tiny_llama
from .test_exactness import check_exact

REPEATING = [1, 5, 2, 7, 1, 5, 2]          # ends with "1 5 2", seen before: a 3-gram match
SHORT = [1, 5, 2, 7, 3, 5, 2]              # "5 2" seen before, "3 5 2" not: a 2-gram match
FRESH = [1, 5, 2]                          # no earlier 2-gram: the model proposes


def tiny_combined():
    target, draft = tiny_llama(seed=0), tiny_llama(seed=1)
    pair = ModelPair.from_models(target, draft)
    return pair, lambda: CombinedDrafter(ModelDrafter(draft, pair.vocab_size), pair.vocab_size)


@pytest.mark.slow
@pytest.mark.parametrize("prompt, source", [(REPEATING, LOOKUP), (FRESH, MODEL)])
def test_combined_drafter_is_exact(prompt, source):
    pair, make = tiny_combined()
    d = make()
    assert d.next_source(torch.tensor(prompt)) == source
    trace = speculative_generate(pair, prompt, k=3, temperature=1.0, max_new_tokens=4, seed=0, drafter=make())
    assert trace.rounds[0].draft_source == source
    assert check_exact(pair, 3, SamplingConfig(1.0), 4, prompt=prompt, drafter_factory=make) > 1e-3


@pytest.mark.slow
def test_a_short_match_is_offered_to_auto_only_and_exact():
    """A 2-gram match is offered (next_source, match_n = 2) but a fixed k does not take it alone;
    taken on k = "auto"'s word (use_source(LOOKUP)), the lookup proposes, exactly."""
    pair, make = tiny_combined()
    d = make()
    assert d.next_source(torch.tensor(SHORT)) == LOOKUP and d.match_n == 2
    assert d.next_source(torch.tensor(REPEATING)) == LOOKUP and d.match_n == 3
    fixed = speculative_generate(pair, SHORT, k=3, temperature=1.0, max_new_tokens=4, seed=0, drafter=make())
    assert fixed.rounds[0].draft_source == MODEL

    def taken():
        d = make()
        d.use_source(LOOKUP)
        return d
    trace = speculative_generate(pair, SHORT, k=3, temperature=1.0, max_new_tokens=4, seed=0, drafter=taken())
    assert trace.rounds[0].draft_source == LOOKUP and [t.id for t in trace.rounds[0].drafted] == [7, 3, 5]
    assert check_exact(pair, 3, SamplingConfig(1.0), 4, prompt=SHORT, drafter_factory=taken) > 1e-3


def test_ngram_match_is_the_latest_longest_earlier_occurrence():
    """NGramDrafter.match against a direct reading of its definition, on random token strings."""
    from specdec_core.drafters import NGramDrafter
    rng = torch.Generator().manual_seed(0)

    def reference(tokens, lo, hi):
        for n in range(min(hi, len(tokens) - 1), lo - 1, -1):
            for start in range(len(tokens) - n - 1, -1, -1):
                if tokens[start:start + n] == tokens[len(tokens) - n:]:
                    return n, start + n
        return 0, -1
    n_found = set()
    for trial in range(400):
        tokens = torch.randint(0, 4, (int(torch.randint(1, 30, (1,), generator=rng)),), generator=rng).tolist()
        lo, hi = [(1, 3), (2, 4), (3, 4)][trial % 3]
        got = NGramDrafter(4, max_ngram=hi, min_ngram=lo).match(tokens)
        assert got == reference(tokens, lo, hi), tokens
        n_found.add(got[0])
    assert n_found == {0, 1, 2, 3, 4}     # every case met: no match, and matches of each length


def test_combined_drafter_power_check(monkeypatch):
    """The same test fails when the lookup's q is wrong (uniform instead of one-hot)."""
    pair, make = tiny_combined()
    from specdec_core.drafters import ngram
    real = ngram.NGramDrafter.copy_proposal     # where the lookup's proposal and its q are built

    def wrong_q(self, *a, **k):
        p = real(self, *a, **k)
        p.q_probs = torch.full_like(p.q_probs, 1.0 / p.q_probs.shape[-1])
        return p
    monkeypatch.setattr(ngram.NGramDrafter, "copy_proposal", wrong_q)
    import tests.test_exactness as ex
    monkeypatch.setattr(ex, "N_SAMPLES", 600)
    assert check_exact(pair, 3, SamplingConfig(1.0), 4, prompt=REPEATING, drafter_factory=make) < 1e-3


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
    assert LOOKUP in sources and MODEL in sources
    back = Trace.from_json(trace.to_json())
    assert [r.draft_source for r in back.rounds] == [r.draft_source for r in trace.rounds]
    # k = "auto" takes the lookup on this copy-heavy prompt: decided on the fake clock (every round's
    # parts one tick), so the outcome depends on the numbers of the models, not the machine's load.
    auto = speculative_generate(pair, ids, k="auto", max_new_tokens=40)
    assert auto.output_ids == plain.output_ids
    assert all(r.draft_s == pytest.approx(0.01) for r in auto.rounds)      # the fake clock ran it
    assert any(r.k_policy and r.k_policy.get("source") == LOOKUP for r in auto.rounds)


def test_lookup_alone_is_not_a_combined_draft():
    with pytest.raises(ModelLoadError, match="needs a model draft"):
        load_pair("smollm2-135m", draft="lookup+ngram", device="cpu")


def test_auto_keeps_lookup_estimates_apart():
    policy = AutoK(step_s=0.1)
    drafted = [SimpleNamespace(evaluated=True, overlap=1.0) for _ in range(4)]
    for _ in range(6):   # lookup rounds: everything accepted, nearly free
        policy.update(SimpleNamespace(drafted=drafted, verify_s=0.12, draft_s=0.0, n_accepted=4, t_start=0.0,
                                      t_end=0.12, committed=[1] * 5, draft_source=LOOKUP))
    assert policy.lookup_alpha_hot > 0.9 and policy.alpha_hot == AutoK().alpha_hot and policy.n_spec == 0
    k_lookup, _, decision = policy.next_k(LOOKUP)
    assert decision["kind"] == "lookup_best_k" and decision["source"] == LOOKUP and k_lookup >= 6
    assert policy.next_k()[0] < k_lookup


@pytest.mark.slow
def test_a_declined_lookup_is_exact_and_the_model_proposes():
    """k = "auto" may decline an offered lookup (use_source(MODEL)): the model proposes, exactly."""
    pair, make = tiny_combined()

    def declined():
        d = make()
        d.use_source(MODEL)
        return d
    assert make().next_source(torch.tensor(REPEATING)) == LOOKUP
    trace = speculative_generate(pair, REPEATING, k=3, temperature=1.0, max_new_tokens=4, seed=0, drafter=declined())
    assert trace.rounds[0].draft_source == MODEL
    assert check_exact(pair, 3, SamplingConfig(1.0), 4, prompt=REPEATING, drafter_factory=declined) > 1e-3


def test_auto_keeps_short_and_long_match_estimates_apart():
    """Short matches (2-grams) diverge more often than long ones: their α is learnt apart, and the
    decision says which match it rests on."""
    policy = AutoK(step_s=0.1, draft_step_s=0.01, alpha_hot=0.3, alpha_all=0.3)
    drafted = [SimpleNamespace(evaluated=i == 0, overlap=0.0 if i == 0 else None) for i in range(4)]
    for _ in range(8):   # short-match lookups that fail at once
        policy.update(SimpleNamespace(drafted=drafted, verify_s=0.11, draft_s=0.0, n_accepted=0, t_start=0.0,
                                      t_end=0.11, committed=[1], draft_source=LOOKUP, k_policy={"match_n": 2}))
    assert policy.short_alpha_cold < 0.2 and policy.lookup_alpha_cold == AutoK().lookup_alpha_cold
    short = policy.next_k(LOOKUP, 2)[2]
    long = policy.next_k(LOOKUP, 3)[2]
    assert short["source"] == MODEL and "2-gram" in short["why"] and "declined" in short["why"]
    assert long["source"] == LOOKUP and long["match_n"] == 3 and "3-gram" in long["why"]


def test_auto_declines_a_lookup_the_model_beats():
    """A lookup that keeps diverging is not taken while the model draft is predicted faster; a
    lookup that copies well is."""
    policy = AutoK(step_s=0.1, draft_step_s=0.005, alpha_hot=0.8, alpha_all=0.8,
                   lookup_alpha_hot=0.2, lookup_alpha_cold=0.2, lookup_step_s=0.0)
    k, _, decision = policy.next_k(LOOKUP)
    assert k > 0 and decision["kind"] == "best_k" and decision["source"] == MODEL
    assert "lookup declined" in decision["why"] and decision["lookup_predicted"] < decision["predicted"]
    policy.lookup_alpha_hot = policy.lookup_alpha_cold = 0.97
    k, _, decision = policy.next_k(LOOKUP)
    assert decision["kind"] == "lookup_best_k" and decision["source"] == LOOKUP
