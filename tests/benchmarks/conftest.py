"""The benchmarks, run small: `benchmarks/` lives at the repository root.

It is not an installed package, so its tests put the root on `sys.path`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
