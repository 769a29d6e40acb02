"""A database nobody migrated: every face says so and says what to run; the db module migrates it."""

from __future__ import annotations

from pathlib import Path

import pytest

from novakit import exceptions
from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db import migration
from novakit.db.engine import Database


def test_a_database_nobody_migrated_says_what_to_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    conf = load_config(db_url=url, state_dir=tmp_path / "state")
    api = API(Database(url, auto_upgrade=False), conf)  # as a shared PostgreSQL is opened
    with pytest.raises(exceptions.DatabaseNotMigrated) as err:
        api.list(RequestContext.admin())
    said = str(err.value)
    assert "is not migrated (schema revision none" in said and "novakit db upgrade" in said
    assert "db_upgrade playbook" in said

    # Nothing was written: the refusal left the database as empty as it was.
    assert Database(url, auto_upgrade=False).current_revision() is None


def test_the_db_upgrade_playbook_migrates_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    from tests.e2e.runner import run_playbook

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    Path(tmp_path / "shared.db").touch(mode=0o600)
    env = {"NOVAKIT_DB_URL": url, "NOVAKIT_STATE_DIR": str(tmp_path / "state")}
    first = run_playbook("db_upgrade.yml", tmp_path, env)
    out = first.stdout.read()
    assert first.rc == 0, out
    assert f"database at revision {migration.head_revision()} (was none)" in out
    assert Database(url, auto_upgrade=False).current_revision() == migration.head_revision()
    again = run_playbook("db_upgrade.yml", tmp_path, env)
    assert again.rc == 0 and again.stats["changed"] == {}, again.stdout.read()

    member = run_playbook("db_upgrade.yml", tmp_path, {**env, "NOVAKIT_ROLES": "member"})
    assert member.rc != 0 and "Policy does not allow db:upgrade" in member.stdout.read()
