"""Where a head's first guess fails (issue 57): teacher-forced on the target's greedy answers to the
selection prompts (lab/v4.selection_prompts, 64 new tokens), the head's step-1 guess against the
target's own next token, overall and binned by the target's probability of that token; each head
with and without its phrase memory, and with its inputs ablated (the committed token replaced by a
random one, the features zeroed).

    python -m tests.measure_draft_ceiling specdec_core/data/draft [more head folders]
    python -m tests.measure_draft_ceiling --window specdec_core/data/draft    # + the short-window yardstick

--window adds a yardstick for the first head: the target itself reading only the last n tokens
(after the assistant's turn marker) — what a short window of text knows about the next token —
overall, on the positions the head (with its memory) misses, and where the window is sure.

Prints a Markdown table (docs/lab/draft-v4.md quotes it). Not a test: a measurement, minutes of CPU.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

BINS = (0.5, 0.7, 0.9)


def answers(pair, layers) -> list[dict]:
    from specdec_core.lab.capture import generate
    from specdec_core.lab.v4 import selection_prompts
    sel = selection_prompts()
    out = []
    for b in range(0, len(sel), 16):
        out += generate(pair.target, [pair.encode_prompt(p["text"]) for p in sel[b:b + 16]], 64, layers=layers)
    return out


@torch.no_grad()
def first_guesses(head, seqs: list[dict], memory=None, swap_token=False, zero_feats=False):
    """(hit [n] bool, target confidence [n]) over every answer position of every sequence."""
    from specdec_core.lab.data import make_batch
    from specdec_core.lab.losses import rollout
    gen = torch.Generator().manual_seed(0)
    hits, confs = [], []
    for i, s in enumerate(seqs):
        b = make_batch(seqs, [i])
        ids = torch.randint(100, 40_000, b["ids"].shape, generator=gen) if swap_token else b["ids"]
        feats = torch.zeros_like(b["feats"]) if zero_feats else b["feats"]
        g = rollout(head, feats, ids, 1)[0][0]                      # [T-1, H]: row t drafts x_{t+2}
        logits = head.logits(g)
        v = b["valid"][0]
        rows = v.nonzero()[:, 0]
        if memory is not None:
            order = memory.order
            toks = s["ids"].tolist()
            ctx = [tuple(toks[max(0, t + 2 - order):t + 2]) for t in rows.tolist()]
            logits = logits.clone()
            logits[rows] = head.with_memory(logits[rows], ctx)
        guess = head.vocab_ids[logits.argmax(-1)]
        hits.append((guess[v] == b["argmax"][0, 1:][v]).numpy())
        confs.append(s["top_lp"][1:len(s["ids"]), 0].exp()[v[:len(s["ids"]) - 1]].numpy())
    return np.concatenate(hits), np.concatenate(confs)


@torch.no_grad()
def window_guesses(pair, seqs: list[dict], n: int, batch: int = 256):
    """(the target's argmax [m], its probability [m]) reading only the assistant marker and the last
    n tokens before each answer position, in first_guesses' order (row t of a sequence predicts
    x_{t+2} from the tokens up to x_{t+1})."""
    prefix = pair.tokenizer.encode("<|im_start|>assistant\n")
    ctxs = []
    for s in seqs:
        toks, plen = s["ids"].tolist(), s["plen"]
        ctxs += [prefix + toks[max(0, t + 2 - n):t + 2] for t in range(max(0, plen - 2), len(toks) - 2)]
    guess, prob = [], []
    from specdec_core.lab.kv import left_padded
    for b in range(0, len(ctxs), batch):
        ids, mask, pos = left_padded(ctxs[b:b + batch], "cpu")   # the last column: every row's next token
        p = pair.target(ids, attention_mask=mask, position_ids=pos, logits_to_keep=1).logits[:, -1].softmax(-1)
        top = p.max(-1)
        guess.append(top.indices), prob.append(top.values)
    return torch.cat(guess).numpy(), torch.cat(prob).numpy()


def window_table(pair, seqs: list[dict], head_hit: np.ndarray, sizes=(2, 3, 4, 6)) -> str:
    """The short-window yardstick against the head's hits head_hit [m] (first_guesses' order)."""
    truth = np.concatenate([s["argmax"][max(0, s["plen"] - 1):len(s["ids"]) - 1].numpy() for s in seqs])
    lines = ["| target reading the last n tokens | right | on the head's misses | either right | "
             "window sure (p ≥ 0.5): share, window right, head right there |", "|---|---|---|---|---|"]
    for n in sizes:
        guess, prob = window_guesses(pair, seqs, n)
        hit, sure = guess == truth, prob >= 0.5
        lines.append(f"| n = {n} | {hit.mean():.3f} | {hit[~head_hit].mean():.3f} | {(hit | head_hit).mean():.3f} | "
                     f"{sure.mean():.2f}, {hit[sure].mean():.3f}, {head_hit[sure].mean():.3f} |")
    return "\n".join(lines)


def row(name: str, hit: np.ndarray, conf: np.ndarray) -> str:
    k = np.digitize(conf, BINS)
    cells = [f"{hit[k == j].mean():.3f}" if (k == j).any() else "–" for j in range(len(BINS) + 1)]
    return f"| {name} | {hit.mean():.3f} | " + " | ".join(cells) + " |"


def main(folders: list[str], window: bool = False) -> None:
    from specdec_core.drafters.feature_head import load_head
    from specdec_core.lab.v3 import load_target
    torch.set_num_threads(2)
    pair = load_target("cpu")
    heads = [(f, load_head(pair.target, Path(f))) for f in folders]
    layers = sorted({tuple(h.cfg["feature_layers"]) for _, h in heads}, key=len)[-1]
    seqs = answers(pair, layers)
    k_all, first_hit = None, None
    lines = ["| head | all | target p < 0.5 | 0.5–0.7 | 0.7–0.9 | ≥ 0.9 |", "|---|---|---|---|---|---|"]
    for folder, head in heads:
        n_taps = len(head.cfg["feature_layers"])
        sub = [dict(s, feats=s["feats"][:, -n_taps * head.cfg["hidden_size"]:]) if n_taps == 1 else s for s in seqs]
        hit, conf = first_guesses(head, sub)
        lines.append(row(f"{folder}", hit, conf))
        k_all = conf
        mem_hit = first_guesses(head, sub, head.memory)[0] if head.memory is not None else None
        if mem_hit is not None:
            lines.append(row(f"{folder} + memory", mem_hit, conf))
        if first_hit is None:      # the window yardstick compares with the first head as it drafts
            first_hit = hit if mem_hit is None else mem_hit
        lines.append(row(f"{folder}, committed token random", *first_guesses(head, sub, swap_token=True)))
        lines.append(row(f"{folder}, features zeroed", *first_guesses(head, sub, zero_feats=True)))
    shares = np.bincount(np.digitize(k_all, BINS), minlength=len(BINS) + 1) / len(k_all)
    lines.append(f"| share of positions ({len(k_all):,}) | 1 | " + " | ".join(f"{x:.2f}" for x in shares) + " |")
    print("\n".join(lines))
    if window:
        print("\n" + window_table(pair, seqs, first_hit))


if __name__ == "__main__":
    args = sys.argv[1:]
    folders = [a for a in args if a != "--window"]
    main(folders or ["specdec_core/data/draft"], window="--window" in args)
