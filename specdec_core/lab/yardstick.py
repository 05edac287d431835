"""The draft's yardstick: figures per task type on the frozen held-out prompts
(`data/heldout_prompts.json`), online and teacher-forced, and the vocabulary coverage curve.

Online: the real decoder, greedy, k = 4 rounds, 64 new tokens per prompt, the head alone as the
draft; per round the first draft's acceptance and whether the target's token (its argmax) is
among the draft's top 1/3/5 at draft step 1 (what a tree would try), from the trace.
Teacher-forced: the target's greedy answers are run through the target once (cached in the lab
cache); a head is scored with the same rollout as training (train.evaluate), per task type.
"""
from __future__ import annotations

import json

import numpy as np
import torch

from .data import extract, keyed_dir, load_shards, manifest, select_taps
from .instructions import heldout_prompts
from .train import evaluate


def prompt_file(path=None) -> tuple[list[dict], object]:
    """(prompts [{"name", "task", "text"}], the file) of a prompt file ({"prompts": [...]}, as the
    bench's); None: the frozen yardstick. A prompt without a task counts under its file's stem."""
    from pathlib import Path
    from .. import data
    f = Path(path) if path else data.file("heldout_prompts.json")
    items = json.loads(f.read_text())["prompts"]
    return [{"name": p.get("name", f"p{i}"), "task": p.get("task", f.parent.name if f.name == "prompts.json" else f.stem),
             "text": p["text"]} for i, p in enumerate(items)], f

COVERAGE_SIZES = (4096, 8192, 12288, 16384, 24576, 32768)


def heldout_sequences(pair, max_new: int = 64, prompts_path=None) -> list[dict]:
    """Teacher-forced shards of the target's greedy answers to every prompt of the file (default
    the frozen yardstick), in file order (plain one-sequence greedy decoding, as the bench's plain
    lane; cached per file and max_new). Each carries "argmax": greedy answers are the full target's
    argmax, so ids[t + 1] is the target's argmax at t."""
    prompts, f = prompt_file(prompts_path)
    folder = keyed_dir(f"yardstick_{max_new}", manifest([f], max_new=max_new))
    if not (folder / "seqs.npz").is_file():
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
    out = load_shards(folder / "shards")
    for s in out:
        s["argmax"] = torch.cat([s["ids"][1:], s["ids"][-1:]])
    return out


def yardstick_rows(pair, head, max_new: int = 64, prompts_path=None) -> list[dict]:
    """[{task, n, agree [K], alpha_t1 [K], tau_greedy, tau_t1}] per task type, then "all"; agree is
    against the full target's argmax."""
    seqs = select_taps(heldout_sequences(pair, max_new, prompts_path), head.cfg["feature_layers"])
    prompts = prompt_file(prompts_path)[0]
    rows = []
    for task in dict.fromkeys(p["task"] for p in prompts):
        chosen = [s for s, p in zip(seqs, prompts) if p["task"] == task]
        rows.append({"task": task, "n": len(chosen), **evaluate(head, chosen)})
    rows.append({"task": "all", "n": len(seqs), **evaluate(head, seqs)})
    return rows


def yardstick_table(pair, head, max_new: int = 64, prompts_path=None) -> str:
    lines = ["| task | prompts | greedy agreement, step 1 / 2 / 3 / 4 | α (T = 1), step 1 / 2 / 3 / 4 | τ greedy (k=4) |",
             "|---|---|---|---|---|"]
    for r in yardstick_rows(pair, head, max_new, prompts_path):
        lines.append(f"| {r['task']} | {r['n']} | {' / '.join(f'{x:.2f}' for x in r['agree'])} | "
                     f"{' / '.join(f'{x:.2f}' for x in r['alpha_t1'])} | {r['tau_greedy']:.2f} |")
    return "\n".join(lines)


def online_rows(pair, k: int = 4, max_new: int = 64, prompts=None) -> list[dict]:
    """Per task type, then "all": the pair decoding each held-out prompt greedily at fixed k.
    {task, n, rounds, pos1 (first draft accepted), top1/top3/top5 (the target's token among the
    draft's top-m at step 1), accept [k] (acceptance at step j given step j was tried), tau
    (tokens per round)}."""
    from ..decoding.speculative import speculative_generate
    tally = lambda: {"n": set(), "rounds": 0, "pos1": 0, "top1": 0, "top3": 0, "top5": 0,
                     "tried": [0] * k, "ok": [0] * k, "tokens": 0}
    per_task, total = {}, tally()
    for p in prompts if prompts is not None else heldout_prompts():
        trace = speculative_generate(pair, pair.encode_prompt(p["text"]), k=k, temperature=0.0, max_new_tokens=max_new)
        for r in trace.rounds:
            if not r.drafted:
                continue
            first, target_id = r.drafted[0], r.drafted[0].p_top_raw[0][0]
            ranks = [t[0] for t in first.q_top_raw]
            for row in (per_task.setdefault(p["task"], tally()), total):   # the task's row and "all"
                row["n"].add(p["name"])
                row["rounds"] += 1
                row["tokens"] += len(r.committed)
                row["pos1"] += first.accepted
                for m in (1, 3, 5):
                    row[f"top{m}"] += target_id in ranks[:m]
                for j, d in enumerate(r.drafted):
                    if d.evaluated:
                        row["tried"][j] += 1
                        row["ok"][j] += d.accepted
    out = []
    for task, row in [*per_task.items(), ("all", total)]:
        n = max(row["rounds"], 1)
        out.append({"task": task, "n": len(row["n"]), "rounds": row["rounds"], "pos1": row["pos1"] / n,
                    **{f"top{m}": row[f"top{m}"] / n for m in (1, 3, 5)},
                    "accept": [o / max(t, 1) for o, t in zip(row["ok"], row["tried"])], "tau": row["tokens"] / n})
    return out


def online_table(pair, k: int = 4, max_new: int = 64, prompts=None) -> str:
    lines = [f"| task | prompts | rounds | first draft accepted | target's token in draft top-1 / 3 / 5 (step 1) | "
             f"acceptance at step 1..{k} (given tried) | tokens per round |", "|---|---|---|---|---|---|---|"]
    for r in online_rows(pair, k, max_new, prompts):
        lines.append(f"| {r['task']} | {r['n']} | {r['rounds']} | {r['pos1']:.2f} | {r['top1']:.2f} / {r['top3']:.2f} / "
                     f"{r['top5']:.2f} | {' / '.join(f'{x:.2f}' for x in r['accept'])} | {r['tau']:.2f} |")
    return "\n".join(lines)


def frequent_vocab_of(outputs, n: int) -> torch.Tensor:
    """The n most frequent tokens of the target's outputs (a list of int arrays): int64 [n], sorted.
    EOS is always kept (the draft must be able to propose the end)."""
    counts = np.bincount(np.concatenate(list(outputs)), minlength=3)
    counts[2] = counts.max() + 1  # <|im_end|>
    return torch.from_numpy(np.sort(np.argsort(-counts, kind="stable")[:n]))


def coverage_table(pair, train_outputs, max_new: int = 64, prompts_path=None) -> str:
    """Share of the target's held-out output tokens inside the n most frequent training-output tokens."""
    held = np.concatenate([s["ids"][s["plen"]:].numpy() for s in heldout_sequences(pair, max_new, prompts_path)])
    lines = ["| draft vocabulary (most frequent) | coverage of held-out target outputs |", "|---|---|"]
    for n in COVERAGE_SIZES + (pair.vocab_size,):
        vocab = frequent_vocab_of(train_outputs, n).numpy()
        lines.append(f"| {n:,} | {np.isin(held, vocab).mean():.3f} |")
    return "\n".join(lines)
