"""The bench's kernel section: what one target pass costs with each kernel set, against the floor.

For every pair given (the fast-path pair and its stock copy): the pass-cost table v(k) from the
one cost measurement (costs.measure_pass_costs), the split of a 1-token step and of a verify pass
into linears / attention / norms / lm_head / other, and ms per step against the weight-streaming
limit: the bytes of weight matrices a step must read ÷ the read bandwidth measured here, now,
with the same thread count.
"""
from __future__ import annotations

import torch

from ..costs.machine_costs import measure_pass_costs, step_breakdown, step_vs_floor
from ..kernels.fastpath import kernels_of


def measure_kernels(pairs: dict, n_max: int, reps: int = 7) -> dict:
    """pairs: {name: ModelPair or None}; n_max: longest pass (k_max + 1). Returns a report dict."""
    pairs = {name: p for name, p in pairs.items() if p is not None}
    n_max = max(n_max, 2)
    out = {"threads": torch.get_num_threads(), "kernels": {}}
    for name, pair in pairs.items():
        costs = measure_pass_costs(pair.target, pair.vocab_size, n_max=n_max, reps=reps)
        out["kernels"][name] = {
            "label": kernels_of(pair.target).label(),
            "pass_costs": costs.to_dict(),
            **step_vs_floor(pair.target, pair.vocab_size),
            "breakdown_ms": {"step (1 token)": step_breakdown(pair.target, pair.vocab_size, 1),
                             f"verify ({n_max} tokens)": step_breakdown(pair.target, pair.vocab_size, n_max)}}
    return out


def markdown(section: dict) -> list[str]:
    """The kernel section of report.md."""
    if not section:
        return []
    lines = ["## Kernels: cost of a target pass, and the weight-streaming floor", "",
             "Step = one cached 1-token target forward; floor = bytes of the weight matrices a step "
             "reads (each distinct matrix once) ÷ the read bandwidth of a sum over a buffer ≫ the "
             f"last-level cache, {section['threads']} threads. Measured in pairs (a bandwidth read, "
             "then a step; medians of 9), because a shared machine's bandwidth moves during a run. "
             "v(k) = one pass over k + 1 tokens ÷ one step (medians of 7, lengths interleaved).", "",
             "| kernels | step ms | weight MB | read GB/s (range) | floor ms | step ÷ floor | " +
             " | ".join(f"v({k})" for k in _ks(section)) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(_ks(section))]
    for name, k in section["kernels"].items():
        v = k["pass_costs"]["v"]
        lo, hi = k["read_bandwidth_range_gb_s"]
        label = k["label"].replace("|", "\\|")       # a pipe would split the Markdown cell
        lines.append(f"| {label} | {k['step_ms']:.1f} | {k['weight_bytes'] / 1e6:.0f} | "
                     f"{k['read_bandwidth_gb_s']:.0f} ({lo:.0f}–{hi:.0f}) | "
                     f"{k['floor_ms']:.1f} | {k['step_over_floor']:.2f} | " +
                     " | ".join(f"{v[str(j)]:.2f}" if str(j) in v else "–" for j in _ks(section)) + " |")
    lines += ["", "Where a pass spends its time (ms, medians; module hooks add a few µs each):", "",
              "| kernels | pass | linears | attention | norms | lm_head | other | total |",
              "|---|---|---|---|---|---|---|---|"]
    for name, k in section["kernels"].items():
        for what, b in k["breakdown_ms"].items():
            lines.append(f"| {name} | {what} | " + " | ".join(
                f"{b[c]:.2f}" for c in ("linears", "attention", "norms", "lm_head", "other", "total")) + " |")
    return lines + [""]


def _ks(section: dict) -> list[int]:
    ks = set()
    for k in section["kernels"].values():
        ks |= {int(j) for j in k["pass_costs"]["v"]}
    return sorted(ks)
