"""A block drafter: k guesses from ONE draft pass (draft="block").

The feature head (feature_head.py) drafts k tokens in k sequential head steps, each feeding its
own output back. The block head is the same network (fc, one decoder layer, norm, truncated tied
output layer; the same input [f̃_t ; e(x_{t+1})] from the verify pass the decoder runs anyway)
with block_size − 1 learned mask slots. One call runs the new true entries (causal, as the
feature head) and k − 1 mask slots at the next positions; the slots attend to the whole cache and
to each other (bidirectional within the block), never to a drafted token, so one pass fills the
block:

    anchor  [f̃_t ; e(x_{t+1})]  at position t      -> q_1, draws x_{t+2}   (the feature head's step 1)
    slot j  m_j (learned)      at position t + j  -> q_{j+1}, draws x_{t+2+j}

Each slot has its own distribution q_{j+1}, drawn before verification and independent of the
other slots' draws, so the chain rule min(1, p/q) with residual norm(max(0, p − q)) keeps
decoding exact. The target still verifies left to right, so the block is trained with losses
aligned to that (lab/block.py): positional weighting, a first-error focal term, a chain term.
A round costs one draft call whatever k ≤ block_size (`levels`), which is what the shape rule
and costs.run_costs count as c.

    pair = load_pair("smollm2-135m", draft="block")           # the shipped block (data/block)
    pair = load_pair("smollm2-135m", draft="lookup+block")    # with prompt lookup
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..sampling import draw, raw_probs, warp_probs
from .base import Proposal, TokenTree, chain_tree, empty_proposal
from .feature_head import FeatureDrafter, FeatureHead, load_head


class BlockHead(FeatureHead):
    """A FeatureHead with block_size − 1 learned mask-slot inputs (cfg["block_size"])."""

    kind, train_command = "block", "block-train"

    def __init__(self, cfg: dict, vocab_ids: torch.Tensor):
        super().__init__(cfg, vocab_ids)
        self.block_size = int(cfg["block_size"])
        self.slots = nn.Parameter(torch.zeros(self.block_size - 1, cfg["hidden_size"]))   # [K-1, H]


def block_mask(n_cached: int, n_new: int, n_slots: int, device) -> torch.Tensor:
    """[n_new + n_slots, n_cached + n_new + n_slots] bool (True: attend): new true entries are
    causal; every slot sees the cache, the new entries and all slots (bidirectional in the block)."""
    n, total = n_new + n_slots, n_cached + n_new + n_slots
    mask = torch.ones(n, total, dtype=torch.bool, device=device)
    mask[:n_new] = torch.ones(n_new, total, dtype=torch.bool, device=device).tril(n_cached)
    return mask


class BlockDrafter(FeatureDrafter):
    """Drafts a chain of k ≤ block_size tokens in one BlockHead call (needs wants_hidden).

    State as FeatureDrafter's: the head's KV cache holds only entries of TRUE features; the slots'
    entries are cut right after the call, so nothing drafted is ever cached."""

    name = "block-drafter"
    one_pass = True              # one draft call per round, however many tokens it drafted

    def __init__(self, head: BlockHead, vocab_size: int, device="cpu"):
        super().__init__(head, vocab_size, device)
        self.max_k = head.block_size

    def _block_logits(self, committed, k: int):
        """[k, V] draft logits of the anchor and k − 1 slots from ONE head call (None: nothing to
        read yet). The call also reads the true entries since the last round."""
        L = len(committed)
        n_feat = min(len(self.feats), L - 1)
        if n_feat < 1 or k < 1:
            return None
        committed = committed.to(self.device)
        head, m = self.head, k - 1
        # 1. One call: the true entries since the last round (the last of them is the anchor) and
        #    k − 1 mask slots right after the anchor's position. (The cache holds true entries only.)
        new = torch.arange(self.n_true, n_feat, device=self.device)
        if len(new) == 0 and m == 0:      # k = 1 with nothing new to read: the anchor's output is kept
            return self._full(head.logits(self.g_next[0]))
        x = torch.cat([head.layer_in(self.feats[None, new], committed[None, new + 1]), head.slots[None, :m]], 1)
        pos = torch.cat([new, n_feat - 1 + torch.arange(1, m + 1, device=self.device)])
        n_cached = 0 if self.cache is None else self.cache[0].shape[2]
        g, cache = head.attend(x, pos, self.cache, block_mask(n_cached, len(new), m, self.device))
        # 2. Keep only true entries in the cache; the anchor's output drafts token L.
        self.cache = [c[:, :, :n_feat] for c in cache]
        if len(new):
            self.g_next, self.n_true = g[:, len(new) - 1: len(new)], n_feat
        rows = torch.cat([self.g_next, g[:, len(new):]], 1)[0]             # [k, H]
        return self._full(head.logits(rows))

    @torch.inference_mode()
    def propose(self, committed, k, cfg, generator, stop_below=None) -> Proposal:
        logits = self._block_logits(committed, min(k, self.max_k))
        if logits is None:
            return empty_proposal(self.vocab_size, self.device)
        # Every slot's q, and a draw from each (independent of the other slots' draws).
        q_probs, q_raw = warp_probs(logits, cfg), raw_probs(logits)
        ids = draw(q_probs, cfg, generator)
        stop_reason = None
        if stop_below is not None and len(ids) > 1:   # the early stop, read from q before any draw
            unsure = (q_raw[:-1].amax(-1) < stop_below).nonzero()
            if len(unsure):
                k = int(unsure[0]) + 1
                ids, q_probs, q_raw = ids[:k], q_probs[:k], q_raw[:k]
                stop_reason = f"draft top probability < {stop_below:g}"
        return Proposal(ids, q_probs, q_raw, stop_reason)

    @torch.inference_mode()
    def propose_tree(self, committed, depth, width, cfg, generator=None, nodes=None, frontier=1,
                     until=None) -> TokenTree:
        """The block's guesses as a tree from the same one call: each slot's top-1 continues the
        chain, its next width − 1 guesses are leaf siblings (a slot never saw the token before it,
        so only the top-1 line has children). With a budget, the `nodes` guesses of highest path
        probability (at the round's temperature) are kept; a parent always scores at least its
        child. Deterministic guesses: verified with r(x)/Σr. (`until` is not called: every level
        came from the one call already made.)"""
        logits = self._block_logits(committed, min(depth, self.max_k))
        if logits is None:
            return chain_tree(empty_proposal(self.vocab_size, self.device), self.name)
        q_probs, q_raw = warp_probs(logits, cfg), raw_probs(logits)
        score_of = q_raw if cfg.greedy else q_probs        # greedy's one-hot q would rank nothing
        top_p, top_ids = score_of.topk(max(1, width), -1)                 # [k, width]
        top_p, top_ids = top_p.tolist(), top_ids.tolist()
        ids, parents, rows, scores, chain_score, parent = [], [], [], [], 0.0, -1
        for j in range(len(top_ids)):
            level = [(r, chain_score + math.log(p)) for r, p in enumerate(top_p[j]) if p > 0]
            if not level:
                break
            first = len(ids)
            for r, sc in level:
                ids.append(top_ids[j][r]), parents.append(parent), rows.append(j), scores.append(sc)
            parent, chain_score = first, level[0][1]
        keep = sorted(range(len(ids)), key=lambda i: (-scores[i], i))[: nodes] if nodes else range(len(ids))
        keep = sorted(keep)
        index = {old: new for new, old in enumerate(keep)}
        rows_t = torch.tensor([rows[i] for i in keep], dtype=torch.long, device=logits.device)
        return TokenTree(torch.tensor([ids[i] for i in keep], dtype=torch.long, device=logits.device),
                         [index.get(parents[i], -1) for i in keep], q_probs[rows_t], q_raw[rows_t],
                         [self.name] * len(keep), False)


def load_block(target, path=None) -> BlockHead:
    """The block head in `path` (None: the one shipped in data/block) for `target`."""
    return load_head(target, path, make=BlockHead, shipped="block")


def drafter_factory(target, path=None):
    """A ModelPair drafter factory (pair -> BlockDrafter) for the block head in `path`."""
    head = load_block(target, path)
    factory = lambda pair: BlockDrafter(head, pair.vocab_size, pair.input_device)
    factory.name = BlockDrafter.name
    return factory


def new_block(target, head: FeatureHead, block_size: int, slot_init: Optional[torch.Tensor] = None) -> BlockHead:
    """A BlockHead for `target` starting from a feature head's weights (its anchor is that head's
    first step); slot_init [H]: every slot's starting input (e.g. the mean layer input), plus noise."""
    block = BlockHead({**head.cfg, "block_size": block_size}, head.vocab_ids)
    block.load_state_dict(head.state_dict(), strict=False)
    with torch.no_grad():
        base = slot_init if slot_init is not None else torch.zeros(block.slots.shape[1])
        block.slots.copy_(base[None] + 0.02 * torch.randn_like(block.slots))
    return block.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight)
