"""The draft's yardstick (issue 11): offline figures per task type on the frozen held-out prompts
(`data/heldout_prompts.json`), and the vocabulary coverage curve.

The target's greedy answers to the held-out prompts are teacher-forced once (cached in the lab
cache); a head is then scored with the same rollout as training (train.evaluate), per task type.
"""
from __future__ import annotations


import numpy as np
import torch

from .data import cache_dir, extract, load_shards
from .instructions import heldout_prompts
from .train import evaluate

COVERAGE_SIZES = (4096, 8192, 12288, 16384, 24576, 32768)


def heldout_sequences(pair, max_new: int = 64) -> list[dict]:
    """Teacher-forced shards of the target's greedy answers to every held-out prompt, in file order
    (plain one-sequence greedy decoding, as the bench's plain lane; cached per max_new)."""
    folder = cache_dir() / f"yardstick_{max_new}"
    prompts = heldout_prompts()
    if not (folder / "seqs.npz").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        seqs = []
        for p in prompts:
            ids = torch.tensor([pair.encode_prompt(p["text"])])
            with torch.no_grad():
                out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                           do_sample=False, pad_token_id=2)
            seqs.append(dict(prompt=ids[0].numpy(), gen=out[0, ids.shape[1]:].numpy()))
        np.savez(folder / "seqs.npz", **{f"p{i}": s["prompt"] for i, s in enumerate(seqs)},
                 **{f"g{i}": s["gen"] for i, s in enumerate(seqs)})
    with np.load(folder / "seqs.npz") as z:
        seqs = [dict(prompt=z[f"p{i}"].astype(np.int64), gen=z[f"g{i}"].astype(np.int64)) for i in range(len(prompts))]
    extract(pair.target, seqs, list(range(len(seqs))), folder / "shards", shard_size=len(seqs), log=lambda *_: None)
    return load_shards(folder / "shards")


def yardstick_rows(pair, head, max_new: int = 64) -> list[dict]:
    """[{task, n, agree [K], alpha_t1 [K], tau_greedy, tau_t1}] per task type, then "all"."""
    seqs, prompts = heldout_sequences(pair, max_new), heldout_prompts()
    rows = []
    for task in dict.fromkeys(p["task"] for p in prompts):
        chosen = [s for s, p in zip(seqs, prompts) if p["task"] == task]
        rows.append({"task": task, "n": len(chosen), **evaluate(head, chosen)})
    rows.append({"task": "all", "n": len(seqs), **evaluate(head, seqs)})
    return rows


def yardstick_table(pair, head, max_new: int = 64) -> str:
    lines = ["| task | prompts | greedy agreement, step 1 / 2 / 3 / 4 | α (T = 1), step 1 / 2 / 3 / 4 | τ greedy (k=4) |",
             "|---|---|---|---|---|"]
    for r in yardstick_rows(pair, head, max_new):
        lines.append(f"| {r['task']} | {r['n']} | {' / '.join(f'{x:.2f}' for x in r['agree'])} | "
                     f"{' / '.join(f'{x:.2f}' for x in r['alpha_t1'])} | {r['tau_greedy']:.2f} |")
    return "\n".join(lines)


def frequent_vocab_of(outputs, n: int) -> torch.Tensor:
    """The n most frequent tokens of the target's outputs (a list of int arrays): int64 [n], sorted.
    EOS is always kept (the draft must be able to propose the end)."""
    counts = np.bincount(np.concatenate(list(outputs)), minlength=3)
    counts[2] = counts.max() + 1  # <|im_end|>
    return torch.from_numpy(np.sort(np.argsort(-counts, kind="stable")[:n]))


def coverage_table(pair, train_outputs, max_new: int = 64) -> str:
    """Share of the target's held-out output tokens inside the n most frequent training-output tokens."""
    held = np.concatenate([s["ids"][s["plen"]:].numpy() for s in heldout_sequences(pair, max_new)])
    lines = ["| draft vocabulary (most frequent) | coverage of held-out target outputs |", "|---|---|"]
    for n in COVERAGE_SIZES + (pair.vocab_size,):
        vocab = frequent_vocab_of(train_outputs, n).numpy()
        lines.append(f"| {n:,} | {np.isin(held, vocab).mean():.3f} |")
    return "\n".join(lines)
