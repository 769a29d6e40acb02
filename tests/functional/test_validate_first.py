"""Validate before writing: configuration, counts, bounds, references and names (issue 12).

Each refusal names the field and the rule and leaves every row as it was.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from novakit import exceptions
from novakit.catalog import flavors, images
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.fleet import hosts
from tests.functional.cloud import Cloud, boot

OK = {"name": "web", "flavor": "m1.small", "image": "tiny"}


@pytest.mark.parametrize(
    "overrides,option",
    [
        ({"scheduler": {"enabled_filters": ["ComputeFilter", "NoSuchFilter"]}}, "scheduler.enabled_filters"),
        ({"scheduler": {"weighers": ["RAMWeigher", "Nope"]}}, "scheduler.weighers"),
        ({"scheduler": {"max_attempts": 0}}, "scheduler.max_attempts"),
        ({"placement": {"cpu_allocation_ratio": float("inf")}}, "placement.cpu_allocation_ratio"),
        ({"placement": {"ram_allocation_ratio": 0}}, "placement.ram_allocation_ratio"),
        ({"quota": {"cores": -5}}, "quota.cores"),
        ({"compute": {"build_timeout": 0}}, "compute.build_timeout"),
        ({"compute": {"max_count": 0}}, "compute.max_count"),
    ],
)
def test_bad_configuration_is_refused_when_it_is_read(overrides: dict[str, Any], option: str) -> None:
    with pytest.raises(exceptions.ConfigError) as err:
        load_config(**overrides)
    assert option in str(err.value)


def test_an_unknown_filter_in_a_config_file_is_refused_before_anything_is_recorded(
    cloud: Cloud, ctx: RequestContext, tmp_path: Any
) -> None:
    path = tmp_path / "novakit.toml"
    path.write_text('[scheduler]\nenabled_filters = ["ComputeFilter", "TypoFilter"]\n')
    before = cloud.snapshot()
    with pytest.raises(exceptions.ConfigError, match="TypoFilter"):
        load_config(path, db_url=cloud.db.url)
    assert cloud.snapshot() == before


@pytest.mark.parametrize(
    "report,overrides,field",
    [
        ({"vcpus": -4}, {}, "vcpus"),
        ({"memory_mb": 0}, {}, "memory_mb"),
        ({"local_gb": 2**40}, {}, "local_gb"),
        ({}, {"cpu_allocation_ratio": float("inf")}, "cpu_allocation_ratio"),
        ({}, {"ram_allocation_ratio": float("nan")}, "ram_allocation_ratio"),
        ({}, {"reserved_host_cpus": -1}, "reserved_host_cpus"),
    ],
)
def test_a_host_inventory_placement_cannot_hold_is_refused_before_the_host_is_written(
    cloud: Cloud, report: dict[str, Any], overrides: dict[str, Any], field: str
) -> None:
    resources = cloud.fake("compute-9").get_available_resource().model_copy(update=report)
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        hosts.register_host(
            cloud.db,
            cloud.conf,
            "compute-9",
            resources,
            cloud.driver_info("compute-9"),
            overrides,
            ctx=cloud.admin,
        )
    assert err.value.field == field
    assert cloud.snapshot() == before  # no service, compute node, provider or inventory


@pytest.mark.parametrize("count", [1001, 2**31, 2**63])
def test_a_count_over_the_ceiling_is_refused_before_any_per_server_work(
    cloud: Cloud, ctx: RequestContext, count: int
) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.create(ctx, {**OK, "max_count": count})
    assert err.value.field == "max_count"
    with pytest.raises(exceptions.ValidationError):
        cloud.api.create(ctx, {**OK, "max_count": count}, dry_run=True)
    assert cloud.snapshot() == before


@pytest.mark.parametrize(
    "data,field",
    [
        ({"name": "f", "vcpus": 1, "memory_mb": 2**31}, "memory_mb"),
        ({"name": "f", "vcpus": 1, "memory_mb": 1, "root_gb": 2**63}, "root_gb"),
        ({"name": "f", "vcpus": 1, "memory_mb": 1, "swap": 2**40}, "swap"),
    ],
)
def test_integers_past_novas_bounds_name_their_field(cloud: Cloud, data: dict[str, Any], field: str) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        flavors.create(cloud.db, cloud.admin, data)
    assert err.value.field == field
    assert cloud.snapshot() == before


def test_kernel_and_ramdisk_references_resolve_when_the_image_is_registered(cloud: Cloud) -> None:
    kernel = images.create(cloud.db, cloud.admin, {"name": "vmlinuz", "disk_format": "aki"})
    made = images.create(cloud.db, cloud.admin, {"name": "direct", "properties": {"kernel_id": "vmlinuz"}})
    assert made["properties"]["kernel_id"] == kernel["id"]
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        images.create(cloud.db, cloud.admin, {"name": "broken", "properties": {"ramdisk_id": "no-initrd"}})
    assert err.value.field == "properties.ramdisk_id" and "no-initrd" in str(err.value)
    assert cloud.snapshot() == before


@pytest.mark.parametrize("name", ["web\ufffe", "a\u2028b", "a\u2029b", "a\u200bb", "tab\tbed"])
def test_names_refuse_the_characters_nova_refuses(cloud: Cloud, ctx: RequestContext, name: str) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.create(ctx, {**OK, "name": name})
    assert err.value.field == "name" and "U+" in str(err.value)
    assert cloud.snapshot() == before


def test_metadata_keys_follow_novas_pattern(cloud: Cloud, ctx: RequestContext) -> None:
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.create(ctx, {**OK, "metadata": {"a/b": "x"}})
    assert err.value.field == "metadata" and "a/b" in str(err.value)
    assert boot(cloud, ctx, "ok-keys", metadata={"role:tier-1.a_b c": "x"})["metadata"]


def test_base64_user_data_with_line_breaks_is_accepted(cloud: Cloud, ctx: RequestContext) -> None:
    text = b"#cloud-config\n" + b"write_files: []\n" * 10
    wrapped = base64.encodebytes(text).decode()  # what `base64` prints: lines of 76
    assert "\n" in wrapped.strip()
    server = boot(cloud, ctx, "wrapped", user_data=wrapped)
    spec = cloud.api.conductor.prepare_action(ctx, server["id"], "reboot", {"reboot_type": "SOFT"})
    assert base64.b64decode(spec.instances[0].user_data.get_secret_value(), validate=True) == text


def test_a_server_never_built_on_a_host_refuses_what_needs_one(cloud: Cloud, ctx: RequestContext) -> None:
    """Nova's check_instance_host: no host, no hard reboot, rebuild, stop or start; delete works."""
    flavors.create(cloud.db, cloud.admin, {"name": "giant", "vcpus": 1000, "memory_mb": 1024})
    (server,) = cloud.api.create(ctx, {**OK, "name": "nowhere", "flavor": "giant"})
    assert server["status"] == "ERROR" and server["host"] is None
    before = cloud.snapshot()
    for action, options in [
        ("reboot", {"reboot_type": "HARD"}),
        ("rebuild", {"image": "tiny"}),
        ("stop", {}),
    ]:
        for dry_run in (True, False):
            with pytest.raises(exceptions.InstanceNotReady, match=action.split("_")[0]):
                cloud.api.act(ctx, server["id"], action, options, dry_run=dry_run)
    assert cloud.snapshot() == before
    assert cloud.api.delete(ctx, server["id"])["status"] == "DELETED"
