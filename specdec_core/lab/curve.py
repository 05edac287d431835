"""The learning curve of a draft run (issue 57, v5): each head's first guess against the target's
greedy token, teacher-forced over fixed scoring sets — the selection prompts (what selection reads)
and the frozen yardstick (reported only) — with their answers written once per run.

    sets = {name: selection_set(pair, out, "cpu", 4096, name) for name in ("select", "yardstick")}
    point = curve_point(heads, sets, positions)      # {"positions", head: {all, prose, code}, "yardstick": …}
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .capture import generate
from .data import FEATURE_LAYERS as LAYERS, load_ids, save_ids, select_taps
from .force import force


def _scoring_prompts(name: str) -> list[dict]:
    """select: the natural prompts selection reads (v4.selection_prompts); yardstick: the frozen
    70-prompt held-out set the defaults bench draws from (reported, never selected on)."""
    from .instructions import heldout_prompts
    from .v4 import selection_prompts
    return selection_prompts() if name == "select" else heldout_prompts()


def selection_set(pair, out: Path, device: str, max_tokens: int, name: str = "select") -> list[dict]:
    """A scoring set's prompts with the target's greedy 64-token answers — written once per run into
    <out>/<name>.npz — forced for scoring."""
    sel, path = _scoring_prompts(name), out / f"{name}.npz"
    if path.is_file():
        ids, arrays = load_ids(path)
        rows = [(x, int(pl)) for x, pl in zip(ids, arrays["plen"])]
    else:
        rows = []
        for b in range(0, len(sel), 32):
            rows += [(r["ids"].numpy(), r["plen"]) for r in
                     generate(pair.target, [pair.encode_prompt(p["text"]) for p in sel[b:b + 32]], 64, capture=False)]
        save_ids(path, [i for i, _ in rows], plen=np.array([pl for _, pl in rows]))
    seqs = force(pair.target, rows, LAYERS, max_tokens, on_device=device != "cpu")
    for s, p in zip(seqs, sel):
        s["kind"] = p["task"]
    return seqs


def curve_point(heads: dict, sets: dict, positions: int) -> dict:
    """One point of the learning curve: each head's forced first guess on each scoring set (the
    selection set's at the top level, as the run has always kept it; the others under their name)."""
    point = {"positions": positions, **{n: forced_first_guess(h, sets["select"]) for n, h in heads.items()}}
    for name, seqs in sets.items():
        if name != "select":
            point[name] = {n: forced_first_guess(h, seqs) for n, h in heads.items()}
    return point


@torch.no_grad()
def forced_first_guess(head, seqs: list[dict]) -> dict:
    """The head's first guess against the target's greedy token, teacher-forced over seqs' answers
    (the online score's cheap twin: no memory, every position from the true context): all, prose, code."""
    from .data import make_batch
    from .losses import rollout
    from .v4 import CODE_KINDS
    seqs = select_taps(seqs, head.cfg["feature_layers"])
    hits = {g: [0, 0] for g in ("all", "prose", "code")}
    was_training = head.training
    head.eval()
    for b in range(0, len(seqs), 16):
        rows = list(range(b, min(b + 16, len(seqs))))
        batch = make_batch(seqs, rows)
        g = rollout(head, batch["feats"], batch["ids"], 1)[0]
        match = (head.vocab_ids[head.logits(g).argmax(-1)] == batch["argmax"][:, 1:]) & batch["valid"]
        for r, i in enumerate(rows):
            for group in ("all", "code" if seqs[i]["kind"] in CODE_KINDS else "prose"):
                hits[group][0] += int(match[r].sum())
                hits[group][1] += int(batch["valid"][r].sum())
    head.train(was_training)
    return {g: round(h / max(1, n), 4) for g, (h, n) in hits.items()} | {"positions": hits["all"][1]}
