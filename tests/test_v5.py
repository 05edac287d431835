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
@pytest.mark.parametrize("replay", [0.0, 1.5])
def test_v5_run_resumes_exactly(tmp_path, replay):
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
                       stream=StreamConfig(lr=1e-3, train_batch=2, warmup=1), replay=replay)
        return run(cfg, log=log)

    whole = go(tmp_path / "whole", 2)
    go(tmp_path / "split", 1)
    split = go(tmp_path / "split", 1)
    assert whole["cursor"] == split["cursor"] == 6 and whole["positions"] == split["positions"] > 0
    assert whole.get("replayed", 0) == split.get("replayed", 0) and (whole.get("replayed", 0) > whole["positions"]) == (replay > 0)
    assert whole.get("replay_cursor") == split.get("replay_cursor")
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


def test_a_wider_head_starts_as_the_head_it_widens():
    """A head with more MLP units, started from a saved head, computes what that head computes
    (the new units start silent): every rollout step's output and the logits equal."""
    from safetensors.torch import load_file
    from specdec_core.lab.losses import rollout
    from specdec_core.lab.train import load_start, new_head
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    saved = load_file("specdec_core/data/draft/weights.safetensors")
    narrow = new_head(pair.target, saved["vocab_ids"], 29)
    wide = new_head(pair.target, saved["vocab_ids"], 29, width=3072)
    for head in (narrow, wide):
        load_start(head, saved)
    assert wide.gate.weight.shape[0] == 3072 and torch.equal(wide.down.weight[:, 1536:], torch.zeros(576, 1536))
    gen = torch.Generator().manual_seed(0)
    feats, ids = torch.randn(2, 12, 576, generator=gen), torch.randint(0, 49152, (2, 12), generator=gen)
    with torch.no_grad():
        for g_n, g_w in zip(rollout(narrow, feats, ids, 3), rollout(wide, feats, ids, 3)):
            assert torch.allclose(g_n, g_w, atol=1e-5)
            assert torch.allclose(narrow.logits(g_n), wide.logits(g_w), atol=1e-4)
    # a saved head too wide for the one it starts cannot be squeezed into it
    with pytest.raises(ValueError, match="does not fit"):
        load_start(narrow, {k: v for k, v in wide.state_dict().items()})


def _tiny_run(pair, tmp_path, writer: str = "auto"):
    """A v5 run over four short asks in tmp_path/run, two a round: go(heads, rounds) runs it (resuming)
    and returns its state; the log lines land in the list returned beside it."""
    from specdec_core.lab.stream import StreamConfig
    from specdec_core.lab.v5 import V5Config, run, save_asks
    texts = ["Name three colours.", "What is 2 plus 2?", "Say hi.", "Write one word."]
    save_asks([{"task": "t", "text": t} for t in texts], [pair.encode_prompt(t) for t in texts], tmp_path / "asks.npz")
    logs = []

    def go(heads, rounds, lr=1e-3):
        cfg = V5Config(asks=str(tmp_path / "asks.npz"), out=str(tmp_path / "run"), device="cpu", heads=heads, write_batch=2,
                       max_new=5, max_tokens=4096, seconds=600, ckpt_minutes=0.0, max_rounds=rounds, score_sets=(),
                       stream=StreamConfig(lr=lr, train_batch=2, warmup=1), writer=writer)
        return run(cfg, log=logs.append)
    return go, logs


def test_a_head_joins_a_resumed_run_where_the_first_head_stands_and_one_leaves(tmp_path):
    from safetensors.torch import load_file
    from specdec_core.lab.v3 import load_target
    from specdec_core.lab.v5 import V5Config, run
    pair = load_target("cpu")
    go, logs = _tiny_run(pair, tmp_path)
    out = tmp_path / "run"

    first = go({"a": "specdec_core/data/draft"}, 1)
    joined = go({"a": "specdec_core/data/draft", "c": "specdec_core/data/draft:::3072"}, 0)
    assert joined["joined"] == {"c": first["positions"]} and any("c joined" in m for m in logs)
    assert joined["settings"]["heads"]["c"]["width"] == 3072
    a, c = (load_file(str(out / n / "head.safetensors")) for n in ("a", "c"))
    assert torch.equal(c["gate.weight"][:1536], a["gate.weight"]) and torch.equal(c["down.weight"][:, :1536], a["down.weight"])
    assert not c["down.weight"][:, 1536:].any() and torch.equal(c["q.weight"], a["q.weight"])
    # the joined head trains on; the first may leave (its checkpoint stays where it was)
    last = go({"c": "specdec_core/data/draft:::3072"}, 1)
    assert last["positions"] > first["positions"] and last["steps"]["c"] > 0 and any("a left" in m for m in logs)
    assert list(last["settings"]["heads"]) == ["c"]
    # other settings are still refused
    with pytest.raises(SystemExit, match="other settings"):
        cfg = V5Config(asks=str(tmp_path / "asks.npz"), out=str(out), device="cpu", heads={"c": "x"}, max_new=6,
                       max_rounds=0, score_sets=())
        run(cfg, log=logs.append)


def test_paired_gain_is_the_difference_with_a_standard_error_by_prompt():
    from specdec_core.lab.curve import hit_rates, paired_gain
    base = [np.array([1, 0, 0, 1], bool), np.array([0, 0], bool), np.array([1, 1, 0], bool)]
    other = [np.array([1, 1, 0, 1], bool), np.array([0, 1], bool), np.array([1, 1, 0], bool)]
    # per prompt: d = 1, 1, 0 over n = 4, 2, 3 -> gain 2/9; cluster SE of the ratio
    d, n = np.array([1.0, 1.0, 0.0]), np.array([4.0, 2.0, 3.0])
    se = np.sqrt(((d - 2 / 9 * n) ** 2).sum() * 3 / 2) / 9
    assert paired_gain(other, base) == {"gain": round(2 / 9, 4), "se": round(float(se), 4)}
    assert paired_gain(base, base) == {"gain": 0.0, "se": 0.0}
    seqs = [{"kind": "code"}, {"kind": "chat"}, {"kind": "chat"}]
    assert hit_rates(other, seqs) == {"all": round(6 / 9, 4), "prose": 0.6, "code": 0.75, "positions": 9}


def test_the_report_shows_heads_that_joined_or_left_and_the_paired_gain():
    from specdec_core.lab.v5_tables import report
    row = lambda x: {"all": x, "prose": x, "code": x, "positions": 10}
    state = {"settings": {"heads": {"a": {}, "c": {}}}, "positions": 300, "round": 3, "cursor": 9, "written": 300,
             "write_s": 10.0, "train_s": 5.0, "rounds": [{"greedy": True}] * 3, "devices": [], "joined": {"c": 200},
             "curve": [{"positions": 0, "a": row(0.4), "b": row(0.39)},
                       {"positions": 200, "a": row(0.41), "b": row(0.4), "c": row(0.41)},
                       {"positions": 300, "a": row(0.41), "c": row(0.42), "gain": {"c": {"gain": 0.0123, "se": 0.004}}}]}
    text = report(state)
    assert "| a all | a prose | a code | b all | b prose | b code | c all | c prose | c code |" in text
    assert "| 0 | 0.400 | 0.400 | 0.400 | 0.390 | 0.390 | 0.390 | – | – | – |" in text
    assert "| 300 | 0.410 | 0.410 | 0.410 | – | – | – | 0.420 | 0.420 | 0.420 |" in text
    # a run that reads its written rows again says how many, at each point and in all; each machine its lr and replay
    state["curve"][-1]["replayed"], state["replayed"] = 600, 600
    state["devices"] = [{"device": "cpu", "from_positions": 0, "write_batch": 64, "train_batch": 8},
                        {"device": "cpu", "from_positions": 200, "write_batch": 64, "train_batch": 8, "lr": 1e-4, "replay": 2.0}]
    text = report(state)
    assert "| 300 (+ 600 again) | 0.410 |" in text and "600 written positions trained on again" in text
    assert "| cpu | 0 | 64 | 8 |  | 0.0003 | 0 |" in text and "| cpu | 200 | 64 | 8 |  | 0.0001 | 2 |" in text
    # a sitting that trained nothing (the next starts where it did) is not a machine's segment
    state["devices"].insert(1, {"device": "gpu", "from_positions": 200, "write_batch": 2048, "train_batch": 32})
    assert "| gpu |" not in report(state) and "| cpu | 200 | 64 | 8 |" in report(state)
    assert "| 300 | +0.0123 ± 0.0040 |" in text and "c − a" in text and "c at 200 positions" in text


def test_a_curve_point_scores_each_head_and_the_paired_gain_of_the_later_ones():
    from specdec_core.lab.capture import generate
    from specdec_core.lab.curve import curve_point, first_guess_hits, forced_first_guess
    from specdec_core.lab.data import FEATURE_LAYERS
    from specdec_core.lab.force import force
    from specdec_core.lab.train import trainable_head
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    written = generate(pair.target, [pair.encode_prompt(t) for t in ("Name three colours.", "Write a loop in Python.")],
                       16, capture=False)
    seqs = force(pair.target, [(r["ids"].numpy(), r["plen"]) for r in written], FEATURE_LAYERS)
    for s, kind in zip(seqs, ("chat", "code")):
        s["kind"] = kind
    a = trainable_head(pair, "specdec_core/data/draft", "cpu")
    c = trainable_head(pair, "specdec_core/data/draft:::3072", "cpu")
    point = curve_point({"a": a, "c": c}, {"select": seqs, "yardstick": seqs}, 123)
    assert point["positions"] == 123 and point["a"] == forced_first_guess(a, seqs) == point["yardstick"]["a"]
    # c starts as a (its new units silent): the same guesses, no gain
    assert point["c"] == point["a"] and point["gain"] == {"c": {"gain": 0.0, "se": 0.0}}
    hits = first_guess_hits(a, seqs)
    assert len(hits) == 2 and point["a"]["positions"] == sum(len(h) for h in hits) > 0
    assert point["a"]["all"] == round(sum(int(h.sum()) for h in hits) / point["a"]["positions"], 4)


def test_the_cpu_writer_is_the_target_or_its_bf16_twin_by_choice_and_by_the_cpu(monkeypatch):
    """make_writer: fp32 writes with the target itself; bf16 with a twin whose products are bf16 where
    the CPU has bf16 math (elsewhere a clear refusal); auto picks bf16 only where it has; anything
    else refused."""
    from specdec_core.kernels import fastpath
    from specdec_core.lab.capture import make_writer
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    has_bf16 = fastpath.draft_matrix_dtype() is torch.bfloat16
    assert make_writer(pair.target, "cpu", "fp32") == (pair.target, "fp32")
    if has_bf16:
        twin, name = make_writer(pair.target, "cpu", "bf16")
        assert name == "bf16-matrices" and twin is not pair.target and fastpath.kernels_of(twin).matrices == "bf16"
        assert make_writer(pair.target, "cpu", "auto")[1] == "bf16-matrices"
    else:
        with pytest.raises(ValueError, match="no bf16 math"):
            make_writer(pair.target, "cpu", "bf16")
        assert make_writer(pair.target, "cpu", "auto") == (pair.target, "fp32")
    monkeypatch.setattr(fastpath, "draft_matrix_dtype", lambda: torch.float32)     # a CPU without it
    assert make_writer(pair.target, "cpu", "auto") == (pair.target, "fp32")
    with pytest.raises(ValueError, match="no bf16 math"):
        make_writer(pair.target, "cpu", "bf16")
    with pytest.raises(ValueError, match="fp32, bf16 or auto"):
        make_writer(pair.target, "cpu", "fp16")


def test_a_deeper_head_starts_as_the_head_it_deepens_and_joins_a_run(tmp_path):
    """Spec field DEPTH: a head of two decoder layers from the shipped one computes what it computes
    (the second layer a pass-through: output matrices zero) until it trains; a run records its depth
    and a deeper head joins one; a spec shallower than its saved head is refused."""
    from safetensors.torch import load_file
    from specdec_core.lab.losses import rollout
    from specdec_core.lab.train import trainable_head
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    one = trainable_head(pair, "specdec_core/data/draft", "cpu")
    two = trainable_head(pair, "specdec_core/data/draft::::2", "cpu")
    assert len(one.layers()) == 1 and len(two.layers()) == 2 and two.cfg["depth"] == 2
    assert not two.extra[0].o.weight.any() and not two.extra[0].down.weight.any() and two.extra[0].q.weight.any()
    gen = torch.Generator().manual_seed(0)
    feats, ids = torch.randn(2, 12, 576, generator=gen), torch.randint(0, 49152, (2, 12), generator=gen)
    with torch.no_grad():
        for g1, g2 in zip(rollout(one, feats, ids, 3), rollout(two, feats, ids, 3)):
            assert torch.equal(g1, g2)
    go, _ = _tiny_run(pair, tmp_path, writer="fp32")
    out = tmp_path / "run"
    go({"a": "specdec_core/data/draft"}, 1)
    state = go({"a": "specdec_core/data/draft", "d": "specdec_core/data/draft::::2"}, 1)
    assert state["settings"]["heads"]["d"]["depth"] == 2 and "depth" not in state["settings"]["heads"]["a"]
    saved = load_file(str(out / "d" / "head.safetensors"))
    assert "extra.0.q.weight" in saved and saved["extra.0.o.weight"].any()       # it trained its second layer
    assert len(trainable_head(pair, str(out / "d"), "cpu").layers()) == 2          # resumes with its depth
    with pytest.raises(ValueError, match="2 layers"):
        trainable_head(pair, f"{out / 'd'}::::1", "cpu")


def test_a_resumed_run_may_lower_its_peak_lr_and_says_from_where(tmp_path):
    from specdec_core.lab.v3 import load_target
    from specdec_core.lab.v5_cli import _run_lr
    pair = load_target("cpu")
    go, logs = _tiny_run(pair, tmp_path)
    first = go({"a": "specdec_core/data/draft"}, 1)
    assert _run_lr(str(tmp_path / "run")) == 1e-3 and _run_lr(str(tmp_path / "none")) == 3e-4
    lower = go({"a": "specdec_core/data/draft"}, 1, lr=2e-4)
    assert lower["positions"] > first["positions"] and lower["settings"]["lr"] == 2e-4
    assert [(d["from_positions"], d["lr"]) for d in lower["devices"]] == [(0, 1e-3), (first["positions"], 2e-4)]
    assert _run_lr(str(tmp_path / "run")) == 2e-4         # the CLI resumes with the lr the run last had


def test_replay_reads_the_written_stream_oldest_first_and_starts_again_at_its_end(tmp_path):
    """A replay cursor indexes one stream — the shards in order, then the rows not yet in a shard —
    and takes rows until they hold the positions asked (answer positions: after the prompt)."""
    from specdec_core.lab.written import replay_rows, save_written, written_rows
    row = lambda n, plen, ask: {"ids": np.arange(n) + ask, "plen": plen, "greedy": True, "ask": ask}
    save_written([row(6, 2, 0), row(5, 4, 1)], tmp_path / "written_000.npz")       # 4 and 1 answer positions
    save_written([row(7, 1, 2)], tmp_path / "written_001.npz")                     # 6
    pending = [row(3, 1, 3)]                                                       # 2, not yet a shard
    assert [ids[0] for ids, _ in written_rows(tmp_path, pending)] == [0, 1, 2, 3]
    # a row reads the same from a shard as before it was one (ids int64, its prompt length)
    (tmp_path / "later").mkdir()
    save_written(pending, tmp_path / "later" / "written_000.npz")
    (kept, plen_kept), = written_rows(tmp_path / "later")
    (held, plen_held), = written_rows(tmp_path / "none", [dict(pending[0], ids=torch.as_tensor(pending[0]["ids"]))])
    assert kept.dtype == held.dtype == np.int64 and kept.tolist() == held.tolist() and plen_kept == plen_held == 1
    rows, cursor = replay_rows(tmp_path, pending, 0, 5)
    assert [ids[0] for ids, _ in rows] == [0, 1] and cursor == 2
    rows, cursor = replay_rows(tmp_path, pending, cursor, 7)                       # 6 + 2: past the end ...
    assert [ids[0] for ids, _ in rows] == [2, 3] and cursor == 4
    rows, cursor = replay_rows(tmp_path, pending, cursor, 1)                       # ... then the oldest again
    assert [(ids[0], plen) for ids, plen in rows] == [(0, 2)] and cursor == 1
    rows, _ = replay_rows(tmp_path, pending, 0, 10**6)                             # at most every row once
    assert len(rows) == 4 and replay_rows(tmp_path / "empty", [], 0, 5) == ([], 0)


def test_written_answers_are_each_answer_after_its_prompts_last_tokens(tmp_path):
    """What the phrase memory counts from a run (memory --written): every shard's answers, each after
    the last `order` tokens of its prompt, in shard order."""
    from specdec_core.lab.written import save_written, written_answers
    rows = [{"ids": np.array([5, 6, 7, 8, 9, 10]), "plen": 4, "greedy": True, "ask": 0},
            {"ids": np.array([1, 2, 3]), "plen": 1, "greedy": False, "ask": 3}]
    save_written(rows[:1], tmp_path / "written_000.npz")
    save_written(rows[1:], tmp_path / "written_001.npz")
    got = written_answers(tmp_path, order=3)
    assert [x.tolist() for x in got] == [[6, 7, 8, 9, 10], [1, 2, 3]]


def test_v5_export_writes_a_checkpointed_head_as_an_app_folder_and_leaves_the_run_alone(tmp_path):
    """v5-export: the head as the run's checkpoint holds it (weights equal, its card saying where it
    stands), loadable as `distilled:<folder>`, with the shipped memory or none; the run's files
    untouched; an unknown head or the run's own folder refused with a message."""
    from safetensors.torch import load_file
    from specdec_core.drafters import memory
    from specdec_core.drafters.feature_head import load_head, shipped_head
    from specdec_core.lab.cli import main
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    go, _ = _tiny_run(pair, tmp_path, writer="fp32")
    state = go({"a": "specdec_core/data/draft"}, 1)
    run_dir, out = tmp_path / "run", tmp_path / "export"
    before = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    main(["v5-export", "a", "--run", str(run_dir), "--out", str(out), "--memory", "shipped"])
    assert {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    card = json.loads((out / "config.json").read_text())
    assert card["positions"] == state["positions"] and card["version"] == 5 and card["head"] == "a"
    trained = load_file(str(run_dir / "a" / "head.safetensors"))
    saved = load_file(str(out / "weights.safetensors"))
    assert torch.equal(saved["q.weight"], trained["q.weight"].half())
    assert (out / memory.FILE).read_bytes() == (shipped_head() / memory.FILE).read_bytes()
    head = load_head(pair.target, out)
    assert head.memory is not None and head.version.endswith("v5 + memory + text phrases")
    assert head.text_phrases == {"weights": [0.25, 1.0, 2.0], "eps": 1e-3}
    main(["v5-export", "a", "--run", str(run_dir), "--out", str(out), "--memory", "none", "--phrases", "none"])
    assert not (out / memory.FILE).exists() and "text_phrases" not in json.loads((out / "config.json").read_text())
    with pytest.raises(SystemExit, match="--phrases"):
        main(["v5-export", "a", "--run", str(run_dir), "--out", str(out), "--phrases", "lots"])
    with pytest.raises(SystemExit, match="no checkpoint of a head named 'z'"):
        main(["v5-export", "z", "--run", str(run_dir), "--out", str(out)])
    with pytest.raises(SystemExit, match="own checkpoint folder"):
        main(["v5-export", "a", "--run", str(run_dir), "--out", str(run_dir / "a")])


def test_miss_anatomy_splits_the_first_guesses_by_the_targets_own_certainty_and_vocabulary():
    """v5-misses: every scored position falls in one bin of the target's p_max (taken from the final
    state and log-normaliser, equal to the target's own softmax), the bins' hits add up to the head's
    forced first guess, and a token outside the head's vocabulary is never a hit."""
    from specdec_core.lab.capture import generate, teacher_force
    from specdec_core.lab.curve import SURE_BINS, first_guess_hits, miss_anatomy
    from specdec_core.lab.force import force
    from specdec_core.lab.train import trainable_head
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    head = trainable_head(pair, "specdec_core/data/draft", "cpu")
    texts = ["Name three colours.", "Write a Python function that adds two numbers.", "What is the capital of France?"]
    written = generate(pair.target, [pair.encode_prompt(t) for t in texts], 24, capture=False)
    seqs = force(pair.target, [(r["ids"].numpy(), r["plen"]) for r in written], (10, 20, -1))
    W = pair.target.get_output_embeddings().weight.detach()
    got = miss_anatomy(head, seqs, W)
    hits = np.concatenate(first_guess_hits(head, seqs))
    assert got["positions"] == len(hits) and got["hit"] == round(float(hits.mean()), 4)
    assert abs(sum(b["share"] for b in got["bins"]) - 1) < 1e-3
    assert abs(sum(b["share"] * b["hit"] for b in got["bins"] if b["hit"] is not None) - hits.mean()) < 2e-3
    # p_max as the target's own softmax says (a full forward), position by position
    p_max = np.concatenate([teacher_force(pair.target, s["ids"])["top_lp"][s["plen"] - 1: len(s["ids"]) - 1, 0].exp().numpy()
                            for s in seqs])
    assert len(p_max) == len(hits)
    upper = np.inf
    for (lo, _), b in zip(SURE_BINS, got["bins"]):
        share = float(((p_max >= lo) & (p_max < upper)).mean())
        assert abs(share - b["share"]) <= 1.5 / len(hits)       # fp16 features may move one position across a bound
        upper = lo
    # the target's tokens outside the head's vocabulary, counted directly: their share, never a hit
    tokens = np.concatenate([s["argmax"][s["plen"] - 1: len(s["ids"]) - 1].numpy() for s in seqs])
    outside = ~np.isin(tokens, head.vocab_ids.numpy())
    assert got["out_of_vocab"] == round(float(outside.mean()), 4) and not (hits & outside).any()


def test_drafting_first_guess_adds_the_drafters_rules_to_the_forced_first_guess():
    """v5-phrases' score: with no rule it is the forced first guess; zero weights change nothing; on
    an answer that repeats its prompt the text's own phrases make the first guess right more often."""
    from specdec_core.lab.capture import generate
    from specdec_core.lab.curve import drafting_first_guess, first_guess_hits, head_logits
    from specdec_core.lab.force import force
    from specdec_core.lab.train import trainable_head
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    head = trainable_head(pair, "specdec_core/data/draft", "cpu")
    texts = ["Repeat this sentence exactly: the quick brown fox jumps over the lazy dog, and the lazy dog sleeps.",
             "Copy this list: apples, pears, plums, apples, pears, plums."]
    written = generate(pair.target, [pair.encode_prompt(t) for t in texts], 32, capture=False)
    seqs = force(pair.target, [(r["ids"].numpy(), r["plen"]) for r in written], (10, 20, -1))
    logits = head_logits(head, seqs)
    alone = drafting_first_guess(head, seqs, logits)
    assert alone == pytest.approx(float(np.concatenate(first_guess_hits(head, seqs)).mean()))
    assert drafting_first_guess(head, seqs, logits, phrases={"weights": [0.0, 0.0, 0.0]}) == alone
    assert drafting_first_guess(head, seqs, logits, phrases={"weights": [0.25, 1.0, 2.0]}) > alone


@pytest.mark.model
@pytest.mark.slow
def test_a_probe_resumes_exactly_wraps_its_epochs_and_its_heads_export(tmp_path):
    """v5-probe (v5_probe.py): heads of other shapes side by side on the rows a run wrote, a
    checkpointed long job — two sittings of two rounds equal one of four (every weight equal), the
    rows read again in a new order once every row was read (an epoch), other settings refused, and a
    deeper head it holds exported as an app folder that loads (its memory counted from the run it reads)."""
    from safetensors.torch import load_file
    from specdec_core.drafters.feature_head import load_head
    from specdec_core.lab.cli import main
    from specdec_core.lab.v3 import load_target
    from specdec_core.lab.v5_probe import ProbeConfig, probe
    pair = load_target("cpu")
    go, _ = _tiny_run(pair, tmp_path, writer="fp32")
    go({"a": "specdec_core/data/draft"}, 2)                   # four written rows
    run_dir = str(tmp_path / "run")
    heads = {"a": (f"{run_dir}/a", 1e-3), "deep": (f"{run_dir}/a::::2", 1e-3)}

    def sitting(out, rounds, **kw):
        cfg = ProbeConfig(run=run_dir, out=str(out), heads=heads, device="cpu", positions=10**6, seconds=600,
                          rows_per_round=3, train_batch=2, max_tokens=4096, ckpt_minutes=0.0, max_rounds=rounds,
                          score_sets=(), **kw)
        return probe(cfg, log=lambda m: None)

    whole = sitting(tmp_path / "whole", 4)
    sitting(tmp_path / "split", 2)
    split = sitting(tmp_path / "split", 2)
    assert whole["rows"] == 4 and whole["round"] == split["round"] == 4
    assert (whole["epoch"], whole["cursor"]) == (split["epoch"], split["cursor"]) == (2, 0)   # 3 + 1, 3 + 1 rows
    assert whole["positions"] == split["positions"] > 0 and whole["steps"] == split["steps"]
    for name in heads:
        w, s = (load_file(str(tmp_path / d / name / "head.safetensors")) for d in ("whole", "split"))
        assert w.keys() == s.keys() and all(torch.equal(w[k], s[k]) for k in w)
    assert any(k.startswith("extra.") for k in load_file(str(tmp_path / "whole" / "deep" / "head.safetensors")))
    with pytest.raises(SystemExit, match="other settings"):
        sitting(tmp_path / "split", 1, seed=1)
    main(["v5-export", "deep", "--run", str(tmp_path / "whole"), "--out", str(tmp_path / "app"), "--phrases", "none"])
    head = load_head(pair.target, tmp_path / "app")
    assert len(head.layers()) == 2 and head.memory is not None
    assert json.loads((tmp_path / "app" / "config.json").read_text())["positions"] == whole["positions"]


@pytest.mark.model
def test_a_step_over_micro_batches_is_the_whole_batchs_step():
    """stream.train_step on a list of micro-batches (each loss weighted by its share of the valid rows,
    gradients summed) moves the weights as the whole batch's step does; the stats agree; a loss that
    is not a mean over the valid rows is refused."""
    import copy
    from specdec_core.lab.data import make_batch
    from specdec_core.lab.force import force
    from specdec_core.lab.stream import StreamConfig, train_step
    from specdec_core.lab.train import trainable_head
    from specdec_core.lab.v3 import load_target
    pair = load_target("cpu")
    gen = np.random.default_rng(0)
    rows = [(gen.integers(100, 20000, n), plen) for n, plen in ((30, 8), (22, 5), (41, 12), (17, 4))]
    seqs = force(pair.target, rows, (-1,), 4096)            # the final state: what the shipped head reads
    head = trainable_head(pair, "specdec_core/data/draft", "cpu")
    cfg = StreamConfig(loss="rollout", noise=0.0, train_batch=4, micro=2)
    moved = []
    for parts in ([make_batch(seqs, [0, 1, 2, 3])], [make_batch(seqs, [0, 1]), make_batch(seqs, [2, 3])]):
        h = copy.deepcopy(head)
        opt = torch.optim.SGD(h.parameters(), lr=1.0)        # the step is the clipped gradient itself
        before = {k: v.clone() for k, v in h.state_dict().items()}
        stats = train_step(h, opt, parts if len(parts) > 1 else parts[0], cfg, 1.0, torch.Generator().manual_seed(0))
        moved.append(({k: v - before[k] for k, v in h.state_dict().items() if v.is_floating_point()}, stats))
    (whole, s_whole), (micro, s_micro) = moved
    assert any(d.abs().max() > 0 for d in whole.values())
    for k in whole:
        assert torch.allclose(whole[k], micro[k], atol=1e-6, rtol=1e-4), k
    assert s_whole["positions"] == s_micro["positions"] > 0 and s_whole["agree"] == s_micro["agree"]
    assert s_whole["loss"] == pytest.approx(s_micro["loss"], rel=1e-5)
    with pytest.raises(ValueError, match="micro-batches"):
        train_step(copy.deepcopy(head), opt, [make_batch(seqs, [0, 1]), make_batch(seqs, [2, 3])],
                   StreamConfig(loss="chain", noise=0.0), 1.0, torch.Generator().manual_seed(0))
