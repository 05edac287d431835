"""The package version (one place: the trace config and pyproject read it)."""
__version__ = "0.1.0"
