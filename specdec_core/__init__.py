"""specdec_core: an exact, streaming speculative decoder with a plain baseline and a trace.

    pair = load_pair("smollm2-135m")
    trace = speculative_generate(pair, pair.encode_prompt("Hi"), k=4, temperature=0.0)

Layers (docs/ARCHITECTURE.md): models/ (pairs, loading) → kernels/ (CPU fast path) → drafters/ →
decoding/ (round loop, token trees, shape rule) → trace/ (the record every view reads); costs/ (measured and
predicted costs); bench/, lab/ and cli/ sit on top.
"""
from .version import __version__

from .decoding import (autoregressive_generate, interleave, speculative_generate, stream_autoregressive,
                       stream_speculative)
from .errors import ModelLoadError
from .models import PRESETS, ModelPair, load_pair
from .trace import Trace, TraceFormatError

__all__ = ["__version__", "load_pair", "ModelPair", "PRESETS", "speculative_generate", "stream_speculative",
           "autoregressive_generate", "stream_autoregressive", "interleave", "Trace", "TraceFormatError",
           "ModelLoadError"]
