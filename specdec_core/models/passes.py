"""Which passes a pair's target runs (the choice; decoding/passes.py and decoding/static.py run them).

- dynamic: transformers' DynamicCache, grown by every pass and cropped after it; any causal LM.
- static: a preallocated cache, the mask and positions built on the device, passes run eagerly.
- graphs: the static path with each pass size captured once as a CUDA graph (CUDA only).
- auto: graphs on CUDA where the static path supports the model, else dynamic.
"""
from __future__ import annotations

from typing import Optional

PATHS = ("auto", "dynamic", "static", "graphs")
LABEL = {"dynamic": "dynamic cache (grown and cropped each pass)",
         "static": "static cache, eager passes",
         "graphs": "static cache, captured CUDA graphs per pass size"}
MODEL_TYPES = ("llama", "qwen2", "mistral")   # attention that calls update(k, v, layer) and adds a 4D mask


def unsupported(target) -> Optional[str]:
    """Why the static path cannot run `target` (None: it can)."""
    cfg = getattr(target, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in MODEL_TYPES:
        return f"model type {kind!r} is not one of {', '.join(MODEL_TYPES)}"
    if getattr(cfg, "_attn_implementation", None) not in ("sdpa", "eager"):
        return f"attention {getattr(cfg, '_attn_implementation', None)!r} takes no 4D mask"
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or ()) or getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention"
    return None


def resolve_path(path: str, target) -> str:
    """The passes a pair runs; 'static' and 'graphs' are refused (ValueError) where they cannot run."""
    if path not in PATHS:
        raise ValueError(f"passes must be one of {', '.join(PATHS)}, not {path!r}")
    device = target.get_input_embeddings().weight.device
    why = unsupported(target)
    if path == "auto":
        return "graphs" if device.type == "cuda" and why is None else "dynamic"
    if path in ("static", "graphs") and why is not None:
        raise ValueError(f"the static path cannot run this model: {why}")
    if path == "graphs" and device.type != "cuda":
        raise ValueError("captured passes (graphs) need a CUDA device; 'static' runs the static path eagerly")
    return path
