"""The feature head's parts (feature_head.py): RMSNorm, rotary embedding, and `Block`, a decoder
layer after the head's first (cfg "depth" > 1) with the same parts under the same names."""
from __future__ import annotations

import functools
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels import fastpath


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        # weight · x / sqrt(mean(x²) + eps), in one op (a draft call runs three of them)
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


@functools.lru_cache(maxsize=None)
def _inv_freq(d: int, theta: float, device: str) -> torch.Tensor:
    """[d/2] RoPE's frequencies, made once per (head dim, base, device): not at every draft call."""
    with torch.inference_mode(False):    # a plain tensor, usable in training too
        return 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)


def rope_angles(pos: torch.Tensor, d: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [T, d] of rotary embedding at positions pos [T]: made once per call, shared by q and k."""
    ang = pos.float()[:, None] * _inv_freq(d, float(theta), str(pos.device))[None]   # [T, d/2]
    ang = torch.cat([ang, ang], -1)
    return ang.cos(), ang.sin()


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (HF Llama 'rotate_half' layout): x [B, h, T, d], cos/sin [T, d] -> same shape."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Block(nn.Module):
    """A decoder layer after the head's first (cfg "depth" > 1): the same parts under the same names
    as the head's own first layer (FeatureHead.qkv / finish run either)."""

    def __init__(self, H: int, I: int, nh: int, nkv: int, hd: int, eps: float):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(H, eps), RMSNorm(H, eps)
        self.q, self.k, self.v = nn.Linear(H, nh * hd, bias=False), nn.Linear(H, nkv * hd, bias=False), nn.Linear(H, nkv * hd, bias=False)
        self.o = nn.Linear(nh * hd, H, bias=False)
        self.gate, self.up, self.down = nn.Linear(H, I, bias=False), nn.Linear(H, I, bias=False), nn.Linear(I, H, bias=False)
        self.packed_qkv: Optional[fastpath.Pack] = None
        self.packed_gate_up: Optional[fastpath.Pack] = None
