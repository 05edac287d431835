"""One line naming the machine a decode ran on, for a trace's config ("machine"): a recorded race
says where its clocks were read (a 2-core CPU and an H100 give different speedups for one model)."""
from __future__ import annotations

import os
import platform

import torch

from ..kernels.rows import cpu_model as _cpu_model


def describe(device) -> str:
    """'NVIDIA H100 80GB HBM3' on CUDA; on CPU '<cores>-core <arch> CPU (<model>)' with the cores
    torch may use (what bounds its speed), e.g. '2-core x86_64 CPU (Intel(R) Xeon(R) …)'."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    cores = torch.get_num_threads() or os.cpu_count() or 1
    model = _cpu_model()
    return f"{cores}-core {platform.machine() or 'unknown'} CPU" + (f" ({model})" if model else "")
