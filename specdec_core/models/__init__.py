"""Target/draft pairs: presets (presets.py), what drafts as a value (draft_spec.py), what a reference
names (refs.py), the ModelPair a decode runs on (pair.py), loading HF ids, local folders and the
embedded offline default (loading.py, embedded.py)."""
from .loading import (check_tokenizers, draft_from_target_layers, is_loaded, load_model, load_pair, model_key,
                      resolve_device, resolve_dtype)
from .draft_spec import DISTILLED, LAYERS_PREFIX, NGRAM, DraftSpec, parse_draft
from .pair import ModelPair
from .presets import DEFAULT_PRESET, PRESETS, Preset
from .refs import ref_kind

__all__ = ["load_pair", "load_model", "ModelPair", "PRESETS", "Preset", "DEFAULT_PRESET", "draft_from_target_layers",
           "check_tokenizers", "is_loaded", "model_key", "resolve_device", "resolve_dtype", "NGRAM", "DISTILLED",
           "LAYERS_PREFIX", "DraftSpec", "parse_draft", "ref_kind"]
