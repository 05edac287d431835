"""The kernels' environment switches, each on unless set to 0, false, off or no:
SPECDEC_FAST_PATH (fastpath.py: prepacked matrices), SPECDEC_DRAFT_BF16 (a draft's packs in bfloat16),
SPECDEC_PAD_ROWS (rows.py: few-row products padded where faster)."""
from __future__ import annotations

import os


def on(name: str) -> bool:
    """The switch `name` is on: unset, or set to anything but 0 / false / off / no."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "off", "no")
