"""Puts this directory on the import path so the tests can import their builders from sched_fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
