"""`python -m specdec_core`: the command line (cli/main.py)."""
import sys

from .cli.main import main

sys.exit(main())
