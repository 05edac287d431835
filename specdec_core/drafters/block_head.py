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
A round costs one draft call whatever k ≤ block_size (`slots`: one call fills every level), which
is what the shape rule and costs.run_costs count as c.

    pair = load_pair("smollm2-135m", draft="block")           # the shipped block (data/block)
    pair = load_pair("smollm2-135m", draft="lookup+block")    # with prompt lookup
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..sampling import draw, raw_probs, warp_probs
from .base import Level, empty_level
from .feature_drafter import FeatureDrafter
from .feature_head import FeatureHead, load_head


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
    entries are cut right after the call, so nothing drafted is ever cached. A round's `block`
    (the call's logits, q, and the draws or guesses of each slot) serves its levels; `at` the
    level served last."""

    name = "block-drafter"

    def __init__(self, head: BlockHead, vocab_size: int, device="cpu"):
        super().__init__(head, vocab_size, device)
        self.slots = head.block_size
        self.block, self.at = None, 0

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
    def draft(self, committed, expand, width, depth, cfg, generator=None) -> Level:
        """The round's levels from its one call (made at the root): level j is slot j. width 1: each
        slot's token drawn from its q (all drawn in the call, independent of each other); else its
        top-`width` guesses, children of the first node expanded (the best of the level before:
        the top-1 line; a slot never saw the token before it, so only that line has children)."""
        if expand is None:
            logits = self._block_logits(committed, min(depth, self.slots))
            if logits is None:
                return empty_level(self.vocab_size, self.device)
            q_probs = warp_probs(logits, cfg)
            if width == 1:
                pick = draw(q_probs, cfg, generator)[:, None]                       # [k, 1]
                score = torch.log_softmax(logits.float(), -1).gather(-1, pick)
            else:   # ranked at the round's temperature (greedy: raw q; its one-hot q would rank nothing)
                score, pick = (raw_probs(logits) if cfg.greedy else q_probs).topk(max(1, width), -1)
                score = score.double().log()                                       # p = 0: -inf, dropped
            self.block, self.at = (logits, q_probs, pick, score), 0
        else:
            self.at += 1
        logits, q_probs, pick, score = self.block
        j = self.at
        if j >= len(logits):
            return empty_level(self.vocab_size, self.device)
        zero = torch.zeros(pick.shape[1], dtype=torch.long, device=self.device)
        return Level(pick[j], zero, score[j], logits[j:j + 1], q_probs[j:j + 1], sampled=width == 1)


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
