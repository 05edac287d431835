"""Target/draft pairs: presets, loading (HF ids, local folders, the embedded offline default),
and the ModelPair a decode runs on."""
from .loading import (DEFAULT_PRESET, PRESETS, ModelPair, check_tokenizers, draft_from_target_layers,
                      load_model, load_pair)

__all__ = ["load_pair", "load_model", "ModelPair", "PRESETS", "DEFAULT_PRESET", "draft_from_target_layers",
           "check_tokenizers"]
