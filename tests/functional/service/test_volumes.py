"""Block Storage v3 through a real ``novakit serve``: volumes created (202, ``creating`` then
``available``), listed, shown, renamed and deleted by plain HTTP on both back ends, and by the
real ``openstack`` command on SQLite (with an attach and a detach through Compute's
``os-volume_attachments``); the types, zones, limits and quota sets; every refusal answered with
Cinder's status and shape before anything is written.

One service per back end for the module, on the fake driver's hosts (``tests.functional.cloud``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from novakit.catalog import flavors, images
from novakit.context import RequestContext
from tests.functional.cloud import Cloud, make_cloud
from tests.functional.service.conftest import (
    Served,
    add_user,
    identity_session,
    keystone_admin,
    make_lan,
    openstack,
    os_env,
    serve_cloud,
)

pytestmark = pytest.mark.xdist_group("volumes")


@dataclass
class VolumeCloud:
    served: Served
    lib: Cloud
    owner: RequestContext  # the admin token's Keystone project and user
    flavor: str
    image: str
    network: str
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str = "admin") -> str:
        if who not in self.tokens:
            if who == "admin":
                self.tokens[who] = self.served.issue()
            else:
                self.tokens[who] = self.served.issue("bob", "bob-pw-1", "other")
        return self.tokens[who]

    def call(
        self,
        method: str,
        path: str,
        who: str | None = "admin",
        body: Any = None,
        version: str | None = None,
        project: bool = True,
        content: bytes | None = None,
    ) -> httpx.Response:
        """``path`` below ``/volume/v3/<the caller's project>`` (``project``: with it)."""
        headers = {"X-Auth-Token": self.token(who)} if who is not None else {}
        if version is not None:
            headers["OpenStack-API-Version"] = f"volume {version}"
        prefix = f"/volume/v3/{self.owner.project_id}" if project else "/volume/v3"
        with self.served.client() as http:
            if content is not None:
                headers["Content-Type"] = "application/json"
                return http.request(method, prefix + path, headers=headers, content=content)
            return http.request(method, prefix + path, headers=headers, json=body)

    def create(self, name: str, size: int = 1, **extra: Any) -> dict[str, Any]:
        made = self.call("POST", "/volumes", body={"volume": {"name": name, "size": size, **extra}})
        assert made.status_code == 202, made.text
        volume = made.json()["volume"]
        assert volume["status"] in ("creating", "available")
        self.wait_for(lambda: self.show(volume["id"])["status"] == "available", f"{name} available")
        return self.show(volume["id"])

    def show(self, volume_id: str, who: str = "admin") -> dict[str, Any]:
        answer = self.call("GET", f"/volumes/{volume_id}", who, version="3.71")
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["volume"])

    def delete(self, volume_id: str) -> None:
        assert self.call("DELETE", f"/volumes/{volume_id}").status_code == 202
        self.wait_for(lambda: self.call("GET", f"/volumes/{volume_id}").status_code == 404, "deleted")

    def volume_rows(self) -> int:
        """Every volume row, deleted ones too: a refused create writes none."""
        with self.lib.db.engine.connect() as conn:
            return int(conn.execute(text("SELECT COUNT(*) FROM volumes")).scalar_one())

    @staticmethod
    def wait_for(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.1)
        raise AssertionError(f"not {what} after 60 s")


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VolumeCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "volumes") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "bob", "bob-pw-1", project="other")
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            owner = keystone_admin(served)
            net = make_lan(db, owner)
            flavor = flavors.show(db, lib.admin, "m1.small")["id"]
            image = images.show(db, lib.admin, "tiny")["id"]
            yield VolumeCloud(served, lib, owner, flavor, image, net)
        finally:
            db.dispose()


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: VolumeCloud) -> VolumeCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command drives the same service on both back ends: SQLite only")
    return cloud


# ---------------------------------------------------------------- versions


def test_the_versions_name_v3_and_its_microversions(cloud: VolumeCloud) -> None:
    with cloud.served.client() as http:
        root = http.get("/volume")
        v3 = http.get("/volume/v3/", headers={"OpenStack-API-Version": "volume 3.50"})
        too_new = http.get("/volume/v3/", headers={"OpenStack-API-Version": "volume 3.99"})
    assert root.status_code == 300
    [version] = root.json()["versions"]
    assert (version["id"], version["status"], version["min_version"]) == ("v3.0", "CURRENT", "3.0")
    assert version["version"] == "3.71"
    assert {"rel": "self", "href": f"{cloud.served.url}/volume/v3/"} in version["links"]
    assert v3.status_code == 200 and v3.headers["OpenStack-API-Version"] == "volume 3.50"
    assert too_new.status_code == 406


# ---------------------------------------------------------------- volumes


def test_a_volume_is_created_listed_shown_renamed_and_deleted(cloud: VolumeCloud) -> None:
    c = cloud
    made = c.call("POST", "/volumes", body={"volume": {"name": "data-1", "size": 1, "description": "d"}})
    assert made.status_code == 202, made.text
    first = made.json()["volume"]
    assert first["status"] in ("creating", "available") and first["size"] == 1
    c.wait_for(lambda: c.show(first["id"])["status"] == "available", "available")
    shown = c.show(first["id"])
    assert shown["name"] == "data-1" and shown["description"] == "d" and shown["bootable"] == "false"
    assert shown["volume_type"] == "__DEFAULT__" and shown["availability_zone"] == "nova"
    assert shown["os-vol-tenant-attr:tenant_id"] == c.owner.project_id and shown["attachments"] == []
    assert shown["os-vol-host-attr:host"].startswith("compute-")  # the admin sees the host
    assert shown["volume_type_id"] and shown["consumes_quota"] is True and shown["metadata"] == {}
    # the project id in the URL is optional (Cinder's 3.67)
    assert c.call("GET", f"/volumes/{first['id']}", project=False).json()["volume"]["id"] == first["id"]

    second = c.create("data-2")
    listed = c.call("GET", "/volumes").json()["volumes"]
    assert [v["name"] for v in listed] == ["data-1", "data-2"] and set(listed[0]) == {"id", "name", "links"}
    detail = c.call("GET", "/volumes/detail?name=data-2").json()["volumes"]
    assert [v["id"] for v in detail] == [second["id"]] and detail[0]["status"] == "available"
    assert c.call("GET", "/volumes/detail?status=error").json()["volumes"] == []
    page = c.call("GET", "/volumes?limit=1").json()
    assert [v["name"] for v in page["volumes"]] == ["data-1"]
    assert "marker=" in page["volumes_links"][0]["href"]
    rest = c.call("GET", f"/volumes?limit=1&marker={first['id']}").json()["volumes"]
    assert [v["name"] for v in rest] == ["data-2"]

    renamed = c.call(
        "PUT", f"/volumes/{second['id']}", body={"volume": {"name": "data-2b", "description": "x"}}
    )
    assert renamed.status_code == 200 and renamed.json()["volume"]["name"] == "data-2b"
    assert c.show(second["id"])["description"] == "x"
    taken = c.call("PUT", f"/volumes/{second['id']}", body={"volume": {"name": "data-1"}})
    assert taken.status_code == 400 and "badRequest" in taken.json()

    for v in (first, second):
        c.delete(v["id"])
    gone = c.call("GET", f"/volumes/{first['id']}")
    assert gone.status_code == 404 and gone.json()["itemNotFound"]["code"] == 404


def test_a_volume_from_an_image_is_bootable(cloud: VolumeCloud) -> None:
    c = cloud
    made = c.create("from-image", imageRef=c.image, volume_type=None, metadata={})
    assert made["bootable"] == "true" and made["volume_image_metadata"]["image_id"] == c.image
    c.delete(made["id"])


def test_a_volume_may_have_no_name(cloud: VolumeCloud) -> None:
    c = cloud
    made = c.call("POST", "/volumes", body={"volume": {"size": 1, "name": None}})
    assert made.status_code == 202 and made.json()["volume"]["name"] is None
    vid = made.json()["volume"]["id"]
    c.wait_for(lambda: c.show(vid)["status"] == "available", "available")
    named = c.call("PUT", f"/volumes/{vid}", body={"volume": {"name": "now-named"}})
    assert named.json()["volume"]["name"] == "now-named"
    unnamed = c.call("PUT", f"/volumes/{vid}", body={"volume": {"name": None}})
    assert unnamed.status_code == 200 and unnamed.json()["volume"]["name"] is None
    c.delete(vid)


def test_types_zones_and_limits(cloud: VolumeCloud) -> None:
    c = cloud
    [vtype] = c.call("GET", "/types").json()["volume_types"]
    assert vtype["name"] == "__DEFAULT__" and vtype["is_public"] is True
    assert c.call("GET", f"/types/{vtype['id']}").json()["volume_type"]["id"] == vtype["id"]
    assert c.call("GET", "/types/gold").status_code == 404
    zones = c.call("GET", "/os-availability-zone").json()["availabilityZoneInfo"]
    assert zones == [{"zoneName": "nova", "zoneState": {"available": True}}]
    vol = c.create("counted", size=2, availability_zone="nova", volume_type="__DEFAULT__")
    absolute = c.call("GET", "/limits").json()["limits"]["absolute"]
    assert absolute["totalVolumesUsed"] == 1 and absolute["totalGigabytesUsed"] == 2
    assert absolute["maxTotalVolumes"] == 10
    c.delete(vol["id"])


def test_an_admin_sets_the_volume_quotas_and_a_create_over_them_is_413(cloud: VolumeCloud) -> None:
    c = cloud
    path = f"/os-quota-sets/{c.owner.project_id}"
    shown = c.call("GET", path).json()["quota_set"]
    assert shown["id"] == c.owner.project_id and shown["volumes"] == 10 and shown["snapshots"] == 0
    set_ = c.call("PUT", path, body={"quota_set": {"gigabytes": 1}})
    assert set_.status_code == 200 and set_.json()["quota_set"]["gigabytes"] == 1
    usage = c.call("GET", f"{path}?usage=true").json()["quota_set"]
    assert usage["gigabytes"] == {"limit": 1, "in_use": 0, "reserved": 0}
    before = c.volume_rows()
    over = c.call("POST", "/volumes", body={"volume": {"name": "big", "size": 2}})
    assert over.status_code == 413 and over.json()["overLimit"]["code"] == 413
    assert c.volume_rows() == before
    bad = c.call("PUT", path, body={"quota_set": {"snapshots": 5}})
    assert bad.status_code == 400
    # A project the identity does not know: 400, nothing written (the library's one check).
    unknown = c.call("PUT", "/os-quota-sets/no-such-project", body={"quota_set": {"volumes": 3}})
    assert unknown.status_code == 400 and "not a project of the identity service" in unknown.text
    assert c.call("GET", "/os-quota-sets/no-such-project").json()["quota_set"]["volumes"] == 10
    assert c.call("PUT", path, body={"quota_set": {"gigabytes": 1000}}).status_code == 200


@pytest.mark.parametrize(
    ("body", "version", "status"),
    [
        ({"volume": {"name": "b", "size": 0}}, None, 400),
        ({"volume": {"name": "b", "size": "one"}}, None, 400),
        ({"volume": {"name": "b"}}, None, 400),
        ({"volume": {"name": "b", "size": 1, "metadata": {"k": "v"}}}, None, 400),
        ({"volume": {"name": "b", "size": 1, "snapshot_id": "x"}}, None, 400),
        ({"volume": {"name": "b", "size": 1, "availability_zone": "mars"}}, None, 400),
        ({"volume": {"name": "b", "size": 1, "imageRef": "no-such-image"}}, None, 404),
        ({"volume": {"name": "b", "size": 1, "volume_type": "gold"}}, None, 404),
        ({"volume": {"name": "b", "size": 1, "colour": "red"}}, "3.53", 400),
        ({"volume": "b"}, None, 400),
        ([], None, 400),
    ],
)
def test_a_bad_create_is_refused_and_writes_nothing(
    cloud: VolumeCloud, body: Any, version: str | None, status: int
) -> None:
    before = cloud.volume_rows()
    answer = cloud.call("POST", "/volumes", body=body, version=version)
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"badRequest" if status == 400 else "itemNotFound"}
    assert cloud.volume_rows() == before


def test_an_unknown_key_before_3_53_is_ignored(cloud: VolumeCloud) -> None:
    made = cloud.call("POST", "/volumes", body={"volume": {"name": "old", "size": 1, "colour": "red"}})
    assert made.status_code == 202, made.text
    vol = made.json()["volume"]
    cloud.wait_for(lambda: cloud.show(vol["id"])["status"] == "available", "available")
    cloud.delete(vol["id"])


def test_another_project_and_no_token(cloud: VolumeCloud) -> None:
    c = cloud
    vol = c.create("private")
    vid = vol["id"]
    bob_project = c.served.validate(c.token("bob")).json()["token"]["project"]["id"]

    def bob(method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"X-Auth-Token": c.token("bob")}
        with c.served.client() as http:
            return http.request(method, f"/volume/v3/{bob_project}{path}", headers=headers, json=body)

    for method, path, body in [
        ("GET", f"/volumes/{vid}", None),
        ("PUT", f"/volumes/{vid}", {"volume": {"name": "mine"}}),
        ("DELETE", f"/volumes/{vid}", None),
        ("POST", f"/volumes/{vid}/action", {"os-extend": {"new_size": 2}}),
    ]:
        answer = bob(method, path, body)
        assert answer.status_code == 404, (method, path, answer.text)
        assert "itemNotFound" in answer.json()
    assert bob("GET", "/volumes/detail?all_tenants=1").json()["volumes"] == []  # ignored, as Cinder
    quota_path = f"/os-quota-sets/{c.owner.project_id}"
    assert bob("PUT", quota_path, {"quota_set": {"volumes": 100}}).status_code == 403
    assert bob("GET", "/volumes").status_code == 200
    # a URL naming another project than the token's
    assert c.call("GET", "/volumes", "bob").status_code == 400
    everyone = c.call("GET", "/volumes/detail?all_tenants=true").json()["volumes"]
    assert vid in [v["id"] for v in everyone]
    assert c.show(vid)["name"] == "private"

    for method, path in [
        ("GET", "/volumes"),
        ("GET", "/volumes/detail"),
        ("POST", "/volumes"),
        ("GET", f"/volumes/{vid}"),
        ("PUT", f"/volumes/{vid}"),
        ("DELETE", f"/volumes/{vid}"),
        ("POST", f"/volumes/{vid}/action"),
        ("GET", "/types"),
        ("GET", "/limits"),
        ("GET", "/os-availability-zone"),
        ("GET", quota_path),
        ("PUT", quota_path),
    ]:
        answer = c.call(method, path, None, {"volume": {"name": "x", "size": 1}})
        assert answer.status_code == 401, (method, path, answer.text)
    assert c.show(vid)["status"] == "available"
    action = c.call("POST", f"/volumes/{vid}/action", body={"os-extend": {"new_size": 2}})
    assert action.status_code == 400 and "os-extend" in action.text
    c.delete(vid)


# ---------------------------------------------------------------- the openstack command


def test_the_openstack_command_creates_attaches_and_deletes_volumes(sqlite_cloud: VolumeCloud) -> None:
    c = sqlite_cloud
    admin = os_env(c.served)

    def run(*args: str, output: bool = True) -> Any:
        done = openstack(admin, *args, *(("-f", "json") if output else ()))
        assert done.returncode == 0, (args, done.stderr)
        return json.loads(done.stdout) if output else None

    made = run("volume", "create", "--size", "1", "cli-1")
    assert made["size"] == 1 and made["name"] == "cli-1"
    from_image = run("volume", "create", "--size", "1", "--image", "tiny", "cli-image")
    unnamed = run("volume", "create", "--size", "1")
    assert unnamed["name"] is None and unnamed["size"] == 1
    c.wait_for(lambda: c.show(from_image["id"])["status"] == "available", "from image available")
    assert c.show(from_image["id"])["bootable"] == "true"
    c.wait_for(lambda: c.show(made["id"])["status"] == "available", "available")

    c.wait_for(lambda: c.show(unnamed["id"])["status"] == "available", "unnamed available")
    listed = run("volume", "list")
    assert sorted((v["Name"] or "", v["Status"], v["Size"]) for v in listed) == [
        ("", "available", 1),
        ("cli-1", "available", 1),
        ("cli-image", "available", 1),
    ]
    shown = run("volume", "show", "cli-1")
    assert (shown["id"], shown["status"], shown["type"]) == (made["id"], "available", "__DEFAULT__")
    run("volume", "set", "--name", "cli-renamed", "cli-1", output=False)
    assert c.show(made["id"])["name"] == "cli-renamed"

    # A server on the volume's host (a volume attaches only to servers of its host).
    host = c.show(made["id"])["os-vol-host-attr:host"]
    server = {
        "name": "vm-1",
        "flavorRef": c.flavor,
        "imageRef": c.image,
        "networks": [{"uuid": c.network}],
        "availability_zone": f"nova:{host}",
    }
    headers = {"X-Auth-Token": c.token()}
    with c.served.client() as http:
        booted = http.post("/compute/v2.1/servers", headers=headers, json={"server": server})
        assert booted.status_code == 202, booted.text
        uuid = booted.json()["server"]["id"]

        def active() -> bool:
            return (
                http.get(f"/compute/v2.1/servers/{uuid}", headers=headers).json()["server"]["status"]
                == "ACTIVE"
            )

        c.wait_for(active, "ACTIVE")

    run("server", "add", "volume", "vm-1", "cli-renamed", output=False)
    attached = c.show(made["id"])
    assert attached["status"] == "in-use" and attached["attachments"][0]["server_id"] == uuid
    in_use = c.call("DELETE", f"/volumes/{made['id']}")
    assert in_use.status_code == 400 and "badRequest" in in_use.json()
    run("server", "remove", "volume", "vm-1", "cli-renamed", output=False)
    c.wait_for(lambda: c.show(made["id"])["status"] == "available", "detached")

    run("volume", "delete", "cli-renamed", "cli-image", unnamed["id"], output=False)
    c.wait_for(lambda: c.call("GET", "/volumes").json()["volumes"] == [], "deleted")


def test_no_token_or_password_reaches_the_log(cloud: VolumeCloud) -> None:
    logged = cloud.served.log.read_text()
    assert cloud.served.secrets and not [s for s in cloud.served.secrets if s in logged]
