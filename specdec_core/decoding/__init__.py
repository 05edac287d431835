"""The decoder: the speculative round loop (speculative.py), plain decoding as the same loop with
no drafts (autoregressive.py), lanes timed turn by turn (interleave.py), token trees (tree.py, rule.py) and the shape rule of tree = "auto" (shape.py)."""
from .autoregressive import autoregressive_generate, stream_autoregressive
from .interleave import interleave
from .order import RoundOrder
from .plan import Plan, Request, parse_plan, parse_request
from .speculative import decode_round, speculative_generate, start_decode, stream_decode, stream_speculative
from .warmup import warm_up

__all__ = ["speculative_generate", "stream_speculative", "autoregressive_generate", "stream_autoregressive",
           "start_decode", "decode_round", "warm_up", "interleave", "stream_decode",
           "Plan", "Request", "parse_plan", "parse_request", "RoundOrder"]
