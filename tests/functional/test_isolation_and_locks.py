"""Projects see only their own servers; a lock stops everyone but its locker and admins."""

from __future__ import annotations

import pytest

from novakit import exceptions
from novakit.cells.registry import targeting
from novakit.context import RequestContext
from tests.functional.cloud import Cloud, boot


def test_other_projects_servers_look_not_found(
    cloud: Cloud, ctx: RequestContext, other_ctx: RequestContext
) -> None:
    mine = boot(cloud, ctx, "mine")
    theirs = boot(cloud, other_ctx, "theirs")
    assert [s["name"] for s in cloud.api.list(ctx)] == ["mine"]
    assert [s["name"] for s in cloud.api.list(other_ctx)] == ["theirs"]
    for call in (
        lambda: cloud.api.get(ctx, theirs["id"]),
        lambda: cloud.api.get(ctx, "theirs"),
        lambda: cloud.api.stop(ctx, theirs["id"]),
        lambda: cloud.api.delete(ctx, theirs["id"]),
        lambda: cloud.api.list_actions(ctx, theirs["id"]),
    ):
        with pytest.raises(exceptions.InstanceNotFound) as err:
            call()
        assert theirs["id"] in str(err.value) or "theirs" in str(err.value)
    assert cloud.api.get(other_ctx, theirs["id"])["status"] == "ACTIVE"
    # The admin sees both.
    assert {s["name"] for s in cloud.api.list(cloud.admin)} == {"mine", "theirs"}
    assert cloud.api.get(cloud.admin, mine["id"])["project_id"] == ctx.project_id


def test_same_name_in_two_projects_is_fine_but_not_in_one(
    cloud: Cloud, ctx: RequestContext, other_ctx: RequestContext
) -> None:
    boot(cloud, ctx, "web")
    boot(cloud, other_ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.DuplicateName, match="web"):
        cloud.api.create(ctx, {"name": "web", "flavor": "m1.small", "image": "tiny"})
    assert cloud.snapshot() == before


def test_a_lock_refuses_every_non_admin_the_locker_included(cloud: Cloud, ctx: RequestContext) -> None:
    """Nova's check_instance_lock: the lock is a safety catch, lifted before acting."""
    colleague = RequestContext(ctx.project_id, "carol", ["member"])
    server = boot(cloud, ctx, "locked")
    view = cloud.api.lock(ctx, server["id"], "maintenance")
    assert view["locked"] and view["locked_reason"] == "maintenance"
    before = cloud.snapshot()
    for caller in (ctx, colleague):
        for call in (
            lambda c: cloud.api.stop(c, server["id"]),
            lambda c: cloud.api.delete(c, server["id"]),
            lambda c: cloud.api.reboot(c, server["id"], "HARD"),
            lambda c: cloud.api.rebuild(c, server["id"], {"image": "tiny"}),
        ):
            with pytest.raises(exceptions.InstanceIsLocked, match="maintenance"):
                call(caller)
    assert cloud.snapshot() == before
    # Rename checks no lock (as Nova); an admin may act; a member of the project lifts an owner's lock.
    assert cloud.api.rename(colleague, server["id"], "locked-2")["name"] == "locked-2"
    assert cloud.api.stop(cloud.admin, server["id"])["status"] == "SHUTOFF"
    assert cloud.api.unlock(colleague, server["id"])["locked"] is False
    assert cloud.api.start(ctx, server["id"])["status"] == "ACTIVE"


def test_an_admins_lock_is_lifted_only_by_an_admin(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "admin-locked")
    cloud.api.lock(cloud.admin, server["id"])
    with pytest.raises(exceptions.InstanceIsLocked, match="admin"):
        cloud.api.unlock(ctx, server["id"])
    with pytest.raises(exceptions.InstanceIsLocked):
        cloud.api.reboot(ctx, server["id"])
    # The owner locking it again changes nothing: it stays an admin's lock.
    assert cloud.api.lock(ctx, server["id"], "mine now")["locked_reason"] is None
    assert cloud.api.unlock(cloud.admin, server["id"])["locked"] is False
    assert cloud.api.reboot(ctx, server["id"])["status"] == "ACTIVE"


def test_an_admin_of_the_servers_own_project_locks_it_as_its_owner(cloud: Cloud, ctx: RequestContext) -> None:
    local_admin = RequestContext(ctx.project_id, "root-of-a", ["admin"])
    server = boot(cloud, ctx, "own-admin")
    cloud.api.lock(local_admin, server["id"])
    assert cloud.api.unlock(ctx, server["id"])["locked"] is False


def test_a_lock_committed_between_the_check_and_the_write_still_holds(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """The lock as the check read it is in the guarded write's WHERE clause."""
    from novakit.db import api as db_api

    server = boot(cloud, ctx, "raced")
    cloud.api.lock(cloud.admin, server["id"], "locked meanwhile")

    def write(session: object) -> None:
        db_api.instance_update(
            session,  # type: ignore[arg-type]
            server["id"],
            {"task_state": "pausing"},
            expected_task_state=None,
            expected_vm_state="active",
            expected_lock=(False, None),  # what a check before the lock read
        )

    with (
        pytest.raises(exceptions.InstanceIsLocked, match="locked meanwhile"),
        targeting(cloud.db, server["id"]),
    ):
        cloud.db.run_in_transaction(write)
    assert cloud.api.get(ctx, server["id"])["task_state"] is None


def test_non_admins_cannot_manage_flavors_images_or_hosts(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.catalog import flavors, images
    from novakit.fleet import hosts

    before = cloud.snapshot()
    with pytest.raises(exceptions.PolicyNotAuthorized):
        flavors.create(cloud.db, ctx, {"name": "x", "vcpus": 1, "memory_mb": 1})
    with pytest.raises(exceptions.PolicyNotAuthorized):
        images.create(cloud.db, ctx, {"name": "x"})
    with pytest.raises(exceptions.PolicyNotAuthorized):
        hosts.set_disabled(cloud.db, ctx, "compute-1", True, "no")
    assert cloud.snapshot() == before
