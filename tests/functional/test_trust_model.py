"""The trust model, tried as an outsider would: a member of project B against project A and the fleet.

Each attempt is refused with the words a missing object or a forbidden operation gets, reveals
nothing of project A, and changes nothing (every row of every table compared); the same attempt as
an admin succeeds. The entry points are the library functions every face calls (the conductor
steps as ``playflow.run_step``, heal, host registration and listing, the views).
"""

from __future__ import annotations

from typing import Any

import pytest

from novakit import exceptions, playflow, policy
from novakit.cells.registry import targeting
from novakit.compute.rpc import instance_spec
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.fleet import hosts
from novakit.heal.manager import heal
from novakit.host.messages import ComputeRequest, ComputeResult, Fault, InstanceResult
from tests.functional.cloud import Cloud, boot


@pytest.fixture
def outsider() -> RequestContext:
    return RequestContext(project_id="project-b", user_id="mallory", roles=["member"])


def _forged_failure(cloud: Cloud, server: dict[str, Any]) -> dict[str, Any]:
    """A "record" step's arguments saying A's server failed to build on its host."""
    with targeting(cloud.db, server["id"]), cloud.db.reader() as session:
        spec = instance_spec(session, db_api.instance_get(session, cloud.admin, server["id"]))
    host = server["host"]
    request = ComputeRequest(request_id="req-forged", host=host, operation="build", instances=[spec])
    failed = ComputeResult(
        request_id="req-forged",
        host=host,
        operation="build",
        results=[
            InstanceResult(
                uuid=server["id"],
                ok=False,
                fault=Fault(code=500, message="forged", exception_class="ComputeError"),
            )
        ],
    )
    return {
        "step": "record",
        "requests": [request.to_wire()],
        "results": {host: {"results": [failed.model_dump(mode="json")]}},
    }


def _refused_alike(cloud: Cloud, call: Any, error: type[Exception], words: str) -> None:
    before = cloud.snapshot()
    with pytest.raises(error) as refused:
        call()
    assert words in str(refused.value)
    assert "project-a" not in str(refused.value)
    assert cloud.snapshot() == before


def test_a_member_cannot_record_a_forged_build_result_for_another_projects_server(
    cloud: Cloud, ctx: RequestContext, outsider: RequestContext
) -> None:
    server = boot(cloud, ctx, "victim")
    params = _forged_failure(cloud, server)
    _refused_alike(
        cloud,
        lambda: playflow.run_step(cloud.api, outsider, params),
        exceptions.InstanceNotFound,
        f"Instance {server['id']} could not be found.",
    )
    # The same words as for a server that does not exist at all.
    with pytest.raises(exceptions.InstanceNotFound) as missing:
        cloud.api.get(outsider, server["id"])
    assert str(missing.value) == f"Instance {server['id']} could not be found."
    assert cloud.api.get(ctx, server["id"])["status"] == "ACTIVE"


def test_a_member_cannot_heal_with_a_forged_host_listing(
    cloud: Cloud, ctx: RequestContext, outsider: RequestContext
) -> None:
    server = boot(cloud, ctx, "running")
    forged = {server["host"]: {}}  # "the host runs nothing": heal would put the server in error
    _refused_alike(
        cloud,
        lambda: heal(cloud.db, cloud.conf, reports=forged, hosts=[server["host"]], ctx=outsider),
        exceptions.PolicyNotAuthorized,
        "Policy does not allow heal to be performed.",
    )
    assert cloud.api.get(ctx, server["id"])["status"] == "ACTIVE"
    # An admin's heal with the real listing changes nothing either: the server runs.
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin).corrections == []


def test_a_member_cannot_register_a_host_or_shrink_its_inventory(
    cloud: Cloud, outsider: RequestContext
) -> None:
    node = hosts.get_node(cloud.db, "compute-3")
    resources = cloud.fake("compute-3").get_available_resource().model_copy(update={"vcpus": 1})
    info = cloud.driver_info("compute-3")
    _refused_alike(
        cloud,
        lambda: hosts.register_host(cloud.db, cloud.conf, "compute-3", resources, info, ctx=outsider),
        exceptions.PolicyNotAuthorized,
        "host:register",
    )
    hosts.register_host(cloud.db, cloud.conf, "compute-3", resources, info, ctx=cloud.admin)
    assert hosts.get_node(cloud.db, "compute-3").vcpus == 1 != node.vcpus


def test_hosts_and_their_usage_are_the_operators(cloud: Cloud, ctx: RequestContext) -> None:
    boot(cloud, ctx, "counted")
    _refused_alike(
        cloud,
        lambda: hosts.list_hosts(cloud.db, cloud.conf, ctx=ctx),
        exceptions.PolicyNotAuthorized,
        "host:list",
    )
    listed = hosts.list_hosts(cloud.db, cloud.conf, ctx=cloud.admin)
    assert sum(h["instances"] for h in listed) == 1
    for operation in ("host:register", "host:heartbeat", "heal", "quota:update", "flavor:create"):
        assert not policy.allowed(ctx, operation) and policy.allowed(cloud.admin, operation)


def test_a_members_own_server_shows_no_host_and_no_valid_host_shows_no_reasons(
    cloud: Cloud, ctx: RequestContext
) -> None:
    from novakit.catalog import flavors

    mine = boot(cloud, ctx, "mine")
    shown = cloud.api.get(ctx, mine["id"])
    assert (shown["host"], shown["node"]) == (None, None) and len(shown["host_id"]) == 56
    assert cloud.api.get(cloud.admin, mine["id"])["host"] == mine["host"]
    events = cloud.api.list_actions(ctx, mine["id"])[0]["events"]
    assert all(e["host"] is None for e in events)

    flavors.create(cloud.db, cloud.admin, {"name": "vast", "vcpus": 1, "memory_mb": 200000, "root_gb": 1})
    request = {"name": "vast", "flavor": "vast", "image": "tiny"}
    with pytest.raises(exceptions.NoValidHost) as planned:
        cloud.api.create(ctx, request, dry_run=True)
    assert str(planned.value) == "No valid host was found." and planned.value.explanation == {}
    [failed] = cloud.api.create(ctx, request)
    assert failed["fault"]["message"] == "No valid host was found."
    assert set(failed["fault"]) == {"code", "message", "created"}
    schedule_events = cloud.api.list_actions(ctx, failed["id"])[0]["events"]
    assert [e["details"] for e in schedule_events] == ["No valid host was found."]
    # The operator sees each host and why it went.
    told = cloud.api.get(cloud.admin, failed["id"])["fault"]
    assert all(host in told["details"] for host in ("compute-1", "compute-2", "compute-3"))
    with pytest.raises(exceptions.NoValidHost) as explained:
        cloud.api.create(cloud.admin, {**request, "name": "vast-2"}, dry_run=True)
    assert explained.value.explanation["steps"]


def test_the_callback_summary_of_a_guessed_request_id_shows_nothing_of_another_project(
    cloud: Cloud, ctx: RequestContext, outsider: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member runs a playbook with ``-e novakit_request_id=<A's request>``: the novakit callback's
    summary table is built as the run's own identity, so it lists none of A's servers or faults."""
    import importlib

    from tests.e2e.runner import ROOT

    server = boot(cloud, ctx, "secretive")
    monkeypatch.syspath_prepend(str(ROOT / "playbooks" / "collections"))
    plugin = importlib.import_module("ansible_collections.novakit.cloud.plugins.callback.novakit")
    monkeypatch.setenv("NOVAKIT_DB_URL", cloud.db.url)
    callback = plugin.CallbackModule()
    callback.request_id = ctx.request_id  # guessed, or read off a job list

    for name, value in (("NOVAKIT_PROJECT", outsider.project_id), ("NOVAKIT_ROLES", "member")):
        monkeypatch.setenv(name, value)
    assert callback._summary() == ([], {})

    for name, value in (("NOVAKIT_PROJECT", ctx.project_id), ("NOVAKIT_ROLES", "member")):
        monkeypatch.setenv(name, value)
    rows, hosts = callback._summary()  # the project's own member sees its servers, not their hosts
    assert rows == [("secretive", "ACTIVE", "-", "")] and hosts == {}
    monkeypatch.setenv("NOVAKIT_ROLES", "admin")
    assert callback._summary()[1] == {server["host"]: 1}
