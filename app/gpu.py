"""`gpu`: Hugging Face ZeroGPU's `spaces.GPU` when the `spaces` package is importable, else identity.

Applied to the model work only: `handlers.decode_race` (loading, warm-up and both lanes) and the
teaching views' `teach.lab.lab_distributions` / `measured_cost_curve`, the Debugger's
`debug.runs.sweep` / `two_drafts` / `ab`. Page rendering (and the
exactness lab's sampling from two vectors) happens outside them, so a Space holds its GPU only
while models run. Outside a ZeroGPU
Space, `spaces.GPU` returns the function unchanged (tested with `spaces` installed).
"""
try:
    import spaces

    gpu = spaces.GPU(duration=180)
except ImportError:
    def gpu(fn):
        return fn
