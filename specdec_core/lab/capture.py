"""Generate and capture in one pass (issue 38): batched generation by the target that keeps, as it
goes, everything a feature head trains on — no separate teacher-forcing pass.

    seqs = generate(target, prompts, max_new=160, temperature=0.0, layers=(10, 20, -1))
    ref = teacher_force(target, seqs[0]["ids"], layers)     # the same numbers, one separate pass
    writer, name = make_writer(target, "cpu", "auto")       # who writes v5's rounds (bf16 products where the CPU has them)

Each sequence is a dict of CPU tensors (n = prompt + generated tokens, EOS included if reached):
  ids int64 [n]; plen int; greedy bool;
  feats fp16 [n, n_taps·H]: the tapped hidden states (the last tap the final post-norm state f_t)
      at every position but the last (that token is never fed: its row is zeros; training never
      reads it: row t predicts x_{t+2});
  lse fp32 [n]: log-normaliser of the target's logits at t (exact teacher on any vocabulary with
      f_t: p(x) = exp(W_x f_t − lse_t)); top_ids int64 [n, k], top_lp fp32 [n, k]: the target's
      top-k next tokens and log-probs; argmax int64 [n] (the full target's argmax, = top_ids[:, 0]).
  The logit-derived fields are filled at positions plen−1 … n−2 (where a generated token is
  predicted) and zero before: prefill keeps one logit row, so no [B, P, V] tensor is made.
Every tensor is created on the target's device; only the returned copies move to the CPU.
"""
from __future__ import annotations

import copy

import torch

from ..sampling import SamplingConfig, draw, warp_probs
from . import kv

EOS = 2
TOPK = 8


def _device(target) -> torch.device:
    return target.get_input_embeddings().weight.device


def _logit_fields(logits: torch.Tensor, topk: int):
    """logits [B, V] -> lse [B], top_lp [B, k], top_ids [B, k] (raw distribution, T = 1)."""
    logits = logits.float()
    lse = torch.logsumexp(logits, -1)
    val, idx = logits.topk(topk, -1)
    return lse, val - lse[:, None], idx


def _rows(x: torch.Tensor, alive: torch.Tensor, B: int, fill) -> torch.Tensor:
    """x [len(alive), …] -> [B, …]: the alive rows in their places, `fill` in the rows that ended."""
    if len(alive) == B:
        return x
    full = x.new_full((B, *x.shape[1:]), fill)
    full[alive] = x
    return full


@torch.no_grad()
def generate(target, prompts: list[list[int]], max_new: int, *, temperature: float = 0.0, top_p: float = 1.0,
             seed: int = 0, layers=(10, 20, -1), topk: int = TOPK, capture: bool = True, chunk: int = 8) -> list[dict]:
    """Batched generation with an in-place KV cache (`kv.py`); B = len(prompts). Greedy at
    temperature 0, else temperature / top-p sampling from a generator seeded with `seed` on the
    target's device. Prompts are prefilled `chunk` rows of similar length at a time; rows that
    end (EOS) leave the batch once a quarter of it has ended. capture=False: ids and plen only
    (v3's prompt writer; v5's bf16 writer on a GPU)."""
    dev = _device(target)
    B = len(prompts)
    cfg = SamplingConfig(temperature=temperature, top_p=top_p).check()
    gen = torch.Generator(device=dev).manual_seed(seed)
    cache = kv.buffered_cache(target, B, max(len(p) for p in prompts) + max_new)
    logits, taps, mask, pos = kv.prefill(target, cache, prompts, chunk, layers=layers if capture else None)
    P = mask.shape[1]
    feats, fields, new = [], [], []          # per step, all B rows: [B, t, taps·H] / (lse, top_lp, top_ids) / [B]
    alive = torch.arange(B, device=dev)      # each cache row's row in prompts
    ended = torch.zeros(B, dtype=torch.bool, device=dev)
    hidden = None                            # a decode step's hidden states (all layers)
    for step in range(max_new):
        if capture:
            # the prompt's taps from the prefill, then each step's new token's, in their rows
            feats.append(taps.half() if step == 0 else _rows(torch.cat([hidden[i] for i in layers], -1).half(), alive, B, 0))
            fields.append(tuple(_rows(x, alive, B, 0) for x in _logit_fields(logits, topk)))
        tok = draw(warp_probs(logits, cfg), cfg, gen)
        tok = torch.where(ended, torch.full_like(tok, EOS), tok)      # an ended row still in the batch
        new.append(_rows(tok, alive, B, EOS))
        ended = ended | (tok == EOS)
        if step + 1 == max_new or bool(ended.all()):
            break
        if 4 * int(ended.sum()) >= len(alive):   # a quarter have ended: they leave (one copy of the cache)
            keep = (~ended).nonzero()[:, 0]
            alive, tok, mask, pos, ended = alive[keep], tok[keep], mask[keep], pos[keep], ended[keep]
            cache.batch_select_indices(keep)
        mask = torch.cat([mask, torch.ones(len(alive), 1, dtype=torch.long, device=dev)], 1)
        pos = pos + 1
        out = target(tok[:, None], attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
                     output_hidden_states=capture)
        logits, hidden = out.logits[:, -1], out.hidden_states
    new = torch.stack(new, 1).cpu()                                        # [B, G]
    if capture:
        F = torch.cat(feats, 1).cpu()                                      # [B, P + G − 1, taps·H]
        lse, top_lp, top_ids = (torch.stack(x, 1).cpu() for x in zip(*fields))   # [B, G, …]
    rows = []
    for r, p in enumerate(prompts):
        g = new[r]
        stop = (g == EOS).nonzero()
        g = g[: int(stop[0]) + 1] if len(stop) else g
        n, pl, G = len(p) + len(g), len(p), len(g)
        row = dict(ids=torch.cat([torch.tensor(p, dtype=torch.long), g]), plen=pl, greedy=cfg.greedy)
        if capture:
            f = torch.zeros(n, F.shape[-1], dtype=torch.float16)
            f[: n - 1] = F[r, P - pl: P - pl + n - 1]                    # drop the left padding
            row["feats"] = f
            # Logit row i of the loop is position pl − 1 + i (it predicts generated token i).
            span = slice(pl - 1, pl - 1 + G)
            row["lse"] = torch.zeros(n).index_copy_(0, torch.arange(pl - 1, pl - 1 + G), lse[r, :G])
            row["top_lp"] = torch.zeros(n, topk)
            row["top_lp"][span] = top_lp[r, :G]
            row["top_ids"] = torch.zeros(n, topk, dtype=torch.long)
            row["top_ids"][span] = top_ids[r, :G]
            row["argmax"] = row["top_ids"][:, 0].clone()
        rows.append(row)
    return rows


@torch.no_grad()
def teacher_force(target, ids: torch.Tensor, layers=(10, 20, -1), topk: int = TOPK) -> dict:
    """One plain forward over ids [n] (no cache, no padding): feats fp16 [n, taps·H], lse [n],
    top_lp [n, k], top_ids [n, k] at every position — the reference the capture must equal."""
    dev = _device(target)
    x = ids.to(dev)[None]
    out = target(x, attention_mask=torch.ones_like(x), output_hidden_states=True)
    lse, top_lp, top_ids = _logit_fields(out.logits[0], topk)
    return dict(feats=torch.cat([out.hidden_states[i][0] for i in layers], -1).half().cpu(),
                lse=lse.cpu(), top_lp=top_lp.cpu(), top_ids=top_ids.cpu())


def make_writer(target, device: str, choice: str = "auto"):
    """The model that writes a round's answers, and its name for the log and state.json. A GPU: a
    bf16 copy (half the KV cache to move each step; its rows are forced by the fp32 target). A CPU:
    the fp32 target itself ("fp32"), or a copy whose matrix products run in bf16 with fp32 sums
    ("bf16-matrices": norms, attention and the residual stream stay fp32), the labels captured from
    it as it writes — 1.4x the answers an hour on a 2-core Xeon with AMX, its argmax the fp32
    target's at 98.5 % of answer positions (docs/lab/draft-v5.md, session 8). "auto": bf16 where the CPU has
    bf16 math (fastpath.draft_matrix_dtype), else fp32."""
    from ..kernels import fastpath
    if choice not in ("auto", "fp32", "bf16"):
        raise ValueError(f"writer {choice!r}: fp32, bf16 or auto")
    if device == "cuda":
        return copy.deepcopy(target).to(torch.bfloat16).eval(), "bf16 copy, forced by fp32"
    has_bf16 = fastpath.draft_matrix_dtype() is torch.bfloat16
    if choice == "bf16" and not has_bf16:
        raise ValueError("writer bf16: this CPU has no bf16 math that oneDNN runs here (avx512_bf16 or AMX; "
                         "or SPECDEC_DRAFT_BF16=0): use fp32 or auto")
    if choice == "fp32" or not has_bf16:
        return target, "fp32"
    twin = fastpath.repacked(target, torch.bfloat16).eval()
    if fastpath.kernels_of(twin).name != fastpath.FAST:      # no fast path here: bf16 would be emulated
        return target, "fp32"
    return twin, "bf16-matrices"
