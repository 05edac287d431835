"""The benchmark: ours vs transformers on one pair, one device, one interleaved run.

run.py (the command and the schedule), lanes.py (what is timed), stats.py (medians, ratios,
theory), kernel_costs.py (pass costs and the weight-streaming floor), report.py (JSON, Markdown,
Plotly)."""
from .run import check_greedy, load_prompts, main, parse_sweep, run_bench

__all__ = ["run_bench", "check_greedy", "load_prompts", "parse_sweep", "main"]
