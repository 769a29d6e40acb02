"""The SSH transport against a real sshd on the loopback address: builds, actions, broken hosts."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from novakit.cells.registry import UNSCHEDULED
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import InstanceFault
from novakit.fleet import hosts
from novakit.host.messages import ComputeRequest
from novakit.transport.factory import get_transport
from novakit.transport.ssh import SSHTransport
from tests.functional.cloud import HOSTS, Cloud, make_cloud
from tests.integration.ssh.conftest import Sshd


def _ssh_info(cloud: Cloud, sshd: Sshd, **ssh: object) -> dict[str, object]:
    opts = {"vcpus": 64, "memory_mb": 262144, "local_gb": 4000, "state_dir": str(cloud.fake_dir / "ssh")}
    return {"driver": "fake", "options": opts, "transport": "ssh", "ssh": sshd.ssh_info(**ssh)}


def _register_over_ssh(cloud: Cloud, host: str, info: dict[str, object]) -> None:
    """Register the host from what it reports about itself over SSH, as a real one would."""
    res = get_transport(host, info).call(
        ComputeRequest(request_id="req-register", host=host, operation="get_available_resource")
    )
    assert res.error is None, res.error
    assert res.resources is not None
    hosts.register_host(cloud.db, cloud.conf, host, res.resources, info)


def _guests(state_dir: Path, host: str) -> dict[str, int]:
    path = state_dir / f"{host}.json"
    return {u: g["power_state"] for u, g in json.loads(path.read_text())["instances"].items()}


def test_build_and_every_action_over_ssh(
    sqlite_db: Database, tmp_path: Path, sshd: Sshd, ctx: RequestContext
) -> None:
    cloud = make_cloud(sqlite_db, tmp_path)
    info = _ssh_info(cloud, sshd)
    _register_over_ssh(cloud, "ssh-1", info)
    for host in HOSTS:  # only the SSH host may take the build
        hosts.set_disabled(cloud.db, cloud.admin, host, True, "test: ssh only")
    state_dir = Path(info["options"]["state_dir"])  # type: ignore[index]

    server = cloud.api.create(
        ctx,
        {
            "name": "far",
            "flavor": "m1.small",
            "image": "tiny",
            "user_data": "IyEvYmluL3NoCmVjaG8gc2VjcmV0Cg==",
        },
    )[0]
    assert server["host"] is None  # a member is not told hosts; the operator is
    server = cloud.api.get(cloud.admin, server["id"])
    assert (server["status"], server["host"], server["power_state_name"]) == ("ACTIVE", "ssh-1", "Running")
    assert server["addresses"] and server["addresses"][0].startswith("192.0.2.")
    assert _guests(state_dir, "ssh-1") == {server["id"]: 1}

    expected = [
        ("stop", "SHUTOFF", 4),
        ("start", "ACTIVE", 1),
        ("pause", "PAUSED", 3),
        ("unpause", "ACTIVE", 1),
        ("suspend", "SUSPENDED", 7),
        ("resume", "ACTIVE", 1),
        ("reboot", "ACTIVE", 1),
    ]
    for action, status, power in expected:
        after = getattr(cloud.api, action)(ctx, server["id"])
        assert (action, after["status"], after["power_state"]) == (action, status, power)
        assert _guests(state_dir, "ssh-1")[server["id"]] == power

    events = {
        a["action"]: [(e["event"], e["host"], e["result"]) for e in a["events"]]
        for a in cloud.api.list_actions(cloud.admin, server["id"])
    }
    assert events["create"] == [("compute__do_build_and_run_instance", "ssh-1", "Success")]
    assert events["stop"] == [("compute_stop_instance", "ssh-1", "Success")]
    # The console log comes back the way every operation does: over the host's transport.
    console = cloud.api.console_output(ctx, "far")
    assert "novakit-init: hostname far" in console and "reboot: Restarting system" in console
    assert cloud.api.console_output(ctx, "far", lines=1) == console.splitlines(keepends=True)[-1]

    gone = cloud.api.delete(ctx, server["id"])
    assert gone["status"] == "DELETED"
    assert _guests(state_dir, "ssh-1") == {}


def test_an_unreachable_ssh_host_is_rescheduled_and_named_in_the_fault(
    sqlite_db: Database, tmp_path: Path, sshd: Sshd, closed_port: int, ctx: RequestContext
) -> None:
    # The transport is what is under test, not the database: SQLite only, to keep SSH round trips few.
    cloud = make_cloud(sqlite_db, tmp_path)
    info = _ssh_info(cloud, sshd)
    resources = (
        get_transport("ssh-dead", info)
        .call(ComputeRequest(request_id="req-register", host="ssh-dead", operation="get_available_resource"))
        .resources
    )
    assert resources is not None
    # The roomiest host, so it is chosen first; then it goes away: its registration points at a
    # loopback port nobody listens on.
    hosts.register_host(cloud.db, cloud.conf, "ssh-dead", resources, _ssh_info(cloud, sshd, port=closed_port))

    created = cloud.api.create(ctx, {"name": "survivor", "flavor": "m1.small", "image": "tiny"})[0]
    assert created["status"] == "ACTIVE"
    server = cloud.api.get(cloud.admin, created["id"])
    assert server["host"] in HOSTS
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
        faults = select(InstanceFault).where(InstanceFault.instance_uuid == server["id"])
        messages = [(f.host, f.message) for f in session.execute(faults).scalars()]
    assert len(messages) == 1
    host, message = messages[0]
    assert host == "ssh-dead"
    assert "ssh-dead" in message and "cannot connect" in message
    # The audit trail shows both attempts: the unreachable host's, failed, then the alternate's.
    builds = [
        (e["host"], e["result"]) for e in cloud.api.list_actions(cloud.admin, server["id"])[0]["events"]
    ]
    assert builds == [("ssh-dead", "Error"), (server["host"], "Success")]


def test_broken_ssh_hosts_come_back_as_results_asking_for_a_reschedule(
    sshd: Sshd, tmp_path: Path, closed_port: int
) -> None:
    from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec

    spec = InstanceSpec(
        uuid="11111111-2222-3333-4444-555555555555",
        name="x",
        hostname="x",
        project_id="p",
        user_id="u",
        flavor=FlavorSpec(name="f", vcpus=1, memory_mb=64, root_gb=1),
        image=ImageSpec(id="img"),
        user_data="c2VjcmV0LXVzZXItZGF0YQ==",
    )  # type: ignore[arg-type]
    request = ComputeRequest(request_id="req-1", host="h1", operation="build", instances=[spec])
    base = {"driver": "fake", "options": {"state_dir": str(tmp_path)}, "transport": "ssh"}
    wrong_key = tmp_path / "wrong"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
    cases = {
        "closed port": (sshd.ssh_info(port=closed_port), "cannot connect"),
        "wrong key": (sshd.ssh_info(key_filename=str(wrong_key)), "authentication failed"),
        "command fails": (sshd.ssh_info(python="/bin/false"), "exited with status 1"),
        "garbage output": (sshd.ssh_info(python="/bin/echo"), "without a result"),
    }
    for name, (ssh, words) in cases.items():
        result = SSHTransport("h1", {**base, "ssh": ssh}).call(request)
        assert result.error is not None, name
        assert result.error.exception_class == "HypervisorUnavailable", name
        assert result.error.reschedule, name
        assert "h1" in result.error.message and words in result.error.message, (name, result.error.message)
        [inst] = result.results
        assert not inst.ok and inst.fault is not None and inst.fault.host == "h1", name
        assert "c2VjcmV0" not in result.model_dump_json(), name


def _most_builds_at_once(results: list[object]) -> int:
    """The most build events of these results whose [start, finish] intervals overlap."""
    marks = []
    for res in results:
        for inst in res.results:  # type: ignore[attr-defined]
            assert inst.ok, inst.fault
            [event] = [e for e in inst.events if e.event == "compute__do_build_and_run_instance"]
            marks += [(event.start_time, 1), (event.finish_time, -1)]
    now = most = 0
    for _, step in sorted(marks, key=lambda m: (m[0], m[1])):
        now += step
        most = max(most, now)
    return most


def test_max_concurrent_builds_holds_across_separate_ssh_requests_to_one_host(
    sshd: Sshd, tmp_path: Path
) -> None:
    """Each SSH request is its own `python -m novakit.host` on the host: the limit must count
    the builds of the other processes too (Nova's max_concurrent_builds is per host)."""
    from concurrent.futures import ThreadPoolExecutor

    from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec

    def run(limit: int) -> int:
        state_dir = tmp_path / f"limit-{limit}"
        info = {
            "driver": "fake",
            "transport": "ssh",
            "ssh": sshd.ssh_info(),
            "max_concurrent_builds": limit,
            "options": {"state_dir": str(state_dir), "failure_mode": "slow_spawn", "spawn_delay": 1.0},
        }
        requests = [
            ComputeRequest(
                request_id=f"req-{n}",
                host="busy-1",
                operation="build",
                instances=[
                    InstanceSpec(
                        uuid=f"00000000-0000-0000-0000-{limit:06d}{n:06d}",
                        name=f"s{n}",
                        hostname=f"s{n}",
                        project_id="p",
                        user_id="u",
                        flavor=FlavorSpec(name="f", vcpus=1, memory_mb=64, root_gb=1),
                        image=ImageSpec(id="img"),
                    )
                ],
            )
            for n in range(3)
        ]
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(lambda r: get_transport("busy-1", info).call(r), requests))
        assert len(_guests(state_dir, "busy-1")) == 3  # every build ran, one after another or not
        return _most_builds_at_once(results)

    assert run(1) == 1
    assert run(3) > 1  # the same three requests overlap when the limit lets them
