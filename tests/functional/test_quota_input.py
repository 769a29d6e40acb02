"""A quota limit and the project it is for are checked before anything is written (issue 25
item 14): SQLite's raw overflow text, a project named with a newline, or an empty one that
silently meant the caller's own, never reach the database."""

from __future__ import annotations

import pytest

from novakit import exceptions, quota
from novakit.db.engine import Database
from tests.functional.cloud import Cloud


@pytest.mark.parametrize(
    ("project", "limit", "field", "rule"),
    [
        ("team-a", 2**63, "quota instances", "0 to 2147483647"),
        ("team-a", 2**31, "quota instances", "0 to 2147483647"),
        ("team-a", -2, "quota instances", "-1 (unlimited)"),
        ("team-a", True, "quota instances", "-1 (unlimited)"),
        ("team\na", 5, "project", "control characters"),
        ("", 5, "project", "1 to 255"),
        (" team-a", 5, "project", "whitespace"),
    ],
)
def test_a_bad_limit_or_project_is_refused_and_nothing_is_written(
    cloud: Cloud, db: Database, project: str, limit: int, field: str, rule: str
) -> None:
    before = cloud.snapshot()
    for dry_run in (True, False):
        with pytest.raises(exceptions.ValidationError) as refused:
            quota.set_quota(db, project, "instances", limit, dry_run=dry_run)
        assert refused.value.field == field and rule in str(refused.value)
    assert cloud.snapshot() == before


def test_the_largest_limit_is_kept_and_a_dry_run_writes_nothing(cloud: Cloud, db: Database) -> None:
    before = cloud.snapshot()
    quota.set_quota(db, "team-a", "instances", 2**31 - 1, dry_run=True)
    assert cloud.snapshot() == before
    quota.set_quota(db, "team-a", "instances", 2**31 - 1)
    assert quota.get_quota_usage(db, cloud.conf, "team-a")["instances"]["limit"] == 2**31 - 1
