"""The catalog modules (flavor, image, network, subnet, port, volume, server_group, quota) on their
one base, run in process as Ansible runs them: check mode is the library's dry run (nothing
written, the real run's refusal word for word), ``--diff`` shows before and after, and a second
identical run reports no change."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic

from tests.functional.cloud import Cloud

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"project": "admin-project", "user": "admin", "roles": ["admin"]}


@pytest.fixture
def run(cloud: Cloud, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """``run(module, args, check=False, diff=True)``: the module's result as Ansible reads it."""
    monkeypatch.syspath_prepend(str(ROOT / "playbooks" / "collections"))

    def call(name: str, args: dict[str, Any], *, check: bool = False, diff: bool = True) -> dict[str, Any]:
        module = importlib.import_module(f"ansible_collections.novakit.cloud.plugins.modules.{name}")
        given = {**ADMIN, "db_url": cloud.db.url, **args, "_ansible_check_mode": check, "_ansible_diff": diff}
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": given}).encode())
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            module.main()
        return json.loads(out.getvalue())

    return call


# (module, the task's options, a second resource's options that the real create refuses, its message)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "flavor",
        {"name": "m1.tiny", "vcpus": 1, "ram": 512, "disk": 1},
        {"name": "m1.none", "vcpus": 0, "ram": 512},
        "vcpus",
    ),
    (
        "image",
        {"name": "cirros", "location": "/srv/cirros.qcow2"},
        {"name": "direct", "properties": {"kernel_id": "nope"}},
        "no image is named or has the id 'nope'",
    ),
    ("network", {"name": "lan", "is_default": True}, {"name": "wan", "is_default": True}, "lan"),
    (
        "server_group",
        {"name": "spread", "policy": "anti-affinity"},
        {"name": "", "policy": "affinity"},
        "name",
    ),
    # refused inside the transaction that writes the row and claims the disk: rolled back in a dry run
    (
        "volume",
        {"name": "data", "size": 2},
        {"name": "big", "size": 500, "host": "compute-1"},
        "does not fit",
    ),
]


@pytest.mark.parametrize(("name", "args", "refused", "says"), CASES, ids=[c[0] for c in CASES])
def test_a_catalog_module_plans_creates_keeps_and_deletes(
    cloud: Cloud, run: Any, name: str, args: dict[str, Any], refused: dict[str, Any], says: str
) -> None:
    before = cloud.snapshot()
    plan = run(name, args, check=True)
    assert plan["changed"] and cloud.snapshot() == before, plan
    assert plan["diff"]["before"] == {} and plan["diff"]["after"]["name"] == args["name"], plan

    made = run(name, args)
    assert made["changed"] and made[name]["name"] == args["name"], made
    assert made["diff"] == {"before": {}, "after": made[name]}
    again = run(name, args)
    assert again["changed"] is False and again[name] == made[name], again
    assert again["diff"]["before"] == again["diff"]["after"]

    # What the real create refuses, check mode refuses with the same words, writing nothing.
    state = cloud.snapshot()
    dry, real = run(name, refused, check=True), run(name, refused)
    assert dry.get("failed") and real.get("failed") and dry["msg"] == real["msg"], (dry, real)
    assert says in real["msg"] and cloud.snapshot() == state

    state = cloud.snapshot()
    dry_delete = run(name, {"name": args["name"], "state": "absent"}, check=True)
    assert dry_delete["changed"] and cloud.snapshot() == state
    assert dry_delete["diff"] == {"before": made[name], "after": {}}
    assert run(name, {"name": args["name"], "state": "absent"})["changed"]
    assert run(name, {"name": args["name"], "state": "absent"})["changed"] is False


def test_a_catalog_resource_that_cannot_change_says_so(cloud: Cloud, run: Any) -> None:
    run("flavor", {"name": "m1.tiny", "vcpus": 1, "ram": 512})
    other = run("flavor", {"name": "m1.tiny", "vcpus": 2, "ram": 512}, check=True)
    assert other["failed"] and "flavors cannot change: create one with a new name" in other["msg"]
    assert "'vcpus': [1, 2]" in other["msg"] or "'vcpus': (1, 2)" in other["msg"], other["msg"]


def test_subnet_and_port_in_check_mode_are_the_real_checks(cloud: Cloud, run: Any) -> None:
    run("network", {"name": "lan"})
    subnet = {"name": "lan-v4", "network": "lan", "cidr": "10.40.0.0/24"}
    state = cloud.snapshot()
    assert run("subnet", subnet, check=True)["changed"] and cloud.snapshot() == state
    made = run("subnet", subnet)
    assert made["subnet"]["cidr"] == "10.40.0.0/24" and run("subnet", subnet)["changed"] is False
    overlap = {"name": "lan-wide", "network": "lan", "cidr": "10.40.0.0/16"}
    dry, real = run("subnet", overlap, check=True), run("subnet", overlap)
    assert dry["failed"] and dry["msg"] == real["msg"] and "overlaps subnet lan-v4" in real["msg"]

    port = {"name": "db", "network": "lan", "fixed_ips": [{"ip_address": "10.40.0.9"}]}
    assert run("port", port, check=True)["changed"]
    made = run("port", port)
    assert made["port"]["fixed_ips"][0]["ip_address"] == "10.40.0.9" and run("port", port)["changed"] is False
    taken = {"name": "db-2", "network": "lan", "fixed_ips": [{"ip_address": "10.40.0.9"}]}
    dry, real = run("port", taken, check=True), run("port", taken)
    assert dry["failed"] and dry["msg"] == real["msg"], (dry, real)

    # A subnet with an allocated address: deleting it is refused in check mode as for real.
    state = cloud.snapshot()
    dry, real = (
        run("subnet", {"name": "lan-v4", "state": "absent"}, check=True),
        run("subnet", {"name": "lan-v4", "state": "absent"}),
    )
    assert dry["failed"] and dry["msg"] == real["msg"] and cloud.snapshot() == state
    assert run("port", {"name": "db", "state": "absent"})["changed"]
    assert run("subnet", {"name": "lan-v4", "state": "absent"}, check=True)["changed"]
    assert run("subnet", {"name": "lan-v4", "state": "absent"})["changed"]


def test_quota_in_check_mode_and_diff(cloud: Cloud, run: Any) -> None:
    state = cloud.snapshot()
    dry = run("quota", {"name": "team-a", "volumes": 4}, check=True)
    assert dry["changed"] and dry["quota"]["volumes"]["limit"] == 4 and cloud.snapshot() == state
    assert dry["diff"]["after"]["volumes"] == 4 and dry["diff"]["before"]["volumes"] != 4
    real = run("quota", {"name": "team-a", "volumes": 4})
    assert real["changed"] and real["quota"] == dry["quota"] and real["project"] == "team-a"
    assert run("quota", {"name": "team-a", "volumes": 4})["changed"] is False
    bad = run("quota", {"name": "team-a", "cores": -2}, check=True)
    assert bad["failed"] and "quota cores: must be -1 (unlimited) or 0 to 2147483647, got -2" in bad["msg"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            {"name": "team-a", "instances": 2**63},
            "quota instances: must be -1 (unlimited) or 0 to 2147483647",
        ),
        ({"name": "team\na", "instances": 5}, "project: must be printable"),
        ({"name": "", "instances": 5}, "project: must be 1 to 255 characters"),
    ],
)
def test_quota_refuses_a_bad_limit_or_project_in_both_modes(
    cloud: Cloud, run: Any, args: dict[str, Any], words: str
) -> None:
    """Issue 25 item 14: SQLite's raw overflow text, a project with a newline, and an empty name
    that silently meant the caller's own project."""
    state = cloud.snapshot()
    for check in (True, False):
        bad = run("quota", args, check=check)
        assert bad["failed"] and words in bad["msg"], bad
    assert cloud.snapshot() == state
