"""Quotas, host aggregates and availability zones through ``novakit serve`` (issue 29, part 6):
the ``novakit aggregate``, ``availability zone`` and ``quota`` commands with ``--os-cloud``, and
the ``quota`` and ``host_aggregate`` modules with ``cloud:``, in an environment that names no
database. The service runs the library's calls (``novakit.quota.apply``,
``novakit.fleet.aggregates.apply``...) with the token's caller, so its policy refuses a member;
what they did is read back from the service's database.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from novakit import quota
from novakit.config import load_config
from novakit.fleet import aggregates, hosts
from tests.functional.service.own_tools import BIN, ROOT, Tools, cloud_for_tools, ok  # noqa: F401 (the fixture)

pytestmark = pytest.mark.xdist_group("service_own_tools_fleet")


def _served(tools: Tools, read: Any) -> Any:
    """``read(db, conf)`` over the service's database."""
    db = tools.served.database()
    try:
        return read(db, load_config(db_url=tools.served.db_url))
    finally:
        db.dispose()


def _hosts(tools: Tools) -> list[str]:
    """The cloud's compute hosts, as the service's database has them."""
    return sorted(h["host"] for h in _served(tools, lambda db, conf: hosts.list_hosts(db, conf)))


def _aggregate(tools: Tools, ref: str) -> dict[str, Any] | None:
    return _served(tools, lambda db, conf: aggregates.find(db, tools.admin, ref))


def _limits(tools: Tools, project: str) -> dict[str, int]:
    usage = _served(tools, lambda db, conf: quota.get_quota_usage(db, conf, project))
    return {resource: counted["limit"] for resource, counted in usage.items()}


def test_the_aggregate_and_zone_commands_go_through_the_cloud(tools: Tools) -> None:
    """An admin makes an aggregate with a zone and a host, sets and unsets its properties, lists
    the zones with their hosts; a member lists the zones without hosts and is refused the rest
    with the policy's words; a host in a second zone is refused; the admin empties and deletes it."""
    first, second, *_ = _hosts(tools)
    made = json.loads(
        ok(tools.novakit("--os-cloud", "nk", "aggregate", "create", "cli-east", "--zone", "cli-east",
                         "--property", "ssd=true", "-f", "json"))
    )  # fmt: skip
    assert (made["name"], made["availability_zone"], made["hosts"]) == ("cli-east", "cli-east", [])
    added = json.loads(
        ok(tools.novakit("--os-cloud", "nk", "aggregate", "add", "host", "cli-east", first, "-f", "json"))
    )
    assert added["hosts"] == [first]
    ok(tools.novakit("--os-cloud", "nk", "aggregate", "set", "cli-east", "--property", "rack=r1"))
    ok(tools.novakit("--os-cloud", "nk", "aggregate", "unset", "cli-east", "--property", "ssd"))
    seen = _aggregate(tools, "cli-east") or {}
    assert (seen.get("availability_zone"), seen.get("hosts"), seen.get("metadata")) == (
        "cli-east",
        [first],
        {"rack": "r1"},
    )
    listed = json.loads(ok(tools.novakit("--os-cloud", "nk", "aggregate", "list", "-f", "json")))
    assert "cli-east" in [a["name"] for a in listed]
    shown = json.loads(ok(tools.novakit("--os-cloud", "nk", "aggregate", "show", "cli-east", "-f", "json")))
    assert shown["hosts"] == [first] and shown["metadata"] == {"rack": "r1"}
    zones = json.loads(
        ok(tools.novakit("--os-cloud", "nk", "availability", "zone", "list", "--long", "-f", "json"))
    )
    assert {"cli-east": first} == {z["zone"]: z["host"] for z in zones if z["zone"] == "cli-east"}

    # The library's zone rule, through the service: refused, nothing written.
    ok(tools.novakit("--os-cloud", "nk", "aggregate", "create", "cli-west", "--zone", "cli-west"))
    twice = tools.novakit("--os-cloud", "nk", "aggregate", "add", "host", "cli-west", first)
    assert twice.returncode == 1 and "one availability zone only" in twice.stderr, twice.stderr
    assert (_aggregate(tools, "cli-west") or {}).get("hosts") == []

    # A member: the zones (Nova lets anyone list them), never their hosts nor the aggregates.
    theirs = json.loads(ok(tools.novakit("--os-cloud", "dev", "availability", "zone", "list", "-f", "json")))
    assert "cli-east" in [z["zone"] for z in theirs] and not any("hosts" in z for z in theirs)
    for args, rule in (
        (("availability", "zone", "list", "--long"), "availability_zone:detail"),
        (("aggregate", "list"), "aggregate:list"),
        (("aggregate", "show", "cli-east"), "aggregate:list"),
        (("aggregate", "create", "dev-agg", "--zone", "dev-zone"), "aggregate:create"),
        (("aggregate", "add", "host", "cli-west", second), "aggregate:host"),
        (("aggregate", "delete", "cli-west"), "aggregate:delete"),
    ):
        refused = tools.novakit("--os-cloud", "dev", *args)
        assert refused.returncode == 1 and f"Policy does not allow {rule}" in refused.stderr, (args, refused)
        assert "Traceback" not in refused.stderr
    assert _aggregate(tools, "dev-agg") is None and (_aggregate(tools, "cli-west") or {}).get("hosts") == []

    ok(tools.novakit("--os-cloud", "nk", "aggregate", "remove", "host", "cli-east", first))
    ok(tools.novakit("--os-cloud", "nk", "aggregate", "delete", "cli-east", "cli-west"))
    assert _aggregate(tools, "cli-east") is None and _aggregate(tools, "cli-west") is None
    assert tools.embedded_default_untouched()


def test_the_quota_commands_go_through_the_cloud(tools: Tools) -> None:
    """An admin sets and shows a project's quota; a member reads its own and is refused to set
    one; a project the identity does not know and a bad limit are refused, nothing written."""
    project = tools.admin.project_id
    rows = json.loads(
        ok(tools.novakit("--os-cloud", "nk", "quota", "set", project, "--instances", "31", "--key-pairs", "7",
                         "-f", "json"))
    )  # fmt: skip
    assert {r["resource"]: r["limit"] for r in rows}["instances"] == 31
    assert (_limits(tools, project)["instances"], _limits(tools, project)["key_pairs"]) == (31, 7)
    shown = json.loads(ok(tools.novakit("--os-cloud", "nk", "quota", "show", project, "-f", "json")))
    assert {r["resource"]: r["limit"] for r in shown}["key_pairs"] == 7

    # The member's own project is the admin project (its credential's): read, not set.
    own = json.loads(ok(tools.novakit("--os-cloud", "dev", "quota", "show", "-f", "json")))
    assert {r["resource"]: r["limit"] for r in own}["instances"] == 31
    refused = tools.novakit("--os-cloud", "dev", "quota", "set", project, "--instances", "99")
    assert refused.returncode == 1 and "Policy does not allow quota:update" in refused.stderr, refused.stderr

    unknown = tools.novakit("--os-cloud", "nk", "quota", "set", "no-such-project", "--instances", "5")
    assert unknown.returncode == 1 and "is not a project of the identity service" in unknown.stderr
    bad = tools.novakit("--os-cloud", "nk", "quota", "set", project, "--instances", "40", "--cores", "-2")
    assert bad.returncode == 1 and "quota cores: must be -1 (unlimited) or 0 to 2147483647" in bad.stderr
    assert _limits(tools, project)["instances"] == 31
    assert _limits(tools, "no-such-project") == _limits(tools, "another-unknown-project")
    assert tools.embedded_default_untouched()


def _play(tools: Tools, name: str, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """``tasks`` run by ansible-playbook (with --diff) in the tools' environment; every task's
    registered result, by the name it registers."""
    out = tools.directory / f"{name}.json"
    results = [t["register"] for t in tasks]
    play = tools.directory / f"{name}.yml"
    copy = "{{ {" + ", ".join(f"'{r}': {r}" for r in results) + "} | to_json }}"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [*tasks, {"ansible.builtin.copy": {"dest": str(out), "content": copy}}],
                }
            ]
        )
    )
    done = tools.play(play, "--diff")
    assert done.returncode == 0, done.stdout[-3000:]
    assert not [s for s in tools.served.secrets if s in done.stdout]
    seen: dict[str, Any] = json.loads(out.read_text())
    return seen


def _task(register: str, module: str, args: dict[str, Any], **keywords: Any) -> dict[str, Any]:
    return {"name": register, f"novakit.cloud.{module}": args, "register": register, **keywords}


@pytest.mark.slow  # ansible-playbook runs
def test_the_quota_and_host_aggregate_modules_take_a_cloud(tools: Tools, backend: str) -> None:
    """host_aggregate and quota with ``cloud:``: check mode first (the real run then finds
    nothing of it), the real run, a second one that changes nothing, a member refused with the
    policy's words, a task refused on its last host that writes nothing of its first, and the
    aggregate deleted (check mode first: its hosts still there for the real delete)."""
    if backend != "sqlite":
        pytest.skip("the modules drive the same service and calls on both back ends: SQLite only")
    first, second, *_ = _hosts(tools)
    project = tools.admin.project_id
    zone = {
        "cloud": "nk",
        "name": "mod-east",
        "availability_zone": "mod-east",
        "hosts": [first, second],
        "metadata": {"ssd": True},
    }
    limits = {"cloud": "nk", "name": project, "instances": 12, "volumes": 3}
    absent = {"cloud": "nk", "name": "mod-east", "state": "absent"}
    seen = _play(
        tools,
        "fleet-modules",
        [
            _task("agg_checked", "host_aggregate", zone, check_mode=True),
            _task("agg_made", "host_aggregate", zone),
            _task("agg_again", "host_aggregate", zone),
            _task("agg_member", "host_aggregate", {**zone, "cloud": "dev"}, ignore_errors=True),
            _task(
                "agg_half",
                "host_aggregate",
                {"cloud": "nk", "name": "mod-half", "hosts": [first, "no-such-host"]},
                ignore_errors=True,
            ),
            _task("quota_checked", "quota", limits, check_mode=True),
            _task("quota_made", "quota", limits),
            _task("quota_again", "quota", limits),
            _task("quota_member", "quota", {**limits, "cloud": "dev", "instances": 50}, ignore_errors=True),
            _task("agg_gone_checked", "host_aggregate", absent, check_mode=True),
            _task("agg_gone", "host_aggregate", absent),
        ],
    )

    checked, made, again = seen["agg_checked"], seen["agg_made"], seen["agg_again"]
    assert checked["changed"] and "aggregate" not in checked, checked
    assert checked["diff"]["after"]["hosts"] == [first, second] and "uuid" not in checked["diff"]["after"]
    # Check mode wrote nothing: the real run found no aggregate.
    assert made["changed"] and made["diff"]["before"] == {}, made
    assert made["aggregate"]["hosts"] == [first, second] and made["aggregate"]["metadata"] == {"ssd": "True"}
    assert not again["changed"] and again["aggregate"] == made["aggregate"], again
    member = seen["agg_member"]
    assert member["failed"] and "Policy does not allow aggregate:list" in member["msg"], member
    half = seen["agg_half"]
    assert half["failed"] and "no-such-host" in half["msg"], half
    assert _aggregate(tools, "mod-half") is None  # nor its first host: one transaction

    q_checked, q_made, q_again = seen["quota_checked"], seen["quota_made"], seen["quota_again"]
    assert q_checked["changed"] and q_checked["quota"]["instances"]["limit"] == 12, q_checked
    assert q_made["changed"] and q_made["diff"]["before"]["instances"] != 12, q_made
    assert q_made["project"] == project and q_made["quota"] == q_checked["quota"]
    assert not q_again["changed"]
    q_member = seen["quota_member"]
    assert q_member["failed"] and "Policy does not allow quota:update" in q_member["msg"], q_member
    assert (_limits(tools, project)["instances"], _limits(tools, project)["volumes"]) == (12, 3)

    gone_checked, gone = seen["agg_gone_checked"], seen["agg_gone"]
    assert gone_checked["changed"] and gone_checked["diff"]["after"] == {}
    # Check mode's delete wrote nothing: the real one found the aggregate with its hosts.
    assert gone["changed"] and gone["diff"]["before"]["hosts"] == [first, second], gone
    assert _aggregate(tools, "mod-east") is None
    zones = _served(tools, lambda db, conf: aggregates.list_zones(db, tools.admin, conf, long=True))
    assert "mod-east" not in [z["zone"] for z in zones]
    assert tools.embedded_default_untouched()
