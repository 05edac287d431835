"""The target's passes for one decode: prefill, verify a token tree, keep the accepted path.

Two implementations behind one small interface, chosen per pair (`ModelPair.passes`, chosen by models/passes.py):
- `DynamicPasses`: transformers' DynamicCache, grown by each pass and cropped after it; any model
  (decoding/tree.py's verify_tree and keep_path).
- `StaticPasses` (decoding/static.py): a preallocated cache, passes padded to a few fixed token
  counts, the mask and positions built on the device; on CUDA each count is a captured graph.

    passes = open_passes(pair, max_len)
    hidden = passes.prefill(prompt[:-1], layers)                      # [T-1, L·H] or None
    logits, hidden = passes.verify(committed[-1:], tree, layers)      # [n+1, V'], [n+1, L·H]
    passes.keep(past_len, path)
"""
from __future__ import annotations

from typing import Optional

import torch
from transformers import DynamicCache

from ..drafters.base import TokenTree, tapped
from .tree import keep_path, verify_tree

class DynamicPasses:
    """The target's passes over a DynamicCache (grown and cropped): any causal LM."""
    name = "dynamic"

    def __init__(self, target):
        self.target = target
        self.cache = DynamicCache(config=target.config)

    def prefill(self, ids: torch.Tensor, layers: Optional[tuple]) -> Optional[torch.Tensor]:
        """ids [T] into the cache; the tapped hidden states [T, L·H] when layers are asked for."""
        out = self.target(ids[None], past_key_values=self.cache, use_cache=True, logits_to_keep=1,
                          output_hidden_states=layers is not None)
        return tapped(out.hidden_states, layers)[0] if layers is not None else None

    def verify(self, root_id: torch.Tensor, tree: TokenTree, layers: Optional[tuple]) -> tuple:
        """One pass over [root, nodes]: (logits [n+1, V'], hidden [n+1, L·H] or None)."""
        return verify_tree(self.target, self.cache, root_id, tree, layers)

    def keep(self, past_len: int, path: list) -> None:
        """Keep past + root + the accepted path (moved down), drop the rest."""
        keep_path(self.cache, past_len, path)

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def close(self) -> None:
        """Nothing to hand back: the cache dies with the decode."""


def open_passes(pair, max_len: int, layers: Optional[tuple] = None):
    """The target passes one decode runs on (`pair.passes`), with room for max_len positions;
    layers: the taps its verify passes return (captured passes are captured with them up front)."""
    if pair.passes == "dynamic":
        return DynamicPasses(pair.target)
    from . import static
    passes = static.open_static(pair.target, max_len, graphs=pair.passes == "graphs")
    passes.capture_all(layers)
    return passes
