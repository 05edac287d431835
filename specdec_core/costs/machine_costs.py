"""What a target pass costs on this machine: the one measurement the shape rule, the bench and the
app share, and the physical floor to hold it against.

v(k), the cost of a verify pass over k drafts (k + 1 new tokens) in single-token steps, decides
whether speculation can win at all. `measure_pass_costs` times one cached target forward over
1..n_max new tokens (medians after a warm-up, the lengths interleaved so drift falls on all alike).
A step mostly reads weights: `weight_bytes` (each distinct matrix once, a tied matrix once) ÷
the read bandwidth (a read-only reduction over a buffer far larger than the last-level cache,
with the same thread count) is the time a step cannot beat (`step_vs_floor` measures both in pairs,
since the bandwidth a shared machine gives moves by ±30 % within minutes). `step_breakdown`
splits a pass into linears / attention / norms / lm_head / other with module hooks.
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from ..drafters.base import crop_cache
from ..kernels.fastpath import PackedLinear, kernels_of
from ..kernels.rows import last_level_cache_bytes
from ..registry import REGISTRY

N_MAX = 10          # longest pass measured by default (k up to 9)
CONTEXT = 64        # tokens already in the cache when a pass is timed


@dataclass
class PassCosts:
    """Median seconds of one cached target forward over n new tokens, for n = 1..n_max."""
    seconds: dict                  # {n: s}
    context: int = CONTEXT
    kernels: str = ""
    threads: int = field(default_factory=torch.get_num_threads)

    def v(self, k: int) -> float:
        """Verify pass over k drafts (k + 1 tokens) in single-token steps."""
        return self.seconds[k + 1] / self.seconds[1]

    def v_table(self) -> dict:
        """{k: v(k)} for every k measured."""
        return {n - 1: self.v(n - 1) for n in sorted(self.seconds) if n > 1}

    def to_dict(self) -> dict:
        return {"seconds": {str(n): s for n, s in sorted(self.seconds.items())}, "context": self.context,
                "kernels": self.kernels, "threads": self.threads,
                "v": {str(k): v for k, v in self.v_table().items()}}


@torch.inference_mode()
def measure_pass_costs(target, vocab_size: int, n_max: int = N_MAX, context: int = CONTEXT,
                       reps: int = 5, progress=None) -> PassCosts:
    """Time one target forward over n = 1..n_max new tokens on a `context`-token KV cache.

    Random token ids (the cost does not depend on which tokens); the cache is cropped back after
    every pass. One warm-up round, then `reps` rounds over all n (each starting at another n); each n
    keeps its median."""
    cache, gen = _primed_cache(target, vocab_size, context, seed=0)
    inputs = {n: _random_ids(target, gen, vocab_size, n) for n in range(1, n_max + 1)}
    times = defaultdict(list)
    ns = list(inputs)
    for rep in range(reps + 1):
        # Each rep starts at another length: whatever runs between reps (a progress update, a
        # page redraw) does not always land on the same n.
        for n in ns[rep % len(ns):] + ns[: rep % len(ns)]:
            seconds = _timed_pass(target, inputs[n], cache, context)
            if rep > 0:                                          # round 0 warms up
                times[n].append(seconds)
        if progress:
            progress((rep + 1) / (reps + 1), "measuring the cost of a target pass")
    return PassCosts({n: statistics.median(t) for n, t in times.items()}, context,
                     kernels_of(target).label())


def _random_ids(target, gen: torch.Generator, vocab_size: int, n: int) -> torch.Tensor:
    """[1, n] token ids drawn on the CPU (the same ids on every device), moved to the model's
    device. Which tokens does not matter for the cost of a pass."""
    ids = torch.randint(0, vocab_size, (1, n), generator=gen, device="cpu")
    return ids.to(target.get_input_embeddings().weight.device)


def _primed_cache(target, vocab_size: int, context: int, seed: int) -> tuple:
    """(KV cache holding `context` random tokens, the generator that drew them): the state every
    timed pass starts from."""
    gen = torch.Generator().manual_seed(seed)
    cache = DynamicCache(config=target.config)
    target(_random_ids(target, gen, vocab_size, context), past_key_values=cache, use_cache=True,
           logits_to_keep=1)
    return cache, gen


def _timed_pass(target, x: torch.Tensor, cache, context: int) -> float:
    """Seconds of one cached forward over x (every position's logits, as a verify pass); the
    cache is cropped back to `context` afterwards."""
    device = x.device
    _sync(device)
    t0 = time.perf_counter()
    target(x, past_key_values=cache, use_cache=True)
    _sync(device)
    seconds = time.perf_counter() - t0
    crop_cache(cache, context)
    return seconds


def pass_costs(target, vocab_size: int) -> PassCosts:
    """measure_pass_costs, once per target module in this process (about 1 s for a 135M model on
    CPU); call it before a timed region starts."""
    return REGISTRY.attachment(target, "pass_costs", lambda: measure_pass_costs(target, vocab_size))


def cost_curve(target, vocab_size: int, n_max: int = 12, progress=None) -> dict:
    """What the app's cost-of-a-pass chart shows, measured once per target module (cached):
    {"costs": PassCosts.to_dict() over 1..n_max new tokens, "floor": step_vs_floor(...)}.
    Seconds to a few seconds: call it where no lane is being timed."""
    def make() -> dict:
        costs = measure_pass_costs(target, vocab_size, n_max=n_max, reps=7,
                                   progress=(lambda f, d: progress(0.8 * f, d)) if progress else None)
        if progress:
            progress(0.85, "measuring the weight-streaming floor")
        return {"costs": costs.to_dict(), "floor": step_vs_floor(target, vocab_size)}
    return REGISTRY.attachment(target, f"cost_curve_{n_max}", make)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- the physical floor --------------------------------------------------------------------------
def weight_bytes(model) -> int:
    """Bytes of the weight matrices one pass reads: every linear layer's matrix, each distinct
    storage once (a matrix tied to the input embedding is read once, by the output layer). The
    embedding lookup itself reads only a few rows and is not counted."""
    seen, total = set(), 0
    for mod in model.modules():
        if not isinstance(mod, torch.nn.Linear):   # a fast-path PackedLinear is one too
            continue
        key, n = mod.weight.data_ptr(), mod.weight.numel() * mod.weight.element_size()
        if key not in seen:
            seen.add(key)
            total += n
    return total


def _read_buffer(device="cpu") -> torch.Tensor:
    """A buffer ≥ 16× the last-level cache (at least 512 MiB): reading it cannot hit the cache."""
    n_bytes = max(512 << 20, 16 * last_level_cache_bytes())
    return torch.ones(n_bytes // 4, dtype=torch.float32, device=device)


def _read_once(buf: torch.Tensor) -> float:
    """Bytes per second of one read-only reduction (sum) over buf."""
    _sync(buf.device)
    t0 = time.perf_counter()
    buf.sum()
    _sync(buf.device)
    return buf.numel() * buf.element_size() / (time.perf_counter() - t0)


def read_bandwidth(device, reps: int = 5) -> float:
    """Median bytes per second of `reps` reads of the floor's buffer on `device`, after a warm-up
    read (the floor = weight_bytes ÷ this; step_vs_floor pairs each read with a step instead)."""
    buf = _read_buffer(device)
    _read_once(buf)
    return statistics.median(_read_once(buf) for _ in range(reps))


@torch.inference_mode()
def step_vs_floor(target, vocab_size: int, reps: int = 9, context: int = CONTEXT) -> dict:
    """A 1-token step against the weight-streaming floor, measured in pairs: each rep reads the
    bandwidth buffer once and times one step right after, so both see the same load on a shared
    machine. ratio = median over reps of step ÷ (weight bytes ÷ that rep's bandwidth)."""
    n_bytes = weight_bytes(target)
    buf = _read_buffer(target.get_input_embeddings().weight.device)
    cache, gen = _primed_cache(target, vocab_size, context, seed=2)
    x = _random_ids(target, gen, vocab_size, 1)
    rows = []
    for rep in range(reps + 1):
        bandwidth = _read_once(buf)
        step_s = _timed_pass(target, x, cache, context)
        if rep > 0:                      # rep 0 warms up
            rows.append((step_s, bandwidth, step_s * bandwidth / n_bytes))
    steps, bws, ratios = zip(*rows)
    return {"step_ms": 1e3 * statistics.median(steps), "weight_bytes": n_bytes,
            "read_bandwidth_gb_s": statistics.median(bws) / 1e9,
            "read_bandwidth_range_gb_s": [min(bws) / 1e9, max(bws) / 1e9],
            "floor_ms": 1e3 * n_bytes / statistics.median(bws), "step_over_floor": statistics.median(ratios)}


# -- where a pass spends its time ----------------------------------------------------------------
def _category(name: str, mod, lm_head) -> str:
    if mod is lm_head:
        return "lm_head"
    if isinstance(mod, (torch.nn.Linear, PackedLinear)):
        return "linears"
    kind = type(mod).__name__
    if kind.endswith(("RMSNorm", "LayerNorm")):
        return "norms"
    if name.endswith("self_attn") or kind.endswith("Attention"):
        return "attention"
    return ""


@torch.inference_mode()
def step_breakdown(target, vocab_size: int, n_tokens: int = 1, context: int = CONTEXT,
                   reps: int = 5) -> dict:
    """Milliseconds of one cached pass over n_tokens, split by module hooks into linears (all
    but lm_head), attention (the attention modules minus their own linears: rotary, cache, SDPA),
    norms, lm_head and other (embedding, MLP activations, residuals, masks, Python). Medians.
    The hooks cost a few µs each; "total" is the hooked pass."""
    lm_head = target.get_output_embeddings()
    cats = {mod: c for name, mod in target.named_modules() if (c := _category(name, mod, lm_head))}
    inside_attention = {m for a, c in cats.items() if c == "attention" for m in a.modules() if m is not a}
    spent, starts, handles = defaultdict(float), {}, []
    for mod, cat in cats.items():
        handles.append(mod.register_forward_pre_hook(lambda m, a: starts.__setitem__(m, time.perf_counter())))

        def post(m, a, o, cat=cat):
            dt = time.perf_counter() - starts.pop(m)
            spent[cat] += dt
            if cat == "linears" and m in inside_attention:
                spent["attention"] -= dt       # attention's own projections count as linears
        handles.append(mod.register_forward_hook(post))
    cache, gen = _primed_cache(target, vocab_size, context, seed=1)
    x = _random_ids(target, gen, vocab_size, n_tokens)
    rows = []
    try:
        for rep in range(reps + 1):
            spent.clear()
            total = _timed_pass(target, x, cache, context)
            if rep > 0:
                row = {c: spent.get(c, 0.0) for c in ("linears", "attention", "norms", "lm_head")}
                row["other"] = total - sum(row.values())
                row["total"] = total
                rows.append(row)
    finally:
        for h in handles:
            h.remove()
    return {c: 1e3 * statistics.median(r[c] for r in rows) for c in rows[0]}
