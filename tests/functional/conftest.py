"""Fixtures for functional tests: a small cloud on both back ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from novakit.db.engine import Database
from tests.functional.cloud import Cloud, make_cloud


@pytest.fixture
def cloud(db: Database, tmp_path: Path) -> Cloud:
    return make_cloud(db, tmp_path)
