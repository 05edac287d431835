"""Prepacked matrices for oneDNN: `Pack`, a packed copy (fp32, or bf16 for a draft) that knows which
tensors it was made from (so a forward can tell whether it is still current), multiplied with
`Pack.linear` (the one way in: it handles the copy's dtype, and pads a product of few rows to the
size oneDNN runs fastest where that was measured: rows.py); `pack` and `packed_linear` are its raw
oneDNN steps. Used by the fast path (fastpath.py) and the fused Llama layers (fused_llama.py).
"""
from __future__ import annotations

from typing import Optional

import torch

# Rows a padded product gets (rows.py: oneDNN's few-row kernels stream a matrix slower than its
# 4-row one on the machines measured).
PAD_TO = 4


def pack(weight: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A dense fp32 [out, in] matrix -> its prepacked oneDNN copy (an opaque tensor), stored in
    `dtype` (float32, or bfloat16 for a draft: half the bytes to stream)."""
    # Batch-size hint 8: measured best for the 1–9 rows a decoding or verify pass feeds.
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(dtype).contiguous(), 8)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """y = x Wᵀ + b on a prepacked W: x [..., in] -> [..., out]."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class Pack:
    """A packed copy of one or more matrices concatenated by rows (q|k|v, gate|up) and the bias
    for the concatenation, with the identity of the tensors it was made from. Kept as a plain
    attribute: state_dict, parameters(), `.to` never see it. A deepcopy or pickle of it is empty,
    so a copied model runs the stock code (correct, stock speed)."""

    def __init__(self, sources: list, bias: Optional[torch.Tensor] = None, dtype: torch.dtype = torch.float32):
        self.dtype = dtype
        self.tensor = pack(torch.cat([w.detach() for w in sources]) if len(sources) > 1 else sources[0], dtype)
        self.bias = None if bias is None else bias.detach().clone()
        self.stamp = self._stamp(sources)
        self.in_features, self.out_features = sources[0].shape[1], sum(w.shape[0] for w in sources)
        self.pad_rows = frozenset()     # row counts padded with zero rows to PAD_TO (set by rows.py)
        self.stock = False              # this shape runs faster on stock F.linear here (stock.py): users skip the pack
        # zero_rows[r]: the PAD_TO - r zero rows a product of r rows gets (read only: shared by every caller)
        zeros = torch.zeros(PAD_TO - 1, self.in_features)
        self.zero_rows = (None,) + tuple(zeros[: PAD_TO - r] for r in range(1, PAD_TO))

    def linear(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """y = x Wᵀ + b with this pack's W: x [..., in] fp32 -> [..., out] fp32 (a bfloat16 pack
        reads x in bfloat16, accumulates in fp32 and adds the fp32 bias after). A product of a row
        count in `pad_rows` runs on PAD_TO rows, the real ones first, and returns the real ones."""
        if self.pad_rows and x.numel() // x.shape[-1] in self.pad_rows:
            return self.padded(x, bias)
        return self.plain(x, bias)

    def padded(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """linear() on x's rows padded with zero rows to PAD_TO (each output row reads only its own
        input row, so the real rows' outputs are theirs)."""
        rows2d = x.reshape(-1, x.shape[-1])
        rows = rows2d.shape[0]
        y = self.plain(torch.cat((rows2d, self.zero_rows[rows])), bias)
        return y[:rows].view(*x.shape[:-1], -1)

    def plain(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """linear() on x's rows as they are."""
        if self.dtype is torch.float32:
            return packed_linear(x, self.tensor, bias)
        y = packed_linear(x.to(self.dtype), self.tensor, None).float()
        return y if bias is None else y + bias

    @staticmethod
    def _stamp(tensors) -> list:
        # Same storage (another device or dtype is another storage), no in-place edit since (the
        # version counter), fp32. Checked on every forward: kept to two reads and a compare each.
        return [(t.data_ptr(), t._version, t.dtype is torch.float32) for t in tensors]

    def rebase(self, sources: list) -> None:
        """The sources now live elsewhere with the same values (a memory map): re-stamp them."""
        self.stamp = self._stamp(sources)

    def valid_for(self, sources: list) -> bool:
        """The pack is a copy of `sources` as they are now."""
        return self.tensor is not None and self._stamp(sources) == self.stamp

    def usable_for(self, sources: list) -> bool:
        """A forward may use the pack: it is current, and no gradient is wanted through `sources`
        (the packed kernel has no backward: fine-tuning a fast-path model runs the stock code)."""
        if torch.is_grad_enabled() and any(t.requires_grad for t in sources):
            return False
        return self.valid_for(sources)

    def __deepcopy__(self, memo):
        return _empty_pack()

    def __reduce__(self):
        return (_empty_pack, ())


def _empty_pack() -> Pack:
    p = Pack.__new__(Pack)
    p.tensor, p.bias, p.stamp, p.dtype = None, None, [], torch.float32
    p.in_features, p.out_features, p.pad_rows, p.zero_rows, p.stock = 0, 0, frozenset(), None, False
    return p
