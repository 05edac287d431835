"""CPU fast path: weight matrices prepacked once for oneDNN, so a pass streams them at memory speed.

Why: on CPU, `F.linear` with a handful of input rows re-packs its weight matrix into oneDNN's
blocked layout on every call. A decoding step then streams weights at a fraction of memory speed,
and a verify pass over k + 1 tokens costs 1.3–2.0 single-token steps instead of ~1: the very
effect speculative decoding relies on disappears. Packing each matrix once at load time
(`torch.ops.mkldnn._reorder_linear_weight`, the layout PyTorch's inductor uses when it freezes
weights on CPU) and calling `torch.ops.mkldnn._linear_pointwise` streams them at close to memory
speed, almost flat in the number of rows.

The model stays a Hugging Face model: every module, parameter name and value is the stock one
(`state_dict`, `save_pretrained`, `parameters()`, `load_state_dict`, `.to`, `deepcopy` behave as on
a stock model). The packed copies ride along outside the module tree (`Pack`), and a forward uses
one only while the weights it was packed from are unchanged, fp32, on the CPU; otherwise the stock
code runs — the fast path steps aside, and `kernels_of` says so. Memory: where a safetensors file
backs a matrix with the same values, the stock matrix becomes a lazy memory map of that file
(`map_from_files`): it costs no RAM until something reads it, so the packed copy replaces it rather
than doubling it. Matrices with no such file stay in RAM beside their packed copy (`extra_bytes`).
Anything unusual — another device, dtype or torch build without the ops — leaves the model stock
and says why in `Kernels.note`, never an error.

    kernels = fastpath.apply(model, weights_from=folder)   # Kernels(name="onednn-prepacked", ...)
    fastpath.kernels_of(model).label()                     # what the trace config and the UI show
"""
from __future__ import annotations

import copy
import functools
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from . import fused_llama, rows, stock, switches
from .packed import PAD_TO, Pack   # noqa: F401  (re-exported: the head packs its output rows)

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
    matrices: str = "fp32"         # the packed copies' dtype: "bf16" for a draft where the CPU has bf16 math
    padded_rows: tuple = ()        # row counts some products run on PAD_TO rows (rows.py: measured faster)
    stock_shapes: tuple = ()       # matrix shapes run on stock F.linear: measured faster here (stock.py)

    def label(self) -> str:
        """One line for the trace config, the CLI and the UI."""
        if self.note is not None:
            return f"{self.name} ({self.note})"
        label = f"{self.name}, fused qkv and gate/up" if self.fused else self.name
        label = label if self.matrices == "fp32" else f"{label}, {self.matrices} matrices"
        if self.padded_rows:
            label += f", {'/'.join(map(str, self.padded_rows))}-row products padded to {PAD_TO} where faster"
        if self.stock_shapes:
            label += f", stock kernels for {', '.join(self.stock_shapes)} (faster on this CPU)"
        return label


def enabled_by_default() -> bool:
    """The fast path is on unless SPECDEC_FAST_PATH=0."""
    return switches.on(ENV)


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


# A draft's matrices may be packed in bfloat16: half the bytes per call, and the head then fits
# the L3 cache between its calls. Measured on a 2-core AMD EPYC with avx512_bf16
# (docs/bench/draft-call): a draft call's matrix products 1.56 -> ~0.5 ms. Only where the CPU does
# bf16 math in hardware (elsewhere oneDNN emulates it, slower than fp32), and only for drafts: the
# target's numbers are the output's, a draft's only decide which guesses are tried (the rule keeps
# the output exact whatever q is). SPECDEC_DRAFT_BF16=0 keeps drafts in fp32.
DRAFT_BF16_ENV = "SPECDEC_DRAFT_BF16"


@functools.lru_cache(maxsize=None)
def draft_matrix_dtype() -> torch.dtype:
    """bfloat16 for a draft's packed matrices where the CPU has bf16 instructions (avx512_bf16 or
    AMX) and oneDNN computes a bf16 linear correctly; float32 elsewhere or when turned off."""
    if not switches.on(DRAFT_BF16_ENV):
        return torch.float32
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return torch.float32
    if unavailable_reason() is not None or not any(f in flags.split() for f in ("avx512_bf16", "amx_bf16")):
        return torch.float32
    try:
        w, x = torch.randn(24, 16), torch.randn(3, 16)
        y = Pack([w], dtype=torch.bfloat16).linear(x, None)
        if not torch.allclose(y, x @ w.T, atol=0.1, rtol=0.05):
            return torch.float32
    except (AttributeError, RuntimeError, NotImplementedError):
        return torch.float32
    return torch.bfloat16


class PackedLinear(nn.Linear):
    """An nn.Linear (same `weight`/`bias` parameters, same keys) whose forward reads a prepacked
    copy of `weight` while that copy is current; the stock F.linear otherwise."""

    @classmethod
    def wrap(cls, linear: nn.Linear, dtype: torch.dtype = torch.float32) -> "PackedLinear":
        mod = cls.__new__(cls)
        nn.Module.__init__(mod)
        mod.in_features, mod.out_features = linear.in_features, linear.out_features
        mod.weight, mod.bias = linear.weight, linear.bias      # the same Parameter objects (ties kept)
        object.__setattr__(mod, "pack", Pack([linear.weight], dtype=dtype))   # forward passes self.bias itself
        return mod

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.pack.stock and self.pack.usable_for([self.weight]) and (self.bias is None or self.bias.dtype == torch.float32):
            return self.pack.linear(x, self.bias)
        return super().forward(x)


STEPPED_ASIDE = "stepped aside: the weights changed after packing (.to, load_state_dict, a copy or an edit)"


def packs_of(model: nn.Module) -> list:
    """(Pack, source weights) of every packed matrix in the model (fused ones included)."""
    out = []
    for mod in model.modules():
        if isinstance(mod, PackedLinear):
            out.append((mod.pack, [mod.weight]))
        out += [(pk, [getattr(mod, n).weight for n in names]) for pk, names in fused_llama.packs(mod).values()]
    return out


def kernels_of(model: nn.Module) -> Kernels:
    """What this model runs now: what apply() did, stock when it never ran, and stock with a note
    when the packed copies no longer match the weights (the model was converted, loaded into,
    copied or edited after packing)."""
    done = getattr(model, _ATTR, None) or Kernels(STOCK)
    if done.name == FAST and not all(pk.valid_for(srcs) for pk, srcs in packs_of(model)):
        return Kernels(STOCK, STEPPED_ASIDE)
    return done


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
def apply(model: nn.Module, enable: bool = True, weights_from=None, dtype: torch.dtype = torch.float32) -> Kernels:
    """Prepack every nn.Linear of `model` in place and once (fused Llama layers where supported).
    weights_from: a folder (or file) of safetensors weights the model was loaded from; matrices it
    holds with the same values become lazy memory maps of it. dtype: the packed copies' (bfloat16
    for a draft head: draft_matrix_dtype()). Returns (and records on the model) the Kernels it
    runs; stock with a note when it cannot apply."""
    done = getattr(model, _ATTR, None)
    if done is not None and (done.name == FAST or not enable):
        return done
    if not enable:
        return _set(model, Kernels(STOCK, "fast path turned off"))
    reason = stock_reason(model)
    if reason is not None:
        return _set(model, Kernels(STOCK, reason))
    n_packed, fused = 0, False
    if fused_llama.supports(model):
        n_packed += fused_llama.fuse(model, functools.partial(Pack, dtype=dtype))
        fused = True
    for parent in list(model.modules()):
        fused_parts = {n for _, names in fused_llama.packs(parent).values() for n in names}
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and name not in fused_parts:
                setattr(parent, name, PackedLinear.wrap(child, dtype))
                n_packed += 1
    mapped = map_from_files(model, weights_from)
    # Weights loaded from safetensors are views of a memory-mapped file: while one tensor of the
    # file lives (the embedding, the norms), every page once read stays resident. Own copies of
    # what is not re-mapped let that mapping go.
    for p in list(model.parameters()) + list(model.buffers()):
        if p.data_ptr() not in mapped:
            p.data = p.data.clone()
    for pk, srcs in packs_of(model):
        pk.rebase(srcs)
    extra = sum(t.numel() * t.element_size() for t in _matrices(model) if t.data_ptr() not in mapped)
    # Few-row products padded where this machine runs them faster so (rows.py), measured once per
    # CPU model and torch version and kept: every load on this machine makes the same choice.
    with_sources = packs_of(model)
    packs = [pk for pk, _ in with_sources]
    padded = rows.set_padding(packs, rows.decided(packs))
    # Then, per shape, packed against stock F.linear (stock.py), decided the same way: where stock
    # is faster on this CPU, that shape's products skip their packs.
    on_stock = stock.set_stock(packs, stock.decided(with_sources))
    return _set(model, Kernels(FAST, None, n_packed, extra, fused, "bf16" if dtype is torch.bfloat16 else "fp32",
                               padded, on_stock))


@torch.inference_mode(False)      # packs stamp their sources' version counters: never inference tensors
@torch.no_grad()
def repacked(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A deep copy of an fp32 CPU model (fast path or stock) with every matrix packed anew in
    `dtype`: bfloat16 for the lab's writer where the CPU has bf16 math (draft_matrix_dtype) — the
    products read bf16 and sum in fp32; norms, attention and the residual stream stay fp32. The
    model itself is untouched. Stock with a note (kernels_of) where the fast path cannot run."""
    twin = copy.deepcopy(model)           # its packs copy empty: packed anew below
    _set(twin, None)
    for parent in list(twin.modules()):   # back to plain linears (the same parameters) before packing
        for name, child in list(parent.named_children()):
            if isinstance(child, PackedLinear):
                plain = nn.Linear.__new__(nn.Linear)
                nn.Module.__init__(plain)
                plain.in_features, plain.out_features = child.in_features, child.out_features
                plain.weight, plain.bias = child.weight, child.bias
                setattr(parent, name, plain)
    apply(twin, dtype=dtype)
    return twin


def _matrices(model: nn.Module) -> list:
    """Each distinct weight matrix some pack was made from (a tied matrix once)."""
    seen, out = set(), []
    for _, srcs in packs_of(model):
        for t in srcs:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                out.append(t)
    return out


_DTYPES = {"F32": torch.float32}


def _safetensors_index(folder) -> dict:
    """{key: (file, byte offset, shape)} of the fp32 tensors in the safetensors file(s) at `folder`."""
    path = Path(folder)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors")) if path.is_dir() else []
    index = {}
    for f in files:
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for key, info in header.items():
            if key != "__metadata__" and info.get("dtype") in _DTYPES:
                index[key] = (f, 8 + n + info["data_offsets"][0], tuple(info["shape"]))
    return index


def map_from_files(model: nn.Module, weights_from) -> set:
    """Point each packed matrix at a lazy, private memory map of the same tensor in the safetensors
    file(s) at `weights_from`, where the file holds exactly its values. Returns the data pointers
    of the mapped tensors. Values are checked through a throwaway mapping, so the pages read for
    the check are not left resident in this process."""
    if weights_from is None:
        return set()
    index = _safetensors_index(weights_from)
    if not index:
        return set()
    params = dict(model.named_parameters())
    names = {p.data_ptr(): n for n, p in params.items()}
    wanted = {}
    for t in _matrices(model):
        key = names.get(t.data_ptr())
        if key in index and index[key][2] == tuple(t.shape) and index[key][1] % t.element_size() == 0:
            wanted[key] = t

    def view(storages, key):
        f, offset, shape = index[key]
        if f not in storages:
            storages[f] = torch.UntypedStorage.from_file(str(f), shared=False, nbytes=os.path.getsize(f))
        return torch.empty(0, dtype=torch.float32).set_(storages[f], offset // 4, shape)
    check = {}
    same = [key for key, t in wanted.items() if torch.equal(view(check, key), t)]
    del check                                  # the checked pages go with this mapping
    lazy, mapped = {}, set()
    for key in same:
        params[key].data = view(lazy, key)
        mapped.add(params[key].data_ptr())
    return mapped
