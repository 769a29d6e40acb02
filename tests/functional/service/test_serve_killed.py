"""A ``novakit serve`` killed with builds in its pool (one spawning, the rest waiting to be
scheduled together) leaves every server to heal, as a killed CLI does: once their leases have run
out, each ends ACTIVE with its guest and its claim on its host, or in ERROR with neither, and no
guest or claim is left without its server.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from novakit.catalog import flavors, images
from novakit.db.models import utcnow
from novakit.heal.manager import heal
from novakit.placement import api as placement
from tests.functional.cloud import HOSTS, make_cloud
from tests.functional.service.conftest import keystone_admin, make_lan, serve_cloud
from tests.processes import alive, process_table, with_descendants

pytestmark = pytest.mark.xdist_group("service_killed")


def test_a_service_killed_with_builds_in_its_pool_leaves_them_to_heal(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One thread in the pool: while a build spawns (3 s on every host), the later ones wait.
    monkeypatch.setenv("NOVAKIT_SERVE_WORK_THREADS", "1")
    with serve_cloud(backend, tmp_path, "killed") as served:
        db = served.database()
        lib = make_cloud(
            db, tmp_path, hosts={host: {"failure_mode": "slow_spawn", "spawn_delay": 3} for host in HOSTS}
        )
        network = make_lan(db, keystone_admin(served))
        flavor = flavors.show(db, lib.admin, "m1.small")["id"]
        image = images.show(db, lib.admin, "tiny")["id"]
        token = served.issue()
        made = []
        with served.client() as http:
            for n in range(5):
                server = {
                    "name": f"cut-{n}",
                    "flavorRef": flavor,
                    "imageRef": image,
                    "networks": [{"uuid": network}],
                }
                answer = http.post(
                    "/compute/v2.1/servers", headers={"X-Auth-Token": token}, json={"server": server}
                )
                assert answer.status_code == 202, answer.text
                made.append(answer.json()["server"]["id"])
            # Until a build is on its host (spawning there, 3 s): the others wait behind it.
            deadline = time.monotonic() + 30
            building: list[tuple[str, str | None]] = []
            while time.monotonic() < deadline:
                listed = http.get("/compute/v2.1/servers/detail", headers={"X-Auth-Token": token}).json()
                building = [(s["status"], s["OS-EXT-SRV-ATTR:host"]) for s in listed["servers"]]
                if ("BUILD", None) in building and any(st == "BUILD" and h for st, h in building):
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"no build was on its host with others waiting within 30 s: {building}")
        killed = with_descendants([served.pid], process_table())
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in killed) and time.monotonic() < deadline:
            time.sleep(0.05)
        before = {s["id"]: s["status"] for s in lib.api.list(lib.admin)}
        assert set(before) == set(made) and "BUILD" in before.values()
        # Past every lease: heal takes over what the dead service owned.
        later = utcnow().replace(year=utcnow().year + 1)
        heal(db, lib.conf, clock=lambda: later)
        after = {s["id"]: s for s in lib.api.list(lib.admin)}
        assert set(after) == set(made)
        guests = {host: set(lib.fake(host).list_instances()) for host in HOSTS}
        for uuid, server in after.items():
            assert server["status"] in ("ACTIVE", "ERROR"), server
            if server["status"] == "ACTIVE":
                assert uuid in guests[server["host"]]
            else:
                assert server["host"] is None and all(uuid not in g for g in guests.values())
        active = [s for s in after.values() if s["status"] == "ACTIVE"]
        for host in HOSTS:
            on_host = {s["id"] for s in active if s["host"] == host}
            assert guests[host] == on_host
            assert placement.get_usages(db, host).get("VCPU", 0) == len(on_host)
        again = heal(db, lib.conf, clock=lambda: later)
        assert again.corrections == []
        db.dispose()
