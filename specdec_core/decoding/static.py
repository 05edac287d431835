"""The static decode path (issue 58): a preallocated KV cache, passes at fixed token counts, and on
CUDA each count captured once as a graph.

A step of a 135M model on a GPU is launch-bound, not bandwidth-bound: ~900 kernels of a few
microseconds each, launched one by one from Python. Replaying a captured CUDA graph launches them
all at once, but a graph fixes every shape and address. So, as gpt-fast does:
- the cache is preallocated per layer ([1, kv heads, max_len, head dim]) and a pass writes its
  tokens at slots past .. past + B − 1 (`StaticKV.update`, the Cache call the attention layers make);
  rolling back is setting `length`, keeping a tree's path moves only the path's entries;
- a pass holds one of a few token counts (`BUCKETS`): [root, nodes] is padded to the next one, its
  padded rows attend to the past and themselves only, write beyond `length` and are never read;
- the mask [B, max_len] and the positions are built on the device from the pass's inputs (past
  length, ids, depths, the B × B ancestor relation), so a replay needs two copies in and no sync.
The same function runs eagerly (CPU; or a pass larger than the largest bucket), reading only the
slots it needs; captured, it reads all max_len slots, the unused ones masked (exactly zero weight).

Supported: Llama-family models (their attention calls `past_key_values.update(k, v, layer_idx)` and
adds a 4D mask), the CPU fast path's fused layers included. Anything else runs the dynamic cache.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch

from ..drafters.base import TokenTree, node_depths, tapped
from ..registry import REGISTRY
from .tree import tree_sees

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)    # token counts of a pass; a larger pass runs eagerly
LEN_STEP = 256                             # cache lengths rounded up to this, so workspaces are reused
CAPTURE_UP_TO = 64                         # buckets captured when a workspace opens (larger: on first use)
FREE_PER_LENGTH = 2                        # idle workspaces kept per (length, graphs, padded)


def bucket(n: int) -> Optional[int]:
    """The token count a pass of n tokens is padded to (None: larger than every bucket)."""
    return next((b for b in BUCKETS if b >= n), None)


class StaticKV:
    """Preallocated keys and values per layer; answers the attention layers' `update` call by
    writing at `slots` and returning the buffers (the first `read_len` slots when set)."""

    def __init__(self, cfg, max_len: int, dtype: torch.dtype, device):
        n_kv = cfg.num_key_value_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        shape = (1, n_kv, max_len, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_hidden_layers)]
        self.max_len = max_len
        self.length = 0                           # entries holding committed tokens
        self.slots: Optional[torch.Tensor] = None  # [T] where the pass in flight writes
        self.read_len: Optional[int] = None       # an eager pass reads this many slots; None: all

    def update(self, keys, values, layer_idx, *args, **kwargs):
        """The attention layer's cache call: keys/values [1, kv heads, T, d] written at `slots`."""
        kb, vb = self.keys[layer_idx], self.values[layer_idx]
        kb.index_copy_(2, self.slots, keys.to(kb.dtype))
        vb.index_copy_(2, self.slots, values.to(vb.dtype))
        n = self.read_len
        return (kb, vb) if n is None else (kb[:, :, :n], vb[:, :, :n])

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    @torch.inference_mode()
    def clear(self) -> None:
        """Zero every entry (a workspace handed back keeps nothing of the decode that used it)."""
        for t in self.keys + self.values:
            t.zero_()
        self.length = 0


class StaticPasses:
    """One decode's target passes on a static cache; `graphs`: each bucket captured on first use
    (CUDA); `padded`: passes padded to their bucket and the whole cache read, as a captured pass
    does, but run eagerly (how the CPU tests the captured passes' arithmetic)."""

    def __init__(self, target, max_len: int, graphs: bool = False, padded: bool = False):
        self.target = target
        self.device = target.get_input_embeddings().weight.device
        self.dtype = target.get_input_embeddings().weight.dtype
        self.kv = StaticKV(target.config, max_len, self.dtype, self.device)
        self.graphs = graphs
        self.padded = padded or graphs           # passes padded to their bucket (a captured pass always is)
        self.name = "graphs" if graphs else "static"
        self._key = torch.arange(max_len, device=self.device)
        self._zero = torch.zeros((), dtype=self.dtype, device=self.device)
        self._blocked = torch.full((), torch.finfo(self.dtype).min, dtype=self.dtype, device=self.device)
        self._captured: dict = {}                # (bucket, taps) -> (graph, inputs, outputs)
        self._pool = None
        self.pool, self.key = None, None         # the Workspaces this came from (close hands it back)

    @property
    def length(self) -> int:
        return self.kv.length

    # -- one pass, written once: eager, or the body a graph captures ----------------------------
    def _pass(self, ids: torch.Tensor, past: torch.Tensor, depths: torch.Tensor, sees: torch.Tensor,
              read: int, layers: Optional[tuple]) -> tuple:
        """ids, depths [rows] and the ancestor relation sees [rows, rows] (bool) of tokens placed
        after `past` (0-d) committed entries; the cache read up to `read` slots. Returns (logits
        [rows, V'], hidden [rows, L·H] or None)."""
        rows = len(ids)
        key = self._key[:read]
        # Row i attends to every committed slot, and to the new slots (past .. past+rows−1) it sees.
        rel = key - past
        new = (rel >= 0) & (rel < rows)
        allowed = (key < past)[None, :] | (sees[:, rel.clamp(0, rows - 1)] & new[None, :])
        mask = torch.where(allowed, self._zero, self._blocked)
        self.kv.slots = past + torch.arange(rows, device=self.device)
        out = self.target(ids[None], attention_mask=mask[None, None], position_ids=(past + depths)[None],
                          past_key_values=self.kv, use_cache=True, output_hidden_states=layers is not None)
        hidden = tapped(out.hidden_states, layers)[0] if layers is not None else None
        return out.logits[0], hidden

    @staticmethod
    def _meta(past: int, depths: list, sees: list, pin: bool = False) -> torch.Tensor:
        """A pass's inputs from the host in one tensor: [past, depths (rows), sees (rows², row-major)]."""
        flat = [past] + depths + [int(s) for row in sees for s in row]
        return torch.tensor(flat, dtype=torch.long, pin_memory=pin)

    @staticmethod
    def _unpack(meta: torch.Tensor, rows: int) -> tuple:
        return meta[0], meta[1:1 + rows], meta[1 + rows:].view(rows, rows).bool()

    # -- the decoder's three calls ----------------------------------------------------------------
    def prefill(self, ids: torch.Tensor, layers: Optional[tuple]) -> Optional[torch.Tensor]:
        """ids [T] at slots 0..T−1 (eager: a prompt has any length); tapped hidden [T, L·H] or None."""
        T = len(ids)
        self._check_room(T)
        self.kv.read_len = T
        try:
            _, hidden = self._pass(ids, torch.zeros((), dtype=torch.long, device=self.device),
                                   torch.arange(T, device=self.device),
                                   torch.ones(T, T, dtype=torch.bool, device=self.device).tril(), T, layers)
        finally:
            self.kv.read_len = None
        self.kv.length = T
        return hidden

    def verify(self, root_id: torch.Tensor, tree: TokenTree, layers: Optional[tuple]) -> tuple:
        """One pass over [root, nodes] (captured: padded to its bucket): (logits [n+1, V'], hidden
        [n+1, L·H] or None)."""
        T = len(tree.parents) + 1
        past = self.kv.length
        ids = torch.cat([root_id.reshape(1), tree.ids.to(self.device)])
        depths = [0] + node_depths(tree.parents)
        B = bucket(T) if self.padded else None
        self._check_room(T if B is None else B)
        if B is None:
            # Eager: exactly the pass's rows, the cache read only as far as they reach.
            meta = self._meta(past, depths, tree_sees(tree.parents, T)).to(self.device)
            self.kv.read_len = past + T
            try:
                logits, hidden = self._pass(ids, *self._unpack(meta, T), past + T, layers)
            finally:
                self.kv.read_len = None
        else:
            # Padded to the bucket, the whole cache read: what a captured pass computes.
            ids = torch.cat([ids, ids.new_zeros(B - T)])
            meta = self._meta(past, depths + [0] * (B - T), tree_sees(tree.parents, B), pin=self.graphs)
            if self.graphs:
                out = self._replay(B, ids, meta, layers)
            else:
                out = self._pass(ids, *self._unpack(meta.to(self.device), B), self.kv.max_len, layers)
            # Copied out of the graph's buffers, which the next replay overwrites.
            logits, hidden = out[0][:T].clone(), None if out[1] is None else out[1][:T].clone()
        self.kv.length = past + T       # the pass's entries, until keep() says which stay
        return logits, hidden

    def keep(self, past_len: int, path: list) -> None:
        """Keep past + root + the accepted path: a prefix stays where it is (the length moves); a
        path elsewhere in the tree is moved down, only its entries."""
        keep = past_len + 1 + len(path)
        if path != list(range(len(path))):
            src = torch.tensor([past_len + 1 + i for i in path], dtype=torch.long, device=self.device)
            dst = torch.arange(past_len + 1, keep, device=self.device)
            for kb, vb in zip(self.kv.keys, self.kv.values):
                kb.index_copy_(2, dst, kb.index_select(2, src))
                vb.index_copy_(2, dst, vb.index_select(2, src))
        self.kv.length = keep

    def close(self) -> None:
        """Hand the workspace back (zeroed) to the target's pool, graphs kept for the next decode."""
        if self.pool is not None:
            self.pool.give_back(self)

    def _check_room(self, rows: int) -> None:
        if self.kv.length + rows > self.kv.max_len:
            raise ValueError(f"the static cache holds {self.kv.max_len} positions; "
                             f"{self.kv.length} + {rows} do not fit")

    # -- captured passes (CUDA) -------------------------------------------------------------------
    def capture_all(self, layers: Optional[tuple], up_to: int = CAPTURE_UP_TO) -> None:
        """Capture every bucket up to `up_to` tokens for these taps now (once per workspace), so
        no decode pays a capture in the middle of its timed rounds."""
        if self.graphs:
            for B in BUCKETS:
                if B <= up_to and (B, layers) not in self._captured and self.kv.length + B <= self.kv.max_len:
                    self._capture((B, layers))

    def _replay(self, B: int, ids: torch.Tensor, meta_host: torch.Tensor, layers) -> tuple:
        key = (B, layers)               # the taps are part of what a graph returns
        if key not in self._captured:
            self._capture(key)
        graph, ids_in, meta_in, out = self._captured[key]
        ids_in.copy_(ids)
        meta_in.copy_(meta_host, non_blocking=True)
        graph.replay()
        return out

    def _capture(self, key: tuple) -> None:
        B, layers = key
        ids_in = torch.zeros(B, dtype=torch.long, device=self.device)
        meta_in = self._meta(self.kv.length, list(range(B)), tree_sees(list(range(-1, B - 2)), B)).to(self.device)
        read = self.kv.max_len
        # Warm up on a side stream (CUDA graphs' requirement), then capture; the warm-up writes only
        # slots at or beyond `length`, which nothing reads.
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._pass(ids_in, *self._unpack(meta_in, B), read, layers)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = self._pass(ids_in, *self._unpack(meta_in, B), read, layers)
        self._captured[key] = (graph, ids_in, meta_in, out)


class Workspaces:
    """A target's idle static workspaces (cache buffers and captured graphs), reused by later
    decodes: capturing costs more than a short decode. A decode holds its own exclusively."""

    def __init__(self):
        self._lock = threading.Lock()
        self._free: dict = {}           # (max_len, graphs, padded) -> [StaticPasses]

    def take(self, target, max_len: int, graphs: bool, padded: bool) -> StaticPasses:
        key = (max_len, graphs, padded)
        with self._lock:
            free = self._free.get(key)
            if free:
                return free.pop()
        ws = StaticPasses(target, max_len, graphs, padded)
        ws.pool, ws.key = self, key
        return ws

    def give_back(self, ws: StaticPasses) -> None:
        ws.kv.clear()
        with self._lock:
            free = self._free.setdefault(ws.key, [])
            if len(free) < FREE_PER_LENGTH and ws not in free:
                free.append(ws)


def open_static(target, max_len: int, graphs: bool = False, padded: bool = False) -> StaticPasses:
    """A static workspace with room for max_len positions (+ the largest bucket), from the target's
    pool; graphs: captured passes (CUDA); padded: eager passes padded as captured ones are."""
    if graphs and target.get_input_embeddings().weight.device.type != "cuda":
        raise ValueError("captured passes need a CUDA device")
    length = -(-(max_len + BUCKETS[-1]) // LEN_STEP) * LEN_STEP
    return REGISTRY.attachment(target, "static_workspaces", Workspaces).take(target, length, graphs, padded or graphs)
