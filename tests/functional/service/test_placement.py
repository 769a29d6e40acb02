"""The Placement API (``/placement``) through a real ``novakit serve``: the version document and its
microversions, resource providers and what hangs off them, allocation candidates, a consumer's
allocations read, replaced and deleted, a project's usages; the admin's only (403 for a member,
401 without a token), in Placement's error shape. Plain HTTP on both back ends, and the real
``openstack`` command with osc-placement (unpatched, negotiating its microversion) on a server
booted by the library on the fake driver's hosts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from novakit.placement import api as placement
from tests.functional.cloud import Cloud, boot, make_cloud
from tests.functional.service.conftest import Served, add_user, openstack, os_env, serve_cloud

pytestmark = pytest.mark.xdist_group("placement")

NOBODY = "00000000-0000-4000-8000-000000000000"


@dataclass
class PlacementCloud:
    served: Served
    lib: Cloud
    server: dict[str, Any]  # booted by the library, on the admin's (operator path) project
    providers: dict[str, str]  # host -> provider uuid
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str) -> str:
        if who not in self.tokens:
            self.tokens[who] = (
                self.served.issue() if who == "admin" else self.served.issue("carol", "carol-pw-1")
            )
        return self.tokens[who]

    def call(
        self,
        method: str,
        path: str,
        who: str | None = "admin",
        version: str | None = "1.24",
        body: Any = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who)} if who is not None else {}
        if version is not None:
            headers["OpenStack-API-Version"] = f"placement {version}"
        with self.served.client() as http:
            if content is not None:
                headers["Content-Type"] = "application/json"
                return http.request(method, f"/placement{path}", headers=headers, content=content)
            return http.request(method, f"/placement{path}", headers=headers, json=body)

    def allocations(self, consumer: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/allocations/{consumer}").json())


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlacementCloud]:
    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "placement") as served:
        add_user(served, "carol", "carol-pw-1")
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            server = boot(lib, lib.admin, "placed-1")
            uuids = {
                host: placement.get_provider(db, host).uuid
                for host in ("compute-1", "compute-2", "compute-3")
            }
            yield PlacementCloud(served, lib, server, uuids)
        finally:
            db.dispose()


def _error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    (entry,) = answer.json()["errors"]
    assert entry["status"] == status and entry["request_id"] == answer.headers["x-openstack-request-id"]
    assert entry["code"].startswith("placement.")
    return dict(entry)


def test_the_version_document_and_the_microversion_headers(cloud: PlacementCloud) -> None:
    root = cloud.call("GET", "", who=None, version=None)
    assert root.status_code == 200
    (v1,) = root.json()["versions"]
    assert v1["id"] == "v1.0" and v1["status"] == "CURRENT"
    assert (v1["min_version"], v1["max_version"]) == ("1.0", "1.24")
    assert root.headers["openstack-api-version"] == "placement 1.0"
    assert "openstack-api-version" in root.headers["vary"].lower()
    latest = cloud.call("GET", "/resource_providers", version="latest")
    assert latest.headers["openstack-api-version"] == "placement 1.24"
    # What osc-placement's negotiation reads: the 406 names the range.
    too_new = _error(cloud.call("GET", "/", who=None, version="1.29"), 406)
    assert (too_new["min_version"], too_new["max_version"]) == ("1.0", "1.24")
    assert cloud.call("GET", "/", who=None, version="one").status_code == 400


def test_no_token_is_401_and_a_member_is_refused_everywhere(cloud: PlacementCloud) -> None:
    rp = cloud.providers["compute-1"]
    reads = [
        "/resource_providers",
        f"/resource_providers/{rp}",
        f"/resource_providers/{rp}/inventories",
        f"/resource_providers/{rp}/usages",
        f"/resource_providers/{rp}/traits",
        f"/resource_providers/{rp}/aggregates",
        "/traits",
        "/allocation_candidates?resources=VCPU:1",
        f"/allocations/{cloud.server['id']}",
        "/usages?project_id=admin",
    ]
    for path in reads:
        assert cloud.call("GET", path, who=None).status_code == 401, path
        refused = _error(cloud.call("GET", path, who="member"), 403)
        assert "placement:" in refused["detail"], path
    before = cloud.allocations(cloud.server["id"])
    body = {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}
    _error(cloud.call("PUT", f"/allocations/{NOBODY}", who="member", body=body), 403)
    _error(cloud.call("DELETE", f"/allocations/{cloud.server['id']}", who="member"), 403)
    assert cloud.allocations(cloud.server["id"]) == before
    assert cloud.allocations(NOBODY) == {"allocations": {}}
    assert cloud.call("PUT", f"/allocations/{NOBODY}", who=None, body=body).status_code == 401


def test_providers_their_inventories_usages_traits_and_aggregates(cloud: PlacementCloud) -> None:
    listed = cloud.call("GET", "/resource_providers").json()["resource_providers"]
    assert sorted(p["name"] for p in listed) == ["compute-1", "compute-2", "compute-3"]
    rp = cloud.providers["compute-3"]
    one = cloud.call("GET", f"/resource_providers/{rp}").json()
    assert one["uuid"] == rp and one["name"] == "compute-3" and one["root_provider_uuid"] == rp
    assert one["parent_provider_uuid"] is None
    assert {link["rel"] for link in one["links"]} >= {
        "self",
        "inventories",
        "usages",
        "traits",
        "allocations",
    }
    old = cloud.call("GET", f"/resource_providers/{rp}", version="1.0").json()
    assert "root_provider_uuid" not in old and {link["rel"] for link in old["links"]} == {
        "self",
        "inventories",
        "usages",
    }
    inv = cloud.call("GET", f"/resource_providers/{rp}/inventories").json()
    assert inv["resource_provider_generation"] == one["generation"]
    assert inv["inventories"]["VCPU"]["total"] == 32 and inv["inventories"]["VCPU"]["allocation_ratio"] == 4.0
    vcpu = cloud.call("GET", f"/resource_providers/{rp}/inventories/VCPU").json()
    assert vcpu["total"] == 32 and vcpu["resource_provider_generation"] == one["generation"]
    _error(cloud.call("GET", f"/resource_providers/{rp}/inventories/CUSTOM_GPU"), 404)
    usages = cloud.call("GET", f"/resource_providers/{rp}/usages").json()
    assert set(usages["usages"]) == set(inv["inventories"])
    held = cloud.call("GET", f"/resource_providers/{rp}/traits").json()
    assert held["resource_provider_generation"] == one["generation"]
    # The fake driver's hosts say they can set an admin password (a capability trait of theirs).
    assert "CUSTOM_ADMIN_PASSWORD" in held["traits"]
    assert cloud.call("GET", "/traits?name=startswith:CUSTOM_ADMIN").json() == {
        "traits": ["CUSTOM_ADMIN_PASSWORD"]
    }
    # A trait no provider has now (a disabled host's, removed when it was enabled again) is still known.
    unheld = cloud.call("GET", "/traits?associated=false").json()["traits"]
    assert "CUSTOM_ADMIN_PASSWORD" not in unheld and set(unheld) <= {"COMPUTE_STATUS_DISABLED"}
    aggregates = cloud.call("GET", f"/resource_providers/{rp}/aggregates").json()
    assert aggregates == {"aggregates": [], "resource_provider_generation": one["generation"]}
    # A name is no provider's uuid; an unknown uuid is Placement's 404.
    _error(cloud.call("GET", "/resource_providers/compute-3"), 404)
    assert "could not be found" in _error(cloud.call("GET", f"/resource_providers/{NOBODY}"), 404)["detail"]
    _error(cloud.call("GET", f"/resource_providers/{rp}/traits", version="1.5"), 404)


def test_the_listing_filters(cloud: PlacementCloud) -> None:
    def names(query: str, version: str = "1.24") -> list[str]:
        answer = cloud.call("GET", f"/resource_providers?{query}", version=version)
        assert answer.status_code == 200, answer.text
        return sorted(p["name"] for p in answer.json()["resource_providers"])

    assert names("name=compute-2") == ["compute-2"]
    assert names(f"uuid={cloud.providers['compute-1']}") == ["compute-1"]
    assert names(f"in_tree={cloud.providers['compute-1']}&name=compute-2") == []
    # 8 VCPUs at 4.0 are 32; compute-2 has 64, compute-3 128.
    # 16, 32 and 64 GiB of memory (512 MiB reserved); 400, 800 and 1600 GB of disk.
    assert names("resources=MEMORY_MB:20000") == ["compute-2", "compute-3"]
    assert names("resources=MEMORY_MB:20000,DISK_GB:1000") == ["compute-3"]
    assert names("resources=VCPU:17") == ["compute-3"]  # above compute-2's max_unit (16 VCPUs)
    assert names(f"member_of=in:{NOBODY}") == []
    assert names("required=CUSTOM_ADMIN_PASSWORD") == ["compute-1", "compute-2", "compute-3"]
    assert names("required=!CUSTOM_ADMIN_PASSWORD") == []
    for query, version in [
        ("required=HW_CPU_X86_AVX2", "1.24"),
        ("resources=VCPU", "1.24"),
        ("resources=VCPU:0", "1.24"),
        ("resources=VCPU:1", "1.3"),
        ("bogus=1", "1.24"),
        ("member_of=x", "1.24"),
    ]:
        _error(cloud.call("GET", f"/resource_providers?{query}", version=version), 400)


def test_allocation_candidates(cloud: PlacementCloud) -> None:
    answer = cloud.call("GET", "/allocation_candidates?resources=VCPU:1,MEMORY_MB:20000")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    rp3 = cloud.providers["compute-3"]
    assert {rp for r in body["allocation_requests"] for rp in r["allocations"]} == {
        cloud.providers["compute-2"],
        rp3,
    }
    assert body["allocation_requests"][-1]["allocations"][rp3] == {
        "resources": {"VCPU": 1, "MEMORY_MB": 20000}
    }
    summary = body["provider_summaries"][rp3]
    assert set(summary["resources"]) == {"VCPU", "MEMORY_MB"}
    assert summary["resources"]["VCPU"]["capacity"] == 128
    assert summary["resources"]["MEMORY_MB"]["capacity"] == 65536 - 512
    assert "CUSTOM_ADMIN_PASSWORD" in summary["traits"]
    limited = cloud.call("GET", "/allocation_candidates?resources=VCPU:1&limit=1").json()
    assert len(limited["allocation_requests"]) == 1
    listed = cloud.call("GET", "/allocation_candidates?resources=DISK_GB:1000", version="1.10").json()
    assert listed["allocation_requests"] == [
        {"allocations": [{"resource_provider": {"uuid": rp3}, "resources": {"DISK_GB": 1000}}]}
    ]
    _error(cloud.call("GET", "/allocation_candidates?resources=VCPU:1", version="1.9"), 404)
    _error(cloud.call("GET", "/allocation_candidates"), 400)
    _error(cloud.call("GET", "/allocation_candidates?resources=VCPU:1&limit=1", version="1.15"), 400)


def test_a_booted_servers_allocations_and_its_projects_usages(cloud: PlacementCloud) -> None:
    shown = cloud.allocations(cloud.server["id"])
    host_rp = cloud.providers[cloud.server["host"]]
    assert shown["allocations"][host_rp]["resources"] == {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
    assert shown["project_id"] == cloud.server["project_id"]
    usages = cloud.call("GET", f"/usages?project_id={cloud.server['project_id']}").json()
    assert usages["usages"]["VCPU"] >= 1
    assert cloud.call("GET", f"/usages?project_id={NOBODY}").json() == {"usages": {}}
    _error(cloud.call("GET", "/usages"), 400)


@pytest.mark.parametrize(
    ("body", "version"),
    [
        ({"allocations": {}, "project_id": "p", "user_id": "u"}, "1.24"),
        ({"allocations": {"@": {"resources": {"VCPU": 1}}}}, "1.24"),  # no project, user: 1.8
        ({"allocations": {"@": {"resources": {"VCPU": 0}}}, "project_id": "p", "user_id": "u"}, "1.24"),
        ({"allocations": {"@": {"resources": {"VCPU": "1"}}}, "project_id": "p", "user_id": "u"}, "1.24"),
        ({"allocations": {"@": {"resources": {"BOGUS": 1}}}, "project_id": "p", "user_id": "u"}, "1.24"),
        (
            {"allocations": {"@": {"resources": {"VCPU": 1}, "x": 1}}, "project_id": "p", "user_id": "u"},
            "1.24",
        ),
        ({"allocations": {NOBODY: {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}, "1.24"),
        ({"allocations": {"@": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}, "1.11"),
        ({"allocations": [{"resource_provider": {"uuid": "@"}}]}, "1.0"),
        (
            {"allocations": {"@": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "z": 1},
            "1.24",
        ),
    ],
)
def test_a_bad_allocations_body_is_400_and_writes_nothing(
    cloud: PlacementCloud, body: dict[str, Any], version: str
) -> None:
    given = json.loads(json.dumps(body).replace('"@"', json.dumps(cloud.providers["compute-1"])))
    consumer = "11111111-1111-4111-8111-111111111111"
    _error(cloud.call("PUT", f"/allocations/{consumer}", version=version, body=given), 400)
    assert cloud.allocations(consumer) == {"allocations": {}}
    _error(cloud.call("PUT", f"/allocations/{consumer}", content=b"{not json"), 400)
    _error(cloud.call("PUT", "/allocations/not-a-uuid", body=given), 400)


def test_allocations_are_replaced_refused_when_they_do_not_fit_and_deleted(cloud: PlacementCloud) -> None:
    consumer = "22222222-2222-4222-8222-222222222222"
    rp1, rp2 = cloud.providers["compute-1"], cloud.providers["compute-2"]
    owner = {"project_id": "proj-x", "user_id": "user-x"}
    put = cloud.call(
        "PUT", f"/allocations/{consumer}", body={"allocations": {rp1: {"resources": {"VCPU": 2}}}, **owner}
    )
    assert put.status_code == 204 and put.content == b"", put.text
    assert put.headers["openstack-api-version"] == "placement 1.24"
    assert cloud.allocations(consumer)["allocations"][rp1]["resources"] == {"VCPU": 2}
    # Replaced: it now holds on two providers, nothing left on the first's VCPU.
    both = {rp1: {"resources": {"MEMORY_MB": 256}}, rp2: {"resources": {"VCPU": 3, "MEMORY_MB": 512}}}
    assert (
        cloud.call("PUT", f"/allocations/{consumer}", body={"allocations": both, **owner}).status_code == 204
    )
    held = cloud.allocations(consumer)
    assert {rp: a["resources"] for rp, a in held["allocations"].items()} == {
        rp1: {"MEMORY_MB": 256},
        rp2: {"VCPU": 3, "MEMORY_MB": 512},
    }
    assert (held["project_id"], held["user_id"]) == ("proj-x", "user-x")
    assert cloud.call("GET", "/usages?project_id=proj-x&user_id=user-x").json()["usages"] == {
        "MEMORY_MB": 768,
        "VCPU": 3,
    }
    too_much = {"allocations": {rp1: {"resources": {"VCPU": 1000}}}, **owner}
    refused = _error(cloud.call("PUT", f"/allocations/{consumer}", body=too_much), 409)
    assert "VCPU" in refused["detail"]
    assert cloud.allocations(consumer) == held
    old_form = {"allocations": [{"resource_provider": {"uuid": rp1}, "resources": {"VCPU": 1}}]}
    assert cloud.call("PUT", f"/allocations/{consumer}", version="1.0", body=old_form).status_code == 204
    assert cloud.call("GET", f"/allocations/{consumer}", version="1.0").json() == {
        "allocations": {
            rp1: {
                "generation": cloud.allocations(consumer)["allocations"][rp1]["generation"],
                "resources": {"VCPU": 1},
            }
        }
    }
    assert cloud.call("DELETE", f"/allocations/{consumer}").status_code == 204
    assert cloud.allocations(consumer) == {"allocations": {}}
    assert "No allocations" in _error(cloud.call("DELETE", f"/allocations/{consumer}"), 404)["detail"]


# ---------------------------------------------------------------- the real openstack command


def _run(cloud: PlacementCloud, *args: str) -> Any:
    done = openstack(os_env(cloud.served), *args, "-f", "json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def test_openstack_lists_providers_and_shows_a_servers_allocations(cloud: PlacementCloud) -> None:
    listed = _run(cloud, "resource", "provider", "list")
    assert sorted(p["name"] for p in listed) == ["compute-1", "compute-2", "compute-3"]
    assert {p["uuid"] for p in listed} == set(cloud.providers.values())
    shown = _run(cloud, "resource", "provider", "allocation", "show", cloud.server["id"])
    host_rp = cloud.providers[cloud.server["host"]]
    assert [a["resource_provider"] for a in shown] == [host_rp]
    assert shown[0]["resources"] == {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


def test_openstack_shows_a_provider_its_inventory_usage_and_candidates(
    cloud: PlacementCloud, backend: str
) -> None:
    if backend != "sqlite":
        pytest.skip("the same service answers on both back ends: the rest of the commands on SQLite only")
    host_rp = cloud.providers[cloud.server["host"]]
    shown = _run(cloud, "resource", "provider", "show", host_rp)
    assert shown["uuid"] == host_rp and shown["name"] == cloud.server["host"]
    inventory = {
        i["resource_class"]: i for i in _run(cloud, "resource", "provider", "inventory", "list", host_rp)
    }
    assert set(inventory) == {"VCPU", "MEMORY_MB", "DISK_GB"}
    usage = {
        u["resource_class"]: u["usage"] for u in _run(cloud, "resource", "provider", "usage", "show", host_rp)
    }
    assert usage["VCPU"] >= 1 and usage["MEMORY_MB"] >= 1024
    found = _run(
        cloud, "allocation", "candidate", "list", "--resource", "VCPU=1", "--resource", "MEMORY_MB=512"
    )
    assert {c["resource provider"] for c in found} == set(cloud.providers.values())
