"""Each filter: one host that passes, one that fails with a reason a person can act on, one edge case."""

from __future__ import annotations

import datetime as dt

import pytest
from sched_unit_helpers import NOW, build_host, build_spec

from novakit import exceptions
from novakit.config import Config, load_config
from novakit.host.messages import FlavorSpec, ImageSpec
from novakit.scheduler.filters.registry import FILTERS
from novakit.scheduler.request_spec import InstanceGroupSpec


def run(name: str, conf: Config, host, spec):  # type: ignore[no-untyped-def]
    return FILTERS[name](conf).host_passes(host, spec)


# --- ComputeFilter -----------------------------------------------------------------------------


def test_compute_filter_passes_an_enabled_host_that_reported_recently(unit_conf: Config) -> None:
    assert run("ComputeFilter", unit_conf, build_host(), build_spec())


def test_compute_filter_rejects_a_disabled_service_and_says_why(unit_conf: Config) -> None:
    result = run(
        "ComputeFilter", unit_conf, build_host(service_disabled=True, disabled_reason="maint"), build_spec()
    )
    assert not result
    assert "disabled" in result.reason and "maint" in result.reason


def test_compute_filter_keeps_an_idle_host_and_drops_one_whose_last_contact_failed(unit_conf: Config) -> None:
    # No agent runs on a host: a day of silence is no evidence that it is down.
    idle = build_host(last_seen_up=NOW - dt.timedelta(days=1))
    assert run("ComputeFilter", unit_conf, idle, build_spec())
    failed = build_host(
        last_contact_at=NOW - dt.timedelta(seconds=5), down_reason="Ansible: host h1 unreachable"
    )
    result = run("ComputeFilter", unit_conf, failed, build_spec())
    assert not result
    assert result.reason == (
        "compute service is down: last contact failed at 2026-01-01T11:59:55+00:00: "
        "Ansible: host h1 unreachable"
    )
    forced = run("ComputeFilter", unit_conf, build_host(forced_down=True, down_reason="rack 4"), build_spec())
    assert not forced and forced.reason == "compute service is down: forced down by an admin: rack 4"
    assert not run("ComputeFilter", unit_conf, build_host(has_service=False), build_spec())


def test_compute_filter_edge_heartbeat_just_older_than_service_down_time_when_heartbeats_are_on(
    unit_conf: Config,
) -> None:
    conf = unit_conf.model_copy(update={"compute": unit_conf.compute.model_copy(update={"heartbeats": True})})
    limit = conf.compute.service_down_time
    at_limit = build_host(last_seen_up=NOW - dt.timedelta(seconds=limit))
    past_limit = build_host(last_seen_up=NOW - dt.timedelta(seconds=limit + 1))
    assert run("ComputeFilter", conf, at_limit, build_spec())
    result = run("ComputeFilter", conf, past_limit, build_spec())
    assert not result and f"no heartbeat for {limit + 1} s" in result.reason
    assert "heartbeats are on" in result.reason
    # The same host with heartbeats off (the default) is up.
    assert run("ComputeFilter", unit_conf, past_limit, build_spec())


# --- ComputeCapabilitiesFilter --------------------------------------------------------------------


def _flavor(**extra: str) -> FlavorSpec:
    return FlavorSpec(name="f", vcpus=1, memory_mb=512, root_gb=1, extra_specs=extra)


def test_capabilities_pass_when_the_host_reports_a_matching_value(unit_conf: Config) -> None:
    host = build_host(cpu_info={"features": ["avx2", "sse4"]})
    spec = build_spec(flavor=_flavor(**{"capabilities:cpu_info:features": "<all-in> avx2"}))
    assert run("ComputeCapabilitiesFilter", unit_conf, host, spec)


def test_capabilities_reject_a_mismatch_naming_the_capability(unit_conf: Config) -> None:
    spec = build_spec(flavor=_flavor(**{"capabilities:hypervisor_type": "s== qemu"}))
    result = run("ComputeCapabilitiesFilter", unit_conf, build_host(hypervisor_type="kvm"), spec)
    assert not result and "hypervisor_type" in result.reason and "kvm" in result.reason


def test_capabilities_edge_missing_capability_and_numeric_threshold(unit_conf: Config) -> None:
    missing = build_spec(flavor=_flavor(**{"capabilities:cpu_info:model": "Haswell"}))
    assert not run("ComputeCapabilitiesFilter", unit_conf, build_host(), missing)
    version = build_spec(flavor=_flavor(**{"capabilities:hypervisor_version": ">= 8000000"}))
    assert run("ComputeCapabilitiesFilter", unit_conf, build_host(hypervisor_version=8000000), version)
    assert not run("ComputeCapabilitiesFilter", unit_conf, build_host(hypervisor_version=7999999), version)


# --- ImagePropertiesFilter ---------------------------------------------------------------------------


def _image(**props: str) -> ImageSpec:
    return ImageSpec(id="img", properties=props)


def test_image_properties_pass_matching_arch_and_hypervisor(unit_conf: Config) -> None:
    spec = build_spec(image=_image(hw_architecture="x86_64", img_hv_type="kvm"))
    assert run("ImagePropertiesFilter", unit_conf, build_host(), spec)


def test_image_properties_reject_other_architecture(unit_conf: Config) -> None:
    spec = build_spec(image=_image(hw_architecture="aarch64"))
    result = run("ImagePropertiesFilter", unit_conf, build_host(cpu_arch="x86_64"), spec)
    assert not result and "aarch64" in result.reason and "x86_64" in result.reason


def test_image_properties_edge_aliases_qemu_on_kvm_and_vm_mode(unit_conf: Config) -> None:
    assert run(
        "ImagePropertiesFilter", unit_conf, build_host(), build_spec(image=_image(architecture="amd64"))
    )
    # A KVM host runs plain QEMU guests; a QEMU-only host does not run KVM guests.
    assert run("ImagePropertiesFilter", unit_conf, build_host(), build_spec(image=_image(img_hv_type="qemu")))
    assert not run(
        "ImagePropertiesFilter",
        unit_conf,
        build_host(hypervisor_type="qemu"),
        build_spec(image=_image(img_hv_type="kvm")),
    )
    assert not run(
        "ImagePropertiesFilter", unit_conf, build_host(), build_spec(image=_image(hw_vm_mode="xen"))
    )


# --- server groups -----------------------------------------------------------------------------------


def _group(policy: str, hosts: list[str], **rules: int) -> InstanceGroupSpec:
    return InstanceGroupSpec(uuid="g1", policy=policy, hosts=hosts, rules=dict(rules))  # type: ignore[arg-type]


def test_affinity_passes_the_host_the_group_runs_on(unit_conf: Config) -> None:
    spec = build_spec(instance_group=_group("affinity", ["h1"]))
    assert run("ServerGroupAffinityFilter", unit_conf, build_host("h1"), spec)


def test_affinity_rejects_another_host(unit_conf: Config) -> None:
    spec = build_spec(instance_group=_group("affinity", ["h1"]))
    result = run("ServerGroupAffinityFilter", unit_conf, build_host("h2"), spec)
    assert not result and "h1" in result.reason


def test_affinity_edge_empty_group_goes_anywhere_but_the_batch_pins_it(unit_conf: Config) -> None:
    assert run(
        "ServerGroupAffinityFilter",
        unit_conf,
        build_host("h2"),
        build_spec(instance_group=_group("affinity", [])),
    )
    pinned = build_spec(instance_group=_group("affinity", []), batch_hosts=["h1"])
    assert not run("ServerGroupAffinityFilter", unit_conf, build_host("h2"), pinned)


def test_anti_affinity_passes_a_host_without_members(unit_conf: Config) -> None:
    spec = build_spec(instance_group=_group("anti-affinity", ["h1"]))
    assert run("ServerGroupAntiAffinityFilter", unit_conf, build_host("h2", group_members=0), spec)


def test_anti_affinity_rejects_a_host_with_a_member(unit_conf: Config) -> None:
    spec = build_spec(instance_group=_group("anti-affinity", ["h1"]))
    result = run("ServerGroupAntiAffinityFilter", unit_conf, build_host("h1", group_members=1), spec)
    assert not result and "max_server_per_host 1" in result.reason


def test_anti_affinity_edge_max_server_per_host_rule(unit_conf: Config) -> None:
    spec = build_spec(instance_group=_group("anti-affinity", ["h1"], max_server_per_host=2))
    assert run("ServerGroupAntiAffinityFilter", unit_conf, build_host("h1", group_members=1), spec)
    assert not run("ServerGroupAntiAffinityFilter", unit_conf, build_host("h1", group_members=2), spec)


# --- same / different host ---------------------------------------------------------------------------


def test_same_host_passes_where_the_hinted_instance_runs(unit_conf: Config) -> None:
    spec = build_spec(scheduler_hints={"same_host": ["i-1"]}, instance_hosts={"i-1": "h1"})
    assert run("SameHostFilter", unit_conf, build_host("h1"), spec)


def test_same_host_rejects_elsewhere(unit_conf: Config) -> None:
    spec = build_spec(scheduler_hints={"same_host": ["i-1"]}, instance_hosts={"i-1": "h1"})
    result = run("SameHostFilter", unit_conf, build_host("h2"), spec)
    assert not result and "i-1" in result.reason


def test_same_host_edge_unknown_instance_matches_no_host_and_no_hint_is_skipped(unit_conf: Config) -> None:
    spec = build_spec(scheduler_hints={"same_host": "i-gone"})
    assert not run("SameHostFilter", unit_conf, build_host("h1"), spec)
    assert not FILTERS["SameHostFilter"](unit_conf).enabled_for(build_spec())


def test_different_host_passes_elsewhere(unit_conf: Config) -> None:
    spec = build_spec(scheduler_hints={"different_host": ["i-1"]}, instance_hosts={"i-1": "h1"})
    assert run("DifferentHostFilter", unit_conf, build_host("h2"), spec)


def test_different_host_rejects_the_hinted_host(unit_conf: Config) -> None:
    spec = build_spec(scheduler_hints={"different_host": ["i-1"]}, instance_hosts={"i-1": "h1"})
    result = run("DifferentHostFilter", unit_conf, build_host("h1"), spec)
    assert not result and "i-1" in result.reason


def test_different_host_edge_deleted_instance_does_not_block(unit_conf: Config) -> None:
    spec = build_spec(scheduler_hints={"different_host": ["i-gone"]}, instance_hosts={})
    assert run("DifferentHostFilter", unit_conf, build_host("h1"), spec)


# --- counts ----------------------------------------------------------------------------------------


def test_num_instances_passes_below_the_limit(unit_conf: Config) -> None:
    assert run("NumInstancesFilter", unit_conf, build_host(num_instances=3), build_spec())


def test_num_instances_rejects_at_the_limit(unit_conf: Config) -> None:
    limit = unit_conf.scheduler.max_instances_per_host
    result = run("NumInstancesFilter", unit_conf, build_host(num_instances=limit), build_spec())
    assert not result and str(limit) in result.reason


def test_num_instances_edge_one_below_the_limit_then_consumed() -> None:
    conf = load_config(db_url="sqlite:///:memory:", scheduler={"max_instances_per_host": 2})
    host = build_host(num_instances=1)
    assert run("NumInstancesFilter", conf, host, build_spec())
    host.consume({"VCPU": 1}, "new-instance")
    assert not run("NumInstancesFilter", conf, host, build_spec())


def test_io_ops_passes_a_quiet_host_and_rejects_a_busy_one(unit_conf: Config) -> None:
    limit = unit_conf.scheduler.max_io_ops_per_host
    assert run("IoOpsFilter", unit_conf, build_host(num_io_ops=limit - 1), build_spec())
    assert not run("IoOpsFilter", unit_conf, build_host(num_io_ops=limit), build_spec())


# --- AggregateInstanceExtraSpecsFilter ----------------------------------------------------------------


def test_aggregate_extra_specs_pass_matching_metadata(unit_conf: Config) -> None:
    spec = build_spec(flavor=_flavor(**{"aggregate_instance_extra_specs:ssd": "true"}))
    assert run(
        "AggregateInstanceExtraSpecsFilter", unit_conf, build_host(aggregate_metadata={"ssd": {"true"}}), spec
    )


def test_aggregate_extra_specs_reject_other_value(unit_conf: Config) -> None:
    spec = build_spec(flavor=_flavor(**{"aggregate_instance_extra_specs:ssd": "true"}))
    host = build_host(aggregate_metadata={"ssd": {"false"}})
    result = run("AggregateInstanceExtraSpecsFilter", unit_conf, host, spec)
    assert not result and "ssd" in result.reason


def test_aggregate_extra_specs_edge_host_in_no_aggregate_and_or_operator(unit_conf: Config) -> None:
    spec = build_spec(flavor=_flavor(**{"aggregate_instance_extra_specs:tier": "<or> gold <or> silver"}))
    assert not run("AggregateInstanceExtraSpecsFilter", unit_conf, build_host(), spec)
    host = build_host(aggregate_metadata={"tier": {"silver"}})
    assert run("AggregateInstanceExtraSpecsFilter", unit_conf, host, spec)


# --- the registry -------------------------------------------------------------------------------------


def test_every_issue_filter_is_registered() -> None:
    for name in (
        "ComputeFilter",
        "ComputeCapabilitiesFilter",
        "ImagePropertiesFilter",
        "ServerGroupAffinityFilter",
        "ServerGroupAntiAffinityFilter",
        "SameHostFilter",
        "DifferentHostFilter",
        "NumInstancesFilter",
        "AggregateInstanceExtraSpecsFilter",
    ):
        assert FILTERS[name].name == name


def test_unknown_filter_name_fails_at_start_naming_known_filters() -> None:
    # Refused when the configuration is read, before a scheduler (or a request) exists.
    with pytest.raises(exceptions.ConfigError) as err:
        load_config(
            db_url="sqlite:///:memory:", scheduler={"enabled_filters": ["ComputeFilter", "RamFilter"]}
        )
    assert "RamFilter" in str(err.value) and "SameHostFilter" in str(err.value)
