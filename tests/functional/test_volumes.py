"""Volumes, Cinder-shaped, with the fake driver on SQLite and PostgreSQL: create, list, show,
delete, quotas, attach and detach as instance actions, and every bad input refused unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from novakit import exceptions, quota
from novakit.compute import volume_attach
from novakit.context import RequestContext
from novakit.placement import api as placement
from novakit.virt.fake import failure_env_var
from novakit.volume import attachments, volumes
from tests.functional.cloud import Cloud, boot


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("demo", "alice", ["member"])


def _claims(cloud: Cloud) -> list[tuple[Any, ...]]:
    with cloud.db.engine.connect() as conn:
        return sorted(
            tuple(r) for r in conn.execute(text("SELECT consumer_id, resource_class, used FROM allocations"))
        )


def _disk_used(cloud: Cloud, host: str) -> int:
    return placement.get_usages(cloud.db, host).get("DISK_GB", 0)


def _actions(cloud: Cloud, server: str) -> list[str]:
    return [a["action"] for a in cloud.api.list_actions(cloud.admin, server)]


def test_create_show_list_delete_with_its_claim_and_the_host_pool(cloud: Cloud, ctx: RequestContext) -> None:
    svc = cloud.api.conductor
    vol = volumes.create(svc, ctx, "data", 5, host="compute-2")
    assert vol["status"] == "available" and vol["size"] == 5
    # Its host and pool are an admin's to see (Cinder's os-vol-host-attr:host), as a server's are.
    assert vol["host"] is None and vol["pool"] is None
    assert all(v["host"] is None for v in volumes.list_volumes(svc, ctx))
    assert volumes.show(svc, cloud.admin, "data")["host"] == "compute-2"
    assert vol["bootable"] is False and vol["attachments"] == []
    assert placement.get_allocations_for_consumer(cloud.db, vol["id"])
    assert _disk_used(cloud, "compute-2") == 5
    assert cloud.fake("compute-2").volumes()[vol["id"]]["size_gb"] == 5
    assert volumes.show(svc, ctx, "data")["id"] == vol["id"]
    assert [v["name"] for v in volumes.list_volumes(svc, ctx)] == ["data"]
    # Another project sees none of it.
    other = RequestContext("other", "bob", ["member"])
    assert volumes.list_volumes(svc, other) == []
    with pytest.raises(exceptions.VolumeNotFound):
        volumes.show(svc, other, "data")
    # Every project's volumes are an admin's to list, whoever calls the library.
    with pytest.raises(exceptions.PolicyNotAuthorized):
        volumes.list_volumes(svc, other, all_projects=True)
    assert [v["id"] for v in volumes.list_volumes(svc, cloud.admin, all_projects=True)] == [vol["id"]]

    gone = volumes.delete(svc, ctx, "data")
    assert gone["status"] == "deleted"
    assert volumes.list_volumes(svc, ctx) == []
    assert _disk_used(cloud, "compute-2") == 0
    assert vol["id"] not in cloud.fake("compute-2").volumes()
    # The name is free again.
    assert volumes.create(svc, ctx, "data", 1, host="compute-2")["status"] == "available"


def test_without_a_host_the_one_with_most_free_disk_is_chosen_and_image_volumes_are_bootable(
    cloud: Cloud, ctx: RequestContext
) -> None:
    vol = volumes.create(cloud.api.conductor, ctx, "boot", 2, image="tiny")
    # 1600 GiB of disk, the most (its host an admin's to see)
    assert volumes.show(cloud.api.conductor, cloud.admin, vol["id"])["host"] == "compute-3"
    assert vol["bootable"] is True and vol["image_id"]
    assert cloud.fake("compute-3").volumes()[vol["id"]]["image_id"] == vol["image_id"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"name": "v", "size": 0}, "size"),
        ({"name": "v", "size": -3}, "size"),
        ({"name": "", "size": 1}, "name"),
        ({"name": "v", "size": 1, "fmt": "vmdk"}, "format"),
        ({"name": "v", "size": 1, "host": "nowhere"}, "host"),
        ({"name": "v", "size": 401, "host": "compute-1"}, "size"),  # compute-1 has 400 GiB
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(
    cloud: Cloud, ctx: RequestContext, args: dict[str, Any], field: str
) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        volumes.create(cloud.api.conductor, ctx, **args)
    assert err.value.field == field
    assert cloud.snapshot() == before


def test_a_taken_name_an_unknown_image_and_a_size_below_the_image_are_refused(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit.catalog import images

    svc = cloud.api.conductor
    images.create(cloud.db, cloud.admin, {"name": "big", "min_disk": 8})
    volumes.create(svc, ctx, "data", 1)
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="names are unique"):
        volumes.create(svc, ctx, "data", 1)
    with pytest.raises(exceptions.ImageNotFound):
        volumes.create(svc, ctx, "x", 1, image="no-such-image")
    with pytest.raises(exceptions.ValidationError, match="smaller than image big") as err:
        volumes.create(svc, ctx, "x", 4, image="big")
    assert err.value.field == "size"
    assert cloud.snapshot() == before


def test_quotas_volumes_and_gigabytes_refuse_with_nothing_written(cloud: Cloud, ctx: RequestContext) -> None:
    svc = cloud.api.conductor
    quota.set_quota(cloud.db, "demo", "volumes", 2)
    quota.set_quota(cloud.db, "demo", "gigabytes", 10)
    volumes.create(svc, ctx, "a", 4)
    before = cloud.snapshot()
    with pytest.raises(exceptions.OverQuota, match="gigabytes"):
        volumes.create(svc, ctx, "b", 7)
    assert cloud.snapshot() == before
    volumes.create(svc, ctx, "b", 6)
    before = cloud.snapshot()
    with pytest.raises(exceptions.OverQuota, match="volumes"):
        volumes.create(svc, ctx, "c", 1)
    assert cloud.snapshot() == before
    usage = quota.get_quota_usage(cloud.db, cloud.conf, "demo")
    assert usage["volumes"] == {"limit": 2, "in_use": 2} and usage["gigabytes"] == {"limit": 10, "in_use": 10}
    # A volume's claim is no instance: the instance count is untouched.
    assert usage["instances"]["in_use"] == 0


def test_the_recheck_refuses_what_the_first_check_let_through(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two creates that both passed the early check: the recheck in the row's transaction holds."""
    quota.set_quota(cloud.db, "demo", "volumes", 1)
    monkeypatch.setattr(quota, "check_quota", lambda *a, **k: None)  # as if both had checked at once
    volumes.create(cloud.api.conductor, ctx, "a", 1)
    claims = _claims(cloud)
    with pytest.raises(exceptions.OverQuota, match="volumes"):
        volumes.create(cloud.api.conductor, ctx, "b", 1)
    assert _claims(cloud) == claims
    assert [v["name"] for v in volumes.list_volumes(cloud.api.conductor, ctx)] == ["a"]


def test_a_failed_host_create_ends_in_error_with_the_reason_and_the_claim_freed(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(failure_env_var("compute-1"), "fail_volume_create")
    vol = volumes.create(cloud.api.conductor, ctx, "broken", 3, host="compute-1")
    assert vol["status"] == "error"
    assert "volume creates on host compute-1 fail" in vol["status_reason"]
    assert placement.get_allocations_for_consumer(cloud.db, vol["id"]) == {}
    assert vol["id"] not in cloud.fake("compute-1").volumes()
    # An error volume can be deleted.
    assert volumes.delete(cloud.api.conductor, ctx, "broken")["status"] == "deleted"


def test_attach_and_detach_are_instance_actions_with_events_and_the_volume_steps(
    cloud: Cloud, ctx: RequestContext
) -> None:
    svc = cloud.api.conductor
    server = boot(cloud, ctx, "web")
    vol = volumes.create(svc, ctx, "data", 2, host=server["host"])
    attached = volume_attach.attach(cloud.api, ctx, "web", "data")
    assert attached["status"] == "in-use"
    [att] = attached["attachments"]
    # vda is the root disk, vdb the config drive: the first free device is vdc.
    assert (
        att["server_id"] == server["id"]
        and att["device"] == "/dev/vdc"
        and att["attach_status"] == "attached"
    )
    guest = cloud.fake(server["host"]).volumes()[vol["id"]]
    assert guest["attached_to"] == server["id"] and guest["device"] == "vdc"
    assert _actions(cloud, "web")[-1] == "attach_volume"
    events = cloud.api.list_actions(cloud.admin, "web")[-1]["events"]
    assert [(e["event"], e["result"]) for e in events] == [("compute_attach_volume", "Success")]
    # The server's spec carries it: a rebuild keeps it defined.
    cloud.api.rebuild(ctx, "web", {"image": "tiny"})
    assert cloud.fake(server["host"]).volumes()[vol["id"]]["attached_to"] == server["id"]

    # Deleting an attached volume, or attaching it again, is refused with nothing changed.
    before = cloud.snapshot()
    with pytest.raises(exceptions.InvalidVolume, match="detach it before deleting"):
        volumes.delete(svc, ctx, "data")
    with pytest.raises(exceptions.InvalidVolume, match="only an available volume"):
        volume_attach.attach(cloud.api, ctx, "web", "data")
    assert cloud.snapshot() == before

    detached = volume_attach.detach(cloud.api, ctx, "web", "data")
    assert detached["status"] == "available" and detached["attachments"] == []
    assert cloud.fake(server["host"]).volumes()[vol["id"]]["attached_to"] is None
    assert _actions(cloud, "web")[-1] == "detach_volume"
    with pytest.raises(exceptions.InvalidVolume, match="is not attached"):
        volume_attach.detach(cloud.api, ctx, "web", "data")


def test_a_volume_attaches_only_on_its_host_and_a_device_must_be_valid_and_free(
    cloud: Cloud, ctx: RequestContext
) -> None:
    svc = cloud.api.conductor
    server = boot(cloud, ctx, "web")
    elsewhere = next(h for h in ("compute-1", "compute-2", "compute-3") if h != server["host"])
    volumes.create(svc, ctx, "far", 1, host=elsewhere)
    volumes.create(svc, ctx, "near", 1, host=server["host"])
    volumes.create(svc, ctx, "near2", 1, host=server["host"])
    volume_attach.attach(cloud.api, ctx, "web", "near", device="/dev/vdf")
    before = cloud.snapshot()
    with pytest.raises(exceptions.InvalidVolume) as err:
        volume_attach.attach(cloud.api, ctx, "web", "far")
    # The member is told the hosts as it may know them (their host_id), never their names.
    assert "attaches only to servers on its host" in str(err.value)
    assert elsewhere not in str(err.value) and server["host"] not in str(err.value)
    assert server["host_id"] in str(err.value)
    with pytest.raises(exceptions.InvalidVolume) as err:
        volume_attach.attach(cloud.api, cloud.admin, "web", "far")
    assert elsewhere in str(err.value) and server["host"] in str(err.value)
    for device, rule in (("vdf", "holds another volume"), ("vda", "own disks"), ("sdb", "must be vdb")):
        with pytest.raises(exceptions.ValidationError, match=rule) as verr:
            volume_attach.attach(cloud.api, ctx, "web", "near2", device=device)
        assert verr.value.field == "device"
    assert cloud.snapshot() == before


def test_ensure_attaches_once_keeps_the_device_and_detaches_once(cloud: Cloud, ctx: RequestContext) -> None:
    """The declarative attach (the volume_attachment module's state, run here or by the service):
    a dry run writes nothing, a second call changes nothing, another device is refused naming it."""
    server = boot(cloud, ctx, "web")
    volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    before = cloud.snapshot()
    dry = volume_attach.ensure(cloud.api, ctx, "web", "data", dry_run=True)
    assert dry["changed"] and dry["volume"]["status"] == "available" and cloud.snapshot() == before
    made = volume_attach.ensure(cloud.api, ctx, "web", "data", "vdd")
    assert made["changed"] and made["volume"]["status"] == "in-use"
    assert [a["device"] for a in made["volume"]["attachments"]] == ["/dev/vdd"]
    state = cloud.snapshot()
    again = volume_attach.ensure(cloud.api, ctx, "web", "data", "/dev/vdd")
    assert again["changed"] is False and again["volume"]["attachments"] == made["volume"]["attachments"]
    with pytest.raises(exceptions.ValidationError, match="attached to server web as /dev/vdd") as err:
        volume_attach.ensure(cloud.api, ctx, "web", "data", "vde")
    assert err.value.field == "device" and cloud.snapshot() == state

    assert volume_attach.ensure(cloud.api, ctx, "web", "data", attached=False, dry_run=True)["changed"]
    assert cloud.snapshot() == state
    gone = volume_attach.ensure(cloud.api, ctx, "web", "data", attached=False)
    assert gone["changed"] and (gone["volume"]["status"], gone["volume"]["attachments"]) == ("available", [])
    assert volume_attach.ensure(cloud.api, ctx, "web", "data", attached=False)["changed"] is False
    assert [a for a in _actions(cloud, "web") if a.endswith("_volume")] == ["attach_volume", "detach_volume"]


def test_a_failed_host_attach_leaves_the_volume_available_and_a_fault_on_the_action(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    monkeypatch.setenv(failure_env_var(server["host"]), "fail_volume_attach")
    with pytest.raises(exceptions.VolumeBackendError, match="attaches on host"):
        volume_attach.attach(cloud.api, ctx, "web", "data")
    vol = volumes.show(cloud.api.conductor, ctx, "data")
    assert vol["status"] == "available" and vol["attachments"] == []
    events = cloud.api.list_actions(cloud.admin, "web")[-1]["events"]
    assert [(e["event"], e["result"]) for e in events] == [("compute_attach_volume", "Error")]
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"


def test_a_stopped_server_takes_a_volume_and_a_locked_one_refuses_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "web")
    volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    cloud.api.stop(ctx, "web")
    assert volume_attach.attach(cloud.api, ctx, "web", "data")["status"] == "in-use"
    assert volume_attach.detach(cloud.api, ctx, "web", "data")["status"] == "available"
    cloud.api.lock(cloud.admin, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.InstanceIsLocked):
        volume_attach.attach(cloud.api, ctx, "web", "data")
    assert cloud.snapshot() == before


def test_deleting_a_server_detaches_its_volumes_and_deletes_those_marked_so(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "web")
    volumes.create(cloud.api.conductor, ctx, "keep", 1, host=server["host"])
    volume_attach.attach(cloud.api, ctx, "web", "keep")
    cloud.api.delete(ctx, "web")
    vol = volumes.show(cloud.api.conductor, ctx, "keep")
    assert vol["status"] == "available" and vol["attachments"] == []
    assert attachments.release_server(cloud.api.conductor, ctx, server["id"]) == []  # idempotent


def test_heal_detaches_volumes_of_servers_that_vanished_and_keeps_volume_claims(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit.heal.manager import heal

    server = boot(cloud, ctx, "web")
    vol = volumes.create(cloud.api.conductor, ctx, "data", 1, host=server["host"])
    volume_attach.attach(cloud.api, ctx, "web", "data")
    with cloud.db.writer() as session:  # the server's record is gone behind novakit's back
        session.execute(text("DELETE FROM instance_actions_events"))
        session.execute(text("DELETE FROM instance_actions"))
        session.execute(text("DELETE FROM instances WHERE uuid = :u"), {"u": server["id"]})
    assert attachments.attached_to_gone_servers(cloud.api.conductor) == [(vol["id"], server["id"])]
    report = heal(cloud.db, cloud.conf)
    assert [(c.kind, c.applied) for c in report.corrections if c.kind.startswith("orphan_")] == [
        ("orphan_attachment", True)
    ]
    vol = volumes.show(cloud.api.conductor, ctx, "data")
    assert vol["status"] == "available" and vol["attachments"] == []
    assert placement.get_allocations_for_consumer(cloud.db, vol["id"])


def test_the_volume_actions_start_only_on_what_their_reservation_leaves(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """``API.act`` called around novakit.volume.attachments is refused, in check mode too,
    naming options.volume_id and the rule, with nothing changed."""
    server = boot(cloud, ctx, "web")
    other = boot(cloud, ctx, "db")
    free = volumes.create(cloud.api.conductor, ctx, "free", 1, host=server["host"])
    used = volumes.create(cloud.api.conductor, ctx, "used", 1, host=other["host"])
    volume_attach.attach(cloud.api, ctx, "db", "used")
    before = cloud.snapshot()
    for server_ref, action, vol, found in (
        ("web", "attach_volume", free, "is available"),
        ("web", "attach_volume", used, f"is in-use (attached to server {other['id']})"),
        ("db", "detach_volume", used, "is in-use"),
        ("web", "detach_volume", free, "is available"),
    ):
        for dry_run in (True, False):
            with pytest.raises(exceptions.ValidationError) as err:
                cloud.api.act(ctx, server_ref, action, {"volume_id": vol["id"]}, dry_run=dry_run)
            assert err.value.field == "options.volume_id"
            assert found in err.value.rule and f"{action} of server" in err.value.rule
            assert ("reserved for it" if action == "attach_volume" else "marked detaching") in err.value.rule
    assert cloud.snapshot() == before
    assert cloud.fake(server["host"]).volumes()[free["id"]]["attached_to"] is None

    # Through the library both go, check mode first, which changes nothing either.
    assert volume_attach.attach(cloud.api, ctx, "web", "free", dry_run=True)["status"] == "available"
    assert volume_attach.detach(cloud.api, ctx, "db", "used", dry_run=True)["status"] == "in-use"
    assert cloud.snapshot() == before
    assert volume_attach.attach(cloud.api, ctx, "web", "free")["status"] == "in-use"
    assert volume_attach.detach(cloud.api, ctx, "db", "used")["status"] == "available"


def test_check_mode_refuses_what_the_real_attach_refuses(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    elsewhere = next(h for h in ("compute-1", "compute-2", "compute-3") if h != server["host"])
    volumes.create(cloud.api.conductor, ctx, "far", 1, host=elsewhere)
    volumes.create(cloud.api.conductor, ctx, "near", 1, host=server["host"])
    cloud.api.lock(cloud.admin, "web")
    before = cloud.snapshot()
    for dry_run in (True, False):
        # The server's checks come first, as every action's; then the volume's.
        with pytest.raises(exceptions.InstanceIsLocked):
            volume_attach.attach(cloud.api, ctx, "web", "near", dry_run=dry_run)
    assert cloud.snapshot() == before
    cloud.api.unlock(cloud.admin, "web")
    before = cloud.snapshot()
    for dry_run in (True, False):
        with pytest.raises(exceptions.InvalidVolume, match="attaches only to servers on its host"):
            volume_attach.attach(cloud.api, ctx, "web", "far", dry_run=dry_run)
    assert cloud.snapshot() == before
