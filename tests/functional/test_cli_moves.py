"""Moving servers from the command line, as ``openstack`` users type it: ``server resize``,
``migrate``, ``evacuate``, ``shelve``, ``unshelve``, ``image create``, ``rescue``, ``migration list``
and ``host drain``; what the user sees (lines, tables, JSON, errors, exit statuses), on SQLite and
PostgreSQL. A move that failed and was rolled back exits 1 and says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from novakit.virt.fake import failure_env_var
from tests.functional.test_cli import Run, _one_line_error, cloud, env, nk  # noqa: F401

MEMBER = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "bob", "NOVAKIT_ROLES": "member"}
HOSTS = ("compute-1", "compute-2")


def _json(result: Any) -> Any:
    return json.loads(result.stdout)


def _show(run: Run, server: str) -> dict[str, Any]:
    shown: dict[str, Any] = _json(run("server", "show", server, "-f", "json"))
    return shown


def _hosts(run: Run) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in _json(run("host", "list", "-f", "json"))}


def _other(host: str) -> str:
    return next(h for h in HOSTS if h != host)


def _last_error_line(result: Any) -> str:
    line: str = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: ") and "Traceback" not in result.output, result.output
    return line


@pytest.fixture
def web(cloud: Run) -> Run:  # noqa: F811
    """A bigger flavor, and server web (m1.small) ACTIVE on one of the two hosts."""
    cloud("flavor", "create", "m1.large", "--vcpus", "2", "--ram", "2048", "--disk", "20")
    cloud("server", "create", "web", "--flavor", "m1.small", "--image", "tiny")
    return cloud


def test_resize_then_confirm(web: Run) -> None:
    source = _show(web, "web")["host"]
    resized = web("server", "resize", "web", "m1.large")
    assert "web: VERIFY_RESIZE (vm_state resized" in resized.stdout
    assert "novakit server resize confirm web" in resized.stderr
    shown = _show(web, "web")
    assert (shown["host"], shown["flavor"]["name"]) == (_other(source), "m1.large")

    assert "web: ACTIVE (vm_state active" in web("server", "resize", "confirm", "web").stdout
    assert _show(web, "web")["host"] == _other(source)
    [mig] = _json(web("migration", "list", "--server", "web", "-f", "json"))
    assert (mig["type"], mig["status"], mig["source_compute"]) == ("resize", "confirmed", source)
    assert (mig["old_flavor"], mig["new_flavor"]) == ("m1.small", "m1.large")
    actions = [a["action"] for a in _json(web("server", "events", "web", "-f", "json"))]
    assert actions == ["create", "resize", "confirmResize"]


def test_resize_with_flavor_option_then_revert(web: Run) -> None:
    source = _show(web, "web")["host"]
    web("server", "resize", "--flavor", "m1.large", "web")
    assert _show(web, "web")["status"] == "VERIFY_RESIZE"
    assert "web: ACTIVE" in web("server", "resize", "revert", "web").stdout
    shown = _show(web, "web")
    assert (shown["host"], shown["flavor"]["name"]) == (source, "m1.small")
    assert [m["status"] for m in _json(web("migration", "list", "-f", "json"))] == ["reverted"]


def test_resize_arguments_read_as_the_help_says(web: Run) -> None:
    # A server named confirm is resized with --flavor; "resize confirm X" answers server X.
    web("server", "create", "confirm", "--flavor", "m1.small", "--image", "tiny")
    web("server", "resize", "--flavor", "m1.large", "confirm")
    assert _show(web, "confirm")["status"] == "VERIFY_RESIZE"
    web("server", "resize", "confirm", "confirm")
    assert _show(web, "confirm")["status"] == "ACTIVE"

    _one_line_error(web("server", "resize", "web", code=1), "resize needs a flavor")
    _one_line_error(web("server", "resize", "revert", code=1), "resize revert needs the server")
    _one_line_error(
        web("server", "resize", "web", "m1.large", "--flavor", "m1.large", code=1), "give the flavor once"
    )
    _one_line_error(web("server", "resize", "web", "m1.small", code=1), "is the server's flavor already")
    _one_line_error(web("server", "resize", "confirm", "web", code=1), "Cannot 'confirm_resize'")
    assert _show(web, "web")["status"] == "ACTIVE"
    assert _json(web("migration", "list", "--server", "web", "-f", "json")) == []


def test_a_move_that_fails_is_rolled_back_and_exits_1(web: Run) -> None:
    source = _show(web, "web")["host"]
    failing = {failure_env_var(_other(source)): "fail_migrate_dest"}
    result = web("server", "resize", "web", "m1.large", code=1, **failing)
    assert "web: ACTIVE" in result.stdout  # what every action prints: the server as it is now
    line = _last_error_line(result)
    assert "resize of web failed and was rolled back: Compute operation failed: fake failure" in line
    assert f"on host {_other(source)} fails (failed: compute_finish_resize)" in line
    assert line.endswith("(web is ACTIVE where it was)")
    shown = _show(web, "web")
    assert (shown["status"], shown["host"], shown["flavor"]["name"]) == ("ACTIVE", source, "m1.small")
    assert [m["status"] for m in _json(web("migration", "list", "-f", "json"))] == ["error"]

    live = web("server", "migrate", "web", "--live", code=1, **failing)
    assert "live migrate of web failed and was rolled back" in _last_error_line(live)
    assert "cannot take guests live" in _last_error_line(live)
    assert _show(web, "web")["host"] == source


def test_cold_and_live_migration_and_evacuate(web: Run) -> None:
    source = _show(web, "web")["host"]
    moved = web("server", "migrate", "web", "--host", _other(source))
    assert "web: VERIFY_RESIZE" in moved.stdout and "resize confirm web" in moved.stderr
    web("server", "resize", "confirm", "web")
    assert _show(web, "web")["host"] == _other(source)

    assert "web: ACTIVE" in web("server", "migrate", "web", "--live").stdout
    assert _show(web, "web")["host"] == source
    types = [(m["type"], m["status"]) for m in _json(web("migration", "list", "-f", "json"))]
    assert types == [("live-migration", "completed"), ("migration", "confirmed")]

    _one_line_error(web("server", "evacuate", "web", code=1), f"its host {source} is up")
    web("host", "down", source)
    assert "web: ACTIVE" in web("server", "evacuate", "web").stdout
    assert _show(web, "web")["host"] == _other(source)
    assert _json(web("migration", "list", "--status", "done", "-f", "json"))[0]["type"] == "evacuation"


def test_shelve_offload_and_unshelve(web: Run, tmp_path: Path) -> None:
    # The default (shelved_offload_time 0) offloads at once.
    assert "web: SHELVED_OFFLOADED" in web("server", "shelve", "web").stdout
    assert _show(web, "web").get("host") is None
    assert "web: ACTIVE" in web("server", "unshelve", "web").stdout
    assert _show(web, "web")["host"] in HOSTS

    # Offloading later: --offload does it now, shelve-offload afterwards.
    config = tmp_path / "novakit.toml"
    config.write_text("[compute]\nshelved_offload_time = -1\n")
    later = {"NOVAKIT_CONFIG": str(config)}
    assert "web: SHELVED (" in web("server", "shelve", "web", **later).stdout
    web("server", "unshelve", "web", **later)
    shelved = web("server", "shelve", "web", "--offload", **later).stdout
    assert "web: SHELVED (" in shelved and "web: SHELVED_OFFLOADED" in shelved
    web("server", "unshelve", "web", **later)
    web("server", "shelve", "web", **later)
    assert "web: SHELVED_OFFLOADED" in web("server", "shelve-offload", "web", **later).stdout
    _one_line_error(web("server", "shelve-offload", "web", code=1, **later), "Cannot 'shelve_offload'")


def test_image_create_makes_a_bootable_image(web: Run) -> None:
    made = web("server", "image", "create", "web", "--name", "web-snap", "--property", "purpose=backup")
    assert "web: ACTIVE" in made.stdout and "image web-snap created" in made.stdout
    snap = next(i for i in _json(web("image", "list", "-f", "json")) if i["name"] == "web-snap")
    assert snap["status"] == "active" and len(snap["checksum"]) == 64
    assert snap["properties"]["purpose"] == "backup" and snap["properties"]["image_type"] == "snapshot"
    web("server", "create", "copy", "--flavor", "m1.small", "--image", "web-snap")
    assert _show(web, "copy")["status"] == "ACTIVE"

    _one_line_error(
        web("server", "image", "create", "web", "--name", "x", "--property", "nokey", code=1), "KEY=VALUE"
    )
    _one_line_error(web("server", "image", "create", "web", "--name", "tiny", code=1), "options.name")


def test_rescue_and_unrescue(web: Run) -> None:
    assert "web: RESCUE" in web("server", "rescue", "web", "--image", "tiny").stdout
    assert "rescue image" in web("server", "console", "web").stdout
    _one_line_error(web("server", "resize", "web", "m1.large", code=1), "Cannot 'resize'")
    assert "web: ACTIVE" in web("server", "unrescue", "web").stdout


def test_migration_list_filters_and_is_admin_only(web: Run) -> None:
    web("server", "create", "db", "--flavor", "m1.small", "--image", "tiny")
    web("server", "migrate", "web")
    web("server", "migrate", "db", "--live")
    table = web("migration", "list").stdout
    assert "Source Compute" in table and "live-migration" in table and "finished" in table
    assert {m["status"] for m in _json(web("migration", "list", "-f", "json"))} == {"finished", "completed"}
    [finished] = _json(web("migration", "list", "--status", "finished", "-f", "json"))
    assert finished["server"] == _show(web, "web")["id"]
    host = finished["dest_compute"]
    assert finished in _json(web("migration", "list", "--host", host, "-f", "json"))
    values = web("migration", "list", "--server", "db", "-f", "value", "-c", "Type", "-c", "Status").stdout
    assert values.split() == ["live-migration", "completed"]

    web("server", "create", "mine", "--flavor", "m1.small", "--image", "tiny", **MEMBER)
    _one_line_error(web("migration", "list", code=1, **MEMBER), "Policy does not allow migration:list")
    _one_line_error(
        web("server", "migrate", "mine", code=1, **MEMBER), "Policy does not allow server:migrate"
    )


def test_host_drain_moves_every_server_and_reports_each(web: Run) -> None:
    source = _show(web, "web")["host"]
    # db, stopped, beside web (the other host disabled while it is built).
    web("host", "disable", _other(source))
    web("server", "create", "db", "--flavor", "m1.small", "--image", "tiny")
    web("host", "enable", _other(source))
    web("server", "stop", "db")
    assert _show(web, "db")["host"] == source

    dry = _json(web("host", "drain", source, "--dry-run", "-f", "json"))
    assert {r["result"] for r in dry["servers"]} == {"would move"} and dry["disabled"] is False
    assert _hosts(web)[source]["status"] == "enabled"

    drained = web("host", "drain", source, "--reason", "kernel update")
    assert "drain of" in drained.stdout and "moved" in drained.stdout
    assert f"host {source} is empty, left disabled" in drained.stdout
    listed = _hosts(web)
    assert (listed[source]["status"], listed[source]["disabled_reason"]) == ("disabled", "kernel update")
    for name in ("web", "db"):
        assert _show(web, name)["host"] == _other(source), name
    assert _show(web, "db")["status"] == "SHUTOFF"
    assert _json(web("host", "drain", source, "-f", "json"))["servers"] == []  # nothing left to move

    # Back once its maintenance is over, the other host enabled again at the end.
    web("host", "enable", source)
    report = _json(web("host", "drain", _other(source), "--enable-after", "-f", "json"))
    assert {r["name"]: (r["result"], r["how"], r["to"]) for r in report["servers"]} == {
        "db": ("moved", "cold", source),
        "web": ("moved", "live", source),
    }
    assert report["disabled"] is False
    assert _hosts(web)[_other(source)]["status"] == "enabled"


def test_host_drain_fails_naming_the_servers_left(web: Run) -> None:
    source = _show(web, "web")["host"]
    failing = {failure_env_var(_other(source)): "fail_migrate_dest"}
    result = web("host", "drain", source, "--live", "--enable-after", code=1, **failing)
    assert "failed" in result.stdout
    line = _last_error_line(result)
    assert f"1 server(s) left on {source}, which stays disabled: web (failed: live:" in line
    assert _hosts(web)[source]["status"] == "disabled"
    assert _show(web, "web")["host"] == source
    _one_line_error(web("host", "drain", source, "--live", "--cold", code=1), "give --live or --cold")
