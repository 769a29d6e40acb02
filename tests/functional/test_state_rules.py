"""The state table's checks beyond vm_state and task_state, against Nova's compute API (issue 25,
item 11): a move that needs its host up, an action on a server never launched, evacuation over a
running task, volumes in resized and shelved, and a snapshot of a locked server."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from novakit import exceptions
from novakit.cells.registry import UNSCHEDULED
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.fleet import hosts
from tests.functional.cloud import Cloud, boot


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("p1", "u1")


def _force(cloud: Cloud, uuid: str, **values: Any) -> None:
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        db_api.instance_update(session, uuid, values)


@pytest.mark.parametrize("action", ["resize", "migrate"])
def test_a_cold_move_is_refused_while_its_host_is_down(
    cloud: Cloud, ctx: RequestContext, action: str
) -> None:
    """Nova's resize (and cold migration) carries check_instance_host(check_is_up=True)."""
    server = boot(cloud, ctx, "web")
    hosts.set_forced_down(cloud.db, cloud.admin, server["host"], True, reason="rack 4 lost power")
    before = cloud.snapshot()
    options = {"flavor": "m1.large"} if action == "resize" else {}
    with pytest.raises(exceptions.InstanceHostDown, match="rack 4 lost power") as refused:
        cloud.api.act(cloud.admin, server["id"], action, options)
    assert action in str(refused.value) and server["host"] in str(refused.value)
    assert cloud.snapshot() == before
    # Its host back, the same move goes ahead.
    hosts.set_forced_down(cloud.db, cloud.admin, server["host"], False)
    cloud.api.act(cloud.admin, server["id"], action, options)
    assert cloud.api.get(cloud.admin, server["id"])["status"] == "VERIFY_RESIZE"


@pytest.mark.parametrize(
    ("action", "options"),
    [("stop", {}), ("rebuild", {"image": "tiny-2"}), ("rescue", {}), ("reboot", {"reboot_type": "HARD"})],
)
def test_a_server_never_launched_refuses_what_needs_a_launch(
    cloud: Cloud, ctx: RequestContext, action: str, options: dict[str, Any]
) -> None:
    """Nova's must_have_launched reads launched_at, not the host: a server whose build never
    finished on its host has nothing there to stop, rebuild or rescue."""
    server = boot(cloud, ctx, "web")
    _force(cloud, server["id"], vm_state="error", launched_at=None)
    before = cloud.snapshot()
    with pytest.raises(exceptions.InstanceNeverLaunched, match="never launched") as refused:
        cloud.api.act(ctx, "web", action, options)
    assert action.split("_")[0] in str(refused.value)
    assert cloud.snapshot() == before
    # Delete, lock and rename are not guarded by a launch, as in Nova.
    cloud.api.act(ctx, "web", "lock")
    cloud.api.act(ctx, "web", "unlock")
    cloud.api.act(ctx, "web", "rename", {"name": "web-2"})
    cloud.api.act(ctx, "web-2", "delete")
    assert cloud.api.get(cloud.admin, server["id"], deleted=True)["status"] == "DELETED"


def test_evacuate_takes_a_server_whatever_task_its_dead_host_left(cloud: Cloud, ctx: RequestContext) -> None:
    """Nova's evacuate checks no task state: the task a dead host was running never ends."""
    server = boot(cloud, ctx, "web")
    _force(cloud, server["id"], task_state="powering-off")
    hosts.set_forced_down(cloud.db, cloud.admin, server["host"], True)
    cloud.api.act(cloud.admin, server["id"], "evacuate")
    shown = cloud.api.get(cloud.admin, server["id"])
    assert (shown["status"], shown["task_state"]) == ("ACTIVE", None)
    assert shown["host"] != server["host"]


def test_the_owner_snapshots_a_locked_server(cloud: Cloud, ctx: RequestContext) -> None:
    """Nova's snapshot has no lock check; a locked server still refuses a stop."""
    boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "lock")
    with pytest.raises(exceptions.InstanceIsLocked):
        cloud.api.act(ctx, "web", "stop")
    cloud.api.act(ctx, "web", "create_image", {"name": "web-snap"})
    shown = cloud.api.get(ctx, "web")
    assert (shown["status"], shown["locked"]) == ("ACTIVE", True)
    assert [a["action"] for a in cloud.api.list_actions(ctx, "web")][-1] == "createImage"


def test_a_volume_attached_in_verify_resize_stays_with_a_confirm_and_blocks_a_revert(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """Nova attaches volumes in resized; here a volume lives in one host's pool, so the server
    may confirm (it stays where the volume is) but not revert (its old host lacks it)."""
    from novakit import quota
    from novakit.compute import volume_attach
    from novakit.volume import volumes

    for resource in ("volumes", "gigabytes"):
        quota.set_quota(cloud.db, ctx.project_id, resource, -1)
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    resized = cloud.api.get(cloud.admin, server["id"])
    assert resized["status"] == "VERIFY_RESIZE"
    vol = volumes.create(cloud.api.conductor, ctx, "data", 1, host=resized["host"])
    volume_attach.attach(cloud.api, ctx, server["id"], vol["id"])
    with cloud.db.engine.connect() as conn:
        status = conn.execute(text("SELECT status FROM volumes WHERE uuid = :v"), {"v": vol["id"]}).scalar()
    assert status == "in-use"
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="volumes attached"):
        cloud.api.act(ctx, "web", "revert_resize")
    assert cloud.snapshot() == before
    cloud.api.act(ctx, "web", "confirm_resize")
    shown = cloud.api.get(cloud.admin, server["id"])
    assert (shown["status"], shown["host"]) == ("ACTIVE", resized["host"])
