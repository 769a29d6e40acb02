"""``/novakit/v1``: the library's API for novakit's own tools (``novakit.client.CloudAPI``).

The ``novakit`` command, the ``novakit.cloud`` modules and the playbooks, given a cloud instead
of a database URL, call the library here. Each route is one library call with the token's caller
(``auth.caller``) and answers what the call returned, as JSON: the same views, the same
outcomes, the same errors (the library exception's name, message and what it carries: a
server's view, a scheduler's explanation for those who may read it). Nothing is decided here.

What a call starts runs in the service's pool, as for the Compute API: a create's builds, an
action's host part (the ``API``'s ``later``), a playbook step's requests (``playflow.run_step``'s
``deliver``). So a deferred action is not handed back (its request holds what only the service
may send to a host), and the playbooks' record steps, which take what hosts answered, are not
served: the rounds are the service's.

``/call`` runs one of the library's front-door functions (``CALLS``: networks, subnets, ports,
security groups and rules, key pairs, server groups, interfaces, flavors, images and their
members, volumes and their attachments, quotas, aggregates and zones, and the hosts as Nova's
os-services shows them), each of which takes its caller and applies the policy itself. The
database, the configuration, the caller, the conductor, the API and the push of changed filters
to the hosts are the service's and the token's, bound by name (``novakit.client.calls``), never
the client's.

Bodies are JSON objects read with the service's limit (``body.read_json``) and checked by the
models below, unknown fields refused; every route is POST, a listing's query being a body.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from novakit import exceptions, playflow
from novakit.client.calls import bind, call_name
from novakit.compute import rounds, schemas
from novakit.compute.api import API
from novakit.compute.create import no_valid_host_shown
from novakit.context import RequestContext
from novakit.host.messages import ComputeRequest
from novakit.service.auth import Caller, caller
from novakit.service.body import read_json
from novakit.service.network_common import push_of

PREFIX = "/novakit/v1"
router = APIRouter(prefix=PREFIX)


class _Ref(schemas._Request):
    ref: str = Field(min_length=1, max_length=255)
    deleted: bool = False


class _Listing(schemas._Request):
    query: dict[str, Any] = Field(default_factory=dict)


class _Console(schemas._Request):
    ref: str = Field(min_length=1, max_length=255)
    lines: int | None = Field(default=None, ge=1)


class _Create(schemas._Request):
    server: dict[str, Any]
    dry_run: bool = False
    declarative: bool = False


class _Act(schemas._Request):
    ref: str = Field(min_length=1, max_length=255)
    action: str = Field(min_length=1, max_length=64)
    options: dict[str, Any] = Field(default_factory=dict)
    dry_run: bool = False
    declarative: bool = False


class _Call(schemas._Request):
    name: str = Field(min_length=1, max_length=200)
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class _Step(schemas._Request):
    params: dict[str, Any]
    check_mode: bool = False
    diff: bool = False


def _api(request: Request) -> API:
    api: API = request.app.state.compute.api
    return api


async def _body(request: Request, model: type[schemas.M]) -> schemas.M:
    return schemas.parse(model, await read_json(request))


def _answer(value: Any) -> JSONResponse:
    """A library answer as JSON (dataclasses as objects, datetimes as ISO strings)."""
    return JSONResponse(jsonable_encoder(value))


@router.post("/servers/get")
async def get_server(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Ref)
    return _answer(await run_in_threadpool(_api(request).get, who.ctx, given.ref, deleted=given.deleted))


@router.post("/servers/list")
async def list_servers(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Listing)
    servers, down = await run_in_threadpool(_api(request).list_servers_and_down, who.ctx, given.query)
    return _answer({"servers": servers, "down_cells": down})


@router.post("/servers/console")
async def console(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Console)
    text = await run_in_threadpool(_api(request).console_output, who.ctx, given.ref, given.lines)
    return _answer({"output": text})


@router.post("/servers/actions")
async def server_actions(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Ref)
    found = await run_in_threadpool(_api(request).list_actions, who.ctx, given.ref, deleted=given.deleted)
    return _answer({"actions": found})


@router.post("/images/usable")
async def usable_image(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Ref)
    return _answer({"id": await run_in_threadpool(_api(request).image_id, who.ctx, given.ref)})


def _create(api: API, ctx: RequestContext, given: _Create) -> dict[str, Any]:
    """``create_servers``, and the build of what it left unbuilt handed to the pool."""
    try:
        outcome = api.create_servers(ctx, given.server, dry_run=given.dry_run, declarative=given.declarative)
    except exceptions.NoValidHost as exc:
        raise no_valid_host_shown(ctx, exc) from None
    if not given.dry_run:
        api.build_later(ctx, outcome)
    answer: dict[str, Any] = jsonable_encoder(dataclasses.replace(outcome, records=None))
    answer.pop("records")
    return answer


@router.post("/servers/create")
async def create_servers(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Create)
    return _answer(await run_in_threadpool(_create, _api(request), who.ctx, given))


@router.post("/servers/act")
async def act(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Act)
    outcome = await run_in_threadpool(
        _api(request).act,
        who.ctx,
        given.ref,
        given.action,
        given.options,
        dry_run=given.dry_run,
        declarative=given.declarative,
    )
    answer: dict[str, Any] = jsonable_encoder(dataclasses.replace(outcome, request=None))
    answer.pop("request")
    return _answer(answer)


def _served_calls() -> dict[str, Callable[..., Any]]:
    """The library's front-door calls of the catalog modules that the service runs for a cloud
    (``CloudAPI.call``), by their wire name. Each takes its caller (``ctx``) and decides what it
    may see and do itself (``novakit.policy``); one that takes no caller is never served, nor one
    whose view shows a host to a member."""
    from novakit import quota
    from novakit.catalog import flavors, image_members, images
    from novakit.compute import interfaces, server_groups, volume_attach
    from novakit.fleet import aggregates, hosts
    from novakit.keypairs import registry
    from novakit.moves import drain
    from novakit.network import networks, security_groups, subnets
    from novakit.network import ports as port_calls
    from novakit.volume import volumes as volume_calls

    networking = (
        networks.show,
        networks.list_networks,
        networks.create,
        networks.delete,
        subnets.show,
        subnets.list_subnets,
        subnets.create,
        subnets.delete,
        security_groups.list_groups,
        security_groups.show_group,
        security_groups.create_group,
        security_groups.delete_group,
        security_groups.find_rule,
        security_groups.create_rule,
        security_groups.list_rules,
        security_groups.show_rule,
        security_groups.delete_rule,
        security_groups.add_to_server,
        security_groups.remove_from_server,
    )
    compute = (
        registry.find,
        registry.show,
        registry.list_keypairs,
        registry.create,
        registry.delete,
        server_groups.find,
        server_groups.get,
        server_groups.list_groups,
        server_groups.create,
        server_groups.delete_group,
        interfaces.attach,
        interfaces.detach,
    )
    # the hosts as Nova's os-services and os-hypervisors show and change them, and a host's drain
    # or evacuation (admins; the host's own registration, heartbeat and adoption of guests stay
    # the operator's)
    hosts_ = (
        hosts.list_hosts,
        hosts.show_host,
        hosts.set_disabled,
        hosts.set_forced_down,
        hosts.delete_host,
        hosts.set_traits,
        hosts.unset_traits,
        drain.drain_host,
        drain.evacuate_host,
    )
    # ports (the port module and commands): a port's view shows its binding host to those who may
    # see hosts only (``ports.view``)
    ports = (
        port_calls.show,
        port_calls.list_ports,
        port_calls.create,
        port_calls.delete_port,
    )
    # flavors and images (the flavor and image modules, novakit flavor and image): an image's
    # location is in its view for admins only, and images.remove answers nothing
    catalog = (
        flavors.show,
        flavors.list_flavors,
        flavors.create,
        flavors.delete,
        images.show,
        images.show_owned,
        images.list_images,
        images.create,
        images.set_visibility,
        images.remove,
        image_members.add_member,
        image_members.remove_member,
        image_members.list_members,
        image_members.set_member_status,
    )
    # volumes and their attachments (a volume's view shows its host to those who may see hosts only)
    volumes = (
        volume_calls.show,
        volume_calls.list_volumes,
        volume_calls.create,
        volume_calls.delete,
        volume_attach.attach,
        volume_attach.detach,
        volume_attach.ensure,
    )
    # quotas, aggregates and zones (an aggregate's hosts are an admin's to see: every aggregate
    # call is; a zone's hosts only with ``long``, an admin's)
    fleet = (
        quota.show_quota,
        quota.apply,
        aggregates.list_aggregates,
        aggregates.show,
        aggregates.create,
        aggregates.update,
        aggregates.delete,
        aggregates.add_host,
        aggregates.remove_host,
        aggregates.apply,
        aggregates.list_zones,
    )
    served = networking + compute + hosts_ + ports + catalog + volumes + fleet
    assert all("ctx" in inspect.signature(fn).parameters for fn in served)
    return {call_name(fn): fn for fn in served}


CALLS = _served_calls()


@router.post("/call")
async def call(request: Request, who: Caller = Depends(caller)) -> Response:
    """One of ``CALLS`` with the service's database and configuration and the token's caller."""
    given = await _body(request, _Call)
    fn = CALLS.get(given.name)
    if fn is None:
        raise exceptions.ValidationError("name", "is not a library call the service runs for a cloud")
    api = _api(request)
    provided = {
        "db": api.db,
        "conf": api.conf,
        "ctx": who.ctx,
        "on_change": push_of(request, who.ctx),
        "svc": api.conductor,
        "api": api,
        "later": None,  # a tool's call ends with its work, as in the tool's own process
    }
    bound = bind(fn, provided, given.args, given.kwargs)
    result = await run_in_threadpool(lambda: fn(*bound.args, **bound.kwargs))
    return _answer({"result": result})


def _deliverer(api: API) -> Any:
    """A step's requests to the hosts, round after round, in the pool (as ``worker.run`` does)."""

    def deliver(ctx: RequestContext, requests: list[ComputeRequest]) -> None:
        conductor = api.conductor
        assert api.later is not None
        api.later(rounds.run, conductor.rpc, conductor, ctx, requests)

    return deliver


@router.post("/steps")
async def step(request: Request, who: Caller = Depends(caller)) -> Response:
    given = await _body(request, _Step)
    api = _api(request)

    def run() -> dict[str, Any]:
        try:
            return playflow.run_step(
                api,
                who.ctx,
                given.params,
                check_mode=given.check_mode,
                diff=given.diff,
                deliver=_deliverer(api),
            )
        except exceptions.NoValidHost as exc:
            raise no_valid_host_shown(who.ctx, exc) from None

    return _answer(await run_in_threadpool(run))
