"""A long run's compact state, committed to the repository and overwritten in place (issue 38):

    <folder>/head.safetensors     the head's weights, fp16 (~10 MB)
    <folder>/adam.safetensors     AdamW's two moments, 8 bits each in blocks of 256 (~10 MB):
                                  exp_avg linear (absmax scale), exp_avg_sq in log2 (min/max per block)
    <folder>/prompts.json.gz      every prompt written so far, in order (the stream's de-dup state)
    <folder>/state.json           counters, settings, the selection history, written last

A checkpoint *snaps* the live run to what it wrote (weights → fp16 → fp32, moments → 8 bits →
fp32), so the run that goes on and a run resumed from the folder on another machine take the same
next step. Plain Adam moments in fp32 would be 4× the size; log coding keeps exp_avg_sq's small
entries (a linear code would round them to 0 and blow the step up).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import torch

from ..atomic import write_atomic

BLOCK = 256


def _blocks(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    flat = x.detach().float().reshape(-1)
    pad = (-len(flat)) % BLOCK
    return torch.cat([flat, flat.new_zeros(pad)]).view(-1, BLOCK), len(flat)


def encode_signed(x: torch.Tensor) -> dict:
    """x (any shape) -> {q int8 [nb, 256], scale fp32 [nb]}: linear, each block's absmax → 127."""
    b, _ = _blocks(x)
    scale = b.abs().amax(1).clamp_min(1e-30) / 127
    return {"q": torch.round(b / scale[:, None]).to(torch.int8), "scale": scale}


def decode_signed(d: dict, like: torch.Tensor) -> torch.Tensor:
    return (d["q"].float() * d["scale"][:, None]).reshape(-1)[: like.numel()].view_as(like).to(like.device)


def encode_positive(x: torch.Tensor) -> dict:
    """x ≥ 0 -> {q uint8 [nb, 256], lo, hi fp32 [nb]}: log2 coded between each block's min and max
    (zeros read back as 2^-100, far below Adam's eps²)."""
    b, _ = _blocks(x)
    lg = b.clamp_min(2.0 ** -100).log2()
    lo, hi = lg.amin(1), lg.amax(1)
    span = (hi - lo).clamp_min(1e-6)
    return {"q": torch.round((lg - lo[:, None]) / span[:, None] * 255).to(torch.uint8), "lo": lo, "hi": hi}


def decode_positive(d: dict, like: torch.Tensor) -> torch.Tensor:
    span = (d["hi"] - d["lo"]).clamp_min(1e-6)
    lg = d["lo"][:, None] + d["q"].float() / 255 * span[:, None]
    return torch.exp2(lg).reshape(-1)[: like.numel()].view_as(like).to(like.device)


def _opt_tensors(head, opt) -> dict:
    """Flat {name: tensor} of the optimiser's moments, keyed by parameter name."""
    out = {}
    for name, p in head.named_parameters():
        st = opt.state.get(p)
        if not st:
            continue
        for key, x in encode_signed(st["exp_avg"]).items():
            out[f"{name}.m.{key}"] = x
        for key, x in encode_positive(st["exp_avg_sq"]).items():
            out[f"{name}.v.{key}"] = x
        out[f"{name}.step"] = st["step"].detach().float().reshape(1).cpu()
    return out


def _load_opt(head, opt, t: dict) -> None:
    """Set the optimiser's moments (and step counts) from _opt_tensors' coding, on their params' devices."""
    for name, p in head.named_parameters():
        if f"{name}.step" not in t:
            continue
        m = decode_signed({k: t[f"{name}.m.{k}"] for k in ("q", "scale")}, p.detach())
        v = decode_positive({k: t[f"{name}.v.{k}"] for k in ("q", "lo", "hi")}, p.detach())
        st = opt.state[p]
        st["exp_avg"], st["exp_avg_sq"] = m.clone(), v.clone()
        # AdamW keeps `step` as a CPU float tensor unless capturable/fused.
        st["step"] = t[f"{name}.step"].reshape(()).clone()


def head_state(head) -> dict:
    """Trainable state (no borrowed target tensors), fp16 floats, on the CPU."""
    return {k: (v.detach().half() if v.is_floating_point() else v.detach()).contiguous().cpu()
            for k, v in head.state_dict().items()}


def save(folder: Path, head, opt, state: dict, prompts: list) -> None:
    """Write the four files (atomically each, state.json last) and snap the live run to them."""
    from safetensors.torch import save as st_save
    folder.mkdir(parents=True, exist_ok=True)
    hs, ot = head_state(head), {k: v.cpu().contiguous() for k, v in _opt_tensors(head, opt).items()}
    write_atomic(folder / "head.safetensors", lambda f: f.write(st_save(hs)))
    write_atomic(folder / "adam.safetensors", lambda f: f.write(st_save(ot)))
    blob = gzip.compress(json.dumps(prompts).encode(), mtime=0)
    write_atomic(folder / "prompts.json.gz", lambda f: f.write(blob))
    write_atomic(folder / "state.json", lambda f: f.write(json.dumps(state, indent=1).encode()))
    snap(head, opt, hs, ot)


def snap(head, opt, hs: dict, ot: dict) -> None:
    """Live weights and moments := what the files hold (exact resume)."""
    dev = next(head.parameters()).device
    head.load_state_dict({k: (v.float() if v.is_floating_point() else v).to(dev) for k, v in hs.items()}, strict=False)
    _load_opt(head, opt, ot)


def exists(folder: Path) -> bool:
    return (Path(folder) / "state.json").is_file()


def load(folder: Path, head, opt) -> tuple[dict, list]:
    """(state, prompts) from the folder; head and opt set in place (on the head's device)."""
    from safetensors.torch import load as st_load
    folder = Path(folder)
    state = json.loads((folder / "state.json").read_text())
    hs = st_load((folder / "head.safetensors").read_bytes())
    ot = st_load((folder / "adam.safetensors").read_bytes())
    _ensure_opt_state(head, opt)
    snap(head, opt, hs, ot)
    prompts = json.loads(gzip.decompress((folder / "prompts.json.gz").read_bytes()))
    return state, prompts


def resume(folder: Path, head, opt, settings: dict) -> tuple[dict, list]:
    """load(), refused (SystemExit) when the folder's run was made with other settings."""
    state, prompts = load(folder, head, opt)
    if state["settings"] != json.loads(json.dumps(settings)):
        raise SystemExit(f"{folder} holds a run with other settings ({state['settings']}): pass another --out")
    return state, prompts


def _ensure_opt_state(head, opt) -> None:
    """A fresh AdamW has no per-parameter state until its first step: make the slots."""
    for p in head.parameters():
        if p.requires_grad and not opt.state.get(p):
            opt.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                            "exp_avg_sq": torch.zeros_like(p)}
