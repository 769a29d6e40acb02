"""Network v2.0 (Neutron's API, a subset) through a real ``novakit serve``: the real ``openstack``
command and openstacksdk make and list networks, subnets, ports, security groups and their
rules; plain HTTP checks what a caller may see and do (401 without a token, 404 for another
project's resource, 403 for a member on an admin's route), Neutron's codes and error bodies,
and that a refused body writes nothing.

One service per back end for the module; the ``openstack`` command runs on SQLite only (it
drives the same service on both), openstacksdk and the HTTP checks on both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.functional.cloud import make_cloud
from tests.functional.service.conftest import (
    Served,
    add_user,
    identity_session,
    openstack,
    os_env,
    serve_cloud,
)

pytestmark = pytest.mark.xdist_group("network")

ALICE_PW = "alice-net-pw-1"  # a member of the admin project
BOB_PW = "bob-net-pw-1"  # a member of the project "other"


@dataclass
class NetCloud:
    served: Served
    backend: str
    http: httpx.Client
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str) -> str:
        if who not in self.tokens:
            if who == "admin":
                self.tokens[who] = self.served.issue()
            elif who == "alice":
                self.tokens[who] = self.served.issue("alice", ALICE_PW, "admin")
            else:
                self.tokens[who] = self.served.issue("bob", BOB_PW, "other")
        return self.tokens[who]

    def call(
        self, method: str, path: str, who: str | None = "admin", body: Any = None, **params: Any
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who)} if who is not None else {}
        return self.http.request(method, f"/network{path}", headers=headers, json=body, params=params or None)

    def raw(self, method: str, path: str, content: bytes, who: str = "admin") -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who), "Content-Type": "application/json"}
        return self.http.request(method, f"/network{path}", headers=headers, content=content)

    def made(self, collection: str, key: str, body: dict[str, Any], who: str = "admin") -> dict[str, Any]:
        answer = self.call("POST", f"/v2.0/{collection}", who, {key: body})
        assert answer.status_code == 201, answer.text
        made: dict[str, Any] = answer.json()[key]
        return made

    def count(self, collection: str, who: str = "admin") -> int:
        answer = self.call("GET", f"/v2.0/{collection}", who)
        assert answer.status_code == 200, answer.text
        return len(answer.json()[collection.replace("-", "_")])


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "network") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "alice", ALICE_PW, project="admin")
        add_user(served, "bob", BOB_PW, project="other")
        if backend == "sqlite":
            # The fake driver's hosts, a flavor and an image: a server boots through Compute.
            db = served.database()
            try:
                make_cloud(db, directory)
            finally:
                db.dispose()
        with served.client() as http:
            yield NetCloud(served, backend, http)


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: NetCloud) -> NetCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command drives the same service on both back ends: SQLite only")
    return cloud


def _neutron_error(answer: httpx.Response, status: int, kind: str | None = None) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["NeutronError"]
    assert set(error) == {"type", "message", "detail"}
    if kind is not None:
        assert error["type"] == kind, error
    return error


def test_versions_resources_and_extensions(cloud: NetCloud) -> None:
    c = cloud
    versions = c.call("GET", "", None).json()["versions"]
    assert [(v["id"], v["status"]) for v in versions] == [("v2.0", "CURRENT")]
    assert versions[0]["links"][0]["href"] == f"{c.served.url}/network/v2.0/"
    collections = {r["collection"] for r in c.call("GET", "/v2.0", None).json()["resources"]}
    assert {
        "networks",
        "subnets",
        "ports",
        "security-groups",
        "security-group-rules",
        "quotas",
    } <= collections
    assert c.call("GET", "/v2.0/extensions", None).status_code == 401
    aliases = {e["alias"] for e in c.call("GET", "/v2.0/extensions", "alice").json()["extensions"]}
    assert {"security-group", "quotas", "port-security", "binding"} <= aliases
    shown = c.call("GET", "/v2.0/extensions/security-group", "alice").json()["extension"]
    assert shown["alias"] == "security-group"
    _neutron_error(c.call("GET", "/v2.0/extensions/no-such-thing", "alice"), 404)


def test_networks_subnets_and_ports_as_neutron_answers(cloud: NetCloud) -> None:
    c = cloud
    net = c.made("networks", "network", {"name": "blue", "admin_state_up": True})
    admin_project = net["project_id"]
    assert (net["status"], net["shared"], net["tenant_id"], net["subnets"]) == (
        "ACTIVE",
        False,
        admin_project,
        [],
    )
    sub = c.made(
        "subnets",
        "subnet",
        {"name": "blue-v4", "network_id": net["id"], "ip_version": 4, "cidr": "10.30.0.0/29",
         "dns_nameservers": ["10.30.0.1"]},
    )  # fmt: skip
    assert (sub["gateway_ip"], sub["enable_dhcp"], sub["ip_version"]) == ("10.30.0.1", True, 4)
    assert sub["allocation_pools"] == [{"start": "10.30.0.2", "end": "10.30.0.6"}]
    assert c.call("GET", f"/v2.0/networks/{net['id']}", "alice").json()["network"]["subnets"] == [sub["id"]]

    # A member's port on its project's network: fixed IP asked by subnet and address.
    asked = {"subnet_id": sub["id"], "ip_address": "10.30.0.5"}
    port = c.made("ports", "port", {"network_id": net["id"], "name": "p5", "fixed_ips": [asked]}, "alice")
    assert port["fixed_ips"] == [asked] and port["device_id"] == "" and port["tenant_id"] == admin_project
    assert port["mac_address"].startswith("fa:16:3e:") and port["port_security_enabled"] is True
    assert "binding:host_id" not in port  # a member never sees host names
    [default] = c.call("GET", "/v2.0/security-groups", "alice", name="default").json()["security_groups"]
    assert port["security_groups"] == [default["id"]]
    assert "binding:host_id" in c.call("GET", f"/v2.0/ports/{port['id']}").json()["port"]
    # The address taken: 409, Neutron's IpAddressAlreadyAllocated; nothing written.
    again = c.call("POST", "/v2.0/ports", "alice", {"port": {"network_id": net["id"], "fixed_ips": [asked]}})
    _neutron_error(again, 409, "IpAddressAlreadyAllocated")
    # The /29 has five addresses: four more fill it, the next is IpAddressGenerationFailure.
    for n in range(4):
        c.made("ports", "port", {"network_id": net["id"], "name": f"fill-{n}"}, "alice")
    full = c.call("POST", "/v2.0/ports", "alice", {"port": {"network_id": net["id"]}})
    _neutron_error(full, 409, "IpAddressGenerationFailure")

    # Listings: filters by field, fields=, limit/marker paging (the next page in ports_links).
    listed = c.call("GET", "/v2.0/ports", "alice", network_id=net["id"]).json()["ports"]
    assert len(listed) == 5
    only_ip = c.call("GET", "/v2.0/ports", "alice", name="p5", fields=["id", "fixed_ips"]).json()["ports"]
    assert only_ip == [{"id": port["id"], "fixed_ips": [asked]}]
    first = c.call("GET", "/v2.0/ports", "alice", network_id=net["id"], limit=2).json()
    assert len(first["ports"]) == 2 and first["ports_links"][0]["rel"] == "next"
    second = c.call(
        "GET", "/v2.0/ports", "alice", network_id=net["id"], limit=2, marker=first["ports"][-1]["id"]
    )
    assert [p["id"] for p in second.json()["ports"]] == [p["id"] for p in listed[2:4]]
    assert c.call("GET", "/v2.0/ports", "alice", device_id="none-such").json()["ports"] == []

    # Rename, in use, delete.
    renamed = c.call("PUT", f"/v2.0/ports/{port['id']}", "alice", {"port": {"name": "p5-renamed"}})
    assert renamed.status_code == 200 and renamed.json()["port"]["name"] == "p5-renamed"
    _neutron_error(c.call("DELETE", f"/v2.0/networks/{net['id']}"), 409, "NetworkInUse")
    for p in listed:
        assert c.call("DELETE", f"/v2.0/ports/{p['id']}", "alice").status_code == 204
    _neutron_error(c.call("GET", f"/v2.0/ports/{port['id']}", "alice"), 404, "PortNotFound")
    assert c.call("DELETE", f"/v2.0/networks/{net['id']}").status_code == 204
    _neutron_error(c.call("GET", f"/v2.0/networks/{net['id']}"), 404, "NetworkNotFound")
    assert c.call("GET", f"/v2.0/subnets/{sub['id']}").status_code == 404


def test_what_another_project_and_a_member_may_not(cloud: NetCloud) -> None:
    c = cloud
    private = c.made("networks", "network", {"name": "private"})
    shared = c.made("networks", "network", {"name": "common", "shared": True})
    c.made("subnets", "subnet", {"name": "common-v4", "network_id": shared["id"], "cidr": "10.40.0.0/24"})
    port = c.made("ports", "port", {"network_id": private["id"]}, "alice")
    group = c.made("security-groups", "security_group", {"name": "alices"}, "alice")
    # No token: 401, in Keystone's shape (keystonemiddleware's answer).
    for path in ("/v2.0/networks", f"/v2.0/ports/{port['id']}", "/v2.0/security-groups"):
        assert c.call("GET", path, None).status_code == 401
    # Bob (another project) sees the shared network only; the rest is not found.
    names = {n["name"] for n in c.call("GET", "/v2.0/networks", "bob").json()["networks"]}
    assert "common" in names and "private" not in names
    # So does Compute's network proxy (before 2.36), the same listing.
    proxy = {"X-Auth-Token": c.token("bob"), "OpenStack-API-Version": "compute 2.35"}
    labels = {n["label"] for n in c.http.get("/compute/v2.1/os-networks", headers=proxy).json()["networks"]}
    assert "common" in labels and "private" not in labels
    assert c.http.get(f"/compute/v2.1/os-networks/{private['id']}", headers=proxy).status_code == 404
    for path in (
        f"/v2.0/networks/{private['id']}",
        f"/v2.0/ports/{port['id']}",
        f"/v2.0/security-groups/{group['id']}",
    ):
        _neutron_error(c.call("GET", path, "bob"), 404)
        assert c.call("DELETE", path, "bob").status_code == 404
    assert c.call("PUT", f"/v2.0/ports/{port['id']}", "bob", {"port": {"name": "mine"}}).status_code == 404
    refused = c.call("POST", "/v2.0/ports", "bob", {"port": {"network_id": private["id"]}})
    _neutron_error(refused, 404, "NetworkNotFound")
    rule = {"security_group_id": group["id"], "direction": "ingress", "protocol": "tcp"}
    assert (
        c.call("POST", "/v2.0/security-group-rules", "bob", {"security_group_rule": rule}).status_code == 404
    )
    # Bob's port on the shared network is his own.
    bobs = c.made("ports", "port", {"network_id": shared["id"]}, "bob")
    assert bobs["fixed_ips"][0]["ip_address"] == "10.40.0.2"
    assert [p["id"] for p in c.call("GET", "/v2.0/ports", "bob").json()["ports"]] == [bobs["id"]]
    # A member on an admin's route: 403.
    other = bobs["project_id"]
    _neutron_error(c.call("PUT", f"/v2.0/quotas/{other}", "bob", {"quota": {"security_group": 50}}), 403)
    _neutron_error(c.call("POST", "/v2.0/networks", "alice", {"network": {"name": "x"}}), 403)
    _neutron_error(c.call("DELETE", f"/v2.0/networks/{shared['id']}", "bob"), 403)
    # Quotas: anyone reads its own project's, an admin sets them.
    assert c.call("GET", f"/v2.0/quotas/{other}", "bob").json()["quota"]["security_group"] == 10
    set_quota = c.call("PUT", f"/v2.0/quotas/{other}", "admin", {"quota": {"security_group": 50}})
    assert set_quota.status_code == 200 and set_quota.json()["quota"]["security_group"] == 50
    # A project the identity does not know: 400, nothing written (the library's one check).
    unknown = c.call("PUT", "/v2.0/quotas/no-such-project", "admin", {"quota": {"security_group": 50}})
    _neutron_error(unknown, 400)
    assert "not a project of the identity service" in unknown.text
    assert c.call("GET", "/v2.0/quotas/no-such-project", "admin").json()["quota"]["security_group"] == 10
    detail = c.call("GET", f"/v2.0/quotas/{other}/details", "bob").json()["quota"]["security_group"]
    assert detail == {"limit": 50, "used": 1, "reserved": 0}  # bob's default group
    for p in (port, bobs):
        assert c.call("DELETE", f"/v2.0/ports/{p['id']}").status_code == 204


#: bodies Neutron refuses (400): (path, body); NET and SG stand for a network's and a group's id
BAD_BODIES = [
    ("/v2.0/networks", b'{"network": {"name": '),  # not JSON
    ("/v2.0/networks", b'{"network": {"name": "n1", "colour": "red"}}'),  # unknown attribute
    ("/v2.0/networks", b'{"network": {"name": 5}}'),  # wrong type
    ("/v2.0/networks", b'{"network": {"name": "n1", "mtu": 10}}'),  # out of range
    ("/v2.0/networks", b'{"networks": [{"name": "n1"}]}'),  # bulk: not taken
    ("/v2.0/subnets", b'{"subnet": {"name": "s1", "network_id": "NET", "cidr": "10.9.0.0/33"}}'),
    (
        "/v2.0/subnets",
        b'{"subnet": {"name": "s1", "network_id": "NET", "cidr": "10.9.0.0/24", "ip_version": 6}}',
    ),
    ("/v2.0/ports", b'{"port": {"network_id": "NET", "fixed_ips": [{"ip_address": "10.50.0.300"}]}}'),
    ("/v2.0/ports", b'{"port": {"network_id": "NET", "fixed_ips": "10.50.0.3"}}'),
    ("/v2.0/ports", b'{"port": {"network_id": "NET", "admin_state_up": false}}'),
    ("/v2.0/security-groups", b'{"security_group": {"name": "g", "rules": []}}'),
    (
        "/v2.0/security-group-rules",
        b'{"security_group_rule": {"security_group_id": "SG", "port_range_min": 7}}',
    ),
    (
        "/v2.0/security-group-rules",
        b'{"security_group_rule": {"security_group_id": "SG", "direction": "up"}}',
    ),
    (
        "/v2.0/security-group-rules",
        b'{"security_group_rule": {"security_group_id": "SG", "protocol": "tcp", "port_range_min": 70000}}',
    ),
]


def test_a_bad_body_is_refused_with_400_and_nothing_written(cloud: NetCloud) -> None:
    c = cloud
    net = c.made("networks", "network", {"name": "bad-bodies"})
    c.made("subnets", "subnet", {"name": "bad-bodies-v4", "network_id": net["id"], "cidr": "10.50.0.0/24"})
    groups = c.call("GET", "/v2.0/security-groups", name="default").json()["security_groups"]
    collections = ("networks", "subnets", "ports", "security-groups", "security-group-rules")
    before = {coll: c.count(coll) for coll in collections}
    for path, body in BAD_BODIES:
        body = body.replace(b"NET", net["id"].encode()).replace(b"SG", groups[0]["id"].encode())
        error = _neutron_error(c.raw("POST", path, body), 400)
        assert error["message"], body
    assert {coll: c.count(coll) for coll in collections} == before
    assert c.call("DELETE", f"/v2.0/networks/{net['id']}").status_code == 204


def test_openstacksdk_lists_ports(cloud: NetCloud) -> None:
    import openstack

    c = cloud
    net = c.made("networks", "network", {"name": "sdk-net"})
    c.made("subnets", "subnet", {"name": "sdk-v4", "network_id": net["id"], "cidr": "10.60.0.0/24"})
    made = c.made("ports", "port", {"network_id": net["id"], "name": "sdk-port"}, "alice")
    conn = openstack.connect(
        auth_url=f"{c.served.url}/identity/v3",
        username="alice",
        password=ALICE_PW,
        project_name="admin",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        interface="public",
    )
    try:
        listed = list(conn.network.ports(network_id=net["id"]))
        assert [(p.id, p.name, p.fixed_ips) for p in listed] == [
            (
                made["id"],
                "sdk-port",
                [{"subnet_id": made["fixed_ips"][0]["subnet_id"], "ip_address": "10.60.0.2"}],
            )
        ]
        found = conn.network.find_network("sdk-net")
        assert found is not None and found.id == net["id"]
        groups = [g.name for g in conn.network.security_groups()]
        assert "default" in groups
        conn.network.delete_port(made["id"])
        assert list(conn.network.ports(network_id=net["id"])) == []
    finally:
        conn.close()
    assert c.call("DELETE", f"/v2.0/networks/{net['id']}").status_code == 204


def _json(done: Any) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_the_openstack_command(sqlite_cloud: NetCloud) -> None:
    c = sqlite_cloud
    admin, alice = os_env(c.served), os_env(c.served, "alice", ALICE_PW)
    net = _json(openstack(admin, "network", "create", "cli-net", "-f", "json"))
    assert (net["name"], net["status"], net["shared"]) == ("cli-net", "ACTIVE", False)
    sub = _json(
        openstack(admin, "subnet", "create", "--subnet-range", "10.70.0.0/24", "--network", "cli-net",
                  "cli-sub", "-f", "json")
    )  # fmt: skip
    assert (sub["cidr"], sub["gateway_ip"], sub["network_id"]) == ("10.70.0.0/24", "10.70.0.1", net["id"])
    port = _json(
        openstack(alice, "port", "create", "--network", "cli-net", "--fixed-ip",
                  "subnet=cli-sub,ip-address=10.70.0.40", "cli-port", "-f", "json")
    )  # fmt: skip
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.70.0.40"}]
    group = _json(openstack(alice, "security", "group", "create", "cli-sg", "-f", "json"))
    assert group["name"] == "cli-sg"
    rule = _json(
        openstack(alice, "security", "group", "rule", "create", "--protocol", "icmp", "cli-sg", "-f", "json")
    )
    assert (rule["protocol"], rule["direction"], rule["security_group_id"]) == (
        "icmp",
        "ingress",
        group["id"],
    )
    listed = _json(openstack(alice, "network", "list", "-f", "json"))
    assert {"ID": net["id"], "Name": "cli-net", "Subnets": [sub["id"]]} in listed
    ports = _json(openstack(alice, "port", "list", "-f", "json"))
    assert [(p["Name"], p["Fixed IP Addresses"]) for p in ports if p["ID"] == port["id"]] == [
        ("cli-port", [{"subnet_id": sub["id"], "ip_address": "10.70.0.40"}])
    ]
    assert c.call("DELETE", f"/v2.0/ports/{port['id']}", "alice").status_code == 204
    assert _json(openstack(admin, "network", "delete", "cli-net")) is None
    assert c.call("GET", f"/v2.0/networks/{net['id']}").status_code == 404


def test_a_server_booted_through_compute_shows_its_port(sqlite_cloud: NetCloud) -> None:
    c = sqlite_cloud
    net = c.made("networks", "network", {"name": "lan", "shared": True})
    c.made("subnets", "subnet", {"name": "lan-v4", "network_id": net["id"], "cidr": "10.80.0.0/24"})
    c.made("security-groups", "security_group", {"name": "web"}, "alice")
    alice = os_env(c.served, "alice", ALICE_PW)
    server = _json(
        openstack(alice, "server", "create", "--flavor", "m1.small", "--image", "tiny", "--network", "lan",
                  "--security-group", "web", "--wait", "-f", "json", "net-1")
    )  # fmt: skip
    assert server["status"] == "ACTIVE"
    ports = _json(openstack(alice, "port", "list", "--server", "net-1", "-f", "json"))
    assert [p["Fixed IP Addresses"][0]["ip_address"] for p in ports] == ["10.80.0.2"]
    shown = c.call("GET", f"/v2.0/ports/{ports[0]['ID']}", "alice").json()["port"]
    [web] = c.call("GET", "/v2.0/security-groups", "alice", name="web").json()["security_groups"]
    assert (shown["device_id"], shown["device_owner"], shown["security_groups"]) == (
        server["id"],
        "compute:nova",
        [web["id"]],
    )
    # In use by the server: not deleted.
    _neutron_error(c.call("DELETE", f"/v2.0/ports/{shown['id']}", "alice"), 409, "PortInUse")
