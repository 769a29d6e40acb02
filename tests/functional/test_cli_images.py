"""``novakit image`` as a user types it: bad registrations refused whole, visibility, members.

Also the name rules every command shares: control characters in a volume's name, and host
names (RFC 1123) for ``host add``, refused before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.functional.test_cli import Run, cloud, env, nk  # noqa: F401 (fixtures)

ALICE = {"NOVAKIT_PROJECT": "team-a", "NOVAKIT_USER": "alice", "NOVAKIT_ROLES": "member"}
BOB = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "bob", "NOVAKIT_ROLES": "member"}
STORE = "/var/lib/novakit/images"


def _json(result: Any) -> Any:
    return json.loads(result.stdout)


def _names(run: Run, *args: str, **who: str) -> set[str]:
    return {i["name"] for i in _json(run("image", "list", "-o", "json", *args, **who))}


BAD_IMAGES: list[tuple[list[str], str, str]] = [
    (["--location", "http://example.com/x.qcow2"], "location", "scheme 'http'"),
    (["--location", "images/x.qcow2"], "location", "absolute path"),
    (["--location", f"{STORE}/x\n.qcow2"], "location", "control"),
    (["--location", "file://otherhost/var/lib/x.qcow2"], "location", "not on 'otherhost'"),
    (["--location", "file://"], "location", "file:// URL"),
    ([], "location", "required"),
    (["--location", ""], "location", "required"),
    (["--location", f"{STORE}/x.qcow2", "--property", "novalue"], "--property", "KEY=VALUE"),
    (["--location", f"{STORE}/x.qcow2", "--property", "=v"], "--property", "KEY=VALUE"),
    (["--location", f"{STORE}/x.qcow2", "--property", "a\tb=v"], "properties", "key"),
    (["--location", f"{STORE}/x.qcow2", "--public", "--private"], "visibility", "give one of"),
    (["--location", f"{STORE}/x.qcow2", "--visibility", "everyone"], "visibility", "public"),
]


@pytest.mark.parametrize("args,field,rule", BAD_IMAGES, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_IMAGES)])
def test_a_bad_image_registration_is_refused_naming_field_and_rule_and_writes_nothing(
    cloud: Run,  # noqa: F811
    args: list[str],
    field: str,
    rule: str,
) -> None:
    before = cloud("image", "list", "-o", "json").stdout
    refused = cloud("image", "create", "bad", *args, code=1)
    assert field in refused.stderr and rule in refused.stderr, refused.stderr
    assert "Traceback" not in refused.output
    assert cloud("image", "list", "-o", "json").stdout == before


def test_good_locations_are_taken_as_given(cloud: Run) -> None:  # noqa: F811
    cloud("image", "create", "a", "--location", f"{STORE}/a.qcow2")
    cloud("image", "create", "b", "--location", f"file://{STORE}/b.qcow2", "--property", "os_distro=")
    cloud("image", "create", "c", "--location", f"file://localhost{STORE}/c.qcow2")
    shown = _json(cloud("image", "show", "b", "-o", "json"))
    assert (shown["location"], shown["properties"], shown["visibility"]) == (
        f"file://{STORE}/b.qcow2",
        {"os_distro": ""},
        "public",
    )


def test_a_members_snapshot_is_its_projects_only_on_the_command_line(cloud: Run) -> None:  # noqa: F811
    cloud("server", "create", "web", "--flavor", "m1.small", "--image", "tiny", **ALICE)
    made = cloud("server", "image", "create", "web", "--name", "web-snap", **ALICE)
    assert "image web-snap created" in made.stdout
    assert "/" not in made.stdout.split("created", 1)[1]  # no on-host path
    mine = _json(cloud("image", "list", "-o", "json", **ALICE))
    assert {i["name"] for i in mine} == {"tiny", "web-snap"}
    for row in mine:
        assert "location" not in row and "image_host" not in row["properties"], row
    assert "compute-" not in cloud("image", "list", **ALICE).stdout
    assert "compute-" not in cloud("image", "show", "web-snap", **ALICE).stdout
    assert _names(cloud, **BOB) == {"tiny"}
    for ref in ("web-snap", _json(cloud("image", "show", "web-snap", "-o", "json", **ALICE))["id"]):
        refused = cloud("image", "show", ref, code=1, **BOB)
        assert f"Image {ref} could not be found." in refused.stderr
        refused = cloud("server", "create", "steal", "--flavor", "m1.small", "--image", ref, code=1, **BOB)
        assert f"Image {ref} could not be found." in refused.stderr
    assert _json(cloud("server", "list", "-o", "json", **BOB)) == []
    # The operator sees where it is.
    shown = _json(cloud("image", "show", "web-snap", "-o", "json"))
    assert shown["location"] and shown["properties"]["image_host"].startswith("compute-")
    assert (shown["owner"], shown["visibility"]) == ("team-a", "private")


def test_sharing_an_image_with_another_project_as_openstack_names_it(cloud: Run) -> None:  # noqa: F811
    cloud("server", "create", "web", "--flavor", "m1.small", "--image", "tiny", **ALICE)
    cloud("server", "image", "create", "web", "--name", "web-snap", **ALICE)
    refused = cloud("image", "set", "web-snap", "--public", code=1, **ALICE)
    assert "image:publicize" in refused.stderr
    assert "is shared" in cloud("image", "set", "web-snap", "--shared", **ALICE).stdout
    assert "pending" in cloud("image", "add", "project", "web-snap", "team-b", **ALICE).stdout
    assert _names(cloud, **BOB) == {"tiny"}
    image_id = _json(cloud("image", "show", "web-snap", "-o", "json", **ALICE))["id"]
    assert "accepted" in cloud("image", "set", image_id, "--accept", **BOB).stdout
    assert _names(cloud, **BOB) == {"tiny", "web-snap"}
    members = _json(cloud("image", "member", "list", "web-snap", "-o", "json", **ALICE))
    assert [(m["member_id"], m["status"]) for m in members] == [("team-b", "accepted")]
    cloud("server", "create", "copy", "--flavor", "m1.small", "--image", image_id, **BOB)
    cloud("image", "remove", "project", "web-snap", "team-b", **ALICE)
    assert _names(cloud, **BOB) == {"tiny"}
    # Community: found by name, listed only when asked.
    cloud("image", "set", "web-snap", "--visibility", "community", **ALICE)
    assert _names(cloud, **BOB) == {"tiny"}
    assert _names(cloud, "--community", **BOB) == {"web-snap"}
    assert "community" in cloud("image", "show", "web-snap", **BOB).stdout
    # An admin's image is public unless it says otherwise.
    cloud("image", "create", "hidden", "--location", f"{STORE}/h.qcow2", "--private")
    assert "hidden" not in _names(cloud, **BOB)


@pytest.mark.parametrize("name", ["v\nx", "v\x00m5", "v\tx", "v\u2028x"])
def test_a_volume_name_with_a_control_character_is_refused(cloud: Run, name: str) -> None:  # noqa: F811
    refused = cloud("volume", "create", name, "--size", "1", code=1)
    assert "Invalid name" in refused.stderr and "control" in refused.stderr, refused.stderr
    assert _json(cloud("volume", "list", "--output", "json")) == []


@pytest.mark.parametrize("host", ["../x", "a/b", "-x", "x-", "a..b", "under_score", "x" * 64, "spa ce"])
def test_host_add_refuses_a_bad_host_name_and_leaves_no_fake_host_behind(
    cloud: Run,  # noqa: F811
    env: dict[str, str | None],  # noqa: F811
    host: str,
) -> None:
    state = Path(str(env["NOVAKIT_STATE_DIR"]))
    files_before = sorted(p.relative_to(state) for p in state.rglob("*"))
    refused = cloud("host", "add", "--", host, code=1)
    assert "Invalid host" in refused.stderr and "RFC 1123" in refused.stderr, refused.stderr
    assert sorted(p.relative_to(state) for p in state.rglob("*")) == files_before
    assert host not in {h["host"] for h in _json(cloud("host", "list", "-o", "json"))}


def test_a_refused_host_add_leaves_no_fake_host_behind(cloud: Run, env: dict[str, str | None]) -> None:  # noqa: F811
    state = Path(str(env["NOVAKIT_STATE_DIR"]))
    files_before = sorted(p.relative_to(state) for p in state.rglob("*"))
    refused = cloud("host", "add", "compute-9", code=1, **BOB)
    assert "host:register" in refused.stderr
    assert sorted(p.relative_to(state) for p in state.rglob("*")) == files_before
    assert "compute-9.example.com" in cloud("host", "add", "compute-9.example.com").stdout


@pytest.mark.parametrize("host", ["../x", "x_y", "", "a." * 127 + "a"])
def test_the_library_refuses_a_bad_host_name_before_writing_anything(
    db: Any, tmp_path: Path, host: str
) -> None:
    """Every face registers through ``register_host`` (the compute_node module, heartbeats)."""
    from novakit import exceptions
    from novakit.fleet import hosts
    from novakit.host.messages import HostResources
    from tests.functional.cloud import make_cloud

    fleet = make_cloud(db, tmp_path)
    before = fleet.snapshot()
    resources = HostResources(
        hypervisor_hostname="h", hypervisor_type="fake", vcpus=1, memory_mb=512, local_gb=1
    )
    with pytest.raises(exceptions.ValidationError, match="RFC 1123") as refused:
        hosts.register_host(fleet.db, fleet.conf, host, resources, ctx=fleet.admin)
    assert refused.value.field == "host"
    assert fleet.snapshot() == before
