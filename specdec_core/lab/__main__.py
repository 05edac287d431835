"""`python -m specdec_core.lab extract | train | ablate | prompts` (cli.py)."""
from .cli import main

main()
