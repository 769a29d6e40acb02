"""A server deleted while a move of it was under way (its owner gone half way): every guest of it
goes, on the source and on the destination, and every claim with them (issue 25, item 3)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.moves import migrations
from tests.functional.cloud import Cloud, boot


class _Killed(BaseException):
    """The owner's process dies here (not an error it could handle)."""


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("p1", "u1")


def _guests(cloud: Cloud, host: str) -> set[str]:
    return set(cloud.fake(host).list_instances())


def _allocations(cloud: Cloud) -> list[tuple[Any, ...]]:
    with cloud.db.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT consumer_id, resource_class FROM allocations"))]


def test_deleting_a_resize_killed_after_the_destination_built_removes_both_guests_and_every_claim(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    real_update = db_api.instance_update

    def update(session: Any, uuid: str, values: dict[str, Any], **kw: Any) -> Any:
        if values.get("vm_state") == "resized":  # the destination has finished: the last write
            raise _Killed("before the last write")
        return real_update(session, uuid, values, **kw)

    monkeypatch.setattr(db_api, "instance_update", update)
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    monkeypatch.undo()
    mig = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])[0]
    dest = mig["dest_compute"]
    assert dest and dest != source
    assert server["id"] in _guests(cloud, dest)  # the destination built its guest

    cloud.api.act(ctx, "web", "delete")

    assert [s["id"] for s in cloud.api.list(cloud.admin)] == []
    assert server["id"] not in _guests(cloud, source)
    assert server["id"] not in _guests(cloud, dest)
    assert _allocations(cloud) == []
    mig = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])[0]
    assert mig["status"] not in migrations.IN_PROGRESS


def test_deleting_a_live_migration_killed_after_the_guest_moved_removes_it_and_every_claim(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    real_update = db_api.instance_update

    def update(session: Any, uuid: str, values: dict[str, Any], **kw: Any) -> Any:
        if "host" in values and kw.get("expected_task_state") == ["migrating"]:  # the guest has landed
            raise _Killed("before the last write")
        return real_update(session, uuid, values, **kw)

    monkeypatch.setattr(db_api, "instance_update", update)
    with pytest.raises(_Killed):
        cloud.api.act(cloud.admin, server["id"], "live_migrate")
    monkeypatch.undo()
    dest = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])[0]["dest_compute"]
    assert dest and dest != source
    assert server["id"] in _guests(cloud, dest)  # the guest runs there now; the records say source

    cloud.api.act(ctx, "web", "delete")

    assert [s["id"] for s in cloud.api.list(cloud.admin)] == []
    assert server["id"] not in _guests(cloud, source) | _guests(cloud, dest)
    assert _allocations(cloud) == []
    mig = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])[0]
    assert mig["status"] not in migrations.IN_PROGRESS
