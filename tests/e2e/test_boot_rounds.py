"""boot.yml's build loop: it runs rounds until the conductor returns no follow-ups, so the
reschedule bound is the conductor's ``scheduler.max_attempts`` and nothing in the playbook; and
servers recorded without a build (``novakit server create --no-wait``, ``API.create(...,
build=False)``) get built."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from novakit.catalog import flavors, images
from novakit.context import RequestContext
from novakit.fleet import hosts
from novakit.host.messages import HostResources
from novakit.virt.fake import failure_env_var
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_flows import play

pytestmark = pytest.mark.e2e
ADMIN = RequestContext.admin()
# Five fake hosts; with the RAM weigher alone the scheduler tries them in this order.
FLEET = {"big-1": 65536, "big-2": 49152, "big-3": 32768, "big-4": 24576, "small": 16384}


def five_hosts(tmp_path: Path, max_attempts: int = 5) -> tuple[dict[str, str], Path]:
    """FLEET registered in a fresh database, its inventory, and the environment that selects both."""
    state = tmp_path / "state"
    conf = tmp_path / "novakit.toml"
    conf.write_text(
        "[compute]\nservice_down_time = 86400\n"
        f'[scheduler]\nweighers = ["RAMWeigher"]\nmax_attempts = {max_attempts}\n'
    )
    env = {
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(conf),
    }
    api = api_for(env)
    for host, ram in FLEET.items():
        hosts.register_host(
            api.db,
            api.conf,
            host,
            HostResources(
                hypervisor_hostname=host, hypervisor_type="fake", vcpus=16, memory_mb=ram, local_gb=500
            ),
            {"driver": "fake", "options": {}, "transport": "local"},
        )
    flavors.create(api.db, ADMIN, {"name": "m1.small", "vcpus": 1, "memory_mb": 2048, "root_gb": 20})
    images.create(api.db, ADMIN, {"name": "tiny"})
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        "    ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "  hosts:\n    localhost:\n  children:\n    novakit_compute:\n      vars:\n"
        "        novakit_driver: fake\n      hosts:\n" + "".join(f"        {h}:\n" for h in FLEET)
    )
    return env, inventory


def failing(*names: str) -> dict[str, str]:
    return {failure_env_var(h): "fail_every_spawn" for h in names}


def claims_of(env: dict[str, str], uuid: str) -> list[str]:
    """The providers (hosts) that hold resources for ``uuid``."""
    with api_for(env).db.reader() as session:
        rows = session.execute(
            text(
                "SELECT DISTINCT rp.name FROM allocations a "
                "JOIN resource_providers rp ON rp.id = a.resource_provider_id WHERE a.consumer_id = :u"
            ),
            {"u": uuid},
        ).all()
    return sorted(r.name for r in rows)


def test_a_build_that_needs_five_attempts_gets_five(tmp_path: Path) -> None:
    env, inventory = five_hosts(tmp_path)
    env.update(failing("big-1", "big-2", "big-3", "big-4"))
    result = play("boot", tmp_path, env, {"server_name": "stubborn"}, inventory=inventory)
    out = result.runner.stdout.read()
    assert result.ok, out
    api = api_for(env)
    server = api.get(ADMIN, "stubborn")
    assert (server["status"], server["task_state"], server["host"]) == ("ACTIVE", None, "small")
    (create,) = api.list_actions(ADMIN, server["id"])
    assert create["finish_time"] is not None and create["request_id"] == result.request_id
    assert [(e["host"], e["result"]) for e in create["events"]] == [
        ("big-1", "Error"),
        ("big-2", "Error"),
        ("big-3", "Error"),
        ("big-4", "Error"),
        ("small", "Success"),
    ]
    assert claims_of(env, server["id"]) == ["small"]
    assert [(s["name"], s["status"], s["host"]) for s in result.servers] == [("stubborn", "ACTIVE", "small")]


def test_a_build_that_fails_every_attempt_ends_in_error_without_a_claim(tmp_path: Path) -> None:
    env, inventory = five_hosts(tmp_path)
    env.update(failing(*FLEET))
    result = play("boot", tmp_path, env, {"server_name": "doomed"}, inventory=inventory)
    out = result.runner.stdout.read()
    # A server in error fails the job (AWX shows it failed), after its result is published.
    assert not result.ok and result.runner.rc != 0, out
    assert "1 server(s) in error: doomed: " in out
    api = api_for(env)
    server = api.get(ADMIN, "doomed")
    assert (server["status"], server["task_state"]) == ("ERROR", None)
    assert server["fault"] and server["fault"]["message"]
    assert "doomed: ERROR" in out
    (create,) = api.list_actions(ADMIN, server["id"])
    assert create["finish_time"] is not None
    assert [(e["host"], e["result"]) for e in create["events"]] == [(h, "Error") for h in FLEET]
    assert claims_of(env, server["id"]) == []
    assert [(s["name"], s["status"]) for s in result.servers] == [("doomed", "ERROR")]

    # Turned off, the same outcome is a green run whose report says it.
    again = play(
        "boot", tmp_path, env, {"server_name": "doomed2", "novakit_fail_on_error": False}, inventory=inventory
    )
    assert again.ok, again.runner.stdout.read()
    assert api.get(ADMIN, "doomed2")["status"] == "ERROR"


def test_the_published_servers_are_all_of_the_boot_after_a_reschedule(tmp_path: Path) -> None:
    """Two servers on one host that fails its first spawn: one is rescheduled, both are published."""
    env, inventory = five_hosts(tmp_path, max_attempts=3)
    env[failure_env_var("big-1")] = "fail_first_spawn"
    result = play("boot", tmp_path, env, {"server_name": "pair", "count": 2}, inventory=inventory)
    assert result.ok, result.runner.stdout.read()
    servers = api_for(env).list(ADMIN)
    assert sorted(s["status"] for s in servers) == ["ACTIVE", "ACTIVE"]
    assert len({s["host"] for s in servers}) == 2  # one stayed on big-1, one moved on
    assert sorted((s["name"], s["status"]) for s in result.servers) == [
        ("pair-1", "ACTIVE"),
        ("pair-2", "ACTIVE"),
    ]


def wait_active(env: dict[str, str], name: str, timeout: float = 30) -> dict[str, Any]:
    api = api_for(env)
    deadline = time.monotonic() + timeout
    while True:
        server = api.get(ADMIN, name)
        if server["status"] != "BUILD" or time.monotonic() > deadline:
            return server
        time.sleep(0.2)


def test_server_create_no_wait_returns_and_a_worker_builds(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "novakit"),
            "server",
            "create",
            "later",
            "--flavor",
            "m1.small",
            "--image",
            "tiny",
            "--count",
            "2",
            "--no-wait",
            "--output",
            "json",
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # It returned with the servers recorded, not built, and said where the build is logged.
    assert {s["status"] for s in json.loads(proc.stdout)} == {"BUILD"}
    log = re.search(r"background worker builds them \(log: (\S+\.log)\)", proc.stderr.replace("\n", ""))
    assert log, proc.stderr
    for name in ("later-1", "later-2"):
        server = wait_active(env, name)
        assert server["status"] == "ACTIVE", (server, Path(log.group(1)).read_text())
        assert claims_of(env, server["id"]) == [server["host"]]
    assert "building" in Path(log.group(1)).read_text()  # the worker's log, written before it built


def test_boot_builds_a_server_recorded_and_never_scheduled(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    (recorded,) = api.create(ADMIN, {"name": "orphan", "flavor": "m1.small", "image": "tiny"}, build=False)
    assert (recorded["status"], recorded["task_state"], recorded["host"]) == ("BUILD", "scheduling", None)
    # Its owner (a run killed before its schedule step) is gone: its lease ran out.
    api.db.run_in_transaction(
        lambda s: s.execute(
            text("UPDATE instances SET task_lease_until = :t WHERE uuid = :u"),
            {"t": dt.datetime(2000, 1, 1), "u": recorded["id"]},
        )
    )

    result = play("boot", tmp_path, env, {"server_name": "orphan"})
    assert result.ok, result.runner.stdout.read()
    server = api.get(ADMIN, "orphan")
    assert server["id"] == recorded["id"]  # the same server, picked up, not a second one
    assert server["status"] == "ACTIVE" and server["host"]
    (create,) = api.list_actions(ADMIN, server["id"])
    assert create["finish_time"] is not None
    assert [(e["host"], e["result"]) for e in create["events"]] == [(server["host"], "Success")]
    assert [(s["id"], s["status"]) for s in result.servers] == [(server["id"], "ACTIVE")]

    again = play("boot", tmp_path, env, {"server_name": "orphan"})
    assert again.ok, again.runner.stdout.read()
    assert again.stats["changed"] == {}, again.stats
    assert [s["name"] for s in api.list(ADMIN)] == ["orphan"]
