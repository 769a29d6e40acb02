"""Aggregates, availability zones and custom traits as an operator shapes a fleet with them (issue 31).

The cloud has compute-1 (8 vCPU), compute-2 (16) and compute-3 (32), all in the default zone
``nova`` until an aggregate with a zone takes them. Servers are asked into zones, onto named
hosts, onto hosts with a custom trait, onto hosts whose aggregate metadata matches the flavor;
each refusal names the field and the rule and changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from novakit import exceptions
from novakit.catalog import flavors
from novakit.cli.main import app
from novakit.context import RequestContext
from novakit.fleet import aggregates, hosts
from novakit.heal.manager import heal
from tests.functional.cloud import Cloud, boot

SMALL = {"flavor": "m1.small", "image": "tiny"}


def _east(cloud: Cloud, *members: str) -> dict[str, Any]:
    agg = aggregates.create(cloud.db, cloud.admin, "rack-east", availability_zone="east")
    for host in members:
        agg = aggregates.add_host(cloud.db, cloud.admin, "rack-east", host)
    return agg


def test_servers_asked_into_a_zone_land_only_on_its_hosts_and_full_says_which_zone(
    cloud: Cloud, ctx: RequestContext
) -> None:
    agg = _east(cloud, "compute-1")
    assert agg["hosts"] == ["compute-1"] and agg["availability_zone"] == "east"
    # compute-1 holds one m1.large (8 GB of its 16); the biggest hosts are elsewhere.
    first = cloud.api.create(
        ctx, {"name": "big-1", "flavor": "m1.large", "image": "tiny", "availability_zone": "east"}
    )
    assert first[0]["status"] == "ACTIVE"
    shown = cloud.api.get(cloud.admin, first[0]["id"])
    assert shown["host"] == "compute-1"
    assert shown["OS-EXT-AZ:availability_zone"] == "east"
    second = cloud.api.create(
        ctx, {"name": "big-2", "flavor": "m1.large", "image": "tiny", "availability_zone": "east"}
    )
    assert second[0]["status"] == "ERROR"
    fault = cloud.api.get(cloud.admin, second[0]["id"])["fault"]
    assert "not in availability zone east" in fault["details"]
    reasons = {
        host: why for step in json.loads(fault["details"])["steps"] for host, why in step["rejected"].items()
    }
    assert reasons["compute-2"] == reasons["compute-3"] == "not in availability zone east"
    # A server that names no zone goes anywhere, and records the zone it was placed in.
    anywhere = boot(cloud, ctx, "anywhere")
    assert anywhere["availability_zone"] == ("east" if anywhere["host"] == "compute-1" else "nova")


def test_zone_host_lands_there_for_an_admin_and_is_refused_for_a_member(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _east(cloud, "compute-1")
    [server] = cloud.api.create(
        cloud.admin, {"name": "pinned", "availability_zone": "east:compute-1", **SMALL}
    )
    assert cloud.api.get(cloud.admin, server["id"])["host"] == "compute-1"
    [node] = cloud.api.create(
        cloud.admin, {"name": "by-node", "availability_zone": "nova::compute-2", **SMALL}
    )
    assert cloud.api.get(cloud.admin, node["id"])["host"] == "compute-2"
    before = cloud.snapshot()
    with pytest.raises(exceptions.PolicyNotAuthorized, match="server:forced_host"):
        cloud.api.create(ctx, {"name": "sneaky", "availability_zone": "east:compute-1", **SMALL})
    with pytest.raises(exceptions.ValidationError, match="compute-2 is in zone nova, not east") as err:
        cloud.api.create(cloud.admin, {"name": "wrong", "availability_zone": "east:compute-2", **SMALL})
    assert err.value.field == "availability_zone"
    with pytest.raises(exceptions.ValidationError, match="no compute host 'nowhere'"):
        cloud.api.create(cloud.admin, {"name": "wrong", "availability_zone": "east:nowhere", **SMALL})
    assert cloud.snapshot() == before


def test_a_flavor_requiring_a_custom_trait_lands_only_where_it_is_and_one_forbidding_it_never(
    cloud: Cloud, ctx: RequestContext
) -> None:
    assert hosts.set_traits(cloud.db, cloud.admin, "compute-2", ["CUSTOM_SSD"]) == ["CUSTOM_SSD"]
    base = {"vcpus": 1, "memory_mb": 512, "root_gb": 1}
    flavors.create(
        cloud.db, cloud.admin, {"name": "ssd", **base, "extra_specs": {"trait:CUSTOM_SSD": "required"}}
    )
    flavors.create(
        cloud.db, cloud.admin, {"name": "spin", **base, "extra_specs": {"trait:CUSTOM_SSD": "forbidden"}}
    )
    on_ssd = [boot(cloud, ctx, f"db-{n}", flavor="ssd")["host"] for n in range(3)]
    assert set(on_ssd) == {"compute-2"}
    off_ssd = [boot(cloud, ctx, f"web-{n}", flavor="spin")["host"] for n in range(4)]
    assert "compute-2" not in off_ssd
    # Removed: the trait places nothing any more, and the driver's own trait is not the operator's.
    assert hosts.unset_traits(cloud.db, cloud.admin, "compute-2", ["CUSTOM_SSD"]) == []
    [lost] = cloud.api.create(ctx, {"name": "db-x", "flavor": "ssd", "image": "tiny"})
    assert lost["status"] == "ERROR"
    assert hosts.custom_traits(cloud.db, "compute-2") == []


def test_aggregate_metadata_is_matched_by_aggregate_instance_extra_specs(
    cloud: Cloud, ctx: RequestContext
) -> None:
    aggregates.create(cloud.db, cloud.admin, "gpu-racks", metadata={"gpu": "true"})
    aggregates.add_host(cloud.db, cloud.admin, "gpu-racks", "compute-1")
    flavors.create(
        cloud.db,
        cloud.admin,
        {
            "name": "gpu",
            "vcpus": 1,
            "memory_mb": 512,
            "root_gb": 1,
            "extra_specs": {"aggregate_instance_extra_specs:gpu": "true"},
        },
    )
    assert {boot(cloud, ctx, f"g-{n}", flavor="gpu")["host"] for n in range(3)} == {"compute-1"}
    aggregates.update(cloud.db, cloud.admin, "gpu-racks", metadata={"gpu": "false"})
    [refused] = cloud.api.create(ctx, {"name": "g-x", "flavor": "gpu", "image": "tiny"})
    assert refused["status"] == "ERROR"
    assert "gpu" in cloud.api.get(cloud.admin, refused["id"])["fault"]["details"]


def test_moving_a_host_between_zones_changes_new_placements_not_old_servers(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _east(cloud, "compute-1")
    aggregates.create(cloud.db, cloud.admin, "rack-west", availability_zone="west")
    old = boot(cloud, ctx, "old", availability_zone="east")
    assert (old["host"], old["availability_zone"]) == ("compute-1", "east")
    with pytest.raises(exceptions.Conflict, match="one availability zone only"):
        aggregates.add_host(cloud.db, cloud.admin, "rack-west", "compute-1")
    aggregates.remove_host(cloud.db, cloud.admin, "rack-east", "compute-1")
    aggregates.add_host(cloud.db, cloud.admin, "rack-west", "compute-1")
    new = boot(cloud, ctx, "new", availability_zone="west")
    assert (new["host"], new["availability_zone"]) == ("compute-1", "west")
    assert cloud.api.get(ctx, old["id"])["availability_zone"] == "east"  # moves no server
    [stuck] = cloud.api.create(ctx, {"name": "east-again", "availability_zone": "east", **SMALL})
    assert stuck["status"] == "ERROR"  # east has no host any more
    # Renaming the west zone moves its hosts with it; servers keep theirs.
    aggregates.update(cloud.db, cloud.admin, "rack-west", availability_zone="south")
    assert boot(cloud, ctx, "newer", availability_zone="south")["host"] == "compute-1"
    assert cloud.api.get(ctx, new["id"])["availability_zone"] == "west"


def test_a_moved_server_records_the_zone_of_the_host_it_is_on(cloud: Cloud, ctx: RequestContext) -> None:
    """Nova writes the destination's zone on a move; a revert writes the source's back. (A server
    asked into a zone stays in it when moved, as in Nova: this one asked for none.)"""
    server = boot(cloud, ctx, "mover")
    source = server["host"]
    assert server["availability_zone"] == "nova"
    first, second = sorted({"compute-1", "compute-2", "compute-3"} - {source})
    _east(cloud, first, second)
    cloud.api.act(cloud.admin, server["id"], "migrate", {"host": first})
    moved = cloud.api.get(cloud.admin, server["id"])
    assert (moved["host"], moved["OS-EXT-AZ:availability_zone"]) == (first, "east")
    cloud.api.act(ctx, "mover", "revert_resize")
    back = cloud.api.get(cloud.admin, server["id"])
    assert (back["host"], back["OS-EXT-AZ:availability_zone"]) == (source, "nova")
    cloud.api.act(cloud.admin, server["id"], "live_migrate", {"host": second})
    live = cloud.api.get(cloud.admin, server["id"])
    assert (live["host"], live["OS-EXT-AZ:availability_zone"]) == (second, "east")


def test_zones_listed_with_availability_and_heal_names_a_zone_with_no_enabled_host(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _east(cloud, "compute-1")
    aggregates.create(cloud.db, cloud.admin, "empty", availability_zone="west")
    assert aggregates.list_zones(cloud.db, ctx, cloud.conf) == [
        {"zone": "east", "available": True},
        {"zone": "nova", "available": True},
        {"zone": "west", "available": False},
    ]
    with pytest.raises(exceptions.PolicyNotAuthorized):
        aggregates.list_zones(cloud.db, ctx, cloud.conf, long=True)
    hosts.set_disabled(cloud.db, cloud.admin, "compute-1", True, "maintenance")
    detailed = aggregates.list_zones(cloud.db, cloud.admin, cloud.conf, long=True)
    assert detailed[0] == {"zone": "east", "available": False, "hosts": ["compute-1"]}
    assert detailed[1]["hosts"] == ["compute-2", "compute-3"]
    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, dry_run=True)
    assert report.zones_without_enabled_host == ["east", "west"]


def test_default_schedule_zone_applies_when_none_is_asked(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.compute.api import API
    from novakit.config import load_config

    _east(cloud, "compute-2")
    conf = load_config(
        db_url=cloud.db.url,
        state_dir=cloud.conf.state_dir,
        quota={"instances": -1, "cores": -1, "ram": -1},
        scheduler={"default_schedule_zone": "east"},
    )
    cloud.api = API(cloud.db, conf)
    placed = [boot(cloud, ctx, f"s-{n}") for n in range(3)]
    assert {(s["host"], s["availability_zone"]) for s in placed} == {("compute-2", "east")}
    # Asked for explicitly, another zone still wins.
    assert boot(cloud, ctx, "elsewhere", availability_zone="nova")["host"] != "compute-2"


BAD: list[tuple[str, Callable[[Cloud], Any], type[Exception], str]] = [
    (
        "unknown host",
        lambda c: aggregates.add_host(c.db, c.admin, "rack-east", "nowhere"),
        exceptions.NotFound,
        "nowhere",
    ),
    (
        "unknown aggregate",
        lambda c: aggregates.add_host(c.db, c.admin, "nope", "compute-2"),
        exceptions.NotFound,
        "nope",
    ),
    (
        "second zone",
        lambda c: aggregates.add_host(c.db, c.admin, "rack-west", "compute-1"),
        exceptions.Conflict,
        "one availability zone only",
    ),
    (
        "zone change to a second zone",
        lambda c: aggregates.update(c.db, c.admin, "loose", availability_zone="north"),
        exceptions.Conflict,
        "compute-1 is in availability zone east",
    ),
    (
        "host already in it",
        lambda c: aggregates.add_host(c.db, c.admin, "rack-east", "compute-1"),
        exceptions.Conflict,
        "already in aggregate",
    ),
    (
        "host not in it",
        lambda c: aggregates.remove_host(c.db, c.admin, "rack-west", "compute-1"),
        exceptions.Conflict,
        "not in aggregate",
    ),
    (
        "empty zone",
        lambda c: aggregates.create(c.db, c.admin, "z", availability_zone=""),
        exceptions.ValidationError,
        "availability_zone",
    ),
    (
        "control characters",
        lambda c: aggregates.create(c.db, c.admin, "z", availability_zone="ea\x07st"),
        exceptions.ValidationError,
        "control characters",
    ),
    (
        "colon in a zone",
        lambda c: aggregates.update(c.db, c.admin, "rack-west", availability_zone="a:b"),
        exceptions.ValidationError,
        "':'",
    ),
    (
        "taken name",
        lambda c: aggregates.create(c.db, c.admin, "rack-west"),
        exceptions.Conflict,
        "rack-west already exists",
    ),
    (
        "long metadata key",
        lambda c: aggregates.create(c.db, c.admin, "z", metadata={"k" * 256: "v"}),
        exceptions.ValidationError,
        "metadata key",
    ),
    (
        "long metadata value",
        lambda c: aggregates.update(c.db, c.admin, "rack-west", metadata={"k": "v" * 256}),
        exceptions.ValidationError,
        "at most 255",
    ),
    (
        "delete with hosts",
        lambda c: aggregates.delete(c.db, c.admin, "rack-east"),
        exceptions.Conflict,
        "still holds hosts compute-1",
    ),
    (
        "not a custom trait",
        lambda c: hosts.set_traits(c.db, c.admin, "compute-1", ["CUSTOM_OK", "ssd"]),
        exceptions.ValidationError,
        "CUSTOM_[A-Z0-9_]+",
    ),
    (
        "capability trait",
        lambda c: hosts.unset_traits(c.db, c.admin, "compute-1", ["CUSTOM_ADMIN_PASSWORD"]),
        exceptions.ValidationError,
        "owned by the host's driver",
    ),
    (
        "trait of an unknown host",
        lambda c: hosts.set_traits(c.db, c.admin, "nowhere", ["CUSTOM_X"]),
        exceptions.NotFound,
        "nowhere",
    ),
    (
        "member creates",
        lambda c: aggregates.create(c.db, RequestContext("p", "u", ["member"]), "z"),
        exceptions.PolicyNotAuthorized,
        "aggregate:create",
    ),
    (
        "member sets a trait",
        lambda c: hosts.set_traits(c.db, RequestContext("p", "u", ["member"]), "compute-1", ["CUSTOM_X"]),
        exceptions.PolicyNotAuthorized,
        "host:traits",
    ),
    (
        "create: empty zone",
        lambda c: c.api.create(c.admin, {"name": "s", "availability_zone": "\t", **SMALL}),
        exceptions.ValidationError,
        "availability_zone",
    ),
    (
        "create: unknown zone",
        lambda c: c.api.create(c.admin, {"name": "s", "availability_zone": "mars", **SMALL}),
        exceptions.ValidationError,
        "east, nova, west",
    ),
]


def test_bad_input_is_refused_naming_the_rule_and_changes_nothing(cloud: Cloud) -> None:
    _east(cloud, "compute-1")
    aggregates.create(cloud.db, cloud.admin, "rack-west", availability_zone="west")
    aggregates.create(cloud.db, cloud.admin, "loose")
    aggregates.add_host(cloud.db, cloud.admin, "loose", "compute-1")
    before = cloud.snapshot()
    # One cloud for every case (a cloud per case costs minutes on PostgreSQL): each must leave it as it was.
    for what, call, error, words in BAD:
        with pytest.raises(error) as err:
            call(cloud)
        assert words in str(err.value), (what, str(err.value))
        assert cloud.snapshot() == before, what


def test_the_cli_as_an_operator_types_it(cloud: Cloud, db_url: str, tmp_path: Path) -> None:
    env = {
        "NOVAKIT_DB_URL": db_url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_CONFIG": None,
        "NOVAKIT_PROJECT": "admin",
        "NOVAKIT_USER": "admin",
        "NOVAKIT_ROLES": "admin",
        "COLUMNS": "250",
    }
    runner = CliRunner()

    def nk(*args: str, code: int = 0, **more: str) -> str:
        result = runner.invoke(app, list(args), env={**env, **more})
        assert result.exit_code == code, (args, result.stdout, result.stderr)
        return result.stdout if code == 0 else result.stderr

    made = json.loads(
        nk("aggregate", "create", "rack-1", "--zone", "east", "--property", "ssd=true", "-f", "json")
    )
    assert made["availability_zone"] == "east" and made["metadata"] == {"ssd": "true"}
    nk("aggregate", "add", "host", "rack-1", "compute-1")
    assert "one availability zone only" in nk("aggregate", "create", "rack-2", "--zone", "west") + nk(
        "aggregate", "add", "host", "rack-2", "compute-1", code=1
    )
    listed = json.loads(nk("aggregate", "list", "--long", "-f", "json"))
    assert [(a["name"], a["hosts"]) for a in listed] == [("rack-1", ["compute-1"]), ("rack-2", [])]
    nk("aggregate", "set", "rack-1", "--property", "gpu=no")
    shown = json.loads(nk("aggregate", "unset", "rack-1", "--property", "ssd", "-f", "json"))
    assert shown["metadata"] == {"gpu": "no"}
    zones = json.loads(nk("availability", "zone", "list", "-f", "json"))
    assert [(z["zone"], z["available"]) for z in zones] == [("east", True), ("nova", True), ("west", False)]
    assert "not available" in nk("availability", "zone", "list")
    assert "compute-1" in nk("availability", "zone", "list", "--long")
    assert "Policy does not allow" in nk(
        "availability", "zone", "list", "--long", code=1, NOVAKIT_ROLES="member"
    )
    assert "CUSTOM_SSD" in nk("host", "set", "compute-1", "--trait", "CUSTOM_SSD")
    host = json.loads(nk("host", "show", "compute-1", "-f", "json"))
    assert host["availability_zone"] == "east" and host["aggregates"] == ["rack-1"]
    assert host["custom_traits"] == ["CUSTOM_SSD"]
    assert "owned by the host's driver" in nk(
        "host", "unset", "compute-1", "--trait", "CUSTOM_ADMIN_PASSWORD", code=1
    )
    assert "still holds hosts compute-1" in nk("aggregate", "delete", "rack-1", code=1)
    nk("aggregate", "remove", "host", "rack-1", "compute-1")
    assert "rack-1 deleted" in nk("aggregate", "delete", "rack-1")
    nk("server", "create", "web", "--flavor", "m1.small", "--image", "tiny", "--availability-zone", "nova")
    show = nk("server", "show", "web")
    assert "OS-EXT-AZ:availability_zone" in show and "nova" in show
