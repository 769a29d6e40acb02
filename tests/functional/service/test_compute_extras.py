"""Compute v2.1's key pairs, server groups, quota sets and flavor writes through a real ``novakit
serve``: by the real ``openstack`` command, openstacksdk and plain HTTP, with Nova's views and
status codes; and every refusal (no token, a member on an admin's route, another user's or
project's record, a bad body) answered before anything is written.

One service per back end for the module. openstacksdk and the HTTP checks run on both back
ends, the ``openstack`` command on SQLite. One server of project ``other`` is booted through the
library (the fake driver) on the served database, so that the project has a use its quota
cannot be set below; a boot with a private flavor goes the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from novakit import exceptions
from novakit.context import RequestContext
from novakit.keypairs import keys
from tests.functional.cloud import Cloud, boot, make_cloud
from tests.functional.service.conftest import (
    Served,
    add_user,
    identity_session,
    openstack,
    os_env,
    serve_cloud,
)

pytestmark = pytest.mark.xdist_group("service_extras")

PASSWORDS = {"alice": "alice-pw-2", "bob": "bob-pw-2"}


@dataclass
class ExtrasCloud:
    served: Served
    admin_project: str  # the admin project's Keystone id
    other_project: str
    #: the library over the served database (its fake hosts, flavors m1.small and m1.large,
    #: image tiny), and bob's caller there
    lib: Cloud
    bob: RequestContext
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str = "admin") -> str:
        if who not in self.tokens:
            if who == "admin":
                self.tokens[who] = self.served.issue()
            else:
                project = "admin" if who == "alice" else "other"
                self.tokens[who] = self.served.issue(who, PASSWORDS[who], project)
        return self.tokens[who]

    def call(
        self, method: str, path: str, who: str | None = "admin", body: Any = None, version: str | None = None
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who)} if who is not None else {}
        if version is not None:
            headers["OpenStack-API-Version"] = f"compute {version}"
        with self.served.client() as http:
            return http.request(method, f"/compute/v2.1{path}", headers=headers, json=body)

    def ok(self, method: str, path: str, who: str = "admin", body: Any = None, **kw: Any) -> Any:
        answer = self.call(method, path, who, body, **kw)
        assert answer.status_code in (200, 201), answer.text
        return answer.json()

    def keypair_names(self, who: str) -> list[str]:
        return [k["keypair"]["name"] for k in self.ok("GET", "/os-keypairs", who)["keypairs"]]

    def group_names(self, who: str) -> list[str]:
        return [g["name"] for g in self.ok("GET", "/os-server-groups", who)["server_groups"]]

    def flavor_names(self) -> list[str]:
        return [f["name"] for f in self.ok("GET", "/flavors?is_public=none")["flavors"]]


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtrasCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "extras") as served:
        with identity_session(served) as session:
            other = projects.create(session, "other").uuid
        add_user(served, "alice", PASSWORDS["alice"], project="admin")
        add_user(served, "bob", PASSWORDS["bob"], project="other")
        token = served.validate(served.issue()).json()["token"]
        bob_token = served.issue("bob", PASSWORDS["bob"], "other")
        bob = RequestContext(
            project_id=other,
            user_id=served.validate(bob_token).json()["token"]["user"]["id"],
            roles=["member"],
        )
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            boot(lib, bob, "bob-1")
            yield ExtrasCloud(served, token["project"]["id"], other, lib, bob, {"bob": bob_token})
        finally:
            db.dispose()


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: ExtrasCloud) -> ExtrasCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command drives the same service on both back ends: SQLite only")
    return cloud


def _public_key() -> str:
    return keys.generate("ed25519", "test@extras").public_key


# ---------------------------------------------------------------- 401 first


ROUTES = [
    ("GET", "/os-keypairs"),
    ("POST", "/os-keypairs"),
    ("GET", "/os-keypairs/k"),
    ("DELETE", "/os-keypairs/k"),
    ("GET", "/os-server-groups"),
    ("POST", "/os-server-groups"),
    ("GET", "/os-server-groups/g"),
    ("DELETE", "/os-server-groups/g"),
    ("GET", "/os-quota-sets/p"),
    ("GET", "/os-quota-sets/p/detail"),
    ("GET", "/os-quota-sets/p/defaults"),
    ("PUT", "/os-quota-sets/p"),
    ("POST", "/flavors"),
    ("DELETE", "/flavors/f"),
    ("POST", "/flavors/f/os-extra_specs"),
    ("GET", "/flavors/f/os-extra_specs/k"),
    ("PUT", "/flavors/f/os-extra_specs/k"),
    ("DELETE", "/flavors/f/os-extra_specs/k"),
    ("GET", "/flavors/f/os-flavor-access"),
    ("POST", "/flavors/f/action"),
]


def test_every_route_answers_401_without_a_token(cloud: ExtrasCloud) -> None:
    for method, path in ROUTES:
        answer = cloud.call(method, path, None, {"x": {}} if method in ("POST", "PUT") else None)
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.json()["error"]["code"] == 401
    with cloud.served.client() as http:
        bad = http.get("/compute/v2.1/os-keypairs", headers={"X-Auth-Token": "not-a-token"})
    assert bad.status_code == 401


# ---------------------------------------------------------------- key pairs


def test_a_generated_key_pair_is_answered_once_with_its_private_key(cloud: ExtrasCloud) -> None:
    c = cloud
    made = c.call("POST", "/os-keypairs", "alice", {"keypair": {"name": "gen-1"}}, version="2.2")
    assert made.status_code == 201, made.text
    pair = made.json()["keypair"]
    c.served.secrets.append(pair["private_key"])
    assert pair["private_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert pair["public_key"].startswith("ssh-ed25519 ") and pair["type"] == "ssh"
    assert len(pair["fingerprint"].split(":")) == 16
    shown = c.ok("GET", "/os-keypairs/gen-1", "alice", version="2.2")["keypair"]
    assert "private_key" not in shown
    assert {k: shown[k] for k in ("name", "public_key", "fingerprint", "type", "deleted")} == {
        "name": "gen-1",
        "public_key": pair["public_key"],
        "fingerprint": pair["fingerprint"],
        "type": "ssh",
        "deleted": False,
    }
    listed = c.ok("GET", "/os-keypairs", "alice")["keypairs"]
    assert [k["keypair"] for k in listed if k["keypair"]["name"] == "gen-1"] == [
        {"name": "gen-1", "public_key": pair["public_key"], "fingerprint": pair["fingerprint"]}
    ]
    # Nova 2.1: 200 on create and 202 on delete, no type
    old = c.call("POST", "/os-keypairs", "alice", {"keypair": {"name": "old-1", "public_key": _public_key()}})
    assert old.status_code == 200 and "type" not in old.json()["keypair"], old.text
    assert c.call("DELETE", "/os-keypairs/old-1", "alice").status_code == 202
    assert c.call("DELETE", "/os-keypairs/gen-1", "alice", version="2.2").status_code == 204
    assert "gen-1" not in c.keypair_names("alice")


def test_a_key_pair_is_its_users_own(cloud: ExtrasCloud) -> None:
    c = cloud
    made = c.call("POST", "/os-keypairs", "alice", {"keypair": {"name": "mine", "public_key": _public_key()}})
    assert made.status_code == 200, made.text
    for method in ("GET", "DELETE"):
        answer = c.call(method, "/os-keypairs/mine", "bob")
        assert answer.status_code == 404 and "itemNotFound" in answer.json(), answer.text
    assert "mine" not in c.keypair_names("bob")
    # the admin sees it only by naming its user (2.10)
    alice_id = made.json()["keypair"]["user_id"]
    assert c.call("GET", "/os-keypairs/mine", "admin").status_code == 404
    assert c.call("GET", f"/os-keypairs/mine?user_id={alice_id}", "admin", version="2.10").status_code == 200
    refused = c.call("GET", f"/os-keypairs?user_id={alice_id}", "bob", version="2.10")
    assert refused.status_code == 403, refused.text
    again = c.call(
        "POST", "/os-keypairs", "alice", {"keypair": {"name": "mine", "public_key": _public_key()}}
    )
    assert again.status_code == 409, again.text
    assert c.call("DELETE", "/os-keypairs/mine", "alice").status_code == 202


def test_key_pairs_are_paged_from_2_35(cloud: ExtrasCloud) -> None:
    c = cloud
    for name in ("page-a", "page-b", "page-c"):
        body = {"keypair": {"name": name, "public_key": _public_key()}}
        assert c.call("POST", "/os-keypairs", "alice", body).status_code == 200
    every = [k["keypair"]["name"] for k in c.ok("GET", "/os-keypairs", "alice", version="2.35")["keypairs"]]
    assert every == sorted(every) and {"page-a", "page-b", "page-c"} <= set(every)
    # page through two at a time by the next links, as a client does
    seen: list[str] = []
    path = "/os-keypairs?limit=2"
    while True:
        answer = c.ok("GET", path, "alice", version="2.35")
        names = [k["keypair"]["name"] for k in answer["keypairs"]]
        seen += names
        links = answer.get("keypairs_links")
        if links is None:
            assert len(names) < 2
            break
        assert len(names) == 2 and links[0]["rel"] == "next", answer
        href = links[0]["href"]
        prefix = f"{c.served.url}/compute/v2.1/os-keypairs?"
        assert href.startswith(prefix) and f"marker={names[-1]}" in href and "limit=2" in href, href
        path = "/os-keypairs?" + href[len(prefix) :]
    assert seen == every
    after = c.ok("GET", "/os-keypairs?marker=page-a&limit=1", "alice", version="2.35")
    assert [k["keypair"]["name"] for k in after["keypairs"]] == ["page-b"] and "keypairs_links" in after
    # before 2.35 Nova takes no pages: limit and marker are not read
    old = c.ok("GET", "/os-keypairs?limit=1&marker=nothing", "alice", version="2.34")
    assert len(old["keypairs"]) == len(every) and "keypairs_links" not in old
    for query in ("marker=no-such-pair", "limit=-1", "limit=many"):
        bad = c.call("GET", f"/os-keypairs?{query}", "alice", version="2.35")
        assert bad.status_code == 400 and "badRequest" in bad.json(), (query, bad.text)
    # an admin pages another user's pairs (user_id, 2.10); the next link keeps the user
    alice_id = c.ok("GET", "/os-keypairs/page-a", "alice", version="2.10")["keypair"]["user_id"]
    theirs = c.ok("GET", f"/os-keypairs?user_id={alice_id}&limit=1", "admin", version="2.35")
    assert [k["keypair"]["name"] for k in theirs["keypairs"]] == every[:1]
    assert f"user_id={alice_id}" in theirs["keypairs_links"][0]["href"]
    refused = c.call("GET", f"/os-keypairs?user_id={alice_id}&limit=1", "bob", version="2.35")
    assert refused.status_code == 403, refused.text
    for name in ("page-a", "page-b", "page-c"):
        assert c.call("DELETE", f"/os-keypairs/{name}", "alice").status_code == 202


@pytest.mark.parametrize(
    "body",
    [
        {"keypair": {"name": "bad-1", "colour": "red"}},
        {"keypair": {"name": 5}},
        {"keypair": {"name": "bad-1", "public_key": "ssh-rsa not-base64"}},
        {"keypair": {"name": "bad-1", "type": "x509"}},
        {"keypair": {"name": "bad 1 !"}},
        {"keypair": "bad-1"},
        {"keypair": {"name": "bad-1"}, "extra": 1},
    ],
)
def test_a_bad_key_pair_body_is_400_and_writes_nothing(cloud: ExtrasCloud, body: Any) -> None:
    answer = cloud.call("POST", "/os-keypairs", "alice", body, version="2.2")
    assert answer.status_code == 400 and "badRequest" in answer.json(), answer.text
    assert not [n for n in cloud.keypair_names("alice") if n.startswith("bad")]


def test_type_needs_2_2(cloud: ExtrasCloud) -> None:
    answer = cloud.call("POST", "/os-keypairs", "alice", {"keypair": {"name": "t-1", "type": "ssh"}})
    assert answer.status_code == 400, answer.text
    assert "t-1" not in cloud.keypair_names("alice")


def test_openstacksdk_manages_key_pairs(cloud: ExtrasCloud) -> None:
    import openstack

    conn = openstack.connect(
        auth_url=f"{cloud.served.url}/identity/v3",
        username="alice",
        password=PASSWORDS["alice"],
        project_name="admin",
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        interface="public",
    )
    try:
        public = _public_key()
        made = conn.compute.create_keypair(name="sdk-1", public_key=public)
        assert (made.name, made.public_key, made.type) == ("sdk-1", public, "ssh")
        generated = conn.compute.create_keypair(name="sdk-2")
        assert generated.private_key
        cloud.served.secrets.append(generated.private_key)
        assert {"sdk-1", "sdk-2"} <= {k.name for k in conn.compute.keypairs()}
        assert conn.compute.get_keypair("sdk-1").fingerprint == made.fingerprint
        # openstacksdk speaks the newest microversion both know, 2.79: one policy (2.64)
        group = conn.compute.create_server_group(name="sdk-g", policy="affinity")
        assert conn.compute.get_server_group(group.id).policy == "affinity"
        conn.compute.delete_server_group(group)
        conn.compute.delete_keypair("sdk-1")
        conn.compute.delete_keypair("sdk-2")
        assert not {"sdk-1", "sdk-2"} & {k.name for k in conn.compute.keypairs()}
        quotas = conn.compute.get_quota_set(cloud.admin_project)
        assert (
            quotas.instances
            == cloud.ok("GET", f"/os-quota-sets/{cloud.admin_project}")["quota_set"]["instances"]
        )
    finally:
        conn.close()


# ---------------------------------------------------------------- server groups


def test_server_groups_are_the_projects(cloud: ExtrasCloud) -> None:
    c = cloud
    made = c.ok(
        "POST",
        "/os-server-groups",
        "alice",
        {"server_group": {"name": "grp-1", "policies": ["anti-affinity"]}},
    )
    group = made["server_group"]
    assert {k: group[k] for k in ("name", "policies", "members", "metadata")} == {
        "name": "grp-1",
        "policies": ["anti-affinity"],
        "members": [],
        "metadata": {},
    }
    assert "project_id" not in group
    shown = c.ok("GET", f"/os-server-groups/{group['id']}", "admin", version="2.13")["server_group"]
    assert shown["project_id"] == c.admin_project and shown["id"] == group["id"]
    assert "grp-1" in c.group_names("admin") and "grp-1" not in c.group_names("bob")
    for method in ("GET", "DELETE"):
        answer = c.call(method, f"/os-server-groups/{group['id']}", "bob")
        assert answer.status_code == 404, answer.text
    taken = c.call(
        "POST", "/os-server-groups", "alice", {"server_group": {"name": "grp-1", "policies": ["affinity"]}}
    )
    assert taken.status_code == 409, taken.text
    deleted = c.call("DELETE", f"/os-server-groups/{group['id']}", "alice")
    assert deleted.status_code == 204 and deleted.content == b""
    assert c.call("GET", f"/os-server-groups/{group['id']}", "alice").status_code == 404


@pytest.mark.parametrize(
    ("body", "version"),
    [
        ({"server_group": {"name": "bad-g", "policies": ["anti-affinity"], "rules": {}}}, None),
        ({"server_group": {"name": "bad-g", "policies": ["nearby"]}}, None),
        ({"server_group": {"name": "bad-g", "policies": "affinity"}}, None),
        ({"server_group": {"name": "bad-g", "policies": ["affinity", "anti-affinity"]}}, None),
        ({"server_group": {"name": 7, "policies": ["affinity"]}}, None),
        ({"server_group": {"name": "bad-g", "policies": ["soft-affinity"]}}, "2.14"),
        ({"group": {"name": "bad-g"}}, None),
    ],
)
def test_a_bad_server_group_body_is_400_and_writes_nothing(
    cloud: ExtrasCloud, body: Any, version: str | None
) -> None:
    answer = cloud.call("POST", "/os-server-groups", "alice", body, version=version)
    assert answer.status_code == 400 and "badRequest" in answer.json(), answer.text
    assert "bad-g" not in cloud.group_names("alice")


def test_soft_policies_from_2_15(cloud: ExtrasCloud) -> None:
    body = {"server_group": {"name": "soft-g", "policies": ["soft-anti-affinity"]}}
    made = cloud.ok("POST", "/os-server-groups", "alice", body, version="2.15")["server_group"]
    assert made["policies"] == ["soft-anti-affinity"]
    assert cloud.call("DELETE", f"/os-server-groups/{made['id']}", "alice").status_code == 204


# ---------------------------------------------------------------- quota sets


def test_a_projects_quota_is_read_by_its_members_and_the_admin(cloud: ExtrasCloud) -> None:
    c = cloud
    mine = c.ok("GET", f"/os-quota-sets/{c.admin_project}", "alice")["quota_set"]
    assert mine["id"] == c.admin_project
    assert {"instances", "cores", "ram", "key_pairs", "security_groups", "injected_files"} <= set(mine)
    newest = c.ok("GET", f"/os-quota-sets/{c.admin_project}", "alice", version="2.57")["quota_set"]
    assert "security_groups" not in newest and "injected_files" not in newest and "instances" in newest
    detail = c.ok("GET", f"/os-quota-sets/{c.admin_project}/detail", "alice")["quota_set"]
    assert detail["instances"] == {"limit": mine["instances"], "in_use": 0, "reserved": 0}
    defaults = c.ok("GET", f"/os-quota-sets/{c.other_project}/defaults", "bob")["quota_set"]
    assert defaults["id"] == c.other_project and isinstance(defaults["cores"], int)
    assert c.ok("GET", f"/os-quota-sets/{c.other_project}", "admin")["quota_set"]["id"] == c.other_project
    refused = c.call("GET", f"/os-quota-sets/{c.admin_project}", "bob")
    assert refused.status_code == 403 and "forbidden" in refused.json(), refused.text
    assert c.call("GET", f"/os-quota-sets/{c.admin_project}/detail", "bob").status_code == 403


def test_only_an_admin_sets_a_quota(cloud: ExtrasCloud) -> None:
    c = cloud
    path = f"/os-quota-sets/{c.other_project}"
    before = c.ok("GET", path)["quota_set"]
    refused = c.call("PUT", path, "alice", {"quota_set": {"instances": 99}})
    assert refused.status_code == 403 and "forbidden" in refused.json(), refused.text
    assert c.call("PUT", path, "bob", {"quota_set": {"instances": 99}}).status_code == 403
    assert c.ok("GET", path)["quota_set"] == before
    updated = c.ok("PUT", path, "admin", {"quota_set": {"instances": 7, "cores": 14, "force": True}})
    assert updated["quota_set"]["instances"] == 7 and "id" not in updated["quota_set"]
    assert c.ok("GET", path, "bob")["quota_set"]["cores"] == 14


def test_a_project_the_identity_does_not_know_gets_no_quota_and_no_flavor_access(cloud: ExtrasCloud) -> None:
    """Nova's verify_project_id: an admin's quota set or flavor access for a project id that is no
    project's is 400, naming the field, with nothing written; a member is still told 403 first."""
    c = cloud
    ghost = "0" * 32
    refused = c.call("PUT", f"/os-quota-sets/{ghost}", "admin", {"quota_set": {"instances": 3}})
    assert refused.status_code == 400 and "project_id" in refused.json()["badRequest"]["message"], (
        refused.text
    )
    assert c.call("PUT", f"/os-quota-sets/{ghost}", "bob", {"quota_set": {"instances": 3}}).status_code == 403
    assert (
        c.ok("GET", f"/os-quota-sets/{ghost}")["quota_set"]["instances"]
        == c.ok("GET", f"/os-quota-sets/{ghost}/defaults")["quota_set"]["instances"]
    )
    _make_flavor(c, "x1-ghost", public=False)
    given = _access(c, "x1-ghost", "addTenantAccess", ghost)
    assert given.status_code == 400 and "tenant" in given.json()["badRequest"]["message"], given.text
    assert c.ok("GET", "/flavors/x1-ghost/os-flavor-access") == {"flavor_access": []}
    assert c.call("DELETE", "/flavors/x1-ghost").status_code == 202


def _instances_in_use(cloud: ExtrasCloud) -> int:
    detail = cloud.ok("GET", f"/os-quota-sets/{cloud.other_project}/detail")["quota_set"]
    return int(detail["instances"]["in_use"])


def test_a_quota_below_the_use_needs_force(cloud: ExtrasCloud) -> None:
    c = cloud
    path = f"/os-quota-sets/{c.other_project}"
    used = _instances_in_use(c)
    assert used >= 1  # bob-1
    before = c.ok("GET", path)["quota_set"]
    for body in (
        {"quota_set": {"instances": used - 1}},
        {"quota_set": {"cores": 0, "force": False}},
        {"quota_set": {"instances": used + 5, "ram": 1}},
    ):
        refused = c.call("PUT", path, "admin", body)
        assert refused.status_code == 400 and "badRequest" in refused.json(), refused.text
        assert "force" in refused.json()["badRequest"]["message"]
        assert c.ok("GET", path)["quota_set"] == before  # nothing written, not even instances
    # at the use, unlimited, and below it with force
    assert c.ok("PUT", path, "admin", {"quota_set": {"instances": used}})["quota_set"]["instances"] == used
    assert c.ok("PUT", path, "admin", {"quota_set": {"cores": -1}})["quota_set"]["cores"] == -1
    forced = c.ok("PUT", path, "admin", {"quota_set": {"instances": used - 1, "force": True}})
    assert forced["quota_set"]["instances"] == used - 1
    detail = c.ok("GET", f"{path}/detail", "bob")["quota_set"]["instances"]
    assert detail == {"limit": used - 1, "in_use": used, "reserved": 0}
    c.ok("PUT", path, "admin", {"quota_set": {"instances": 10, "cores": 20}})


@pytest.mark.parametrize(
    "body",
    [
        {"quota_set": {"instances": 3, "bogus": 1}},
        {"quota_set": {"instances": 3, "cores": "many"}},
        {"quota_set": {"instances": 3, "ram": -2}},
        {"quota_set": {"instances": 3, "metadata_items": 5}},
        {"quota_set": {"instances": 3, "force": "yes"}},
        {"quota_set": [1]},
    ],
)
def test_a_bad_quota_body_is_400_and_writes_nothing(cloud: ExtrasCloud, body: Any) -> None:
    path = f"/os-quota-sets/{cloud.other_project}"
    before = cloud.ok("GET", path)["quota_set"]
    answer = cloud.call("PUT", path, "admin", body)
    assert answer.status_code == 400 and "badRequest" in answer.json(), answer.text
    assert cloud.ok("GET", path)["quota_set"] == before


# ---------------------------------------------------------------- flavors


def test_an_admin_creates_and_deletes_a_flavor(cloud: ExtrasCloud) -> None:
    c = cloud
    body = {
        "flavor": {
            "name": "x1.made",
            "ram": 768,
            "vcpus": 2,
            "disk": 5,
            "id": "x1-made",
            "OS-FLV-EXT-DATA:ephemeral": 1,
            "swap": 128,
            "rxtx_factor": 1.0,
            "os-flavor-access:is_public": False,
            "description": "made over HTTP",
        }
    }
    made = c.ok("POST", "/flavors", "admin", body, version="2.55")["flavor"]
    assert {k: made[k] for k in ("id", "name", "ram", "vcpus", "disk", "swap", "description")} == {
        "id": "x1-made",
        "name": "x1.made",
        "ram": 768,
        "vcpus": 2,
        "disk": 5,
        "swap": 128,
        "description": "made over HTTP",
    }
    assert made["OS-FLV-EXT-DATA:ephemeral"] == 1 and made["os-flavor-access:is_public"] is False
    assert c.ok("GET", "/flavors/x1-made")["flavor"]["name"] == "x1.made"
    taken = c.call(
        "POST", "/flavors", "admin", {"flavor": {"name": "x1.made", "ram": 1, "vcpus": 1, "disk": 0}}
    )
    assert taken.status_code == 409, taken.text
    assert c.call("DELETE", "/flavors/x1-made", "alice").status_code == 403
    deleted = c.call("DELETE", "/flavors/x1-made")
    assert deleted.status_code == 202, deleted.text
    assert c.call("GET", "/flavors/x1-made").status_code == 404
    assert c.call("DELETE", "/flavors/x1-made").status_code == 404


def test_a_member_may_not_create_a_flavor(cloud: ExtrasCloud) -> None:
    body = {"flavor": {"name": "x1.member", "ram": 512, "vcpus": 1, "disk": 1}}
    answer = cloud.call("POST", "/flavors", "alice", body)
    assert answer.status_code == 403 and "forbidden" in answer.json(), answer.text
    assert "x1.member" not in cloud.flavor_names()


@pytest.mark.parametrize(
    ("body", "version"),
    [
        ({"flavor": {"name": "x1.bad", "ram": 512, "vcpus": 1, "disk": 1, "colour": "red"}}, None),
        ({"flavor": {"name": "x1.bad", "ram": "lots", "vcpus": 1, "disk": 1}}, None),
        ({"flavor": {"name": "x1.bad", "ram": 512, "vcpus": 0, "disk": 1}}, None),
        ({"flavor": {"name": "x1.bad", "ram": 512, "vcpus": 1, "disk": 1, "rxtx_factor": 2.0}}, None),
        ({"flavor": {"name": "x1.bad", "ram": 512, "vcpus": 1, "disk": 1, "description": "d"}}, "2.54"),
        ({"flavor": ["x1.bad"]}, None),
    ],
)
def test_a_bad_flavor_body_is_400_and_writes_nothing(
    cloud: ExtrasCloud, body: Any, version: str | None
) -> None:
    answer = cloud.call("POST", "/flavors", "admin", body, version=version)
    assert answer.status_code == 400 and "badRequest" in answer.json(), answer.text
    assert "x1.bad" not in cloud.flavor_names()


def _make_flavor(cloud: ExtrasCloud, ident: str, public: bool = True) -> None:
    body = {
        "flavor": {
            "name": ident.replace("-", "."),
            "id": ident,
            "ram": 256,
            "vcpus": 1,
            "disk": 1,
            "os-flavor-access:is_public": public,
        }
    }
    cloud.ok("POST", "/flavors", "admin", body)


def test_an_admin_sets_a_flavors_extra_specs(cloud: ExtrasCloud) -> None:
    c = cloud
    _make_flavor(c, "x1-specs")
    base = "/flavors/x1-specs/os-extra_specs"
    given = {"extra_specs": {"hw:cpu_policy": "dedicated", "quota:cpu_shares": 512}}
    assert c.ok("POST", base, "admin", given) == given  # Nova's answer: the body given
    kept = {"hw:cpu_policy": "dedicated", "quota:cpu_shares": "512"}  # a number is kept as its text
    assert c.ok("GET", base, "alice") == {"extra_specs": kept}
    assert c.ok("GET", "/flavors/x1-specs", "alice", version="2.61")["flavor"]["extra_specs"] == kept
    assert "extra_specs" not in c.ok("GET", "/flavors/x1-specs", "alice", version="2.60")["flavor"]
    detail = c.ok("GET", "/flavors/detail", "alice", version="2.61")["flavors"]
    assert [f["extra_specs"] for f in detail if f["id"] == "x1-specs"] == [kept]
    assert c.ok("GET", f"{base}/hw:cpu_policy", "alice") == {"hw:cpu_policy": "dedicated"}
    missing = c.call("GET", f"{base}/hw:nothing", "alice")
    assert missing.status_code == 404 and "itemNotFound" in missing.json(), missing.text
    assert c.ok("PUT", f"{base}/hw:cpu_policy", "admin", {"hw:cpu_policy": "shared"}) == {
        "hw:cpu_policy": "shared"
    }
    # the body names exactly the key of the path
    for body in ({"hw:other": "x"}, {"hw:cpu_policy": "x", "hw:other": "y"}, {}):
        mismatch = c.call("PUT", f"{base}/hw:cpu_policy", "admin", body)
        assert mismatch.status_code == 400 and "badRequest" in mismatch.json(), mismatch.text
    # a member reads them and changes nothing
    for method, path, body in (
        ("POST", base, {"extra_specs": {"k": "v"}}),
        ("PUT", f"{base}/hw:cpu_policy", {"hw:cpu_policy": "isolate"}),
        ("DELETE", f"{base}/hw:cpu_policy", None),
    ):
        refused = c.call(method, path, "alice", body)
        assert refused.status_code == 403 and "forbidden" in refused.json(), (method, refused.text)
    assert c.ok("GET", base)["extra_specs"] == {"hw:cpu_policy": "shared", "quota:cpu_shares": "512"}
    deleted = c.call("DELETE", f"{base}/quota:cpu_shares")
    assert deleted.status_code == 200 and deleted.content == b"", deleted.text
    assert c.call("DELETE", f"{base}/quota:cpu_shares").status_code == 404
    assert c.ok("GET", base)["extra_specs"] == {"hw:cpu_policy": "shared"}
    assert c.call("POST", "/flavors/no-such/os-extra_specs", "admin", given).status_code == 404
    assert c.call("DELETE", "/flavors/x1-specs").status_code == 202


@pytest.mark.parametrize(
    "body",
    [
        {"extra_specs": {"bad/key": "v"}},
        {"extra_specs": {"": "v"}},
        {"extra_specs": {"k" * 256: "v"}},
        {"extra_specs": {"hw:ok": "v" * 256}},
        {"extra_specs": {"hw:ok": True}},
        {"extra_specs": {"hw:ok": {"nested": 1}}},
        {"extra_specs": {"hw:ok": None}},
        {"extra_specs": "hw:ok=v"},
        {"extra_specs": {"hw:ok": "v"}, "more": 1},
        {"specs": {"hw:ok": "v"}},
        "not json",
    ],
)
def test_bad_extra_specs_are_400_and_write_nothing(cloud: ExtrasCloud, body: Any) -> None:
    c = cloud
    if "x1-badspecs" not in [f["id"] for f in c.ok("GET", "/flavors?is_public=none")["flavors"]]:
        _make_flavor(c, "x1-badspecs")
    path = "/flavors/x1-badspecs/os-extra_specs"
    headers = {"X-Auth-Token": c.token(), "Content-Type": "application/json"}
    with c.served.client() as http:
        content = body if isinstance(body, str) else json.dumps(body)
        answer = http.post(f"/compute/v2.1{path}", headers=headers, content=content)
    assert answer.status_code == 400 and "badRequest" in answer.json(), answer.text
    assert c.ok("GET", path) == {"extra_specs": {}}


def _access(cloud: ExtrasCloud, flavor: str, action: str, project: str, who: str = "admin") -> httpx.Response:
    return cloud.call("POST", f"/flavors/{flavor}/action", who, {action: {"tenant": project}})


def test_a_private_flavor_is_its_projects_only(cloud: ExtrasCloud) -> None:
    c = cloud
    _make_flavor(c, "x1-priv", public=False)
    _make_flavor(c, "x1-pub")

    def bob_sees() -> bool:
        listed = [f["id"] for f in c.ok("GET", "/flavors", "bob")["flavors"]]
        detailed = [f["id"] for f in c.ok("GET", "/flavors/detail", "bob")["flavors"]]
        shown = c.call("GET", "/flavors/x1-priv", "bob")
        specs = c.call("GET", "/flavors/x1-priv/os-extra_specs", "bob")
        assert ("x1-priv" in listed) == ("x1-priv" in detailed) == (shown.status_code == 200)
        assert specs.status_code == shown.status_code
        assert shown.status_code in (200, 404), shown.text
        return shown.status_code == 200

    assert not bob_sees()
    assert c.call("GET", "/flavors/x1-priv", "alice").status_code == 404  # a member of the admin project
    assert c.ok("GET", "/flavors/x1-priv/os-flavor-access") == {"flavor_access": []}
    public = c.call("GET", "/flavors/x1-pub/os-flavor-access")
    assert public.status_code == 404 and "itemNotFound" in public.json(), public.text
    for refused in (
        c.call("GET", "/flavors/x1-priv/os-flavor-access", "alice"),
        _access(c, "x1-priv", "addTenantAccess", c.other_project, "alice"),
        _access(c, "x1-priv", "addTenantAccess", c.other_project, "bob"),
    ):
        assert refused.status_code == 403 and "forbidden" in refused.json(), refused.text
    assert not bob_sees()
    given = _access(c, "x1-priv", "addTenantAccess", c.other_project)
    assert given.status_code == 200, given.text
    expected = {"flavor_access": [{"flavor_id": "x1-priv", "tenant_id": c.other_project}]}
    assert given.json() == expected
    again = _access(c, "x1-priv", "addTenantAccess", c.other_project)
    assert again.status_code == 409 and "conflictingRequest" in again.json(), again.text
    assert _access(c, "x1-pub", "addTenantAccess", c.other_project).status_code == 409
    assert c.ok("GET", "/flavors/x1-priv/os-flavor-access") == expected
    assert bob_sees()
    assert c.call("GET", "/flavors/x1-priv", "alice").status_code == 404  # given to other only
    removed = _access(c, "x1-priv", "removeTenantAccess", c.other_project)
    assert removed.status_code == 200 and removed.json() == {"flavor_access": []}, removed.text
    absent = _access(c, "x1-priv", "removeTenantAccess", c.other_project)
    assert absent.status_code == 404 and "itemNotFound" in absent.json(), absent.text
    assert not bob_sees()
    assert _access(c, "no-such", "addTenantAccess", c.other_project).status_code == 404
    for name in ("x1-priv", "x1-pub"):
        assert c.call("DELETE", f"/flavors/{name}").status_code == 202


@pytest.mark.parametrize(
    "body",
    [
        {"addTenantAccess": {}},
        {"addTenantAccess": {"tenant": ""}},
        {"addTenantAccess": {"tenant": 5}},
        {"addTenantAccess": {"tenant": "p" * 256}},
        {"addTenantAccess": {"tenant": "p", "role": "x"}},
        {"addTenantAccess": "p"},
        {"addTenantAccess": {"tenant": "p"}, "removeTenantAccess": {"tenant": "p"}},
        {"frobnicate": {"tenant": "p"}},
        {},
    ],
)
def test_a_bad_flavor_action_is_400_and_writes_nothing(cloud: ExtrasCloud, body: Any) -> None:
    c = cloud
    if "x1-badaccess" not in [f["id"] for f in c.ok("GET", "/flavors?is_public=none")["flavors"]]:
        _make_flavor(c, "x1-badaccess", public=False)
    answer = c.call("POST", "/flavors/x1-badaccess/action", "admin", body)
    assert answer.status_code == 400 and "badRequest" in answer.json(), answer.text
    assert c.ok("GET", "/flavors/x1-badaccess/os-flavor-access") == {"flavor_access": []}


def test_a_private_flavor_boots_only_in_the_projects_given_access(cloud: ExtrasCloud) -> None:
    """The boot's own look-up (the library's, which ``POST /servers`` calls): a project without
    access is told there is no such flavor, over HTTP (Nova's 400) as in the library."""
    c = cloud
    _make_flavor(c, "x1-boot", public=False)
    server = {"server": {"name": "priv-1", "flavorRef": "x1-boot", "imageRef": "tiny"}}
    refused = c.call("POST", "/servers", "bob", server)
    assert refused.status_code == 400 and "x1-boot" in refused.json()["badRequest"]["message"], refused.text
    with pytest.raises(exceptions.FlavorNotFound):
        c.lib.api.create(c.bob, {"name": "priv-1", "flavor": "x1-boot", "image": "tiny"})
    assert _access(c, "x1-boot", "addTenantAccess", c.other_project).status_code == 200
    made = boot(c.lib, c.bob, "priv-1", flavor="x1-boot")
    assert made["flavor"]["flavorid"] == "x1-boot"
    assert "priv-1" in [s["name"] for s in c.ok("GET", "/servers", "bob")["servers"]]


# ---------------------------------------------------------------- the openstack command


def _run(env: dict[str, str], *args: str) -> str:
    done = openstack(env, *args)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def test_the_openstack_command_manages_key_pairs(sqlite_cloud: ExtrasCloud, tmp_path: Path) -> None:
    c = sqlite_cloud
    alice = os_env(c.served, "alice", PASSWORDS["alice"])
    private = _run(alice, "keypair", "create", "k1")
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"), private
    public = _public_key()
    path = tmp_path / "k2.pub"
    path.write_text(public + "\n")
    made = json.loads(_run(alice, "keypair", "create", "--public-key", str(path), "-f", "json", "k2"))
    assert made["name"] == "k2" and made["type"] == "ssh"
    listed = json.loads(_run(alice, "keypair", "list", "-f", "json"))
    assert {"k1", "k2"} <= {k["Name"] for k in listed}
    shown = json.loads(_run(alice, "keypair", "show", "-f", "json", "k2"))
    assert shown["fingerprint"] == made["fingerprint"] and shown["name"] == "k2"
    assert _run(alice, "keypair", "show", "--public-key", "k2").strip() == public
    bob = os_env(c.served, "bob", PASSWORDS["bob"], project="other")
    refused = openstack(bob, "keypair", "show", "k2")
    assert refused.returncode != 0 and "No Keypair found for k2" in refused.stderr, refused.stderr
    _run(alice, "keypair", "delete", "k1", "k2")
    assert not {"k1", "k2"} & set(c.keypair_names("alice"))


def test_the_openstack_command_manages_server_groups(sqlite_cloud: ExtrasCloud) -> None:
    c = sqlite_cloud
    alice = os_env(c.served, "alice", PASSWORDS["alice"])
    made = json.loads(
        _run(alice, "server", "group", "create", "--policy", "anti-affinity", "-f", "json", "g1")
    )
    assert made["name"] == "g1" and "anti-affinity" in str(made.get("policy", made))
    listed = json.loads(_run(alice, "server", "group", "list", "-f", "json"))
    assert [g["Name"] for g in listed if g["ID"] == made["id"]] == ["g1"]
    shown = json.loads(_run(alice, "server", "group", "show", "-f", "json", "g1"))
    assert shown["id"] == made["id"]
    _run(alice, "server", "group", "delete", "g1")
    assert "g1" not in c.group_names("alice")


def test_the_openstack_command_shows_and_sets_quotas(sqlite_cloud: ExtrasCloud) -> None:
    c = sqlite_cloud
    admin = os_env(c.served)
    shown = _run(admin, "quota", "show", "-f", "json")
    rows = json.loads(shown)
    found = {r["Resource"]: r["Limit"] for r in rows} if isinstance(rows, list) else rows
    assert "instances" in found, shown
    _run(admin, "quota", "set", "--instances", "20", "other")
    assert c.ok("GET", f"/os-quota-sets/{c.other_project}")["quota_set"]["instances"] == 20
    alice = os_env(c.served, "alice", PASSWORDS["alice"])
    refused = openstack(alice, "quota", "set", "--instances", "30", "admin")
    assert refused.returncode != 0, refused.stdout
    assert c.ok("GET", f"/os-quota-sets/{c.admin_project}")["quota_set"]["instances"] != 30


def test_the_openstack_command_manages_flavors(sqlite_cloud: ExtrasCloud) -> None:
    c = sqlite_cloud
    admin = os_env(c.served)
    made = json.loads(
        _run(
            admin, "flavor", "create", "--ram", "512", "--vcpus", "1", "--disk", "1", "-f", "json", "m1.tiny"
        )
    )
    assert (made["name"], made["ram"], made["vcpus"], made["disk"]) == ("m1.tiny", 512, 1, 1)
    assert "m1.tiny" in c.flavor_names()
    alice = os_env(c.served, "alice", PASSWORDS["alice"])
    refused = openstack(alice, "flavor", "delete", "m1.tiny")
    assert refused.returncode != 0 and "m1.tiny" in c.flavor_names()
    _run(admin, "flavor", "delete", "m1.tiny")
    assert "m1.tiny" not in c.flavor_names()


def test_the_openstack_command_sets_flavor_properties_and_access(sqlite_cloud: ExtrasCloud) -> None:
    c = sqlite_cloud
    _make_flavor(c, "x1-osc", public=False)
    admin = os_env(c.served)
    given = ("--property", "hw:cpu_policy=dedicated", "--property", "k2=v2", "--project", "other")
    _run(admin, "flavor", "set", *given, "x1.osc")
    shown = json.loads(_run(admin, "flavor", "show", "-f", "json", "x1.osc"))
    assert shown["properties"] == {"hw:cpu_policy": "dedicated", "k2": "v2"}, shown
    assert c.other_project in str(shown.get("access_project_ids")), shown
    assert c.ok("GET", "/flavors/x1-osc/os-flavor-access")["flavor_access"] == [
        {"flavor_id": "x1-osc", "tenant_id": c.other_project}
    ]
    _run(admin, "flavor", "unset", "--property", "k2", "--project", "other", "x1.osc")
    assert c.ok("GET", "/flavors/x1-osc/os-extra_specs") == {"extra_specs": {"hw:cpu_policy": "dedicated"}}
    assert c.ok("GET", "/flavors/x1-osc/os-flavor-access") == {"flavor_access": []}
    assert c.call("DELETE", "/flavors/x1-osc").status_code == 202


def test_the_openstack_command_sets_a_quota_below_the_use_with_force(sqlite_cloud: ExtrasCloud) -> None:
    c = sqlite_cloud
    admin = os_env(c.served)
    used = _instances_in_use(c)
    before = c.ok("GET", f"/os-quota-sets/{c.other_project}")["quota_set"]["instances"]
    refused = openstack(admin, "quota", "set", "--instances", str(used - 1), "other")
    assert refused.returncode != 0 and "force" in refused.stderr, refused.stderr
    assert c.ok("GET", f"/os-quota-sets/{c.other_project}")["quota_set"]["instances"] == before
    _run(admin, "quota", "set", "--force", "--instances", str(used - 1), "other")
    assert c.ok("GET", f"/os-quota-sets/{c.other_project}")["quota_set"]["instances"] == used - 1
    c.ok("PUT", f"/os-quota-sets/{c.other_project}", "admin", {"quota_set": {"instances": 10}})


def test_no_secret_in_the_log(cloud: ExtrasCloud) -> None:
    """Last in the module: no password, token or generated private key in the service's log. It
    makes a key pair of its own first, so that it leans on no other test having run."""
    made = cloud.call("POST", "/os-keypairs", "alice", {"keypair": {"name": "leak-check"}}, version="2.2")
    assert made.status_code == 201, made.text
    cloud.served.secrets.append(made.json()["keypair"]["private_key"])
    assert cloud.call("DELETE", "/os-keypairs/leak-check", "alice", version="2.2").status_code == 204
    log = cloud.served.log.read_text()
    assert "/compute/v2.1/os-keypairs" in log
    assert not [s for s in cloud.served.secrets if s in log]
    assert "PRIVATE KEY" not in log
