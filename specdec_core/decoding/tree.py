"""Token trees (issue 28): many guesses verified in ONE target pass, then the cache compacted.

A round's guesses form a tree rooted at the last committed token (drafters.base.TokenTree). The
target reads [root, node_1..node_n] on top of its KV cache of `past_len` positions with a tree
attention mask: each node sees the whole past, the root, its ancestors and itself, at position
past_len + depth, so its logits are those of a plain forward over its own root-to-node path.
rule.accept_tree keeps one path; `keep_path` then gathers the cache down to past + root + that
path along the sequence axis (compaction, not recomputation).

The mask is a 4D additive float tensor [1, 1, n+1, past_len+n+1] (0: attend, dtype min: not):
transformers 5 passes a 4D mask through unchanged (masking_utils: "already prepared") to every
layer, and SDPA, eager attention and the fast path's fused layers (kernels/fused_llama.py) all add
it to the scores. Explicit position_ids set the rotary positions. Not for sliding-window or
flash-attention layers (refused).

    tree, _, _ = draft_round(drafter, committed, Shape(12, 5, 4, 4), 5, cfg, generator)   # grow.py
    logits, hidden = verify_tree(target, cache, committed[-1:], tree, drafter.feature_layers)
    decision = accept_tree(tree.parents, tree.ids, warp_probs(logits, cfg), cfg.greedy, generator)
    keep_path(cache, past_len, decision.path)

A chain (width 1) takes the same path: its pass needs no mask beyond the causal one, so it is
called without one (the stock and fused kernels then run their plain causal attention), and its
accepted path is a prefix, so keep_path only crops.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from transformers import DynamicCache

from ..drafters.base import TokenTree, crop_cache, node_depths, tapped

__all__ = ["TokenTree", "Shape", "fanout", "tree_sees", "tree_mask", "tree_positions", "verify_tree", "keep_path"]

MASKABLE = ("sdpa", "eager")   # attention implementations that add a 4D mask to their scores


@dataclass(frozen=True)
class Shape:
    """A round's drafting budget: at most `nodes` draft tokens (the root not counted) in at most
    `depth` levels; each expanded node offers `width` children, `frontier` nodes are expanded per
    level (width 1 and frontier 1: a chain of draws; None nodes: no budget)."""
    nodes: Optional[int]
    depth: int
    width: int = 1
    frontier: int = 1


def fanout(nodes: int, depth: int) -> Shape:
    """The Shape of a fixed budget tree=(nodes, depth): width = frontier = 4 up to 8 nodes, 8 above
    (docs/bench/smollm2-135m-head-trees: more children than that hold few accepted tokens); the
    drafter keeps the `nodes` likeliest guesses within `depth` levels. One node is a chain of one;
    one level is `nodes` guesses for the next token."""
    if nodes == 1:
        return Shape(1, depth)
    if depth == 1:
        return Shape(nodes, 1, nodes, 1)
    w = 4 if nodes <= 8 else 8
    return Shape(nodes, depth, w, w)


def tree_sees(parents: list, rows: int) -> list:
    """[rows][rows] ancestor-or-self relation of [root, node_1..node_n], built on the host (a node's
    row is its parent's row plus itself); rows > n + 1 pads it (a padded row sees only itself, for
    a pass padded to a fixed size: decoding/static.py). Row i may attend to column j."""
    sees = [[False] * rows for _ in range(rows)]
    sees[0][0] = True
    for i, parent in enumerate(parents):
        sees[i + 1] = list(sees[parent + 1])
        sees[i + 1][i + 1] = True
    for i in range(len(parents) + 1, rows):
        sees[i][i] = True
    return sees


def tree_mask(parents: list, past_len: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive attention mask [1, 1, n+1, past_len+n+1] for [root, node_1..node_n] on a cache of
    past_len positions: row i attends to the past, the root, node i's ancestors and node i."""
    n = len(parents)
    allowed = torch.cat([torch.ones(n + 1, past_len, dtype=torch.bool, device=device),
                         torch.tensor(tree_sees(parents, n + 1), dtype=torch.bool, device=device)], -1)
    blocked = torch.full((n + 1, past_len + n + 1), torch.finfo(dtype).min, dtype=dtype, device=device)
    return torch.where(allowed, torch.zeros((), dtype=dtype, device=device), blocked)[None, None]


def tree_positions(parents: list, past_len: int, device) -> torch.Tensor:
    """Position ids [1, n+1]: the root at past_len, a node at past_len + its depth."""
    depths = [0] + node_depths(parents)
    return torch.tensor([[past_len + d for d in depths]], dtype=torch.long, device=device)


def _check_cache(target, cache: DynamicCache) -> None:
    attn = getattr(target.config, "_attn_implementation", None)
    if attn not in MASKABLE:
        raise ValueError(f"token trees need a 4D attention mask: attention {attn!r} is not one of {MASKABLE}")
    if any(getattr(layer, "is_sliding", False) for layer in cache.layers):
        raise ValueError("token trees do not support sliding-window cache layers")


def verify_tree(target, cache: DynamicCache, root_id: torch.Tensor, tree: TokenTree,
                feature_layers: Optional[tuple] = None) -> tuple:
    """One target pass over [root, node_1..node_n] on top of `cache` (grown by n+1 positions).

    root_id: [1] (or 0-d) the last committed token. Returns (logits [n+1, V'], hidden
    [n+1, len(feature_layers)·H] or None): row 0 scores the root's next token, row i node i-1's."""
    device = root_id.device
    ids = torch.cat([root_id.reshape(1), tree.ids.to(device)])[None]
    want_hidden = feature_layers is not None
    if tree.is_chain:   # the causal mask is the tree mask of a chain
        out = target(ids, past_key_values=cache, use_cache=True, output_hidden_states=want_hidden)
    else:
        _check_cache(target, cache)
        past_len = cache.get_seq_length()
        dtype = target.get_input_embeddings().weight.dtype
        out = target(ids, attention_mask=tree_mask(tree.parents, past_len, dtype, device),
                     position_ids=tree_positions(tree.parents, past_len, device), past_key_values=cache,
                     use_cache=True, output_hidden_states=want_hidden)
    hidden = tapped(out.hidden_states, feature_layers)[0] if want_hidden else None
    return out.logits[0], hidden


def keep_path(cache: DynamicCache, past_len: int, path: list) -> None:
    """After verify_tree: keep past + root + the accepted path's nodes (in path order), drop the
    rest. The path's entries are gathered down to the slots after the root in every layer, then
    the cache is cropped: only len(path) entries move, the past is never copied."""
    keep = past_len + 1 + len(path)
    if path != list(range(len(path))):       # a prefix of the node order is in place already
        src = torch.tensor([past_len + 1 + i for i in path], dtype=torch.long, device=cache.layers[0].keys.device)
        for layer in cache.layers:
            # Gather first (source slots lie at or after their targets: topological order), then write.
            layer.keys[..., past_len + 1:keep, :] = layer.keys.index_select(-2, src)
            layer.values[..., past_len + 1:keep, :] = layer.values.index_select(-2, src)
    crop_cache(cache, keep)


