"""Volumes through ``novakit serve`` (issue 29, part 6): the ``novakit volume`` and ``server
add|remove volume`` commands with ``--os-cloud``, and the ``volume`` and ``volume_attachment``
modules with ``cloud:``, with no database URL in their environment.

What they did is read back from the service's database. A volume's host and pool are an admin's
to see (Cinder's ``os-vol-host-attr:host``): the member (``dev``) is shown none, through every face.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from novakit import exceptions
from novakit.compute.api import API
from novakit.volume import volumes
from tests.functional.service.own_tools import BIN, ROOT, Tools, cloud_for_tools, ok  # noqa: F401 (the fixture)

pytestmark = pytest.mark.xdist_group("service_own_tools_volumes")


def _volume(tools: Tools, ref: str) -> dict[str, Any] | None:
    """The volume as the service's database has it, seen by an admin (None: none, or deleted)."""
    db = tools.served.database()
    try:
        return volumes.show(API(db).conductor, tools.admin, ref)
    except exceptions.VolumeNotFound:
        return None
    finally:
        db.dispose()


def _server_host(tools: Tools, name: str) -> str:
    server = tools.server(name)
    assert server is not None and server["status"] == "ACTIVE", server
    return str(server["host"])


def test_a_volume_s_life_on_the_command_line_through_the_cloud(tools: Tools) -> None:
    """create, list, show, attach, a delete refused while attached, detach, delete: each a call
    the service runs, its refusals word for word."""

    def nk(*args: str) -> subprocess.CompletedProcess[str]:
        return tools.novakit("--os-cloud", "nk", *args)

    ok(nk("server", "create", "vol-web", "--flavor", "m1.small", "--image", "tiny", "--nic", "net-id=lan"))
    host = _server_host(tools, "vol-web")
    made = json.loads(ok(nk("volume", "create", "vol-data", "--size", "2", "--host", host, "-f", "json")))
    assert (made["name"], made["status"], made["size"], made["host"]) == ("vol-data", "available", 2, host)
    assert (_volume(tools, "vol-data") or {}).get("status") == "available"

    listed = json.loads(ok(nk("volume", "list", "-f", "json")))
    assert [(v["name"], v["status"]) for v in listed] == [("vol-data", "available")]
    assert json.loads(ok(nk("volume", "show", "vol-data", "-f", "json")))["id"] == made["id"]

    said = ok(nk("server", "add", "volume", "vol-web", "vol-data"))
    attached = _volume(tools, "vol-data") or {}
    assert attached.get("status") == "in-use", attached
    [attachment] = attached["attachments"]
    assert f"volume vol-data attached to server vol-web as {attachment['device']}" in said
    assert attachment["server_id"] == (tools.server("vol-web") or {}).get("id")

    refused = nk("volume", "delete", "vol-data")
    assert refused.returncode == 1 and "detach it before deleting it" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert (_volume(tools, "vol-data") or {}).get("status") == "in-use"
    again = nk("server", "add", "volume", "vol-web", "vol-data")
    assert again.returncode == 1 and "only an available volume can be attached" in again.stderr, again.stderr

    assert "volume vol-data detached from server vol-web" in ok(
        nk("server", "remove", "volume", "vol-web", "vol-data")
    )
    detached = _volume(tools, "vol-data") or {}
    assert (detached.get("status"), detached.get("attachments")) == ("available", [])

    assert "volume vol-data deleted" in ok(nk("volume", "delete", "vol-data"))
    assert _volume(tools, "vol-data") is None
    missing = nk("volume", "show", "vol-data")
    assert missing.returncode == 1 and "vol-data" in missing.stderr
    ok(nk("server", "delete", "vol-web"))
    assert tools.embedded_default_untouched()


def test_a_member_is_shown_no_volume_host(tools: Tools) -> None:
    """The member's volume, as it creates, lists and shows it: no host, no pool; the admin of the
    same project sees both. Every project's volumes are refused to it by the service's policy."""

    def as_member(*args: str) -> subprocess.CompletedProcess[str]:
        return tools.novakit("--os-cloud", "dev", *args)

    made = json.loads(ok(as_member("volume", "create", "dev-data", "--size", "1", "-f", "json")))
    assert made["status"] == "available" and made["host"] is None and made["pool"] is None, made
    shown = json.loads(ok(as_member("volume", "show", "dev-data", "-f", "json")))
    assert shown["host"] is None and shown["pool"] is None
    listed = json.loads(ok(as_member("volume", "list", "-f", "json")))
    assert [v["name"] for v in listed] == ["dev-data"] and all(
        v["host"] is None and v["pool"] is None for v in listed
    )
    seen = _volume(tools, "dev-data") or {}
    assert seen.get("host"), seen  # it has one: the member is only not shown it
    by_admin = json.loads(ok(tools.novakit("--os-cloud", "nk", "volume", "show", "dev-data", "-f", "json")))
    assert by_admin["host"] == seen["host"]

    every = as_member("volume", "list", "--all-projects")
    assert every.returncode == 1 and "servers:all_projects" in every.stderr, every.stderr
    assert "volume dev-data deleted" in ok(as_member("volume", "delete", "dev-data"))
    assert _volume(tools, "dev-data") is None
    assert tools.embedded_default_untouched()


def test_a_volume_call_takes_no_pool_from_the_client(tools: Tools) -> None:
    """/novakit/v1/call: a create that names the service's pool (``later``) is refused naming it,
    with no volume written; the member's show, as served, names no host."""
    token = tools.served.issue("dev", "dev-pw-1", "admin")
    with tools.served.client() as http:
        refused = http.post(
            "/novakit/v1/call",
            json={"name": "novakit.volume.volumes.create", "args": ["raw-data", 1], "kwargs": {"later": "x"}},
            headers={"X-Auth-Token": token},
        )
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["type"] == "ValidationError" and "later" in error["message"], error
        assert _volume(tools, "raw-data") is None
        made = http.post(
            "/novakit/v1/call",
            json={"name": "novakit.volume.volumes.create", "args": ["raw-data", 1]},
            headers={"X-Auth-Token": token},
        )
        assert made.status_code == 200, made.text
        assert made.json()["result"]["status"] == "available" and made.json()["result"]["host"] is None
        assert (_volume(tools, "raw-data") or {}).get("host")
        gone = http.post(
            "/novakit/v1/call",
            json={"name": "novakit.volume.volumes.delete", "args": ["raw-data"]},
            headers={"X-Auth-Token": token},
        )
        assert gone.status_code == 200 and gone.json()["result"]["status"] == "deleted", gone.text
    assert _volume(tools, "raw-data") is None


def _play(tools: Tools, name: str, tasks: list[dict[str, Any]], *, check: bool = False) -> dict[str, Any]:
    """Run ``tasks`` (each registering its result under its ``register``) with ansible-playbook;
    returns the registered results."""
    out = tools.directory / f"{name}.json"
    registered = [t["register"] for t in tasks]
    content = "{{ {" + ", ".join(f"'{r}': {r}" for r in registered) + "} | to_json }}"
    play = tools.directory / f"{name}.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        *tasks,
                        {"ansible.builtin.copy": {"dest": str(out), "content": content}, "check_mode": False},
                    ],
                }
            ]
        )
    )
    done = tools.play(play, *(["--check"] if check else []))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert not [s for s in tools.served.secrets if s in done.stdout]
    seen: dict[str, Any] = json.loads(out.read_text())
    return seen


@pytest.mark.slow  # ansible-playbook runs
def test_the_volume_modules_take_a_cloud(tools: Tools, backend: str) -> None:
    """The member's volume and its attachment with ``cloud:``: check mode changes nothing, a
    second run changes nothing (its host, which it is not shown, is not compared), another device
    for an attached volume is refused naming it, then detached and deleted."""
    if backend != "sqlite":
        pytest.skip("the modules drive the same service and calls on both back ends: SQLite only")
    ok(tools.novakit("--os-cloud", "dev", "server", "create", "mod-vm", "--flavor", "m1.small",
                     "--image", "tiny", "--nic", "net-id=lan"))  # fmt: skip
    host = _server_host(tools, "mod-vm")
    volume = {"cloud": "dev", "name": "mod-data", "size": 1, "host": host}
    attachment = {"cloud": "dev", "server": "mod-vm", "volume": "mod-data"}

    def task(module: str, register: str, **args: Any) -> dict[str, Any]:
        return {"name": register, f"novakit.cloud.{module}": args, "register": register}

    # Check mode: the volume would be made; nothing is.
    checked = _play(tools, "vol-check", [task("volume", "made", **volume)], check=True)
    assert checked["made"]["changed"] and checked["made"]["volume"]["status"] == "available"
    assert _volume(tools, "mod-data") is None

    present = [task("volume", "made", **volume), task("volume_attachment", "attached", **attachment)]
    first = _play(tools, "vol-present", present)
    assert first["made"]["changed"] and first["attached"]["changed"]
    assert first["made"]["volume"]["host"] is None  # the member is not shown it
    seen = _volume(tools, "mod-data") or {}
    assert seen.get("status") == "in-use" and seen.get("host") == host, seen
    [held] = seen["attachments"]
    assert held["server_id"] == (tools.server("mod-vm") or {}).get("id")

    second = _play(tools, "vol-again", present)
    assert not second["made"]["changed"] and not second["attached"]["changed"], second
    assert second["attached"]["volume"]["status"] == "in-use"

    other_device = "vdz" if held["device"] != "/dev/vdz" else "vdy"
    moved = {**task("volume_attachment", "moved", **attachment, device=other_device), "ignore_errors": True}
    refused = _play(tools, "vol-moved", [moved])["moved"]
    assert refused["failed"] and "device" in refused["msg"] and held["device"] in refused["msg"], refused
    assert (_volume(tools, "mod-data") or {}).get("attachments") == seen["attachments"]

    absent = [
        task("volume_attachment", "detached", **attachment, state="absent"),
        task("volume", "deleted", **volume, state="absent"),
    ]
    dry = _play(tools, "vol-detach-check", absent[:1], check=True)
    assert dry["detached"]["changed"]
    assert (_volume(tools, "mod-data") or {}).get("status") == "in-use"

    gone = _play(tools, "vol-absent", absent)
    assert gone["detached"]["changed"] and gone["deleted"]["changed"]
    assert _volume(tools, "mod-data") is None
    assert not _play(tools, "vol-absent-again", absent[1:])["deleted"]["changed"]
    ok(tools.novakit("--os-cloud", "dev", "server", "delete", "mod-vm"))
    assert tools.embedded_default_untouched()
