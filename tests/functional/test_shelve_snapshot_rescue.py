"""Snapshot, shelve / offload / unshelve, rescue / unrescue on fake hosts: states, images, claims."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.catalog import images
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.placement import api as placement
from novakit.virt.fake import failure_env_var
from tests.functional.cloud import Cloud, boot


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("p1", "u1")


def _images(cloud: Cloud) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in images.list_images(cloud.db)}


def _action(cloud: Cloud, server: str, action: str) -> dict[str, Any]:
    return next(a for a in cloud.api.list_actions(cloud.admin, server) if a["action"] == action)


def test_a_snapshot_is_a_bootable_image_with_its_sha256(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "create_image", {"name": "web-snap", "metadata": {"purpose": "backup"}})
    shown = cloud.api.get(ctx, "web")
    assert (shown["status"], shown["task_state"]) == ("ACTIVE", None)
    snap = _images(cloud)["web-snap"]
    assert snap["status"] == "active"
    assert snap["properties"]["image_type"] == "snapshot"
    assert snap["properties"]["instance_uuid"] == server["id"]
    assert snap["properties"]["purpose"] == "backup"
    data = Path(snap["location"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == snap["checksum"] and snap["size"] == len(data)
    assert [e["event"] for e in _action(cloud, server["id"], "createImage")["events"]] == [
        "compute_snapshot_instance"
    ]
    # Another server boots from it.
    other = cloud.api.create(ctx, {"name": "copy", "flavor": "m1.small", "image": "web-snap"})[0]
    assert other["status"] == "ACTIVE"


def test_a_snapshot_keeps_the_properties_of_the_image_the_server_was_booted_from(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """As Nova's: a direct kernel boot's kernel, ramdisk and command line come with the snapshot
    (without them it boots nothing); its own properties and the user's are over them."""
    images.create(
        cloud.db,
        cloud.admin,
        {
            "name": "kboot",
            "properties": {"kernel_id": "tiny", "os_command_line": "console=ttyS0", "purpose": "base"},
        },
    )
    boot(cloud, ctx, "k", image="kboot")
    cloud.api.act(ctx, "k", "create_image", {"name": "k-snap", "metadata": {"purpose": "backup"}})
    kernel = _images(cloud)["tiny"]["id"]
    props = _images(cloud)["k-snap"]["properties"]
    assert (props["kernel_id"], props["os_command_line"]) == (kernel, "console=ttyS0")
    assert (props["purpose"], props["image_type"]) == ("backup", "snapshot")


def test_a_snapshot_under_a_taken_name_is_refused_and_changes_nothing(
    cloud: Cloud, ctx: RequestContext
) -> None:
    boot(cloud, ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="options.name"):
        cloud.api.act(ctx, "web", "create_image", {"name": "tiny"})
    assert cloud.snapshot() == before


def test_shelve_offloads_at_once_and_unshelve_schedules_anew(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    host = server["host"]
    cloud.api.act(ctx, "web", "shelve")
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown.get("host")) == ("SHELVED_OFFLOADED", None)
    assert placement.get_allocations_for_consumer(cloud.db, server["id"]) == {}
    assert server["id"] not in cloud.fake(host).list_instances()
    shelved = [i for i in _images(cloud).values() if i["properties"].get("image_type") == "shelved"]
    assert len(shelved) == 1 and Path(shelved[0]["location"]).exists()
    assert [e["event"] for e in _action(cloud, server["id"], "shelve")["events"]] == [
        "compute_shelve_instance",
        "compute_shelve_offload_instance",
    ]

    cloud.api.act(ctx, "web", "unshelve")
    shown = cloud.api.get(cloud.admin, "web")
    assert shown["status"] == "ACTIVE" and shown["host"]
    assert placement.get_allocations_for_consumer(cloud.db, server["id"])
    assert cloud.fake(shown["host"]).list_instances()[server["id"]] == 1
    # The shelved image went, record and file.
    assert not [i for i in _images(cloud).values() if i["properties"].get("image_type") == "shelved"]
    assert not Path(shelved[0]["location"]).exists()
    # Its ports followed it.
    assert cloud.api.get(ctx, "web")["addresses"] is not None


def test_shelve_without_offload_keeps_host_and_claim_then_offload_frees_them(
    cloud: Cloud, ctx: RequestContext
) -> None:
    cloud.api.conf = load_config(
        db_url=cloud.db.url,
        state_dir=cloud.conf.state_dir,
        quota={"instances": -1, "cores": -1, "ram": -1},
        compute={"shelved_offload_time": -1},
    )
    cloud.api.conductor.conf = cloud.api.conf
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "shelve")
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"], shown["power_state"]) == ("SHELVED", server["host"], 4)
    assert placement.get_allocations_for_consumer(cloud.db, server["id"])
    cloud.api.act(ctx, "web", "unshelve")  # where it is: powered on
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"]) == ("ACTIVE", server["host"])
    cloud.api.act(ctx, "web", "shelve")
    cloud.api.act(ctx, "web", "shelve_offload")
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown.get("host")) == ("SHELVED_OFFLOADED", None)
    assert placement.get_allocations_for_consumer(cloud.db, server["id"]) == {}
    # Offloading again is refused for its state (not as "never built"), and changes nothing.
    before = cloud.snapshot()
    with pytest.raises(exceptions.InstanceInvalidState, match="shelved_offloaded"):
        cloud.api.act(ctx, "web", "shelve_offload")
    assert cloud.snapshot() == before


def test_unshelve_with_no_room_is_no_valid_host_and_leaves_it_offloaded(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "shelve")
    for host in ("compute-1", "compute-2", "compute-3"):
        cloud.api.conductor.scheduler  # noqa: B018 - built before hosts go away
        from novakit.fleet import hosts

        hosts.set_disabled(cloud.db, cloud.admin, host, True, "maintenance")
    before = cloud.snapshot()
    with pytest.raises(exceptions.NoValidHost):
        cloud.api.act(ctx, "web", "unshelve")
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown.get("host"), shown["task_state"]) == ("SHELVED_OFFLOADED", None, None)
    assert placement.get_allocations_for_consumer(cloud.db, server["id"]) == {}
    after = cloud.snapshot()
    assert after["allocations"] == before["allocations"] and after["images"] == before["images"]


def test_rescue_boots_a_rescue_image_and_unrescue_returns(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "rescue", {"image": "tiny-2"})
    assert cloud.api.get(ctx, "web")["status"] == "RESCUE"
    console = cloud.api.console_output(ctx, "web")
    assert "rescue image" in console and "NOVAKIT-DISK vdb" in console
    with pytest.raises(exceptions.InstanceInvalidState):
        cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    cloud.api.act(ctx, "web", "unrescue")
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"
    assert [a["action"] for a in cloud.api.list_actions(cloud.admin, server["id"])][-2:] == [
        "rescue",
        "unrescue",
    ]


def test_a_failed_snapshot_leaves_no_image(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    cloud.fake(server["host"]).vanish(server["id"])  # the guest is gone: nothing to snapshot
    cloud.api.act(ctx, "web", "create_image", {"name": "web-snap"})
    assert "web-snap" not in _images(cloud)
    assert _action(cloud, server["id"], "createImage")["message"] == "Error"
    assert cloud.api.get(ctx, "web")["task_state"] is None
    monkeypatch.delenv(failure_env_var(server["host"]), raising=False)
