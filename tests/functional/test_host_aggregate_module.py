"""The host_aggregate module (openstack.cloud's shape) and compute_node's zone, aggregates and
traits, run as Ansible runs a module: check mode makes the real changes and rolls them back (the
real run's refusal word for word, nothing written), ``--diff`` shows before and after, and a
second identical run reports no change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from novakit.catalog import flavors
from novakit.fleet import aggregates, hosts
from tests.functional.cloud import Cloud, boot
from tests.functional.test_catalog_modules import ROOT, run  # noqa: F401  (the fixture)

EAST = {
    "name": "east",
    "availability_zone": "east",
    "hosts": ["compute-1", "compute-2"],
    "metadata": {"ssd": True},
}


def test_host_aggregate_plans_creates_keeps_and_deletes(cloud: Cloud, run: Any) -> None:  # noqa: F811
    before = cloud.snapshot()
    plan = run("host_aggregate", EAST, check=True)
    assert plan["changed"] and cloud.snapshot() == before, plan
    assert plan["diff"]["before"] == {}
    planned = plan["diff"]["after"]
    assert (planned["name"], planned["availability_zone"], planned["hosts"], planned["metadata"]) == (
        "east",
        "east",
        ["compute-1", "compute-2"],
        {"ssd": "True"},
    )

    made = run("host_aggregate", EAST)
    assert made["changed"] and made["diff"] == {"before": {}, "after": made["aggregate"]}, made
    assert aggregates.show(cloud.db, cloud.admin, "east") == made["aggregate"]
    assert made["aggregate"]["hosts"] == ["compute-1", "compute-2"]
    assert {
        z["zone"]: z["hosts"] for z in aggregates.list_zones(cloud.db, cloud.admin, cloud.conf, long=True)
    }["east"] == ["compute-1", "compute-2"]
    again = run("host_aggregate", EAST)
    assert again["changed"] is False and again["aggregate"] == made["aggregate"], again
    assert again["diff"]["before"] == again["diff"]["after"]

    state = cloud.snapshot()
    dry_delete = run("host_aggregate", {"name": "east", "state": "absent"}, check=True)
    assert dry_delete["changed"] and cloud.snapshot() == state
    assert dry_delete["diff"] == {"before": made["aggregate"], "after": {}}
    # Its hosts are taken out first (the library refuses to delete an aggregate holding hosts).
    assert run("host_aggregate", {"name": "east", "state": "absent"})["changed"]
    assert aggregates.list_aggregates(cloud.db, cloud.admin) == []
    assert run("host_aggregate", {"name": "east", "state": "absent"})["changed"] is False


def test_host_aggregate_hosts_and_metadata_as_openstack_cloud(cloud: Cloud, run: Any) -> None:  # noqa: F811
    run("host_aggregate", {"name": "fast", "hosts": ["compute-1"], "metadata": {"ssd": "true", "rack": "r1"}})
    # purge_hosts false only adds; metadata not given is left as it is
    added = run("host_aggregate", {"name": "fast", "hosts": ["compute-3"], "purge_hosts": False})
    assert added["changed"] and added["aggregate"]["hosts"] == ["compute-1", "compute-3"], added
    assert added["aggregate"]["metadata"] == {"ssd": "true", "rack": "r1"}
    assert (
        run("host_aggregate", {"name": "fast", "hosts": ["compute-3"], "purge_hosts": False})["changed"]
        is False
    )
    # purge_hosts true (the default) makes the hosts exactly those given; metadata given is exact
    exact = run("host_aggregate", {"name": "fast", "hosts": ["compute-2"], "metadata": {"ssd": "true"}})
    assert exact["aggregate"]["hosts"] == ["compute-2"] and exact["aggregate"]["metadata"] == {"ssd": "true"}
    assert exact["diff"]["before"]["hosts"] == ["compute-1", "compute-3"]
    # a zone given later makes the aggregate that zone
    zoned = run("host_aggregate", {"name": "fast", "availability_zone": "west"})
    assert zoned["changed"] and zoned["aggregate"]["availability_zone"] == "west"
    assert zoned["aggregate"]["hosts"] == ["compute-2"]


def test_host_aggregate_check_mode_refuses_what_the_real_run_refuses(cloud: Cloud, run: Any) -> None:  # noqa: F811
    run("host_aggregate", EAST)
    # compute-1 is in zone east: a second zone is refused, by the library's rule, in check mode too
    west = {"name": "west", "availability_zone": "west", "hosts": ["compute-1", "compute-3"]}
    state = cloud.snapshot()
    dry, real = run("host_aggregate", west, check=True), run("host_aggregate", west)
    assert dry.get("failed") and real.get("failed") and dry["msg"] == real["msg"], (dry, real)
    assert "compute-1" in real["msg"] and "one availability zone" in real["msg"], real["msg"]
    # nothing written: not the aggregate, not compute-3's membership that came before the refusal
    assert cloud.snapshot() == state

    unknown = {"name": "gpu", "hosts": ["compute-9"]}
    dry, real = run("host_aggregate", unknown, check=True), run("host_aggregate", unknown)
    assert dry.get("failed") and dry["msg"] == real["msg"] and "compute-9" in real["msg"], (dry, real)
    assert cloud.snapshot() == state

    bad_zone = {"name": "bad", "availability_zone": "east\nwest"}
    dry, real = run("host_aggregate", bad_zone, check=True), run("host_aggregate", bad_zone)
    assert dry.get("failed") and dry["msg"] == real["msg"] and "availability_zone" in real["msg"], (dry, real)
    assert cloud.snapshot() == state


def test_host_aggregate_is_admin_only(cloud: Cloud, run: Any) -> None:  # noqa: F811
    member = {"project": "p1", "user": "u1", "roles": ["member"]}
    out = run("host_aggregate", {**EAST, **member})
    assert out.get("failed") and "aggregate" in out["msg"], out
    assert aggregates.list_aggregates(cloud.db, cloud.admin) == []


PLACED = {
    "availability_zone": "east",
    "aggregates": ["gpu", {"name": "fast", "metadata": {"ssd": "true"}}],
    "traits": ["CUSTOM_SSD", "CUSTOM_GPU"],
}


def _register(cloud: Cloud, module: Any, host: str, *, check: bool = False, **extra: Any) -> dict[str, Any]:
    """compute_node for ``host`` as the role runs it, with what its driver reports."""
    resources = cloud.fake(host).get_available_resource().model_dump(mode="json")
    args = {"host": host, "resources": resources, "driver": cloud.driver_info(host), **extra}
    return module("compute_node", args, check=check)


def test_compute_node_puts_its_host_in_its_zone_aggregates_and_traits(cloud: Cloud, run: Any) -> None:  # noqa: F811
    state = cloud.snapshot()
    plan = _register(cloud, run, "compute-1", **PLACED, check=True)
    assert plan.get("changed") and cloud.snapshot() == state, plan
    assert plan["diff"]["after"]["aggregates"] == ["east", "fast", "gpu"], plan["diff"]

    done = _register(cloud, run, "compute-1", **PLACED)
    assert done["changed"], done
    assert done["placement"] == {
        "availability_zone": "east",
        "aggregates": ["east", "fast", "gpu"],
        "custom_traits": ["CUSTOM_GPU", "CUSTOM_SSD"],
    }
    assert aggregates.show(cloud.db, cloud.admin, "east")["availability_zone"] == "east"
    assert aggregates.show(cloud.db, cloud.admin, "fast")["metadata"] == {"ssd": "true"}
    assert hosts.custom_traits(cloud.db, "compute-1") == ["CUSTOM_GPU", "CUSTOM_SSD"]
    assert _register(cloud, run, "compute-1", **PLACED)["changed"] is False

    # Another host joins the same aggregates: the first one stays in them.
    _register(cloud, run, "compute-2", **PLACED)
    assert aggregates.show(cloud.db, cloud.admin, "gpu")["hosts"] == ["compute-1", "compute-2"]

    # The host moves to zone west, leaves gpu and loses CUSTOM_GPU: check mode says so, writes nothing.
    moved = {"availability_zone": "west", "aggregates": ["fast"], "traits": ["CUSTOM_SSD"]}
    state = cloud.snapshot()
    plan = _register(cloud, run, "compute-1", **moved, check=True)
    assert plan.get("changed") and cloud.snapshot() == state, plan
    assert plan["diff"]["before"]["availability_zone"] == "east"
    assert plan["diff"]["after"]["availability_zone"] == "west"
    assert plan["diff"]["after"]["aggregates"] == ["fast", "west"]
    done = _register(cloud, run, "compute-1", **moved)
    assert done["placement"] == {
        "availability_zone": "west",
        "aggregates": ["fast", "west"],
        "custom_traits": ["CUSTOM_SSD"],
    }
    assert aggregates.show(cloud.db, cloud.admin, "east")["hosts"] == ["compute-2"]
    assert aggregates.show(cloud.db, cloud.admin, "gpu")["hosts"] == ["compute-2"]
    assert hosts.custom_traits(cloud.db, "compute-2") == ["CUSTOM_GPU", "CUSTOM_SSD"]

    # Without the options nothing of it changes.
    assert _register(cloud, run, "compute-1")["changed"] is False
    assert hosts.custom_traits(cloud.db, "compute-1") == ["CUSTOM_SSD"]


def test_compute_node_refuses_a_trait_that_is_not_custom_and_writes_nothing(cloud: Cloud, run: Any) -> None:  # noqa: F811
    state = cloud.snapshot()
    for check in (True, False):
        out = _register(cloud, run, "compute-1", traits=["SSD"], check=check)
        assert out.get("failed") and "CUSTOM_" in out["msg"] and "trait" in out["msg"], out
    bad = _register(cloud, run, "compute-1", aggregates=[{"name": "x", "size": 1}])
    assert bad.get("failed") and "aggregates[0]" in bad["msg"], bad
    assert cloud.snapshot() == state


def test_the_inventory_groups_servers_by_the_zone_they_were_placed_in(cloud: Cloud, tmp_path: Path) -> None:
    aggregates.create(cloud.db, cloud.admin, "east", availability_zone="east")
    aggregates.add_host(cloud.db, cloud.admin, "east", "compute-1")
    flavors.create(cloud.db, cloud.admin, {"name": "huge", "vcpus": 64, "memory_mb": 1024, "root_gb": 1})
    placed = boot(cloud, cloud.admin, "in-east", availability_zone="east")
    anywhere = boot(cloud, cloud.admin, "anywhere")
    nowhere = cloud.api.create(
        cloud.admin, {"name": "nowhere", "flavor": "huge", "image": "tiny", "availability_zone": "east"}
    )[0]
    assert nowhere["status"] == "ERROR" and not cloud.api.get(cloud.admin, "nowhere")["host"]
    # A host leaving the zone moves no server: in-east keeps the zone it was placed in.
    aggregates.remove_host(cloud.db, cloud.admin, "east", "compute-1")

    source = tmp_path / "servers.novakit.yml"
    source.write_text("plugin: novakit.cloud.novakit\n")
    listing = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(source), "--list"],
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "NOVAKIT_DB_URL": cloud.db.url,
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "playbooks" / "collections"),
            "ANSIBLE_INVENTORY_ENABLED": "novakit.cloud.novakit",
        },
    )
    inventory = json.loads(listing.stdout)
    zones = {
        g.removeprefix("novakit_az_"): sorted(v["hosts"])
        for g, v in inventory.items()
        if g.startswith("novakit_az_")
    }
    default = cloud.conf.scheduler.default_availability_zone
    expected: dict[str, list[str]] = {"east": ["in-east"]}
    expected.setdefault(anywhere["OS-EXT-AZ:availability_zone"], []).append("anywhere")
    assert placed["OS-EXT-AZ:availability_zone"] == "east"
    assert anywhere["OS-EXT-AZ:availability_zone"] == ("east" if anywhere["host"] == "compute-1" else default)
    # The server that was never placed is in no zone's group.
    assert zones == {k: sorted(v) for k, v in expected.items()}, inventory
