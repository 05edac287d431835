"""Teacher forcing at the speed of a forward pass (issue 57): the target reads existing text once and
keeps what a feature head trains on — no token is generated.

    seqs = force(target, [(ids, plen), ...], layers=(10, 20, -1))

Each returned sequence is the dict `capture.generate` returns (ids int64 [n], plen, feats fp16
[n, taps·H] with the last row zero, lse fp32 [n], argmax int64 [n]), so `stream.train_on` trains on
either. The output layer runs only where a label is read (positions plen−1 … n−2): the prompt's
rows need the tapped states (the head attends to them) but no logits.
"""
from __future__ import annotations

import numpy as np
import torch

from .capture import EOS, _device


@torch.no_grad()
def force(target, rows: list[tuple[np.ndarray, int]], layers=(10, 20, -1), max_tokens: int = 4096,
          autocast: bool = False, on_device: bool = False) -> list[dict]:
    """rows [(ids int [n], plen)] -> capture-format sequences, in the input order. Batches are
    length-sorted and right-padded, at most max_tokens (padded) tokens each. autocast=True runs the
    transformer in bf16 (labels then differ from the fp32 target's by bf16 rounding). on_device=True
    leaves every tensor on the target's device (a GPU run trains there: no round trip to the host)."""
    dev = _device(target)
    W = target.get_output_embeddings().weight
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    out: list[dict | None] = [None] * len(rows)
    b = 0
    while b < len(order):
        group = [order[b]]
        while b + len(group) < len(order) and len(rows[order[b + len(group)]][0]) * (len(group) + 1) <= max_tokens:
            group.append(order[b + len(group)])
        b += len(group)
        T = max(len(rows[i][0]) for i in group)
        x = torch.full((len(group), T), EOS, dtype=torch.long, device=dev)
        for r, i in enumerate(group):
            ids = torch.as_tensor(np.asarray(rows[i][0]), dtype=torch.long, device=dev)
            x[r, :len(ids)] = ids
        # Right padding under causal attention: no row's tokens read its padding, so no mask is
        # needed — and without one SDPA takes its fused causal kernel instead of a masked one.
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            hs = target.model(x, output_hidden_states=True).hidden_states
        taps = torch.cat([hs[i].float() for i in layers], -1)          # [B, T, taps·H]
        final = hs[-1].float()
        for r, i in enumerate(group):
            ids, plen = rows[i]
            n = len(ids)
            lo, hi = max(plen - 1, 0), n - 1                            # rows whose next token is a label
            logits = final[r, lo:hi] @ W.T.float()                      # [hi − lo, V]
            lse, argmax = torch.zeros(n, device=dev), torch.zeros(n, dtype=torch.long, device=dev)
            lse[lo:hi], argmax[lo:hi] = torch.logsumexp(logits, -1), logits.argmax(-1)
            feats = taps[r, :n].half()
            feats[n - 1] = 0                                            # never fed (as capture.generate)
            home = dev if on_device else torch.device("cpu")
            out[i] = dict(ids=torch.as_tensor(np.asarray(ids), dtype=torch.long, device=home), plen=int(plen), greedy=False,
                          feats=feats.to(home), lse=lse.to(home), argmax=argmax.to(home))
    return out
