"""Compute v2.1's read side through a real ``novakit serve``: the real ``openstack`` command,
openstacksdk, and the HTTP answers of ``/compute`` for an admin, a member and another
project's member.

One service per back end for the module. Its servers are booted through the library (the fake
driver) on the served database, under the Keystone project ids the tokens carry: three of the
admin project's (one booted by its member alice), one of project ``other`` (bob's). The
``openstack`` command runs on SQLite only (what it reads is the same on both back ends); the
listing's pages and the SDK's run on both.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from novakit.context import RequestContext
from novakit.network import networks, subnets
from tests.functional.cloud import boot, make_cloud
from tests.functional.service.conftest import (
    OPENSTACK,
    Served,
    add_user,
    identity_session,
    os_env,
    serve_cloud,
)

pytestmark = pytest.mark.xdist_group("service_compute")

MAX = "2.79"
SERVER_PLACEHOLDER = "00000000-0000-0000-0000-000000000000"
#: every route of this slice (401 without a token on each)
ROUTES = [
    "/compute/v2.1/servers",
    "/compute/v2.1/servers/detail",
    f"/compute/v2.1/servers/{SERVER_PLACEHOLDER}",
    f"/compute/v2.1/servers/{SERVER_PLACEHOLDER}/os-instance-actions",
    f"/compute/v2.1/servers/{SERVER_PLACEHOLDER}/os-instance-actions/req-x",
    "/compute/v2.1/flavors",
    "/compute/v2.1/flavors/detail",
    "/compute/v2.1/flavors/1",
    "/compute/v2.1/flavors/1/os-extra_specs",
    "/compute/v2.1/limits",
    "/compute/v2.1/os-hypervisors",
    "/compute/v2.1/os-hypervisors/detail",
    "/compute/v2.1/os-availability-zone",
    "/compute/v2.1/os-availability-zone/detail",
    "/compute/v2.1/os-services",
]


@dataclass
class ComputeCloud:
    served: Served
    admin_project: str
    other_project: str
    #: name -> id of the admin project's servers, and of project other's
    mine: dict[str, str]
    theirs: dict[str, str]
    alice_password: str
    bob_password: str
    #: a deleted server of the admin project
    gone: str

    #: one token per user for the module (a password's check costs a slow hash)
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str = "admin") -> str:
        if who not in self.tokens:
            if who == "admin":
                self.tokens[who] = self.served.issue()
            elif who == "alice":
                self.tokens[who] = self.served.issue("alice", self.alice_password, "admin")
            else:
                self.tokens[who] = self.served.issue("bob", self.bob_password, "other")
        return self.tokens[who]

    def get(self, path: str, who: str = "admin", version: str | None = None, **params: Any) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who)}
        if version is not None:
            headers["OpenStack-API-Version"] = f"compute {version}"
        with self.served.client() as http:
            return http.get(path, headers=headers, params=params)


def _ids(served: Served, token: str) -> tuple[str, str]:
    body = served.validate(token).json()["token"]
    return body["user"]["id"], body["project"]["id"]


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComputeCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "compute") as served:
        tokens = {"admin": served.issue()}
        admin_user, admin_project = _ids(served, tokens["admin"])
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "alice", "alice-pw-1", project="admin")
        add_user(served, "bob", "bob-pw-1", project="other")
        tokens["alice"] = served.issue("alice", "alice-pw-1", "admin")
        tokens["bob"] = served.issue("bob", "bob-pw-1", "other")
        alice_user, _ = _ids(served, tokens["alice"])
        bob_user, other_project = _ids(served, tokens["bob"])
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            admin = RequestContext(project_id=admin_project, user_id=admin_user, roles=["admin"])
            alice = RequestContext(project_id=admin_project, user_id=alice_user, roles=["member"])
            bob = RequestContext(project_id=other_project, user_id=bob_user, roles=["member"])
            networks.create(db, lib.admin, {"name": "lan"})
            subnets.create(db, lib.admin, {"name": "lan-v4", "network": "lan", "cidr": "10.0.0.0/24"})
            mine = {n: boot(lib, ctx, n)["id"] for n, ctx in (("web-1", admin), ("web-2", alice))}
            mine["db-1"] = boot(lib, admin, "db-1", networks=[{"net_id": "lan"}])["id"]
            theirs = {"bob-1": boot(lib, bob, "bob-1")["id"]}
            lib.api.act(admin, "web-2", "stop")
            gone = boot(lib, admin, "gone-1")["id"]
            lib.api.act(admin, gone, "delete")
        finally:
            db.dispose()
        yield ComputeCloud(
            served, admin_project, other_project, mine, theirs, "alice-pw-1", "bob-pw-1", gone, tokens
        )


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: ComputeCloud) -> ComputeCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command reads the same on both back ends: SQLite only")
    return cloud


# ------------------------------------------------------------------ HTTP


def test_version_documents(cloud: ComputeCloud) -> None:
    """nova-api's root and v2.1 documents (no token needed), as keystoneauth's discovery reads them."""
    with cloud.served.client() as http:
        root = http.get("/compute")
        single = http.get("/compute/v2.1/")
        bare = http.get("/compute/v2.1")
    assert root.status_code == 200
    by_id = {v["id"]: v for v in root.json()["versions"]}
    assert by_id["v2.1"]["status"] == "CURRENT"
    assert (by_id["v2.1"]["version"], by_id["v2.1"]["min_version"]) == (MAX, "2.1")
    assert by_id["v2.1"]["links"][0]["href"] == f"{cloud.served.url}/compute/v2.1/"
    assert by_id["v2.0"]["status"] == "SUPPORTED"
    assert single.json() == bare.json()
    assert single.json()["version"]["id"] == "v2.1"
    assert single.headers["openstack-api-version"] == "compute 2.1"


@pytest.mark.parametrize("path", ROUTES)
def test_every_route_needs_a_token(sqlite_cloud: ComputeCloud, path: str) -> None:
    with sqlite_cloud.served.client() as http:
        missing = http.get(path)
        wrong = http.get(path, headers={"X-Auth-Token": "gAAAAAnot-a-token"})
    for answer in (missing, wrong):
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["code"] == 401  # keystonemiddleware's shape, as before Nova


def test_microversion_headers_and_406(sqlite_cloud: ComputeCloud) -> None:
    token = sqlite_cloud.token()
    server = sqlite_cloud.mine["web-1"]
    with sqlite_cloud.served.client() as http:

        def show(**headers: str) -> httpx.Response:
            return http.get(f"/compute/v2.1/servers/{server}", headers={"X-Auth-Token": token, **headers})

        default = show()
        new = show(**{"OpenStack-API-Version": "compute 2.47"})
        legacy = show(**{"X-OpenStack-Nova-API-Version": "2.9"})
        latest = show(**{"OpenStack-API-Version": "compute latest"})
        too_new = show(**{"OpenStack-API-Version": "compute 2.80"})
        too_old = show(**{"X-OpenStack-Nova-API-Version": "2.0"})
        garbage = show(**{"OpenStack-API-Version": "compute 2.x"})
    assert default.headers["openstack-api-version"] == "compute 2.1"
    assert default.headers["x-openstack-nova-api-version"] == "2.1"
    assert "OpenStack-API-Version" in default.headers["vary"]
    assert "X-OpenStack-Nova-API-Version" in default.headers["vary"]
    # 2.1: the flavor by id and link, no "locked"; 2.47: the flavor itself
    assert set(default.json()["server"]["flavor"]) == {"id", "links"}
    assert "locked" not in default.json()["server"]
    assert new.headers["openstack-api-version"] == "compute 2.47"
    assert new.json()["server"]["flavor"]["original_name"] == "m1.small"
    assert new.json()["server"]["flavor"]["ram"] == 1024
    assert legacy.headers["x-openstack-nova-api-version"] == "2.9"
    assert legacy.json()["server"]["locked"] is False
    assert latest.headers["openstack-api-version"] == f"compute {MAX}"
    for refused in (too_new, too_old):
        assert refused.status_code == 406
        assert refused.json()["computeFault"]["code"] == 406
        assert f"maximum is {MAX}" in refused.json()["computeFault"]["message"]
    assert garbage.status_code == 400
    assert "badRequest" in garbage.json()


def test_a_member_sees_its_project_only(sqlite_cloud: ComputeCloud) -> None:
    """Another project's server is not found (404 in Nova's shape) on show and on its actions;
    the listings hold the caller's project only; the admin-only routes answer 403 (the policy)."""
    c = sqlite_cloud
    theirs = c.theirs["bob-1"]
    for path in (
        f"/compute/v2.1/servers/{theirs}",
        f"/compute/v2.1/servers/{theirs}/os-instance-actions",
    ):
        answer = c.get(path, "alice")
        assert answer.status_code == 404, answer.text
        assert answer.json()["itemNotFound"]["code"] == 404
    actions = c.get(f"/compute/v2.1/servers/{theirs}/os-instance-actions", "bob").json()["instanceActions"]
    hidden = c.get(f"/compute/v2.1/servers/{theirs}/os-instance-actions/{actions[0]['request_id']}", "alice")
    assert hidden.status_code == 404
    listed = {s["id"] for s in c.get("/compute/v2.1/servers/detail", "alice").json()["servers"]}
    assert listed == set(c.mine.values())
    assert {s["id"] for s in c.get("/compute/v2.1/servers", "bob").json()["servers"]} == {theirs}
    everyone = c.get("/compute/v2.1/servers", "admin", all_tenants="1").json()["servers"]
    assert {s["id"] for s in everyone} == set(c.mine.values()) | {theirs}
    for path, params in (
        ("/compute/v2.1/os-hypervisors", {}),
        ("/compute/v2.1/os-services", {}),
        ("/compute/v2.1/os-availability-zone/detail", {}),
        ("/compute/v2.1/servers", {"all_tenants": "true"}),
    ):
        refused = c.get(path, "alice", **params)
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["forbidden"]["code"] == 403


def test_server_views_for_admin_and_member(sqlite_cloud: ComputeCloud) -> None:
    c = sqlite_cloud
    web2 = c.mine["web-2"]
    admin = c.get(f"/compute/v2.1/servers/{web2}", "admin", MAX).json()["server"]
    member = c.get(f"/compute/v2.1/servers/{web2}", "alice", MAX).json()["server"]
    assert admin["OS-EXT-SRV-ATTR:host"].startswith("compute-")
    assert admin["host_status"] == "UP"
    assert not any(k.startswith("OS-EXT-SRV-ATTR:") for k in member)
    assert "host_status" not in member
    for view in (admin, member):
        assert view["status"] == "SHUTOFF"
        assert view["OS-EXT-STS:vm_state"] == "stopped"
        assert view["tenant_id"] == c.admin_project
        assert view["hostId"] and view["hostId"] == admin["hostId"]
        assert (view["tags"], view["description"], view["locked"]) == ([], None, False)
        assert view["created"].endswith("Z")
    # ... and a listing's detail shows the same server the same way
    detail = c.get("/compute/v2.1/servers/detail", "alice", MAX, name="^web-2$").json()["servers"]
    assert [s["id"] for s in detail] == [web2]
    assert detail[0]["flavor"] == member["flavor"]
    for key in ("addresses", "security_groups", "image", "hostId", "OS-EXT-AZ:availability_zone"):
        assert detail[0].get(key) == member.get(key), key
    assert c.get("/compute/v2.1/servers", "alice", status="SHUTOFF").json()["servers"][0]["id"] == web2
    assert c.get("/compute/v2.1/servers", "alice", status="nonsense").status_code == 400
    assert c.get("/compute/v2.1/servers", "alice", tags="red").json()["servers"] == []
    # changes-since lists the servers changed since, deleted ones too (DELETED)
    since = c.get("/compute/v2.1/servers/detail", "alice", **{"changes-since": "2000-01-01T00:00:00Z"})
    statuses = {s["id"]: s["status"] for s in since.json()["servers"]}
    assert statuses[c.gone] == "DELETED" and set(statuses) == {*c.mine.values(), c.gone}


def test_addresses_and_security_groups(sqlite_cloud: ComputeCloud) -> None:
    """A server with a port: its fixed IP under its network's name with the port's MAC, and the
    groups its port carries, alike in show and in a listing's detail."""
    c = sqlite_cloud
    db1 = c.mine["db-1"]
    shown = c.get(f"/compute/v2.1/servers/{db1}", "alice").json()["server"]
    (address,) = shown["addresses"]["lan"]
    assert address["addr"].startswith("10.0.0.") and address["version"] == 4
    assert address["OS-EXT-IPS:type"] == "fixed" and len(address["OS-EXT-IPS-MAC:mac_addr"]) == 17
    assert shown["security_groups"] == [{"name": "default"}]
    detail = c.get("/compute/v2.1/servers/detail", "alice", name="^db-1$").json()["servers"]
    assert [(s["addresses"], s["security_groups"]) for s in detail] == [
        (shown["addresses"], shown["security_groups"])
    ]


def test_pages_and_the_next_link(cloud: ComputeCloud) -> None:
    """``limit``/``marker`` and ``servers_links``: following the next links lists every server
    once, in the order asked for; an unknown marker answers 400 (Nova's)."""
    c = cloud
    seen: list[str] = []
    page = c.get("/compute/v2.1/servers/detail", "alice", limit=2, sort_key="display_name", sort_dir="asc")
    pages = 0
    while True:
        assert page.status_code == 200, page.text
        body = page.json()
        seen += [s["name"] for s in body["servers"]]
        pages += 1
        links = body.get("servers_links") or []
        if not links:
            break
        href = urlsplit(links[0]["href"])
        assert href.path == "/compute/v2.1/servers/detail"
        with c.served.client() as http:
            page = http.get(f"{href.path}?{href.query}", headers={"X-Auth-Token": c.token("alice")})
    assert seen == sorted(c.mine)
    assert pages == 2
    unknown = c.get("/compute/v2.1/servers", "alice", marker=SERVER_PLACEHOLDER)
    assert unknown.status_code == 400
    assert unknown.json()["badRequest"]["code"] == 400


def test_flavors_limits_zones_and_actions(sqlite_cloud: ComputeCloud) -> None:
    c = sqlite_cloud
    flavors = c.get("/compute/v2.1/flavors/detail", "alice", MAX).json()["flavors"]
    assert [f["name"] for f in flavors] == ["m1.small", "m1.large"]
    assert flavors[0]["ram"] == 1024 and flavors[0]["description"] is None
    assert c.get("/compute/v2.1/flavors", "alice", minRam="2048").json()["flavors"][0]["name"] == "m1.large"
    specs = c.get(f"/compute/v2.1/flavors/{flavors[0]['id']}/os-extra_specs", "alice").json()
    assert specs == {"extra_specs": {}}
    assert c.get("/compute/v2.1/flavors/no-such", "alice").json()["itemNotFound"]["code"] == 404
    absolute = c.get("/compute/v2.1/limits", "alice", MAX).json()["limits"]["absolute"]
    assert absolute["totalInstancesUsed"] == 3
    assert absolute["totalCoresUsed"] == 3 and absolute["totalRAMUsed"] == 3 * 1024
    assert "maxPersonality" not in absolute and "maxSecurityGroups" not in absolute
    assert "maxPersonality" in c.get("/compute/v2.1/limits", "alice").json()["limits"]["absolute"]
    zones = c.get("/compute/v2.1/os-availability-zone", "alice").json()["availabilityZoneInfo"]
    assert zones == [{"zoneName": "nova", "zoneState": {"available": True}, "hosts": None}]
    detail = c.get("/compute/v2.1/os-availability-zone/detail", "admin").json()["availabilityZoneInfo"]
    assert sorted(detail[0]["hosts"]) == ["compute-1", "compute-2", "compute-3"]
    services = c.get("/compute/v2.1/os-services", "admin", MAX).json()["services"]
    assert {s["host"] for s in services} == {"compute-1", "compute-2", "compute-3"}
    assert all(len(s["id"]) == 36 and s["state"] == "up" for s in services)
    web2 = c.mine["web-2"]
    actions = c.get(f"/compute/v2.1/servers/{web2}/os-instance-actions", "alice").json()["instanceActions"]
    assert [a["action"] for a in actions] == ["stop", "create"]
    one = c.get(f"/compute/v2.1/servers/{web2}/os-instance-actions/{actions[0]['request_id']}", "alice", MAX)
    assert one.json()["instanceAction"]["events"], one.text
    # a deleted server's actions: from 2.21 (before, it is not found, as its show)
    gone = f"/compute/v2.1/servers/{c.gone}/os-instance-actions"
    assert c.get(gone, "alice").status_code == 404
    listed = c.get(gone, "alice", "2.21").json()["instanceActions"]
    assert [a["action"] for a in listed] == ["delete", "create"]


# ------------------------------------------------------------------ real clients


def _openstack(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """The command started (not waited for: the test runs its commands side by side)."""
    return subprocess.Popen(
        [str(OPENSTACK), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _json(running: subprocess.Popen[str]) -> Any:
    out, err = running.communicate(timeout=120)
    assert running.returncode == 0, (running.args, err)
    return json.loads(out)


def test_the_openstack_command(sqlite_cloud: ComputeCloud) -> None:
    """The unpatched ``openstack`` command, as a member (alice) and as the admin; a member's
    ``hypervisor list`` fails with the policy's 403."""
    c = sqlite_cloud
    admin = os_env(c.served)
    alice = os_env(c.served, "alice", c.alice_password)
    run = {
        "flavors": _openstack(alice, "flavor", "list", "-f", "json"),
        "flavor": _openstack(alice, "flavor", "show", "m1.large", "-f", "json"),
        "servers": _openstack(alice, "server", "list", "--long", "-f", "json"),
        "server": _openstack(alice, "server", "show", "web-2", "-f", "json"),
        "limits": _openstack(alice, "limits", "show", "--absolute", "-f", "json"),
        "hypervisors": _openstack(admin, "hypervisor", "list", "-f", "json"),
        "services": _openstack(admin, "compute", "service", "list", "-f", "json"),
        "refused": _openstack(alice, "hypervisor", "list"),
        "zones": _openstack(alice, "availability", "zone", "list", "--compute", "-f", "json"),
        "events": _openstack(alice, "server", "event", "list", "web-2", "-f", "json"),
    }
    flavors = _json(run["flavors"])
    assert {f["Name"]: f["RAM"] for f in flavors} == {"m1.small": 1024, "m1.large": 8192}
    shown = _json(run["flavor"])
    assert (shown["vcpus"], shown["disk"]) == (4, 40)
    servers = _json(run["servers"])
    statuses = {s["Name"]: s["Status"] for s in servers}
    assert statuses == {"web-1": "ACTIVE", "web-2": "SHUTOFF", "db-1": "ACTIVE"}
    assert all(s["Flavor"] == "m1.small" for s in servers)
    server = _json(run["server"])
    assert (server["id"], server["status"]) == (c.mine["web-2"], "SHUTOFF")
    # openstacksdk's names for maxTotalInstances, totalInstancesUsed, ...
    limits = {r["Name"]: r["Value"] for r in _json(run["limits"])}
    assert (limits["max_total_instances"], limits["total_instances_used"]) == (10, 3)
    assert limits["total_cores_used"] == 3
    hypervisors = _json(run["hypervisors"])
    assert sorted(h["Hypervisor Hostname"] for h in hypervisors) == ["compute-1", "compute-2", "compute-3"]
    services = _json(run["services"])
    assert sorted((s["Host"], s["State"]) for s in services) == [(f"compute-{i}", "up") for i in (1, 2, 3)]
    _, err = run["refused"].communicate(timeout=120)
    assert run["refused"].returncode != 0, err
    assert "403" in err and "Policy does not allow host:list" in err, err
    zones = _json(run["zones"])
    assert [(z["Zone Name"], z["Zone Status"]) for z in zones] == [("nova", "available")]
    events = _json(run["events"])
    assert sorted(e["Action"] for e in events) == ["create", "stop"]


def test_openstacksdk(cloud: ComputeCloud) -> None:
    import openstack

    c = cloud
    conn = openstack.connect(
        auth_url=f"{c.served.url}/identity/v3",
        username="alice",
        password=c.alice_password,
        project_name="admin",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        interface="public",
    )
    try:
        listed = {s.id: s for s in conn.compute.servers(details=True)}
        assert {s.name for s in listed.values()} == set(c.mine)
        one = conn.compute.get_server(c.mine["web-1"])
        assert (one.id, one.name, one.status) == (c.mine["web-1"], "web-1", "ACTIVE")
        assert one.flavor["original_name"] == listed[one.id].flavor["original_name"] == "m1.small"
        assert one.project_id == c.admin_project
    finally:
        conn.close()


def test_no_secret_in_the_log(cloud: ComputeCloud) -> None:
    """Last in the module: no password or token the tests handed the service is in its log. It
    makes a request of its own first (it leans on no other test having run in this process)."""
    assert cloud.get("/compute/v2.1/servers", "alice").status_code == 200
    log = cloud.served.log.read_text()
    assert "/compute/v2.1/servers" in log
    leaked = [s for s in cloud.served.secrets if s in log]
    assert not leaked
