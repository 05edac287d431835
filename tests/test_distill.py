"""The distillation lab: losses on hand-computed cases, the training-time rollout equals drafting,
the truncated-vocabulary feature draft keeps speculative sampling exact, and the shipped draft
beats the n-gram drafter on a fixed prompt."""

import json

import pytest
import torch

from specdec_core import ModelPair, speculative_generate
from specdec_core.lab import cli, train as D
from specdec_core.drafters.feature_drafter import FeatureDrafter
from specdec_core.drafters.feature_head import WEIGHTS, FeatureHead, shipped_head, target_cfg
from specdec_core.sampling import SamplingConfig

from .conftest import draft_chain, tiny_llama
from .test_exactness import check_exact


def test_chain_loss_is_expected_accepted_length():
    alphas = torch.tensor([0.9, 0.5, 0.2])
    # E[τ] = α1 + α1α2 + α1α2α3 by hand.
    assert D.chain_expected_length(alphas).item() == pytest.approx(0.9 + 0.45 + 0.09)
    # Constant α: Σ_{j≤k} α^j = (1 − α^(k+1))/(1 − α) − 1 (Leviathan's E[tokens per round] − 1).
    a, k = 0.7, 5
    closed = (1 - a ** (k + 1)) / (1 - a) - 1
    assert D.chain_expected_length(torch.full((k,), a)).item() == pytest.approx(closed)


def test_tv_loss_is_one_minus_overlap():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.3, 0.0, 0.5])
    assert D.tv_loss(p, q).item() == pytest.approx(1 - (0.2 + 0.3 + 0.0 + 0.0))
    assert D.tv_loss(p, p).item() == pytest.approx(0.0)


def test_step_terms_and_losses_on_a_small_case():
    torch.manual_seed(0)
    head = _random_head(tiny_llama(vocab_size=8), torch.arange(8))
    g = torch.randn(1, 3, 16)
    logp = torch.log_softmax(torch.randn(3, 8), -1)
    valid = torch.ones(1, 3, dtype=torch.bool)
    t = D.step_terms(head, g, logp, valid)
    q = torch.softmax(head.logits(g[0]), -1)
    p = logp.exp()
    assert torch.allclose(t["alpha"][0], 1 - D.tv_loss(p, q), atol=1e-6)
    assert torch.allclose(t["ce"][0], -(p * q.log()).sum(-1), atol=1e-5)
    assert D.loss_fn("tv", [t], valid).item() == pytest.approx(float(D.tv_loss(p, q).mean()), abs=1e-6)
    chain = D.loss_fn("chain", [t, t, t], valid)    # 1 anchor: rows 0, 1, 2 of steps 1, 2, 3
    al = t["alpha"][0].detach()
    assert chain.item() == pytest.approx(1 - D.chain_expected_length(al).item() / 3, abs=1e-6)


def _random_head(target, vocab_ids, scale=0.5, layers=(-1,), depth=1):
    head = FeatureHead({**target_cfg(target), "feature_layers": list(layers), "depth": depth}, vocab_ids)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, scale)
    return head.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight)


@pytest.mark.parametrize("layers,depth", [((-1,), 1), ((1, 2, -1), 1), ((-1,), 3)])
def test_rollout_equals_incremental_drafting(layers, depth):
    """The training-time K-step rollout computes exactly what the drafter's KV cache computes
    (a head reading one tap, one fusing three, and one of three decoder layers)."""
    torch.manual_seed(0)
    target = tiny_llama(vocab_size=50)
    head = _random_head(target, torch.arange(40), layers=layers, depth=depth).eval()
    assert len(head.layers()) == depth
    T, K = 12, 4
    ids, feats = torch.randint(0, 50, (1, T)), torch.randn(1, T, 16 * len(layers))
    with torch.no_grad():
        outs = [head.logits(g) for g in D.rollout(head, feats, ids, K)]
        fused = head.true_feature(feats)
        for a in range(T - 1 - K):                 # last true entry a; drafts follow the data
            pos = torch.arange(a + 1)
            g, cache = head(fused[:, pos], ids[:, pos + 1], pos, None)
            g = g[:, -1:]
            for j in range(1, K + 1):
                assert torch.allclose(head.logits(g)[0, 0], outs[j - 1][0, a + j - 1], atol=1e-4)
                if j < K:
                    g, cache = head(g, ids[:, a + j + 1][None], torch.tensor([a + j]), cache)


@pytest.fixture(scope="module", params=[(-1,), (1, 2, -1)], ids=["one-tap", "three-taps"])
def truncated_pair(request):
    """A tiny target (2 layers) and a random feature head that can only propose 5 of the 8 tokens,
    reading the final state, or fusing three tapped layers into two decoder layers."""
    torch.manual_seed(3)
    target = tiny_llama(vocab_size=8, seed=0, layers=2)
    head = _random_head(target, torch.tensor([0, 2, 3, 5, 6]), scale=0.6, layers=request.param,
                        depth=1 if len(request.param) == 1 else 2).eval()
    pair = ModelPair.from_models(target, lambda p: FeatureDrafter(head, p.vocab_size), None)
    return pair


# Each sampler case runs with one of the two heads (one tap, three taps): every case and both heads
# are covered at half the cost of all eight pairs (1,500 seeded decodes each).
TRUNCATED_CASES = {"one-tap": [(1, 1.0, 0, 1.0, 2), (3, 0.7, 4, 1.0, 4)],
                   "three-taps": [(2, 1.0, 0, 1.0, 3), (2, 1.3, 0, 0.8, 3)]}


def test_truncated_vocabulary_draft_is_exact(truncated_pair, request):
    taps = request.node.callspec.id              # the truncated_pair fixture's id: one-tap | three-taps
    for k, temperature, top_k, top_p, max_new in TRUNCATED_CASES[taps]:
        cfg = SamplingConfig(temperature, top_k, top_p)
        assert check_exact(truncated_pair, k, cfg, max_new) > 1e-3, (taps, k, temperature, top_k, top_p)


def test_truncated_draft_proposes_only_its_vocabulary(truncated_pair):
    tr = speculative_generate(truncated_pair, [1, 5, 2], k=3, temperature=1.0, max_new_tokens=12, seed=1)
    drafted = {d.id for r in tr.rounds for d in r.drafted}
    assert drafted and drafted <= {0, 2, 3, 5, 6}


def test_feature_drafter_reads_the_prompt_in_the_prefill(truncated_pair):
    """The head's pass over the prompt belongs to the prefill (start), not to the first round:
    k = "auto" measures the draft cost c from round times. Its first proposal equals one from a
    drafter that reads the prompt lazily (reset before proposing)."""
    prompt = torch.tensor([1, 5, 2, 7, 3])
    n_taps = len(truncated_pair.new_drafter().feature_layers)
    hidden = torch.randn(len(prompt) - 1, truncated_pair.target.config.hidden_size * n_taps)
    eager, lazy = truncated_pair.new_drafter(), truncated_pair.new_drafter()
    for d in (eager, lazy):
        d.observe(hidden)
        d.start(prompt)
    assert eager.n_true == len(prompt) - 1 and eager.cache[0].shape[2] == len(prompt) - 1
    lazy.cache, lazy.n_true, lazy.g_next = None, 0, None   # as before start: the first draft reads the prompt
    cfg = SamplingConfig(0.0)
    a, b = (draft_chain(d, prompt, 3, cfg, None) for d in (eager, lazy))
    assert a.ids.tolist() == b.ids.tolist() and torch.allclose(a.q_raw, b.q_raw, atol=1e-5)


def test_shipped_draft_beats_ngram(default_pair):
    """On prompts whose answers do not copy the prompt, the n-gram drafter has little to go on;
    the distilled draft must accept more and commit more tokens per round there (greedy, k = 2)."""
    from specdec_core.drafters.feature_drafter import drafter_factory
    assert len((shipped_head() / WEIGHTS).read_bytes()) < 20 * 2**20     # shipped, and small
    pair = ModelPair.from_models(default_pair.target, drafter_factory(default_pair.target),
                                default_pair.tokenizer)
    assert len(pair.new_drafter().feature_layers) == len(json.loads((shipped_head() / "config.json").read_text())
                                                        ["cfg"].get("feature_layers", [-1]))
    ours, ngram = [], []
    for text in ("List the planets of the solar system in order, one per line.",
                 "Give three tips for staying focused while studying."):
        ids = default_pair.encode_prompt(text)
        ours.append(speculative_generate(pair, ids, k=2, temperature=0.0, max_new_tokens=40))
        ngram.append(speculative_generate(default_pair, ids, k=2, temperature=0.0, max_new_tokens=40))
    for a, b in zip(ours, ngram):
        assert a.output_ids == b.output_ids                                   # both exact
    total = lambda trs, key: sum(t.stats[key] for t in trs)
    assert total(ours, "accepted") > total(ngram, "accepted")
    assert total(ours, "new_tokens") / sum(len(t.rounds) for t in ours) > \
        total(ngram, "new_tokens") / sum(len(t.rounds) for t in ngram)
    assert min(t.stats["alpha"] for t in ours) > 0.2


def test_lab_reads_its_data_folder_from_the_environment(monkeypatch, tmp_path):
    from specdec_core.lab import data
    monkeypatch.setenv(data.ENV_DATA, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="pass --data DIR or set SPECDEC_DISTILL_DATA"):
        data.load_sequences()
    monkeypatch.setenv(data.ENV_CACHE, str(tmp_path / "cache"))
    assert data.cache_dir() == tmp_path / "cache"


def test_a_saved_head_loads_as_a_draft_from_its_folder(default_pair, tmp_path):
    """The lab's output (safetensors + config) is what `--draft distilled:DIR` loads."""
    from specdec_core import load_pair
    from specdec_core.drafters.feature_head import load_head, save_head
    shipped = load_head(default_pair.target)
    save_head(shipped, tmp_path / "head", {"note": "copy"})
    assert (tmp_path / "head" / WEIGHTS).is_file() and not list((tmp_path / "head").glob("*.pt"))
    pair = load_pair("smollm2-135m", draft=f"distilled:{tmp_path / 'head'}", device="cpu")
    ids = pair.encode_prompt("Write a haiku about trains.")
    mine = speculative_generate(pair, ids, k=3, max_new_tokens=16)
    ref = speculative_generate(load_pair("smollm2-135m", draft="distilled", device="cpu"), ids, k=3, max_new_tokens=16)
    assert mine.output_ids == ref.output_ids
    assert [len(r.drafted) for r in mine.rounds] == [len(r.drafted) for r in ref.rounds]


def test_a_deeper_head_drafts_as_the_head_it_deepens(default_pair, tmp_path):
    """A head of two decoder layers started from the shipped one (the second a pass-through) saves,
    loads as `distilled:DIR` and drafts the very guesses the shipped head drafts; the second layer
    has its own cache and packs."""
    from specdec_core import load_pair
    from safetensors.torch import load_file
    from specdec_core.drafters.feature_head import load_head, save_head
    shipped = load_head(default_pair.target)
    deep = D.new_head(default_pair.target, shipped.vocab_ids, 29, depth=2)
    D.load_start(deep, load_file(str(shipped_head() / WEIGHTS)))
    deep.attach_memory(shipped.memory)          # the shipped draft drafts with its phrase memory
    save_head(deep, tmp_path / "deep", {"note": "two layers"})
    assert json.loads((tmp_path / "deep" / "config.json").read_text())["cfg"]["depth"] == 2
    pair = load_pair("smollm2-135m", draft=f"distilled:{tmp_path / 'deep'}", device="cpu")
    loaded = load_head(pair.target, tmp_path / "deep")
    assert len(loaded.layers()) == 2 and not loaded.extra[0].o.weight.any()
    ids = pair.encode_prompt("Write a haiku about trains.")
    ref_pair = load_pair("smollm2-135m", draft="distilled", device="cpu")
    for k in (1, 3):
        mine = speculative_generate(pair, ids, k=k, max_new_tokens=16)
        ref = speculative_generate(ref_pair, ids, k=k, max_new_tokens=16)
        assert mine.output_ids == ref.output_ids
        assert [r.drafted for r in mine.rounds] == [r.drafted for r in ref.rounds]


def test_lab_run_names_cannot_leave_the_cache(capsys):
    for bad in ("../../evil", "/etc/passwd", ".hidden"):
        with pytest.raises(SystemExit):
            cli.main(["train", "--name", bad])
        assert "run names are letters" in capsys.readouterr().err
