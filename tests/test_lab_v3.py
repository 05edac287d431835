"""Draft v3's lab (issue 38): natural-prompt de-dup and disjointness, the one-pass capture against a
separate teacher-forced pass, checkpoint → resume taking the same next step, the compact optimiser
coding, and the yardstick's prompt-file option. Tiny random models: a few seconds each."""
import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_core.lab import checkpoint
from specdec_core.lab.capture import generate, teacher_force
from specdec_core.lab.natural import Dedup, diversity, held_texts, keep_disjoint, make_seeds, normalise
from specdec_core.lab.stream import StreamConfig, new_optimizer, train_on
from specdec_core.lab.train import new_head

LAYERS = (10, 20, -1)


def tiny_target(seed: int = 0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=21, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, max_position_embeddings=512, tie_word_embeddings=True,
                      rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def prompts_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 96, (n,), generator=g).tolist() for n in lengths]


# -- natural prompts -------------------------------------------------------------------------------
def test_dedup_exact_near_and_held_out():
    d = Dedup(held=["Explain the ocean to a ten-year-old."])
    assert not d.add("explain the OCEAN to a ten year old!")           # a held-out prompt, normalised
    assert not d.add("Explain the ocean to a ten-year-old, please.")   # near a held-out prompt
    assert d.add("How do volcanoes erupt and why?")
    assert not d.add("how do volcanoes erupt, and why")                 # exact after normalising
    assert not d.add("So how do volcanoes erupt and why?")             # near duplicate (3-gram Jaccard 0.8)
    assert d.add("Write a Python function that parses a CSV file into a list of dicts.")
    assert normalise("Hi,   THERE!") == "hi there"


def test_held_texts_cover_every_held_out_file_and_disjointness_is_checked():
    held = held_texts()
    assert "What is 682 times 68?" in held                 # a bench prompt file
    assert "Explain the ocean to a ten-year-old." in held  # the templated held-out file
    with pytest.raises(ValueError):
        keep_disjoint(["what is 682   times 68?"], held)
    keep_disjoint(["How do I keep sourdough starter alive on holiday?"], held)


def test_seeds_spread_over_kinds_and_lengths():
    seeds = make_seeds(300, 0)
    assert len({s.kind for s in seeds}) >= 12 and len({s.length for s in seeds}) == 3
    assert any("code" in s.kind for s in seeds) and len({s.topic for s in seeds}) > 100
    assert make_seeds(5, 3) == make_seeds(5, 3)
    d = diversity(["a b c d", "a b c e", "x y z"], 10)
    assert d["prompts"] == 3 and 0 < d["distinct_2"] <= 1


# -- capture ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_capture_equals_a_separate_teacher_forced_pass(temperature):
    target = tiny_target()
    prompts = prompts_of([5, 9, 3])
    rows = generate(target, prompts, 10, temperature=temperature, top_p=0.95, seed=4, layers=LAYERS)
    for p, r in zip(prompts, rows):
        n, pl = len(r["ids"]), r["plen"]
        assert pl == len(p) and r["ids"][:pl].tolist() == p and n > pl
        ref = teacher_force(target, r["ids"], LAYERS)
        assert torch.allclose(r["feats"][: n - 1].float(), ref["feats"][: n - 1].float(), atol=2e-3, rtol=1e-3)
        span = slice(pl - 1, n - 1)                    # where a generated token is predicted
        assert torch.allclose(r["lse"][span], ref["lse"][span], atol=1e-4)
        assert torch.equal(r["top_ids"][span], ref["top_ids"][span])
        assert torch.allclose(r["top_lp"][span], ref["top_lp"][span], atol=1e-4)
        assert torch.equal(r["argmax"][span], ref["top_ids"][span, 0])
        if temperature == 0:                           # greedy: each token is the argmax before it
            assert torch.equal(r["ids"][pl:], r["argmax"][span])


def eos_prone_target():
    """A tiny target whose greedy answers end (EOS) after 1, 11, 14 or 16 tokens on prompts_of(LENGTHS, 4)."""
    target = tiny_target(4)
    with torch.no_grad():
        target.model.embed_tokens.weight[2] *= 4       # a longer EOS row: some answers end early
    return target


LENGTHS = [5, 9, 3, 12, 7, 4]


@pytest.mark.parametrize("chunk", [1, 2, 8])
def test_batched_writer_equals_transformers_generate_row_by_row(chunk):
    """Prefill in chunks, in-place KV buffer, ended rows leaving the batch: each answer is the one
    transformers' own generate writes for that prompt alone (greedy)."""
    target = eos_prone_target()
    prompts = prompts_of(LENGTHS, 4)
    rows = generate(target, prompts, 16, capture=False, chunk=chunk)
    lengths = []
    for p, r in zip(prompts, rows):
        ref = target.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                              max_new_tokens=16, do_sample=False, eos_token_id=2, pad_token_id=2)[0]
        assert torch.equal(r["ids"], ref) and r["plen"] == len(p)
        lengths.append(len(ref) - len(p))
    assert min(lengths) == 1 and max(lengths) == 16 and len(set(lengths)) >= 3     # rows left at different steps


def test_capture_with_rows_leaving_equals_teacher_forcing():
    target = eos_prone_target()
    prompts = prompts_of(LENGTHS, 4)
    for r in generate(target, prompts, 16, layers=LAYERS, chunk=2):
        n, pl = len(r["ids"]), r["plen"]
        ref = teacher_force(target, r["ids"], LAYERS)
        assert torch.allclose(r["feats"][: n - 1].float(), ref["feats"][: n - 1].float(), atol=2e-3, rtol=1e-3)
        span = slice(pl - 1, n - 1)
        assert torch.equal(r["top_ids"][span], ref["top_ids"][span])
        assert torch.allclose(r["lse"][span], ref["lse"][span], atol=1e-4)


# -- checkpoint and resume -------------------------------------------------------------------------
def _head(target, seed):
    torch.manual_seed(seed)
    return new_head(target, torch.arange(2, 60), 20, LAYERS)


def test_checkpoint_then_resume_takes_the_same_next_step(tmp_path):
    target = tiny_target()
    seqs = generate(target, prompts_of([6, 4, 8, 5], 1), 12, temperature=0.8, seed=2, layers=LAYERS)
    cfg = StreamConfig(loss="rollout", train_batch=2, warmup=2, positions=1000, noise=0.1, weight_decay=0.1)
    head = _head(target, 0)
    opt = new_optimizer(head, cfg)
    first = train_on(head, opt, seqs[:2], cfg, 0, 0, torch.Generator().manual_seed(1))
    state = {"step": first["steps"], "positions": first["positions"]}
    checkpoint.save(tmp_path, head, opt, state, [{"text": "a prompt"}])
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) < 200_000
    # The run goes on ...
    train_on(head, opt, seqs[2:], cfg, state["step"], state["positions"], torch.Generator().manual_seed(7))
    # ... and a fresh process resumes from the folder (another start, so nothing is shared by chance).
    head2 = _head(target, 5)
    opt2 = new_optimizer(head2, cfg)
    state2, prompts2 = checkpoint.load(tmp_path, head2, opt2)
    assert state2 == state and prompts2 == [{"text": "a prompt"}]
    train_on(head2, opt2, seqs[2:], cfg, state2["step"], state2["positions"], torch.Generator().manual_seed(7))
    for (name, a), b in zip(head.named_parameters(), head2.parameters()):
        assert torch.equal(a, b), name


def test_moment_coding_keeps_small_second_moments():
    x = torch.randn(1000) * torch.logspace(-12, 0, 1000)
    m = checkpoint.decode_signed(checkpoint.encode_signed(x), x)
    assert (m - x).abs().max() <= x.abs().max() / 127
    v = x * x
    back = checkpoint.decode_positive(checkpoint.encode_positive(v), v)
    assert ((back / v).log2().abs() <= 0.2).all()       # ≤ 15 % off in v, every entry, tiny ones too


# -- the yardstick's prompt file -------------------------------------------------------------------
class _Tok:
    def decode(self, ids, **kw):
        return " ".join(map(str, ids))


class _Pair:
    """Just what heldout_sequences needs: a target and an encoder."""
    def __init__(self, target):
        self.target, self.tokenizer = target, _Tok()

    def encode_prompt(self, text):
        return [3 + (ord(ch) % 90) for ch in text[:12]]


def test_yardstick_takes_a_prompt_file(tmp_path, monkeypatch):
    from specdec_core.lab.yardstick import heldout_sequences, prompt_file, yardstick_rows
    monkeypatch.setenv("SPECDEC_LAB_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"prompts": [{"name": "a", "task": "code", "text": "Write a loop."},
                                         {"name": "b", "text": "Tell me a joke."},
                                         {"name": "c", "task": "code", "text": "Sort a list."}]}))
    prompts, path = prompt_file(f)
    assert [p["task"] for p in prompts] == ["code", "mine", "code"] and path == f
    assert len(prompt_file(None)[0]) == 70                   # default: the frozen yardstick
    target = tiny_target()
    seqs = heldout_sequences(_Pair(target), 6, f)
    assert len(seqs) == 3 and all(torch.equal(s["argmax"][:-1], s["ids"][1:]) for s in seqs)
    head = _head(target, 0)
    rows = yardstick_rows(_Pair(target), head, 6, f)
    assert [(r["task"], r["n"]) for r in rows] == [("code", 2), ("mine", 1), ("all", 3)]
    assert all(0 <= r["agree"][0] <= 1 for r in rows)
