"""How many rows a packed product should get: oneDNN picks its kernel by the number of input rows,
and on the CPUs measured its 1- and 2-row kernels stream most matrices slower than its 4-row one.

Measured on a 2-core AMD EPYC (AVX-512), the default target's fp32 products streamed from memory,
30 layers of each (docs/bench/pad-rows), ms for 1 / 2 / 3 / 4 rows: gate|up 8.3 / 9.2 / 6.8 / 6.6,
down 4.7 / 4.9 / 3.9 / 3.6, q|k|v 2.6 / 2.6 / 2.4 / 2.3, o 1.5 / 1.6 / 1.7 / 1.6; the output layer
(49,152 × 576) 3.2–3.6 / 3.6–3.7 / 2.9–3.0 / 2.8; whatever batch-size hint they were packed with. A
plain decoding step (1 row) and a verify pass over one guess (2 rows) are the slow cases. So a
product of 1–3 rows may run on PAD_TO = 4, the real rows first (`Pack.padded`): more arithmetic,
less time, the same outputs for the real rows up to rounding (each output row reads only its own
input row; the 4-row kernel may sum in another order, as any other kernel choice would).

Which products pad which row counts is measured once per model when the fast path packs it
(`measure`): the packs of each shape together (the model's 30 gate|up matrices, its output layer,
...), over 1..3 rows, padded and not, interleaved, medians; a row count is padded for a shape when
padding measures at least MARGIN faster (the pad costs a concatenation and a slice, ~5-10 µs a
product, so it pays only where the kernel gains more). Only shapes whose matrices together do not
fit the last-level cache are measured: a pass streams them from memory, as timed; a smaller set
stays in the cache while it is timed, which says nothing about a pass. SPECDEC_PAD_ROWS=0 turns it off.

Decided once per machine (`decided`): a shape's choice is kept in a file keyed by the CPU's model and
torch's version (SPECDEC_CACHE_DIR, default ~/.cache/specdec: pad_rows.json) and read by every later
load, so two loads of one model on one machine run the same kernels and give bit-identical logits
(timed at each load, a shape whose gain sits near MARGIN could flip between loads: logits then
differed by ~5e-5). The choice shows in the trace (`config.kernels`).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import torch

from ..atomic import write_atomic
from . import switches
from .packed import PAD_TO

ENV = "SPECDEC_PAD_ROWS"
CACHE_ENV = "SPECDEC_CACHE_DIR"     # where the per-machine decisions are kept
MARGIN = 0.95      # padded must take ≤ 95 % of the time: a measured gain, not noise
REPS = 3


def enabled() -> bool:
    """Row padding is measured and used unless SPECDEC_PAD_ROWS=0."""
    return switches.on(ENV)


def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache (sysfs), 32 MiB when it cannot be read."""
    best = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            best = max(best, int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return best or 32 << 20


def shape_of(pk) -> tuple:
    """A pack's shape key: (in features, out features, dtype)."""
    return pk.in_features, pk.out_features, pk.dtype


def shapes(packs: list) -> dict:
    """{shape_of(pack): the packs of that shape}, each shape's in pass order."""
    groups = defaultdict(list)
    for pk in packs:
        groups[shape_of(pk)].append(pk)
    return dict(groups)


@lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else platform's; "" when unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or ""


def machine_key() -> str:
    """What a kernel choice holds for: this CPU model and this torch."""
    return f"{cpu_model() or platform.machine()} | torch {torch.__version__}"


def cache_file() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "specdec") / "pad_rows.json"


def shape_text(key: tuple) -> str:
    """A shape key as the per-machine files write it: "576x3072 float32"."""
    return f"{key[0]}x{key[1]} {str(key[2]).replace('torch.', '')}"


def decided(packs: list) -> dict:
    """measure(packs), once per machine: shapes this CPU model and torch already decided are read
    from cache_file(), the others measured and added to it (an unwritable cache: measured each load)."""
    if not enabled():
        return {}
    texts = {shape_of(pk): shape_text(shape_of(pk)) for pk in packs}
    got = decided_once(cache_file(), texts, lambda missing: {
        key: sorted(r) for key, r in measure([pk for pk in packs if shape_of(pk) in missing]).items()})
    return {key: frozenset(r) for key, r in got.items() if r}


def decided_once(path: Path, texts: dict, measure_missing) -> dict:
    """Kernel choices kept per machine in `path` ({machine_key(): {text: choice}}), the one way
    they are kept (row padding here, packed or stock in stock.py). texts: {key: its text in the
    file}; measure_missing(keys) -> {key: choice (JSON)} for the keys this machine has not decided,
    added to the file (an unwritable file: measured at each load). Returns {key: choice} for every
    key decided now or before."""
    machine = machine_key()
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        known = {}
    mine = known.get(machine, {})
    found = {key: mine[text] for key, text in texts.items() if text in mine}
    missing = [key for key, text in texts.items() if text not in mine]
    new = measure_missing(missing) if missing else {}
    if new:
        known[machine] = {**mine, **{texts[key]: choice for key, choice in new.items()}}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, lambda f: f.write(json.dumps(known, indent=1).encode()))
        except OSError:
            pass
    return {**found, **new}


@torch.inference_mode()
def measure(packs: list) -> dict:
    """{pack shape: the row counts (of 1..PAD_TO-1) its products run at least MARGIN faster padded
    to PAD_TO rows}, for the shapes of `packs` whose matrices together exceed the last-level cache
    (the others, and every shape when turned off: none); a measured shape that pads no row count
    maps to an empty set."""
    if not enabled():
        return {}
    cache = last_level_cache_bytes()
    groups = {key: pks for key, pks in shapes(packs).items()
              if len(pks) * key[0] * key[1] * key[2].itemsize > cache}
    if not groups:
        return {}
    gen = torch.Generator().manual_seed(0)
    xs = {(r, n): torch.randn(r, n, generator=gen) for r in range(1, PAD_TO) for n in {key[0] for key in groups}}
    runs = [(key, r, how) for key in groups for r in range(1, PAD_TO) for how in ("plain", "padded")]
    times = defaultdict(list)
    for rep in range(REPS + 1):
        # Each rep starts at another entry, so a disturbance does not always land on the same one.
        for key, r, how in runs[rep % len(runs):] + runs[: rep % len(runs)]:
            x = xs[(r, key[0])]
            t0 = time.perf_counter()
            for pk in groups[key]:
                getattr(pk, how)(x, None)
            if rep > 0:                        # rep 0 warms up
                times[(key, r, how)].append(time.perf_counter() - t0)
    med = {run: statistics.median(ts) for run, ts in times.items()}
    return {key: frozenset(r for r in range(1, PAD_TO) if med[(key, r, "padded")] <= MARGIN * med[(key, r, "plain")])
            for key in groups}


def set_padding(packs: list, padded: dict) -> tuple:
    """Each pack pads the row counts measured for its shape (Pack.linear); -> the row counts some
    pack pads, ascending."""
    for pk in packs:
        pk.pad_rows = frozenset(padded.get(shape_of(pk), ()))
    return tuple(sorted(set().union(*padded.values()))) if padded else ()
