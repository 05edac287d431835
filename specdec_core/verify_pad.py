"""Verify-length padding: score a few extra dummy positions when that makes the verify pass faster.

On CPU the cost of a target forward over n new tokens is not monotone in n: the matrix kernels
for 2–3 rows can be slower than for 5 (measured on a 2-core x86 CPU with SmolLM2-135M: n = 3
costs 1.9 single-token steps, n = 5 costs 1.4). Padding the verify input [last, d_1..d_m] with
copies of its last token up to a faster length changes nothing the decoder uses: attention is
causal, so the real positions' logits are identical, only their logits are computed
(`logits_to_keep`), and the padded cache entries are cropped with the rejected drafts.

The plan is measured once per target module in this process (about 2–3 s for a 135M model on CPU),
before any decode's clock starts. GPUs are not padded (their cost is flat in n). Set
SPECDEC_VERIFY_PAD=0 to turn padding off.
"""
from __future__ import annotations

import os
import statistics
import time
import weakref

import torch
from transformers import DynamicCache

from .drafters import crop_cache

N_MAX = 10            # longest verify input considered (k up to 9)
MARGIN = 0.93         # pad only when the longer pass is clearly faster (timings are noisy)
_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # target -> {n: padded n}


def enabled(device_type: str) -> bool:
    return device_type == "cpu" and os.environ.get("SPECDEC_VERIFY_PAD", "1") != "0"


@torch.inference_mode()
def measure_costs(target, vocab_size: int, context: int = 48, reps: int = 3) -> dict:
    """Median seconds of one cached target forward over n = 1..N_MAX new tokens: {n: s}."""
    device = target.get_input_embeddings().weight.device
    gen = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, vocab_size, (1, context), generator=gen).to(device)
    cache = DynamicCache(config=target.config)
    target(ctx, past_key_values=cache, use_cache=True, logits_to_keep=1)
    costs = {}
    for n in range(1, N_MAX + 1):
        x = torch.randint(0, vocab_size, (1, n), generator=gen).to(device)
        times = []
        for _ in range(reps + 1):           # the first pass of each n is a warm-up
            t0 = time.perf_counter()
            target(x, past_key_values=cache, use_cache=True)
            times.append(time.perf_counter() - t0)
            crop_cache(cache, context)
        costs[n] = statistics.median(times[1:])
    return costs


def plan_from_costs(costs: dict, margin: float = MARGIN) -> dict:
    """{n: the length to run instead}: the cheapest n' ≥ n when clearly cheaper than n. n = 1
    (a plain step) is never padded."""
    plan = {}
    for n in costs:
        best = min((m for m in costs if m >= n), key=lambda m: costs[m])
        plan[n] = best if n > 1 and costs[best] < margin * costs[n] else n
    return plan


def padded_length(target, n: int, vocab_size: int) -> int:
    """The verify length to run for n real positions (n itself when padding is off or useless)."""
    device_type = target.get_input_embeddings().weight.device.type
    if not enabled(device_type) or n <= 1 or n > N_MAX:
        return n
    try:
        plan = _PLANS.get(target)
    except TypeError:              # not weakly referenceable: no padding
        return n
    if plan is None:
        plan = _PLANS[target] = plan_from_costs(measure_costs(target, vocab_size))
    return plan.get(n, n)


def calibrate(target, vocab_size: int) -> None:
    """Measure the plan now (outside any timed region) if it will be needed."""
    padded_length(target, 2, vocab_size)
