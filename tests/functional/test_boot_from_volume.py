"""Boot from volume with the fake driver on SQLite and PostgreSQL: a new root volume made from the
image, an existing one, the claims at each step, delete keeping or removing the volume, the
VolumeHostFilter, bad input refused unchanged, failed builds freeing everything."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from novakit import exceptions
from novakit.catalog import images
from novakit.compute import volume_attach
from novakit.context import RequestContext
from novakit.virt.fake import failure_env_var
from novakit.volume import volumes
from tests.functional.cloud import Cloud, boot


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("demo", "alice", ["member"])


def _claims(cloud: Cloud, consumer: str) -> dict[str, int]:
    with cloud.db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT resource_class, used FROM allocations WHERE consumer_id = :c"), {"c": consumer}
        ).all()
    return {rc: used for rc, used in rows}


def _count(cloud: Cloud, table: str) -> int:
    with cloud.db.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT COUNT(*) FROM {table} WHERE deleted = 0")).scalar_one())


def _all_allocations(cloud: Cloud) -> int:
    with cloud.db.engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM allocations")).scalar_one())


def _image_id(cloud: Cloud, name: str) -> str:
    with cloud.db.reader() as session:
        return images.get(session, name).uuid


def _root(cloud: Cloud, ctx: RequestContext, server_id: str) -> dict[str, Any]:
    found = [
        v
        for v in volumes.list_volumes(cloud.api.conductor, ctx)
        if any(a["server_id"] == server_id for a in v["attachments"])
    ]
    assert len(found) == 1, found
    return found[0]


def test_new_root_volume_holds_the_disk_and_goes_with_the_server(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "bfv", boot_from_volume=20)
    root = _root(cloud, ctx, server["id"])
    assert root["status"] == "in-use" and root["bootable"] is True and root["size"] == 20
    assert root["image_id"] == _image_id(cloud, "tiny")
    # Its host is an admin's to see (Cinder's os-vol-host-attr:host), as a server's is: the member sees none.
    assert root["host"] is None and root["pool"] is None
    assert volumes.show(cloud.api.conductor, cloud.admin, root["id"])["host"] == server["host"]
    assert root["attachments"][0]["device"] == "/dev/vda" and root["attachments"][0]["boot_index"] == 0
    assert root["attachments"][0]["delete_on_termination"] is True
    # The volume holds DISK_GB; the server only VCPU and MEMORY_MB (its flavor's root_gb is not claimed).
    assert _claims(cloud, server["id"]) == {"VCPU": 1, "MEMORY_MB": 1024}
    assert _claims(cloud, root["id"]) == {"DISK_GB": 20}
    assert cloud.fake(server["host"]).volumes()[root["id"]]["size_gb"] == 20

    cloud.api.delete(ctx, server["id"])
    assert volumes.list_volumes(cloud.api.conductor, ctx) == []
    assert _claims(cloud, root["id"]) == {} and _claims(cloud, server["id"]) == {}
    assert root["id"] not in cloud.fake(server["host"]).volumes()


def test_kept_root_volume_survives_delete_and_boots_a_new_server_on_its_host(
    cloud: Cloud, ctx: RequestContext
) -> None:
    svc = cloud.api.conductor
    first = boot(cloud, ctx, "keeper", boot_from_volume=5, delete_on_termination=False)
    root = volumes.show(svc, cloud.admin, _root(cloud, ctx, first["id"])["id"])  # its host: an admin's to see
    with pytest.raises(exceptions.InvalidVolume, match="root disk"):
        volume_attach.detach(cloud.api, ctx, first["id"], root["id"])

    cloud.api.delete(ctx, first["id"])
    kept = volumes.show(svc, ctx, root["id"])
    assert kept["status"] == "available" and kept["bootable"] is True and kept["attachments"] == []
    assert _claims(cloud, root["id"]) == {"DISK_GB": 5}
    assert root["id"] in cloud.fake(root["host"]).volumes()  # its data stays in the pool

    # No image needed: the volume's is used; the server can only go where the volume is.
    servers = cloud.api.create(ctx, {"name": "again", "flavor": "m1.small", "boot_volume": kept["name"]})
    second = cloud.api.get(cloud.admin, servers[0]["id"])
    assert second["status"] == "ACTIVE" and second["host"] == root["host"]
    assert _image_id(cloud, "tiny") == root["image_id"]
    assert volumes.show(svc, ctx, root["id"])["status"] == "in-use"
    assert _claims(cloud, second["id"]) == {"VCPU": 1, "MEMORY_MB": 1024}
    assert _claims(cloud, root["id"]) == {"DISK_GB": 5}

    # An existing volume's delete_on_termination defaults to false: it survives again.
    cloud.api.delete(ctx, second["id"])
    assert volumes.show(svc, ctx, root["id"])["status"] == "available"


def test_boot_volume_lands_only_on_its_host_and_says_why_when_that_host_is_disabled(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit.fleet import hosts

    svc = cloud.api.conductor
    vol = volumes.create(svc, ctx, "os", 2, image="tiny", host="compute-1")
    hosts.set_disabled(cloud.db, cloud.admin, "compute-1", True, "maintenance")
    # An admin of the project: NoValidHost's reasons are shown to admins only.
    admin_of_demo = RequestContext("demo", "alice", ["member", "admin"])
    servers = cloud.api.create(
        admin_of_demo, {"name": "stuck", "flavor": "m1.small", "boot_volume": vol["id"]}
    )
    failed = cloud.api.get(cloud.admin, servers[0]["id"])
    assert failed["status"] == "ERROR"
    assert "volume os lives on host compute-1" in failed["fault"]["message"]
    # Nothing held: the volume is available again with its own claim only.
    assert volumes.show(svc, ctx, "os")["status"] == "available"
    assert _claims(cloud, failed["id"]) == {}

    hosts.set_disabled(cloud.db, cloud.admin, "compute-1", False)
    cloud.api.delete(ctx, failed["id"])
    # compute-3 and compute-2 have more room; the filter still sends it to compute-1.
    ok = cloud.api.create(ctx, {"name": "fine", "flavor": "m1.small", "boot_volume": "os"})
    assert cloud.api.get(cloud.admin, ok[0]["id"])["host"] == "compute-1"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"boot_from_volume": 0}, "boot_from_volume"),
        ({"boot_from_volume": 5, "boot_volume": "avail"}, "boot_volume"),
        ({"boot_volume": "nope"}, "boot_volume"),
        ({"boot_volume": "blank"}, "boot_volume"),  # not bootable
        ({"boot_volume": "avail", "max_count": 2}, "boot_volume"),
        ({"delete_on_termination": False}, "delete_on_termination"),
        ({"boot_from_volume": 3, "image": "big"}, "boot_from_volume"),  # below the image's min_disk
        ({"boot_volume": "theirs"}, "boot_volume"),  # another project's
        ({"boot_volume": "used"}, "boot_volume"),  # in-use
        ({"image": None}, "image"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    cloud: Cloud, ctx: RequestContext, extra: dict[str, Any], field: str
) -> None:
    svc = cloud.api.conductor
    images.create(cloud.db, cloud.admin, {"name": "big", "min_disk": 30})
    volumes.create(svc, ctx, "avail", 2, image="tiny", host="compute-2")
    volumes.create(svc, ctx, "blank", 2, host="compute-2")
    volumes.create(svc, RequestContext("other", "bob", ["member"]), "theirs", 2, image="tiny")
    boot(cloud, ctx, "holder", boot_from_volume=2)
    used = _root(cloud, ctx, cloud.api.get(ctx, "holder")["id"])
    with cloud.db.engine.begin() as conn:
        conn.execute(text("UPDATE volumes SET name = 'used' WHERE uuid = :u"), {"u": used["id"]})
    before = cloud.snapshot()
    request = {"name": "bad", "flavor": "m1.small", "image": "tiny", **extra}
    with pytest.raises(exceptions.ValidationError) as info:
        cloud.api.create(ctx, request)
    assert info.value.field == field, info.value.format_message()
    assert cloud.snapshot() == before


def test_a_failed_build_frees_the_new_volume_and_releases_an_existing_one(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = cloud.api.conductor
    vol = volumes.create(svc, ctx, "os", 2, image="tiny", host="compute-2")
    volumes_before, allocations_before = _count(cloud, "volumes"), _all_allocations(cloud)
    for host in ("compute-1", "compute-2", "compute-3"):
        monkeypatch.setenv(failure_env_var(host), "fail_every_spawn")

    # A new root volume is made again on each host tried (three), and goes with each failure.
    new = cloud.api.create(ctx, {"name": "n", "flavor": "m1.small", "image": "tiny", "boot_from_volume": 4})
    failed = cloud.api.get(cloud.admin, new[0]["id"])
    assert failed["status"] == "ERROR" and "every spawn" in failed["fault"]["message"]
    assert len(cloud.api.list_actions(cloud.admin, failed["id"])[0]["events"]) == 3
    assert _count(cloud, "volumes") == volumes_before and _all_allocations(cloud) == allocations_before
    assert _count(cloud, "volume_attachments") == 0
    for host in ("compute-1", "compute-2", "compute-3"):
        assert set(cloud.fake(host).volumes()) <= {vol["id"]}

    old = cloud.api.create(ctx, {"name": "o", "flavor": "m1.small", "boot_volume": "os"})
    failed = cloud.api.get(cloud.admin, old[0]["id"])
    message = failed["fault"]["message"]
    assert failed["status"] == "ERROR" and "aborted" in message
    assert "volume os, which lives on host compute-2, so no other host can build it" in message
    assert volumes.show(svc, ctx, "os")["status"] == "available"
    assert _claims(cloud, vol["id"]) == {"DISK_GB": 2}
    assert _all_allocations(cloud) == allocations_before
    assert vol["id"] in cloud.fake("compute-2").volumes()  # an existing volume is never removed


def test_a_new_root_volume_follows_a_rescheduled_build_to_the_next_host(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(failure_env_var("compute-3"), "fail_every_spawn")  # the first choice: most room
    server = boot(cloud, ctx, "moved", boot_from_volume=6)
    events = cloud.api.list_actions(cloud.admin, server["id"])[0]["events"]
    assert [e["host"] for e in events][0] == "compute-3" and server["host"] != "compute-3"
    # with its host: an admin's to see
    root = volumes.show(cloud.api.conductor, cloud.admin, _root(cloud, ctx, server["id"])["id"])
    assert root["host"] == server["host"] and root["status"] == "in-use"
    assert _count(cloud, "volumes") == 1  # the first host's volume is gone, row and claim
    assert _claims(cloud, root["id"]) == {"DISK_GB": 6}
    assert _claims(cloud, server["id"]) == {"VCPU": 1, "MEMORY_MB": 1024}
    assert cloud.fake("compute-3").volumes() == {}
    assert root["id"] in cloud.fake(server["host"]).volumes()


def test_servers_racing_for_one_boot_volume_get_it_once(cloud: Cloud, ctx: RequestContext) -> None:
    import multiprocessing
    import time

    from tests.functional import workers

    volumes.create(cloud.api.conductor, ctx, "os", 2, image="tiny", host="compute-2")
    start_at = time.time() + 3.0  # every process imports and connects first, then all go at once
    args = [(cloud.db.url, str(cloud.conf.state_dir), f"r{i}", "os", start_at) for i in range(4)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        outcomes = pool.starmap(workers.boot_from_volume, args)
    assert sorted(o.split(":")[0] for o in outcomes) == ["ok", "refused", "refused", "refused"], outcomes
    assert "ok:ACTIVE" in outcomes
    (server,) = cloud.api.list(cloud.admin)
    assert _root(cloud, ctx, server["id"])["name"] == "os"
    assert _count(cloud, "volume_attachments") == 1


def test_a_volume_backed_server_is_rebuilt_only_with_its_own_image(cloud: Cloud, ctx: RequestContext) -> None:
    """As Nova before microversion 2.93: the root volume is not reimaged, so another image is
    refused with nothing changed; its own image rebuilds the server on the same volume."""
    server = boot(cloud, ctx, "bfv", boot_from_volume=5)
    root = _root(cloud, ctx, server["id"])
    before = cloud.snapshot()
    for dry_run in (True, False):
        with pytest.raises(exceptions.ValidationError) as err:
            cloud.api.act(ctx, "bfv", "rebuild", {"image": "tiny-2"}, dry_run=dry_run)
        assert err.value.field == "options.image"
        assert "rebuilt only with its own image" in err.value.rule and root["name"] in err.value.rule
    assert cloud.snapshot() == before

    rebuilt = cloud.api.rebuild(ctx, "bfv", {"image": "tiny"})
    assert rebuilt["status"] == "ACTIVE"
    assert [a["action"] for a in cloud.api.list_actions(ctx, "bfv")][-1] == "rebuild"
    after = _root(cloud, ctx, server["id"])
    assert after["id"] == root["id"] and after["status"] == "in-use"
    assert after["attachments"] == root["attachments"]
    assert cloud.fake(server["host"]).volumes()[root["id"]]["attached_to"] == server["id"]
    # A server booted from an image's disk still takes another image.
    boot(cloud, ctx, "plain")
    assert cloud.api.rebuild(ctx, "plain", {"image": "tiny-2"})["status"] == "ACTIVE"


@pytest.mark.parametrize(("resource", "limit"), [("volumes", 1), ("gigabytes", 6)])
def test_boots_that_passed_the_volume_quota_together_are_rechecked_in_the_claim(
    cloud: Cloud, ctx: RequestContext, resource: str, limit: int
) -> None:
    """Two boots from new volumes both pass the API's check (no volume exists yet); the
    recheck in the claims' transaction, with the new volume's row written, lets one through."""
    from novakit import quota

    quota.set_quota(cloud.db, "demo", resource, limit)
    request = {"flavor": "m1.small", "image": "tiny", "boot_from_volume": 4}
    [first] = cloud.api.create(ctx, {"name": "first", **request}, build=False)
    [second] = cloud.api.create(ctx, {"name": "second", **request}, build=False)
    cloud.api.conductor.build_instances(ctx, [first["id"]])
    cloud.api.conductor.build_instances(ctx, [second["id"]])

    assert cloud.api.get(ctx, first["id"])["status"] == "ACTIVE"
    assert _root(cloud, ctx, first["id"])["status"] == "in-use"
    lost = cloud.api.get(ctx, second["id"])
    assert (lost["status"], lost["task_state"]) == ("ERROR", None)
    assert lost["fault"]["message"].startswith(f"Quota exceeded for {resource} in project demo")
    # Nothing of it is held: no volume, no claim, no attachment.
    assert _count(cloud, "volumes") == 1 and _count(cloud, "volume_attachments") == 1
    assert _claims(cloud, second["id"]) == {}
    usage = quota.get_quota_usage(cloud.db, cloud.conf, "demo")
    assert usage["volumes"]["in_use"] == 1 and usage["gigabytes"]["in_use"] == 4
    assert cloud.api.delete(ctx, second["id"])["status"] == "DELETED"
