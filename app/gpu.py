"""`gpu`: Hugging Face ZeroGPU's `spaces.GPU` when the `spaces` package is importable, else identity.

Applied to exactly one function, `handlers.decode_race` (loading, warm-up and both lanes): page
rendering happens outside it, so a Space holds its GPU only while models run. Outside a ZeroGPU
Space, `spaces.GPU` returns the function unchanged (tested with `spaces` installed).
"""
try:
    import spaces

    gpu = spaces.GPU(duration=180)
except ImportError:
    def gpu(fn):
        return fn
