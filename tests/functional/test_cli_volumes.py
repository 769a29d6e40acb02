"""``novakit volume`` and ``novakit server add|remove volume`` as a user types them."""

from __future__ import annotations

import json

from tests.functional.test_cli import Run, cloud, env, nk  # noqa: F401 (fixtures)


def test_a_volume_through_its_whole_life_on_the_command_line(cloud: Run) -> None:  # noqa: F811
    cloud("server", "create", "web", "--flavor", "m1.small", "--image", "tiny")
    host = json.loads(cloud("server", "show", "web", "--output", "json").stdout)["host"]
    made = json.loads(
        cloud("volume", "create", "data", "--size", "2", "--host", host, "--output", "json").stdout
    )
    assert made["status"] == "available" and made["size"] == 2 and made["host"] == host
    listed = json.loads(cloud("volume", "list", "--output", "json").stdout)
    assert [(v["name"], v["status"]) for v in listed] == [("data", "available")]
    assert "attached to server web as /dev/vdc" in cloud("server", "add", "volume", "web", "data").stdout
    shown = json.loads(cloud("volume", "show", "data", "--output", "json").stdout)
    assert shown["status"] == "in-use" and shown["attachments"][0]["device"] == "/dev/vdc"
    refused = cloud("volume", "delete", "data", code=1)
    assert "detach it before deleting it" in refused.stderr and refused.stdout == ""
    assert "detached from server web" in cloud("server", "remove", "volume", "web", "data").stdout
    bad = cloud("volume", "create", "zero", "--size", "0", code=1)
    assert "Invalid size: must be a whole number of GiB, at least 1" in bad.stderr
    assert "volume data deleted" in cloud("volume", "delete", "data").stdout
    assert json.loads(cloud("volume", "list", "--output", "json").stdout) == []


def test_boot_from_a_new_volume_keep_it_and_boot_again_from_it(cloud: Run) -> None:  # noqa: F811
    cloud(
        "server", "create", "bfv", "--flavor", "m1.small", "--image", "tiny",
        "--boot-from-volume", "3", "--no-delete-on-termination",
    )  # fmt: skip
    host = json.loads(cloud("server", "show", "bfv", "--output", "json").stdout)["host"]
    (root,) = json.loads(cloud("volume", "list", "--output", "json").stdout)
    assert root["status"] == "in-use" and root["size"] == 3 and root["host"] == host
    cloud("server", "delete", "bfv")
    assert json.loads(cloud("volume", "show", root["id"], "--output", "json").stdout)["status"] == "available"
    cloud("server", "create", "again", "--flavor", "m1.small", "--volume", root["name"])
    assert json.loads(cloud("server", "show", "again", "--output", "json").stdout)["host"] == host
    bad = cloud(
        "server", "create", "x", "--flavor", "m1.small", "--image", "tiny", "--boot-from-volume", "0", code=1
    )
    assert "boot_from_volume" in bad.stderr
