"""A host's networks, as its driver reports them, are what the network filter reads."""

from __future__ import annotations

from sqlalchemy import text

from novakit.fleet import hosts
from novakit.host.messages import ComputeResult

from .cloud import Cloud


def _stored(cloud: Cloud, host: str) -> tuple[object, bool]:
    with cloud.db.engine.connect() as conn:
        row = conn.execute(
            text("SELECT networks, networks IS NULL FROM compute_nodes WHERE host = :h AND deleted = 0"),
            {"h": host},
        ).one()
    return hosts.get_node(cloud.db, host).networks, bool(row[1])


def test_a_host_that_names_its_networks_stores_them_and_one_that_does_not_stores_null(cloud: Cloud) -> None:
    cloud.add_host("compute-net", networks=["tenant", "br-data"])
    assert _stored(cloud, "compute-net") == (["br-data", "tenant"], False)
    # No networks option: every network, as SQL NULL (not JSON null), so SQL and Python agree.
    assert _stored(cloud, "compute-1") == (None, True)
    cloud.add_host("compute-none", networks=[])
    assert _stored(cloud, "compute-none") == ([], False)


def test_a_report_refreshes_the_networks_a_host_has(cloud: Cloud) -> None:
    cloud.add_host("compute-net", networks=["tenant"])
    driver = cloud.fake("compute-net")
    driver.networks = ["tenant", "br-new"]
    result = ComputeResult(
        request_id="req-1",
        host="compute-net",
        operation="get_available_resource",
        resources=driver.get_available_resource(),
    )
    hosts.report(cloud.db, "compute-net", result)
    assert _stored(cloud, "compute-net") == (["br-new", "tenant"], False)
    driver.networks = None
    result = result.model_copy(update={"resources": driver.get_available_resource()})
    hosts.report(cloud.db, "compute-net", result)
    assert _stored(cloud, "compute-net") == (None, True)
