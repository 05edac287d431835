"""specdec_core: an exact, streaming speculative decoder with a plain baseline and a trace.

    pair = load_pair("smollm2-135m")
    trace = speculative_generate(pair, pair.encode_prompt("Hi"), k=4, temperature=0.0)
"""
__version__ = "0.1.0"

from .autoregressive import autoregressive_generate, stream_autoregressive
from . import fastpath
from .errors import ModelLoadError
from .models import PRESETS, ModelPair, load_pair
from .speculative import speculative_generate, stream_speculative
from .trace import Trace, TraceFormatError

__all__ = ["load_pair", "ModelPair", "PRESETS", "speculative_generate", "stream_speculative",
           "autoregressive_generate", "stream_autoregressive", "Trace", "TraceFormatError",
           "ModelLoadError"]
