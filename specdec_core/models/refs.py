"""What a model reference names, decided once: a preset or built-in drafter, a Hugging Face id, or
a local folder; anything else is refused with one line saying what would be accepted.

`load_pair` calls it for the target and the draft (API, CLI); the app's deployment policy reads
the kind to refuse local folders on a public page."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Union

from ..errors import ModelLoadError
from .draft_spec import HEADS, MODEL, DraftSpec
from .presets import PRESETS

MAX_REF_CHARS = 256     # longer than any Hugging Face id (96 + 1 + 96) or sensible folder name
# Hugging Face ids: "name" or "org/name", letters, digits, "-", "_", ".", each part ≤ 96 characters.
HF_ID = re.compile(r"[A-Za-z0-9](?:[\w.\-]{0,94}[\w])?(?:/[A-Za-z0-9](?:[\w.\-]{0,94}[\w])?)?")
ACCEPTED = "a preset, a Hugging Face id (name or org/name: letters, digits, '-', '_', '.') or a local folder"


def _looks_like_path(ref: str) -> bool:
    return (ref.startswith(("/", "./", "../", "~", "\\", "file:")) or "\\" in ref
            or ".." in ref.split("/") or ref.count("/") > 1)


def _exists(ref: str) -> bool:
    try:
        return Path(os.path.expanduser(ref)).exists()
    except (OSError, ValueError):      # a name too long for the file system, a NUL: not a folder
        return False


def ref_kind(ref: Union[str, DraftSpec]) -> str:
    """A target reference or a DraftSpec -> 'builtin' (a preset; ngram, the shipped heads,
    target-layers:N), 'local' (a folder, a head's folder) or 'hub' (a Hugging Face id); raises
    ModelLoadError for anything else."""
    if isinstance(ref, DraftSpec):
        if ref.kind in HEADS:
            return "local" if ref.ref else "builtin"
        return ref_kind(ref.ref) if ref.kind == MODEL else "builtin"
    ref = (ref or "").strip()
    if not ref:
        raise ModelLoadError(f"the model field is empty: give {ACCEPTED}")
    if len(ref) > MAX_REF_CHARS:
        raise ModelLoadError(f"the model name is {len(ref):,} characters long (at most {MAX_REF_CHARS}): "
                             f"give {ACCEPTED}")
    if ref in PRESETS:
        return "builtin"
    if re.match(r"^(?!file:)[a-z]+://", ref):
        raise ModelLoadError(f"{ref[:60]!r} is a web address: give the model's Hugging Face id (org/name) instead")
    if _looks_like_path(ref):
        return "local"
    if _exists(ref):
        return "local"
    if HF_ID.fullmatch(ref) and "--" not in ref and ".." not in ref:
        return "hub"
    shown = ref if len(ref) <= 60 else ref[:57] + "…"
    raise ModelLoadError(f"{shown!r} is not {ACCEPTED}")
