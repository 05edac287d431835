"""`gpu`: Hugging Face ZeroGPU's `spaces.GPU` when the `spaces` package is importable, else identity."""
try:  # pragma: no cover - only on Spaces
    import spaces

    gpu = spaces.GPU(duration=180)
except ImportError:
    def gpu(fn):
        return fn
