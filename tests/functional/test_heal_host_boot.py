"""A host that booted: heal brings its guests back as the records hold them (Nova's
``resume_guests_state_on_host_boot``), once, and records it in the audit trail."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from novakit.compute.states import PowerState
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.fleet import hosts
from novakit.heal.host_boot import RESUME_EVENT
from novakit.heal.manager import heal
from novakit.virt import guest_ready_line
from novakit.virt.fake import failure_env_var
from tests.functional.cloud import HOSTS, Cloud, boot


def _kinds(report: Any) -> list[tuple[str, str]]:
    return sorted((c.kind, c.instance) for c in report.corrections)


def _boots(cloud: Cloud, server: dict[str, Any]) -> int:
    """How many times the guest printed its ready marker on its console."""
    console = cloud.api.console_output(cloud.admin, server["id"])
    return console.count(guest_ready_line(server["hostname"], server["id"]))


def _only(cloud: Cloud, host: str) -> None:
    """Let the scheduler place on ``host`` alone."""
    for other in HOSTS:
        hosts.set_disabled(cloud.db, cloud.admin, other, other != host, None if other == host else "test")


def _on_one_host(cloud: Cloud, ctx: RequestContext) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``web`` (running) and ``db`` (stopped) on one host, ``far`` on another; heal has seen them all."""
    _only(cloud, "compute-1")
    web = boot(cloud, ctx, "web")
    db = boot(cloud, ctx, "db")
    cloud.api.act(ctx, "db", "stop")
    _only(cloud, "compute-2")
    far = boot(cloud, ctx, "far")
    for host in HOSTS:
        hosts.set_disabled(cloud.db, cloud.admin, host, False)
    assert (web["host"], db["host"], far["host"]) == ("compute-1", "compute-1", "compute-2")
    assert heal(cloud.db, cloud.conf).corrections == []  # and it records each host's boot
    return web, db, far


def test_the_running_guests_of_a_host_that_booted_are_started_again_once(
    cloud: Cloud, ctx: RequestContext
) -> None:
    web, db, far = _on_one_host(cloud, ctx)
    host = web["host"]
    cloud.fake(host).reboot_host()

    planned = heal(cloud.db, cloud.conf, dry_run=True)
    assert _kinds(planned) == [("resumed_after_host_boot", web["id"])]
    assert cloud.fake(host).list_instances()[web["id"]] == PowerState.SHUTDOWN  # nothing done

    report = heal(cloud.db, cloud.conf)
    assert _kinds(report) == [("resumed_after_host_boot", web["id"])]
    (c,) = report.corrections
    assert c.applied and c.error is None and "booted" in c.detail
    shown = cloud.api.get(ctx, "web")
    assert (shown["status"], shown["power_state_name"]) == ("ACTIVE", "Running")
    assert cloud.fake(host).list_instances()[web["id"]] == PowerState.RUNNING
    assert _boots(cloud, web) == 2  # its first boot, and the one after the host's
    reboot = [a for a in cloud.api.list_actions(ctx, web["id"]) if a["action"] == "reboot"]
    assert [e["event"] for e in reboot[0]["events"]][0] == RESUME_EVENT
    # The stopped server stays stopped; the other host's server is not touched.
    assert cloud.api.get(ctx, "db")["status"] == "SHUTOFF"
    assert cloud.fake(host).list_instances()[db["id"]] == PowerState.SHUTDOWN
    assert cloud.api.get(ctx, far["id"])["status"] == "ACTIVE"
    assert _boots(cloud, far) == 1

    # The boot is taken: the next heal finds nothing to do.
    assert heal(cloud.db, cloud.conf).corrections == []
    assert _boots(cloud, web) == 2


def test_two_heals_at_once_start_each_guest_once(cloud: Cloud, ctx: RequestContext) -> None:
    web, _db, _far = _on_one_host(cloud, ctx)
    cloud.fake(web["host"]).reboot_host()
    reports: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reports.append(heal(cloud.db, cloud.conf))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    resumed = [c for r in reports for c in r.corrections if c.kind == "resumed_after_host_boot"]
    assert [c.instance for c in resumed] == [web["id"]]
    assert _boots(cloud, web) == 2
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"


def test_without_resume_the_guests_of_a_host_that_booted_are_recorded_stopped(
    cloud: Cloud, ctx: RequestContext
) -> None:
    web, _db, _far = _on_one_host(cloud, ctx)
    cloud.fake(web["host"]).reboot_host()
    conf = load_config(
        db_url=cloud.db.url,
        state_dir=cloud.conf.state_dir,
        compute={"resume_guests_state_on_host_boot": False},
    )
    report = heal(cloud.db, conf)
    assert _kinds(report) == [("stopped", web["id"])]
    assert cloud.api.get(ctx, "web")["status"] == "SHUTOFF"
    assert _boots(cloud, web) == 1


def test_a_guest_that_does_not_come_back_puts_its_server_in_error_with_a_fault(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    web, _db, _far = _on_one_host(cloud, ctx)
    cloud.fake(web["host"]).reboot_host()
    monkeypatch.setenv(failure_env_var(web["host"]), "fail_reboot")
    report = heal(cloud.db, cloud.conf)
    (c,) = report.corrections
    assert (c.kind, c.instance, c.applied) == ("resumed_after_host_boot", web["id"], False)
    assert c.after.startswith("error/")
    assert "fake failure" in (c.error or "")
    shown = cloud.api.get(ctx, "web")
    assert shown["status"] == "ERROR"
    assert f"did not come back after host {web['host']} booted" in shown["fault"]["message"]
    monkeypatch.delenv(failure_env_var(web["host"]))
    assert heal(cloud.db, cloud.conf).corrections == []  # the boot was taken; the error stays for the user
