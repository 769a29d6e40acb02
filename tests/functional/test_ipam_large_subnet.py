"""A /8 subnet (16.7 million addresses) allocates and counts as fast as a /24 (issue 25 item 12):
neither the free count nor the choice of the next address walks the pool."""

from __future__ import annotations

import time

from novakit import exceptions
from novakit.context import RequestContext
from novakit.network import ipam, networks, ports, subnets
from tests.functional.cloud import Cloud


def _free(cloud: Cloud, name: str) -> int:
    with cloud.db.reader() as session:
        return ipam.free_count(session, networks.get(session, name))


def test_a_slash_8_allocates_the_first_free_addresses_and_counts_without_walking_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    networks.create(cloud.db, cloud.admin, {"name": "big"})
    sub = subnets.create(cloud.db, cloud.admin, {"name": "big-v4", "network": "big", "cidr": "10.0.0.0/8"})
    assert sub["allocation_pools"] == [{"start": "10.0.0.2", "end": "10.255.255.254"}]
    pool = 2**24 - 3  # less the network, gateway and broadcast addresses

    started = time.monotonic()
    assert _free(cloud, "big") == pool
    made = [ports.create(cloud.db, ctx, {"name": f"p{i}", "network": "big"}) for i in range(4)]
    assert [p["fixed_ips"][0]["ip_address"] for p in made] == ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]
    assert _free(cloud, "big") == pool - 4

    # An address asked for far inside the pool, and one outside it (still inside the subnet).
    far = ports.create(
        cloud.db, ctx, {"name": "far", "network": "big", "fixed_ips": [{"ip_address": "10.200.0.9"}]}
    )
    assert far["fixed_ips"][0]["ip_address"] == "10.200.0.9"
    assert _free(cloud, "big") == pool - 5
    # A freed address is the first one given again; the next after it skips those held.
    ports.delete_port(cloud.db, ctx, "p1")
    assert _free(cloud, "big") == pool - 4
    assert ports.create(cloud.db, ctx, {"name": "again", "network": "big"})["fixed_ips"][0]["ip_address"] == (
        "10.0.0.3"
    )
    assert ports.create(cloud.db, ctx, {"name": "next", "network": "big"})["fixed_ips"][0]["ip_address"] == (
        "10.0.0.6"
    )
    assert _free(cloud, "big") == pool - 6
    # Walking 16.7 million addresses takes tens of seconds; all of the above takes well under a few.
    assert time.monotonic() - started < 10


def test_pools_with_holes_count_and_fill_exactly_then_refuse(cloud: Cloud, ctx: RequestContext) -> None:
    networks.create(cloud.db, cloud.admin, {"name": "holes"})
    subnets.create(
        cloud.db,
        cloud.admin,
        {
            "name": "holes-v4",
            "network": "holes",
            "cidr": "192.168.7.0/24",
            "allocation_pools": [
                {"start": "192.168.7.10", "end": "192.168.7.11"},
                {"start": "192.168.7.20", "end": "192.168.7.21"},
            ],
        },
    )
    assert _free(cloud, "holes") == 4
    # A fixed IP outside the pools takes none of them.
    ports.create(
        cloud.db, ctx, {"name": "out", "network": "holes", "fixed_ips": [{"ip_address": "192.168.7.100"}]}
    )
    ports.create(
        cloud.db, ctx, {"name": "in", "network": "holes", "fixed_ips": [{"ip_address": "192.168.7.11"}]}
    )
    assert _free(cloud, "holes") == 3
    got = [
        ports.create(cloud.db, ctx, {"name": f"h{i}", "network": "holes"})["fixed_ips"][0]["ip_address"]
        for i in range(3)
    ]
    assert got == ["192.168.7.10", "192.168.7.20", "192.168.7.21"]
    assert _free(cloud, "holes") == 0
    try:
        ports.create(cloud.db, ctx, {"name": "none-left", "network": "holes"})
    except exceptions.IpAddressGenerationFailure:
        pass
    else:
        raise AssertionError("a full pool gave an address")
