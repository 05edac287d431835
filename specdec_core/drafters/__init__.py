"""Everything that proposes tokens, behind one small interface (base.py): a draft model, n-gram
prompt lookup, and the distilled feature head that reads the target's own hidden states."""
from .base import Drafter, Proposal, crop_cache, empty_proposal, fit_vocab
from .model import ModelDrafter
from .ngram import NGramDrafter

__all__ = ["Drafter", "Proposal", "crop_cache", "empty_proposal", "fit_vocab", "ModelDrafter", "NGramDrafter"]
