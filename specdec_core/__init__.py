"""specdec_core: an exact, streaming speculative decoder with a plain baseline and a trace.

    pair = load_pair("smollm2-135m")
    trace = speculative_generate(pair, pair.encode_prompt("Hi"), k=4, temperature=0.0)

Layers (docs/ARCHITECTURE.md): models/ (pairs, loading) → kernels/ (CPU fast path) → drafters/ →
decoding/ (round loop, token trees, shape rule) → trace/ (the record every view reads); costs/ (measured and
predicted costs); bench/, lab/ and cli/ sit on top.

The names below are the public API, and the whole of what the app uses besides `specdec_core.trace`
(tests/test_structure.py keeps it so): load a pair, check a request once, decode (a lane, a race of
lanes taking turns), sweep k, an A/B over a prompt set, the exactness lab's draws, a target pass's costs, and the cost model.
"""
from .version import __version__

from . import data, glossary
from .bench.ab import Arm as ABArm, ab_runs, own_prompts, prompt_sets as ab_prompt_sets, record as ab_record, seeds_for
from .bench.ab_stats import summarise as summarise_ab
from .bench.speed import SpeedRatio, race_ratio, speed_ratio
from .bench.sweep import K_VALUES, best_k_text, k_label, k_name, repeated_lanes, summarise as summarise_sweep, sweep_runs
from .costs import run_costs, theory
from .costs.machine_costs import cost_curve
from .decoding import (autoregressive_generate, interleave, speculative_generate, stream_autoregressive,
                       stream_decode, stream_speculative, warm_up)
from .decoding.exactness import (chi_square, first_token_distributions, sample_plain, sample_speculative,
                                 sample_tree_first)
from .decoding.plan import Plan, Request, parse_plan, parse_request
from .drafters.recycle import RecycleTable
from .decoding.rule import keeps_draft
from .errors import DecodeError, ModelLoadError
from .models import PRESETS, DraftSpec, ModelPair, is_loaded, load_pair, parse_draft, ref_kind
from .models.machine import describe as describe_machine
from .settings import RANGES, SettingsError, check_k, check_prompt_text
from .trace import Trace, TraceFormatError

__all__ = [
    "__version__",
    # a pair and what drafts for it
    "load_pair", "ModelPair", "PRESETS", "is_loaded", "DraftSpec", "parse_draft", "ref_kind", "describe_machine",
    # a request, checked once
    "Plan", "Request", "parse_plan", "parse_request", "RANGES", "SettingsError", "check_k",
    "check_prompt_text",
    # decoding: one lane, and lanes taking turns
    "speculative_generate", "stream_speculative", "autoregressive_generate", "stream_autoregressive",
    "stream_decode", "interleave", "warm_up", "RecycleTable",
    # the k sweep
    "K_VALUES", "sweep_runs", "summarise_sweep", "best_k_text", "k_label", "k_name", "repeated_lanes",
    # an A/B over a prompt set
    "ABArm", "ab_runs", "ab_record", "summarise_ab", "ab_prompt_sets", "own_prompts", "seeds_for",
    # speed with an interval (every speed verdict)
    "SpeedRatio", "speed_ratio", "race_ratio",
    # the exactness lab's draws
    "first_token_distributions", "sample_plain", "sample_speculative", "sample_tree_first", "chi_square",
    "keeps_draft",
    # costs: a target pass measured, a run's costs (α, c, v(m)), the theory
    "cost_curve", "run_costs", "theory",
    # traces, errors, words and bundled files
    "Trace", "TraceFormatError", "ModelLoadError", "DecodeError", "glossary", "data",
]
