"""select_destinations on both back ends: what a caller sees, claimed or explained."""

from __future__ import annotations

import pytest
from sched_fixtures import add_group, add_instance, fleet, request, uuids
from sqlalchemy import text

from novakit import exceptions
from novakit.config import Config, load_config
from novakit.db.engine import Database
from novakit.host.messages import FlavorSpec
from novakit.placement import api as placement
from novakit.placement.fake_fleet import FakeHost, register_fleet
from novakit.scheduler.manager import SchedulerManager
from novakit.scheduler.request_spec import InstanceGroupSpec


@pytest.fixture
def sched_conf(conf: Config) -> Config:
    return conf.model_copy(
        update={"quota": conf.quota.model_copy(update={"instances": -1, "cores": -1, "ram": -1})}
    )


@pytest.fixture
def scheduler(db: Database, sched_conf: Config) -> SchedulerManager:
    return SchedulerManager(db, sched_conf)


def used_vcpus(db: Database, host: str) -> int:
    return placement.get_usages(db, host)["VCPU"]


def test_one_instance_claims_one_host_and_keeps_two_unclaimed_alternates(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 4)
    [(chosen, *alternates)] = scheduler.select_destinations(request(), ["i-1"])
    assert len(alternates) == 2
    assert {s.host for s in alternates}.isdisjoint({chosen.host})
    assert chosen.allocations == {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10}
    assert placement.get_allocations_for_consumer(db, "i-1") == {chosen.provider_uuid: chosen.allocations}
    assert all(used_vcpus(db, s.host) == 0 for s in alternates)


def test_dry_run_answers_without_claiming(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 3)
    [selections] = scheduler.select_destinations(request(), ["i-1"], dry_run=True)
    assert [s.host for s in selections] and len(selections) == 3
    assert placement.get_allocations_for_consumer(db, "i-1") == {}


def test_spread_by_ram_weigher_across_a_multi_create(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 3)
    result = scheduler.select_destinations(request(num_instances=3), uuids(3))
    assert sorted(r[0].host for r in result) == ["cn0", "cn1", "cn2"]


def test_multi_create_that_cannot_reach_min_count_claims_nothing(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 2, vcpus=2, cpu_allocation_ratio=1.0)  # 2 VCPU each: one m1.small per host
    with pytest.raises(exceptions.NoValidHost) as err:
        scheduler.select_destinations(request(num_instances=3), uuids(3))
    assert "Placed 2 of 3 instance(s), 3 needed" in str(err.value)
    assert used_vcpus(db, "cn0") == used_vcpus(db, "cn1") == 0
    ids = uuids(3)
    result = scheduler.select_destinations(request(num_instances=3, min_count=2), ids)
    assert [bool(r) for r in result] == [True, True, False]
    assert used_vcpus(db, "cn0") == used_vcpus(db, "cn1") == 2


def test_anti_affinity_counts_earlier_instances_of_the_same_request(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 3)
    group = add_group(db, "anti-affinity")
    spec = request(num_instances=4, instance_group=InstanceGroupSpec(uuid=group, policy="anti-affinity"))
    with pytest.raises(exceptions.NoValidHost) as err:
        scheduler.select_destinations(spec, uuids(4))
    steps = {s["step"]: s for s in err.value.explanation["steps"]}
    assert steps["ServerGroupAntiAffinityFilter"]["hosts_out"] == 3
    result = scheduler.select_destinations(spec.model_copy(update={"num_instances": 3}), uuids(3))
    assert sorted(r[0].host for r in result) == ["cn0", "cn1", "cn2"]


def test_anti_affinity_with_max_server_per_host_and_existing_members(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 2)
    member = add_instance(db, "cn0")
    group = add_group(db, "anti-affinity", [member], max_server_per_host=2)
    spec = request(
        num_instances=3,
        instance_group=InstanceGroupSpec(
            uuid=group, policy="anti-affinity", rules={"max_server_per_host": 2}
        ),
    )
    result = scheduler.select_destinations(spec, uuids(3))
    assert sorted(r[0].host for r in result) == ["cn0", "cn1", "cn1"]


def test_affinity_keeps_the_group_on_one_host(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 3)
    member = add_instance(db, "cn2")
    group = add_group(db, "affinity", [member])
    spec = request(num_instances=2, instance_group=InstanceGroupSpec(uuid=group, policy="affinity"))
    result = scheduler.select_destinations(spec, uuids(2))
    assert [r[0].host for r in result] == ["cn2", "cn2"]


def test_soft_anti_affinity_spreads_and_soft_affinity_packs(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 3)
    spread = add_group(db, "soft-anti-affinity")
    result = scheduler.select_destinations(
        request(num_instances=3, instance_group=InstanceGroupSpec(uuid=spread, policy="soft-anti-affinity")),
        uuids(3),
    )
    assert len({r[0].host for r in result}) == 3
    conf = load_config(
        db_url=db.url,
        scheduler={"soft_affinity_weight_multiplier": 100.0},
        quota={"instances": -1, "cores": -1, "ram": -1},
    )
    pack = add_group(db, "soft-affinity")
    result = SchedulerManager(db, conf).select_destinations(
        request(num_instances=3, instance_group=InstanceGroupSpec(uuid=pack, policy="soft-affinity")),
        uuids(3),
    )
    assert len({r[0].host for r in result}) == 1


def test_same_and_different_host_hints(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 3)
    there = add_instance(db, "cn1")
    [same] = scheduler.select_destinations(request(scheduler_hints={"same_host": [there]}), ["i-1"])
    assert same[0].host == "cn1" and len(same) == 1
    [diff] = scheduler.select_destinations(request(scheduler_hints={"different_host": [there]}), ["i-2"])
    assert "cn1" not in {s.host for s in diff}


def test_availability_zones_required_traits_and_disabled_hosts(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 4)
    placement.ensure_aggregate(db, "az-east", availability_zone="east")
    placement.add_provider_to_aggregate(db, "cn3", "az-east")
    [east] = scheduler.select_destinations(request(availability_zone="east"), ["i-1"])
    assert [s.host for s in east] == ["cn3"]
    [default] = scheduler.select_destinations(request(availability_zone="nova"), ["i-2"], dry_run=True)
    assert "cn3" not in {s.host for s in default}
    with pytest.raises(exceptions.ValidationError) as err:
        scheduler.select_destinations(request(availability_zone="west"), ["i-3"])
    assert "west" in str(err.value) and "east" in str(err.value)

    placement.set_traits(db, "cn2", ["CUSTOM_GPU"])
    flavor = FlavorSpec(
        name="gpu", vcpus=1, memory_mb=512, root_gb=1, extra_specs={"trait:CUSTOM_GPU": "required"}
    )
    [gpu] = scheduler.select_destinations(request(flavor=flavor), ["i-4"])
    assert [s.host for s in gpu] == ["cn2"]
    placement.set_provider_disabled(db, "cn2", True)
    with pytest.raises(exceptions.NoValidHost):
        scheduler.select_destinations(request(flavor=flavor), ["i-5"])


def test_no_valid_host_explains_each_step_and_each_host(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    register_fleet(
        db,
        [
            FakeHost("small", vcpus=1, cpu_allocation_ratio=1.0),
            FakeHost("off", disabled=True),
            FakeHost("gone", up=False),
        ],
    )
    with pytest.raises(exceptions.NoValidHost) as err:
        scheduler.select_destinations(request(), ["i-1"])
    steps = {s["step"]: s for s in err.value.explanation["steps"]}
    prefilter = steps["placement (SQL prefilter)"]
    assert (prefilter["hosts_in"], prefilter["hosts_out"]) == (3, 1)
    assert "VCPU" in prefilter["rejected"]["small"]
    compute = steps["ComputeFilter"]
    assert (compute["hosts_in"], compute["hosts_out"]) == (2, 2)
    assert "disabled" in compute["rejected"]["off"] and "never reported" in compute["rejected"]["gone"]
    message = str(err.value)
    assert "ComputeFilter: 2 host(s) in, 2 out" in message and "placement (SQL prefilter)" in message
    assert placement.get_allocations_for_consumer(db, "i-1") == {}


def test_request_larger_than_any_host_says_so(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 2)
    huge = FlavorSpec(name="huge", vcpus=64, memory_mb=1024, root_gb=1)
    with pytest.raises(exceptions.NoValidHost) as err:
        scheduler.select_destinations(request(flavor=huge), ["i-1"])
    assert "max_unit 16" in str(err.value)


def test_bad_input_is_refused_with_a_clear_error_and_nothing_claimed(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 1)
    with pytest.raises(exceptions.ValidationError):
        scheduler.select_destinations(
            request(flavor=FlavorSpec(name="z", vcpus=0, memory_mb=1, root_gb=1)), ["i"]
        )
    with pytest.raises(exceptions.ServerGroupNotFound):
        scheduler.select_destinations(
            request(instance_group=InstanceGroupSpec(uuid="no-such-group", policy="affinity")), ["i"]
        )
    with pytest.raises(exceptions.ComputeHostNotFound):
        scheduler.select_destinations(request(requested_host="nowhere"), ["i"])
    with pytest.raises(exceptions.ValidationError):
        scheduler.select_destinations(request(), [])
    with db.reader() as session:
        assert session.execute(text("SELECT COUNT(*) FROM allocations")).scalar_one() == 0


def test_ignore_hosts_and_requested_host(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    fleet(db, 3)
    [sel] = scheduler.select_destinations(request(ignore_hosts=["cn0", "cn1"]), ["i-1"])
    assert [s.host for s in sel] == ["cn2"]
    [sel] = scheduler.select_destinations(request(requested_host="cn1"), ["i-2"])
    assert [s.host for s in sel] == ["cn1"]


def test_image_locality_and_build_failures_steer_the_choice(db: Database, scheduler) -> None:  # type: ignore[no-untyped-def]
    register_fleet(db, [FakeHost("cold"), FakeHost("warm", cached_images=["img-1"])])
    [sel] = scheduler.select_destinations(request(), ["i-1"], dry_run=True)
    assert sel[0].host == "warm"
    register_fleet(db, [FakeHost("flaky", cached_images=["img-1"], stats={"failed_builds": 3})])
    [sel] = scheduler.select_destinations(request(), ["i-2"], dry_run=True)
    assert sel[-1].host == "flaky"


def test_quota_is_checked_and_partially_filled_down_to_min_count(db: Database, conf: Config) -> None:
    fleet(db, 4)
    from novakit import quota

    quota.set_quota(db, "p1", "instances", 3)
    scheduler = SchedulerManager(db, conf)
    with pytest.raises(exceptions.OverQuota) as err:
        scheduler.select_destinations(request(num_instances=4), uuids(4))
    assert "instances" in str(err.value) and "limit 3" in str(err.value)
    result = scheduler.select_destinations(request(num_instances=4, min_count=1), uuids(4))
    assert sum(1 for r in result if r) == 3
    usage = quota.get_quota_usage(db, conf, "p1")
    assert usage["instances"] == {"limit": 3, "in_use": 3}
    assert usage["cores"]["in_use"] == 6
    with pytest.raises(exceptions.OverQuota):
        quota.check_quota(db, conf, "p1", {"instances": 1})
    quota.check_quota(db, conf, "p1", {"cores": 2})


def test_a_pool_of_unusable_hosts_widens_to_max_placement_results(db: Database, sched_conf: Config) -> None:
    from novakit.scheduler.manager import CANDIDATE_POOL

    # The CANDIDATE_POOL hosts with the most free memory are down: the first pool holds no usable
    # host, the widened query (max_placement_results) reaches the smaller, live ones.
    register_fleet(db, [FakeHost(f"big{n}", memory_mb=131072, up=False) for n in range(CANDIDATE_POOL)])
    register_fleet(db, [FakeHost(f"small{n}", memory_mb=16384) for n in range(3)])
    result = SchedulerManager(db, sched_conf).select_destinations(request(), uuids(1), dry_run=True)
    assert {s.host for s in result[0]} == {"small0", "small1", "small2"}
    few = sched_conf.model_copy(
        update={
            "scheduler": sched_conf.scheduler.model_copy(update={"max_placement_results": CANDIDATE_POOL})
        }
    )
    with pytest.raises(exceptions.NoValidHost) as err:
        SchedulerManager(db, few).select_destinations(request(), uuids(1), dry_run=True)
    steps = {s["step"]: s for s in err.value.explanation["steps"]}
    assert steps["ComputeFilter"]["hosts_in"] == CANDIDATE_POOL
    # Every provider could take the instance: none was dropped by the SQL prefilter itself.
    prefilter = steps["placement (SQL prefilter)"]
    assert (prefilter["hosts_in"], prefilter["hosts_out"]) == (CANDIDATE_POOL + 3, 0)


def test_stacking_ram_weigher_fills_the_fullest_host_beyond_the_first_pool(
    db: Database, sched_conf: Config
) -> None:
    from novakit.scheduler.manager import CANDIDATE_POOL

    names = fleet(db, CANDIDATE_POOL + 10)
    fullest = names[-1]
    placement.claim_resources(
        db, "filler", placement.get_provider(db, fullest).uuid, {"MEMORY_MB": 60000}, "p", "u"
    )
    stack = sched_conf.model_copy(
        update={"scheduler": sched_conf.scheduler.model_copy(update={"ram_weight_multiplier": -1.0})}
    )
    result = SchedulerManager(db, stack).select_destinations(request(), uuids(1), dry_run=True)
    assert result[0][0].host == fullest
    spread = SchedulerManager(db, sched_conf).select_destinations(request(), uuids(1), dry_run=True)
    assert spread[0][0].host != fullest
