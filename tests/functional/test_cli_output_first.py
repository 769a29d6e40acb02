"""Output options are checked before a command acts (issue 25 item 14), and ``-f shell``
(issue 25 item 19) prints one record for ``eval``, as openstack's shell format does."""

from __future__ import annotations

import json
import subprocess

from tests.functional.test_cli import Run, _one_line_error, cloud, env, nk  # noqa: F401


def test_a_misspelt_column_refuses_a_create_before_anything_is_made(cloud: Run) -> None:  # noqa: F811
    refused = cloud(
        "server", "create", "web", "--flavor", "m1.small", "--image", "tiny", "-c", "bogus", code=1
    )
    _one_line_error(refused, "'bogus' is not a column here")
    assert json.loads(cloud("server", "list", "-f", "json").stdout) == []
    assert json.loads(cloud("server", "list", "--deleted", "-f", "json").stdout) == []

    cloud("network", "create", "lan")
    refused = cloud("network", "create", "lan2", "-c", "bogus", code=1)
    _one_line_error(refused, "'bogus' is not a column here")
    cloud("subnet", "create", "lan-v4", "--network", "lan", "--subnet-range", "10.20.0.0/24")
    refused = cloud("port", "create", "p1", "--network", "lan", "-c", "nope", code=1)
    _one_line_error(refused, "'nope' is not a column here")
    names = {n["name"] for n in json.loads(cloud("network", "list", "-f", "json").stdout)}
    assert "lan2" not in names and "lan" in names
    assert json.loads(cloud("port", "list", "-f", "json").stdout) == []
    # The same options, spelt right, act.
    made = cloud(
        "server", "create", "web", "--flavor", "m1.small", "--image", "tiny", "-c", "Name", "-f", "value"
    )
    assert made.stdout.strip() == "web"


def test_shell_format_prints_one_record_to_eval(cloud: Run) -> None:  # noqa: F811
    cloud("server", "create", "web", "--flavor", "m1.small", "--image", "tiny")
    shown = cloud("server", "show", "web", "-f", "shell", "-c", "Name", "-c", "Status").stdout
    assert shown.splitlines() == ['name="web"', 'status="ACTIVE"']
    out = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf "%s/%s" "$name" "$status"', "-", shown],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == "web/ACTIVE"
    refused = cloud("server", "list", "-f", "shell", code=1)
    _one_line_error(refused, "shell prints one record")


def test_power_commands_take_several_servers_and_wait_as_openstack_does(cloud: Run) -> None:  # noqa: F811
    cloud("server", "create", "web", "--flavor", "m1.small", "--image", "tiny", "--count", "3")
    cloud("server", "stop", "web-1", "web-2", "--wait")
    status = {s["name"]: s["status"] for s in json.loads(cloud("server", "list", "-f", "json").stdout)}
    assert status == {"web-1": "SHUTOFF", "web-2": "SHUTOFF", "web-3": "ACTIVE"}
    # One refused (web-3 is not stopped; nope does not exist) is said, the others still start.
    refused = cloud("server", "start", "web-1", "nope", "web-3", "web-2", code=1)
    assert "nope" in refused.stderr and "web-3" in refused.stderr
    assert "2 of 4 servers failed to start" in refused.stderr
    status = {s["name"]: s["status"] for s in json.loads(cloud("server", "list", "-f", "json").stdout)}
    assert set(status.values()) == {"ACTIVE"}
    rows = cloud("server", "event", "list", "web-1", "-f", "value", "-c", "Action").stdout.split()
    assert [a for a in rows if a != "-"] == ["create", "stop", "start"]  # "-": the rows of events
    cloud("server", "delete", "web-1", "web-2", "web-3", "--wait")
    assert json.loads(cloud("server", "list", "-f", "json").stdout) == []


def test_server_create_shows_the_listings_columns_with_names(cloud: Run) -> None:  # noqa: F811
    """Issue 25 item 19: a member's create table showed the image's uuid, an admin's had no
    Image or Flavor."""
    member = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "bob", "NOVAKIT_ROLES": "member"}
    made = cloud(
        "server", "create", "web", "--flavor", "m1.small", "--image", "tiny", "-f", "json", "-c", "Image"
    )
    assert json.loads(made.stdout) == [{"Image": "tiny"}]
    made = cloud("server", "create", "app", "--flavor", "m1.small", "--image", "tiny", **member)
    heading = next(ln for ln in made.stdout.splitlines() if "ID" in ln and "┃" in ln)
    assert [c.strip() for c in heading.strip("┃ ").split("┃")] == [
        "ID",
        "Name",
        "Status",
        "Networks",
        "Image",
        "Flavor",
    ]
    row = next(ln for ln in made.stdout.splitlines() if " app " in ln)
    assert "tiny" in row and "m1.small" in row
    made = cloud("server", "create", "db", "--flavor", "m1.small", "--image", "tiny", "-f", "csv")
    assert made.stdout.splitlines()[0] == '"ID","Name","Status","Host","Networks","Image","Flavor"'
    assert ',"tiny","m1.small"' in made.stdout.splitlines()[1]
