"""Failures on the testbed's real hosts; after each, nothing is lost.

"Nothing lost" (``assert_nothing_lost``): every server ends ACTIVE with its guest running on its host,
or ERROR with a fault; every guest on every host belongs to a server on that host; every claim belongs
to a server whose guest runs; each host's usage is the sum of its guests' flavors.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
from sqlalchemy import select

from novakit.cells.registry import UNSCHEDULED
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import InstanceFault
from tests.e2e.runner import ROOT, task_results
from tests.e2e.testbed import catalog
from tests.e2e.testbed.bed import Testbed, _free_port
from tests.e2e.testbed.fixtures import (
    Cloud,
    assert_nothing_lost,
    domains_by_host,
    make_cloud,
    reset_hosts,
    usage_by_host,
)
from tests.pgdatabases import own_database

pytest_plugins = ["tests.e2e.testbed.fixtures"]
pytestmark = pytest.mark.e2e

ADMIN = RequestContext.admin()
#: The database of the concurrency test: ours alone (the functional tests truncate ``novakit``).
PG_DATABASE = "novakit_tb"


def _create_events(cloud: Cloud, server: dict[str, Any]) -> list[tuple[str, str]]:
    (create,) = [a for a in cloud.api().list_actions(ADMIN, server["id"]) if a["action"] == "create"]
    return [(e["host"], e["result"]) for e in create["events"]]


def _faults(db: Database, uuid: str) -> list[str]:
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        rows = session.execute(select(InstanceFault.message).where(InstanceFault.instance_uuid == uuid))
        return list(rows.scalars())


def test_builds_for_a_host_whose_libvirtd_is_down_land_on_alternates(cloud: Cloud) -> None:
    bed = cloud.bed
    down = bed.host("nk-h1")
    bed.stop_libvirtd(down)
    run = cloud.run("boot.yml", {"server_name": "alt", "count": 3, "flavor": "tb.small", "image": "tiny"})
    assert run.rc == 0, run.stdout.read()

    api = cloud.api()
    servers = api.list(ADMIN)
    assert len(servers) == 3
    assert all(s["status"] == "ACTIVE" and s["host"] in ("nk-h2", "nk-h3") for s in servers), servers
    # The hosts were equal, so one build went to nk-h1 first, failed there (a fault records why)
    # and was built on an alternate.
    (moved,) = [s for s in servers if _faults(api.db, s["id"])]
    faults = _faults(api.db, moved["id"])
    assert len(faults) == 1 and "nk-h1" in faults[0], faults
    assert _create_events(cloud, moved) == [("nk-h1", "Error"), (moved["host"], "Success")]

    # Started again, nk-h1's daemon shows nothing was left there.
    bed.start_libvirtd(down)
    assert domains_by_host(bed)["nk-h1"] == {}
    assert_nothing_lost(cloud)


def test_builds_for_a_host_ansible_cannot_reach_land_on_alternates_with_a_fault_naming_it(
    cloud: Cloud, tmp_path: Path
) -> None:
    bed = cloud.bed
    # A port nobody listens on: ssh to nk-h2 is refused, as for a host that is down.
    cut = bed.write_inventory(tmp_path / "cut.yml", host_ports={"nk-h2": _free_port()})
    run = cloud.run(
        "boot.yml", {"server_name": "cut", "count": 3, "flavor": "tb.small", "image": "tiny"}, inventory=cut
    )
    # The run reports nk-h2 unreachable (rc 4, and the recap's count, which AWX reads), with the
    # reason in the task's output (only secrets are no_log); the controller's plays went on without it.
    out = run.stdout.read()
    assert run.rc == 4, out
    assert run.stats is not None and "nk-h2" in run.stats["dark"], run.stats
    assert "nk-h2" not in run.stats.get("ignored", {}), run.stats
    assert "censored" not in out and "hidden by no_log" not in out, out
    assert "UNREACHABLE!" in out and "Connection refused" in out, out

    api = cloud.api()
    servers = api.list(ADMIN)
    assert len(servers) == 3
    assert all(s["status"] == "ACTIVE" and s["host"] in ("nk-h1", "nk-h3") for s in servers), servers
    (moved,) = [s for s in servers if _faults(api.db, s["id"])]
    faults = _faults(api.db, moved["id"])
    assert len(faults) == 1 and "nk-h2" in faults[0], faults
    # The fault records why Ansible could not reach it.
    assert "Connection refused" in faults[0], faults
    assert _create_events(cloud, moved) == [("nk-h2", "Error"), (moved["host"], "Success")]
    assert_nothing_lost(cloud)


def _run_and_kill(cloud: Cloud, extravars: dict[str, Any], after_task: str) -> ansible_runner.Runner:
    """Run boot.yml and SIGKILL ansible-playbook's process group when the first host answers
    ``after_task``: half way, whatever the machine's speed. The other hosts may be building
    still or be done; the next play (which records the results) has not run, as Ansible
    starts it only once every host has answered.

    The kill is ours, by the pid the run's events carry: ansible-runner's own cancel left
    ansible-playbook running here, and the run then finished behind the test's back.
    """
    killed: list[int] = []

    def on_event(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        answered = event.get("event") in ("runner_on_ok", "runner_on_failed")
        if answered and data.get("task") == after_task and not killed:
            pid = int(event.get("pid") or data.get("pid"))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                killed.append(pid)
        return True

    private = cloud.dir / "killed-runner"
    private.mkdir(exist_ok=True)
    envvars = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        **cloud.env,
    }
    runner = ansible_runner.run(
        private_data_dir=str(private),
        playbook=str(ROOT / "playbooks" / "boot.yml"),
        inventory=str(cloud.inventory),
        envvars=envvars,
        extravars=extravars,
        quiet=True,
        event_handler=on_event,
    )
    assert killed, "no host answered the build task, or the run ended before the kill"
    pid = killed[0]
    assert not Path(f"/proc/{pid}").exists(), f"ansible-playbook {pid} survived the kill"
    return runner


def test_heal_after_a_boot_killed_half_way_leaves_every_server_in_a_true_state(
    testbed: Testbed, tmp_path: Path
) -> None:
    """The run dies with the builds in flight; the hosts may finish them or not. One heal settles it."""
    reset_hosts(testbed)
    # Builds older than a second count as stuck, so heal can settle them right after the kill.
    cloud = make_cloud(testbed, tmp_path, config_extra="[compute]\nbuild_timeout = 1\n")
    try:
        cloud.register_hosts()
        boot = {"server_name": "cut", "count": 3, "flavor": "tb.small", "image": "tiny"}
        killed = _run_and_kill(cloud, boot, "Build and run the instances scheduled here")
        assert killed.rc != 0
        servers = cloud.api().list(ADMIN)
        assert len(servers) == 3 and all(s["status"] == "BUILD" for s in servers), servers
        time.sleep(1.5)

        heal = cloud.run("heal.yml")
        assert heal.rc == 0, heal.stdout.read()
        assert_nothing_lost(cloud)
        # One heal was enough: a second finds nothing to correct.
        again = cloud.run("heal.yml")
        assert again.rc == 0
        (report,) = [r["report"] for r in task_results(again, "Record the heal")]
        assert report["corrections"] == [], report["corrections"]
    finally:
        cloud.close()
        reset_hosts(testbed)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database of this test's own on the tests' PostgreSQL server, created empty."""
    with own_database(PG_DATABASE) as url:
        yield url


def test_four_boot_playbooks_at_once_never_overfill_a_host(
    testbed: Testbed, tmp_path: Path, pg_url: str
) -> None:
    """Eight servers asked at once of three hosts with room for one tb.large each."""
    reset_hosts(testbed)
    cloud = make_cloud(testbed, tmp_path, db_url=pg_url)
    try:
        cloud.register_hosts()
        runs: dict[int, ansible_runner.Runner] = {}
        errors: list[BaseException] = []

        def boot(i: int) -> None:
            try:
                runs[i] = cloud.run(
                    "boot.yml",
                    {
                        "server_name": f"rush{i}",
                        "count": 2,
                        "min_count": 1,
                        "flavor": "tb.large",
                        "image": "tiny",
                    },
                    ident=f"rush-{i}",
                    workdir=f"rush-{i}",
                )
            except BaseException as exc:  # reported below, with the others' outcome
                errors.append(exc)

        threads = [threading.Thread(target=boot, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(runs) == 4
        outputs = "\n".join(
            f"--- run {i} rc={r.rc}\n{r.stdout.read()[-2500:]}" for i, r in sorted(runs.items())
        )

        servers = cloud.api().list(ADMIN)
        assert len(servers) == 8, outputs
        try:
            assert_nothing_lost(cloud)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{outputs}") from exc
        active = [(s["host"], s["name"]) for s in servers if s["status"] == "ACTIVE"]
        # Room for one tb.large per host, and every host got one.
        assert sorted(h for h, _ in active) == sorted(testbed.names()), active
        for s in servers:
            if s["status"] == "ERROR":
                assert "No valid host" in s["fault"]["message"], s["fault"]
        usage = usage_by_host(cloud.api().db)
        for host in testbed.names():
            assert usage[host]["MEMORY_MB"] <= catalog.HOST_ROOM_MB
    finally:
        cloud.close()
        reset_hosts(testbed)
