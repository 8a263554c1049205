"""Makes the checkout's ``bench`` package importable however pytest is started (``pytest`` or
``python -m pytest``), and provides small helpers shared by the harness tests."""
from __future__ import annotations

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
