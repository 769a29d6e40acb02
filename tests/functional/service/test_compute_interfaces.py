"""A server's interfaces attached and detached through a real ``novakit serve`` (Nova's
``POST`` and ``DELETE`` of ``os-interface``): by port and by network, answered 200 and 202, the
listing and the instance actions, every refusal answered with Nova's status before anything is
written, by plain HTTP on both back ends and the real ``openstack`` command on SQLite.

One service per back end for the module, on the fake driver's hosts (``tests.functional.cloud``),
servers booted only through the service; ports are made by the library in the admin token's
Keystone project.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from novakit import exceptions
from novakit.catalog import flavors, images
from novakit.context import RequestContext
from novakit.network import networks, ports, subnets
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

pytestmark = pytest.mark.xdist_group("service_interfaces")


@dataclass
class InterfacesCloud:
    served: Served
    lib: Cloud
    owner: RequestContext  # the admin token's Keystone project and user
    flavor: str
    image: str
    network: str
    lan2: str
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str = "admin") -> str:
        if who not in self.tokens:
            if who == "admin":
                self.tokens[who] = self.served.issue()
            elif who == "carol":
                self.tokens[who] = self.served.issue("carol", "carol-pw-1", "admin")
            else:
                self.tokens[who] = self.served.issue("bob", "bob-pw-1", "other")
        return self.tokens[who]

    def call(
        self, method: str, path: str, who: str | None = "admin", body: Any = None, version: str | None = None
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who)} if who is not None else {}
        if version is not None:
            headers["OpenStack-API-Version"] = f"compute {version}"
        with self.served.client() as http:
            return http.request(method, f"/compute/v2.1{path}", headers=headers, json=body)

    def boot(self, name: str) -> dict[str, Any]:
        server = {
            "name": name,
            "flavorRef": self.flavor,
            "imageRef": self.image,
            "networks": [{"uuid": self.network}],
        }
        made = self.call("POST", "/servers", "admin", {"server": server})
        assert made.status_code == 202, made.text
        uuid = made.json()["server"]["id"]
        self.wait_for(lambda: self.server(uuid)["status"] == "ACTIVE", f"{name} ACTIVE")
        return self.server(uuid)

    def server(self, uuid: str) -> dict[str, Any]:
        answer = self.call("GET", f"/servers/{uuid}", version="2.79")
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["server"])

    def port(self, name: str, ctx: RequestContext | None = None) -> dict[str, Any]:
        made = ports.create(self.lib.db, ctx or self.owner, {"name": name, "network": "lan2"})
        assert made is not None
        return made

    def nics(self, uuid: str) -> list[dict[str, Any]]:
        listed = self.call("GET", f"/servers/{uuid}/os-interface")
        assert listed.status_code == 200, listed.text
        return list(listed.json()["interfaceAttachments"])

    def actions(self, uuid: str) -> list[str]:
        listed = self.call("GET", f"/servers/{uuid}/os-instance-actions")
        assert listed.status_code == 200, listed.text
        return [a["action"] for a in listed.json()["instanceActions"]]

    @staticmethod
    def wait_for(check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.1)
        raise AssertionError(f"not {what} after 60 s")


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InterfacesCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "interfaces") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "bob", "bob-pw-1", project="other")
        add_user(served, "carol", "carol-pw-1", project="admin")
        served.secrets += ["bob-pw-1", "carol-pw-1"]
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            owner = keystone_admin(served)
            net = make_lan(db, owner)
            lan2 = networks.create(db, owner, {"name": "lan2"})
            subnets.create(db, owner, {"name": "lan2-v4", "network": "lan2", "cidr": "10.0.1.0/24"})
            flavor = flavors.show(db, lib.admin, "m1.small")["id"]
            image = images.show(db, lib.admin, "tiny")["id"]
            yield InterfacesCloud(served, lib, owner, flavor, image, net, str(lan2["id"]))
        finally:
            db.dispose()


def test_a_port_and_a_network_are_attached_listed_and_detached(cloud: InterfacesCloud) -> None:
    c = cloud
    uuid = c.boot("if-1")["id"]
    given = c.port("if-given")
    path = f"/servers/{uuid}/os-interface"
    attached = c.call("POST", path, body={"interfaceAttachment": {"port_id": given["id"]}})
    assert attached.status_code == 200, attached.text
    nic = attached.json()["interfaceAttachment"]
    assert (nic["port_id"], nic["net_id"], nic["port_state"]) == (given["id"], c.lan2, "ACTIVE")
    assert nic["mac_addr"] == given["mac_address"] and set(nic) == {
        "port_id", "net_id", "mac_addr", "port_state", "fixed_ips"
    }  # fmt: skip
    body = {"interfaceAttachment": {"net_id": c.lan2, "fixed_ips": [{"ip_address": "10.0.1.40"}]}}
    made = c.call("POST", path, body=body, version="2.70")
    assert made.status_code == 200, made.text
    new = made.json()["interfaceAttachment"]
    assert [ip["ip_address"] for ip in new["fixed_ips"]] == ["10.0.1.40"] and new["tag"] is None
    assert len(c.nics(uuid)) == 3
    shown = c.call("GET", f"{path}/{new['port_id']}")
    assert shown.status_code == 200 and shown.json()["interfaceAttachment"]["port_id"] == new["port_id"]

    for port_id in (new["port_id"], given["id"]):
        gone = c.call("DELETE", f"{path}/{port_id}")
        assert gone.status_code == 202, gone.text
        c.wait_for(lambda port_id=port_id: port_id not in {n["port_id"] for n in c.nics(uuid)}, "detached")
    # The port the attach made went with it; the one given is kept, free.
    with pytest.raises(exceptions.PortNotFound):
        ports.show(c.lib.db, c.owner, new["port_id"])
    assert ports.show(c.lib.db, c.owner, given["id"])["device_id"] is None
    assert c.actions(uuid).count("attach_interface") == 2
    assert c.actions(uuid).count("detach_interface") == 2


@pytest.mark.parametrize(
    ("body", "version", "field"),
    [
        ({}, None, "interfaceAttachment"),
        ({"interfaceAttachment": {}}, None, "port_id"),
        ({"interfaceAttachment": {"port_id": "@", "net_id": "lan2"}}, None, "port_id"),
        ({"interfaceAttachment": {"port_id": "@", "bogus": 1}}, None, "interfaceAttachment.bogus"),
        ({"interfaceAttachment": {"port_id": "@", "tag": "eth1"}}, None, "interfaceAttachment.tag"),
        ({"interfaceAttachment": {"port_id": "@", "tag": "eth1"}}, "2.49", "interfaceAttachment.tag"),
        ({"interfaceAttachment": {"port_id": 7}}, None, "interfaceAttachment.port_id"),
        (
            {
                "interfaceAttachment": {
                    "net_id": "lan2",
                    "fixed_ips": [{"ip_address": "a"}, {"ip_address": "b"}],
                }
            },
            None,
            "interfaceAttachment.fixed_ips",
        ),
        (
            {"interfaceAttachment": {"port_id": "@", "fixed_ips": [{"ip_address": "10.0.1.9"}]}},
            None,
            "fixed_ips",
        ),
    ],
)
def test_a_bad_body_is_400_and_writes_nothing(
    cloud: InterfacesCloud, body: dict[str, Any], version: str | None, field: str
) -> None:
    c = cloud
    uuid = _spare(c)
    free = _free_port(c)
    given = json.loads(json.dumps(body).replace('"@"', json.dumps(free["id"])))
    before = c.nics(uuid)
    refused = c.call("POST", f"/servers/{uuid}/os-interface", body=given, version=version)
    assert refused.status_code == 400, refused.text
    assert field in refused.json()["badRequest"]["message"]
    assert c.nics(uuid) == before
    assert ports.show(c.lib.db, c.owner, free["id"])["device_id"] is None


_SPARE: dict[str, str] = {}


def _spare(c: InterfacesCloud) -> str:
    """One server for the refusals (booting costs seconds)."""
    key = c.served.db_url
    if key not in _SPARE:
        _SPARE[key] = c.boot("if-spare")["id"]
    return _SPARE[key]


def _free_port(c: InterfacesCloud) -> dict[str, Any]:
    found = [p for p in ports.list_ports(c.lib.db, c.owner, network="lan2") if p["name"] == "if-free"]
    return found[0] if found else c.port("if-free")


def test_refusals_answer_novas_codes_and_change_nothing(cloud: InterfacesCloud) -> None:
    c = cloud
    uuid = _spare(c)
    path = f"/servers/{uuid}/os-interface"
    free = _free_port(c)
    theirs = c.port("if-theirs", RequestContext("someone-else", "eve", ["member"]))
    busy = c.boot("if-busy")
    busy_port = c.nics(busy["id"])[0]["port_id"]
    zero = "00000000-0000-0000-0000-000000000000"
    before = c.nics(uuid)
    for who, body, status in (
        # Another project's port looks like one that does not exist, to a member.
        ("carol", {"port_id": theirs["id"]}, 404),
        # An admin sees it, and is told a server takes its own project's ports.
        ("admin", {"port_id": theirs["id"]}, 400),
        ("admin", {"port_id": zero}, 404),
        ("admin", {"net_id": zero}, 404),
        ("admin", {"port_id": busy_port}, 409),
    ):
        answer = c.call("POST", path, who, body={"interfaceAttachment": body})
        assert answer.status_code == status, (body, answer.text)
    assert c.call("DELETE", f"{path}/{free['id']}").status_code == 404
    assert c.call("DELETE", f"{path}/{busy_port}").status_code == 404
    # Another project's server is not found.
    assert c.call("POST", path, "bob", {"interfaceAttachment": {"port_id": free["id"]}}).status_code == 404
    assert c.call("DELETE", f"{path}/{before[0]['port_id']}", "bob").status_code == 404
    # Locked by the admin: its members are refused (409), the admin may.
    assert c.call("POST", f"/servers/{uuid}/action", body={"lock": None}).status_code == 202
    locked = c.call("POST", path, "carol", {"interfaceAttachment": {"port_id": free["id"]}})
    assert locked.status_code == 409 and "conflictingRequest" in locked.json(), locked.text
    assert c.call("DELETE", f"{path}/{before[0]['port_id']}", "carol").status_code == 409
    assert c.call("POST", f"/servers/{uuid}/action", body={"unlock": None}).status_code == 202
    # Suspended: not a state Nova attaches in (409).
    assert c.call("POST", f"/servers/{uuid}/action", body={"suspend": None}).status_code == 202
    c.wait_for(lambda: c.server(uuid)["status"] == "SUSPENDED", "SUSPENDED")
    wrong = c.call("POST", path, body={"interfaceAttachment": {"port_id": free["id"]}})
    assert wrong.status_code == 409, wrong.text
    assert c.call("DELETE", f"{path}/{before[0]['port_id']}").status_code == 409
    assert c.call("POST", f"/servers/{uuid}/action", body={"resume": None}).status_code == 202
    c.wait_for(lambda: c.server(uuid)["status"] == "ACTIVE", "ACTIVE")
    assert c.nics(uuid) == before
    assert ports.show(c.lib.db, c.owner, free["id"])["device_id"] is None


def test_the_openstack_command_adds_and_removes_ports_and_networks(
    backend: str, cloud: InterfacesCloud
) -> None:
    if backend != "sqlite":
        pytest.skip("the openstack command drives the same service on both back ends: SQLite only")
    c = cloud
    uuid = c.boot("if-cli")["id"]
    given = c.port("if-cli-port")
    admin = os_env(c.served)

    def run(*args: str) -> str:
        done = openstack(admin, *args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    run("server", "add", "port", "if-cli", "if-cli-port")
    assert given["id"] in {n["port_id"] for n in c.nics(uuid)}
    run("server", "remove", "port", "if-cli", "if-cli-port")
    c.wait_for(lambda: given["id"] not in {n["port_id"] for n in c.nics(uuid)}, "port removed")
    run("server", "add", "network", "if-cli", "lan2")
    on_lan2 = [n for n in c.nics(uuid) if n["net_id"] == c.lan2]
    assert len(on_lan2) == 1 and on_lan2[0]["port_state"] == "ACTIVE"
    run("server", "remove", "network", "if-cli", "lan2")
    c.wait_for(lambda: all(n["net_id"] != c.lan2 for n in c.nics(uuid)), "network removed")
    assert len(c.nics(uuid)) == 1
