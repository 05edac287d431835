"""`gpu`: where the app's model work runs. On a Hugging Face ZeroGPU Space, `spaces.GPU` (it holds
a GPU for the call, in a process of its own); everywhere else, the app's one model thread
(app.model_thread: one OpenMP team for all torch work, as fast as the CLI's main thread).

Applied to the model work only: `handlers.decode_race` (loading, warm-up and both lanes) and the
teaching views' `teach.lab.lab_distributions` / `measured_cost_curve`, the Debugger's
`debug.runs.sweep` / `two_drafts` / `ab`. Page rendering happens outside them, so a Space holds its
GPU only while models run; the exactness lab's sampling from two vectors (torch, no model) runs on
the model thread without a GPU (`teach.lab.draw_counts`). Outside a ZeroGPU Space, `spaces.GPU`
returns the function unchanged (tested with `spaces` installed), and the model thread takes it.
"""
from .model_thread import MODEL_THREAD

try:
    import spaces

    _zero_gpu = spaces.GPU(duration=180)
except ImportError:
    _zero_gpu = None


def gpu(fn):
    """fn on a ZeroGPU Space's GPU where there is one, else on the app's model thread."""
    held = _zero_gpu(fn) if _zero_gpu is not None else fn
    return held if held is not fn else MODEL_THREAD.wrap(fn)
