"""The Trace (schema.py): everything one decode did, round by round — the only thing the app, the
CLI and the reports read; its statistics (stats.py); comparing two decodes (compare.py); the race's sum in seconds (race_sum.py); and the
one classification of every token with its colour and mark (decisions.py)."""
from .compare import (GreedyVerdict, cost_ratios, first_mismatch, greedy_check, logit_gap_at,
                      measured_speedup, run_theory, speedup_reasons, speedup_why, tie_tolerance,
                      timings_unstable)
from ..drafters.base import Source   # who proposed a guess: the trace's vocabulary too
from .race_sum import RaceSum, race_sum, recorded_reference
from .schema import (SCHEMA_ID, Correction, DraftToken, Round, RoundPlan, Trace, TraceConfig, TraceFormatError,
                     TreeNode, json_schema, validate)
from .stats import compute_stats

__all__ = ["Trace", "TraceConfig", "Round", "RoundPlan", "TreeNode", "DraftToken", "Correction", "TraceFormatError", "SCHEMA_ID", "json_schema",
           "validate", "compute_stats", "cost_ratios", "run_theory", "timings_unstable", "speedup_reasons", "speedup_why", "measured_speedup",
           "first_mismatch", "logit_gap_at", "greedy_check", "GreedyVerdict", "tie_tolerance", "RaceSum", "race_sum", "recorded_reference", "Source"]
