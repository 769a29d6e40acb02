"""``GET /network/v2.0/ports`` filtered, sorted and paged as Neutron does it, through a real
``novakit serve`` on SQLite and PostgreSQL: Neutron's filters (``fixed_ips`` too), several
``sort_key``/``sort_dir`` pairs, pages walked by their ``ports_links``, Neutron's 400s, and a
member who never sees another project's ports, not even through a marker. And the library's
listing with a limit reads the page only (its query has the LIMIT, the fixed IPs are read for
the page's ports).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import event

from novakit.context import RequestContext
from novakit.network import ports
from tests.functional.service.conftest import add_user, identity_session, serve_cloud
from tests.functional.service.test_network import ALICE_PW, BOB_PW, NetCloud, _neutron_error

pytestmark = pytest.mark.xdist_group("network-ports")

#: alice's ports (admin project): name -> the last octet of its address
ALICES = {"pa": 20, "pb": 21, "pc": 22, "pd": 23, "pe": 24, "pf": 25, "pg": 26}


@pytest.fixture(scope="module")
def cloud(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCloud]:
    from novakit.identity import projects

    with serve_cloud(backend, tmp_path_factory.mktemp("serve"), "ports") as served:
        with identity_session(served) as session:
            projects.create(session, "other")
        add_user(served, "alice", ALICE_PW, project="admin")
        add_user(served, "bob", BOB_PW, project="other")
        with served.client() as http:
            c = NetCloud(served, backend, http)
            # The admin's networks: its project's (alice's), and one shared, where bob's ports go.
            made = {}
            for who, name, cidr in (("alice", "a-net", "10.61.0.0/24"), ("bob", "b-net", "10.62.0.0/24")):
                made[who] = c.made("networks", "network", {"name": name, "shared": who == "bob"})
                subnet = {"name": f"{name}-v4", "network_id": made[who]["id"], "cidr": cidr, "ip_version": 4}
                c.made("subnets", "subnet", subnet)
            # Made out of name order, so that creation order and name order differ.
            for name in sorted(ALICES, reverse=True):
                fixed = [{"ip_address": f"10.61.0.{ALICES[name]}"}]
                body = {"network_id": made["alice"]["id"], "name": name, "fixed_ips": fixed}
                c.made("ports", "port", body, "alice")
            for name in ("pa", "zz"):
                c.made("ports", "port", {"network_id": made["bob"]["id"], "name": name}, "bob")
            yield c


def _net(c: NetCloud, name: str) -> dict[str, Any]:
    [net] = c.call("GET", "/v2.0/networks", "admin", name=name).json()["networks"]
    return dict(net)


def _list(c: NetCloud, who: str = "alice", **params: Any) -> dict[str, Any]:
    answer = c.call("GET", "/v2.0/ports", who, **params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _names(c: NetCloud, who: str = "alice", **params: Any) -> list[str]:
    return [p["name"] for p in _list(c, who, **params)["ports"]]


def _follow(c: NetCloud, href: str, who: str = "alice") -> dict[str, Any]:
    """A page by its link: the link's path and query, as a client follows it."""
    parts = urlsplit(href)
    assert parts.path == "/network/v2.0/ports"
    answer = c.http.get(f"{parts.path}?{parts.query}", headers={"X-Auth-Token": c.token(who)})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _link(body: dict[str, Any], rel: str) -> str | None:
    found = [link["href"] for link in body.get("ports_links", []) if link["rel"] == rel]
    return found[0] if found else None


def test_neutrons_filters(cloud: NetCloud) -> None:
    c = cloud
    a_net = _net(c, "a-net")
    everyone = _list(c, "alice")["ports"]
    assert sorted(p["name"] for p in everyone) == sorted(ALICES) and "ports_links" not in _list(c)
    by_name = {p["name"]: p for p in everyone}
    assert _names(c, name="pc") == ["pc"]
    assert sorted(_names(c, name=["pc", "pe"])) == ["pc", "pe"]  # given twice: either matches
    assert sorted(_names(c, id=[by_name["pa"]["id"], by_name["pg"]["id"]])) == ["pa", "pg"]
    assert sorted(_names(c, network_id=a_net["id"])) == sorted(ALICES)
    assert _names(c, mac_address=by_name["pb"]["mac_address"]) == ["pb"]
    assert _names(c, fixed_ips="ip_address=10.61.0.23") == ["pd"]
    subnet = by_name["pd"]["fixed_ips"][0]["subnet_id"]
    assert sorted(_names(c, fixed_ips=f"subnet_id={subnet}")) == sorted(ALICES)
    assert _names(c, fixed_ips=[f"subnet_id={subnet}", "ip_address=10.61.0.26"]) == ["pg"]
    assert sorted(_names(c, status="DOWN")) == sorted(ALICES) and _names(c, status="ACTIVE") == []
    assert _names(c, device_owner="compute:nova") == [] and _names(c, device_id="none-such") == []
    assert sorted(_names(c, device_id="")) == sorted(ALICES)  # an empty value filters nothing (Neutron)
    group = by_name["pa"]["security_groups"][0]
    assert sorted(_names(c, security_groups=group)) == sorted(ALICES)
    assert _names(c, security_groups="no-such-group") == []
    assert sorted(_names(c, port_security_enabled="true")) == sorted(ALICES)
    assert _names(c, port_security_enabled="False") == []
    project = by_name["pa"]["project_id"]
    assert sorted(_names(c, project_id=project)) == sorted(_names(c, tenant_id=project)) == sorted(ALICES)
    # fields= still keeps only the attributes named.
    assert _list(c, name="pa", fields=["id", "name"])["ports"] == [{"id": by_name["pa"]["id"], "name": "pa"}]


def test_sorted_by_several_keys(cloud: NetCloud) -> None:
    c = cloud
    assert _names(c, sort_key="name", sort_dir="asc") == sorted(ALICES)
    assert _names(c, sort_key="name", sort_dir="desc") == sorted(ALICES, reverse=True)
    # The first key decides first: all DOWN, so the name decides.
    assert _names(c, sort_key=["status", "name"], sort_dir=["asc", "desc"]) == sorted(ALICES, reverse=True)
    listed = _list(c, sort_key="mac_address", sort_dir="desc")["ports"]
    assert [p["mac_address"] for p in listed] == sorted((p["mac_address"] for p in listed), reverse=True)
    listed = _list(c, sort_key="id", sort_dir="asc")["ports"]
    assert [p["id"] for p in listed] == sorted(p["id"] for p in listed)


def test_pages_walked_by_their_links(cloud: NetCloud) -> None:
    c = cloud
    first = _list(c, sort_key="name", sort_dir="asc", limit=3)
    assert [p["name"] for p in first["ports"]] == ["pa", "pb", "pc"]
    # Neutron links a first page to its previous one too (an empty page, whose next is the first).
    assert [link["rel"] for link in first["ports_links"]] == ["next", "previous"]
    walked, body, hops = [], first, 0
    while True:
        walked += [p["name"] for p in body["ports"]]
        following = _link(body, "next")
        if following is None:
            break
        query = parse_qs(urlsplit(following).query)
        assert query["limit"] == ["3"] and query["sort_key"] == ["name"] and "page_reverse" not in query
        body, hops = _follow(c, following), hops + 1
    assert walked == sorted(ALICES) and hops == 2  # 3 + 3 + 1: the short last page has no next
    second = _follow(c, str(_link(first, "next")))
    assert [p["name"] for p in second["ports"]] == ["pd", "pe", "pf"]
    back = _follow(c, str(_link(second, "previous")))
    assert [p["name"] for p in back["ports"]] == ["pa", "pb", "pc"]
    assert parse_qs(urlsplit(str(_link(second, "previous"))).query)["page_reverse"] == ["True"]
    # Before the first: an empty page with no previous, whose next is the first page again.
    before = _follow(c, str(_link(first, "previous")))
    assert before["ports"] == [] and _link(before, "previous") is None
    assert [p["name"] for p in _follow(c, str(_link(before, "next")))["ports"]] == ["pa", "pb", "pc"]
    # Descending, two keys, with a filter: the pages keep all three.
    asked = {"sort_key": ["status", "name"], "sort_dir": ["asc", "desc"], "limit": 4, "status": "DOWN"}
    down = _list(c, **asked)
    assert [p["name"] for p in down["ports"]] == ["pg", "pf", "pe", "pd"]
    assert [p["name"] for p in _follow(c, str(_link(down, "next")))["ports"]] == ["pc", "pb", "pa"]
    # limit=0 is the whole listing, as no limit is (Neutron's); a marker is then not read.
    assert _names(c, limit=0, sort_key="name", sort_dir="asc", marker="anything") == sorted(ALICES)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"sort_key": "fixed_ips", "sort_dir": "asc"}, "sort_key"),
        ({"sort_key": "nope", "sort_dir": "asc"}, "sort_key"),
        ({"sort_key": "name"}, "sort_dir"),
        ({"sort_key": "name", "sort_dir": "up"}, "sort_dir"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"fixed_ips": "10.61.0.20"}, "fixed_ips"),
        ({"port_security_enabled": "maybe"}, "port_security_enabled"),
    ],
)
def test_a_bad_query_is_400_naming_the_field(cloud: NetCloud, params: dict[str, str], field: str) -> None:
    c = cloud
    before = _names(c, "alice", sort_key="name", sort_dir="asc")
    error = _neutron_error(c.call("GET", "/v2.0/ports", "alice", **params), 400, "HTTPBadRequest")
    assert field in error["message"]
    assert _names(c, "alice", sort_key="name", sort_dir="asc") == before


def test_a_member_never_sees_another_projects_ports(cloud: NetCloud) -> None:
    c = cloud
    bobs = _list(c, "bob", sort_key="name", sort_dir="asc")["ports"]
    assert [p["name"] for p in bobs] == ["pa", "zz"]
    alices = _list(c, "alice", sort_key="name", sort_dir="asc")["ports"]
    # alice walks her pages one port at a time: bob's "pa" (same name) never shows.
    seen, body = [], _list(c, "alice", sort_key="name", sort_dir="asc", limit=1)
    while body["ports"]:
        seen += [p["id"] for p in body["ports"]]
        body = _follow(c, str(_link(body, "next")))
    assert seen == [p["id"] for p in alices]
    # A filter on another project's id finds nothing for a member; an admin's finds its ports.
    assert _names(c, "alice", project_id=bobs[0]["project_id"]) == []
    assert _names(c, "alice", name="zz") == [] and _names(c, "alice", id=bobs[1]["id"]) == []
    assert sorted(_names(c, "admin", project_id=bobs[0]["project_id"])) == ["pa", "zz"]
    # A marker of a port the caller may not see: Neutron's 404 (its _get_port finds none).
    _neutron_error(c.call("GET", "/v2.0/ports", "alice", limit=2, marker=bobs[0]["id"]), 404, "PortNotFound")
    _neutron_error(c.call("GET", "/v2.0/ports", "bob", limit=2, marker="no-such-port"), 404, "PortNotFound")
    # The admin's marker of bob's port works: the ports after it, of every project.
    after = _list(c, "admin", sort_key="name", sort_dir="asc", limit=20, marker=bobs[0]["id"])
    assert "zz" in [p["name"] for p in after["ports"]]


def test_the_librarys_listing_reads_the_page_only(cloud: NetCloud) -> None:
    """A page's query has the LIMIT, and the fixed IPs and groups are read for its ports only."""
    db = cloud.served.database()
    statements: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        statements.append((statement, parameters))

    try:
        alice = RequestContext(_list(cloud)["ports"][0]["project_id"], "alice", ["member"])
        whole = ports.list_ports(db, alice, sort=[("name", "asc")])
        event.listen(db.engine, "before_cursor_execute", seen)
        page = ports.list_ports(db, alice, sort=[("name", "asc")], limit=2, marker=whole[1]["id"])
        event.remove(db.engine, "before_cursor_execute", seen)
        assert [p["name"] for p in page] == ["pc", "pd"]
        listed = [s for s, _ in statements if "FROM ports" in s and "ORDER BY" in s]
        assert len(listed) == 1 and "LIMIT" in listed[0].upper()
        for table in ("ip_allocations", "security_group_port_bindings"):
            [(_, parameters)] = [(s, p) for s, p in statements if f"FROM {table}" in s]
            values = list(parameters.values()) if isinstance(parameters, dict) else list(parameters)
            # the page's two port ids, nothing more
            assert len([v for v in values if isinstance(v, int)]) == 2, (table, parameters)
    finally:
        db.dispose()


def test_no_limit_lists_every_port_with_no_links(cloud: NetCloud) -> None:
    c = cloud
    body = _list(c, "admin")
    assert {"pa", "zz"} <= {p["name"] for p in body["ports"]} and "ports_links" not in body
