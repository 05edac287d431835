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

    tree = drafter.propose_tree(committed, depth, width, cfg, generator, nodes=12, frontier=4)
    logits, hidden = verify_tree(target, cache, committed[-1:], tree, drafter.feature_layers)
    decision = accept_tree(tree.parents, tree.ids, warp_probs(logits, cfg), cfg.greedy, generator)
    keep_path(cache, past_len, decision.path)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from transformers import DynamicCache

from ..drafters.base import TokenTree, chain_tree, crop_cache, empty_proposal, fit_vocab, tapped
from ..registry import REGISTRY
from ..sampling import warp_probs
from .rule import accept_tree
from .speculative import start_decode

__all__ = ["TokenTree", "tree_mask", "tree_positions", "verify_tree", "keep_path", "tree_generate_ids", "TreeRun"]

MASKABLE = ("sdpa", "eager")   # attention implementations that add a 4D mask to their scores


def tree_mask(parents: list, past_len: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive attention mask [1, 1, n+1, past_len+n+1] for [root, node_1..node_n] on a cache of
    past_len positions: row i attends to the past, the root, node i's ancestors and node i."""
    n = len(parents)
    # Ancestor-or-self rows, built on the host (a node's row is its parent's row plus itself).
    sees = [[True] + [False] * n]
    for i, parent in enumerate(parents):
        row = list(sees[parent + 1])
        row[i + 1] = True
        sees.append(row)
    allowed = torch.cat([torch.ones(n + 1, past_len, dtype=torch.bool, device=device),
                         torch.tensor(sees, dtype=torch.bool, device=device)], -1)
    blocked = torch.full((n + 1, past_len + n + 1), torch.finfo(dtype).min, dtype=dtype, device=device)
    return torch.where(allowed, torch.zeros((), dtype=dtype, device=device), blocked)[None, None]


def tree_positions(parents: list, past_len: int, device) -> torch.Tensor:
    """Position ids [1, n+1]: the root at past_len, a node at past_len + its depth."""
    depths = [0]
    for parent in parents:
        depths.append(depths[parent + 1] + 1)
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
    _check_cache(target, cache)
    past_len = cache.get_seq_length()
    device = root_id.device
    ids = torch.cat([root_id.reshape(1), tree.ids.to(device)])[None]
    dtype = target.get_input_embeddings().weight.dtype
    out = target(ids, attention_mask=tree_mask(tree.parents, past_len, dtype, device),
                 position_ids=tree_positions(tree.parents, past_len, device), past_key_values=cache,
                 use_cache=True, output_hidden_states=feature_layers is not None)
    hidden = tapped(out.hidden_states, feature_layers)[0] if feature_layers is not None else None
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


@dataclass
class TreeRun:
    """What tree_generate_ids did: the output and, per round, how many nodes it verified and
    how many of them it kept (the round adds n_accepted + 1 tokens for one target pass)."""
    ids: list
    nodes: list = field(default_factory=list)
    n_accepted: list = field(default_factory=list)

    @property
    def tokens_per_pass(self) -> float:
        return len(self.ids) / max(len(self.nodes), 1)


@torch.inference_mode()
def tree_generate_ids(pair, prompt_ids, depth: int, width: int, *, nodes=None, frontier=1, temperature=0.0,
                      top_k=0, top_p=1.0, max_new_tokens=64, seed=0, drafter=None) -> TreeRun:
    """Decode with a token tree per round (drafter.propose_tree(depth, width, nodes=, frontier=)),
    no Trace: the internal loop that exercises tree.py and rule.accept_tree end to end. Output ids
    follow the target's distribution exactly (greedy: equal plain greedy decoding)."""
    with REGISTRY.holding(pair.target, pair.draft_model):
        st = start_decode(pair, prompt_ids, depth, temperature=temperature, top_k=top_k, top_p=top_p,
                          max_new_tokens=max_new_tokens, seed=seed, drafter=drafter)
        run, V, cfg, drafter = TreeRun([]), pair.vocab_size, st.cfg, st.drafter
        layers = drafter.feature_layers if drafter.wants_hidden else None
        shape = dict(nodes=nodes, frontier=frontier)    # the tree's node budget and expansions per level
        while not st.done:
            n_before = len(st.committed)
            # 1. Draft: a tree no deeper than the tokens left (the last token is always drawn).
            d = min(depth, st.max_new_tokens - st.n_new - 1)
            tree = (drafter.propose_tree(st.committed, d, width, cfg, st.generator, **shape) if d > 0
                    else chain_tree(empty_proposal(V, st.committed.device), "none"))
            # 2. Verify: one target pass over the root and every node.
            logits, hidden = verify_tree(pair.target, st.cache, st.committed[-1:], tree, layers)
            p_target = warp_probs(fit_vocab(logits, V), cfg)
            # 3. Accept a path, draw the round's last token.
            decision = accept_tree(tree.parents, tree.ids, p_target, cfg.greedy, st.generator)
            new_ids = (decision.path_ids + [decision.correction_id])[: st.max_new_tokens - st.n_new]
            for i, t in enumerate(new_ids):
                if t in pair.eos_ids:
                    new_ids = new_ids[: i + 1]
                    break
            # 4. Caches keep past + root + path; the drafter sees the path's hidden states.
            keep_path(st.cache, n_before - 1, decision.path)
            drafter.rollback(n_before + len(decision.path))
            if layers is not None:
                rows = torch.tensor([0] + [i + 1 for i in decision.path], dtype=torch.long, device=hidden.device)
                drafter.observe(hidden.index_select(0, rows))
            st.committed = torch.cat([st.committed, torch.tensor(new_ids, dtype=torch.long, device=st.committed.device)])
            st.n_new += len(new_ids)
            st.done = st.n_new >= st.max_new_tokens or new_ids[-1] in pair.eos_ids
            run.nodes.append(len(tree))
            run.n_accepted.append(len(decision.path))
        run.ids = st.committed[len(prompt_ids):].tolist()
        return run

