"""The command line: `python -m specdec_core` (main.py) and its terminal rendering (render.py)."""
