"""Fixtures for the scheduler unit tests (builders live in sched_unit_helpers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from novakit.config import Config, load_config

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def unit_conf() -> Config:
    return load_config(db_url="sqlite:///:memory:")
