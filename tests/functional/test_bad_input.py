"""Bad requests are refused with an error naming the field and rule, and change nothing."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from novakit import exceptions
from novakit.context import RequestContext
from tests.functional.cloud import Cloud, boot

OK = {"name": "web", "flavor": "m1.small", "image": "tiny"}
UUID = "6f1c1a8e-2f7a-4a43-9d4e-0d4c2b4b7a11"

BAD_CREATES: list[tuple[dict[str, Any], str, str]] = [
    ({"name": ""}, "name", "1 to 255"),
    ({"name": "x" * 256}, "name", "1 to 255"),
    ({"name": " web"}, "name", "whitespace"),
    ({"name": "web "}, "name", "whitespace"),
    ({"name": "we\x00b"}, "name", "control"),
    ({"metadata": {f"k{i}": "v" for i in range(129)}}, "metadata", "128"),
    ({"metadata": {"k" * 256: "v"}}, "metadata", "255"),
    ({"metadata": {"k": "v" * 256}}, "metadata", "255"),
    ({"metadata": {"k": 1}}, "metadata", "string"),
    ({"user_data": "not base64 at all!"}, "user_data", "base64"),
    ({"user_data": base64.b64encode(b"x" * 50000).decode()}, "user_data", "65535"),
    ({"min_count": 0}, "min_count", "greater than or equal to 1"),
    ({"min_count": 3, "max_count": 2}, "max_count", "min_count"),
    ({"max_count": -1}, "max_count", "greater than or equal to 1"),
    ({"scheduler_hints": {"same_host": ["not-a-uuid"]}}, "scheduler_hints.same_host", "UUID"),
    ({"scheduler_hints": {"group": "nope"}}, "scheduler_hints.group", "UUID"),
    ({"flavor": ""}, "flavor", "existing"),
    ({"colour": "blue"}, "colour", "not a known field"),
]


@pytest.mark.parametrize(
    "change,field,rule", BAD_CREATES, ids=[f"{c[1]}-{i}" for i, c in enumerate(BAD_CREATES)]
)
def test_bad_create_names_field_and_rule_and_changes_nothing(
    cloud: Cloud, ctx: RequestContext, change: dict[str, Any], field: str, rule: str
) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.create(ctx, {**OK, **change})
    assert err.value.field == field
    assert rule in str(err.value), str(err.value)
    assert cloud.snapshot() == before


def test_user_data_never_appears_in_the_error(cloud: Cloud, ctx: RequestContext) -> None:
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.create(ctx, {**OK, "user_data": "SECRET-PASSWORD-123 is not base64"})
    assert "SECRET-PASSWORD-123" not in str(err.value)


@pytest.mark.parametrize(
    "change,error,needle",
    [
        ({"flavor": "m9.huge"}, exceptions.FlavorNotFound, "m9.huge"),
        ({"image": "no-such-image"}, exceptions.ImageNotFound, "no-such-image"),
        ({"server_group": "no-such-group"}, exceptions.ServerGroupNotFound, "no-such-group"),
        ({"availability_zone": "mars"}, exceptions.ValidationError, "mars"),
        ({"scheduler_hints": {"same_host": [UUID]}}, exceptions.InstanceNotFound, UUID),
    ],
)
def test_unknown_references_change_nothing(
    cloud: Cloud, ctx: RequestContext, change: dict[str, Any], error: type[Exception], needle: str
) -> None:
    before = cloud.snapshot()
    with pytest.raises(error, match=needle):
        cloud.api.create(ctx, {**OK, **change})
    assert cloud.snapshot() == before


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda api, ctx, u: api.rename(ctx, u, " padded"), "options.name"),
        (lambda api, ctx, u: api.rename(ctx, u, ""), "options.name"),
        (lambda api, ctx, u: api.reboot(ctx, u, "GENTLE"), "options.reboot_type"),
        (lambda api, ctx, u: api.lock(ctx, u, "r" * 256), "options.reason"),
        (lambda api, ctx, u: api.stop(ctx, u, timeout=-5), "options.timeout"),
        (lambda api, ctx, u: api.rebuild(ctx, u, {"image": "tiny", "user_data": "%%%"}), "options.user_data"),
    ],
    ids=["rename-padded", "rename-empty", "reboot-type", "lock-reason", "stop-timeout", "rebuild-user-data"],
)
def test_bad_actions_change_nothing(cloud: Cloud, ctx: RequestContext, call: Any, field: str) -> None:
    server = boot(cloud, ctx, "target")
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        call(cloud.api, ctx, server["id"])
    assert err.value.field == field
    assert cloud.snapshot() == before


def test_renaming_onto_a_taken_name_changes_nothing(cloud: Cloud, ctx: RequestContext) -> None:
    boot(cloud, ctx, "one")
    two = boot(cloud, ctx, "two")
    before = cloud.snapshot()
    with pytest.raises(exceptions.DuplicateName, match="one"):
        cloud.api.rename(ctx, two["id"], "one")
    assert cloud.snapshot() == before


def test_bad_flavor_and_image_definitions(cloud: Cloud) -> None:
    from novakit.catalog import flavors, images

    before = cloud.snapshot()
    for data, field in [
        ({"name": "f", "vcpus": 0, "memory_mb": 1}, "vcpus"),
        ({"name": "f", "vcpus": 1, "memory_mb": -1}, "memory_mb"),
        ({"name": "f", "vcpus": 1, "memory_mb": 1, "root_gb": -1}, "root_gb"),
        ({"name": " f", "vcpus": 1, "memory_mb": 1}, "name"),
    ]:
        with pytest.raises(exceptions.ValidationError) as err:
            flavors.create(cloud.db, cloud.admin, data)
        assert err.value.field == field
    for data, field in [
        ({"name": "i", "disk_format": "vhdx"}, "disk_format"),
        ({"name": "i", "checksum": "abc"}, "checksum"),
        ({"name": "i", "uuid": "x"}, "uuid"),
    ]:
        with pytest.raises(exceptions.ValidationError) as err:
            images.create(cloud.db, cloud.admin, data)
        assert err.value.field == field
    assert cloud.snapshot() == before
