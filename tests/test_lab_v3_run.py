"""The draft-v3 run end to end on a tiny random target (issue 38): a fresh run writes its selection
split, builds its vocabulary, streams cycles, scores and keeps the best, checkpoints into its folder,
and a second call resumes from the folder. The prompt writer and the online scoring are stubbed
(a random model writes no usable user turns; the decoder needs a real tokenizer)."""
import numpy as np
import torch

from specdec_core.lab import checkpoint, v3
from specdec_core.lab.stream import StreamConfig
from tests.test_lab_v3 import tiny_target


class _Pair:
    def __init__(self, target):
        self.target = target

    def encode_prompt(self, text):
        return [3 + (ord(ch) % 90) for ch in text[:10]]


def test_run_fresh_then_resumed(tmp_path, monkeypatch):
    pair = _Pair(tiny_target())
    monkeypatch.setattr(v3, "load_target", lambda device: pair)
    monkeypatch.setattr(v3, "write_prompts", lambda p, seeds, batch, seed=0: [
        f"{s.opener} {s.topic} case {seed}-{i} x{seed % 97}{i}" for i, s in enumerate(seeds)])
    monkeypatch.setattr("specdec_core.lab.sources.target_outputs", lambda sources: [{"gen": np.arange(3, 96)}])
    scores = iter([0.30, 0.35, 0.34, 0.33, 0.36, 0.2, 0.2, 0.2])
    monkeypatch.setattr(v3, "first_guess_of", lambda p, head, sel: {"first": next(scores), "top3": 0.5, "rounds": 9,
                                                                     "by_kind": {}})
    cfg = v3.RunConfig(out=str(tmp_path / "v3"), vocab=40, init_head=None, init_layer=20, gen_batch=4, max_new=6,
                       select_n=2, vocab_n=4, select_every=40, patience=100, ckpt_minutes=0,
                       stream=StreamConfig(train_batch=2, warmup=2, positions=100))
    state = v3.run(cfg, log=lambda *_: None)
    assert state["positions"] >= 100 and state["made"] == state["positions"] and state["cycle"] >= 2
    assert [h["first"] for h in state["history"]][:2] == [0.30, 0.35] and state["best"]["first"] >= 0.35
    folder = tmp_path / "v3"
    assert checkpoint.exists(folder) and (folder / "best" / "weights.safetensors").is_file()
    assert sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) < 2_000_000
    # A second call resumes from the folder: the budget is spent, so it stops where it was.
    again = v3.run(cfg, log=lambda *_: None)
    assert again["positions"] == state["positions"] and again["cycle"] == state["cycle"]
    head = v3._head_from_folder(pair, cfg, folder)
    assert len(head.vocab_ids) == 40 and int(head.vocab_ids.max()) < 96 and 2 in head.vocab_ids.tolist()
    assert torch.isfinite(head.fc.weight).all()
