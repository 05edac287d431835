"""Packed or stock, per matrix shape: where this machine runs a shape's stock `F.linear` faster than
its prepacked copy, the fast path uses the stock kernel for that shape (issue 60).

Why: prepacking pays on the AMD EPYC machines measured (a 1-token step 40 → 21 ms on the default
target, docs/bench/stock-vs-fast-amd), but on an Intel Xeon the same fast path ran plain decoding at
0.92–0.97× stock transformers. Which kernel wins depends on the CPU and the matrix shape, so each
shape is timed both ways once per machine: the packs of that shape together, as a pass runs them
(1 row, a decoding step, and PAD_TO rows, a verify pass), packed (with the row padding rows.py
decided) against stock (`F.linear` on each source matrix, as the stock model runs it: a fused q|k|v
pack against three products, on dense copies rebuilt from the pack so a memory-mapped model's file
is not paged in), interleaved, medians. Stock is used where it takes ≤ MARGIN of the packed time. Only shapes that stream from memory are timed (rows.py's rule; a smaller set stays in
cache while timed, which says nothing about a pass).

Decided once per machine, like the row padding: kept in a file keyed by the CPU model and torch's
version (SPECDEC_CACHE_DIR, default ~/.cache/specdec: stock_shapes.json), read by every later load,
so two loads give bit-identical logits; the shapes on stock kernels show in the trace's kernels
label. SPECDEC_STOCK_SHAPES=0 turns the choice off (packed everywhere).
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch
import torch.nn.functional as F

from . import rows, switches
from .packed import PAD_TO

ENV = "SPECDEC_STOCK_SHAPES"
MARGIN = 0.95           # stock must take ≤ 95 % of the packed time: a measured gain, not noise
REPS = 3
ROWS = (1, PAD_TO)      # a decoding step and a verify pass


def enabled() -> bool:
    return switches.on(ENV)


def cache_file():
    return rows.cache_file().with_name("stock_shapes.json")


@torch.inference_mode()
def measure(packs_with_sources: list) -> dict:
    """{pack shape: True where stock F.linear is at least MARGIN faster} for the shapes whose
    matrices together exceed the last-level cache; packs_with_sources: (Pack, its source matrices)."""
    by_shape = defaultdict(list)
    for pk, srcs in packs_with_sources:
        by_shape[rows.shape_of(pk)].append((pk, srcs))
    cache = rows.last_level_cache_bytes()
    return {key: _stock_is_faster(group) for key, group in by_shape.items()
            if len(group) * key[0] * key[1] * key[2].itemsize > cache}


def _stock_is_faster(group: list) -> bool:
    """One shape's packs, packed against stock, over ROWS, interleaved, medians. The stock side
    multiplies dense copies rebuilt from the packs (split as their sources are), a shape at a time:
    reading the sources themselves would page a memory-mapped model's whole file into this
    process (~0.5 GB resident for the default target) just to time it."""
    n_in = group[0][0].in_features
    eye = torch.eye(n_in)
    dense = [list(pk.plain(eye, None).T.contiguous().float().split([w.shape[0] for w in srcs])) for pk, srcs in group]
    gen = torch.Generator().manual_seed(0)
    xs = {r: torch.randn(r, n_in, generator=gen) for r in ROWS}
    runs = [(r, how) for r in ROWS for how in ("packed", "stock")]
    times = defaultdict(list)
    for rep in range(REPS + 1):
        # Each rep starts at another entry, so a disturbance does not always land on the same one.
        for r, how in runs[rep % len(runs):] + runs[: rep % len(runs)]:
            t0 = time.perf_counter()
            for (pk, _), ws in zip(group, dense):
                if how == "packed":
                    pk.linear(xs[r], None)
                else:
                    for w in ws:
                        F.linear(xs[r], w)
            if rep > 0:                        # rep 0 warms up
                times[(r, how)].append(time.perf_counter() - t0)
    med = {run: statistics.median(ts) for run, ts in times.items()}
    return sum(med[(r, "stock")] for r in ROWS) <= MARGIN * sum(med[(r, "packed")] for r in ROWS)


def decided(packs_with_sources: list) -> dict:
    """measure(), once per machine (rows.decided_once): shapes this CPU model and torch already
    decided are read from cache_file(), the others measured and added. Returns {shape: True} for
    the shapes that run on stock kernels."""
    if not enabled():
        return {}
    texts = {rows.shape_of(pk): rows.shape_text(rows.shape_of(pk)) for pk, _ in packs_with_sources}
    got = rows.decided_once(cache_file(), texts, lambda missing: measure(
        [(pk, srcs) for pk, srcs in packs_with_sources if rows.shape_of(pk) in missing]))
    return {key: True for key, on in got.items() if on}


def set_stock(packs: list, stock: dict) -> tuple:
    """Mark each pack of a stock shape (Pack.stock: its users run the stock product instead);
    -> the stock shapes as text, for the kernels label."""
    for pk in packs:
        pk.stock = bool(stock.get(rows.shape_of(pk)))
    return tuple(sorted(f"{k[0]}x{k[1]}" for k in stock))
