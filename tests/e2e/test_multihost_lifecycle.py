"""Lifecycle actions through playbooks/server_action.yml and delete.yml on real guests of the testbed.

Each action ends in the state ``novakit states`` gives it (Nova's), with its action and its host's
events recorded, and the guest on the host in the matching libvirt state. A guest destroyed behind
novakit's back is found by heal, and what a user may then do is what Nova allows.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from novakit.context import RequestContext
from novakit.virt import guest_ready_line
from tests.e2e.testbed.fixtures import (
    Cloud,
    allocations_by_consumer,
    assert_nothing_lost,
    console_output,
    domains_by_host,
    wait_for_marker,
)

pytest_plugins = ["tests.e2e.testbed.fixtures"]
pytestmark = pytest.mark.e2e

ADMIN = RequestContext.admin()


def _boot_one(cloud: Cloud, name: str) -> dict[str, Any]:
    run = cloud.run("boot.yml", {"server_name": name, "count": 1, "flavor": "tb.small", "image": "tiny"})
    assert run.rc == 0, run.stdout.read()
    (server,) = cloud.api().list(ADMIN)
    assert server["status"] == "ACTIVE", server
    line = guest_ready_line(server["hostname"], server["id"])
    assert line in wait_for_marker(cloud.bed, server["host"], server)
    return server


def _act(cloud: Cloud, server: dict[str, Any], action: str, **extra: Any) -> dict[str, Any]:
    run = cloud.run(
        "delete.yml" if action == "delete" else "server_action.yml",
        {"server_action": action, "servers": server["id"], **extra},
    )
    assert run.rc == 0, f"{action}: {run.stdout.read()[-3000:]}"
    return run


def _last_action(cloud: Cloud, server: dict[str, Any]) -> dict[str, Any]:
    actions = cloud.api().list_actions(ADMIN, server["id"])
    return max(actions, key=lambda a: (a["start_time"], a.get("id", 0)))


def _domstate(cloud: Cloud, server: dict[str, Any]) -> str | None:
    return domains_by_host(cloud.bed)[server["host"]].get(server["id"])


# action, extra vars, (status, vm_state, power state name), libvirt's state of the domain afterwards
STEPS: list[tuple[str, dict[str, Any], tuple[str, str, str], str]] = [
    ("stop", {}, ("SHUTOFF", "stopped", "Shutdown"), "shut off"),
    ("start", {}, ("ACTIVE", "active", "Running"), "running"),
    ("reboot", {}, ("ACTIVE", "active", "Running"), "running"),
    ("reboot", {"reboot_type": "HARD"}, ("ACTIVE", "active", "Running"), "running"),
    ("pause", {}, ("PAUSED", "paused", "Paused"), "paused"),
    ("unpause", {}, ("ACTIVE", "active", "Running"), "running"),
    ("suspend", {}, ("SUSPENDED", "suspended", "Suspended"), "shut off"),
    ("resume", {}, ("ACTIVE", "active", "Running"), "running"),
    ("rebuild", {"image": "tiny"}, ("ACTIVE", "active", "Running"), "running"),
]
#: Actions after which the guest boots again, so its console shows one more ready marker
#: (resume restores the saved memory: no boot).
BOOTS = {"start", "reboot", "rebuild"}


def test_every_lifecycle_action_on_a_real_guest_ends_where_the_state_table_says(cloud: Cloud) -> None:
    server = _boot_one(cloud, "life")
    api = cloud.api()
    boots = 1
    for action, extra, (status, vm_state, power), domstate in STEPS:
        started = time.monotonic()
        _act(cloud, server, action, **extra)
        print(f"{action} {extra}: {time.monotonic() - started:.1f} s")
        now = api.get(ADMIN, server["id"])
        state = (now["status"], now["vm_state"], now["power_state_name"])
        assert state == (status, vm_state, power), (action, now)
        assert now["task_state"] is None and now["host"] == server["host"]
        assert _domstate(cloud, server) == domstate, action
        recorded = _last_action(cloud, server)
        expected_name = "reboot_hard" if extra.get("reboot_type") == "HARD" else action
        assert recorded["action"] in (action, expected_name) and recorded["finish_time"] is not None, recorded
        assert recorded["events"] and all(
            e["host"] == server["host"] and e["result"] == "Success" for e in recorded["events"]
        ), (action, recorded["events"])
        if action in BOOTS:
            # A rebuild starts a fresh console log; the others append to it.
            boots = 1 if action == "rebuild" else boots + 1
            line = guest_ready_line(server["hostname"], server["id"])
            assert wait_for_marker(cloud.bed, server["host"], server, boots).count(line) >= boots, action
        assert_nothing_lost(cloud)
    assert guest_ready_line(server["hostname"], server["id"]) in console_output(cloud, [server])[server["id"]]

    host = cloud.bed.host(server["host"])
    _act(cloud, server, "delete")
    assert api.list(ADMIN) == []
    assert server["id"] not in domains_by_host(cloud.bed)[host.name]
    assert not (host.instances_path / server["id"]).exists()
    assert server["id"] not in allocations_by_consumer(api.db)
    # A second delete of the same server changes nothing and is no error.
    _act(cloud, server, "delete")


def test_a_guest_destroyed_behind_novakits_back_is_found_by_heal_and_handled_as_nova_does(
    cloud: Cloud,
) -> None:
    server = _boot_one(cloud, "gone")
    host = cloud.bed.host(server["host"])
    domain = f"novakit-{server['id']}"
    cloud.bed.virsh(host, "destroy", domain)
    cloud.bed.virsh(host, "undefine", domain)

    heal = cloud.run("heal.yml")
    assert heal.rc == 0, heal.stdout.read()
    api = cloud.api()
    now = api.get(ADMIN, server["id"])
    assert now["status"] == "ERROR" and now["power_state_name"] == "NOSTATE", now
    assert "vanished" in now["fault"]["message"] and host.name in now["fault"]["message"]
    assert _last_action(cloud, server)["action"] == "heal"
    # Its claim stays with it on its host until it is rebuilt or deleted, as in Nova.
    assert allocations_by_consumer(api.db).get(server["id"]) == {host.name}

    # Nova refuses to start a server in error ...
    refused = cloud.run("server_action.yml", {"server_action": "start", "servers": server["id"]})
    assert refused.rc != 0 and "error" in refused.stdout.read()
    assert api.get(ADMIN, server["id"])["status"] == "ERROR"
    # ... and rebuilds it: a new guest from its image, on its host.
    _act(cloud, server, "rebuild", image="tiny")
    now = api.get(ADMIN, server["id"])
    assert (now["status"], now["host"]) == ("ACTIVE", host.name), now
    assert guest_ready_line(server["hostname"], server["id"]) in wait_for_marker(cloud.bed, host.name, server)
    assert_nothing_lost(cloud)

    _act(cloud, server, "delete")
    assert api.list(ADMIN) == [] and domains_by_host(cloud.bed)[host.name] == {}
    assert allocations_by_consumer(api.db) == {}
