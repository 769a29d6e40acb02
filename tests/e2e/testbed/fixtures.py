"""pytest fixtures over the testbed: the hosts (once per session) and a fresh cloud per test.

Load with ``pytest_plugins = ["tests.e2e.testbed.fixtures"]`` in a test module: a plugin is loaded once,
so every module shares one session-scoped testbed.

``NOVAKIT_TESTBED_KEEP=1`` leaves the testbed up after the session (for repeated local runs); a testbed
that was already up when the session started is left up too. Otherwise it is taken down, also when a
test failed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
from sqlalchemy import select

from novakit.cells.registry import UNSCHEDULED
from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Allocation, Instance, ResourceProvider
from novakit.virt import guest_ready_line
from tests.e2e.runner import ROOT, run_playbook, task_results
from tests.e2e.testbed import catalog
from tests.e2e.testbed.bed import Testbed, TestbedError

ADMIN = RequestContext.admin()
HERE = Path(__file__).resolve().parent
#: How long a TCG guest may take to print its marker; a deadline, not a measurement.
BOOT_DEADLINE = float(os.environ.get("NOVAKIT_BOOT_DEADLINE", "90"))


def _unavailable(reason: str) -> None:
    if os.environ.get("NOVAKIT_REQUIRE_REAL") == "1":
        pytest.fail(f"NOVAKIT_REQUIRE_REAL=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    if os.geteuid() != 0:
        _unavailable("the multi-host testbed makes Unix users and daemons: run the tests as root")
    bed = Testbed(hosts=int(os.environ.get("NOVAKIT_TESTBED_HOSTS", "3")))
    was_up = bed.is_up()
    try:
        bed.up()
    except TestbedError as exc:
        bed.down()
        _unavailable(f"the testbed could not be brought up: {exc}")
    try:
        yield bed
    finally:
        if not was_up and os.environ.get("NOVAKIT_TESTBED_KEEP") != "1":
            bed.down()


@dataclass
class Cloud:
    """One test's novakit: its own database and config, the testbed's hosts."""

    bed: Testbed
    dir: Path
    env: dict[str, str]
    db_url: str
    _dbs: list[Database] = field(default_factory=list)

    @property
    def inventory(self) -> Path:
        return self.bed.inventory_path

    def api(self) -> API:
        conf = load_config(
            Path(self.env["NOVAKIT_CONFIG"]), db_url=self.db_url, state_dir=self.env["NOVAKIT_STATE_DIR"]
        )
        db = Database.from_config(conf)
        self._dbs.append(db)
        return API(db, conf)

    def run(
        self,
        playbook: str,
        extravars: dict[str, Any] | None = None,
        inventory: Path | None = None,
        ident: str | None = None,
        workdir: str = "",
        **kwargs: Any,
    ) -> ansible_runner.Runner:
        """Run a playbook through ansible-runner; runs at the same time need their own ``workdir``."""
        where = self.dir / workdir if workdir else self.dir
        where.mkdir(parents=True, exist_ok=True)
        return run_playbook(
            playbook,
            where,
            self.env,
            extravars,
            inventory=inventory or self.inventory,
            ident=ident,
            **kwargs,
        )

    def register_hosts(self) -> ansible_runner.Runner:
        run = self.run("compute_node.yml")
        assert run.rc == 0, run.stdout.read()
        return run

    def close(self) -> None:
        for db in self._dbs:
            db.dispose()


def make_cloud(bed: Testbed, tmp_path: Path, db_url: str = "", config_extra: str = "") -> Cloud:
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "novakit.toml"
    config.write_text(catalog.config_toml(catalog.host_memory_mb(bed), config_extra))
    env = {
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_CONFIG": str(config),
        # The playbooks find the collection next to them; the testbed's own helper playbooks here.
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "playbooks" / "collections"),
    }
    if db_url:
        env["NOVAKIT_DB_URL"] = db_url
    cloud = Cloud(bed, tmp_path, env, db_url)
    db = cloud.api().db
    db.upgrade_if_needed()  # SQLite upgrades on first use; PostgreSQL is migrated explicitly
    catalog.register(db, bed.image_store)
    return cloud


def reset_hosts(bed: Testbed) -> None:
    """Every host as bring-up left it: daemon running, keys authorized, no guests, no instance files,
    no images the hosts wrote into the store."""
    bed.remove_snapshots()
    for host in bed.hosts():
        bed.authorize(host)
        bed.start_libvirtd(host)
        for name in bed.domains(host):
            bed.virsh(host, "destroy", name, check=False)
            bed.virsh(host, "undefine", "--managed-save", "--nvram", name, check=False)
            bed.virsh(host, "undefine", name, check=False)
        leftover = bed.domains(host)
        assert not leftover, f"{host.name} still has domains {leftover}"
        for child in host.instances_path.iterdir() if host.instances_path.exists() else []:
            bed.as_user(host, ["rm", "-rf", str(child)], check=False)


@pytest.fixture
def cloud(testbed: Testbed, tmp_path: Path) -> Iterator[Cloud]:
    """A fresh SQLite cloud over the testbed, its hosts registered; the hosts are wiped afterwards."""
    reset_hosts(testbed)
    c = make_cloud(testbed, tmp_path)
    try:
        c.register_hosts()
        yield c
    finally:
        c.close()
        reset_hosts(testbed)


# --- what the tests look at --------------------------------------------------------------


def wait_for_marker(bed: Testbed, host: str, server: dict[str, Any], count: int = 1) -> str:
    """The guest's console log once its ready marker appeared ``count`` times (or at the deadline)."""
    path = bed.host(host).instances_path / server["id"] / "console.log"
    line = guest_ready_line(server["hostname"], server["id"])
    deadline = time.monotonic() + BOOT_DEADLINE
    text = ""
    while time.monotonic() < deadline:
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        if text.count(line) >= count:
            break
        time.sleep(0.5)
    return text


def console_output(cloud: Cloud, servers: list[dict[str, Any]]) -> dict[str, str]:
    """Each server's console as the compute module on its host returns it (operation console_output)."""
    from novakit.compute.rpc import instance_spec

    db = cloud.api().db
    requests: dict[str, list[dict[str, Any]]] = {}
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        for s in servers:
            inst = session.execute(select(Instance).where(Instance.uuid == s["id"])).scalar_one()
            requests.setdefault(s["host"], []).append(
                {
                    "request_id": "req-console",
                    "host": s["host"],
                    "operation": "console_output",
                    "instances": [instance_spec(session, inst).to_wire()],
                }
            )
    run = cloud.run(str(HERE / "console.yml"), {"console_requests": requests})
    assert run.rc == 0, run.stdout.read()
    out: dict[str, str] = {}
    for res in task_results(run, "Read the consoles"):
        for result in res["results"]:
            for inst in result["results"]:
                out[inst["uuid"]] = inst.get("console") or ""
    return out


def domains_by_host(bed: Testbed) -> dict[str, dict[str, str]]:
    """{host: {instance uuid: virsh state}} for every novakit domain on every host."""
    out: dict[str, dict[str, str]] = {}
    for host in bed.hosts():
        out[host.name] = {}
        for name in bed.domains(host):
            state = bed.virsh(host, "domstate", name, check=False).stdout.strip()
            out[host.name][name.removeprefix("novakit-")] = state
    return out


def usage_by_host(db: Database) -> dict[str, dict[str, int]]:
    """{provider name: {resource class: amount allocated}}."""
    out: dict[str, dict[str, int]] = {}
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        rows = session.execute(
            select(ResourceProvider.name, Allocation.resource_class, Allocation.used).join(
                Allocation, Allocation.resource_provider_id == ResourceProvider.id
            )
        )
        for name, rc, used in rows:
            out.setdefault(name, {}).setdefault(rc, 0)
            out[name][rc] += int(used)
    return out


def allocations_by_consumer(db: Database) -> dict[str, set[str]]:
    """{consumer uuid: {provider names}}."""
    out: dict[str, set[str]] = {}
    with db.target_cell(UNSCHEDULED), db.reader() as session:
        rows = session.execute(
            select(Allocation.consumer_id, ResourceProvider.name).join(
                ResourceProvider, Allocation.resource_provider_id == ResourceProvider.id
            )
        )
        for consumer, provider in rows:
            out.setdefault(consumer, set()).add(provider)
    return out


#: Server status -> the state libvirt shows for its domain (a suspended guest is saved and shut off).
LIVE = {"ACTIVE": "running", "SHUTOFF": "shut off", "PAUSED": "paused", "SUSPENDED": "shut off"}


def assert_nothing_lost(cloud: Cloud) -> list[dict[str, Any]]:
    """Nothing lost, across the database and every host's libvirtd:

    - every server is live (ACTIVE, SHUTOFF, PAUSED, SUSPENDED) with its guest on its host in the
      matching libvirt state and its claim on that host, or ERROR with a fault (and a claim, if any,
      only on its own host, as Nova keeps it until the server is rebuilt or deleted);
    - every guest on a host belongs to a server on that host, which holds a claim there;
    - every claim belongs to a server, on that server's host;
    - each host's usage is the sum of the flavors of the servers claiming it.

    Returns the servers.
    """
    api = cloud.api()
    servers = api.list(ADMIN)
    guests = domains_by_host(cloud.bed)
    allocations = allocations_by_consumer(api.db)
    by_id = {s["id"]: s for s in servers}
    for s in servers:
        if s["status"] in LIVE:
            found = guests.get(s["host"], {}).get(s["id"])
            assert found == LIVE[s["status"]], (s["name"], s["status"], guests)
            assert allocations.get(s["id"]) == {s["host"]}, (s["name"], allocations.get(s["id"]))
        else:
            assert s["status"] == "ERROR", (s["name"], s["status"], s["task_state"])
            assert s.get("fault", {}).get("message"), s
            assert allocations.get(s["id"], set()) <= ({s["host"]} if s["host"] else set()), (
                s["name"],
                s["host"],
                allocations.get(s["id"]),
            )
    for host, doms in guests.items():
        for uuid in doms:
            assert uuid in by_id and by_id[uuid]["host"] == host, f"guest {uuid} on {host}: no server there"
            assert allocations.get(uuid) == {host}, f"guest {uuid} runs on {host} without a claim there"
    for consumer, providers in allocations.items():
        assert consumer in by_id, f"a claim on {providers} belongs to no server ({consumer})"
    usage = usage_by_host(api.db)
    for host in set(usage) | {s["host"] for s in servers if s["host"]}:
        mine = [s for s in servers if allocations.get(s["id"]) == {host}]
        used = usage.get(host, {})
        assert used.get("MEMORY_MB", 0) == sum(int(s["flavor"]["memory_mb"]) for s in mine), host
        assert used.get("VCPU", 0) == sum(int(s["flavor"]["vcpus"]) for s in mine), host
    return servers
