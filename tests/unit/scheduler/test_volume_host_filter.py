"""VolumeHostFilter: a server booted from an existing volume lands only on the volume's host."""

from __future__ import annotations

from sched_unit_helpers import build_host, build_spec

from novakit.config import Config
from novakit.scheduler.filters.registry import FILTERS

VOLUME = {"id": "9e0c3d1a-0000-4000-8000-000000000001", "name": "root-disk", "host": "h2"}


def test_passes_the_volumes_host(unit_conf: Config) -> None:
    f = FILTERS["VolumeHostFilter"](unit_conf)
    spec = build_spec(boot_volume=VOLUME)
    assert f.enabled_for(spec)
    assert f.host_passes(build_host("h2"), spec)


def test_rejects_another_host_and_says_where_the_volume_lives(unit_conf: Config) -> None:
    result = FILTERS["VolumeHostFilter"](unit_conf).host_passes(
        build_host("h1"), build_spec(boot_volume=VOLUME)
    )
    assert not result
    assert result.reason == "volume root-disk lives on host h2"


def test_edge_off_without_a_boot_volume_and_enabled_by_default(unit_conf: Config) -> None:
    f = FILTERS["VolumeHostFilter"](unit_conf)
    assert not f.enabled_for(build_spec())
    assert not f.enabled_for(build_spec(new_root_volume_gb=5))  # a new volume goes where the server goes
    assert "VolumeHostFilter" in unit_conf.scheduler.enabled_filters
