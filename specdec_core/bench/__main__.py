"""`python -m specdec_core.bench` (run.py)."""
import sys

from .run import main

sys.exit(main())
