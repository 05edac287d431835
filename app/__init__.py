"""The Gradio explainer: renders specdec_core Traces (never decodes on its own)."""
from .ui import build_demo, launch_kwargs

__all__ = ["build_demo", "launch_kwargs"]
