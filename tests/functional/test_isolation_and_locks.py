"""Projects see only their own servers; a lock stops everyone but its locker and admins."""

from __future__ import annotations

import pytest

from novakit import exceptions
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


def test_lock_refuses_everyone_but_the_locker_and_admins(cloud: Cloud, ctx: RequestContext) -> None:
    colleague = RequestContext(ctx.project_id, "carol", ["member"])
    server = boot(cloud, ctx, "locked")
    view = cloud.api.lock(ctx, server["id"], "maintenance")
    assert view["locked"] and view["locked_reason"] == "maintenance"
    before = cloud.snapshot()
    for call in (
        lambda: cloud.api.stop(colleague, server["id"]),
        lambda: cloud.api.delete(colleague, server["id"]),
        lambda: cloud.api.rename(colleague, server["id"], "other"),
        lambda: cloud.api.unlock(colleague, server["id"]),
    ):
        with pytest.raises(exceptions.InstanceIsLocked, match="maintenance"):
            call()
    assert cloud.snapshot() == before
    # The locker may act, and so may an admin.
    assert cloud.api.stop(ctx, server["id"])["status"] == "SHUTOFF"
    assert cloud.api.start(cloud.admin, server["id"])["status"] == "ACTIVE"
    assert cloud.api.unlock(ctx, server["id"])["locked"] is False
    assert cloud.api.stop(colleague, server["id"])["status"] == "SHUTOFF"


def test_an_admins_lock_is_lifted_only_by_an_admin(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "admin-locked")
    cloud.api.lock(cloud.admin, server["id"])
    with pytest.raises(exceptions.InstanceIsLocked, match="admin"):
        cloud.api.unlock(ctx, server["id"])
    with pytest.raises(exceptions.InstanceIsLocked):
        cloud.api.reboot(ctx, server["id"])
    assert cloud.api.unlock(cloud.admin, server["id"])["locked"] is False
    assert cloud.api.reboot(ctx, server["id"])["status"] == "ACTIVE"


def test_non_admins_cannot_manage_flavors_images_or_hosts(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.compute import flavors, hosts, images

    before = cloud.snapshot()
    with pytest.raises(exceptions.PolicyNotAuthorized):
        flavors.create(cloud.db, ctx, {"name": "x", "vcpus": 1, "memory_mb": 1})
    with pytest.raises(exceptions.PolicyNotAuthorized):
        images.create(cloud.db, ctx, {"name": "x"})
    with pytest.raises(exceptions.PolicyNotAuthorized):
        hosts.set_disabled(cloud.db, ctx, "compute-1", True, "no")
    assert cloud.snapshot() == before
