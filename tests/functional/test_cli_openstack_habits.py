"""The command line as ``openstack`` users type it (issue 25 items 14 and 19): output options
checked before a command acts, ``-f shell``, several servers per power command, ``server event
list``, create's columns, and server list's ``--limit -1``, ``--sort-column``, ``--project``,
``--user`` and ``--changes-since``."""

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


def test_server_list_takes_openstacks_paging_sorting_and_scope_options(cloud: Run) -> None:  # noqa: F811
    member = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "bob", "NOVAKIT_ROLES": "member"}
    other = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "carol", "NOVAKIT_ROLES": "member"}
    cloud("server", "create", "a", "--flavor", "m1.small", "--image", "tiny", "--count", "2")
    names = cloud("server", "list", "--limit", "-1", "-f", "value", "-c", "Name").stdout.split()
    assert sorted(names) == ["a-1", "a-2"]
    assert "must be -1 (all) or at least 1" in cloud("server", "list", "--limit", "0", code=2).output
    ordered = cloud(
        "server", "list", "--sort-column", "Name", "--sort-descending", "-f", "value", "-c", "Name"
    )
    assert ordered.stdout.split() == ["a-2", "a-1"]
    _one_line_error(cloud("server", "list", "--sort-column", "bogus", code=1), "'bogus' is not a column")

    cloud("server", "create", "b", "--flavor", "m1.small", "--image", "tiny", **member)
    cloud("server", "create", "c", "--flavor", "m1.small", "--image", "tiny", **other)
    # An admin names a project; a member may name only its own.
    names = cloud("server", "list", "--project", "team-b", "-f", "value", "-c", "Name").stdout.split()
    assert sorted(names) == ["b", "c"]
    names = cloud("server", "list", "--project", "team-b", "--user", "bob", "-f", "value", "-c", "Name")
    assert names.stdout.split() == ["b"]
    refused = cloud("server", "list", "--project", "admin", code=1, **member)
    assert "servers:all_projects" in refused.stderr
    mine = cloud("server", "list", "--user", "carol", "-f", "value", "-c", "Name", **member).stdout.split()
    assert mine == ["c"]

    # Changed since a time: the servers changed at or after it, a deletion being a change.
    shown = json.loads(cloud("server", "show", "c", "-f", "json", **other).stdout)
    since = shown["updated"] or shown["created"]
    cloud("server", "delete", "a-1")
    names = cloud(
        "server", "list", "--all-projects", "--changes-since", since, "-f", "value", "-c", "Name"
    ).stdout.split()
    assert sorted(names) == ["a-1", "c"]
    _one_line_error(cloud("server", "list", "--changes-since", "yesterday", code=1), "changes_since")


def test_a_min_count_of_zero_is_refused_by_its_rule(cloud: Run) -> None:  # noqa: F811
    refused = cloud(
        "server", "create", "x", "--flavor", "m1.small", "--image", "tiny", "--min-count", "0", code=1
    )
    _one_line_error(refused, "min_count: Input should be greater than or equal to 1")
    assert json.loads(cloud("server", "list", "-f", "json").stdout) == []


def test_flavor_show_and_list_as_openstack(cloud: Run, db_url: str) -> None:  # noqa: F811
    from novakit.catalog import flavors
    from novakit.context import RequestContext
    from novakit.db.engine import Database

    db = Database(db_url)
    flavors.create(
        db, RequestContext.admin(), {"name": "secret", "vcpus": 2, "memory_mb": 2048, "is_public": False}
    )
    db.dispose()
    member = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "bob", "NOVAKIT_ROLES": "member"}
    shown = json.loads(
        cloud("flavor", "show", "m1.small", "-f", "json", "-c", "VCPUs", "-c", "Is Public").stdout
    )
    assert shown == {"VCPUs": 1, "Is Public": True}
    names = lambda *a, **e: cloud("flavor", "list", *a, "-f", "value", "-c", "Name", **e).stdout.split()  # noqa: E731
    assert names() == ["m1.small"]  # public ones, as openstack's default
    assert sorted(names("--all")) == ["m1.small", "secret"]
    assert names("--private") == ["secret"]
    assert names(**member) == ["m1.small"]
    assert "flavor:list_private" in cloud("flavor", "list", "--all", code=1, **member).stderr
    _one_line_error(cloud("flavor", "show", "secret", code=1, **member), "secret")
    long = cloud("flavor", "list", "--long").stdout
    assert "Properties" in long and "Description" in long and "Is Public" in long


def test_host_list_has_the_same_headings_in_every_format(cloud: Run) -> None:  # noqa: F811
    """Issue 25 item 19: the table said 'last contact', 'disk (GB)' where csv said 'Last Contact'."""
    csv_heading = cloud("host", "list", "-f", "csv").stdout.splitlines()[0]
    headings = [h.strip('"') for h in csv_heading.split(",")]
    table = cloud("host", "list").stdout
    line = next(ln for ln in table.splitlines() if "Host" in ln and "┃" in ln)
    assert [c.strip() for c in line.strip("┃ ").split("┃")] == headings


def test_server_list_by_ip_pages_over_the_matching_servers(cloud: Run) -> None:  # noqa: F811
    cloud("network", "create", "lan")
    cloud("subnet", "create", "lan-v4", "--network", "lan", "--subnet-range", "10.31.0.0/24")
    for name, ip in (("w1", "10.31.0.11"), ("w2", "10.31.0.12"), ("w3", "10.31.0.21"), ("db", "10.31.0.111")):
        nic = f"net-id=lan,v4-fixed-ip={ip}"
        cloud("server", "create", name, "--flavor", "m1.small", "--image", "tiny", "--nic", nic)

    def names(*args: str) -> list[str]:
        return cloud(
            "server", "list", *args, "--sort-column", "Name", "-f", "value", "-c", "Name"
        ).stdout.split()

    # Matched from the start of the address, as Nova's ip filter: 10.31.0.1 takes .11, .12 and .111.
    assert names("--ip", r"10\.31\.0\.1") == ["db", "w1", "w2"]
    assert names("--ip", r"10\.31\.0\.11$") == ["w1"]
    assert names("--ip", "192.") == []
    assert names("--ip6", "fd") == []
    # Paging runs over the matching servers only: two pages of two, in creation order.
    first = cloud("server", "list", "--ip", r"10\.31\.0\.1", "--limit", "2", "-f", "json").stdout
    page = [s["name"] for s in json.loads(first)]
    assert page == ["w1", "w2"]
    rest = cloud(
        "server", "list", "--ip", r"10\.31\.0\.1", "--marker", json.loads(first)[-1]["id"], "-f", "json"
    )
    assert [s["name"] for s in json.loads(rest.stdout)] == ["db"]
    # Another project's servers do not match a member's filter; a bad expression names the field.
    member = {"NOVAKIT_PROJECT": "team-x", "NOVAKIT_USER": "xavier", "NOVAKIT_ROLES": "member"}
    assert cloud("server", "list", "--ip", "10.", "-f", "value", "-c", "Name", **member).stdout == ""
    _one_line_error(cloud("server", "list", "--ip", "10.(", code=1), "ip")
