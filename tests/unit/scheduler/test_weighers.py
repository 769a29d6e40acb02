"""Weighers return raw numbers; normalisation and multipliers decide the order (Nova's weights.py)."""

from __future__ import annotations

import pytest
from sched_unit_helpers import build_host, build_spec

from novakit import exceptions
from novakit.config import Config, load_config
from novakit.scheduler.manager import SchedulerManager
from novakit.scheduler.request_spec import InstanceGroupSpec
from novakit.scheduler.weights.base import normalize
from novakit.scheduler.weights.registry import WEIGHERS, build_weighers


def order(conf: Config, hosts, spec, names: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    weighers = [WEIGHERS[n](conf) for n in names]
    return [h.host for h, _w in SchedulerManager._weigh(hosts, spec, weighers)]


def test_normalize_scales_to_unit_range_and_flattens_equal_values() -> None:
    assert normalize([10, 20, 30]) == [0.0, 0.5, 1.0]
    assert normalize([5, 5]) == [0.0, 0.0]
    assert normalize([]) == []


def test_ram_weigher_spreads_by_default_and_stacks_with_negative_multiplier(unit_conf: Config) -> None:
    roomy = build_host("roomy", provider_id=1, used={"MEMORY_MB": 0})
    busy = build_host("busy", provider_id=2, used={"MEMORY_MB": 60000})
    assert order(unit_conf, [busy, roomy], build_spec(), ["RAMWeigher"]) == ["roomy", "busy"]
    stack = load_config(db_url="sqlite:///:memory:", scheduler={"ram_weight_multiplier": -1.0})
    assert order(stack, [busy, roomy], build_spec(), ["RAMWeigher"]) == ["busy", "roomy"]


def test_cpu_and_disk_weighers_prefer_free_capacity(unit_conf: Config) -> None:
    a = build_host("a", provider_id=1, used={"VCPU": 60, "DISK_GB": 0})
    b = build_host("b", provider_id=2, used={"VCPU": 0, "DISK_GB": 900})
    assert order(unit_conf, [a, b], build_spec(), ["CPUWeigher"]) == ["b", "a"]
    assert order(unit_conf, [b, a], build_spec(), ["DiskWeigher"]) == ["a", "b"]


def test_io_ops_weigher_prefers_quiet_hosts(unit_conf: Config) -> None:
    quiet = build_host("quiet", provider_id=2, num_io_ops=0)
    busy = build_host("busy", provider_id=1, num_io_ops=5)
    assert order(unit_conf, [busy, quiet], build_spec(), ["IoOpsWeigher"]) == ["quiet", "busy"]


def test_build_failure_weigher_outweighs_free_ram(unit_conf: Config) -> None:
    failing = build_host("failing", provider_id=1, stats={"failed_builds": 1})
    healthy = build_host("healthy", provider_id=2, used={"MEMORY_MB": 60000})
    names = ["RAMWeigher", "BuildFailureWeigher"]
    assert order(unit_conf, [failing, healthy], build_spec(), names) == ["healthy", "failing"]


def test_soft_affinity_prefers_members_and_soft_anti_affinity_avoids_them(unit_conf: Config) -> None:
    with_members = build_host("with", provider_id=1, group_members=2)
    without = build_host("without", provider_id=2, group_members=0)
    soft = build_spec(instance_group=InstanceGroupSpec(uuid="g", policy="soft-affinity"))
    anti = build_spec(instance_group=InstanceGroupSpec(uuid="g", policy="soft-anti-affinity"))
    assert order(unit_conf, [without, with_members], soft, ["ServerGroupSoftAffinityWeigher"]) == [
        "with",
        "without",
    ]
    names = ["ServerGroupSoftAntiAffinityWeigher"]
    assert order(unit_conf, [with_members, without], anti, names) == ["without", "with"]
    assert not WEIGHERS["ServerGroupSoftAffinityWeigher"](unit_conf).enabled_for(build_spec())


def test_image_locality_prefers_a_warm_cache(unit_conf: Config) -> None:
    cold = build_host("cold", provider_id=1)
    warm = build_host("warm", provider_id=2, cached_images=frozenset({"img-1"}))
    assert order(unit_conf, [cold, warm], build_spec(), ["ImageLocalityWeigher"]) == ["warm", "cold"]


def test_all_enables_every_weigher_and_unknown_names_fail_with_the_list() -> None:
    assert {w.name for w in build_weighers(load_config(db_url="sqlite:///:memory:"))} == set(WEIGHERS)
    with pytest.raises(exceptions.ConfigError) as err:
        build_weighers(
            load_config(db_url="sqlite:///:memory:", scheduler={"weighers": ["RAMWeigher", "Nope"]})
        )
    assert "Nope" in str(err.value) and "ImageLocalityWeigher" in str(err.value)
