"""Ports, flavors and images through ``novakit serve`` (issue 29, part 6): ``novakit port``,
``novakit flavor`` and ``novakit image`` with ``--os-cloud``, and the ``port``, ``flavor`` and
``image`` modules with ``cloud:``, with no database URL in their environment.

The cloud has an admin (``nk``) and a member (``dev``) of the same project; what another project
has is put in the service's database directly. What the tools did is read back from there.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from novakit.catalog import flavors, images
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.network import ports
from tests.functional.service.own_tools import BIN, ROOT, Tools, cloud_for_tools, ok  # noqa: F401 (the fixture)

pytestmark = pytest.mark.xdist_group("service_own_tools_catalog")

#: another project, whose images the tools' callers do not own
OTHER = RequestContext("other-project", "olga", ["admin"])


@pytest.fixture(name="db")
def served_db(tools: Tools) -> Iterator[Database]:
    """The service's database, to read back what the tools did."""
    db = tools.served.database()
    try:
        yield db
    finally:
        db.dispose()


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(done))


def test_flavors_through_the_cloud_the_admin_s_to_make(tools: Tools, db: Database) -> None:
    """The admin creates a flavor; the member's create is refused by the policy, word for word,
    and so is its listing of private flavors; it lists the public ones."""
    made = ok(tools.novakit("--os-cloud", "nk", "flavor", "create", "cat-f1", "--vcpus", "1", "--ram", "512"))
    assert "flavor cat-f1 created" in made
    assert flavors.show(db, tools.admin, "cat-f1")["ram"] == 512

    refused = tools.novakit("--os-cloud", "dev", "flavor", "create", "cat-f2", "--vcpus", "1", "--ram", "256")
    assert refused.returncode == 1
    assert "Policy does not allow flavor:create to be performed." in refused.stderr, refused.stderr
    assert "cat-f2" not in [f["name"] for f in flavors.list_flavors(db)]

    listed = _json(tools.novakit("--os-cloud", "dev", "flavor", "list", "-f", "json"))
    assert {"m1.small", "cat-f1"} <= {f["name"] for f in listed}
    private = tools.novakit("--os-cloud", "dev", "flavor", "list", "--all")
    assert private.returncode == 1 and "flavor:list_private" in private.stderr
    shown = _json(tools.novakit("--os-cloud", "dev", "flavor", "show", "cat-f1", "-f", "json"))
    assert (shown["name"], shown["vcpus"]) == ("cat-f1", 1)

    denied = tools.novakit("--os-cloud", "dev", "flavor", "delete", "cat-f1")
    assert denied.returncode == 1 and "flavor:delete" in denied.stderr
    ok(tools.novakit("--os-cloud", "nk", "flavor", "delete", "cat-f1"))
    assert "cat-f1" not in [f["name"] for f in flavors.list_flavors(db)]
    assert tools.embedded_default_untouched()


def test_images_through_the_cloud_as_each_caller_may_see_them(tools: Tools, db: Database) -> None:
    """The admin registers, shares and deletes; the member lists what it may see (no other
    project's private image, no location), and its publicizing and registering are refused."""
    images.create(
        db, OTHER, {"name": "cat-secret", "location": "/srv/images/secret.qcow2", "visibility": "private"}
    )
    location = "/var/lib/novakit/images/cat.qcow2"
    made = ok(
        tools.novakit("--os-cloud", "nk", "image", "create", "cat-img", "--location", location, "--shared")
    )
    assert "image cat-img created" in made and "shared" in made
    assert images.show(db, tools.admin, "cat-img")["location"] == location

    seen = {i["name"]: i for i in _json(tools.novakit("--os-cloud", "dev", "image", "list", "-f", "json"))}
    assert {"tiny", "cat-img"} <= set(seen) and "cat-secret" not in seen
    assert not seen["cat-img"].get("location")  # where the file is is the operator's
    everything = _json(tools.novakit("--os-cloud", "nk", "image", "list", "-f", "json"))
    assert "cat-secret" in [i["name"] for i in everything]
    missing = tools.novakit("--os-cloud", "dev", "image", "show", "cat-secret")
    assert missing.returncode == 1 and "Image cat-secret could not be found." in missing.stderr

    public = tools.novakit("--os-cloud", "dev", "image", "set", "cat-img", "--public")
    assert public.returncode == 1 and "image:publicize" in public.stderr
    registered = tools.novakit("--os-cloud", "dev", "image", "create", "dev-img", "--location", location)
    assert registered.returncode == 1 and "image:create" in registered.stderr
    assert images.show(db, tools.admin, "cat-img")["visibility"] == "shared"

    shared = ok(tools.novakit("--os-cloud", "nk", "image", "add", "project", "cat-img", OTHER.project_id))
    assert f"project {OTHER.project_id} pending" in shared
    members = _json(tools.novakit("--os-cloud", "nk", "image", "member", "list", "cat-img", "-f", "json"))
    assert [(m["member_id"], m["status"]) for m in members] == [(OTHER.project_id, "pending")]
    ok(tools.novakit("--os-cloud", "nk", "image", "remove", "project", "cat-img", OTHER.project_id))
    assert _json(tools.novakit("--os-cloud", "nk", "image", "member", "list", "cat-img", "-f", "json")) == []
    assert "is private" in ok(tools.novakit("--os-cloud", "nk", "image", "set", "cat-img", "--private"))

    ok(tools.novakit("--os-cloud", "nk", "image", "delete", "cat-img"))
    assert "cat-img" not in [i["name"] for i in images.list_images(db)]
    assert tools.embedded_default_untouched()


def test_ports_through_the_cloud_the_binding_host_the_admin_s_to_see(tools: Tools, db: Database) -> None:
    """The member's port, made, handed to its server, shown and listed without the host it is
    bound to, which the admin sees; a port in use is not deleted; once free it is."""

    def dev(*args: str) -> subprocess.CompletedProcess[str]:
        return tools.novakit("--os-cloud", "dev", *args)

    made = _json(
        dev(
            "port", "create", "cat-p1", "--network", "lan", "--fixed-ip", "ip-address=10.0.0.77", "-f", "json"
        )
    )
    assert made["fixed_ips"][0]["ip_address"] == "10.0.0.77" and made["status"] == "DOWN"
    ok(
        dev(
            "server", "create", "cat-s1", "--flavor", "m1.small", "--image", "tiny", "--nic", "port-id=cat-p1"
        )
    )
    server = tools.server("cat-s1")
    assert server is not None and server["status"] == "ACTIVE" and server["host"]

    shown = _json(dev("port", "show", "cat-p1", "-f", "json"))
    assert shown["device_id"] == server["id"] and "binding_host" not in shown, shown
    assert ok(dev("port", "show", "cat-p1", "-c", "Host", "-f", "value")).strip() == "-"  # no value
    assert server["host"] not in ok(dev("port", "show", "cat-p1"))
    listed = _json(dev("port", "list", "-f", "json"))
    assert [p["id"] for p in listed if p["name"] == "cat-p1"] == [made["id"]]
    assert not [p for p in listed if "binding_host" in p]
    by_admin = _json(tools.novakit("--os-cloud", "nk", "port", "show", "cat-p1", "-f", "json"))
    assert by_admin["binding_host"] == server["host"]

    in_use = dev("port", "delete", "cat-p1")
    assert in_use.returncode == 1 and server["id"] in in_use.stderr
    ok(dev("server", "delete", "cat-s1"))
    kept = ports.show(db, tools.admin, "cat-p1")
    assert (kept["device_id"], kept["binding_host"], kept["status"]) == (None, None, "DOWN")
    assert "port cat-p1 deleted" in ok(dev("port", "delete", "cat-p1"))
    assert "cat-p1" not in [p["name"] for p in ports.list_ports(db, tools.admin)]
    assert tools.embedded_default_untouched()


def _task(name: str, module: str, args: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": name, f"novakit.cloud.{module}": args, "register": name.replace(" ", "_"), **more}


@pytest.mark.slow  # ansible-playbook runs
def test_the_flavor_image_and_port_modules_take_a_cloud(tools: Tools, backend: str, db: Database) -> None:
    """Each module: create, a second run unchanged, check mode that writes nothing, delete; the
    member's flavor refused by the policy, another project's public image refused by name (only
    its owner manages it), another project's private one not in the way; no binding host for
    the member."""
    if backend != "sqlite":
        pytest.skip("the modules drive the same service and calls on both back ends: SQLite only")
    images.create(db, OTHER, {"name": "cat-public", "visibility": "public"})
    images.create(db, OTHER, {"name": "cat-hidden", "visibility": "private"})
    flavor = {"cloud": "nk", "name": "mod-f1", "vcpus": 1, "ram": 256, "disk": 1}
    image = {
        "cloud": "nk",
        "name": "mod-img",
        "location": "/var/lib/novakit/images/mod.qcow2",
        "visibility": "private",
    }
    port = {"cloud": "dev", "name": "mod-p1", "network": "lan"}
    tasks = [
        _task("flavor checked", "flavor", flavor, check_mode=True),
        _task("flavor", "flavor", flavor),
        _task("flavor again", "flavor", flavor),
        _task(
            "flavor by a member", "flavor", {**flavor, "cloud": "dev", "name": "dev-f1"}, ignore_errors=True
        ),
        _task("image checked", "image", image, check_mode=True),
        _task("image", "image", image),
        _task("image again", "image", image),
        _task("image shared checked", "image", {**image, "visibility": "shared"}, check_mode=True),
        _task("image after the check", "image", image),
        _task(
            "image not its own",
            "image",
            {"cloud": "dev", "name": "cat-public", "state": "absent"},
            ignore_errors=True,
        ),
        _task("image not seen", "image", {"cloud": "dev", "name": "cat-hidden", "state": "absent"}),
        _task("port checked", "port", port, check_mode=True),
        _task("port", "port", port),
        _task("port again", "port", port),
        _task("port gone checked", "port", {**port, "state": "absent"}, check_mode=True),
        _task("port gone", "port", {**port, "state": "absent"}),
        _task("image gone checked", "image", {**image, "state": "absent"}, check_mode=True),
        _task("image gone", "image", {**image, "state": "absent"}),
        _task("flavor gone", "flavor", {**flavor, "state": "absent"}),
        _task("flavor gone again", "flavor", {**flavor, "state": "absent"}),
    ]
    names = [t["register"] for t in tasks]
    report = tools.directory / "catalog-modules.json"
    content = "{{ {" + ", ".join(f"'{n}': {n}" for n in names) + "} | to_json }}"
    tasks.append({"ansible.builtin.copy": {"dest": str(report), "content": content}})
    play = tools.directory / "catalog-modules.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))

    # What a checked task did not write, the real task after it says: it found nothing, or the
    # resource as it was.
    done = tools.play(play, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    seen = json.loads(report.read_text())

    # flavor: the check wrote nothing (the real create after it is a change), then unchanged.
    assert seen["flavor_checked"]["changed"] and "flavor" not in seen["flavor_checked"]
    assert seen["flavor"]["changed"] and seen["flavor"]["flavor"]["ram"] == 256
    assert not seen["flavor_again"]["changed"]
    assert seen["flavor_by_a_member"]["failed"]
    assert "Policy does not allow flavor:create to be performed." in seen["flavor_by_a_member"]["msg"]
    assert seen["flavor_gone"]["changed"] and not seen["flavor_gone_again"]["changed"]
    names_now = [f["name"] for f in flavors.list_flavors(db)]
    assert "mod-f1" not in names_now and "dev-f1" not in names_now

    # image: likewise; a checked change of visibility answers it and writes nothing (the image is
    # still private for the next run: unchanged).
    assert seen["image_checked"]["changed"] and seen["image"]["changed"]
    assert seen["image"]["image"]["visibility"] == "private"
    assert not seen["image_again"]["changed"]
    assert seen["image_shared_checked"]["changed"]
    assert seen["image_shared_checked"]["image"]["visibility"] == "shared"
    assert not seen["image_after_the_check"]["changed"]
    assert seen["image_gone_checked"]["changed"] and seen["image_gone"]["changed"]
    assert seen["image_not_its_own"]["failed"]
    assert "belongs to another project; only its owner changes it" in seen["image_not_its_own"]["msg"]
    assert not seen["image_not_seen"]["changed"]
    listed = {i["name"]: i for i in images.list_images(db)}
    assert "mod-img" not in listed and {"cat-public", "cat-hidden"} <= set(listed)

    # port: the member's, with no binding host in what it sees; check mode of its delete kept it.
    assert seen["port_checked"]["changed"] and "port" not in seen["port_checked"]
    assert seen["port"]["changed"] and seen["port"]["port"]["network"] == "lan"
    assert "binding_host" not in seen["port"]["port"]
    assert (
        not seen["port_again"]["changed"] and seen["port_again"]["port"]["id"] == seen["port"]["port"]["id"]
    )
    assert seen["port_gone_checked"]["changed"] and seen["port_gone"]["changed"]
    assert "mod-p1" not in [p["name"] for p in ports.list_ports(db, tools.admin)]
    assert tools.embedded_default_untouched()
