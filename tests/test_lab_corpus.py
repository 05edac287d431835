"""The lab's training corpus (issue 11): instructions disjoint from the frozen yardstick, shards
that round-trip and never appear half-written, plain-text sources as chat answers, the vocabulary."""
import json

import numpy as np
import pytest

from specdec_core import data
from specdec_core.lab import corpus, instructions
from specdec_core.lab.yardstick import frequent_vocab_of


def test_the_yardstick_is_frozen_and_broad():
    d = json.loads(data.file("heldout_prompts.json").read_text())
    tasks = {p["task"] for p in d["prompts"]}
    assert len(d["prompts"]) >= 60 and len(tasks) >= 8
    assert min(sum(p["task"] == t for p in d["prompts"]) for t in tasks) >= 5
    assert len({p["text"] for p in d["prompts"]}) == len(d["prompts"])


def test_training_instructions_cover_every_task_and_never_a_heldout_prompt():
    items = instructions.make_instructions(600, seed=3)
    assert items == instructions.make_instructions(600, seed=3)          # reproducible
    assert {it["task"] for it in items} == set(instructions.TEMPLATES)
    assert len({it["text"] for it in items}) == 600
    instructions.check_disjoint([it["text"] for it in items])
    held = instructions.heldout_texts()[5]
    with pytest.raises(ValueError, match="held-out prompts"):
        instructions.check_disjoint([it["text"] for it in items] + [held.upper()])


def test_a_template_that_matches_a_heldout_prompt_is_refused(monkeypatch):
    """"Translate to French: {sentence}" would generate the held-out translation prompts' template."""
    templates = {**instructions.TEMPLATES, "translation": ["Translate to {language}: {sentence}"]}
    monkeypatch.setattr(instructions, "TEMPLATES", templates)
    with pytest.raises(ValueError, match="matches the held-out prompt"):
        instructions.check_disjoint([])


@pytest.mark.parametrize("raw, want", [
    ('A student might ask, "Why is the sky blue?"', "Why is the sky blue?"),
    ("Question: How do I fix a leaking tap?\nMore text", "How do I fix a leaking tap?"),
    ("Sure", None),
])
def test_invented_questions_are_cleaned(raw, want):
    assert instructions.clean_question(raw) == want


def test_corpus_shards_round_trip_and_a_crash_leaves_no_shard(tmp_path, monkeypatch):
    seqs = [dict(prompt=np.arange(5), gen=np.array([7, 8, 2]), task="code", greedy=True),
            dict(prompt=np.arange(3), gen=np.array([9, 2]), task="chat", greedy=False)]
    corpus._save(tmp_path / "gen_0000.npz", seqs)
    back = corpus.load_corpus(tmp_path, "gen")
    assert [b["task"] for b in back] == ["code", "chat"] and [b["greedy"] for b in back] == [True, False]
    assert all((b["gen"] == s["gen"]).all() and (b["prompt"] == s["prompt"]).all() for b, s in zip(back, seqs))

    def crash(*a, **k):
        raise OSError("disk full")
    from specdec_core import atomic
    monkeypatch.setattr(atomic.os, "replace", crash)                     # the one atomic writer
    with pytest.raises(OSError):
        corpus._save(tmp_path / "gen_0001.npz", seqs)
    assert len(corpus.load_corpus(tmp_path, "gen")) == 2                 # the half shard is not read
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen_0000.npz"]   # nor left behind


def test_plain_text_becomes_chat_answers_ending_in_eos(default_pair, monkeypatch):
    fake = {"wordnet": lambda n, rng: [("Define dog.", "A domesticated canid.", "definition")] * n,
            "fortunes": lambda n, rng: [("Tell me a quote.", "Brevity is the soul of wit.", "fortune")] * n}
    monkeypatch.setattr(corpus, "TEXT_SOURCES", fake)
    seqs = corpus.text_sequences(default_pair, per_source=3, max_tokens=4)
    assert len(seqs) == 6 and {s["task"] for s in seqs} == {"definition", "fortune"}
    for s in seqs:
        assert s["gen"][-1] == corpus.EOS and len(s["gen"]) <= 5
        assert default_pair.tokenizer.decode(s["prompt"]).rstrip().endswith("assistant")


def test_the_vocabulary_is_the_most_frequent_outputs_and_keeps_eos():
    outputs = [np.array([5, 5, 5, 6, 6, 7]), np.array([5, 9])]
    assert frequent_vocab_of(outputs, 3).tolist() == [2, 5, 6]
