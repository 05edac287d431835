"""Draft v5 (issue 57): the asks never hold a held-out prompt or template, and the write-and-train
run resumes exactly — two runs of one round each equal one run of two rounds."""
import json

import numpy as np
import pytest
import torch

from specdec_core.lab import asks as asks_mod
from specdec_core.lab.natural import held_texts, normalise
from specdec_core.lab.v4 import selection_prompts


def test_asks_templates_make_no_held_out_prompt():
    held = held_texts() + [p["text"] for p in selection_prompts()]
    assert len(held) > 100
    assert asks_mod.template_leaks(held) == []


def test_template_leaks_finds_a_planted_template(monkeypatch):
    # The check must be able to fail: a template that makes a yardstick prompt is reported.
    monkeypatch.setitem(asks_mod.EVERYDAY, "maths", ["What is {a}% of {b}?"])
    leaks = asks_mod.template_leaks(["What is 15% of 240?"])
    assert leaks == [("What is {a}% of {b}?", "What is 15% of 240?")]


def test_make_asks_disjoint_typeable_and_mixed():
    out = asks_mod.make_asks(600, seed=3, n_functions=40)
    held = {normalise(t) for t in held_texts() + [p["text"] for p in selection_prompts()]}
    texts = [a["text"] for a in out]
    assert len(out) == 600 and len({normalise(t) for t in texts}) == 600
    assert not held & {normalise(t) for t in texts}
    assert all(asks_mod._typeable(t) for t in texts)
    share = {k: sum(a["kind"] == k for a in out) / len(out) for k in asks_mod.SHARES}
    for kind, want in asks_mod.SHARES.items():       # drawn by SHARES (binomial spread at n = 600)
        assert abs(share[kind] - want) < 0.06, (kind, share)
    assert asks_mod.make_asks(50, seed=3, n_functions=40) == out[:50]      # seeded


@pytest.mark.model
@pytest.mark.slow
def test_v5_run_resumes_exactly(tmp_path):
    from specdec_core.lab.stream import StreamConfig
    from specdec_core.lab.v3 import load_target
    from specdec_core.lab.v5 import V5Config, run, save_asks
    pair = load_target("cpu")
    texts = ["Name three colours.", "What is 2 plus 2?", "Say hi.", "Write one word.", "Count to three.", "Pick a fruit."]
    save_asks([{"task": "t", "text": t} for t in texts], [pair.encode_prompt(t) for t in texts], tmp_path / "asks.npz")
    heads = {"a": "specdec_core/data/draft"}

    def go(out, rounds):
        cfg = V5Config(asks=str(tmp_path / "asks.npz"), out=str(out), device="cpu", heads=heads, write_batch=3,
                       max_new=6, max_tokens=4096, seconds=600, ckpt_minutes=0.0, max_rounds=rounds, score_sets=(),
                       stream=StreamConfig(lr=1e-3, train_batch=2, warmup=1))
        return run(cfg, log=lambda m: None)

    whole = go(tmp_path / "whole", 2)
    go(tmp_path / "split", 1)
    split = go(tmp_path / "split", 1)
    assert whole["cursor"] == split["cursor"] == 6 and whole["positions"] == split["positions"] > 0
    from safetensors.torch import load_file
    w, s = (load_file(str(tmp_path / d / "a" / "head.safetensors")) for d in ("whole", "split"))
    assert w.keys() == s.keys() and all(torch.equal(w[k], s[k]) for k in w)
    # Everything written is kept: the shards hold each answered ask once, prompt then answer.
    shards = sorted((tmp_path / "split").glob("written_*.npz"))
    asked = np.concatenate([np.load(f)["ask"] for f in shards])
    assert sorted(asked.tolist()) == list(range(6))
    state = json.loads((tmp_path / "split" / "state.json").read_text())
    assert [d["from_positions"] for d in state["devices"]][0] == 0 and len(state["devices"]) == 2


def test_make_asks_without_debian_word_lists(monkeypatch):
    # A bare machine (CI) has no WordNet, fortunes or man pages: the lab's topics stand in.
    monkeypatch.setattr(asks_mod, "common_nouns", lambda n=4000: [])
    monkeypatch.setattr(asks_mod, "_fortune_units", lambda: [])
    monkeypatch.setattr(asks_mod, "_commands", lambda: [])
    out = asks_mod.make_asks(200, seed=1, n_functions=10)
    assert len(out) == 200 and not any(a["task"] in ("foreign", "shell") for a in out)


def test_forced_first_guess_counts_each_sequence_as_alone():
    # The curve's batches pad sequences of different lengths together: the count must equal the
    # one made sequence by sequence (padding never leaks into a real row), prose and code apart.
    from specdec_core.lab.force import force
    from specdec_core.lab.train import new_head
    from specdec_core.lab.curve import forced_first_guess
    from tests.test_lab_v3 import prompts_of, tiny_target
    target = tiny_target()
    lengths, plens = [23, 9, 40, 17, 31], [5, 3, 11, 2, 7]
    seqs = force(target, [(np.array(s), p) for s, p in zip(prompts_of(lengths), plens)], layers=(10, 20, -1), max_tokens=60)
    for s, kind in zip(seqs, ["code", "chat", "debug", "maths", "list"]):
        s["kind"] = kind
    head = new_head(target, torch.arange(96), 20, (-1,))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.5 * torch.randn_like(p))       # a head that guesses some right and some wrong
    together = forced_first_guess(head, seqs)
    alone = [forced_first_guess(head, [s]) for s in seqs]
    assert together["positions"] == sum(a["positions"] for a in alone) == sum(n - p for n, p in zip(lengths, plens))
    hits = sum(a["all"] * a["positions"] for a in alone)
    assert abs(together["all"] * together["positions"] - hits) < 0.01
    assert 0 < together["all"] < 1
    code = [a for a, s in zip(alone, seqs) if s["kind"] in ("code", "debug")]
    assert abs(together["code"] * sum(a["positions"] for a in code) - sum(a["all"] * a["positions"] for a in code)) < 0.01


def test_dedup_near_check_of_held_out_only():
    # near_kept=False (the asks): templated texts may be near each other, never near a held-out one.
    from specdec_core.lab.natural import Dedup
    d = Dedup(held=["Explain the ocean to a ten-year-old."], near_kept=False)
    assert not d.add("Explain the ocean to a ten-year-old, please.")     # near a held-out prompt
    assert d.add("Give me 5 fun facts about volcanoes.")
    assert d.add("Give me 7 fun facts about volcanoes.")                # near a kept one: kept
    assert not d.add("give me 7 fun facts about VOLCANOES!")            # exact after normalising
    assert not Dedup(near_kept=True).add("") and Dedup().near_kept
