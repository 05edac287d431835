"""Matrix kernels: the CPU fast path (fastpath.py: prepacked oneDNN linears; fused_llama.py:
fused Llama-family layers)."""
from . import fastpath
from .fastpath import FAST, STOCK, Kernels, PackedLinear, apply, kernels_of

__all__ = ["fastpath", "apply", "kernels_of", "Kernels", "PackedLinear", "FAST", "STOCK"]
