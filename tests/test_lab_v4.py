"""Draft v4 (issue 57): teacher forcing equals the reference pass, the text mixture is seeded and
resumes exactly, documents are placed in the chat format, the vocabulary rule, and the run end to end
on a tiny random target (fresh, checkpointed, resumed to the same weights as an uninterrupted run)."""
import numpy as np
import pytest
import torch

from specdec_core.lab import v4
from specdec_core.lab.capture import teacher_force
from specdec_core.lab.force import force
from specdec_core.lab.stream import StreamConfig
from specdec_core.lab.texts import EOS, Doc, Mixture, Source, encode, list_kind, hash_str
from tests.test_lab_v3 import prompts_of, tiny_target


def test_force_equals_a_plain_forward_at_every_labelled_position():
    target = tiny_target()
    seqs = prompts_of([23, 9, 40, 17])
    rows = [(np.array(s), p) for s, p in zip(seqs, [5, 3, 11, 2])]
    got = force(target, rows, layers=(10, 20, -1), max_tokens=60)        # several batches, padded
    for (ids, plen), g in zip(rows, got):
        ref = teacher_force(target, torch.tensor(ids), layers=(10, 20, -1))
        n = len(ids)
        assert g["ids"].tolist() == ids.tolist() and g["plen"] == plen
        torch.testing.assert_close(g["feats"][: n - 1].float(), ref["feats"][: n - 1].float(), atol=2e-3, rtol=0)
        assert not g["feats"][n - 1].any()
        lo, hi = plen - 1, n - 1
        torch.testing.assert_close(g["lse"][lo:hi], ref["lse"][lo:hi], atol=1e-4, rtol=0)
        assert g["argmax"][lo:hi].tolist() == ref["top_ids"][lo:hi, 0].tolist()
        assert not g["lse"][:lo].any() and not g["argmax"][:lo].any()


def _fake_sources(n_units=(5, 3, 0)):
    def units_of(name, n):
        return lambda: [f"{name}-{i}" for i in range(n)]

    def docs(name):
        # unit "a-2" yields 1 + 2 documents; their texts name the unit and the document
        return lambda unit, rng: [Doc(name, "prose", f"ask {unit}", f"{unit}/{j}") for j in range(1 + int(unit.split("-")[1]))]
    return [Source(name, w, units_of(name, n), docs(name), per_unit=2) for name, w, n in zip("abc", (0.6, 0.4, 0.5), n_units)]


def test_mixture_is_seeded_resumes_exactly_and_skips_missing_sources():
    srcs = _fake_sources()
    whole = [d.answer for d in Mixture(srcs, seed=3).take(40)]
    assert whole == [d.answer for d in Mixture(srcs, seed=3).take(40)]
    assert whole != [d.answer for d in Mixture(srcs, seed=4).take(40)]
    first = Mixture(srcs, seed=3)
    head = [d.answer for d in first.take(17)]
    resumed = Mixture(srcs, seed=3, state=first.state())
    assert head + [d.answer for d in resumed.take(23)] == whole
    assert set(resumed.available()) == {"a", "b"}                      # "c" has no units here
    # per_unit: at most 2 documents of one unit per epoch; epochs wrap around
    from collections import Counter
    per = Counter(a.rsplit("/", 1)[0] for a in [d.answer for d in Mixture(srcs, seed=3).take(12)])
    assert max(per.values()) <= 4 and resumed.state()["cursor"]["a"][0] >= 1


def test_encode_places_a_document_as_the_assistants_answer():
    class Tok:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [10 + (ord(ch) % 50) for ch in text]}
    enc = lambda text: [1, 5, 6] + [10 + (ord(ch) % 50) for ch in text] + [7]
    ids, plen, complete = encode(Tok(), enc, Doc("x", "prose", "hi", "abcdef"), max_answer=10)
    assert plen == 6 and ids[:plen].tolist() == enc("hi") and ids[-1] == EOS and complete and len(ids) == plen + 7
    ids, plen, complete = encode(Tok(), enc, Doc("x", "prose", "hi", "abcdefghijklmnop"), max_answer=10)
    assert len(ids) == plen + 10 and ids[-1] != EOS and not complete
    ids, plen, complete = encode(Tok(), enc, Doc("t", "target-written", None, None, ids=([1, 2, 3], [4, 5, EOS])))
    assert ids.tolist() == [1, 2, 3, 4, 5, EOS] and plen == 3 and complete


def test_list_kind_and_stable_hash():
    assert list_kind("Steps:\n1. one\n2. two\n3. three") == "list"
    assert list_kind("- a\n- b") == "prose"
    assert hash_str("abc") == hash_str("abc") != hash_str("abd")


def test_vocabulary_size_is_coverage_net_of_cost():
    cov = lambda a, b, c: {8192: {"all": a}, 16384: {"all": b}, 32768: {"all": c}}
    assert v4.choose_vocab(cov(0.933, 0.968, 0.984)) == 16384          # 16k's 3.5 points cost 1.2
    assert v4.choose_vocab(cov(0.95, 0.955, 0.96)) == 8192             # too little gained for the cost
    assert v4.choose_vocab(cov(0.80, 0.85, 0.95)) == 32768


class _Tok:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3 + (ord(ch) % 90) for ch in text]}

    def decode(self, ids):
        return "".join(chr(60 + i % 30) for i in ids)


class _Pair:
    def __init__(self, target):
        self.target, self.tokenizer = target, _Tok()

    def encode_prompt(self, text):
        return [1] + [3 + (ord(ch) % 90) for ch in text[:8]]


def _tiny_run(tmp_path, monkeypatch, stop_at, folder="v4", budget=300):
    pair = _Pair(tiny_target())
    monkeypatch.setattr(v4, "load_target", lambda device: pair)
    monkeypatch.setattr(v4, "selection_prompts", lambda *a: [{"name": "s0", "task": "code", "text": "write code"},
                                                              {"name": "s1", "task": "chat", "text": "hello there"}])
    monkeypatch.setattr("specdec_core.lab.sources.target_outputs", lambda sources: [{"gen": np.arange(3, 96)}])
    monkeypatch.setattr(v4, "first_guess_of", lambda p, head, sel: {"first": 0.3, "top3": 0.5, "rounds": 9,
                                                                     "by_kind": {"code": 0.5, "chat": 0.1}})
    monkeypatch.setattr(v4, "SIZES", (40, 60, 80))
    monkeypatch.setattr(v4, "C_BY_SIZE", {40: 0.0, 60: 0.5, 80: 0.9})
    srcs = [Source("a", 1.0, lambda: [f"unit{i}" for i in range(50)],
                   lambda u, rng: [Doc("a", "prose", f"ask {u}", f"answer {u} " * 3)], per_unit=1)]
    monkeypatch.setattr(v4, "Mixture", lambda seed=0, state=None: Mixture(srcs, seed=seed, state=state))
    cfg = v4.RunConfig(out=str(tmp_path / folder), init_head=None, init_layer=20, vocab_docs=6, cycle_docs=4, select_every=10**9,
                       ckpt_minutes=0, stop_at=stop_at, stream=StreamConfig(train_batch=2, warmup=2, positions=budget))
    return pair, cfg, v4.run(cfg, log=lambda *_: None)


def test_run_fresh_checkpoints_and_resumes_to_the_same_weights(tmp_path, monkeypatch):
    pair, cfg, state = _tiny_run(tmp_path, monkeypatch, 150)
    assert 150 <= state["positions"] < 300 and state["vocabulary"]["chosen"] == 40
    assert state["history"][0]["positions"] == 0 and state["history"][0]["code"] == 0.5
    assert state["by_source"] == {"a": state["positions"]} and state["forced"] > state["positions"]
    # The same run taken further in one go, and resumed from the folder of the shorter one.
    _, cfg2, longer = _tiny_run(tmp_path, monkeypatch, None, folder="v4-long")
    cfg.stop_at = None
    resumed = v4.run(cfg, log=lambda *_: None)
    assert longer["positions"] >= 300
    assert resumed["positions"] == longer["positions"] and resumed["mixture"]["drawn"] == longer["mixture"]["drawn"]
    a = v4._head_from_folder(pair, cfg, tmp_path / "v4")
    b = v4._head_from_folder(pair, cfg2, tmp_path / "v4-long")
    from specdec_core.lab import checkpoint
    checkpoint.load(tmp_path / "v4", a, v4.new_optimizer(a, cfg.stream))
    checkpoint.load(tmp_path / "v4-long", b, v4.new_optimizer(b, cfg2.stream))
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k


def test_a_documents_file_continues_the_mixture_where_a_machine_without_sources_stopped(tmp_path, monkeypatch):
    """A lent GPU trains on `v4-docs` documents; the CPU run resumed after it draws from the sources
    where the file left off: the same weights as one uninterrupted run."""
    import json
    from specdec_core.lab import checkpoint
    from specdec_core.lab.texts import write_docs
    pair, cfg, state = _tiny_run(tmp_path, monkeypatch, 300, budget=900)
    path = tmp_path / "docs.jsonl.gz"
    write_docs(v4._supply(cfg, state, lambda *_: None), 12, path)
    cfg.docs, cfg.stop_at = str(path), 600
    on_file = v4.run(cfg, log=lambda *_: None)
    assert on_file["mixture"]["skip"] > 0 and on_file["mixture"]["drawn"] == state["mixture"]["drawn"]
    cfg.docs, cfg.stop_at = None, None
    resumed = v4.run(cfg, log=lambda *_: None)
    _, cfg2, longer = _tiny_run(tmp_path, monkeypatch, None, folder="v4-long", budget=900)
    assert resumed["positions"] == longer["positions"] and resumed["mixture"]["drawn"] == longer["mixture"]["drawn"]
    assert on_file["positions"] < resumed["positions"] and "skip" not in resumed["mixture"]
    a, b = v4._head_from_folder(pair, cfg, tmp_path / "v4"), v4._head_from_folder(pair, cfg2, tmp_path / "v4-long")
    checkpoint.load(tmp_path / "v4", a, v4.new_optimizer(a, cfg.stream))
    checkpoint.load(tmp_path / "v4-long", b, v4.new_optimizer(b, cfg2.stream))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    # A file that does not start where the run is refuses, with the way out in its message.
    late = tmp_path / "late.jsonl.gz"
    write_docs(v4._supply(cfg, json.loads((tmp_path / "v4" / "state.json").read_text()), lambda *_: None), 3, late)
    with pytest.raises(SystemExit, match="v4-docs"):
        v4.FileDocs(str(late), state)                                  # the run at an earlier draw


def test_a_run_without_scoring_keeps_milestone_heads_that_are_scored_later(tmp_path, monkeypatch):
    """On a lent GPU the run saves the learning curve's heads unscored; v4-score scores them on the CPU."""
    import json
    monkeypatch.setattr(v4, "MILESTONES", (300, 600))
    pair, cfg, state = _tiny_run(tmp_path, monkeypatch, 250, budget=700)
    assert [h["positions"] for h in state["history"]] == [0] and state["positions"] < 300
    cfg.score, cfg.stop_at = False, None
    done = v4.run(cfg, log=lambda *_: None)
    folder = tmp_path / "v4"
    assert sorted(p.name for p in (folder / "milestones").iterdir()) == ["300", "600"]
    assert [h["positions"] for h in done["history"]] == [0]
    assert json.loads((folder / "milestones" / "600" / "config.json").read_text())["positions"] >= 600
    scored = v4.score_saved(cfg, log=lambda *_: None)
    assert [h["positions"] for h in scored["history"]][0] == 0 and len(scored["history"]) == 3
    assert scored["history"][-1]["positions"] == done["positions"]
    assert json.loads((folder / "state.json").read_text())["history"] == scored["history"]


def test_step_terms_with_a_shared_teacher_and_no_alpha_give_the_same_ce_and_match():
    """The stream computes p once for its rollout steps and leaves α out for the KL losses: ce and
    match are what the full computation gives."""
    from specdec_core.lab.losses import step_terms
    from specdec_core.lab.train import new_head
    target = tiny_target()
    head = new_head(target, torch.arange(3, 60), 20, (10, 20, -1))
    g = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1))
    valid = torch.rand(2, 7, generator=torch.Generator().manual_seed(2)) > 0.3
    logp = torch.log_softmax(torch.randn(int(valid.sum()), 57, generator=torch.Generator().manual_seed(3)), -1) - 0.1
    full = step_terms(head, g, logp, valid)
    lean = step_terms(head, g, logp, valid, p=logp.exp(), alpha=False)
    assert "alpha" in full and "alpha" not in lean
    assert torch.equal(full["ce"], lean["ce"]) and torch.equal(full["match"], lean["match"])
