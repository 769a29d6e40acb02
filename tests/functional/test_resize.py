"""Resize, cold migration, confirm and revert on fake hosts: states, claims on both hosts, guests.

At every step a server's claims are checked where a user of placement would look: which
provider holds what, for the instance and for its migration.
"""

from __future__ import annotations

from typing import Any

import pytest

from novakit import exceptions
from novakit.context import RequestContext
from novakit.moves import migrations
from novakit.placement import api as placement
from novakit.virt.fake import failure_env_var
from tests.functional.cloud import Cloud, boot

SMALL = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
LARGE = {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("p1", "u1")


def _claims(cloud: Cloud, consumer: str) -> dict[str, dict[str, int]]:
    """{host: resources} the consumer holds."""
    names = {p["uuid"]: p["name"] for p in _providers(cloud)}
    return {names[rp]: r for rp, r in placement.get_allocations_for_consumer(cloud.db, consumer).items()}


def _providers(cloud: Cloud) -> list[dict[str, Any]]:
    from sqlalchemy import text

    with cloud.db.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(text("SELECT uuid, name FROM resource_providers"))]


def _migration(cloud: Cloud, server: str) -> dict[str, Any]:
    return migrations.list_migrations(cloud.db, cloud.admin, server=server)[0]


def _guests(cloud: Cloud, host: str) -> dict[str, int]:
    return {u: int(p) for u, p in cloud.fake(host).list_instances().items()}


def _action(cloud: Cloud, server: str, action: str) -> dict[str, Any]:
    return next(a for a in cloud.api.list_actions(cloud.admin, server) if a["action"] == action)


def _events(cloud: Cloud, server: str, action: str) -> list[tuple[str, str | None]]:
    return [(e["event"], e["result"]) for e in _action(cloud, server, action)["events"]]


def test_resize_then_confirm_moves_the_server_and_its_claims(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})

    shown = cloud.api.get(cloud.admin, "web")
    dest = shown["host"]
    assert dest != source
    assert (shown["status"], shown["flavor"]["name"]) == ("VERIFY_RESIZE", "m1.large")
    mig = _migration(cloud, server["id"])
    assert (mig["status"], mig["source_compute"], mig["dest_compute"]) == ("finished", source, dest)
    # Both hosts hold their claims: the destination the instance's, the source the migration's.
    assert _claims(cloud, server["id"]) == {dest: LARGE}
    assert _claims(cloud, mig["id"]) == {source: SMALL}
    assert server["id"] in _guests(cloud, dest) and server["id"] not in _guests(cloud, source)
    assert [e for e, _ in _events(cloud, server["id"], "resize")] == [
        "conductor_migrate_server",
        "compute_resize_instance",
        "compute_finish_resize",
    ]

    cloud.api.act(ctx, "web", "confirm_resize")
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"]) == ("ACTIVE", dest)
    assert _migration(cloud, server["id"])["status"] == "confirmed"
    assert _claims(cloud, mig["id"]) == {}
    assert _claims(cloud, server["id"]) == {dest: LARGE}
    assert placement.get_usages(cloud.db, source)["VCPU"] == 0
    # The source's copy is gone: nothing of the server is left there.
    assert server["id"] not in cloud.fake(source)._read()["instances"]


def test_revert_brings_the_server_back_with_its_old_flavor_and_claim(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    console_before = cloud.api.console_output(ctx, "web")
    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    dest = cloud.api.get(cloud.admin, "web")["host"]
    mig = _migration(cloud, server["id"])

    cloud.api.act(ctx, "web", "revert_resize")
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"], shown["flavor"]["name"]) == ("ACTIVE", source, "m1.small")
    assert _migration(cloud, server["id"])["status"] == "reverted"
    assert _claims(cloud, server["id"]) == {source: SMALL}
    assert _claims(cloud, mig["id"]) == {}
    assert placement.get_usages(cloud.db, dest)["VCPU"] == 0
    assert _guests(cloud, source) == {server["id"]: 1}
    assert server["id"] not in _guests(cloud, dest)
    # The same guest: its console goes on from where it was.
    assert cloud.api.console_output(ctx, "web").startswith(console_before.rstrip("\n"))


def test_a_stopped_server_moves_stopped_and_comes_back_stopped(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "stop")
    cloud.api.act(cloud.admin, server["id"], "migrate")
    shown = cloud.api.get(cloud.admin, server["id"])
    assert shown["status"] == "VERIFY_RESIZE" and shown["power_state"] == 4
    cloud.api.act(ctx, "web", "confirm_resize")
    assert cloud.api.get(ctx, "web")["status"] == "SHUTOFF"
    assert _guests(cloud, shown["host"]) == {server["id"]: 4}


def test_migrate_to_a_named_host_is_admin_only(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web", availability_zone=None)
    target = next(h for h in ("compute-1", "compute-2", "compute-3") if h != server["host"])
    before = cloud.snapshot()
    with pytest.raises(exceptions.PolicyNotAuthorized):
        cloud.api.act(ctx, "web", "migrate", {"host": target})
    assert cloud.snapshot() == before
    cloud.api.act(cloud.admin, server["id"], "migrate", {"host": target})
    assert cloud.api.get(cloud.admin, server["id"])["host"] == target
    assert _migration(cloud, server["id"])["type"] == "migration"


@pytest.mark.parametrize(
    ("action", "options", "field"),
    [
        ("resize", {"flavor": "m1.small"}, "options.flavor"),  # the same flavor
        ("resize", {"flavor": "nope"}, None),  # an unknown flavor
        ("resize", {}, "options.flavor"),  # no flavor
        ("resize", {"flavor": "m1.small", "host": "x"}, "options.host"),  # an option it does not take
    ],
)
def test_bad_resizes_are_refused_naming_the_field_and_change_nothing(
    cloud: Cloud, ctx: RequestContext, action: str, options: dict[str, Any], field: str | None
) -> None:
    boot(cloud, ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.NovakitError) as err:
        cloud.api.act(ctx, "web", action, options)
    if field is not None:
        assert isinstance(err.value, exceptions.ValidationError) and field in str(err.value)
    else:
        assert isinstance(err.value, exceptions.FlavorNotFound)
    assert cloud.snapshot() == before


def test_a_smaller_disk_and_confirming_what_is_not_resized_are_refused(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit.catalog import flavors

    flavors.create(cloud.db, cloud.admin, {"name": "m1.tiny", "vcpus": 1, "memory_mb": 512, "root_gb": 5})
    boot(cloud, ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="never shrinks"):
        cloud.api.act(ctx, "web", "resize", {"flavor": "m1.tiny"})
    for answer in ("confirm_resize", "revert_resize"):
        with pytest.raises(exceptions.InstanceInvalidState):
            cloud.api.act(ctx, "web", answer)
    assert cloud.snapshot() == before


def test_a_flavor_that_fits_nowhere_is_no_valid_host_and_the_claim_goes_back(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit.catalog import flavors

    flavors.create(cloud.db, cloud.admin, {"name": "huge", "vcpus": 64, "memory_mb": 1024, "root_gb": 10})
    server = boot(cloud, ctx, "web")
    with pytest.raises(exceptions.NoValidHost) as err:
        cloud.api.act(ctx, "web", "resize", {"flavor": "huge"})
    assert "VCPU" in err.value.format_message() or "vcpu" in err.value.format_message().lower()
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"], shown["flavor"]["name"]) == ("ACTIVE", server["host"], "m1.small")
    # Nova shows a fault on a server in error only: this one is active, its action says what failed.
    assert "fault" not in shown
    assert dict(_events(cloud, server["id"], "resize")) == {"conductor_migrate_server": "Error"}
    assert _action(cloud, server["id"], "resize")["message"] == "Error"
    assert _claims(cloud, server["id"]) == {server["host"]: SMALL}
    mig = _migration(cloud, server["id"])
    assert mig["status"] == "error" and _claims(cloud, mig["id"]) == {}


@pytest.mark.parametrize("where", ["source", "dest"])
def test_a_failed_step_rolls_back_to_the_source_with_a_fault_and_nothing_leaked(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    others = [h for h in ("compute-1", "compute-2", "compute-3") if h != source]
    failing = source if where == "source" else others
    for host in [failing] if isinstance(failing, str) else failing:
        mode = "fail_migrate_source" if where == "source" else "fail_migrate_dest"
        monkeypatch.setenv(failure_env_var(host), mode)

    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"], shown["flavor"]["name"]) == ("ACTIVE", source, "m1.small")
    assert _action(cloud, server["id"], "resize")["message"] == "Error"
    assert _claims(cloud, server["id"]) == {source: SMALL}
    mig = _migration(cloud, server["id"])
    assert mig["status"] == "error" and _claims(cloud, mig["id"]) == {}
    for host in others:
        assert placement.get_usages(cloud.db, host)["VCPU"] == 0
        assert server["id"] not in _guests(cloud, host)
    assert _guests(cloud, source) == {server["id"]: 1}  # running again
    results = dict(_events(cloud, server["id"], "resize"))
    failed = "compute_resize_instance" if where == "source" else "compute_finish_resize"
    assert results[failed] == "Error"


def test_deleting_a_resized_server_frees_both_hosts(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    dest = cloud.api.get(cloud.admin, "web")["host"]
    mig = _migration(cloud, server["id"])
    cloud.api.act(ctx, "web", "delete")
    assert _claims(cloud, server["id"]) == {} and _claims(cloud, mig["id"]) == {}
    for host in (source, dest):
        assert placement.get_usages(cloud.db, host)["VCPU"] == 0
        assert server["id"] not in cloud.fake(host)._read()["instances"]
    assert _migration(cloud, server["id"])["status"] == "confirmed"


def test_migrations_are_listed_for_admins_only(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    with pytest.raises(exceptions.PolicyNotAuthorized):
        migrations.list_migrations(cloud.db, ctx)
    rows = migrations.list_migrations(cloud.db, cloud.admin, host=server["host"])
    assert [(m["server"], m["type"], m["old_flavor"], m["new_flavor"]) for m in rows] == [
        (server["id"], "resize", "m1.small", "m1.large")
    ]
