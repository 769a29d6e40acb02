"""A server's sub-resources through a real ``novakit serve``: its volume attachments (attached and
detached by the library, answered 200 and 202), its interfaces (its ports as Nova shows them) and
the migrations an admin lists (``os-migrations``, a server's live migrations), by plain HTTP on
both back ends and the real ``openstack`` command on SQLite; every refusal answered with Nova's
status before anything is written.

One service per back end for the module, on the fake driver's hosts (``tests.functional.cloud``),
servers booted only through the service; volumes are made by the library in the admin token's
Keystone project (no Block Storage API is served).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from novakit.catalog import flavors, images
from novakit.context import RequestContext
from novakit.network import subnets
from novakit.volume import volumes
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

pytestmark = pytest.mark.xdist_group("service_resources")


@dataclass
class ResourcesCloud:
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
        content: bytes | None = None,
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who)} if who is not None else {}
        if version is not None:
            headers["OpenStack-API-Version"] = f"compute {version}"
        if content is not None:
            headers["Content-Type"] = "application/json"
        with self.served.client() as http:
            if content is not None:
                return http.request(method, f"/compute/v2.1{path}", headers=headers, content=content)
            return http.request(method, f"/compute/v2.1{path}", headers=headers, json=body)

    def boot(self, name: str, who: str = "admin") -> dict[str, Any]:
        """A server booted through the service on ``lan``, ACTIVE; as its admin sees it."""
        server = {
            "name": name,
            "flavorRef": self.flavor,
            "imageRef": self.image,
            "networks": [{"uuid": self.network}],
        }
        made = self.call("POST", "/servers", who, {"server": server})
        assert made.status_code == 202, made.text
        uuid = made.json()["server"]["id"]
        self.wait_for(lambda: self.server(uuid)["status"] == "ACTIVE", f"{name} ACTIVE")
        return self.server(uuid)

    def server(self, uuid: str) -> dict[str, Any]:
        answer = self.call("GET", f"/servers/{uuid}", version="2.79")
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["server"])

    def volume(self, name: str, host: str) -> dict[str, Any]:
        """An available volume of the admin token's project on ``host`` (a server's host)."""
        made = volumes.create(self.lib.api.conductor, self.owner, name, 1, host=host)
        assert made["status"] == "available", made
        return made

    def drop(self, volume_id: str) -> None:
        """Delete a test's volume (the project's volume quota is 10)."""
        volumes.delete(self.lib.api.conductor, self.owner, volume_id)

    def volume_status(self, volume_id: str) -> str:
        return str(volumes.show(self.lib.api.conductor, self.owner, volume_id)["status"])

    @staticmethod
    def wait_for(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.1)
        raise AssertionError(f"not {what} after 60 s")


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResourcesCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "resources") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "bob", "bob-pw-1", project="other")
        served.secrets += ["bob-pw-1"]
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            owner = keystone_admin(served)
            net = make_lan(db, owner)
            flavor = flavors.show(db, lib.admin, "m1.small")["id"]
            image = images.show(db, lib.admin, "tiny")["id"]
            yield ResourcesCloud(served, lib, owner, flavor, image, net)
        finally:
            db.dispose()


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: ResourcesCloud) -> ResourcesCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command drives the same service on both back ends: SQLite only")
    return cloud


# ---------------------------------------------------------------- volume attachments


def test_a_volume_is_attached_listed_shown_and_detached(cloud: ResourcesCloud) -> None:
    c = cloud
    server = c.boot("vol-1")
    uuid, host = server["id"], server["OS-EXT-SRV-ATTR:host"]
    vol = c.volume("data-1", host)
    path = f"/servers/{uuid}/os-volume_attachments"
    assert c.call("GET", path).json() == {"volumeAttachments": []}

    attached = c.call("POST", path, body={"volumeAttachment": {"volumeId": vol["id"]}}, version="2.79")
    assert attached.status_code == 200, attached.text
    shown = attached.json()["volumeAttachment"]
    assert shown["id"] == shown["volumeId"] == vol["id"] and shown["serverId"] == uuid
    assert shown["device"].startswith("/dev/vd") and shown["tag"] is None
    assert shown["delete_on_termination"] is False
    assert c.volume_status(vol["id"]) == "in-use"

    listed = c.call("GET", path).json()["volumeAttachments"]
    assert listed == [{"id": vol["id"], "volumeId": vol["id"], "serverId": uuid, "device": shown["device"]}]
    one = c.call("GET", f"{path}/{vol['id']}", version="2.70")
    assert one.status_code == 200 and one.json()["volumeAttachment"]["tag"] is None
    assert one.json()["volumeAttachment"]["device"] == shown["device"]

    gone = c.call("DELETE", f"{path}/{vol['id']}")
    assert gone.status_code == 202 and gone.content == b""
    c.wait_for(lambda: c.call("GET", path).json()["volumeAttachments"] == [], "detached")
    c.wait_for(lambda: c.volume_status(vol["id"]) == "available", "available again")
    missing = c.call("GET", f"{path}/{vol['id']}")
    assert missing.status_code == 404 and "itemNotFound" in missing.json()
    c.drop(vol["id"])


def test_an_attach_with_a_named_device_and_the_volume_twice(cloud: ResourcesCloud) -> None:
    c = cloud
    server = c.boot("vol-2")
    uuid = server["id"]
    vol = c.volume("data-2", server["OS-EXT-SRV-ATTR:host"])
    path = f"/servers/{uuid}/os-volume_attachments"
    attached = c.call("POST", path, body={"volumeAttachment": {"volumeId": vol["id"], "device": "/dev/vdf"}})
    assert attached.status_code == 200, attached.text
    assert attached.json()["volumeAttachment"]["device"] == "/dev/vdf"
    again = c.call("POST", path, body={"volumeAttachment": {"volumeId": vol["id"]}})
    # The library refuses a volume that is not available (its InvalidVolume: 409 in the table).
    assert again.status_code == 409 and "only an available volume" in again.text
    assert len(c.call("GET", path).json()["volumeAttachments"]) == 1
    assert c.call("DELETE", f"{path}/{vol['id']}").status_code == 202
    c.wait_for(lambda: c.volume_status(vol["id"]) == "available", "detached")
    c.drop(vol["id"])


@pytest.fixture(scope="module")
def spare(cloud: ResourcesCloud) -> tuple[dict[str, Any], dict[str, Any]]:
    """A server and an available volume on its host, which the refused attaches leave as they are."""
    server = cloud.boot("spare-1")
    return server, cloud.volume("spare-data", server["OS-EXT-SRV-ATTR:host"])


@pytest.mark.parametrize(
    ("body", "version", "field"),
    [
        ({}, None, "volumeAttachment"),
        ({"volumeAttachment": {}}, None, "volumeAttachment.volumeId"),
        ({"volumeAttachment": {"volumeId": "@", "bogus": 1}}, None, "volumeAttachment.bogus"),
        ({"volumeAttachment": {"volumeId": "@", "tag": "t"}}, "2.48", "volumeAttachment.tag"),
        ({"volumeAttachment": {"volumeId": "@", "tag": "t"}}, "2.49", "volumeAttachment.tag"),
        (
            {"volumeAttachment": {"volumeId": "@", "delete_on_termination": False}},
            "2.78",
            "delete_on_termination",
        ),
        (
            {"volumeAttachment": {"volumeId": "@", "delete_on_termination": True}},
            "2.79",
            "delete_on_termination",
        ),
        ({"volumeAttachment": {"volumeId": "@", "device": 7}}, None, "volumeAttachment.device"),
    ],
)
def test_a_bad_attach_body_is_400_and_writes_nothing(
    cloud: ResourcesCloud,
    spare: tuple[dict[str, Any], dict[str, Any]],
    body: dict[str, Any],
    version: str | None,
    field: str,
) -> None:
    c = cloud
    server, vol = spare
    given = json.loads(json.dumps(body).replace('"@"', json.dumps(vol["id"])))
    path = f"/servers/{server['id']}/os-volume_attachments"
    refused = c.call("POST", path, body=given, version=version)
    assert refused.status_code == 400, refused.text
    assert field in refused.json()["badRequest"]["message"]
    assert c.call("GET", path).json() == {"volumeAttachments": []}
    assert c.volume_status(vol["id"]) == "available"
    not_json = c.call("POST", path, content=b"{not json")
    assert not_json.status_code == 400 and c.volume_status(vol["id"]) == "available"


def test_an_unknown_volume_and_a_detach_of_one_not_attached(cloud: ResourcesCloud) -> None:
    c = cloud
    server = c.boot("vol-3")
    path = f"/servers/{server['id']}/os-volume_attachments"
    unknown = c.call(
        "POST", path, body={"volumeAttachment": {"volumeId": "00000000-0000-0000-0000-000000000000"}}
    )
    assert unknown.status_code == 404, unknown.text
    vol = c.volume("data-3", server["OS-EXT-SRV-ATTR:host"])
    assert c.call("DELETE", f"{path}/{vol['id']}").status_code == 404
    assert c.volume_status(vol["id"]) == "available"
    c.drop(vol["id"])


# ---------------------------------------------------------------- interfaces


def test_a_servers_interfaces_are_its_ports(cloud: ResourcesCloud) -> None:
    c = cloud
    server = c.boot("nic-1")
    uuid = server["id"]
    listed = c.call("GET", f"/servers/{uuid}/os-interface")
    assert listed.status_code == 200, listed.text
    [nic] = listed.json()["interfaceAttachments"]
    assert set(nic) == {"port_id", "net_id", "mac_addr", "port_state", "fixed_ips"}
    assert nic["net_id"] == c.network and nic["port_state"] == "ACTIVE"
    [address] = server["addresses"]["lan"]
    assert nic["mac_addr"] == address["OS-EXT-IPS-MAC:mac_addr"]
    subnet = subnets.show(c.lib.db, "lan-v4")["id"]
    assert nic["fixed_ips"] == [{"subnet_id": subnet, "ip_address": address["addr"]}]
    shown = c.call("GET", f"/servers/{uuid}/os-interface/{nic['port_id']}", version="2.70")
    assert shown.status_code == 200
    assert shown.json()["interfaceAttachment"] == {**nic, "tag": None}
    other = c.call("GET", f"/servers/{uuid}/os-interface/00000000-0000-0000-0000-000000000000")
    assert other.status_code == 404 and "itemNotFound" in other.json()


# ---------------------------------------------------------------- migrations


def test_the_admin_lists_a_cold_migration(cloud: ResourcesCloud) -> None:
    c = cloud
    server = c.boot("move-1")
    uuid, source = server["id"], server["OS-EXT-SRV-ATTR:host"]
    assert c.call("POST", f"/servers/{uuid}/action", body={"migrate": None}).status_code == 202
    c.wait_for(lambda: c.server(uuid)["status"] == "VERIFY_RESIZE", "VERIFY_RESIZE")
    assert c.call("POST", f"/servers/{uuid}/action", body={"confirmResize": None}).status_code in (202, 204)
    c.wait_for(lambda: c.server(uuid)["status"] == "ACTIVE", "ACTIVE after the confirm")
    dest = c.server(uuid)["OS-EXT-SRV-ATTR:host"]
    assert dest != source

    listed = c.call("GET", f"/os-migrations?instance_uuid={uuid}")
    assert listed.status_code == 200, listed.text
    [m] = listed.json()["migrations"]
    assert (m["instance_uuid"], m["source_compute"], m["dest_compute"]) == (uuid, source, dest)
    assert m["status"] == "confirmed" and "migration_type" not in m and "uuid" not in m
    newer = c.call("GET", f"/os-migrations?instance_uuid={uuid}", version="2.59").json()["migrations"]
    assert newer[0]["migration_type"] == "migration" and newer[0]["uuid"] == m["id"]
    assert "links" not in newer[0]  # only a live migration under way links to itself
    # The filters: by type, by source, by host (either end), by status.
    for query, count in [
        ("migration_type=migration", 1),
        ("migration_type=live-migration", 0),
        (f"source_compute={source}", 1),
        (f"source_compute={dest}", 0),
        (f"host={dest}", 1),
        ("status=error", 0),
    ]:
        found = c.call("GET", f"/os-migrations?instance_uuid={uuid}&{query}").json()["migrations"]
        assert len(found) == count, query
    # 2.59's pages and times.
    page = c.call("GET", "/os-migrations?limit=1", version="2.59").json()
    assert len(page["migrations"]) == 1 and "marker=" in page["migrations_links"][0]["href"]
    later = c.call("GET", "/os-migrations?changes-since=2999-01-01T00:00:00Z", version="2.59")
    assert later.json() == {"migrations": []}
    before = c.call("GET", "/os-migrations?changes-before=2000-01-01T00:00:00Z", version="2.66")
    assert before.json() == {"migrations": []}
    assert c.call("GET", "/os-migrations?marker=nope", version="2.59").status_code == 400
    assert c.call("GET", "/os-migrations?bogus=1", version="2.59").status_code == 400
    assert c.call("GET", "/os-migrations?bogus=1").status_code == 200  # before 2.59 Nova takes any
    # The server's live migrations under way: none (a cold one is not listed there).
    assert c.call("GET", f"/servers/{uuid}/migrations", version="2.23").json() == {"migrations": []}
    assert c.call("GET", f"/servers/{uuid}/migrations/{m['id']}", version="2.23").status_code == 404
    assert c.call("GET", f"/servers/{uuid}/migrations", version="2.22").status_code == 404


def test_a_member_may_not_list_migrations(cloud: ResourcesCloud) -> None:
    refused = cloud.call("GET", "/os-migrations", "bob")
    assert refused.status_code == 403 and "forbidden" in refused.json()


# ---------------------------------------------------------------- who may ask


def _routes(uuid: str) -> list[tuple[str, str, Any]]:
    zero = "00000000-0000-0000-0000-000000000000"
    return [
        ("GET", f"/servers/{uuid}/os-volume_attachments", None),
        ("GET", f"/servers/{uuid}/os-volume_attachments/{zero}", None),
        ("POST", f"/servers/{uuid}/os-volume_attachments", {"volumeAttachment": {"volumeId": zero}}),
        ("DELETE", f"/servers/{uuid}/os-volume_attachments/{zero}", None),
        ("GET", f"/servers/{uuid}/os-interface", None),
        ("GET", f"/servers/{uuid}/os-interface/{zero}", None),
        ("GET", f"/servers/{uuid}/migrations", None),
        ("GET", f"/servers/{uuid}/migrations/{zero}", None),
    ]


def test_another_projects_server_is_not_found_on_every_route(cloud: ResourcesCloud) -> None:
    c = cloud
    server = c.boot("theirs-1")
    for method, path, body in _routes(server["id"]):
        answer = c.call(method, path, "bob", body, version="2.79")
        assert answer.status_code == 404, (method, path, answer.text)


def test_no_token_is_401_on_every_route(cloud: ResourcesCloud) -> None:
    c = cloud
    server = c.boot("anon-1")
    for method, path, body in [*_routes(server["id"]), ("GET", "/os-migrations", None)]:
        answer = c.call(method, path, None, body, version="2.79")
        assert answer.status_code == 401, (method, path, answer.text)


# ---------------------------------------------------------------- the openstack command


def test_the_openstack_command_lists_volumes_and_migrations(sqlite_cloud: ResourcesCloud) -> None:
    c = sqlite_cloud
    server = c.boot("cli-1")
    uuid = server["id"]
    vol = c.volume("cli-data", server["OS-EXT-SRV-ATTR:host"])
    path = f"/servers/{uuid}/os-volume_attachments"
    assert c.call("POST", path, body={"volumeAttachment": {"volumeId": vol["id"]}}).status_code == 200
    admin = os_env(c.served)

    def run(*args: str) -> Any:
        done = openstack(admin, *args, "-f", "json")
        assert done.returncode == 0, (args, done.stderr)
        return json.loads(done.stdout)

    [row] = run("server", "volume", "list", "cli-1")
    assert (row["Volume ID"], row["Server ID"]) == (vol["id"], uuid)
    assert row["Device"].startswith("/dev/vd") and row["Delete On Termination?"] is False
    assert c.call("DELETE", f"{path}/{vol['id']}").status_code == 202
    c.wait_for(lambda: run("server", "volume", "list", "cli-1") == [], "detached")

    assert c.call("POST", f"/servers/{uuid}/action", body={"migrate": None}).status_code == 202
    c.wait_for(lambda: c.server(uuid)["status"] == "VERIFY_RESIZE", "VERIFY_RESIZE")
    assert c.call("POST", f"/servers/{uuid}/action", body={"confirmResize": None}).status_code in (202, 204)
    c.wait_for(lambda: c.server(uuid)["status"] == "ACTIVE", "ACTIVE")
    moves = run("server", "migration", "list", "--server", "cli-1")
    assert [(m["Server UUID"], m["Status"], m["Type"]) for m in moves] == [(uuid, "confirmed", "migration")]
