"""Errors with messages meant for people (the CLI and the app show them as they are)."""


class ModelLoadError(ValueError):
    """A model, tokenizer or pair that cannot be loaded or used; the message says why."""


class DecodeError(RuntimeError):
    """A decode that cannot go on (the target produced NaN or infinite logits); the message says where."""
