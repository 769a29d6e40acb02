"""Compute v2.1's write side through a real ``novakit serve``: create, actions, rename and delete
answered at once (202, 204) with the work done in the service's pool, by the real ``openstack``
command, openstacksdk and plain HTTP; and every refusal answered with Nova's status before
anything is written.

One service per back end for the module, on the fake driver's hosts (``tests.functional.cloud``),
booted only through the service. openstacksdk and the HTTP checks run on both back ends, the
``openstack`` command on SQLite.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from novakit.catalog import flavors, images
from tests.functional.cloud import make_cloud
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

pytestmark = pytest.mark.xdist_group("service_servers")

#: a secret a create hands the service (user data, a password): never in its log
USER_DATA = "#cloud-config\npassword: ud-secret-7f3a\n"
ADMIN_PASS = "admin-pass-9c1e"


@dataclass
class ServersCloud:
    served: Served
    flavor: str  # m1.small's id
    image: str  # tiny's id
    network: str  # lan's id
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str = "admin") -> str:
        if who not in self.tokens:
            if who == "admin":
                self.tokens[who] = self.served.issue()
            elif who == "alice":
                self.tokens[who] = self.served.issue("alice", "alice-pw-1", "admin")
            else:
                self.tokens[who] = self.served.issue("bob", "bob-pw-1", "other")
        return self.tokens[who]

    def call(
        self, method: str, path: str, who: str = "admin", body: Any = None, version: str | None = None
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who)}
        if version is not None:
            headers["OpenStack-API-Version"] = f"compute {version}"
        with self.served.client() as http:
            return http.request(method, f"/compute/v2.1{path}", headers=headers, json=body)

    def create(self, name: str, who: str = "admin", **extra: Any) -> httpx.Response:
        server = {"name": name, "flavorRef": self.flavor, "imageRef": self.image, **extra}
        return self.call("POST", "/servers", who, {"server": server})

    def status(self, server_id: str, who: str = "admin") -> str:
        answer = self.call("GET", f"/servers/{server_id}", who)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["server"]["status"])

    def wait(self, server_id: str, status: str, who: str = "admin") -> None:
        deadline = time.monotonic() + 60
        seen = ""
        while time.monotonic() < deadline:
            seen = self.status(server_id, who)
            if seen == status:
                return
            time.sleep(0.1)
        raise AssertionError(f"server {server_id} is {seen}, not {status}, after 60 s")

    def count(self) -> int:
        answer = self.call("GET", "/servers?all_tenants=1")
        assert answer.status_code == 200, answer.text
        return len(answer.json()["servers"])


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServersCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "servers") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "alice", "alice-pw-1", project="admin")
        add_user(served, "bob", "bob-pw-1", project="other")
        served.secrets += ["alice-pw-1", "bob-pw-1", ADMIN_PASS, "ud-secret-7f3a"]
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            # The network of the admin project as Keystone names it (the tokens' project id).
            net = make_lan(db, keystone_admin(served))
            flavor = flavors.show(db, lib.admin, "m1.small")["id"]
            image = images.show(db, lib.admin, "tiny")["id"]
        finally:
            db.dispose()
        yield ServersCloud(served, flavor, image, net)


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: ServersCloud) -> ServersCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command drives the same service on both back ends: SQLite only")
    return cloud


def test_a_create_is_accepted_at_once_and_built_by_the_service(cloud: ServersCloud) -> None:
    c = cloud
    user_data = base64.b64encode(USER_DATA.encode()).decode()
    answer = c.create(
        "made-1",
        networks=[{"uuid": c.network}],
        user_data=user_data,
        adminPass=ADMIN_PASS,
        metadata={"role": "web"},
    )
    assert answer.status_code == 202, answer.text
    server = answer.json()["server"]
    assert set(server) == {"id", "links", "OS-DCF:diskConfig", "security_groups", "adminPass"}
    assert server["security_groups"] == [{"name": "default"}]
    assert answer.headers["location"].endswith(f"/compute/v2.1/servers/{server['id']}")
    c.wait(server["id"], "ACTIVE")
    shown = c.call("GET", f"/servers/{server['id']}").json()["server"]
    assert (shown["name"], shown["metadata"]) == ("made-1", {"role": "web"})
    assert list(shown["addresses"]) == ["lan"]
    # The create's action carries the request id the service answered with (the audit trail).
    actions = c.call("GET", f"/servers/{server['id']}/os-instance-actions").json()["instanceActions"]
    assert [(a["action"], a["request_id"]) for a in actions] == [
        ("create", answer.headers["x-openstack-request-id"])
    ]


def test_return_reservation_id_and_a_count(cloud: ServersCloud) -> None:
    c = cloud
    answer = c.create("many", min_count=2, max_count=2, return_reservation_id=True, networks="auto")
    assert answer.status_code == 202, answer.text
    reservation = answer.json()["reservation_id"]
    assert set(answer.json()) == {"reservation_id"} and reservation.startswith("r-")
    listed = c.call("GET", f"/servers/detail?reservation_id={reservation}").json()["servers"]
    assert sorted(s["name"] for s in listed) == ["many-1", "many-2"]
    for s in listed:
        c.wait(s["id"], "ACTIVE")
        assert c.call("DELETE", f"/servers/{s['id']}").status_code == 204


def test_openstacksdk_creates_acts_and_deletes(cloud: ServersCloud) -> None:
    import openstack

    c = cloud
    conn = openstack.connect(
        auth_url=f"{c.served.url}/identity/v3",
        username="alice",
        password="alice-pw-1",
        project_name="admin",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        interface="public",
    )
    try:
        made = conn.compute.create_server(
            name="sdk-1", flavor_id=c.flavor, image_id=c.image, networks=[{"uuid": c.network}]
        )
        server = conn.compute.wait_for_server(made, status="ACTIVE", wait=60, interval=0.2)
        assert (server.name, server.status) == ("sdk-1", "ACTIVE")
        conn.compute.stop_server(server)
        assert (
            conn.compute.wait_for_server(server, status="SHUTOFF", wait=60, interval=0.2).status == "SHUTOFF"
        )
        conn.compute.start_server(server)
        conn.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.2)
        conn.compute.update_server(server, name="sdk-renamed")
        assert conn.compute.get_server(server.id).name == "sdk-renamed"
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, wait=60, interval=0.2)
        assert conn.compute.find_server("sdk-renamed") is None
        # The cloud layer's create_server: the image and flavor by name, waiting for ACTIVE (no
        # floating IP: novakit has none, and its pool list is empty).
        cloud_made = conn.create_server(
            "sdk-cloud",
            image="tiny",
            flavor="m1.small",
            nics=[{"net-id": c.network}],
            auto_ip=False,
            wait=True,
            timeout=60,
        )
        assert (cloud_made.name, cloud_made.status) == ("sdk-cloud", "ACTIVE")
        assert conn.delete_server("sdk-cloud", wait=True, timeout=60)
        assert conn.get_server("sdk-cloud") is None
    finally:
        conn.close()


def test_the_openstack_command_drives_a_server(sqlite_cloud: ServersCloud) -> None:
    c = sqlite_cloud
    made = c.create("cli-1", networks="auto")
    assert made.status_code == 202, made.text
    uuid = made.json()["server"]["id"]
    c.wait(uuid, "ACTIVE")
    admin = os_env(c.served)
    alice = os_env(c.served, "alice", "alice-pw-1")

    def run(env: dict[str, str], *args: str) -> str:
        done = openstack(env, *args)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    run(alice, "server", "stop", "cli-1")
    c.wait(uuid, "SHUTOFF")
    run(alice, "server", "start", "cli-1")
    c.wait(uuid, "ACTIVE")
    run(alice, "server", "reboot", "--hard", "--wait", "cli-1")
    assert c.status(uuid) == "ACTIVE"
    run(alice, "server", "pause", "cli-1")
    c.wait(uuid, "PAUSED")
    run(alice, "server", "unpause", "cli-1")
    c.wait(uuid, "ACTIVE")
    # The fake driver's guest writes a console log as it boots (and again at each reboot).
    log = run(alice, "console", "log", "show", "cli-1")
    assert f"NOVAKIT-GUEST-READY hostname=cli-1 instance-id={uuid}" in log
    console = c.call("POST", f"/servers/{uuid}/action", "alice", {"os-getConsoleOutput": {"length": 3}})
    assert console.status_code == 200, console.text
    tail = console.json()["output"].splitlines()
    assert len(tail) == 3 and tail == log.splitlines()[-3:]
    # The admin's lock holds against the member (Nova: 409, the lock's message).
    run(admin, "server", "lock", "cli-1")
    refused = openstack(alice, "server", "stop", "cli-1")
    assert refused.returncode != 0 and "409" in refused.stderr and "locked" in refused.stderr, refused.stderr
    assert c.status(uuid) == "ACTIVE"
    run(admin, "server", "unlock", "cli-1")
    run(alice, "server", "set", "--name", "cli-renamed", "cli-1")
    shown = json.loads(run(alice, "server", "show", "cli-renamed", "-f", "json"))
    assert (shown["id"], shown["status"]) == (uuid, "ACTIVE")
    events = json.loads(run(alice, "server", "event", "list", "cli-renamed", "-f", "json"))
    assert sorted(e["Action"] for e in events) == sorted(
        ["create", "stop", "start", "reboot", "pause", "unpause", "lock", "unlock", "rename"]
    )
    run(alice, "server", "delete", "--wait", "cli-renamed")
    assert c.call("GET", f"/servers/{uuid}").status_code == 404


@pytest.mark.parametrize(
    ("server", "field"),
    [
        ({"personality": [{"path": "/etc/x", "contents": "eA=="}]}, "personality"),
        ({"user_data": "not base64 !"}, "user_data"),
        ({"networks": "none"}, "networks"),
        ({"networks": [{"uuid": "lan", "mac": "x"}]}, "networks"),
        ({"name": " padded "}, "name"),
        ({"min_count": 0}, "min_count"),
        ({"flavorRef": "no-such-flavor"}, "no-such-flavor"),
        ({"imageRef": "no-such-image"}, "no-such-image"),
    ],
    ids=["personality", "user-data", "no-nic", "nic-key", "name", "count", "flavor", "image"],
)
def test_a_bad_create_is_400_naming_the_field_and_writes_nothing(
    cloud: ServersCloud, server: dict[str, Any], field: str
) -> None:
    c = cloud
    before = c.count()
    body = {"name": "bad", "flavorRef": c.flavor, "imageRef": c.image, "networks": "auto", **server}
    answer = c.call("POST", "/servers", body={"server": body})
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["badRequest"]["message"]
    assert "ud-secret" not in answer.text
    assert c.count() == before


def test_networks_are_required_from_2_37(cloud: ServersCloud) -> None:
    c = cloud
    body = {"server": {"name": "no-net", "flavorRef": c.flavor, "imageRef": c.image}}
    answer = c.call("POST", "/servers", body=body, version="2.37")
    assert answer.status_code == 400 and "networks" in answer.text, answer.text


def test_action_refusals(cloud: ServersCloud) -> None:
    """An unknown action or option 400, another project's server 404, a member's admin action 403,
    an action the state refuses 409; none changes the server."""
    c = cloud
    made = c.create("target", networks="auto")
    uuid = made.json()["server"]["id"]
    c.wait(uuid, "ACTIVE")
    cases = [
        ("admin", {"os-resetState": {"state": "error"}}, 400, "os-resetState"),
        ("admin", {"reboot": {"type": "WARM"}}, 400, "reboot.type"),
        ("admin", {"os-stop": None, "os-start": None}, 400, "exactly one action"),
        ("admin", {"resize": {"flavorRef": c.flavor, "size": 3}}, 400, "resize.size"),
        ("bob", {"os-stop": None}, 404, uuid),
        ("alice", {"migrate": None}, 403, "Policy does not allow"),
        ("admin", {"os-start": None}, 409, "vm_state active"),
    ]
    for who, body, status, said in cases:
        answer = c.call("POST", f"/servers/{uuid}/action", who, body)
        assert answer.status_code == status, (body, answer.text)
        assert said in answer.text, (body, answer.text)
    assert c.call("DELETE", f"/servers/{uuid}", "bob").status_code == 404
    assert (
        c.call("PUT", f"/servers/{uuid}", "admin", {"server": {"accessIPv4": "10.0.0.9"}}).status_code == 400
    )
    assert c.status(uuid) == "ACTIVE"
    actions = c.call("GET", f"/servers/{uuid}/os-instance-actions").json()["instanceActions"]
    assert [a["action"] for a in actions] == ["create"]


def test_the_openstack_command_creates_by_image_name_through_the_image_api(
    sqlite_cloud: ServersCloud,
) -> None:
    """``server create --image NAME --wait`` looks the image up through ``/image/v2`` (the catalog's
    image endpoint), then boots; ``image list``/``image show`` read the same images."""
    c = sqlite_cloud
    alice = os_env(c.served, "alice", "alice-pw-1")
    images_listed = openstack(alice, "image", "list", "-f", "json")
    assert images_listed.returncode == 0, images_listed.stderr
    assert sorted(i["Name"] for i in json.loads(images_listed.stdout)) == ["tiny", "tiny-2"]
    shown = openstack(alice, "image", "show", "tiny", "-f", "json")
    assert shown.returncode == 0, shown.stderr
    image = json.loads(shown.stdout)
    assert (image["id"], image["status"], image["visibility"]) == (c.image, "active", "public")
    key = openstack(alice, "keypair", "create", "--public-key", str(_public_key_file(c)), "by-name-key")
    assert key.returncode == 0, key.stderr
    made = openstack(
        alice, "server", "create", "--flavor", "m1.small", "--image", "tiny", "--network", "lan",
        "--key-name", "by-name-key", "--wait", "-f", "json", "by-name",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    server = json.loads(made.stdout)
    assert (server["name"], server["status"], server["key_name"]) == ("by-name", "ACTIVE", "by-name-key")
    assert c.status(server["id"], "alice") == "ACTIVE"
    # Glance finds an image by id only; another project's private image is not found.
    with c.served.client() as http:
        headers = {"X-Auth-Token": c.token("alice")}
        assert http.get("/image/v2/images/tiny", headers=headers).status_code == 404
        assert http.get("/image/v2/images", headers=headers, params={"owner": "x"}).status_code == 400
        page = http.get("/image/v2/images", headers=headers, params={"limit": 1}).json()
        assert [i["name"] for i in page["images"]] == ["tiny"] and "marker=" in page["next"]
    done = openstack(alice, "server", "delete", "--wait", "by-name")
    assert done.returncode == 0, done.stderr


def _public_key_file(c: ServersCloud) -> Path:
    path = c.served.log.parent / "by-name.pub"
    path.write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHm2X3WnKzYF6bS1pJ0cWq2rP8sE4dT7vN9uL0aB1cD2 t@novakit\n"
    )
    return path


def test_the_openstack_command_moves_and_rebuilds_a_server(sqlite_cloud: ServersCloud) -> None:
    """suspend/resume, rebuild, resize with its confirm, migrate with its confirm, shelve and
    unshelve, each by the unpatched ``openstack`` command, each ending where Nova's would."""
    c = sqlite_cloud
    made = c.create("mover", networks="auto")
    assert made.status_code == 202, made.text
    uuid = made.json()["server"]["id"]
    c.wait(uuid, "ACTIVE")
    admin = os_env(c.served)

    def run(*args: str) -> None:
        done = openstack(admin, *args)
        assert done.returncode == 0, (args, done.stderr)

    def host() -> str:
        return str(c.call("GET", f"/servers/{uuid}").json()["server"]["OS-EXT-SRV-ATTR:host"])

    run("server", "suspend", "mover")
    c.wait(uuid, "SUSPENDED")
    run("server", "resume", "mover")
    c.wait(uuid, "ACTIVE")
    run("server", "rebuild", "--image", "tiny-2", "--wait", "mover")
    shown = c.call("GET", f"/servers/{uuid}").json()["server"]
    assert (shown["status"], shown["image"]["id"]) == ("ACTIVE", _image_id(c, "tiny-2"))
    run("server", "resize", "--flavor", "m1.large", "--wait", "mover")
    assert c.status(uuid) == "VERIFY_RESIZE"
    run("server", "resize", "confirm", "mover")
    c.wait(uuid, "ACTIVE")
    resized = c.call("GET", f"/servers/{uuid}", version="2.47").json()["server"]
    assert resized["flavor"]["original_name"] == "m1.large"
    before = host()
    run("server", "migrate", "--wait", "mover")
    assert c.status(uuid) == "VERIFY_RESIZE" and host() != before
    run("server", "migrate", "confirm", "mover")
    c.wait(uuid, "ACTIVE")
    run("server", "shelve", "--wait", "mover")
    assert c.status(uuid) in ("SHELVED", "SHELVED_OFFLOADED")
    run("server", "unshelve", "--wait", "mover")
    assert c.status(uuid) == "ACTIVE"
    actions = [
        a["action"] for a in c.call("GET", f"/servers/{uuid}/os-instance-actions").json()["instanceActions"]
    ]
    for done in ("suspend", "resume", "rebuild", "resize", "confirmResize", "migrate", "shelve", "unshelve"):
        assert done in actions, (done, actions)
    run("server", "delete", "--wait", "mover")


def _image_id(c: ServersCloud, name: str) -> str:
    with c.served.client() as http:
        listed = http.get("/image/v2/images", headers={"X-Auth-Token": c.token()}, params={"name": name})
    [image] = listed.json()["images"]
    return str(image["id"])


PLACEHOLDER = "00000000-0000-0000-0000-000000000000"
#: the write side's routes (and the proxies it added): 401 without a token on each
WRITE_ROUTES = [
    ("POST", "/servers"),
    ("PUT", f"/servers/{PLACEHOLDER}"),
    ("DELETE", f"/servers/{PLACEHOLDER}"),
    ("POST", f"/servers/{PLACEHOLDER}/action"),
    ("GET", f"/servers/{PLACEHOLDER}/os-security-groups"),
    ("GET", "/os-networks"),
    ("GET", f"/os-networks/{PLACEHOLDER}"),
    ("GET", "/os-floating-ip-pools"),
]


@pytest.mark.parametrize(("method", "path"), WRITE_ROUTES, ids=[f"{m} {p}" for m, p in WRITE_ROUTES])
def test_every_write_route_needs_a_token(sqlite_cloud: ServersCloud, method: str, path: str) -> None:
    with sqlite_cloud.served.client() as http:
        answer = http.request(method, f"/compute/v2.1{path}", json={"server": {"name": "x"}})
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == 401


def test_another_projects_server_is_not_found_by_any_route_or_verb(cloud: ServersCloud) -> None:
    """bob (project other) on the admin project's server: 404 everywhere, never 403, nothing
    changed; the same requests of alice (its project) are answered."""
    c = cloud
    made = c.create("theirs", networks="auto")
    uuid = made.json()["server"]["id"]
    c.wait(uuid, "ACTIVE")
    requests: list[tuple[str, str, Any]] = [
        ("GET", f"/servers/{uuid}", None),
        ("PUT", f"/servers/{uuid}", {"server": {"name": "stolen"}}),
        ("GET", f"/servers/{uuid}/os-instance-actions", None),
        ("GET", f"/servers/{uuid}/os-security-groups", None),
        *[
            ("POST", f"/servers/{uuid}/action", {name: body})
            for name, body in [
                ("os-stop", None),
                ("reboot", {"type": "HARD"}),
                ("lock", None),
                ("rebuild", {"imageRef": c.image}),
                ("os-getConsoleOutput", {}),
                ("addSecurityGroup", {"name": "default"}),
                ("createBackup", {"name": "x"}),
            ]
        ],
        ("DELETE", f"/servers/{uuid}", None),
    ]
    for method, path, body in requests:
        answer = c.call(method, path, "bob", body)
        # An action novakit does not take is 400 before the server is looked up, as Nova's schema.
        expected = 400 if body is not None and "createBackup" in body else 404
        assert answer.status_code == expected, (method, path, body, answer.text)
        if expected == 404:
            assert uuid in answer.text or "could not be found" in answer.text, answer.text
    assert c.status(uuid, "alice") == "ACTIVE"
    assert c.call("GET", f"/servers/{uuid}", "alice").json()["server"]["name"] == "theirs"
    shown = c.call("GET", f"/servers/{uuid}/os-security-groups", "alice")
    assert shown.status_code == 200 and [g["name"] for g in shown.json()["security_groups"]] == []
    assert c.call("DELETE", f"/servers/{uuid}", "alice").status_code == 204


def test_microversions_2_58_to_2_79(cloud: ServersCloud) -> None:
    """The behaviour changes of 2.58 to 2.79 for the resources served (the others, migrations,
    volume attachments and interfaces, are not served at any version)."""
    c = cloud
    group = c.call(
        "POST",
        "/os-server-groups",
        body={
            "server_group": {"name": "mv-g", "policy": "anti-affinity", "rules": {"max_server_per_host": 2}}
        },
        version="2.64",
    )
    assert group.status_code == 200, group.text
    made = group.json()["server_group"]
    assert (made["policy"], made["rules"]) == ("anti-affinity", {"max_server_per_host": 2})
    assert "policies" not in made and "metadata" not in made
    body = {
        "server": {"name": "mv", "flavorRef": c.flavor, "imageRef": c.image, "networks": "auto"},
        "os:scheduler_hints": {"group": made["id"]},
    }
    uuid = c.call("POST", "/servers", body=body, version="2.79").json()["server"]["id"]
    c.wait(uuid, "ACTIVE")
    for _ in ("os-stop", "os-start"):
        assert c.call("POST", f"/servers/{uuid}/action", body={_: None}, version="2.79").status_code == 202
        c.wait(uuid, "SHUTOFF" if _ == "os-stop" else "ACTIVE")

    # 2.58: actions in pages, with updated_at; 2.66: changes-before
    first = c.call("GET", f"/servers/{uuid}/os-instance-actions?limit=2", version="2.58").json()
    assert [a["action"] for a in first["instanceActions"]] == ["start", "stop"]
    assert all(a["updated_at"] for a in first["instanceActions"])
    with c.served.client() as http:
        headers = {"X-Auth-Token": c.token(), "OpenStack-API-Version": "compute 2.58"}
        rest = http.get(first["links"][0]["href"], headers=headers).json()
    assert [a["action"] for a in rest["instanceActions"]] == ["create"] and "links" not in rest
    old = c.call(
        "GET", f"/servers/{uuid}/os-instance-actions?changes-before=2000-01-01T00:00:00Z", version="2.66"
    )
    assert old.json()["instanceActions"] == []
    # 2.62: an event's hostId (and host for an admin)
    request_id = first["instanceActions"][0]["request_id"]
    shown = c.call("GET", f"/servers/{uuid}/os-instance-actions/{request_id}", version="2.62").json()
    [event] = shown["instanceAction"]["events"]
    assert len(event["hostId"]) == 56 and event["host"]
    # 2.61: flavors carry their extra specs; 2.75: swap 0 (not "") for none
    assert "extra_specs" not in c.call("GET", f"/flavors/{c.flavor}", version="2.60").json()["flavor"]
    flavor = c.call("GET", f"/flavors/{c.flavor}", version="2.75").json()["flavor"]
    assert (flavor["extra_specs"], flavor["swap"]) == ({}, 0)
    assert c.call("GET", f"/flavors/{c.flavor}", version="2.74").json()["flavor"]["swap"] == ""
    # 2.63 and 2.71: no certificates; the groups a server is in
    server = c.call("GET", f"/servers/{uuid}", version="2.71").json()["server"]
    assert (server["trusted_image_certificates"], server["server_groups"]) == (None, [made["id"]])
    assert "server_groups" not in c.call("GET", f"/servers/{uuid}", version="2.70").json()["server"]
    # 2.73: a lock's reason, and the locked filter
    reason = {"lock": {"locked_reason": "maintenance"}}
    assert c.call("POST", f"/servers/{uuid}/action", body=reason, version="2.72").status_code == 400
    assert c.call("POST", f"/servers/{uuid}/action", body=reason, version="2.73").status_code == 202
    locked = c.call("GET", f"/servers/{uuid}", version="2.73").json()["server"]
    assert (locked["locked"], locked["locked_reason"]) == (True, "maintenance")
    only = c.call("GET", "/servers?locked=true", version="2.73").json()["servers"]
    assert [s["id"] for s in only] == [uuid]
    assert c.call("POST", f"/servers/{uuid}/action", body={"unlock": None}, version="2.73").status_code == 202
    # 2.66: changes-before on the listing; 2.75: an unknown parameter is 400 (before, ignored)
    assert (
        c.call("GET", "/servers?changes-before=2000-01-01T00:00:00Z", version="2.66").json()["servers"] == []
    )
    assert c.call("GET", "/servers?colour=red", version="2.74").status_code == 200
    strict = c.call("GET", "/servers?colour=red", version="2.75")
    assert strict.status_code == 400 and "colour" in strict.text
    # 2.68: evacuate and live migration take no force
    for action in ({"evacuate": {"force": True}}, {"os-migrateLive": {"host": None, "force": True}}):
        refused = c.call("POST", f"/servers/{uuid}/action", body=action, version="2.68")
        assert refused.status_code == 400 and "force" in refused.text, refused.text
    # 2.75: a rebuild answers the server in full
    rebuilt = c.call(
        "POST", f"/servers/{uuid}/action", body={"rebuild": {"imageRef": c.image}}, version="2.75"
    )
    assert rebuilt.status_code == 202 and rebuilt.json()["server"]["id"] == uuid
    assert rebuilt.json()["server"]["server_groups"] == [made["id"]]
    c.wait(uuid, "ACTIVE")
    # 2.78: the topology (novakit pins no guest to NUMA nodes)
    assert c.call("GET", f"/servers/{uuid}/topology", version="2.77").status_code == 404
    topology = c.call("GET", f"/servers/{uuid}/topology", version="2.78")
    assert (topology.status_code, topology.json()) == (200, {"nodes": [], "pagesize_kb": None})
    assert c.call("GET", f"/servers/{uuid}/topology", "bob", version="2.78").status_code == 404
    assert c.call("DELETE", f"/servers/{uuid}").status_code == 204


def _image_when_active(c: ServersCloud, image_id: str, who: str) -> dict[str, Any]:
    with c.served.client() as http:
        headers = {"X-Auth-Token": c.token(who)}
        deadline = time.monotonic() + 60
        while True:
            image = http.get(f"/image/v2/images/{image_id}", headers=headers)
            if (
                image.status_code == 200 and image.json()["status"] == "active"
            ) or time.monotonic() > deadline:
                assert image.status_code == 200, image.text
                return dict(image.json())
            time.sleep(0.1)


def test_create_image_answers_the_image_id_and_the_snapshot_becomes_active(cloud: ServersCloud) -> None:
    """createImage: 202 with the image's id (2.45: in the body; before, in Location); the snapshot
    is the server's project's private image, active once its host wrote it."""
    c = cloud
    uuid = c.create("snapper", networks="auto").json()["server"]["id"]
    c.wait(uuid, "ACTIVE")
    action = f"/servers/{uuid}/action"
    body = {"createImage": {"name": "snap-1", "metadata": {"purpose": "test"}}}
    made = c.call("POST", action, "alice", body, version="2.45")
    assert made.status_code == 202, made.text
    shown = _image_when_active(c, made.json()["image_id"], "alice")
    assert (shown["name"], shown["status"], shown["visibility"]) == ("snap-1", "active", "private")
    assert shown["purpose"] == "test" and "image_host" not in shown
    c.wait(uuid, "ACTIVE")
    older = c.call("POST", action, "alice", {"createImage": {"name": "snap-2"}}, version="2.44")
    assert older.status_code == 202 and not older.content, older.text
    location = older.headers["location"]
    assert "/image/v2/images/" in location
    assert _image_when_active(c, location.rsplit("/", 1)[-1], "alice")["name"] == "snap-2"
    # another project's member does not find it; a name taken is refused (novakit's images are
    # named uniquely), nothing started
    with c.served.client() as http:
        bob = http.get(f"/image/v2/images/{shown['id']}", headers={"X-Auth-Token": c.token("bob")})
    assert bob.status_code == 404
    c.wait(uuid, "ACTIVE")
    dup = c.call("POST", action, "alice", {"createImage": {"name": "snap-1"}}, version="2.45")
    assert dup.status_code == 400 and "snap-1" in dup.text, dup.text
    assert c.call("DELETE", f"/servers/{uuid}").status_code == 204


def test_no_secret_in_the_log(cloud: ServersCloud) -> None:
    """Last in the module: no password, token, admin password or user data in the service's log.
    It hands the service an admin password and user data itself first (it leans on no other test
    having run in this process)."""
    c = cloud
    user_data = base64.b64encode(USER_DATA.encode()).decode()
    made = c.create("leak-check", networks="auto", user_data=user_data, adminPass=ADMIN_PASS)
    assert made.status_code == 202, made.text
    uuid = made.json()["server"]["id"]
    c.wait(uuid, "ACTIVE")
    assert c.call("DELETE", f"/servers/{uuid}").status_code == 204
    log = c.served.log.read_text()
    assert "/compute/v2.1/servers" in log
    assert {ADMIN_PASS, "ud-secret-7f3a"} <= set(c.served.secrets)
    assert not [s for s in c.served.secrets if s in log]
