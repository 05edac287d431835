"""`python -m specdec_core.lab extract | train | ablate | prompts` (train.py)."""
from .train import main

main()
