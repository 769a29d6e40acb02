"""The ``novakit`` command as a user types it: tables for people, JSON for scripts, one-line errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from novakit.cli.main import app
from novakit.virt.driver import load_driver

Run = Callable[..., Result]
SECRET = "s3cr3t-hunter2"


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> dict[str, str | None]:
    return {
        "NOVAKIT_DB_URL": db_url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_FAKE_STATE_DIR": None,
        "NOVAKIT_CONFIG": None,
        # The operator's identity (tests/conftest.py); trust-model tests replace it.
        "NOVAKIT_PROJECT": "admin",
        "NOVAKIT_USER": "admin",
        "NOVAKIT_ROLES": "admin",
        "NOVAKIT_NOTIFICATIONS_FILE": None,
        # Each command is a request of its own, not part of an Ansible or AWX run.
        "NOVAKIT_REQUEST_ID": None,
        "JOB_ID": None,
        "AWX_JOB_ID": None,
        "TOWER_JOB_ID": None,
        "AWX_ISOLATED_DATA_DIR": None,
        "COLUMNS": "250",  # wide enough that tables show whole uuids
    }


@pytest.fixture
def nk(env: dict[str, str | None]) -> Run:
    runner = CliRunner()

    def run(*args: str, code: int = 0, **extra_env: str | None) -> Result:
        result = runner.invoke(app, list(args), env={**env, **extra_env})
        assert result.exit_code == code, (args, result.stdout, result.stderr, result.exception)
        if code == 0:
            assert "Traceback" not in result.output
        return result

    return run


def _json(result: Result) -> Any:
    return json.loads(result.stdout)


@pytest.fixture
def cloud(nk: Run) -> Run:
    """Two fake hosts, a flavor and an image, made through the command line."""
    assert "database at revision" in nk("db", "upgrade").stdout
    nk("host", "add", "compute-1", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200")
    nk("host", "add", "compute-2", "--vcpus", "16", "--memory-mb", "32768", "--disk-gb", "400")
    assert (
        "flavor m1.small created"
        in nk("flavor", "create", "m1.small", "--vcpus", "1", "--ram", "1024", "--disk", "10").stdout
    )
    assert (
        "image tiny created"
        in nk("image", "create", "tiny", "--location", "/var/lib/novakit/images/tiny.qcow2").stdout
    )
    return nk


def _one_line_error(result: Result, words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and words in lines[0], lines[0]
    assert "Traceback" not in result.output and result.stdout == ""


def test_hosts_flavors_and_images(cloud: Run) -> None:
    listed = cloud("host", "list").stdout
    assert "compute-1" in listed and "enabled" in listed and "up" in listed
    assert "0/32" in listed and "░" in listed  # compute-1: 8 vCPU x 4.0 allocation ratio, nothing used

    cloud("host", "disable", "compute-2", "--reason", "new disks")
    assert "disabled (new disks)" in cloud("host", "list").stdout
    hosts = {h["host"]: h for h in _json(cloud("host", "list", "--output", "json"))}
    assert (hosts["compute-2"]["status"], hosts["compute-2"]["disabled_reason"]) == ("disabled", "new disks")
    assert hosts["compute-1"]["capacity"]["VCPU"] == 32 and hosts["compute-1"]["state"] == "up"
    cloud("host", "enable", "compute-2")
    assert {h["status"] for h in _json(cloud("host", "list", "-o", "json"))} == {"enabled"}

    cloud(
        "flavor", "create", "m1.big", "--vcpus", "4", "--ram", "8192", "--disk", "40", "--property", "hw:x=y"
    )
    assert {"m1.small", "m1.big"} <= {f["name"] for f in _json(cloud("flavor", "list", "-o", "json"))}
    assert "m1.big" in cloud("flavor", "list").stdout
    cloud("flavor", "delete", "m1.big")
    assert "m1.big" not in cloud("flavor", "list").stdout

    cloud(
        "image",
        "create",
        "other",
        "--location",
        "file:///images/other.qcow2",
        "--property",
        "os_distro=debian",
    )
    assert {"tiny", "other"} == {i["name"] for i in _json(cloud("image", "list", "-o", "json"))}
    cloud("image", "delete", "other")
    assert "other" not in cloud("image", "list").stdout


def test_a_server_through_its_whole_life(cloud: Run, tmp_path: Path) -> None:
    user_data = tmp_path / "user-data"
    user_data.write_text(f"#cloud-config\npassword: {SECRET}\n")
    created = cloud(
        "server",
        "create",
        "web",
        "--flavor",
        "m1.small",
        "--image",
        "tiny",
        "--count",
        "3",
        "--user-data",
        str(user_data),
        "--meta",
        "role=web",
    )
    assert "3 of 3 server(s) active" in created.stderr
    assert all(f"web-{i}" in created.stdout for i in (1, 2, 3))

    servers = _json(cloud("server", "list", "-o", "json"))
    assert sorted(s["name"] for s in servers) == ["web-1", "web-2", "web-3"]
    assert {s["status"] for s in servers} == {"ACTIVE"}
    shown = cloud("server", "show", "web-1").stdout
    web1 = next(s for s in servers if s["name"] == "web-1")
    assert "ACTIVE" in shown and web1["host"] in shown and "192.0.2." in shown and "role=web" in shown

    steps = [
        (("stop", "web-1"), "SHUTOFF"),
        (("start", "web-1"), "ACTIVE"),
        (("reboot", "web-1"), "ACTIVE"),
        (("reboot", "web-1", "--hard"), "ACTIVE"),
        (("pause", "web-1"), "PAUSED"),
        (("unpause", "web-1"), "ACTIVE"),
        (("suspend", "web-1"), "SUSPENDED"),
        (("resume", "web-1"), "ACTIVE"),
        (("lock", "web-1", "--reason", "audit"), "ACTIVE"),
        (("unlock", "web-1"), "ACTIVE"),
        (("rebuild", "web-1", "--image", "tiny"), "ACTIVE"),
        (("rename", "web-1", "front"), "ACTIVE"),
    ]
    for args, status in steps:
        out = cloud("server", *args).stdout
        assert f": {status} (" in out, (args, out)
    assert _json(cloud("server", "show", "front", "-o", "json"))["id"] == web1["id"]

    events = _json(cloud("server", "events", "front", "-o", "json"))
    assert [a["action"] for a in events] == [
        "create",
        "stop",
        "start",
        "reboot",
        "reboot",
        "pause",
        "unpause",
        "suspend",
        "resume",
        "lock",
        "unlock",
        "rebuild",
        "rename",
    ]
    assert events[1]["events"][0]["event"] == "compute_stop_instance"
    table = cloud("server", "events", "front").stdout
    assert "compute__do_build_and_run_instance" in table and "Success" in table

    assert "DELETED" in cloud("server", "delete", "front").stdout
    assert "front" not in cloud("server", "list").stdout
    for args in (
        ("server", "list", "-o", "json"),
        ("server", "show", "web-2", "-o", "json"),
        ("server", "events", "web-2", "-o", "json"),
        ("server", "events", "web-2"),
    ):
        assert SECRET not in cloud(*args).output


def test_errors_are_one_line_with_status_1(cloud: Run, tmp_path: Path) -> None:
    _one_line_error(cloud("server", "show", "nope", code=1), "Instance nope could not be found.")
    cloud("server", "create", "solo", "--flavor", "m1.small", "--image", "tiny")
    _one_line_error(cloud("server", "start", "solo", code=1), "Cannot 'start' instance")
    _one_line_error(
        cloud("server", "create", "x", "--flavor", "m9", "--image", "tiny", code=1),
        "Flavor m9 could not be found",
    )
    _one_line_error(
        cloud("heal", code=1, NOVAKIT_ROLES="member", NOVAKIT_PROJECT="p1"), "Policy does not allow heal"
    )
    _one_line_error(
        cloud("host", "disable", "compute-9", code=1), "Compute host compute-9 could not be found"
    )
    down = cloud("server", "list", code=1, NOVAKIT_DB_URL="postgresql+psycopg://u:p@127.0.0.1:1/none")
    _one_line_error(down, "database error")
    bad_config = tmp_path / "novakit.toml"
    bad_config.write_text("[compute]\nmax_concurent_builds = 3\n")
    _one_line_error(cloud("server", "list", code=1, NOVAKIT_CONFIG=str(bad_config)), "max_concurent_builds")
    missing = cloud(
        "server",
        "create",
        "y",
        "--flavor",
        "m1.small",
        "--image",
        "tiny",
        "--user-data",
        str(tmp_path / "missing"),
        code=2,
    )
    assert "Traceback" not in missing.output and "missing" in missing.stderr


def test_a_create_whose_servers_end_in_error_exits_1_and_still_shows_them(cloud: Run) -> None:
    cloud("flavor", "create", "huge", "--vcpus", "1", "--ram", "40000", "--disk", "1")  # no host has it
    failed = cloud("server", "create", "big", "--flavor", "huge", "--image", "tiny", "-o", "json", code=1)
    [server] = _json(failed)
    assert server["status"] == "ERROR" and server["name"] == "big"
    assert _json(cloud("server", "show", "big", "-o", "json"))["status"] == "ERROR"
    table = cloud("server", "create", "big2", "--flavor", "huge", "--image", "tiny", code=1)
    assert "big2" in table.stdout and "No valid host" in table.stderr


def test_an_unset_identity_is_a_member_and_flags_do_not_make_it_an_admin(cloud: Run) -> None:
    nobody = {"NOVAKIT_PROJECT": None, "NOVAKIT_USER": None, "NOVAKIT_ROLES": None}
    _one_line_error(
        cloud("host", "add", "compute-9", code=1, **nobody), "Policy does not allow host:register"
    )
    _one_line_error(cloud("host", "list", code=1, **nobody), "Policy does not allow host:list")
    _one_line_error(
        cloud("--role", "admin", "host", "list", code=1, **nobody),
        "roles 'admin' may not be given by the call",
    )
    member = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_ROLES": "member"}
    _one_line_error(
        cloud("--project", "admin", "server", "list", code=1, **member), "project 'admin' may not be given"
    )
    # The operator's admin may act as a member of any project.
    assert (
        cloud("--role", "member", "--project", "team-b", "server", "list", "-o", "json").stdout.strip()
        == "[]"
    )
    assert "compute-1" in cloud("host", "list").stdout


def test_heal_from_the_command_line(cloud: Run, tmp_path: Path) -> None:
    created = cloud("server", "create", "lost", "--flavor", "m1.small", "--image", "tiny", "-o", "json")
    server = _json(created)[0]
    load_driver("fake", server["host"], {"state_dir": str(tmp_path / "state" / "fake")}).vanish(server["id"])

    dry = cloud("heal", "--dry-run")
    assert "dry run" in dry.stdout and "vanished" in dry.stdout and server["id"] in dry.stdout
    assert _json(cloud("server", "show", "lost", "-o", "json"))["status"] == "ACTIVE"

    report = _json(cloud("heal", "--host", server["host"], "-o", "json"))
    assert [(c["kind"], c["instance"], c["applied"]) for c in report["corrections"]] == [
        ("vanished", server["id"], True)
    ]
    shown = cloud("server", "show", "lost").stdout
    assert "ERROR" in shown and "vanished from host" in shown  # the last fault
    assert "0 correction(s) on 2 host(s)" in cloud("heal").stdout
