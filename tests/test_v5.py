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

    def go(out, rounds, log=lambda m: None):
        cfg = V5Config(asks=str(tmp_path / "asks.npz"), out=str(out), device="cpu", heads=heads, write_batch=3,
                       max_new=6, max_tokens=4096, seconds=600, ckpt_minutes=0.0, max_rounds=rounds, score_sets=(),
                       stream=StreamConfig(lr=1e-3, train_batch=2, warmup=1))
        return run(cfg, log=log)

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
    # SIGTERM (a session ending) ends an open-ended run after its round, checkpointed like a planned stop.
    import os
    import signal
    term = lambda m: m.startswith("round ") and os.kill(os.getpid(), signal.SIGTERM)
    handler = signal.getsignal(signal.SIGTERM)
    ended = go(tmp_path / "term", None, log=term)
    assert ended["cursor"] == 3 and json.loads((tmp_path / "term" / "state.json").read_text())["cursor"] == 3
    assert signal.getsignal(signal.SIGTERM) == handler           # the process's own handler is back
