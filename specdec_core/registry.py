"""The one place where this process keeps state across decodes: loaded models and what hangs off them.

Entries are the models `load_model` loaded (with their tokenizer; the CPU fast path's prepacked
matrices live inside the model). Attachments are what is derived from one model and worth keeping
as long as it lives: the distilled head built on a target, the pass costs measured for it
(nothing else: the shape rule keeps no state across decodes). An evicted model takes its
attachments with it; models
that did not come through `load_model` (your own, via `ModelPair.from_models`) keep theirs for as
long as you keep the model (weak references).

Bounded: least recently used entries go first once there are more than SPECDEC_MAX_MODELS models
(default 4) or more than SPECDEC_MAX_MODEL_MB megabytes of them (default: half the machine's
memory), attachments counted; an entry that a running decode holds (`REGISTRY.holding(...)`) is
never evicted (the bound may then be exceeded until it is released).

    REGISTRY.model(key, loader)              # loaded once, shared by every session
    REGISTRY.attachment(model, "pass_costs", make)
    with REGISTRY.holding(pair.target, pair.draft_model): ...
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

ENV_MAX_MODELS = "SPECDEC_MAX_MODELS"
ENV_MAX_MB = "SPECDEC_MAX_MODEL_MB"


def tensor_bytes(obj) -> int:
    """Bytes of the tensors an object holds: a module's parameters and buffers (the fast path's
    prepacked matrices included), or the parameters of an object with a `.head`/`.model`."""
    if isinstance(obj, torch.nn.Module):
        seen, total = set(), 0
        for t in list(obj.parameters()) + list(obj.buffers()) + _packed(obj):
            key = id(t) if t.is_mkldnn else t.data_ptr()
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
        return total
    return 0


def _packed(module) -> list:
    from .kernels.fastpath import packs_of
    return [pk.tensor for pk, _ in packs_of(module) if pk.tensor is not None]


def _default_max_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


@dataclass
class _Entry:
    value: tuple                     # (model, tokenizer)
    nbytes: int
    last_used: float = field(default_factory=time.monotonic)


class Registry:
    """Loaded models (LRU, bounded by count and bytes) and their attachments."""

    def __init__(self, max_models: Optional[int] = None, max_bytes: Optional[int] = None):
        self.max_models = max_models if max_models is not None else int(os.environ.get(ENV_MAX_MODELS, 4))
        mb = os.environ.get(ENV_MAX_MB)
        self.max_bytes = max_bytes if max_bytes is not None else (int(mb) << 20 if mb else _default_max_bytes())
        self._entries: dict = {}                                   # key -> _Entry
        self._attachments: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # model -> {name: (value, nbytes)}
        self._held: dict = {}                                      # id(model) -> count
        self._making: dict = {}                                    # key -> lock of the one making it
        self._lock = threading.RLock()

    def _made_once(self, key, find: Callable[[], object], make: Callable[[], object], store: Callable[[object], object]):
        """find() under the registry lock; when it finds nothing, make() runs OUTSIDE that lock (a
        load or a measurement takes seconds, and other users' lookups must not wait on it), once
        per key: callers of the same key wait for that maker only, then store(value) under the lock."""
        with self._lock:
            found = find()
            if found is not None:
                return found
            key_lock = self._making.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                found = find()
            if found is not None:
                return found
            value = make()
            with self._lock:
                self._making.pop(key, None)
                return store(value)

    # -- models ------------------------------------------------------------------------------
    def model(self, key: tuple, loader: Callable[[], tuple]) -> tuple:
        """(model, tokenizer) for key, loading it once with loader(); evicts least recently used
        models beyond the bounds (never one that is held)."""
        def store(value):
            self._entries[key] = _Entry(value, tensor_bytes(value[0]))
            return self._entries[key]
        entry = self._made_once(("model", key), lambda: self._entries.get(key), loader, store)
        with self._lock:
            entry.last_used = time.monotonic()
            self._evict(keep=key)     # on every access: a lowered bound takes effect at once
            return entry.value

    def loaded(self) -> list:
        """Keys of the loaded models, least recently used first."""
        with self._lock:
            return [k for k, _ in sorted(self._entries.items(), key=lambda kv: kv[1].last_used)]

    def total_bytes(self) -> int:
        with self._lock:
            return sum(e.nbytes + self._attached_bytes(e.value[0]) for e in self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._attachments = weakref.WeakKeyDictionary()

    def _attached_bytes(self, model) -> int:
        return sum(n for _, n in self._attachments.get(model, {}).values())

    def _evict(self, keep) -> None:
        def over() -> bool:
            return len(self._entries) > self.max_models or self.total_bytes() > self.max_bytes
        for key in self.loaded():
            if not over():
                return
            model = self._entries[key].value[0]
            if key == keep or self._held.get(id(model), 0) > 0:
                continue
            del self._entries[key]
            self._attachments.pop(model, None)

    # -- what hangs off a model --------------------------------------------------------------
    def attachment(self, model, name: str, make: Callable[[], object]):
        """The value `name` derived from `model`, made once with make() and kept as long as the
        model lives (or stays registered)."""
        def find():
            return self._attachments.get(model, {}).get(name)

        def store(value):
            item = self._attachments.setdefault(model, {})[name] = (value, tensor_bytes(value))
            if any(e.value[0] is model for e in self._entries.values()):
                self._evict(keep=None)
            return item
        return self._made_once(("attachment", id(model), name), find, make, store)[0]

    def peek(self, model, name: str):
        """The attachment if it exists, else None (nothing is made)."""
        with self._lock:
            item = self._attachments.get(model, {}).get(name)
            return None if item is None else item[0]

    # -- models in use -----------------------------------------------------------------------
    @contextlib.contextmanager
    def holding(self, *models):
        """Mark models as used by a running decode: they are not evicted until it ends."""
        models = [m for m in models if m is not None]
        with self._lock:
            for m in models:
                self._held[id(m)] = self._held.get(id(m), 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for m in models:
                    self._held[id(m)] -= 1
                    if not self._held[id(m)]:
                        del self._held[id(m)]


REGISTRY = Registry()
