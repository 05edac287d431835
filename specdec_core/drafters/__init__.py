"""Everything that proposes tokens, behind one small interface (base.py: one draft call per
level): a draft model, n-gram prompt lookup, and the distilled feature head that reads the
target's own hidden states."""
from .base import Drafter, Level, Source, crop_cache, fit_vocab
from .model import ModelDrafter
from .ngram import NGramDrafter

__all__ = ["Drafter", "Level", "Source", "crop_cache", "fit_vocab", "ModelDrafter", "NGramDrafter"]
