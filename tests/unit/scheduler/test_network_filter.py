"""NetworkFilter: a host must have every network the request's ports are on."""

from __future__ import annotations

from sched_unit_helpers import build_host, build_spec

from novakit.config import Config
from novakit.scheduler.filters.registry import FILTERS


def test_passes_a_host_that_has_every_network(unit_conf: Config) -> None:
    f = FILTERS["NetworkFilter"](unit_conf)
    spec = build_spec(networks=["default", "br0"])
    assert f.enabled_for(spec)
    assert f.host_passes(build_host(networks=frozenset({"default", "br0", "other"})), spec)


def test_rejects_a_host_missing_a_network_and_names_both(unit_conf: Config) -> None:
    result = FILTERS["NetworkFilter"](unit_conf).host_passes(
        build_host("h7", networks=frozenset({"default"})), build_spec(networks=["default", "br-data"])
    )
    assert not result
    assert result.reason == "host h7 has no network br-data"


def test_edge_a_host_that_reported_nothing_has_every_network_and_an_empty_list_has_none(
    unit_conf: Config,
) -> None:
    f = FILTERS["NetworkFilter"](unit_conf)
    spec = build_spec(networks=["default"])
    assert f.host_passes(build_host(networks=None), spec)
    assert not f.host_passes(build_host(networks=frozenset()), spec)
    # A request with no novakit network does not run the filter at all.
    assert not f.enabled_for(build_spec())
    assert "NetworkFilter" in unit_conf.scheduler.enabled_filters
