"""The teaching views' model work, through specdec_core: the first token's exact p and q for the
exactness lab, and the measured cost of a target pass. Plus the teaching-only BROKEN sampler,
which lives here on purpose: the library's API has no way to reach it.

The two @gpu functions are the only model work of these views (a ZeroGPU Space holds a GPU for
them alone); drawing thousands of samples from two vectors runs on the CPU outside them.
"""
from __future__ import annotations

from typing import Iterator, Optional

import torch

from specdec_core import (chi_square, cost_curve, first_token_distributions, keeps_draft, sample_plain,
                          sample_speculative, sample_tree_first)
from specdec_core.trace.token_text import lone

from .. import form_fields, handlers
from ..gpu import gpu
from ..model_thread import MODEL_THREAD

LAB_PROMPT = "I saw a dog ride"             # chat template off: the walkthrough's prompt
LAB_DRAFT = "distilled"                     # weak here on plain text (α ≈ 0.31): rejections are frequent
LAB_DRAFTS = ["distilled", "target-layers:1", "target-layers:2", "target-layers:4"]
N_DEFAULT, N_MIN, N_MAX = 4000, 2000, 50_000
TOP_BINS = 8                                 # tokens shown; the rest is one "other" bar
CHUNKS = 10                                  # progress steps (and Stop points) per sampler
TREE_GUESSES = 3                             # the tree sampler's root children: the draft's top 3


def sample_broken(p_target: torch.Tensor, q_draft: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """TEACHING ONLY — WRONG ON PURPOSE: the rejection rule with its residual replaced by p.
    Tokens the draft over-proposes come out too often: the output is not the target's distribution.
    The draws and the keep test are sample_speculative's (the decoder's keeps_draft); only the
    resample is wrong."""
    x = torch.multinomial(q_draft, n, replacement=True, generator=generator)
    u = torch.rand(n, generator=generator)
    kept = keeps_draft(u.double(), p_target[x].double(), q_draft[x].double())
    from_p = torch.multinomial(p_target, n, replacement=True, generator=generator)   # the bug
    return torch.where(kept, x, from_p)


SAMPLERS = {  # name -> (function of (p, q, n, generator), seed offset)
    "plain": (lambda p, q, n, g: sample_plain(p, n, g), 0),
    "speculative": (sample_speculative, 1),
    "broken": (sample_broken, 2),
    # a token tree's root: the draft's top guesses tried in order (kept with probability r(x)/Σr, r(x) ← 0 after each)
    "tree": (lambda p, q, n, g: sample_tree_first(p, q.topk(TREE_GUESSES).indices, n, g), 3),
}


@gpu
def lab_distributions(target_ref: str, draft_ref: str, device: str, prompt: str, chat: bool,
                      progress, notify) -> tuple[torch.Tensor, torch.Tensor, object]:
    """(p_target [V], q_draft [V] on the CPU, token_text) for the first token after the prompt, T = 1."""
    pair = handlers.load(target_ref, draft_ref, device, progress, notify)
    ids = pair.encode_prompt(prompt, chat=chat)
    p_target, q_draft = first_token_distributions(pair, ids, temperature=1.0)
    return p_target, q_draft, _token_label(pair)


def _token_label(pair):
    """A token alone as every view shows it (trace.token_text.lone): bytes of a split character as ⟨D9⟩, never "�"."""
    def label(token_id: int) -> str:
        text, raw = pair.token_text(token_id), pair.token_bytes(token_id)
        split = {str(token_id): raw.hex().upper()} if raw is not None and "\ufffd" in text else None
        return lone(token_id, text, split).label
    return label


@gpu
def measured_cost_curve(target_ref: str, draft_ref: str, device: str, progress, notify) -> dict:
    """costs.machine_costs.cost_curve of the target (measured once per loaded target, then cached)."""
    pair = handlers.load(target_ref, draft_ref, device, progress, notify)
    return cost_curve(pair.target, pair.vocab_size, progress=lambda f, d: progress(f, desc=d))


@MODEL_THREAD.wrap   # torch on 49k-token vectors: on the one thread that runs torch (app.model_thread)
def draw_counts(p_target, q_draft, n: int, seed: int) -> Iterator[tuple[float, dict]]:
    """Counts [V] per sampler, drawn in CHUNKS pieces: yields (fraction done, counts so far)."""
    V = p_target.shape[-1]
    counts = {name: torch.zeros(V, dtype=torch.long) for name in SAMPLERS}
    gens = {name: torch.Generator().manual_seed(seed * 1000 + off) for name, (_, off) in SAMPLERS.items()}
    sizes = [n // CHUNKS + (1 if i < n % CHUNKS else 0) for i in range(CHUNKS)]
    for i, size in enumerate(sizes):
        for name, (fn, _) in SAMPLERS.items():
            if size:
                counts[name] += torch.bincount(fn(p_target, q_draft, size, gens[name]), minlength=V)
        yield (i + 1) / CHUNKS, counts


@MODEL_THREAD.wrap
def summarise(p_target, q_draft, counts: dict, token_text) -> dict:
    """Bins (top tokens by p + "other"), frequencies, and each sampler's chi-square against p."""
    n = int(counts["plain"].sum())
    top = torch.topk(p_target, min(TOP_BINS, p_target.shape[-1])).indices.tolist()
    rest = torch.ones_like(p_target, dtype=torch.bool)
    rest[top] = False

    def bins(v):
        v = v.double()
        return [float(v[i]) for i in top] + [float(v[rest].sum())]
    labels = [repr(token_text(i))[1:-1] or "∅" for i in top] + ["other"]
    out = {"labels": labels, "n": n, "exact": bins(p_target), "q": bins(q_draft),
           "alpha": float(torch.minimum(p_target, q_draft).sum())}
    for name, c in counts.items():
        out[name] = [x / n for x in bins(c)]
        out[f"p_{name}"] = chi_square(c, p_target).p_value
    return out


def summary_markdown(result: dict) -> str:
    verdict = lambda p: "consistent with p" if p > 1e-3 else "**not** the target's distribution"
    return (f"N = {result['n']:,} draws each · acceptance of this draft here α = Σ min(p, q) = "
            f"{result['alpha']:.2f} (so {1 - result['alpha']:.0%} of speculative draws go through the residual).\n\n"
            f"- plain sampling: χ² p-value **{result['p_plain']:.3f}** — {verdict(result['p_plain'])}\n"
            f"- speculative (the core's rejection rule): χ² p-value **{result['p_speculative']:.3f}** — "
            f"{verdict(result['p_speculative'])}\n"
            f"- token tree (the draft's top {TREE_GUESSES} guesses as the root's children, each kept with "
            f"probability r(x)/Σr and removed when rejected): χ² p-value **{result['p_tree']:.3f}** — "
            f"{verdict(result['p_tree'])}\n"
            f"- broken variant (teaching only: residual replaced by p): χ² p-value **{result['p_broken']:.1e}** — "
            f"{verdict(result['p_broken'])}. It over-produces the tokens the draft likes: the residual is what "
            f"gives back exactly the probability the draft under-proposed.")


def check_n(n) -> int:
    """The lab's sample count, or a UserError naming the range."""
    return form_fields.whole_number(n, "N", N_MIN, N_MAX)


def run_exactness(target_ref: str, draft_ref: str, device: str, prompt: str, chat: bool, n, seed,
                  progress, notify) -> Iterator[tuple[float, Optional[dict]]]:
    """The exactness lab: yields (fraction, None) while drawing, then (1.0, summary dict)."""
    n = check_n(n)
    prompt = (prompt or "").strip() or LAB_PROMPT
    try:
        p_target, q_draft, token_text = lab_distributions(target_ref, draft_ref, device or "auto", prompt,
                                                          bool(chat), progress, notify)
    except ValueError as e:
        raise form_fields.UserError(str(e)) from None
    counts = None
    for frac, counts in draw_counts(p_target, q_draft, n, int(seed or 0)):
        progress(frac, desc=f"drawing {n:,} first tokens three ways")
        yield frac, None
    yield 1.0, summarise(p_target, q_draft, counts, token_text)
