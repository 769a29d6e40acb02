"""Aborting a live migration through a real ``novakit serve``: ``DELETE
/servers/{id}/migrations/{migration_id}`` (2.24) by plain HTTP on both back ends, and the real
``openstack server migration abort`` on SQLite.

The server's host runs the fake driver's ``slow_live_migration`` for the test (its registration's
options, which the service reads), so that the abort lands while the migration runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

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

pytestmark = pytest.mark.xdist_group("service_migration_abort")


@dataclass
class AbortCloud:
    served: Served
    lib: Cloud
    flavor: str
    image: str
    network: str
    bobs_network: str
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, who: str) -> str:
        if who not in self.tokens:
            self.tokens[who] = (
                self.served.issue() if who == "admin" else self.served.issue("bob", "bob-pw-1", "other")
            )
        return self.tokens[who]

    def call(
        self, method: str, path: str, who: str = "admin", body: Any = None, version: str = "2.24"
    ) -> httpx.Response:
        headers = {"X-Auth-Token": self.token(who), "OpenStack-API-Version": f"compute {version}"}
        with self.served.client() as http:
            return http.request(method, f"/compute/v2.1{path}", headers=headers, json=body)

    def boot(self, name: str, who: str = "admin") -> dict[str, Any]:
        network = self.network if who == "admin" else self.bobs_network
        server = {
            "name": name,
            "flavorRef": self.flavor,
            "imageRef": self.image,
            "networks": [{"uuid": network}],
        }
        made = self.call("POST", "/servers", who, {"server": server})
        assert made.status_code == 202, made.text
        uuid = made.json()["server"]["id"]
        wait_for(lambda: self.server(uuid, who)["status"] == "ACTIVE", f"{name} ACTIVE")
        return self.server(uuid, who)

    def server(self, uuid: str, who: str = "admin") -> dict[str, Any]:
        answer = self.call("GET", f"/servers/{uuid}", who, version="2.79")
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["server"])

    def migrations(self, uuid: str) -> list[dict[str, Any]]:
        found = self.call("GET", f"/os-migrations?instance_uuid={uuid}", version="2.59")
        assert found.status_code == 200, found.text
        return list(found.json()["migrations"])


def wait_for(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not {what} after {seconds} s")


def _bobs_lan(db: Any, project_id: str) -> str:
    """A network of bob's project (``bob-lan``, 10.1.0.0/24), made by an admin; its id."""
    from novakit.network import networks, subnets

    owner = RequestContext(project_id=project_id, user_id="admin", roles=["admin"])
    net = networks.create(db, owner, {"name": "bob-lan"})
    assert net is not None
    subnets.create(db, owner, {"name": "bob-lan-v4", "network": "bob-lan", "cidr": "10.1.0.0/24"})
    return str(net["id"])


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AbortCloud]:
    from novakit.identity import projects

    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud(backend, directory, "abort") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "bob", "bob-pw-1", project="other")
        served.secrets += ["bob-pw-1"]
        db = served.database()
        try:
            lib = make_cloud(db, directory)
            net = make_lan(db, keystone_admin(served))
            bob = served.validate(served.issue("bob", "bob-pw-1", "other")).json()["token"]
            bobs = _bobs_lan(db, bob["project"]["id"])
            flavor = flavors.show(db, lib.admin, "m1.small")["id"]
            image = images.show(db, lib.admin, "tiny")["id"]
            yield AbortCloud(served, lib, flavor, image, net, bobs)
        finally:
            db.dispose()


@pytest.fixture(scope="module")
def sqlite_cloud(backend: str, cloud: AbortCloud) -> AbortCloud:
    if backend != "sqlite":
        pytest.skip("the openstack command drives the same service on both back ends: SQLite only")
    return cloud


def _slowly_migrating(c: AbortCloud, name: str) -> tuple[dict[str, Any], str]:
    """A server booted and live migrating (its host made slow at it): it, and the migration's id."""
    server = c.boot(name)
    uuid, source = server["id"], server["OS-EXT-SRV-ATTR:host"]
    c.lib.add_host(source, failure_mode="slow_live_migration", live_migration_delay=30)
    try:
        body = {"os-migrateLive": {"host": None, "block_migration": "auto"}}
        moved = c.call("POST", f"/servers/{uuid}/action", body=body, version="2.30")
        assert moved.status_code == 202, moved.text
        wait_for(lambda: c.lib.fake(source).live_migration_running(uuid), "live migrating")
    finally:
        c.lib.add_host(source)  # the running job keeps its options; the next one is quick
    [mig] = c.call("GET", f"/servers/{uuid}/migrations").json()["migrations"]
    assert mig["status"] == "running"
    return server, mig["id"]


def _cancelled(c: AbortCloud, server: dict[str, Any], mig: str) -> None:
    uuid, source = server["id"], server["OS-EXT-SRV-ATTR:host"]
    wait_for(lambda: c.server(uuid)["OS-EXT-STS:task_state"] is None, "the migration ended")
    shown = c.server(uuid)
    assert (shown["status"], shown["OS-EXT-SRV-ATTR:host"]) == ("ACTIVE", source)
    [found] = c.migrations(uuid)
    assert (found["uuid"], found["status"]) == (mig, "cancelled")
    assert c.call("GET", f"/servers/{uuid}/migrations").json() == {"migrations": []}


def test_an_admin_aborts_a_live_migration_and_refusals_answer_novas_codes(cloud: AbortCloud) -> None:
    c = cloud
    theirs = c.boot("bobs-1", "bob")
    server, mig = _slowly_migrating(c, "abort-1")
    uuid = server["id"]
    path = f"/servers/{uuid}/migrations/{mig}"
    assert c.call("DELETE", path, version="2.23").status_code == 404  # the route is 2.24's
    assert c.call("DELETE", path, "bob").status_code == 404  # another project's server
    refused = c.call("DELETE", f"/servers/{theirs['id']}/migrations/{mig}", "bob")
    assert refused.status_code == 403 and "forbidden" in refused.json()  # admin only
    unknown = c.call("DELETE", f"/servers/{uuid}/migrations/00000000-0000-4000-8000-000000000000")
    assert unknown.status_code == 404 and "itemNotFound" in unknown.json()
    assert c.call("GET", f"/servers/{uuid}/migrations/{mig}").json()["migration"]["status"] == "running"

    aborted = c.call("DELETE", path)
    assert aborted.status_code == 202, aborted.text
    _cancelled(c, server, mig)
    again = c.call("DELETE", path, version="2.65")
    assert again.status_code == 400 and "badRequest" in again.json()
    actions = c.call("GET", f"/servers/{uuid}/os-instance-actions").json()["instanceActions"]
    assert "live_migration_cancel" in [a["action"] for a in actions]


def test_the_openstack_command_aborts_a_live_migration(sqlite_cloud: AbortCloud) -> None:
    c = sqlite_cloud
    server, mig = _slowly_migrating(c, "abort-cli-1")
    admin = os_env(c.served)
    done = openstack(
        admin, "--os-compute-api-version", "2.65", "server", "migration", "abort", "abort-cli-1", mig
    )
    assert done.returncode == 0, done.stderr
    _cancelled(c, server, mig)
