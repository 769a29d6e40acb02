"""Moving real guests between the testbed's hosts, through the playbooks a user runs.

Every move goes through playbooks/server_action.yml (or host_maintenance.yml); the controller
reaches both hosts of a move over SSH, and the hosts reach each other's daemons by their
``migration_uri`` (qemu+ssh, each host with its own key). Then what a user would look at is
checked: the server's status and host, its migration, the claims on both hosts (placement), the
guests on every host (virsh) and their consoles.

Few guests, each proving several points: one guest is resized and reverted, resized and
confirmed, and cold-migrated; one is snapshotted (a new server boots from the image) and shelved,
offloaded and unshelved onto another host; three are live-migrated onto one host and then
drained off it, running all along.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from novakit.catalog import images
from novakit.cells.registry import UNSCHEDULED
from novakit.context import RequestContext
from novakit.db.models import InstanceFault
from novakit.fleet import hosts
from novakit.moves import migrations
from novakit.virt import guest_ready_line
from tests.e2e.runner import task_results
from tests.e2e.testbed import Testbed
from tests.e2e.testbed.catalog import FLAVORS
from tests.e2e.testbed.fixtures import (
    Cloud,
    allocations_by_consumer,
    assert_nothing_lost,
    console_output,
    domains_by_host,
    make_cloud,
    reset_hosts,
    usage_by_host,
    wait_for_marker,
)

pytest_plugins = ["tests.e2e.testbed.fixtures"]
pytestmark = pytest.mark.e2e

ADMIN = RequestContext.admin()
SMALL_MB = FLAVORS["tb.small"][1]
LARGE_MB = FLAVORS["tb.large"][1]


def _boot(cloud: Cloud, name: str, count: int = 1, image: str = "tiny") -> list[dict[str, Any]]:
    """``count`` servers named ``name``..., ACTIVE and their guests booted (ready marker on the console)."""
    run = cloud.run("boot.yml", {"server_name": name, "count": count, "flavor": "tb.small", "image": image})
    assert run.rc == 0, run.stdout.read()[-3000:]
    servers = sorted(
        (s for s in cloud.api().list(ADMIN) if s["name"].startswith(name)), key=lambda s: s["name"]
    )
    assert len(servers) == count, servers
    for server in servers:
        assert server["status"] == "ACTIVE", server
        _assert_booted(cloud, server, 1)
    return servers


def _act(cloud: Cloud, server: dict[str, Any], action: str, **extra: Any) -> dict[str, Any]:
    """Run ``action`` on the server through server_action.yml; the server afterwards."""
    run = cloud.run("server_action.yml", {"server_action": action, "servers": server["id"], **extra})
    assert run.rc == 0, f"{action}: {run.stdout.read()[-3000:]}"
    return cloud.api().get(ADMIN, server["id"])


def _why(cloud: Cloud, server: dict[str, Any]) -> str:
    """The server's last action (its events) and its faults: what a failed assertion shows."""
    db = cloud.api().db
    actions = cloud.api().list_actions(ADMIN, server["id"])
    last = max(actions, key=lambda a: (a["start_time"], a.get("id", 0)))
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        rows = session.execute(select(InstanceFault).where(InstanceFault.instance_uuid == server["id"]))
        faults = [(f.message, f.details) for f in rows.scalars()]
    return f"{server['name']} {server['status']} on {server['host']}: {last!r}; faults {faults!r}"


def _assert_booted(cloud: Cloud, server: dict[str, Any], times: int) -> None:
    """The guest's console on its host shows its ready marker exactly ``times`` times."""
    line = guest_ready_line(server["hostname"], server["id"])
    console = wait_for_marker(cloud.bed, server["host"], server, times)
    assert console.count(line) == times, (server["name"], server["host"], console[-2000:])


def _state(server: dict[str, Any]) -> tuple[str, str, str | None]:
    return server["status"], server["vm_state"], server["task_state"]


def _migration(cloud: Cloud, server: dict[str, Any]) -> dict[str, Any]:
    """The server's newest migration."""
    return migrations.list_migrations(cloud.api().db, ADMIN, server=server["id"])[0]


def _memory_used(cloud: Cloud) -> dict[str, int]:
    """MEMORY_MB claimed on each host, as placement counts it."""
    usage = usage_by_host(cloud.api().db)
    return {h: usage.get(h, {}).get("MEMORY_MB", 0) for h in cloud.bed.names()}


def _guests(cloud: Cloud, server: dict[str, Any]) -> dict[str, str]:
    """{host: libvirt state} of the server's guest on every host that defines it."""
    return {h: doms[server["id"]] for h, doms in domains_by_host(cloud.bed).items() if server["id"] in doms}


def _instance_dir_exists(cloud: Cloud, host: str, server: dict[str, Any]) -> bool:
    return (cloud.bed.host(host).instances_path / server["id"]).exists()


def test_resize_revert_resize_confirm_and_cold_migrate_one_guest(cloud: Cloud) -> None:
    (server,) = _boot(cloud, "mover")
    source = server["host"]

    # Resize: the guest runs on another host with the new flavor; the old one keeps its files
    # and its claim (the migration's) until the user answers.
    now = _act(cloud, server, "resize", flavor="tb.large")
    dest = now["host"]
    assert _state(now) == ("VERIFY_RESIZE", "resized", None) and dest != source, _why(cloud, now)
    assert now["flavor"]["name"] == "tb.large"
    mig = _migration(cloud, server)
    assert (mig["type"], mig["status"], mig["source_compute"], mig["dest_compute"]) == (
        "resize",
        "finished",
        source,
        dest,
    ), mig
    assert (mig["old_flavor"], mig["new_flavor"]) == ("tb.small", "tb.large")
    claims = allocations_by_consumer(cloud.api().db)
    assert claims == {server["id"]: {dest}, mig["id"]: {source}}, claims
    assert _memory_used(cloud) == {h: {source: SMALL_MB, dest: LARGE_MB}.get(h, 0) for h in cloud.bed.names()}
    assert _guests(cloud, server) == {dest: "running"}
    assert _instance_dir_exists(cloud, source, server)  # kept for a revert
    # The console carried over from the source, then its boot on the destination.
    _assert_booted(cloud, now, 2)

    # Revert: back on the source with the old flavor; nothing left on the destination.
    now = _act(cloud, server, "revert_resize")
    assert _state(now) == ("ACTIVE", "active", None) and now["host"] == source, _why(cloud, now)
    assert now["flavor"]["name"] == "tb.small"
    assert _migration(cloud, server)["status"] == "reverted"
    assert allocations_by_consumer(cloud.api().db) == {server["id"]: {source}}
    assert _memory_used(cloud) == {h: SMALL_MB if h == source else 0 for h in cloud.bed.names()}
    assert _guests(cloud, server) == {source: "running"}
    assert not _instance_dir_exists(cloud, dest, server)
    _assert_booted(cloud, now, 2)  # its own console, one more boot
    assert_nothing_lost(cloud)

    # Resize again, then confirm: the source's copy and claim go.
    now = _act(cloud, server, "resize", flavor="tb.large")
    dest = now["host"]
    assert _state(now) == ("VERIFY_RESIZE", "resized", None) and dest != source, _why(cloud, now)
    mig = _migration(cloud, server)
    assert allocations_by_consumer(cloud.api().db) == {server["id"]: {dest}, mig["id"]: {source}}
    now = _act(cloud, server, "confirm_resize")
    assert _state(now) == ("ACTIVE", "active", None) and now["host"] == dest, _why(cloud, now)
    assert now["flavor"]["name"] == "tb.large"
    assert _migration(cloud, server)["status"] == "confirmed"
    assert allocations_by_consumer(cloud.api().db) == {server["id"]: {dest}}
    assert _memory_used(cloud) == {h: LARGE_MB if h == dest else 0 for h in cloud.bed.names()}
    assert _guests(cloud, server) == {dest: "running"}
    assert not _instance_dir_exists(cloud, source, server)
    assert_nothing_lost(cloud)

    # Cold migration: the same flavor on another host, confirmed as a resize is.
    before = now["host"]
    now = _act(cloud, server, "migrate")
    assert _state(now) == ("VERIFY_RESIZE", "resized", None) and now["host"] != before, _why(cloud, now)
    mig = _migration(cloud, server)
    assert (mig["type"], mig["source_compute"], mig["dest_compute"]) == ("migration", before, now["host"])
    assert (mig["old_flavor"], mig["new_flavor"]) == ("tb.large", "tb.large")
    assert allocations_by_consumer(cloud.api().db) == {server["id"]: {now["host"]}, mig["id"]: {before}}
    now = _act(cloud, server, "confirm_resize")
    assert _state(now) == ("ACTIVE", "active", None), _why(cloud, now)
    assert _guests(cloud, server) == {now["host"]: "running"}
    assert _memory_used(cloud) == {h: LARGE_MB if h == now["host"] else 0 for h in cloud.bed.names()}
    _assert_booted(cloud, now, 4)  # booted, reverted, resized, migrated: one story, four boots
    assert_nothing_lost(cloud)


def test_snapshot_boots_a_new_server_and_an_offloaded_server_unshelves_elsewhere(
    testbed: Testbed, tmp_path: Path
) -> None:
    # Shelving keeps the server on its host (offloading is then its own action).
    reset_hosts(testbed)
    cloud = make_cloud(testbed, tmp_path, config_extra="[compute]\nshelved_offload_time = -1\n")
    try:
        cloud.register_hosts()
        (server,) = _boot(cloud, "keep")
        first = server["host"]

        # Snapshot: an active image in the store; a server booted from it runs.
        now = _act(cloud, server, "create_image", new_name="keep-snap")
        assert _state(now) == ("ACTIVE", "active", None) and now["host"] == first, _why(cloud, now)
        (snap,) = [i for i in images.list_images(cloud.api().db) if i["name"] == "keep-snap"]
        assert snap["status"] == "active" and snap["checksum"], snap
        assert Path(snap["location"]).parent == testbed.image_store, snap
        (copy,) = _boot(cloud, "copy", image="keep-snap")
        assert copy["image"] == snap["id"], copy

        # Shelve, offload: no host, no claim, no guest anywhere.
        now = _act(cloud, server, "shelve")
        assert _state(now) == ("SHELVED", "shelved", None) and now["host"] == first, _why(cloud, now)
        (shelved,) = [
            i for i in images.list_images(cloud.api().db) if i["name"].startswith("keep-1-shelved-")
        ]
        assert Path(shelved["location"]).is_file(), shelved
        assert _guests(cloud, server) == {first: "shut off"}
        now = _act(cloud, server, "shelve_offload")
        assert _state(now) == ("SHELVED_OFFLOADED", "shelved_offloaded", None), _why(cloud, now)
        assert now["host"] is None, now
        assert _guests(cloud, server) == {}
        assert server["id"] not in allocations_by_consumer(cloud.api().db)

        # Unshelve with its first host disabled: the scheduler must pick another.
        hosts.set_disabled(cloud.api().db, ADMIN, first, True, "moves test")
        now = _act(cloud, server, "unshelve")
        assert _state(now) == ("ACTIVE", "active", None), _why(cloud, now)
        assert now["host"] not in (None, first), now
        assert _guests(cloud, server) == {now["host"]: "running"}
        assert allocations_by_consumer(cloud.api().db)[server["id"]] == {now["host"]}
        # Spawned from the shelved image, it boots afresh on its new host; the image then goes.
        _assert_booted(cloud, now, 1)
        assert shelved["id"] not in {i["id"] for i in images.list_images(cloud.api().db)}
        assert not Path(shelved["location"]).exists()
        assert_nothing_lost(cloud)
    finally:
        cloud.close()
        reset_hosts(testbed)


def test_live_migration_and_host_maintenance_move_running_guests_without_a_reboot(cloud: Cloud) -> None:
    servers = _boot(cloud, "live", count=3)
    target = servers[0]["host"]

    # Live migration: the two others join the first one's host, running all along.
    joining = [s for s in servers[1:] if s["host"] != target]
    assert joining, f"all three booted on {target}: nothing to live-migrate"
    for server in joining:
        before = server["host"]
        now = _act(cloud, server, "live_migrate", target_host=target)
        assert _state(now) == ("ACTIVE", "active", None) and now["host"] == target, _why(cloud, now)
        mig = _migration(cloud, server)
        assert (mig["type"], mig["status"], mig["source_compute"], mig["dest_compute"]) == (
            "live-migration",
            "completed",
            before,
            target,
        ), mig
        assert _guests(cloud, server) == {target: "running"}
        assert allocations_by_consumer(cloud.api().db)[server["id"]] == {target}
        assert mig["id"] not in allocations_by_consumer(cloud.api().db)
        assert not _instance_dir_exists(cloud, before, server)
        # It did not reboot: the console (carried over from the source) shows one boot.
        _assert_booted(cloud, now, 1)
    assert _memory_used(cloud)[target] == 3 * SMALL_MB
    assert_nothing_lost(cloud)

    # Maintenance empties the host, live: each guest runs elsewhere, booted once still.
    run = cloud.run("host_maintenance.yml", {"host": target, "reason": "moves test"})
    assert run.rc == 0, run.stdout.read()[-3000:]
    (drained,) = task_results(run, "Disable the host and move its servers away")
    assert {(r["name"], r["result"], r["how"]) for r in drained["servers"]} == {
        (s["name"], "moved", "live") for s in servers
    }, drained
    api = cloud.api()
    for server in servers:
        now = api.get(ADMIN, server["id"])
        assert _state(now) == ("ACTIVE", "active", None) and now["host"] != target, _why(cloud, now)
        mig = _migration(cloud, now)
        assert (mig["type"], mig["status"], mig["source_compute"], mig["dest_compute"]) == (
            "live-migration",
            "completed",
            target,
            now["host"],
        ), mig
        assert _guests(cloud, now) == {now["host"]: "running"}
        _assert_booted(cloud, now, 1)
    assert domains_by_host(cloud.bed)[target] == {}
    assert _memory_used(cloud)[target] == 0
    (state,) = [h for h in hosts.list_hosts(api.db, api.conf, ctx=ADMIN) if h["host"] == target]
    assert state["status"] == "disabled", state
    moved = [api.get(ADMIN, s["id"]) for s in servers]
    consoles = console_output(cloud, moved)
    for server in moved:
        assert consoles[server["id"]].count(guest_ready_line(server["hostname"], server["id"])) == 1
    assert_nothing_lost(cloud)

    # Heal finds nothing to correct.
    heal = cloud.run("heal.yml")
    assert heal.rc == 0, heal.stdout.read()[-3000:]
    (report,) = [r["report"] for r in task_results(heal, "Record the heal")]
    assert report["corrections"] == [], report["corrections"]
