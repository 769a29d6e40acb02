"""``novakit server list/show`` as ``openstack`` users type them, and the day-2 commands.

Every option and output format as a user sees it: rows, columns, errors and exit
statuses, on SQLite and PostgreSQL (the listing's filters are in its query).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from novakit.cli.main import app
from novakit.cli.servers import complete_server
from tests.functional.test_cli import Run, _one_line_error, cloud, env, nk  # noqa: F401

MEMBER = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "bob", "NOVAKIT_ROLES": "member"}


def _json(result: Any) -> Any:
    return json.loads(result.stdout)


def _header(table: str) -> list[str]:
    """The column headings of a rich table as printed."""
    line = next(ln for ln in table.splitlines() if "ID" in ln and "┃" in ln)
    return [cell.strip() for cell in line.strip("┃ ").split("┃")]


@pytest.fixture
def fleet(cloud: Run) -> Run:  # noqa: F811
    """web-1..3 (m1.small, tiny), db (m1.big, other), all ACTIVE, in project admin."""
    cloud("flavor", "create", "m1.big", "--vcpus", "2", "--ram", "2048", "--disk", "20")
    cloud("image", "create", "other", "--location", "/var/lib/novakit/images/other.qcow2")
    cloud("server", "create", "web", "--flavor", "m1.small", "--image", "tiny", "--count", "3")
    cloud("server", "create", "db", "--flavor", "m1.big", "--image", "other", "--meta", "tier=data")
    return cloud


def test_server_list_shows_openstacks_columns_with_names_not_ids(fleet: Run) -> None:
    table = fleet("server", "list").stdout
    assert _header(table) == ["ID", "Name", "Status", "Networks", "Image", "Flavor"]
    db_row = next(ln for ln in table.splitlines() if " db " in ln)
    assert "other" in db_row and "m1.big" in db_row and "192.0.2." in db_row and "ACTIVE" in db_row
    servers = _json(fleet("server", "list", "-f", "json"))
    assert all(s["image"] not in table for s in servers)  # image ids are not shown, names are

    long = fleet("server", "list", "--long").stdout
    assert _header(long)[:5] == ["ID", "Name", "Status", "Task State", "Power State"]
    assert {"Host", "Created", "Image ID", "Flavor Name"} <= set(_header(long))
    assert "Availability" in long  # a heading rich may fold on two lines
    assert "compute-" in long and "tier=data" in long


def test_every_format_and_column_choice(fleet: Run) -> None:
    full = _json(fleet("server", "list", "-f", "json"))
    assert sorted(s["name"] for s in full) == ["db", "web-1", "web-2", "web-3"]
    assert full == _json(fleet("server", "list", "--output", "json"))  # the old option, unchanged
    assert {"vm_state", "host_id", "flavor"} <= set(full[0])

    picked = _json(fleet("server", "list", "-f", "json", "-c", "Name", "-c", "image"))
    assert picked[0] == {"Name": full[0]["name"], "Image": "tiny"}
    assert yaml.safe_load(fleet("server", "list", "-f", "yaml", "-c", "name").stdout) == [
        {"Name": s["name"]} for s in full
    ]
    assert fleet("server", "list", "-f", "value", "-c", "Name").stdout.split() == [s["name"] for s in full]
    values = fleet("server", "list", "-f", "value", "-c", "ID", "-c", "Status").stdout.splitlines()
    assert values == [f"{s['id']} ACTIVE" for s in full]
    rows = list(
        csv.reader(io.StringIO(fleet("server", "list", "-f", "csv", "-c", "Name", "-c", "Flavor").stdout))
    )
    assert rows[0] == ["Name", "Flavor"] and ["db", "m1.big"] in rows and len(rows) == 5
    # -c chooses from the --long columns too; a table with -c has just those.
    assert _header(fleet("server", "list", "-c", "ID", "-c", "Task State").stdout) == ["ID", "Task State"]

    shown = _json(fleet("server", "show", "db", "-f", "json"))
    assert shown["name"] == "db" and shown["image_name"] == "other" and shown["flavor"]["name"] == "m1.big"
    assert fleet("server", "show", "db", "-f", "value", "-c", "status", "-c", "name").stdout == "ACTIVE\ndb\n"
    assert yaml.safe_load(fleet("server", "show", "db", "-f", "yaml", "-c", "image").stdout) == {
        "image": f"other ({shown['image']})"
    }
    table = fleet("server", "show", "db").stdout
    assert "Field" in table and "m1.big (2 vCPU, 2048 MB)" in table and "tier=data" in table
    flavors = _json(fleet("flavor", "list", "-f", "json", "-c", "Name", "-c", "VCPUs"))
    assert sorted(flavors, key=lambda f: f["Name"]) == [
        {"Name": "m1.big", "VCPUs": 2},
        {"Name": "m1.small", "VCPUs": 1},
    ]
    assert sorted(fleet("image", "list", "-f", "value", "-c", "name").stdout.split()) == ["other", "tiny"]
    assert "compute-1" in fleet("host", "list", "-f", "value", "-c", "Host").stdout.split()

    _one_line_error(fleet("server", "list", "-c", "Bogus", code=1), "Invalid column: 'Bogus' is not a column")
    _one_line_error(fleet("server", "list", "-f", "json", "-o", "table", code=1), "Invalid format")
    bad = fleet("server", "list", "-f", "xml", code=2)
    assert "xml" in bad.stderr and "Traceback" not in bad.output


def test_filters_are_nova_s(fleet: Run) -> None:
    fleet("server", "stop", "web-2")
    names = lambda *args: fleet("server", "list", "-f", "value", "-c", "Name", *args).stdout.split()  # noqa: E731
    assert names("--status", "SHUTOFF") == ["web-2"]
    assert names("--status", "active") == ["web-1", "web-3", "db"]
    assert names("--name", "^web-[12]$") == ["web-1", "web-2"]
    assert names("--name", "eb") == ["web-1", "web-2", "web-3"]  # a search, as Nova's
    assert names("--flavor", "m1.big") == ["db"]
    assert names("--image", "tiny", "--status", "ACTIVE") == ["web-1", "web-3"]
    host = _json(fleet("server", "show", "db", "-f", "json"))["host"]
    assert "db" in names("--host", host)
    assert names("--host", "compute-9") == []

    _one_line_error(fleet("server", "list", "--status", "RUNNING", code=1), "Invalid status: 'RUNNING'")
    _one_line_error(fleet("server", "list", "--name", "web(", code=1), "Invalid name: is not a valid regular")
    _one_line_error(fleet("server", "list", "--flavor", "m9", code=1), "Flavor m9 could not be found")
    _one_line_error(fleet("server", "list", "--image", "nope", code=1), "Image nope could not be found")
    _one_line_error(fleet("server", "list", "--sort-key", "host", code=1), "Invalid sort_key")


def test_pages_with_limit_and_marker(fleet: Run) -> None:
    every = fleet("server", "list", "-f", "value", "-c", "ID").stdout.split()
    first = fleet("server", "list", "--limit", "2", "-f", "value", "-c", "ID").stdout.split()
    assert first == every[:2]
    rest = fleet("server", "list", "--limit", "2", "--marker", first[-1], "-f", "value", "-c", "ID").stdout
    assert rest.split() == every[2:]
    assert fleet("server", "list", "--marker", every[-1], "-f", "json").stdout.strip() == "[]"
    by_name = fleet("server", "list", "--sort-key", "name", "--sort-dir", "desc", "-f", "value", "-c", "Name")
    assert by_name.stdout.split() == ["web-3", "web-2", "web-1", "db"]
    after = fleet(
        "server", "list", "--sort-key", "name", "--marker", every[0], "-f", "value", "-c", "Name"
    ).stdout.split()
    assert after == ["web-2", "web-3"]  # every[0] is web-1: the page after it, by name

    _one_line_error(
        fleet("server", "list", "--marker", "00000000-0000-4000-8000-000000000000", code=1),
        "Invalid marker: 00000000-0000-4000-8000-000000000000 is not a server of this listing",
    )
    # A marker of a server the listing leaves out is as unknown (here: filtered out by name).
    _one_line_error(fleet("server", "list", "--name", "db", "--marker", every[0], code=1), "Invalid marker")
    assert "Traceback" not in fleet("server", "list", "--limit", "0", code=2).output


def test_a_member_sees_no_host_and_its_own_project_only(fleet: Run) -> None:
    fleet("server", "create", "mine", "--flavor", "m1.small", "--image", "tiny", **MEMBER)
    mine = fleet("server", "list", "--long", **MEMBER).stdout
    headers = _header(mine)
    assert "Host ID" in headers and "Host" not in headers
    assert "mine" in mine and "compute-" not in mine and "web-1" not in mine
    shown = fleet("server", "show", "mine", **MEMBER).stdout
    assert "host_id" in shown and "compute-" not in shown
    _one_line_error(fleet("server", "list", "-c", "Host", code=1, **MEMBER), "'Host' is not a column")
    _one_line_error(
        fleet("server", "list", "--host", "compute-1", code=1, **MEMBER), "Policy does not allow host:show"
    )
    _one_line_error(
        fleet("server", "list", "--all-projects", code=1, **MEMBER),
        "Policy does not allow servers:all_projects",
    )

    # An admin lists its own project unless it asks for every project, as in Nova.
    own = fleet("server", "list", "-f", "value", "-c", "Name").stdout.split()
    assert "mine" not in own and "db" in own
    every = fleet("server", "list", "--all-projects", "--long").stdout
    assert "mine" in every and "db" in every and "Host" in _header(every)
    mine_row = next(ln for ln in every.splitlines() if " mine " in ln)
    assert "compute-" in mine_row


def test_deleted_servers_are_found_by_name_with_deleted(fleet: Run) -> None:
    first = _json(fleet("server", "create", "old", "--flavor", "m1.small", "--image", "tiny", "-f", "json"))[
        0
    ]
    fleet("server", "delete", "old")
    _one_line_error(fleet("server", "show", "old", code=1), "a deleted server of that name exists (novakit")
    _one_line_error(fleet("server", "events", "old", code=1), "exists (novakit server show --deleted")
    gone = _json(fleet("server", "show", "old", "--deleted", "-f", "json"))
    assert (gone["id"], gone["status"]) == (first["id"], "DELETED")
    assert [a["action"] for a in _json(fleet("server", "events", "old", "--deleted", "-f", "json"))] == [
        "create",
        "delete",
    ]
    # Of two deleted servers of one name, the one deleted last.
    second = _json(fleet("server", "create", "old", "--flavor", "m1.small", "--image", "tiny", "-f", "json"))[
        0
    ]
    fleet("server", "delete", "old")
    assert (
        fleet("server", "show", "old", "--deleted", "-f", "value", "-c", "id").stdout.strip() == second["id"]
    )
    assert (
        fleet("server", "show", first["id"], "--deleted", "-f", "value", "-c", "id").stdout.strip()
        == first["id"]
    )
    listed = fleet(
        "server", "list", "--deleted", "-f", "value", "-c", "ID", "-c", "Status"
    ).stdout.splitlines()
    assert listed == [f"{first['id']} DELETED", f"{second['id']} DELETED"]
    assert "old" not in fleet("server", "list").stdout
    # Another project's deleted servers stay out of sight.
    _one_line_error(fleet("server", "show", "old", "--deleted", code=1, **MEMBER), "could not be found")
    assert fleet("server", "list", "--deleted", "-f", "json", **MEMBER).stdout.strip() == "[]"
    _one_line_error(fleet("server", "show", "never", "--deleted", code=1), "Instance never (among deleted")


def test_server_groups_from_the_command_line(cloud: Run) -> None:  # noqa: F811
    made = _json(cloud("server", "group", "create", "spread", "--policy", "anti-affinity", "-f", "json"))
    assert (made["name"], made["policy"], made["members"]) == ("spread", "anti-affinity", [])
    cloud("server", "group", "create", "limited", "--policy", "anti-affinity", "--max-server-per-host", "2")
    cloud(
        "server",
        "create",
        "a",
        "--flavor",
        "m1.small",
        "--image",
        "tiny",
        "--count",
        "2",
        "--group",
        "spread",
    )
    shown = _json(cloud("server", "group", "show", "spread", "-f", "json"))
    assert len(shown["members"]) == 2
    hosts = {_json(cloud("server", "show", m, "-f", "json"))["host"] for m in shown["members"]}
    assert len(hosts) == 2  # anti-affinity: one per host
    listed = cloud("server", "group", "list").stdout
    assert "spread" in listed and "limited" in listed and "max_server_per_host=2" in listed
    assert cloud("server", "group", "list", "-f", "value", "-c", "Name", **MEMBER).stdout == ""
    assert "spread" in cloud("server", "group", "list", "--all-projects", "-f", "value", "-c", "name").stdout

    _one_line_error(
        cloud("server", "group", "create", "x", "--policy", "together", code=1),
        "Invalid policy: 'together' is not one of affinity, anti-affinity",
    )
    _one_line_error(
        cloud("server", "group", "create", "y", "--policy", "affinity", "--max-server-per-host", "1", code=1),
        "applies to policy anti-affinity only",
    )
    _one_line_error(cloud("server", "group", "create", "spread", "--policy", "affinity", code=1), "exists")
    _one_line_error(cloud("server", "group", "show", "spread", code=1, **MEMBER), "could not be found")
    _one_line_error(
        cloud("server", "group", "list", "--all-projects", code=1, **MEMBER), "Policy does not allow"
    )
    assert "server group spread deleted" in cloud("server", "group", "delete", "spread").stdout
    _one_line_error(
        cloud("server", "group", "show", "spread", code=1), "Server group spread could not be found"
    )
    assert len(_json(cloud("server", "list", "-f", "json"))) == 2  # its members keep running


def test_server_console_reads_the_guest_log_from_its_host(cloud: Run) -> None:  # noqa: F811
    cloud("server", "create", "talk", "--flavor", "m1.small", "--image", "tiny")
    log = cloud("server", "console", "talk").stdout
    assert log.startswith("Linux version 6.1.0-fake") and "novakit-init: hostname talk" in log
    last = cloud("server", "console", "talk", "--lines", "1").stdout
    assert last.splitlines() == log.splitlines()[-1:] and len(last.splitlines()) == 1
    cloud("server", "reboot", "talk")
    assert "reboot: Restarting system" in cloud("server", "console", "talk").stdout

    _one_line_error(cloud("server", "console", "talk", code=1, **MEMBER), "Instance talk could not be found")
    _one_line_error(
        cloud("server", "console", "talk", "--lines", "0", code=1), "Invalid lines: must be from 1"
    )
    cloud("server", "create", "theirs", "--flavor", "m1.small", "--image", "tiny", **MEMBER)
    assert "hostname theirs" in cloud("server", "console", "theirs", **MEMBER).stdout  # the owner may read it


def test_host_delete_is_refused_while_it_has_servers(cloud: Run) -> None:  # noqa: F811
    server = _json(cloud("server", "create", "s", "--flavor", "m1.small", "--image", "tiny", "-f", "json"))[0]
    busy, idle = server["host"], ({"compute-1", "compute-2"} - {server["host"]}).pop()
    _one_line_error(
        cloud("host", "delete", busy, code=1), f"Compute host {busy} cannot be deleted: 1 server(s)"
    )
    assert busy in cloud("host", "list").stdout
    _one_line_error(cloud("host", "delete", idle, code=1, **MEMBER), "Policy does not allow host:delete")
    assert f"host {idle} deleted" in cloud("host", "delete", idle).stdout
    assert cloud("host", "list", "-f", "value", "-c", "Host").stdout.split() == [busy]
    _one_line_error(cloud("host", "delete", idle, code=1), f"Compute host {idle} could not be found")
    # Its name can be registered again, as a new host.
    cloud("host", "add", idle, "--vcpus", "4", "--memory-mb", "8192", "--disk-gb", "100")
    assert idle in cloud("host", "list").stdout

    cloud("server", "delete", "s")
    assert f"host {busy} deleted" in cloud("host", "delete", busy).stdout
    assert _json(cloud("server", "show", "s", "--deleted", "-f", "json"))["status"] == "DELETED"


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``group`` (typer's click objects), with its path."""
    out = []
    for name, cmd in group.commands.items():
        out.append(((*prefix, name), cmd))
        if hasattr(cmd, "commands"):
            out.extend(_commands(cmd, (*prefix, name)))
    return out


def test_every_command_has_help_and_no_flag_shows_a_value(nk: Run) -> None:  # noqa: F811
    root = typer.main.get_command(app)
    commands = _commands(root)
    assert len(commands) > 40
    assert "<bool>" not in nk("--help").stdout
    for path, cmd in commands:
        assert (cmd.help or "").strip(), f"novakit {' '.join(path)} has no help text"
        text = nk(*path, "--help", COLUMNS="200").stdout
        assert "<bool>" not in text, path
        for param in cmd.params:
            if param.param_type_name == "option":
                assert (param.help or "").strip(), f"novakit {' '.join(path)} {param.opts[0]} has no help"
    reboot = nk("server", "reboot", "--help", COLUMNS="200").stdout
    assert "--hard" in reboot and "reset, do not ask the guest" in reboot


def test_server_names_complete_as_the_operator(
    cloud: Run,  # noqa: F811
    env: dict[str, str | None],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cloud("server", "create", "alpha", "--flavor", "m1.small", "--image", "tiny", "--count", "2")
    cloud("server", "create", "beta", "--flavor", "m1.small", "--image", "tiny")
    cloud("server", "create", "alpine", "--flavor", "m1.small", "--image", "tiny", **MEMBER)
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    assert complete_server(None, "al") == ["alpha-1", "alpha-2"]
    assert complete_server(None, "") == ["alpha-1", "alpha-2", "beta"]
    for key, value in MEMBER.items():
        monkeypatch.setenv(key, value)
    assert complete_server(None, "al") == ["alpine"]
    # No database: nothing completes, nothing is printed, and no database file is made.
    missing = tmp_path / "nowhere" / "novakit.db"
    monkeypatch.setenv("NOVAKIT_DB_URL", f"sqlite:///{missing}")
    assert complete_server(None, "al") == [] and not missing.parent.exists()
    monkeypatch.setenv("NOVAKIT_DB_URL", "postgresql+psycopg://u:p@127.0.0.1:1/none")
    assert complete_server(None, "al") == []


def test_the_other_commands_take_the_same_formats(cloud: Run) -> None:  # noqa: F811
    created = cloud(
        "server", "create", "f", "--flavor", "m1.small", "--image", "tiny", "-f", "value", "-c", "Name"
    )
    assert created.stdout == "f\n"
    events = cloud("server", "events", "f", "-f", "csv", "-c", "Action", "-c", "Event").stdout.splitlines()
    assert events[0] == '"Action","Event"' and events[1].startswith('"create",') and len(events) > 2
    assert yaml.safe_load(cloud("server", "events", "f", "-f", "yaml").stdout)[0]["action"] == "create"
    beats = _json(cloud("host", "heartbeat", "-f", "json", "-c", "Host", "-c", "Answered"))
    assert {"Host": "compute-1", "Answered": True} in beats
    assert cloud("heal", "-f", "value", "-c", "Kind").stdout == ""  # nothing to correct
    assert _json(cloud("heal", "-f", "json"))["corrections"] == []
    listed = list(
        csv.reader(io.StringIO(cloud("host", "list", "-f", "csv", "-c", "Host", "-c", "vCPU").stdout))
    )
    assert listed[0] == ["Host", "vCPU"]
    assert sorted(listed[1:]) in (
        [["compute-1", "1/32"], ["compute-2", "0/64"]],
        [["compute-1", "0/32"], ["compute-2", "1/64"]],
    )
    _one_line_error(
        cloud("host", "list", "-c", "Nope", code=1), "Invalid column: 'Nope' is not a column here"
    )
