"""The learning curve of a draft run (issue 57, v5): each head's first guess against the target's
greedy token, teacher-forced over fixed scoring sets — the selection prompts (what selection reads)
and the frozen yardstick (reported only) — with their answers written once per run.

    sets = {name: selection_set(pair, out, "cpu", 4096, name) for name in ("select", "yardstick")}
    point = curve_point(heads, sets, positions)      # {"positions", head: {all, prose, code}, "gain", "yardstick": …}
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
    selection set's at the top level, as the run has always kept it; the others under their name),
    and under "gain" each later head's paired difference from the first on the selection set."""
    hits = {n: first_guess_hits(h, sets["select"]) for n, h in heads.items()}
    point = {"positions": positions, **{n: hit_rates(hits[n], sets["select"]) for n in heads}}
    first = next(iter(heads))
    if len(heads) > 1:
        point["gain"] = {n: paired_gain(hits[n], hits[first]) for n in heads if n != first}
    for name, seqs in sets.items():
        if name != "select":
            point[name] = {n: forced_first_guess(h, seqs) for n, h in heads.items()}
    return point


def paired_gain(hits: list[np.ndarray], base: list[np.ndarray]) -> dict:
    """How much more often one head's first guess is right than another's on the same positions
    (per sequence bool arrays): the difference and its standard error by prompt (positions of one
    answer are not independent: a ratio estimator's cluster SE)."""
    d = np.array([int(h.sum()) - int(b.sum()) for h, b in zip(hits, base)], dtype=np.float64)
    n = np.array([len(h) for h in hits], dtype=np.float64)
    gain = d.sum() / max(1.0, n.sum())
    se = np.sqrt(((d - gain * n) ** 2).sum() * len(n) / max(1, len(n) - 1)) / max(1.0, n.sum())
    return {"gain": round(float(gain), 4), "se": round(float(se), 4)}


def hit_rates(hits: list[np.ndarray], seqs: list[dict]) -> dict:
    """Per-sequence hits -> the share right: all, prose, code (by each sequence's kind), and positions."""
    from .v4 import CODE_KINDS
    counts = {g: [0, 0] for g in ("all", "prose", "code")}
    for h, s in zip(hits, seqs):
        for group in ("all", "code" if s["kind"] in CODE_KINDS else "prose"):
            counts[group][0] += int(h.sum())
            counts[group][1] += len(h)
    return {g: round(k / max(1, n), 4) for g, (k, n) in counts.items()} | {"positions": counts["all"][1]}


def forced_first_guess(head, seqs: list[dict]) -> dict:
    """The head's first guess against the target's greedy token, teacher-forced over seqs' answers
    (the online score's cheap twin: no memory, every position from the true context): all, prose, code."""
    return hit_rates(first_guess_hits(head, seqs), seqs)


def _forced_batches(head, seqs: list[dict]):
    """The head's first-guess logits teacher-forced over seqs, 16 sequences a batch, in eval mode (its
    mode restored after): yields (batch, logits [B, T − 1, N]) — make_batch's fields, row t reading ids[:t + 2]."""
    from .data import make_batch
    from .losses import rollout
    seqs = select_taps(seqs, head.cfg["feature_layers"])
    was_training = head.training
    head.eval()
    try:
        with torch.no_grad():
            for b in range(0, len(seqs), 16):
                batch = make_batch(seqs, list(range(b, min(b + 16, len(seqs)))))
                yield batch, head.logits(rollout(head, batch["feats"], batch["ids"], 1)[0])
    finally:
        head.train(was_training)


def first_guess_hits(head, seqs: list[dict]) -> list[np.ndarray]:
    """Teacher-forced over each sequence's answer: is the head's first guess the target's greedy
    token, per answer position ([n_valid] bools a sequence)."""
    out = []
    for batch, logits in _forced_batches(head, seqs):
        match = head.vocab_ids[logits.argmax(-1)] == batch["argmax"][:, 1:]
        out += [match[r][batch["valid"][r]].cpu().numpy() for r in range(len(match))]
    return out


# Where the target's own top token is this sure (its probability p_max), from most to least sure.
SURE_BINS = ((0.9, "≥ 0.9"), (0.5, "0.5–0.9"), (0.0, "< 0.5"))


@torch.no_grad()
def miss_anatomy(head, seqs: list[dict], out_weight: torch.Tensor) -> dict:
    """Why a head's forced first guesses miss (the issue's measured reason, should a curve flatten):
    each scored position by how sure the target is of its own token (p_max, from the final state
    and the log-normaliser: p = exp(W_x·f − lse)) and whether that token is in the head's vocabulary.
    out_weight [V, H]: the target's output matrix. Returns {"positions", "hit", "out_of_vocab": share of
    positions, "bins": [{"bin", "share", "hit", "in_vocab_hit"}]} — a head can only be right inside its
    vocabulary; where the target is unsure its token is a near-tie the head must rank exactly."""
    from .data import make_batch
    hits = first_guess_hits(head, seqs)
    seqs = select_taps(seqs, [-1])            # the final post-norm state: the target's own logits
    in_vocab = torch.zeros(out_weight.shape[0], dtype=torch.bool)
    in_vocab[head.vocab_ids.cpu()] = True
    p_max, inside = [], []
    for b in range(0, len(seqs), 16):
        rows = list(range(b, min(b + 16, len(seqs))))
        batch = make_batch(seqs, rows)
        tok = batch["argmax"][:, 1:]                                      # the target's token at t + 1
        f, lse = batch["feats"][:, 1:], batch["lse"][:, 1:]
        logit = (f * out_weight.float()[tok]).sum(-1)                     # W_tok · f_{t+1}
        p = (logit - lse).exp()
        for r in range(len(rows)):
            v = batch["valid"][r]
            p_max.append(p[r][v].cpu().numpy())
            inside.append(in_vocab[tok[r][v].cpu()].numpy())
    hit, p_max, inside = (np.concatenate(x) for x in (hits, p_max, inside))
    n = max(1, len(hit))
    bins, upper = [], np.inf
    for lo, label in SURE_BINS:
        m = (p_max >= lo) & (p_max < upper)
        bins.append({"bin": label, "share": round(float(m.sum()) / n, 4), "hit": round(float(hit[m].mean()), 4) if m.any() else None,
                     "in_vocab_hit": round(float(hit[m & inside].mean()), 4) if (m & inside).any() else None})
        upper = lo
    return {"positions": int(len(hit)), "hit": round(float(hit.mean()), 4) if len(hit) else None,
            "out_of_vocab": round(float((~inside).sum()) / n, 4), "bins": bins}


def head_logits(head, seqs: list[dict]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Teacher-forced, per sequence: (the head's first-guess logits over its N tokens [n_valid, N],
    the target's token [n_valid], each row's position t in ids: the row reads ids[:t + 2])."""
    out = []
    for batch, logits in _forced_batches(head, seqs):
        for r in range(len(logits)):
            v = batch["valid"][r]
            out.append((logits[r][v].cpu().numpy(), batch["argmax"][r, 1:][v].cpu().numpy(), v.nonzero()[:, 0].cpu().numpy()))
    return out


def drafting_first_guess(head, seqs: list[dict], logits=None, memory=None, phrases=None) -> float:
    """The forced first guess as the drafter makes it: the head's logits plus the phrase memory's
    bias and the text's own phrases' (phrases: TextPhrases' settings, a fresh table a sequence, fed
    the sequence as it is read) — the online score's teacher-forced twin for those rules.
    logits: head_logits(head, seqs), when scoring several rules on one head."""
    from ..drafters.memory import TextPhrases, columns_of_ids
    logits = logits if logits is not None else head_logits(head, seqs)
    vocab = head.vocab_ids.cpu().numpy()
    col_of = columns_of_ids(vocab, int(max(vocab.max(), max(int(s["ids"].max()) for s in seqs))) + 1)
    mem_cols = memory.columns(vocab) if memory is not None else None
    right = total = 0
    for s, (lg, target, ts) in zip(seqs, logits, strict=True):
        ids = s["ids"].tolist()
        table = TextPhrases(**phrases) if phrases else None
        for row, t in enumerate(ts.tolist()):
            ctx, l = tuple(ids[max(0, t - 1): t + 2]), lg[row].copy()     # the row reads ids[:t + 2]
            if memory is not None:
                _, c, d = memory.bias_rows([ctx], mem_cols, "cpu")
                np.add.at(l, c.numpy(), d.numpy())
            if table is not None:
                table.catch_up(ids[: t + 2])
                _, c, d = table.bias_rows([ctx], col_of, "cpu")
                np.add.at(l, c.numpy(), d.numpy())
            right += int(vocab[int(l.argmax())] == int(target[row]))
            total += 1
    return right / max(1, total)
