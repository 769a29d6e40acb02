"""Image v2 writes and sharing through a real ``novakit serve``: the real ``openstack`` command
(create with a file, list, show, set a property, save, share, accept, delete) and the HTTP
answers of ``/image/v2`` for an admin, a member (alice, of the admin project) and another
project's member (bob, of project ``other``).

One service per back end for the module; the ``openstack`` command runs on SQLite only (what it
does is the same on both back ends), the HTTP checks on both.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.functional.service.conftest import (
    OPENSTACK,
    Served,
    add_user,
    identity_session,
    keystone_admin,
    make_lan,
    os_env,
    serve_cloud,
)

pytestmark = pytest.mark.xdist_group("images")

PATCH = "application/openstack-images-v2.1-json-patch"
DATA = "application/octet-stream"
PLACEHOLDER = "00000000-0000-0000-0000-000000000000"
#: every route of this slice, with its method (401 without a token on each)
ROUTES = [
    ("POST", "/image/v2/images"),
    ("PATCH", f"/image/v2/images/{PLACEHOLDER}"),
    ("DELETE", f"/image/v2/images/{PLACEHOLDER}"),
    ("PUT", f"/image/v2/images/{PLACEHOLDER}/file"),
    ("GET", f"/image/v2/images/{PLACEHOLDER}/file"),
    ("PUT", f"/image/v2/images/{PLACEHOLDER}/tags/t"),
    ("DELETE", f"/image/v2/images/{PLACEHOLDER}/tags/t"),
    ("POST", f"/image/v2/images/{PLACEHOLDER}/actions/deactivate"),
    ("POST", f"/image/v2/images/{PLACEHOLDER}/actions/reactivate"),
    ("POST", f"/image/v2/images/{PLACEHOLDER}/members"),
    ("GET", f"/image/v2/images/{PLACEHOLDER}/members"),
    ("GET", f"/image/v2/images/{PLACEHOLDER}/members/p"),
    ("PUT", f"/image/v2/images/{PLACEHOLDER}/members/p"),
    ("DELETE", f"/image/v2/images/{PLACEHOLDER}/members/p"),
]


@dataclass
class ImageCloud:
    served: Served
    store: Path
    admin_project: str
    other_project: str
    flavor: str
    tokens: dict[str, str] = field(default_factory=dict)

    def call(
        self,
        method: str,
        path: str,
        who: str = "alice",
        body: Any = None,
        content: Any = None,
        content_type: str | None = None,
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.tokens[who]}
        if content_type is not None:
            headers["Content-Type"] = content_type
        if content is None and body is not None:
            content = json.dumps(body).encode()
            headers.setdefault("Content-Type", PATCH if method == "PATCH" else "application/json")
        with self.served.client() as http:
            return http.request(method, path, headers=headers, content=content)

    def make(self, who: str = "alice", **attrs: Any) -> dict[str, Any]:
        made = self.call(
            "POST", "/image/v2/images", who, {"disk_format": "qcow2", "container_format": "bare", **attrs}
        )
        assert made.status_code == 201, made.text
        return dict(made.json())

    def upload(self, image_id: str, data: bytes, who: str = "alice") -> httpx.Response:
        def chunks() -> Iterator[bytes]:  # sent chunked: the service never sees a length
            for start in range(0, len(data), 4096):
                yield data[start : start + 4096]

        return self.call("PUT", f"/image/v2/images/{image_id}/file", who, content=chunks(), content_type=DATA)

    def show(self, image_id: str, who: str = "admin") -> httpx.Response:
        return self.call("GET", f"/image/v2/images/{image_id}", who)

    def names(self, who: str, **params: str) -> set[str]:
        with self.served.client() as http:
            listed = http.get("/image/v2/images", headers={"X-Auth-Token": self.tokens[who]}, params=params)
        assert listed.status_code == 200, listed.text
        return {i["name"] for i in listed.json()["images"]}

    def stored(self) -> list[str]:
        return sorted(os.listdir(self.store)) if self.store.is_dir() else []


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImageCloud]:
    from novakit.catalog import flavors
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "images") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "alice", "alice-pw-1", project="admin")
        add_user(served, "bob", "bob-pw-1", project="other")
        tokens = {
            "admin": served.issue(),
            "alice": served.issue("alice", "alice-pw-1", "admin"),
            "bob": served.issue("bob", "bob-pw-1", "other"),
        }
        admin_project = served.validate(tokens["admin"]).json()["token"]["project"]["id"]
        other_project = served.validate(tokens["bob"]).json()["token"]["project"]["id"]
        db = served.database()
        try:
            admin = keystone_admin(served)
            flavor = flavors.create(
                db, admin, {"name": "m1.small", "vcpus": 1, "memory_mb": 512, "root_gb": 1}
            )["id"]
            make_lan(db, admin)
        finally:
            db.dispose()
        store = directory / "state" / "images"
        yield ImageCloud(served, store, admin_project, other_project, flavor, tokens)


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: ImageCloud) -> ImageCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command does the same on both back ends: SQLite only")
    return cloud


# ------------------------------------------------------------------ HTTP


def test_create_upload_show_download(cloud: ImageCloud) -> None:
    """A member's image: created queued (Glance's default visibility shared, its properties as
    keys), its data streamed in (size, MD5, SHA-512), active, downloaded byte for byte."""
    c = cloud
    made = c.call(
        "POST",
        "/image/v2/images",
        body={
            "name": "up-1",
            "disk_format": "qcow2",
            "container_format": "bare",
            "min_ram": 64,
            "os_distro": "x",
        },
    )
    assert made.status_code == 201, made.text
    image = made.json()
    assert urlsplit(made.headers["location"]).path == f"/image/v2/images/{image['id']}"
    assert (image["status"], image["visibility"], image["owner"]) == ("queued", "shared", c.admin_project)
    assert (image["os_distro"], image["min_ram"], image["size"], image["checksum"]) == ("x", 64, None, None)
    assert (image["protected"], image["tags"]) == (False, [])
    empty = c.call("GET", f"/image/v2/images/{image['id']}/file")
    assert empty.status_code == 204 and empty.content == b""

    data = os.urandom(100_000)
    assert c.upload(image["id"], data).status_code == 204
    shown = c.show(image["id"], "alice").json()
    assert (shown["status"], shown["size"]) == ("active", len(data))
    assert shown["checksum"] == hashlib.md5(data).hexdigest()
    assert (shown["os_hash_algo"], shown["os_hash_value"]) == ("sha512", hashlib.sha512(data).hexdigest())
    assert not {"location", "locations", "direct_url", "image_host"} & set(shown)
    down = c.call("GET", f"/image/v2/images/{image['id']}/file")
    assert down.status_code == 200 and down.content == data
    assert down.headers["content-md5"] == shown["checksum"]
    # An active image takes no second upload.
    assert c.upload(image["id"], b"again").status_code == 409
    assert c.call("GET", f"/image/v2/images/{image['id']}/file").content == data


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_needs_a_token(sqlite_cloud: ImageCloud, method: str, path: str) -> None:
    with sqlite_cloud.served.client() as http:
        assert http.request(method, path).status_code == 401


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"name": "b", "status": "active"}, 403),
        ({"name": "b", "owner": "someone"}, 403),
        ({"name": "b", "location": "/etc/passwd"}, 403),
        ({"name": "b", "os_glance_md5": "x"}, 403),
        ({"name": "b", "disk_format": "exe"}, 400),
        ({"name": "b", "min_disk": -1}, 400),
        ({"name": "b", "color": 3}, 400),
        ({"name": "b", "id": "not-a-uuid"}, 400),
        ({"name": "b", "visibility": "public"}, 403),
        ("not json", 400),
    ],
    ids=["status", "owner", "location", "reserved", "format", "min-disk", "property", "id", "public", "json"],
)
def test_a_bad_create_writes_nothing(cloud: ImageCloud, body: Any, status: int) -> None:
    c = cloud
    before = c.names("admin")
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    answer = c.call("POST", "/image/v2/images", content=content, content_type="application/json")
    assert answer.status_code == status, answer.text
    assert c.names("admin") == before


def test_a_failed_upload_leaves_no_file_and_the_image_queued(cloud: ImageCloud) -> None:
    """The client goes away half way: no partial file, the image queued again (Glance's), and a
    later upload succeeds. An upload without formats, or of the wrong type, writes nothing."""
    c = cloud
    image = c.make(name="cut")
    host, port = urlsplit(c.served.url).hostname, urlsplit(c.served.url).port
    with socket.create_connection((host, port)) as sock:
        sock.sendall(
            (
                f"PUT /image/v2/images/{image['id']}/file HTTP/1.1\r\nHost: {host}\r\n"
                f"X-Auth-Token: {c.tokens['alice']}\r\nContent-Type: {DATA}\r\n"
                "Content-Length: 10000000\r\n\r\n"
            ).encode()
            + b"x" * 200_000
        )
    deadline = time.monotonic() + 20
    while c.show(image["id"]).json()["status"] != "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.show(image["id"]).json()["status"] == "queued"
    assert not [f for f in c.stored() if image["id"] in f]

    bare = c.call("POST", "/image/v2/images", body={"name": "no-formats"}).json()
    refused = c.upload(bare["id"], b"data")
    assert refused.status_code == 400 and "disk_format" in refused.text
    wrong = c.call("PUT", f"/image/v2/images/{image['id']}/file", content=b"d", content_type="text/plain")
    assert wrong.status_code == 415
    assert c.show(bare["id"]).json()["status"] == "queued"
    assert not [f for f in c.stored() if bare["id"] in f]
    assert c.upload(image["id"], b"whole").status_code == 204
    assert c.show(image["id"]).json()["size"] == 5


def test_patch_tags_protected_and_delete(cloud: ImageCloud) -> None:
    c = cloud
    image = c.make(name="patched", tags=["a"])
    path = f"/image/v2/images/{image['id']}"
    ops = [
        {"op": "add", "path": "/k1", "value": "v1"},
        {"op": "replace", "path": "/name", "value": "patched-2"},
        {"op": "add", "path": "/tags", "value": ["b", "c"]},
        {"op": "replace", "path": "/protected", "value": True},
    ]
    changed = c.call("PATCH", path, body=ops)
    assert changed.status_code == 200, changed.text
    got = changed.json()
    assert (got["k1"], got["name"], got["tags"], got["protected"]) == ("v1", "patched-2", ["b", "c"], True)
    for bad, status in [
        ([{"op": "remove", "path": "/nope"}], 409),
        ([{"op": "replace", "path": "/nope", "value": "x"}], 409),
        ([{"op": "replace", "path": "/status", "value": "active"}], 403),
        ([{"op": "remove", "path": "/name"}], 403),
        ([{"op": "add", "path": "/k2", "value": "v2"}, {"op": "move", "path": "/k1"}], 400),
        ({"op": "add"}, 400),
    ]:
        answer = c.call("PATCH", path, body=bad)
        assert answer.status_code == status, (bad, answer.text)
    assert "k2" not in c.show(image["id"]).json()  # all of a patch or none of it
    assert c.call("PATCH", path, body=[], content_type="application/json").status_code == 415
    assert c.call("PUT", f"{path}/tags/d").status_code == 204
    assert c.call("DELETE", f"{path}/tags/b").status_code == 204
    assert c.call("DELETE", f"{path}/tags/zz").status_code == 404
    assert c.show(image["id"]).json()["tags"] == ["c", "d"]
    removed = c.call("PATCH", path, body=[{"op": "remove", "path": "/k1"}])
    assert removed.status_code == 200 and "k1" not in removed.json()

    assert c.call("DELETE", path).status_code == 403  # protected
    assert (
        c.call("PATCH", path, body=[{"op": "replace", "path": "/protected", "value": False}]).status_code
        == 200
    )
    assert c.call("DELETE", path).status_code == 204
    assert c.show(image["id"]).status_code == 404


def test_another_projects_private_image_is_not_found(cloud: ImageCloud) -> None:
    """Bob (another project) finds nothing of alice's private image; alice may not deactivate
    (an admin's) nor publicize; bob may not delete the admin's public image (403: he sees it)."""
    c = cloud
    image = c.make(name="alice-private", visibility="private")
    assert c.upload(image["id"], b"secret bytes").status_code == 204
    base = f"/image/v2/images/{image['id']}"
    for method, path, body in [
        ("GET", base, None),
        ("GET", f"{base}/file", None),
        ("PATCH", base, [{"op": "add", "path": "/x", "value": "y"}]),
        ("DELETE", base, None),
        ("PUT", f"{base}/tags/t", None),
        ("GET", f"{base}/members", None),
        ("POST", f"{base}/members", {"member": c.other_project}),
    ]:
        answer = c.call(method, path, "bob", body)
        assert answer.status_code == 404, (method, path, answer.text)
    assert "alice-private" not in c.names("bob")
    assert c.call("POST", f"{base}/actions/deactivate").status_code == 403
    assert (
        c.call("PATCH", base, body=[{"op": "replace", "path": "/visibility", "value": "public"}]).status_code
        == 403
    )

    public = c.make("admin", name="admin-public", visibility="public")
    assert c.call("DELETE", f"/image/v2/images/{public['id']}", "bob").status_code == 403
    assert "admin-public" in c.names("bob")
    assert c.show(public["id"], "bob").status_code == 200


def test_deactivate_and_reactivate(cloud: ImageCloud) -> None:
    c = cloud
    image = c.make(name="deact")
    assert c.upload(image["id"], b"bytes").status_code == 204
    base = f"/image/v2/images/{image['id']}"
    assert c.call("POST", f"{base}/actions/deactivate", "admin").status_code == 204
    assert c.show(image["id"], "alice").json()["status"] == "deactivated"
    assert c.call("GET", f"{base}/file", "alice").status_code == 403
    assert c.call("GET", f"{base}/file", "admin").content == b"bytes"
    assert c.call("POST", f"{base}/actions/reactivate", "admin").status_code == 204
    assert c.call("GET", f"{base}/file", "alice").content == b"bytes"
    queued = c.make(name="deact-queued")
    assert c.call("POST", f"/image/v2/images/{queued['id']}/actions/deactivate", "admin").status_code == 403


def test_members_share_an_image_and_a_member_boots_only_what_it_sees(cloud: ImageCloud) -> None:
    """The owner shares; bob sees the pending image by id but does not list it; accepted, he
    lists it; he answers for his own project only and adds no members; removed, it is gone.
    Bob's boot of alice's private image is refused as Nova refuses an image it cannot see."""
    c = cloud
    image = c.make(name="shared-1")
    assert c.upload(image["id"], b"shared bytes").status_code == 204
    members = f"/image/v2/images/{image['id']}/members"
    added = c.call("POST", members, body={"member": c.other_project})
    assert added.status_code == 200, added.text
    assert (added.json()["member_id"], added.json()["status"]) == (c.other_project, "pending")
    assert c.call("POST", members, body={"member": c.other_project}).status_code == 409
    assert c.call("POST", members, body={}).status_code == 400
    pending = c.show(image["id"], "bob")
    assert pending.status_code == 200 and not {"location", "locations", "direct_url", "image_host"} & set(
        pending.json()
    )
    assert "shared-1" not in c.names("bob")
    mine = f"{members}/{c.other_project}"
    assert c.call("PUT", mine, "alice", {"status": "accepted"}).status_code == 403  # the member answers
    assert c.call("PUT", mine, "bob", {"status": "maybe"}).status_code == 400
    assert c.call("PUT", mine, "bob", {"status": "accepted"}).json()["status"] == "accepted"
    assert "shared-1" in c.names("bob")
    assert c.call("GET", f"/image/v2/images/{image['id']}/file", "bob").content == b"shared bytes"
    assert [m["member_id"] for m in c.call("GET", members, "bob").json()["members"]] == [c.other_project]
    assert c.call("GET", mine, "alice").json()["status"] == "accepted"
    assert c.call("POST", members, "bob", {"member": c.admin_project}).status_code == 403
    assert c.call("DELETE", mine, "bob").status_code == 403
    assert c.call("DELETE", mine).status_code == 204
    assert c.show(image["id"], "bob").status_code == 404

    private = c.make(name="alice-only", visibility="private")
    assert c.upload(private["id"], b"p").status_code == 204
    server = {"name": "b1", "flavorRef": c.flavor, "imageRef": private["id"], "networks": "auto"}
    with c.served.client() as http:
        refused = http.post(
            "/compute/v2.1/servers", headers={"X-Auth-Token": c.tokens["bob"]}, json={"server": server}
        )
    assert refused.status_code == 400, refused.text
    assert private["id"] in refused.json()["badRequest"]["message"]


# ------------------------------------------------------------------ the openstack command


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """The command started, not waited for: commands that do not depend on each other run side
    by side (each costs about two seconds)."""
    return subprocess.Popen(
        [str(OPENSTACK), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _done(running: subprocess.Popen[str]) -> Any:
    out, err = running.communicate(timeout=120)
    assert running.returncode == 0, (running.args, err)
    return json.loads(out) if "json" in running.args else out


def test_the_openstack_command(sqlite_cloud: ImageCloud, tmp_path: Path) -> None:
    """``image create --file``, list, show, set --property, save (the same bytes), add project
    and (bob) set --accept, then listed for bob; delete."""
    c = sqlite_cloud
    alice = os_env(c.served, "alice", "alice-pw-1", "admin")
    bob = os_env(c.served, "bob", "bob-pw-1", "other")
    data = os.urandom(300_000)
    source, saved = tmp_path / "disk.qcow2", tmp_path / "saved.qcow2"
    source.write_bytes(data)
    made = _done(
        _start(
            alice, "image", "create", "--file", str(source), "--disk-format", "qcow2",
            "--container-format", "bare", "cli-image", "-f", "json",
        )
    )  # fmt: skip
    image_id = made["id"]
    listing = _start(alice, "image", "list", "-f", "json")
    showing = _start(alice, "image", "show", image_id, "-f", "json")
    setting = _start(alice, "image", "set", "--property", "purpose=test", image_id)
    saving = _start(alice, "image", "save", "--file", str(saved), image_id)
    # by id: a member may not look projects up by name (Keystone's rule, here too)
    sharing = _start(alice, "image", "add", "project", image_id, c.other_project)
    assert "cli-image" in {i["Name"] for i in _done(listing)}
    shown = _done(showing)
    assert (shown["status"], shown["size"], shown["disk_format"]) == ("active", len(data), "qcow2")
    assert shown["checksum"] == hashlib.md5(data).hexdigest()
    _done(setting)
    assert c.show(image_id, "alice").json()["purpose"] == "test"
    _done(saving)
    assert saved.read_bytes() == data

    _done(sharing)
    assert "cli-image" not in c.names("bob")
    _done(_start(bob, "image", "set", "--accept", image_id))
    assert "cli-image" in {i["Name"] for i in _done(_start(bob, "image", "list", "-f", "json"))}
    _done(_start(alice, "image", "delete", image_id))
    assert c.show(image_id, "alice").status_code == 404
    assert not [f for f in c.stored() if image_id in f]


def test_no_secret_in_the_log(cloud: ImageCloud) -> None:
    log = cloud.served.log.read_text()
    for secret in [*cloud.served.secrets, *cloud.tokens.values()]:
        assert secret not in log
