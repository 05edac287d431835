"""FeatureDrafter: drafts with a FeatureHead (feature_head.py) from the target's verify-pass features.

A round's first level comes from the head's output for the last true entry (g_next); each later
level from one head call over the frontier's nodes (head_tree.py). q is 0 outside the head's N
tokens (-inf logits there: `_full`), which keeps speculative sampling exact.

    from specdec_core.drafters.feature_drafter import drafter_factory   # factory(pair) -> Drafter
    pair = ModelPair.from_models(target, drafter_factory(target), tokenizer)
"""
from __future__ import annotations

import torch

from . import head_tree
from ..kernels import fastpath
from ..sampling import draw, warp_probs
from .base import Drafter, Level, empty_level, widen
from .feature_head import FeatureHead, load_head
from .memory import TextPhrases, columns_of_ids


class FeatureDrafter(Drafter):
    """Drafts with a FeatureHead from the target's verify-pass features (needs wants_hidden).

    State: `feats` [n, H] = f̃_0..f̃_{n-1}, the fused features of what observe() was handed; the
    head's KV cache holds `n_true` entries built from TRUE features (entry p = [f̃_p ; e(x_{p+1})]).
    With L committed tokens the decoder has shown us f_0..f_{L-2}, so entry L-2 is the last true one and its output drafts x_L;
    later draft steps feed the head's own output g. Entries made from g are dropped every round.
    A round's levels (head_tree.py): `rows` the outputs of its expanded nodes, `cand_rows` /
    `cand_ids` the row and token of each candidate of the last level, `depth` its depth.
    """

    name = "distilled-feature-head"
    wants_hidden = True

    def __init__(self, head: FeatureHead, vocab_size: int, device="cpu"):
        super().__init__(vocab_size, device)
        self.head = head
        self.feature_layers = tuple(head.cfg["feature_layers"])
        self.version = head.version
        self.kernels = fastpath.kernels_of(head).label()
        # Where the head's N columns go in the target's vocabulary, found once: a boolean-mask
        # scatter made anew at every level cost ~0.3-0.5 ms on the CPU, a sixth of a draft call.
        # Ordered by target id: a level's rows stay over these C columns (Level.cols), widened to V
        # only for the nodes a round keeps; in id order an argmax tie picks the lowest id, as over V.
        cols_n = (head.vocab_ids < vocab_size).nonzero()[:, 0]                 # the columns the target has
        cols_n = cols_n[head.vocab_ids[cols_n].argsort()]
        self._cols_n = cols_n.to(self.device)                                  # [C] head columns, by target id
        self._cols_v = head.vocab_ids[cols_n].to(self.device)                  # [C] their target ids, ascending
        self.proposable = self._cols_v                                         # a truncated vocabulary
        self.feats = torch.zeros(0, head.fc.out_features, device=self.device)
        self.cache, self.n_true, self.g_next = None, 0, None
        self.rows, self.cand_rows, self.cand_ids, self.depth = None, None, None, 0
        self.row_ctx: list[tuple] = []      # with a memory or phrases: the tokens before each row's next token
        # The text's own phrases (memory.TextPhrases): this decode's table, counted as the text grows.
        self.phrases = TextPhrases(**head.text_phrases) if head.text_phrases else None
        if self.phrases is not None:       # each target id's head column (-1: not proposable), found once
            self._col_of = columns_of_ids(head.vocab_ids.cpu().numpy(), vocab_size)
        orders = [x.order for x in (head.memory, self.phrases) if x is not None]
        self.ctx_order = max(orders) if orders else 0      # how many tokens a row's context keeps

    @torch.inference_mode()
    def start(self, prompt_ids, recalled=None):
        # observe() of the prompt came just before start(): the head reads the prompt now, in the
        # prefill, so the first round's draft time is one round's (the shape rule measures c from it).
        self.cache, self.n_true, self.g_next = None, 0, None
        self._catch_up(prompt_ids.to(self.device))
        if self.phrases is not None:       # a new text: its phrases from the prompt on
            self.phrases = TextPhrases(**self.head.text_phrases)
            self.phrases.catch_up(prompt_ids.cpu())

    def _catch_up(self, committed: torch.Tensor) -> None:
        """Head entries n_true..n_feat-1 from true features in one batched step (n_feat =
        min(#features, L - 1)); keeps the last one's output g_next [1, 1, H], which drafts token L."""
        n_feat = min(len(self.feats), len(committed) - 1)
        if self.cache is not None:   # forget entries made from drafted features
            self.cache = [c[:, :, : self.n_true] for c in self.cache]
        if n_feat > self.n_true:
            new = torch.arange(self.n_true, n_feat, device=self.device)
            g, self.cache = self.head(self.feats[None, new], committed[None, new + 1], new, self.cache)
            self.n_true, self.g_next = n_feat, g[:, -1:]

    def observe(self, hidden):
        """hidden [n, n_taps·H]: the target's tapped states of newly committed positions, fused now."""
        self.feats = torch.cat([self.feats, self.head.true_feature(hidden.to(self.feats.dtype))])

    def _over_c(self, logits_n: torch.Tensor) -> torch.Tensor:
        """[m, N] head logits (the head's column order) -> [m, C], the proposable columns by target id."""
        return logits_n.index_select(1, self._cols_n)

    def _full_c(self, logits_c: torch.Tensor) -> torch.Tensor:
        """[m, C] logits over the proposable columns -> [m, V] target-vocabulary logits, -inf elsewhere."""
        return widen(logits_c, self._cols_v, self.vocab_size, float("-inf"))

    def _full(self, logits_n: torch.Tensor) -> torch.Tensor:
        """[m, N] head logits -> [m, V] target-vocabulary logits, -inf outside the draft vocab."""
        return self._full_c(self._over_c(logits_n))

    @torch.inference_mode()
    def draft(self, committed, expand, width, depth, cfg, generator) -> Level:
        """One head call per level (head_tree.py): the root's children come from g_next, the
        frontier's from one call over its nodes. width 1: a token drawn from each q; else each
        node's top-`width` guesses (EAGLE-2)."""
        if expand is None:
            if min(len(self.feats), len(committed) - 1) < 1:
                return empty_level(self.vocab_size, self.device)
            # 1. New true entries since the last round in one batched step; the last one drafts token L.
            self._catch_up(committed.to(self.device))
            self.rows, self.depth = head_tree.Rows.first(self.g_next[0]), 0
            g, first_row = self.g_next[0], 0
            if self.phrases is not None:        # the tokens committed since the last round count now
                self.phrases.catch_up(committed.cpu())
            if self.ctx_order:                  # the root row follows the last committed tokens
                self.row_ctx = [tuple(committed[-self.ctx_order:].tolist())]
        else:
            # 2. The frontier's nodes (depth `self.depth`) in one head call, each over its own path.
            first_row = len(self.rows.g)
            g, self.cache, self.rows = head_tree.expand(self.head, self.cache, self.rows, self.cand_rows[expand],
                                                        self.cand_ids[expand], self.n_true, self.depth)
            if self.ctx_order:                  # a node's row follows its parent's tokens and its own
                order = self.ctx_order
                self.row_ctx += [(self.row_ctx[r] + (t,))[-order:] for r, t in
                                 zip(self.cand_rows[expand].tolist(), self.cand_ids[expand].tolist())]
        self.depth += 1
        # 3. Their children: the next level's candidates, each with its row's q.
        logits_n = self.head.logits(g)                                     # [f, N]
        if self.head.memory is not None:
            logits_n = self.head.with_memory(logits_n, self.row_ctx[first_row:first_row + len(g)])
        if self.phrases is not None:            # the text's own phrases: the same form of bias, this text's counts
            rows, cols, delta = self.phrases.bias_rows(self.row_ctx[first_row:first_row + len(g)], self._col_of,
                                                       logits_n.device)
            if len(rows):
                logits_n = logits_n.index_put((rows, cols), delta.to(logits_n.dtype), accumulate=True)
        logits_c = self._over_c(logits_n).float()                          # [f, C], columns by target id
        over_c = dict(cols=self._cols_v, vocab_size=self.vocab_size)          # rows kept over C (Level.cols)
        if width == 1 and cfg.greedy:
            # warp_probs' one-hot at the argmax, found over C (the first maximum: the lowest id, as over V)
            best = logits_c.argmax(-1)
            logq = torch.log_softmax(logits_c, -1).gather(-1, best[:, None])[:, 0]
            q = torch.zeros_like(logits_c).scatter_(-1, best[:, None], 1.0)
            level = Level(self._cols_v[best], torch.arange(len(best), device=self.device), logq, logits_c, q,
                          sampled=True, **over_c)
        elif width == 1:
            # a draw from q over V, as seeded runs have always drawn it (the same generator stream)
            logits = self._full_c(logits_c)                                 # [f, V]
            q = warp_probs(logits, cfg)
            ids = draw(q, cfg, generator)
            logq = torch.log_softmax(logits, -1).gather(-1, ids[:, None])[:, 0]
            rows = torch.arange(len(ids), device=self.device)
            level = Level(ids, rows, logq, logits, q, sampled=True)
        else:
            c_idx, logq, rows = head_tree.guesses(logits_c, max(1, min(width, len(self._cols_v))), cfg)
            level = Level(self._cols_v[c_idx], rows, logq, logits_c, **over_c)
        self.cand_rows, self.cand_ids = first_row + level.parents, level.ids
        return level

    def rollback(self, n_valid):
        # Entries from true features stay valid (their tokens were committed); the next round's
        # catch-up crops the drafted ones. A rollback below them (not done by the decoder) resets the state.
        if n_valid - 1 < self.n_true:
            self.n_true, self.g_next = 0, None   # rebuilt from the kept features next round
            self.feats = self.feats[: max(0, n_valid - 1)]
            self.cache = None


def drafter_factory(target, path=None):
    """A ModelPair drafter factory (pair -> FeatureDrafter) for the head in `path` (default: the
    shipped one). The head is loaded and checked against `target` now, once."""
    head = load_head(target, path)
    factory = lambda pair: FeatureDrafter(head, pair.vocab_size, pair.input_device)
    factory.name = FeatureDrafter.name
    return factory
