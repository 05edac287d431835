"""CPU fast path: weight matrices prepacked once for oneDNN, so a pass streams them at memory speed.

Why: on CPU, `F.linear` with a handful of input rows re-packs its weight matrix into oneDNN's
blocked layout on every call. A decoding step then streams weights at a fraction of memory speed,
and a verify pass over k + 1 tokens costs 1.3–2.0 single-token steps instead of ~1: the very
effect speculative decoding relies on disappears. Packing each matrix once at load time
(`torch.ops.mkldnn._reorder_linear_weight`, the layout PyTorch's inductor uses when it freezes
weights on CPU) and calling `torch.ops.mkldnn._linear_pointwise` streams them at close to memory
speed, almost flat in the number of rows.

`apply(model)` swaps every `nn.Linear` of a model for a `PackedLinear` in place, once; the stock
weight matrices are dropped (the packed copy replaces them), except a matrix that another module
still reads, like the input embedding tied to the output layer (its packed copy is the only extra
memory: `extra_bytes`). Anything unusual — another device, dtype or torch build without the ops —
leaves the model stock and says why in `Kernels.note`, never an error.

    kernels = fastpath.apply(model)           # Kernels(name="onednn-prepacked", ...)
    fastpath.kernels_of(model).label()        # what the trace config and the UI show
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from . import fused_llama

ENV = "SPECDEC_FAST_PATH"          # "0" turns the fast path off wherever it is not asked for
FAST, STOCK = "onednn-prepacked", "stock"
_ATTR = "_specdec_kernels"         # where apply() records what it did, on the model itself


@dataclass(frozen=True)
class Kernels:
    """Which matrix kernels a model runs, and what the fast path cost in memory."""
    name: str                      # FAST or STOCK
    note: Optional[str] = None     # why stock, when the fast path was asked for but not applied
    n_packed: int = 0              # matrix calls per pass running on prepacked weights
    extra_bytes: int = 0           # memory beyond the stock model (packed copies of tied matrices)
    fused: bool = False            # Llama-family layers fused (fused_llama.py)

    def label(self) -> str:
        """One line for the trace config, the CLI and the UI."""
        if self.note is not None:
            return f"{self.name} ({self.note})"
        return f"{self.name}, fused qkv and gate/up" if self.fused else self.name


def enabled_by_default() -> bool:
    """The fast path is on unless SPECDEC_FAST_PATH=0."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def resolve(fast_path: Optional[bool]) -> bool:
    """An explicit True/False wins; None means the environment's default."""
    return enabled_by_default() if fast_path is None else bool(fast_path)


@functools.lru_cache(maxsize=None)
def unavailable_reason() -> Optional[str]:
    """None when the prepacked oneDNN ops exist and compute a linear correctly on this machine,
    else a short reason (another build, ARM without oneDNN, an old CPU). Probed once per process."""
    try:
        if not torch.backends.mkldnn.is_available():
            return "oneDNN is not available in this torch build"
        w, x = torch.randn(24, 16), torch.randn(3, 16)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 8)
        y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        if not torch.allclose(y, x @ w.T, atol=1e-4, rtol=1e-4):
            return "oneDNN prepacked linear gave wrong results on this CPU"
    except (AttributeError, RuntimeError, NotImplementedError) as e:
        return f"prepacked oneDNN ops missing ({type(e).__name__})"
    return None


class PackedLinear(nn.Module):
    """y = x Wᵀ + b with W prepacked once in oneDNN's blocked layout. x [..., in] -> [..., out].

    `weight` is the dense matrix only when another module shares it (a tied embedding); otherwise
    the stock copy is gone and `weight` rebuilds it on access (slow; for rare readers such as
    weight inspection, never on the decoding path)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor], keep_dense: bool):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        # Batch-size hint 8: measured best for the 1–9 rows a decoding or verify pass feeds.
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 8)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)
        self._dense = weight if keep_dense else None

    @property
    def weight(self) -> torch.Tensor:
        return self._dense if self._dense is not None else self.packed.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def kernels_of(model: nn.Module) -> Kernels:
    """What apply() did to this model (stock when it never ran)."""
    return getattr(model, _ATTR, None) or Kernels(STOCK)


def inherit(model: nn.Module, source: nn.Module) -> Kernels:
    """Record on `model` the kernels of `source` whose layers it shares (a target-layers draft)."""
    return _set(model, kernels_of(source))


def _set(model: nn.Module, kernels: Kernels) -> Kernels:
    object.__setattr__(model, _ATTR, kernels)   # a plain attribute, not a submodule or buffer
    return kernels


def stock_reason(model: nn.Module) -> Optional[str]:
    """Why the fast path cannot run on this model here (None: it can)."""
    params = list(model.parameters())
    if not params:
        return "no parameters"
    if params[0].device.type != "cpu":
        return f"on {params[0].device.type}: the fast path is for CPU"
    if any(p.dtype != torch.float32 for p in params):
        return f"{params[0].dtype} weights: the fast path is for float32"
    if any(p.requires_grad for p in params) and model.training:
        return "in training mode"
    return unavailable_reason()


@torch.no_grad()
def apply(model: nn.Module, enable: bool = True) -> Kernels:
    """Swap every nn.Linear of `model` for a PackedLinear, in place and once. Returns (and
    records on the model) the Kernels it runs; stock with a note when it cannot apply."""
    done = getattr(model, _ATTR, None)
    if done is not None and (done.name == FAST or not enable):
        return done
    if not enable:
        return _set(model, Kernels(STOCK, "fast path turned off"))
    reason = stock_reason(model)
    if reason is not None:
        return _set(model, Kernels(STOCK, reason))
    # Matrices some other module reads as well (a tied embedding / lm_head) keep their dense copy.
    owners: dict = {}
    for mod in model.modules():
        for p in mod.parameters(recurse=False):
            owners.setdefault(id(p), set()).add(id(mod))
    n_packed, extra, fused = 0, 0, False
    if fused_llama.supports(model):
        n_packed += fused_llama.fuse(model, lambda w, b: PackedLinear(w, b, keep_dense=False))
        fused = True
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            shared = len(owners.get(id(child.weight), ())) > 1
            setattr(parent, name, PackedLinear(child.weight, child.bias, keep_dense=shared))
            n_packed += 1
            extra += child.weight.numel() * child.weight.element_size() if shared else 0
    # Weights loaded from safetensors are views of a memory-mapped file: while one tensor of the
    # file lives (the embedding, the norms), every dropped matrix stays resident as page cache.
    # Own copies of what is left let the mapping go, so the packed copies replace, not add.
    for p in list(model.parameters()) + list(model.buffers()):
        p.data = p.data.clone()
    return _set(model, Kernels(FAST, None, n_packed, extra, fused))
