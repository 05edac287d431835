"""The one way the project writes a file that something may read later (a trace, a lab shard, a
training checkpoint, a fetched model file): into a temporary file beside it, then renamed over it,
so no reader ever sees a half-written file and a crash leaves none behind."""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable


def write_atomic(path, write: Callable[[BinaryIO], object]) -> None:
    """write(f) into a temporary binary file beside `path`, then rename it to `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
