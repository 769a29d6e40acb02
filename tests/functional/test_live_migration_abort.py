"""Aborting a live migration under way (``novakit.moves.abort``), on both back ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from novakit import exceptions
from novakit.context import RequestContext
from novakit.moves import migrations
from novakit.moves.abort import InvalidMigrationState, MigrationNotFoundForInstance, abort_live_migration
from novakit.placement import api as placement
from novakit.virt.fake import FakeDriver, failure_env_var
from tests.functional.cloud import Cloud, boot

SMALL = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("p1", "u1")


def _held(cloud: Cloud, consumer: str) -> dict[str, dict[str, int]]:
    from sqlalchemy import text

    with cloud.db.engine.connect() as conn:
        names: dict[str, str] = dict(conn.execute(text("SELECT uuid, name FROM resource_providers")).all())
    return {names[rp]: r for rp, r in placement.get_allocations_for_consumer(cloud.db, consumer).items()}


def _migration(cloud: Cloud, server: str) -> dict[str, Any]:
    return migrations.list_migrations(cloud.db, cloud.admin, server=server)[0]


def _admin() -> RequestContext:
    """An admin's request of its own (the abort is another request than the migration's)."""
    return RequestContext.admin()


def _until(what: Any, seconds: float = 10) -> None:
    ends = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < ends, "timed out"
        time.sleep(0.02)


@contextmanager
def _live_migrating(cloud: Cloud, server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A slow live migration of ``server`` in a thread, running on its source: yields its id;
    the migration's flow has ended when the block does."""
    monkeypatch.setenv(failure_env_var(server["host"]), "slow_live_migration")
    errors: list[BaseException] = []

    def run() -> None:
        try:
            cloud.api.act(cloud.admin, server["id"], "live_migrate")
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        _until(lambda: cloud.fake(server["host"]).live_migration_running(server["id"]))
        yield _migration(cloud, server["id"])["id"]
    finally:
        worker.join(30)
    assert not worker.is_alive() and not errors


def test_an_aborted_live_migration_is_cancelled_and_the_server_stays_on_its_host(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    with _live_migrating(cloud, server, monkeypatch) as mig:
        assert _migration(cloud, server["id"])["status"] == "running"
        abort_live_migration(cloud.api, _admin(), "web", mig)
    shown = cloud.api.get(cloud.admin, server["id"])
    assert (shown["status"], shown["host"], shown["task_state"]) == ("ACTIVE", source, None)
    assert "fault" not in shown or not shown["fault"]
    found = _migration(cloud, server["id"])
    assert (found["id"], found["status"]) == (mig, "cancelled")
    assert _held(cloud, server["id"]) == {source: SMALL} and _held(cloud, mig) == {}
    assert cloud.fake(source).list_instances() == {server["id"]: 1}
    assert server["id"] not in cloud.fake(found["dest_compute"]).list_instances()
    done = {a["action"]: a for a in cloud.api.list_actions(cloud.admin, server["id"])}
    cancel = done["live_migration_cancel"]
    assert cancel["finish_time"] is not None
    assert [(e["event"], e["result"]) for e in cancel["events"]] == [
        ("compute_live_migration_abort", "Success")
    ]
    assert done["live-migration"]["finish_time"] is not None
    # Nothing was left claimed: the server migrates again, to the end this time.
    monkeypatch.delenv(failure_env_var(source))
    cloud.api.act(cloud.admin, server["id"], "live_migrate")
    assert cloud.api.get(cloud.admin, server["id"])["host"] != source


def test_an_abort_before_the_source_step_stops_the_migration_there(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Aborted while ``preparing`` (Nova's 2.65): no host job to stop; the flow does not start it."""
    server = boot(cloud, ctx, "web")
    source = server["host"]
    prepare = FakeDriver.pre_live_migration
    refusals: list[BaseException] = []

    def abort_while_preparing(driver: FakeDriver, instance: Any) -> dict[str, Any]:
        mig = _migration(cloud, server["id"])
        assert mig["status"] == "preparing"
        try:
            abort_live_migration(cloud.api, _admin(), server["id"], mig["id"], queued=False)
        except InvalidMigrationState as exc:  # before 2.65: running only
            refusals.append(exc)
        abort_live_migration(cloud.api, _admin(), server["id"], mig["id"])
        return prepare(driver, instance)

    monkeypatch.setattr(FakeDriver, "pre_live_migration", abort_while_preparing)
    cloud.api.act(cloud.admin, server["id"], "live_migrate")
    assert len(refusals) == 1
    shown = cloud.api.get(cloud.admin, server["id"])
    assert (shown["status"], shown["host"], shown["task_state"]) == ("ACTIVE", source, None)
    mig = _migration(cloud, server["id"])
    assert mig["status"] == "cancelled"
    assert _held(cloud, server["id"]) == {source: SMALL} and _held(cloud, mig["id"]) == {}
    done = {a["action"]: a for a in cloud.api.list_actions(cloud.admin, server["id"])}
    assert done["live_migration_cancel"]["finish_time"] is not None
    assert [e["event"] for e in done["live_migration_cancel"]["events"]] == ["compute_live_migration_abort"]
    events = [e["event"] for e in done["live-migration"]["events"]]
    assert "compute_live_migration" not in events  # the source's step never ran


def test_abort_refusals_write_nothing(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    other = boot(cloud, ctx, "db")
    cloud.api.act(cloud.admin, server["id"], "live_migrate")
    finished = _migration(cloud, server["id"])["id"]
    before = cloud.snapshot()
    with pytest.raises(InvalidMigrationState, match="completed"):
        abort_live_migration(cloud.api, _admin(), server["id"], finished)
    with pytest.raises(exceptions.PolicyNotAuthorized):
        abort_live_migration(cloud.api, ctx, "web", finished)
    with pytest.raises(MigrationNotFoundForInstance):
        abort_live_migration(cloud.api, _admin(), server["id"], "0b2a4c3e-0000-4000-8000-000000000000")
    with pytest.raises(MigrationNotFoundForInstance):  # another server's migration
        abort_live_migration(cloud.api, _admin(), other["id"], finished)
    with pytest.raises(exceptions.InstanceNotFound):
        abort_live_migration(cloud.api, _admin(), "nope", finished)
    assert cloud.snapshot() == before
    assert InvalidMigrationState.code == 400 and MigrationNotFoundForInstance.code == 404
