"""What decoding costs: measured on this machine (machine_costs.py: one pass-cost measurement, the
weight-streaming floor) and predicted by the theory (theory.py: E[τ], speedup, best k)."""
from .machine_costs import PassCosts, measure_pass_costs, pass_costs, step_breakdown, step_vs_floor, weight_bytes
from .theory import K_HORIZON, best_k, expected_tokens, predicted_speedup

__all__ = ["PassCosts", "measure_pass_costs", "pass_costs", "step_breakdown", "step_vs_floor", "weight_bytes",
           "K_HORIZON", "best_k", "expected_tokens", "predicted_speedup"]
