"""Liveness without agents: a host is down on evidence (a failed contact, an admin), not for being idle.

Time is a clock the tests move (``Clock``), never a sleep: the scheduler takes it as
``SchedulerManager(clock=...)``, the liveness functions as ``now``. The playbook runs cannot
take a clock, so they move the recorded contacts back instead, which is the same to the rule.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, update
from typer.testing import CliRunner, Result

from novakit import exceptions
from novakit.catalog import flavors, images
from novakit.cli.main import app
from novakit.compute.api import API
from novakit.conductor.manager import Conductor
from novakit.config import Config, load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import ComputeNode, Service, utcnow
from novakit.fleet import hosts
from novakit.heal.manager import heal
from novakit.host.messages import HostResources
from novakit.scheduler.manager import SchedulerManager
from novakit.scheduler.request_spec import RequestSpec
from tests.functional.cloud import HOSTS, Cloud, boot

ROOT = Path(__file__).resolve().parents[2]
# A loopback port where nothing listens: an SSH contact there fails at once, as a dead host's would.
DEAD_SSH = {"host": "127.0.0.1", "port": 9, "connect_timeout": 3}


class Clock:
    """Naive UTC, as the database keeps it; ``move`` instead of sleeping."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> dt.datetime:
        return self.now

    def move(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


def _api(cloud: Cloud, clock: Clock, conf: Config | None = None) -> API:
    conf = conf or cloud.conf
    scheduler = SchedulerManager(cloud.db, conf, clock=clock)
    return API(cloud.db, conf, conductor=Conductor(cloud.db, conf, scheduler=scheduler))


def _heartbeats_on(conf: Config) -> Config:
    return conf.model_copy(update={"compute": conf.compute.model_copy(update={"heartbeats": True})})


def _states(cloud: Cloud, now: dt.datetime | None = None, conf: Config | None = None) -> dict[str, Any]:
    return {h["host"]: h for h in hosts.list_hosts(cloud.db, conf or cloud.conf, now)}


def _unreachable_by_ssh(cloud: Cloud, host: str) -> None:
    """From now on ``host`` is reached over SSH on a port where nothing answers."""
    info = {**cloud.driver_info(host), "transport": "ssh", "ssh": DEAD_SSH}
    with cloud.db.writer() as session:
        session.execute(update(ComputeNode).where(ComputeNode.host == host).values(driver=info))


def _reachable_again(cloud: Cloud, host: str) -> None:
    with cloud.db.writer() as session:
        session.execute(
            update(ComputeNode).where(ComputeNode.host == host).values(driver=cloud.driver_info(host))
        )


def _spec(**extra: Any) -> RequestSpec:
    from novakit.host.messages import FlavorSpec, ImageSpec

    flavor = FlavorSpec(name="m1.small", vcpus=1, memory_mb=1024, root_gb=10)
    return RequestSpec(
        request_id="req-liveness",
        project_id="p",
        user_id="u",
        flavor=flavor,
        image=ImageSpec(id="img", name="tiny"),
        **extra,
    )


# --------------------------------------------------------------- idle time is no evidence


def test_a_host_idle_for_ten_minutes_is_still_up_and_a_boot_lands_on_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    clock = Clock()
    clock.move(minutes=10)  # nothing touched the hosts since they registered
    assert {h["state"] for h in _states(cloud, clock()).values()} == {"up"}
    server = _api(cloud, clock).create(ctx, {"name": "idle", "flavor": "m1.small", "image": "tiny"})[0]
    assert server["status"] == "ACTIVE" and cloud.api.get(cloud.admin, server["id"])["host"] in HOSTS
    # A week later, the same.
    clock.move(days=7)
    later = _api(cloud, clock).create(ctx, {"name": "later", "flavor": "m1.small", "image": "tiny"})[0]
    assert later["status"] == "ACTIVE"


def test_a_successful_answer_is_a_contact_inside_the_builds_own_transaction(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """The boot's hot path pays no transaction of its own for recording the host's contact."""
    transactions: list[list[str]] = [[]]

    def on_sql(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        transactions[-1].append(statement)

    def on_commit(conn: Any) -> None:
        transactions.append([])

    event.listen(cloud.db.engine, "before_cursor_execute", on_sql)
    event.listen(cloud.db.engine, "commit", on_commit)
    try:
        server = boot(cloud, ctx, "hot")
    finally:
        event.remove(cloud.db.engine, "before_cursor_execute", on_sql)
        event.remove(cloud.db.engine, "commit", on_commit)
    contacts = [t for t in transactions if any(s.startswith("UPDATE services") for s in t)]
    assert len(contacts) == 1
    assert any(s.startswith("UPDATE instances") for s in contacts[0])  # the build's own write
    svc = _states(cloud)[server["host"]]
    assert svc["last_contact_at"] == svc["last_seen_up"] and svc["down_reason"] is None


# --------------------------------------------------------------- a failed contact


def test_a_host_whose_last_contact_failed_is_down_with_why_and_no_valid_host_names_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    # compute-3 has the most free RAM: the scheduler sends the first build there.
    _unreachable_by_ssh(cloud, "compute-3")
    server = boot(cloud, ctx, "elsewhere")
    assert server["host"] != "compute-3"  # rescheduled to an alternate

    dead = _states(cloud)["compute-3"]
    assert dead["state"] == "down"
    assert dead["down_reason"].startswith("last contact failed at ")
    assert "Connection to the hypervisor on compute-3 is broken: ssh 127.0.0.1:9" in dead["down_reason"]
    assert dead["last_contact_at"] > dead["last_seen_up"]
    # Idle time does not bring it back either: only a successful contact does.
    assert _states(cloud, utcnow() + dt.timedelta(hours=1))["compute-3"]["state"] == "down"

    # With the live hosts disabled, nothing is left, and "no valid host" says why compute-3 went.
    for host in ("compute-1", "compute-2"):
        hosts.set_disabled(cloud.db, cloud.admin, host, True, "maintenance")
    with pytest.raises(exceptions.NoValidHost) as err:
        SchedulerManager(cloud.db, cloud.conf).select_destinations(_spec(), ["i-1"], dry_run=True)
    steps = {s["step"]: s for s in err.value.explanation["steps"]}
    why = steps["ComputeFilter"]["rejected"]["compute-3"]
    assert why.startswith("compute service is down: last contact failed at ") and "ssh 127.0.0.1:9" in why
    assert "compute service is down: last contact failed" in str(err.value)
    refused = cloud.api.create(ctx, {"name": "nowhere", "flavor": "m1.small", "image": "tiny"})[0]
    assert refused["status"] == "ERROR" and refused["fault"]["message"] == "No valid host was found."
    fault = cloud.api.get(cloud.admin, refused["id"])["fault"]  # the operator is told why
    assert "last contact failed" in fault["message"]

    # The next successful contact (here a heartbeat) brings it back.
    _reachable_again(cloud, "compute-3")
    assert hosts.heartbeat(cloud.db, cloud.conf, ["compute-3"]) == [
        {"host": "compute-3", "answered": True, "state": "up", "down_reason": None}
    ]
    back = _states(cloud)["compute-3"]
    assert (back["state"], back["down_reason"]) == ("up", None)
    assert boot(cloud, ctx, "back")["host"] == "compute-3"  # the only enabled host


def test_heal_records_who_answered_and_who_did_not(cloud: Cloud) -> None:
    _unreachable_by_ssh(cloud, "compute-2")
    report = heal(cloud.db, cloud.conf)
    assert "ssh 127.0.0.1:9" in report.unreachable["compute-2"]
    states = _states(cloud)
    assert states["compute-2"]["state"] == "down" and "ssh 127.0.0.1:9" in states["compute-2"]["down_reason"]
    assert states["compute-1"]["state"] == "up"

    # The playbook's heal hands over guest lists and Ansible's reasons: the same records.
    report = heal(
        cloud.db,
        cloud.conf,
        reports={"compute-2": {}, "compute-3": {}},
        unreachable={"compute-1": "Failed to connect to the host via ssh: Connection timed out"},
    )
    states = _states(cloud)
    assert states["compute-2"]["state"] == "up" and states["compute-3"]["state"] == "up"
    assert states["compute-1"]["state"] == "down"
    assert "Failed to connect to the host via ssh" in states["compute-1"]["down_reason"]
    # A dry run contacts no one on the record.
    heal(cloud.db, cloud.conf, reports={"compute-1": {}}, dry_run=True)
    assert _states(cloud)["compute-1"]["state"] == "down"


# --------------------------------------------------------------- heartbeats, when the operator opts in


def test_with_heartbeats_on_a_silent_host_goes_down_and_a_heartbeat_brings_it_back(
    cloud: Cloud, ctx: RequestContext
) -> None:
    conf = _heartbeats_on(cloud.conf)
    limit = conf.compute.service_down_time
    clock = Clock()
    clock.move(seconds=limit)  # at the limit: still up
    assert {h["state"] for h in _states(cloud, clock(), conf).values()} == {"up"}
    clock.move(seconds=limit)
    states = _states(cloud, clock(), conf)
    assert {h["state"] for h in states.values()} == {"down"}
    assert "no heartbeat for " in states["compute-1"]["down_reason"]
    assert f"(heartbeats are on; service_down_time is {limit} s)" in states["compute-1"]["down_reason"]
    refused = _api(cloud, clock, conf).create(ctx, {"name": "silent", "flavor": "m1.small", "image": "tiny"})
    assert refused[0]["status"] == "ERROR"
    assert "no heartbeat for" in cloud.api.get(cloud.admin, refused[0]["id"])["fault"]["message"]
    # The same silence with heartbeats off (the default) means nothing.
    assert {h["state"] for h in _states(cloud, clock()).values()} == {"up"}

    answers = hosts.heartbeat(cloud.db, conf, now=clock())
    assert {(a["host"], a["answered"], a["state"]) for a in answers} == {(h, True, "up") for h in HOSTS}
    assert {h["state"] for h in _states(cloud, clock(), conf).values()} == {"up"}
    server = _api(cloud, clock, conf).create(ctx, {"name": "heard", "flavor": "m1.small", "image": "tiny"})
    assert server[0]["status"] == "ACTIVE"


# --------------------------------------------------------------- an admin says so


def test_an_admin_forces_a_host_down_and_up_and_a_member_may_not(cloud: Cloud, ctx: RequestContext) -> None:
    with pytest.raises(exceptions.PolicyNotAuthorized):
        hosts.set_forced_down(cloud.db, ctx, "compute-3", True, "mine now")
    assert _states(cloud)["compute-3"]["state"] == "up"

    hosts.set_forced_down(cloud.db, cloud.admin, "compute-3", True, "rack 4 power work")
    down = _states(cloud)["compute-3"]
    assert (down["state"], down["forced_down"]) == ("down", True)
    assert down["down_reason"] == "forced down by an admin: rack 4 power work"
    # Its contacts do not overrule the admin: a heartbeat answers, the host stays down.
    [beat] = hosts.heartbeat(cloud.db, cloud.conf, ["compute-3"])
    assert (beat["answered"], beat["state"]) == (True, "down")
    assert _states(cloud)["compute-3"]["down_reason"] == "forced down by an admin: rack 4 power work"
    assert {boot(cloud, ctx, f"f-{n}")["host"] for n in range(3)} <= {"compute-1", "compute-2"}

    with pytest.raises(exceptions.PolicyNotAuthorized):
        hosts.set_forced_down(cloud.db, ctx, "compute-3", False)
    hosts.set_forced_down(cloud.db, cloud.admin, "compute-3", False)
    up = _states(cloud)["compute-3"]
    assert (up["state"], up["forced_down"], up["down_reason"]) == ("up", False, None)
    assert boot(cloud, ctx, "back")["host"] == "compute-3"
    with pytest.raises(exceptions.ComputeHostNotFound):
        hosts.set_forced_down(cloud.db, cloud.admin, "nowhere", True)


# --------------------------------------------------------------- the command line


@pytest.fixture
def nk(db_url: str, tmp_path: Path) -> Any:
    env = {
        "NOVAKIT_DB_URL": db_url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_FAKE_STATE_DIR": None,
        "NOVAKIT_CONFIG": None,
        "NOVAKIT_PROJECT": "admin",
        "NOVAKIT_USER": "admin",
        "NOVAKIT_ROLES": "admin",
        "NOVAKIT_REQUEST_ID": None,
        "COLUMNS": "250",
    }
    runner = CliRunner()

    def run(*args: str, code: int = 0) -> Result:
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == code, (args, result.stdout, result.stderr, result.exception)
        return result

    run("db", "upgrade")
    run("host", "add", "compute-1", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200")
    run("host", "add", "compute-2", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200")
    return run


def test_host_list_down_up_and_heartbeat_from_the_command_line(nk: Any) -> None:
    listed = {h["host"]: h for h in json.loads(nk("host", "list", "--output", "json").stdout)}
    assert listed["compute-1"]["state"] == "up" and listed["compute-1"]["down_reason"] is None
    assert listed["compute-1"]["last_contact_at"] is not None

    refused = nk("--role", "member", "--project", "p", "host", "down", "compute-1", code=1)
    assert "Policy does not allow host:force_down" in refused.stderr
    assert "forced down" in nk("host", "down", "compute-1", "--reason", "new disks").stdout
    table = nk("host", "list").stdout
    assert "down (forced down by an admin: new disks)" in table and "Last Contact" in table
    listed = {h["host"]: h for h in json.loads(nk("host", "list", "-o", "json").stdout)}
    assert (listed["compute-1"]["state"], listed["compute-1"]["forced_down"]) == ("down", True)
    assert listed["compute-1"]["down_reason"] == "forced down by an admin: new disks"

    beats = json.loads(nk("host", "heartbeat", "--output", "json").stdout)
    assert [(b["host"], b["answered"], b["state"]) for b in beats] == [
        ("compute-1", True, "down"),  # it answered; the admin's word stands
        ("compute-2", True, "up"),
    ]
    assert "host compute-2 answered: up" in nk("host", "heartbeat", "--host", "compute-2").stdout
    said = nk("host", "heartbeat", "--host", "compute-1").stdout
    assert "host compute-1 answered: down (forced down by an admin: new disks)" in said
    assert "could not be found" in nk("host", "heartbeat", "--host", "nowhere", code=1).stderr

    nk("--role", "member", "--project", "p", "host", "up", "compute-1", code=1)
    assert "host compute-1 up" in nk("host", "up", "compute-1").stdout
    assert {h["state"] for h in json.loads(nk("host", "list", "-o", "json").stdout)} == {"up"}


# --------------------------------------------------------------- the playbooks, run by ansible-playbook


def _rewind(db: Database, **delta: float) -> None:
    """Move every host's recorded contacts back: the same, to the rule, as moving the clock on."""
    back = dt.timedelta(**delta)
    with db.writer() as session:
        for svc in session.query(Service).all():
            svc.last_seen_up = svc.last_seen_up - back if svc.last_seen_up else None
            svc.last_contact_at = svc.last_contact_at - back if svc.last_contact_at else None


def _fleet(tmp_path: Path, config: str = "") -> tuple[dict[str, str], API]:
    (tmp_path / "novakit.toml").write_text(config)
    state = tmp_path / "state"
    env = {
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(tmp_path / "novakit.toml"),
    }
    conf = load_config(tmp_path / "novakit.toml", state_dir=state)
    return env, API(Database.from_config(conf), conf)


def _playbook(name: str, tmp_path: Path, env: dict[str, str], **kwargs: Any) -> Any:
    from tests.e2e.runner import run_playbook

    return run_playbook(name, tmp_path, env, **kwargs)


@pytest.mark.e2e
def test_readme_flow_with_an_hour_between_registering_and_booting_ends_active(tmp_path: Path) -> None:
    env, api = _fleet(tmp_path)  # the defaults: no heartbeats
    run = _playbook("compute_node.yml", tmp_path, env)
    assert run.rc == 0, run.stdout.read()
    _rewind(api.db, hours=1)  # an hour with no job touching the hosts (a 60 s rule would drop them all)
    run = _playbook("boot.yml", tmp_path, env, extravars={"server_name": "demo", "count": 3})
    assert run.rc == 0, run.stdout.read()
    admin = RequestContext.admin()
    assert sorted((s["name"], s["status"]) for s in api.list(admin)) == [
        ("demo-1", "ACTIVE"),
        ("demo-2", "ACTIVE"),
        ("demo-3", "ACTIVE"),
    ]


@pytest.mark.e2e
def test_heartbeat_playbook_brings_silent_hosts_back_when_heartbeats_are_on(tmp_path: Path) -> None:
    env, api = _fleet(tmp_path, "[compute]\nheartbeats = true\n")
    run = _playbook("compute_node.yml", tmp_path, env)
    assert run.rc == 0, run.stdout.read()
    _rewind(api.db, hours=1)
    listed = hosts.list_hosts(api.db, api.conf)
    assert {h["state"] for h in listed} == {"down"}
    assert all("no heartbeat for" in h["down_reason"] for h in listed)

    run = _playbook("heartbeat.yml", tmp_path, env)
    assert run.rc == 0, run.stdout.read()
    assert {h["state"] for h in hosts.list_hosts(api.db, api.conf)} == {"up"}
    run = _playbook("boot.yml", tmp_path, env, extravars={"server_name": "beat"})
    assert run.rc == 0, run.stdout.read()
    assert api.get(RequestContext.admin(), "beat")["status"] == "ACTIVE"


@pytest.mark.e2e
def test_heartbeat_playbook_records_an_unreachable_host_down_with_ansibles_message(tmp_path: Path) -> None:
    env, api = _fleet(tmp_path)
    for host in ("compute-alive", "compute-dead"):
        resources = HostResources(
            hypervisor_hostname=host, hypervisor_type="fake", vcpus=8, memory_mb=16384, local_gb=200
        )
        hosts.register_host(api.db, api.conf, host, resources, {"driver": "fake", "transport": "local"})
    admin = RequestContext.admin()
    flavors.create(api.db, admin, {"name": "m1.small", "vcpus": 1, "memory_mb": 1024, "root_gb": 1})
    images.create(api.db, admin, {"name": "tiny"})

    run = _playbook(
        "heartbeat.yml", tmp_path, env, inventory=ROOT / "tests" / "e2e" / "inventory" / "unreachable.yml"
    )
    out = run.stdout.read()
    assert run.rc == 4, out  # Ansible's own verdict on a run with an unreachable host
    assert "compute-dead is down: Ansible: " in out
    states = {h["host"]: h for h in hosts.list_hosts(api.db, api.conf)}
    assert states["compute-alive"]["state"] == "up"
    dead = states["compute-dead"]
    assert dead["state"] == "down" and dead["down_reason"].startswith("last contact failed at ")
    assert ": Ansible: " in dead["down_reason"]
    assert "Failed to connect to the host via ssh" in dead["down_reason"]
    # The scheduler leaves it out, whatever its size.
    assert api.create(admin, {"name": "live", "flavor": "m1.small", "image": "tiny"})[0]["host"] == (
        "compute-alive"
    )
