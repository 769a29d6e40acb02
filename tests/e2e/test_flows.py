"""The collection as a user drives it through ansible-runner: placement, lifecycle, modules,
failures, the inventory and callback plugins, secrets. One prepared fleet (prepared.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from novakit.catalog import flavors, images
from novakit.context import RequestContext
from novakit.fleet import hosts
from novakit.host.messages import HostResources
from novakit.runner import RunResult, run
from tests.e2e.prepared import api_for, fleet_env

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
ADMIN = RequestContext.admin()
# inventory/local.yml's hosts, and what they can give (RAM less the 512 MB reserved for the host)
FREE_RAM = {"compute-small": 8192 - 512, "compute-medium": 16384 - 512, "compute-large": 32768 - 512}


def play(
    playbook: str | Path,
    tmp_path: Path,
    env: dict[str, str],
    extravars: dict[str, Any] | None = None,
    **kwargs: Any,
) -> RunResult:
    return run(playbook, private_data_dir=tmp_path / "runner", envvars=env, extravars=extravars, **kwargs)


def results_of(result: RunResult, task: str) -> list[dict[str, Any]]:
    return [
        e["event_data"]["res"]
        for e in result.runner.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed") and e["event_data"].get("task") == task
    ]


def allocations(env: dict[str, str]) -> int:
    """How many consumers (servers) hold resources."""
    with api_for(env).db.reader() as session:
        return int(session.execute(text("SELECT COUNT(DISTINCT consumer_id) FROM allocations")).scalar_one())


def fake_guests(env: dict[str, str]) -> dict[str, list[str]]:
    out = {}
    for path in Path(env["NOVAKIT_FAKE_STATE_DIR"]).glob("*.json"):
        out[path.stem] = list(json.loads(path.read_text())["instances"])
    return out


def expected_placement(count: int, ram: int, multiplier: float) -> Counter[str]:
    """What the RAM weigher says: each server goes where multiplier x free RAM is highest."""
    free, placed = dict(FREE_RAM), Counter[str]()
    for _ in range(count):
        host = max((h for h in free if free[h] >= ram), key=lambda h: multiplier * free[h])
        free[host] -= ram
        placed[host] += 1
    return placed


@pytest.mark.parametrize("multiplier", [1.0, -1.0], ids=["spread", "stack"])
def test_servers_land_where_the_weighers_say(prepared_fleet: Path, tmp_path: Path, multiplier: float) -> None:
    env = fleet_env(
        prepared_fleet,
        tmp_path,
        f'[scheduler]\nweighers = ["RAMWeigher"]\nram_weight_multiplier = {multiplier}\n',
    )
    api = api_for(env)
    flavors.create(api.db, ADMIN, {"name": "m1.6g", "vcpus": 1, "memory_mb": 6000, "root_gb": 1})
    result = play("boot", tmp_path, env, {"server_name": "w", "count": 6, "flavor": "m1.6g"}, ident="weigh")
    assert result.ok, result.runner.stdout.read()
    servers = api.list(ADMIN)
    assert all(s["status"] == "ACTIVE" for s in servers)
    assert Counter(s["host"] for s in servers) == expected_placement(6, 6000, multiplier)
    # The callback gave the run the runner's ident as request id, and every module used it.
    assert result.request_id == "req-weigh"
    assert {api.list_actions(ADMIN, s["id"])[0]["request_id"] for s in servers} == {"req-weigh"}


def test_lifecycle_playbooks_and_the_inventory_plugin(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    assert play("boot", tmp_path, env, {"server_name": "life", "count": 2}).ok
    assert allocations(env) == 2

    stop = play("server_action", tmp_path, env, {"server_action": "stop", "servers": "life-1, life-2"})
    assert stop.ok, stop.runner.stdout.read()
    assert {s["status"] for s in api.list(ADMIN)} == {"SHUTOFF"}
    actions = api.list_actions(ADMIN, "life-1")
    assert [a["action"] for a in actions] == ["create", "stop"]
    assert actions[1]["request_id"] == stop.request_id and actions[1]["finish_time"] is not None
    assert actions[1]["events"][0]["host"] == api.get(ADMIN, "life-1")["host"]
    again = play("server_action", tmp_path, env, {"server_action": "stop", "servers": "life-1,life-2"})
    assert again.ok and again.stats["changed"] == {}

    # The inventory plugin lists what was booted, grouped by host and status.
    source = tmp_path / "servers.novakit.yml"
    source.write_text(
        "plugin: novakit.cloud.novakit\nkeyed_groups:\n  - key: novakit_flavor\n    prefix: flavor\n"
    )
    listing = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(source), "--list"],
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            **env,
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "playbooks" / "collections"),
            "ANSIBLE_INVENTORY_ENABLED": "novakit.cloud.novakit",
        },
    )
    inventory = json.loads(listing.stdout)
    hostvars = inventory["_meta"]["hostvars"]
    for server in api.list(ADMIN):
        # ansible-inventory marks strings a plugin read from elsewhere as unsafe (not templated).
        address = hostvars[server["name"]]["ansible_host"]
        address = address.get("__ansible_unsafe") if isinstance(address, dict) else address
        assert address == server["addresses"][0]
        assert server["name"] in inventory[f"novakit_host_{server['host'].replace('-', '_')}"]["hosts"]
    assert sorted(inventory["novakit_status_shutoff"]["hosts"]) == ["life-1", "life-2"]
    assert sorted(inventory["flavor_m1_small"]["hosts"]) == ["life-1", "life-2"]

    delete = play("delete", tmp_path, env, {"servers": "life-1,life-2"})
    assert delete.ok, delete.runner.stdout.read()
    assert api.list(ADMIN) == [] and allocations(env) == 0
    assert all(guests == [] for guests in fake_guests(env).values())
    assert play("delete", tmp_path, env, {"servers": "life-1,life-2"}).stats["changed"] == {}


def test_modules_in_direct_mode_keep_secrets_out_of_the_artifacts(
    prepared_fleet: Path,
    tmp_path: Path,
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    flavors.create(api.db, ADMIN, {"name": "m1.giant", "vcpus": 2, "memory_mb": 40000})
    result = play(ROOT / "tests" / "e2e" / "playbooks" / "modules.yml", tmp_path, env, verbosity=3)
    assert result.ok, result.runner.stdout.read()

    def one(task: str) -> dict[str, Any]:
        (res,) = results_of(result, task)
        return res

    plan = one("Plan a server (check mode)")
    assert plan["changed"] and plan["would_schedule_to"] == "compute-large"  # the most free RAM
    created = one("Create the server")
    assert created["changed"] and created["server"]["status"] == "ACTIVE"
    assert created["server"]["host"] == plan["would_schedule_to"]
    assert one("Create the server again")["changed"] is False
    assert one("Stop the server")["actions"] == ["stop"] and one("Stop the server again")["changed"] is False
    assert one("Lock the server")["changed"] and one("Lock the server again")["changed"] is False
    trail = one("Read the server and its audit trail")["servers"][0]["actions"]
    assert [a["action"] for a in trail] == ["create", "stop", "lock"]
    assert one("An anti-affinity group")["changed"] and not one("The same group again")["changed"]
    wrong = one("A group with a rule its policy does not take")
    assert "applies to policy anti-affinity only" in wrong["msg"]
    members = [r["server"]["host"] for r in one("Two members of the group")["results"]]
    assert len(set(members)) == 2  # anti-affinity: two hosts
    limits = one("A quota for the admin project")["quota"]
    assert (limits["instances"]["limit"], limits["volumes"]["limit"], limits["gigabytes"]["limit"]) == (
        8,
        4,
        40,
    )
    assert one("The same quota again")["changed"] is False
    giant = one("A server no host can take")
    assert "No valid host" in giant["msg"] and "MEMORY_MB" in json.dumps(giant.get("server", giant))
    assert one("Delete the server")["changed"] and one("Delete the server again")["changed"] is False

    # Check mode created nothing of its own; the deleted server's claim is gone.
    assert sorted(s["name"] for s in api.list(ADMIN)) == ["giant", "member-1", "member-2"]
    assert allocations(env) == 2
    _assert_no_secret(tmp_path / "runner", ["ud-secret-5f1c9e", "pw-secret-77ab20"])


def _assert_no_secret(private_dir: Path, secrets: list[str]) -> None:
    import base64

    needles = [*secrets, *(base64.b64encode(s.encode()).decode() for s in secrets)]
    files = [p for p in private_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        content = path.read_text(errors="replace")
        for needle in needles:
            assert needle not in content, f"{needle} found in {path}"


def test_an_unreachable_host_becomes_a_fault_and_its_build_goes_elsewhere(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (tmp_path / "novakit.toml").write_text(
        '[compute]\nservice_down_time = 86400\n[scheduler]\nweighers = ["RAMWeigher"]\n'
    )
    env = {
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(tmp_path / "novakit.toml"),
    }
    api = api_for(env)
    # compute-dead is the biggest host, so the scheduler sends the build there first.
    for host, ram in (("compute-alive", 16384), ("compute-dead", 65536)):
        hosts.register_host(
            api.db,
            api.conf,
            host,
            HostResources(
                hypervisor_hostname=host,
                hypervisor_type="fake",
                vcpus=16,
                memory_mb=ram,
                local_gb=500,
            ),
            {"driver": "fake", "options": {}, "transport": "local"},
        )
    flavors.create(api.db, ADMIN, {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 20})
    images.create(api.db, ADMIN, {"name": "tiny"})

    result = play(
        "boot",
        tmp_path,
        env,
        {"server_name": "far", "user_data": "ud-secret-unreach"},
        inventory=ROOT / "tests" / "e2e" / "inventory" / "unreachable.yml",
        verbosity=3,
    )
    out = result.runner.stdout.read()
    # compute-dead counts as unreachable in the recap (what AWX reads), so the run fails (rc 4)
    # although its server was rescheduled and is active.
    assert (result.status, result.rc) == ("failed", 4), out
    assert list(result.stats.get("dark") or {}) == ["compute-dead"], result.stats
    server = api.get(ADMIN, "far")
    assert server["status"] == "ACTIVE" and server["host"] == "compute-alive"
    # compute-dead never answered, so it left no event of its own: its trace is the fault.
    events = api.list_actions(ADMIN, "far")[0]["events"]
    # The unreachable host's attempt is in the audit trail too, failed, before the one that worked.
    assert [(e["host"], e["result"]) for e in events] == [
        ("compute-dead", "Error"),
        ("compute-alive", "Success"),
    ]
    with api.db.reader() as session:
        faults = session.execute(
            text("SELECT host, message FROM instance_faults WHERE instance_uuid = :u"), {"u": server["id"]}
        ).all()
    assert [f.host for f in faults] == ["compute-dead"]
    assert "host compute-dead unreachable" in faults[0].message
    # The callback's table closes the run.
    assert "NOVAKIT SUMMARY" in out and "far" in out.split("NOVAKIT SUMMARY")[1]
    _assert_no_secret(tmp_path / "runner", ["ud-secret-unreach"])


def test_image_cache_playbook_fills_each_hosts_cache(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    result = play("image_cache", tmp_path, env, {"images": "tiny"})
    assert result.ok, result.runner.stdout.read()
    api = api_for(env)
    tiny = next(i for i in images.list_images(api.db) if i["name"] == "tiny")
    assert all(tiny["id"] in h["cached_images"] for h in hosts.list_hosts(api.db, api.conf))


def test_ansible_test_sanity_passes() -> None:
    proc = subprocess.run([str(ROOT / "tests" / "sanity.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
