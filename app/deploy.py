"""What a public deployment allows, from environment variables (README "Deploying publicly").

The page is used by strangers: it never runs a model's own code, reads local folders only when the
operator allows it, caps model size and upload size. Every refusal is one line for the page.

| variable | default | meaning |
|---|---|---|
| SPECDEC_ALLOW_LOCAL_PATHS | 0 | 1: targets/drafts may name local folders (incl. distilled:DIR, block:DIR) |
| SPECDEC_UI_MAX_PARAMS | 2e9 on CPU, 16e9 with CUDA | largest model the page loads (parameters) |
| SPECDEC_MAX_UPLOAD_MB | 10 | largest trace file accepted for upload |
| SPECDEC_MAX_UPLOAD_FILES | 4 | trace files per upload |
| SPECDEC_TRACE_MAX_AGE_S | 3600 | trace files written for download are removed after this age |
| SPECDEC_TRACE_MAX_RUNS | 100 | and beyond this many runs' folders (oldest first) |
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from specdec_core import DraftSpec, ModelLoadError, ref_kind



@dataclass(frozen=True)
class Policy:
    allow_local_paths: bool
    max_params: int
    max_upload_bytes: int
    max_upload_files: int
    trace_max_age_s: float = 3600.0
    trace_max_runs: int = 100

    @classmethod
    def from_env(cls) -> "Policy":
        default_params = 16e9 if torch.cuda.is_available() else 2e9
        return cls(allow_local_paths=os.environ.get("SPECDEC_ALLOW_LOCAL_PATHS", "0") == "1",
                   max_params=int(float(os.environ.get("SPECDEC_UI_MAX_PARAMS", default_params))),
                   max_upload_bytes=int(float(os.environ.get("SPECDEC_MAX_UPLOAD_MB", 10)) * 2**20),
                   max_upload_files=int(os.environ.get("SPECDEC_MAX_UPLOAD_FILES", 4)),
                   trace_max_age_s=float(os.environ.get("SPECDEC_TRACE_MAX_AGE_S", 3600)),
                   trace_max_runs=int(os.environ.get("SPECDEC_TRACE_MAX_RUNS", 100)))


def check_model_refs(policy: Policy, refs: list) -> None:
    """Raise ModelLoadError for a model reference that names nothing loadable (models.refs) or
    that the page may not load (a local folder unless the operator allows them). refs: target
    references (text) and DraftSpecs."""
    for ref in refs:
        if ref_kind(ref) == "local" and not policy.allow_local_paths:
            shown = ref.ref if isinstance(ref, DraftSpec) else ref
            raise ModelLoadError(f"{shown[:80]!r} is a local path: this page loads "
                                 "presets and Hugging Face ids only (the operator can allow local folders "
                                 "with SPECDEC_ALLOW_LOCAL_PATHS=1)")


def check_uploads(policy: Policy, paths) -> None:
    """Raise ValueError for too many or too large trace files, before any is read."""
    paths = paths if isinstance(paths, (list, tuple)) else [paths]
    if len(paths) > policy.max_upload_files:
        raise ValueError(f"{len(paths)} files: upload at most {policy.max_upload_files} trace files at once")
    for p in paths:
        size = os.path.getsize(str(p))
        if size > policy.max_upload_bytes:
            raise ValueError(f"{os.path.basename(str(p))} is {_size(size)}: trace files up to "
                             f"{_size(policy.max_upload_bytes)} are accepted")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{max(n // 1024, 1)} KB"
