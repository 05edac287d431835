"""What a v5 run wrote (issue 57): the rows kept as token-id shards (`written_NNN.npz`: prompt +
answer, prompt length, sampler, ask index) — for the phrase memory, and read again by the run itself
(*replay*): teacher-forcing a written row costs a forward pass, writing it cost a decode of every
token, so the heads can train on more positions an hour than the target writes.

    save_written(rows, out / "written_000.npz")
    rows, cursor = replay_rows(out, pending, cursor, n_positions)     # the next written rows, oldest first

The rows a run has written are one stream: its shards in order, then the rows written since its last
checkpoint (`pending`, not yet a shard). A replay cursor is a row index into that stream, so a run
split into two reads the same rows as one run (the shards are only where the rows are kept).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from .data import load_ids, save_ids


def save_written(rows: list[dict], path: Path) -> None:
    """A shard of written rows: prompt + answer ids, prompt length, sampler, ask index (data.save_ids)."""
    save_ids(path, [r["ids"] for r in rows], plen=np.array([r["plen"] for r in rows], np.int32),
             greedy=np.array([r["greedy"] for r in rows]), ask=np.array([r["ask"] for r in rows], np.int32))


def shards(out: Path) -> list[Path]:
    """A run's finished shards, in the order they were written."""
    return sorted(p for p in Path(out).glob("written_*.npz") if ".tmp" not in p.name)


@lru_cache(maxsize=512)
def _shard_rows(path: str, size: int) -> tuple[tuple[np.ndarray, int], ...]:
    """One shard's rows as (ids int64 [n], prompt length); cached by path and size (a shard is
    written once, atomically)."""
    ids, arrays = load_ids(Path(path))
    return tuple((x, int(pl)) for x, pl in zip(ids, arrays["plen"]))


def written_rows(out: Path, pending: list[dict] = ()) -> list[tuple[np.ndarray, int]]:
    """Every row the run has written, oldest first: its shards, then `pending` (rows with ids, plen)."""
    rows = [r for p in shards(out) for r in _shard_rows(str(p), p.stat().st_size)]
    return rows + [(np.asarray(r["ids"], dtype=np.int64), int(r["plen"])) for r in pending]


def replay_rows(out: Path, pending: list[dict], cursor: int, n_positions: int) -> tuple[list[tuple[np.ndarray, int]], int]:
    """The next written rows from row `cursor` until they hold ≥ n_positions answer positions (or
    every row once), and the cursor after them — back to the oldest row at the end of the stream
    (the next epoch). Returns ([(ids, plen)], cursor)."""
    rows = written_rows(out, pending)
    taken, n = [], 0
    while rows and n < n_positions and len(taken) < len(rows):
        cursor %= len(rows)
        ids, plen = rows[cursor]
        taken.append((ids, plen))
        n += len(ids) - plen
        cursor += 1
    return taken, cursor


def written_answers(out: Path, order: int = 3) -> list[np.ndarray]:
    """Every answer a run wrote (its written_*.npz shards), each after its prompt's last `order`
    tokens — what the phrase memory counts (how an answer starts is the target's)."""
    return [ids[max(0, plen - order):] for ids, plen in written_rows(out)]
