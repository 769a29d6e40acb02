"""``CloudAPI``: the library API's interface, each call one request to ``novakit serve``.

The service answers under ``/novakit/v1`` (``novakit.service.native``) by calling the same
library function with the token's identity; this side only carries the call and its answer. The
``ctx`` every method takes, as the library's do, is not sent: who calls is the token's to say.

Two things differ from the library in one process, both because the service owns the work (as
nova-api and its conductor do):

- the conductor's part of a create or an action runs in the service's pool. A call that returns
  once the work is done in the library (``act`` without ``defer``, ``create``) waits here until
  the server has settled, polling it; a deferred one returns at once, and nothing is handed to a
  worker (``carry_on`` only runs the later steps of a path, each once the one before has ended);
- the conductor's round steps of the playbooks (``run_step``): the service delivers the requests
  to the hosts itself and returns none, and the step returns once the servers have settled, so
  that a playbook's later plays see them as its own rounds would have left them.
"""

from __future__ import annotations

import builtins
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from novakit import exceptions, worker
from novakit.client.calls import call_name
from novakit.compute.api import ActOutcome
from novakit.compute.create import CreateOutcome
from novakit.context import RequestContext

if TYPE_CHECKING:
    from keystoneauth1.session import Session

#: the catalog's type for the native endpoint (``novakit.identity.bootstrap.ENDPOINTS``)
SERVICE_TYPE = "novakit"
#: how long a call that waits for the service's work waits at most (``NOVAKIT_CLOUD_TIMEOUT``)
DEFAULT_TIMEOUT = 600.0
#: the attributes of a library exception its answer carries (``novakit.service.native``)
CARRIED = ("server", "changed", "explanation", "field", "rule", "errors")


class CloudError(exceptions.NovakitError):
    """The cloud could not be reached or did not authenticate the caller."""

    msg_fmt = "cloud %(cloud)s: %(reason)s"
    code = 503


def connect(cloud: str) -> CloudAPI:
    """A ``CloudAPI`` over the cloud of that name: its entry in ``clouds.yaml`` (and ``OS_*``),
    as openstacksdk reads it for every OpenStack client."""
    from openstack import config as os_config
    from openstack import exceptions as os_exceptions

    try:
        with warnings.catch_warnings():
            # openstacksdk's notices about its own future (metrics back ends) are not the task's.
            warnings.filterwarnings("ignore", module=r"openstack\.")
            region = os_config.OpenStackConfig().get_one(cloud=cloud)
    except os_exceptions.ConfigException as exc:
        raise CloudError(cloud=cloud, reason=str(exc).splitlines()[0]) from None
    interface = region.get_interface()
    return CloudAPI(cloud, region.get_session(), interface if isinstance(interface, str) else "public")


class CloudAPI:
    """What ``novakit.compute.api.API`` offers the tools, over HTTP (module docstring)."""

    def __init__(self, cloud: str, session: Session, interface: str = "public") -> None:
        import os

        self.cloud = cloud
        self.session = session
        self.interface = interface
        self.timeout = float(os.environ.get("NOVAKIT_CLOUD_TIMEOUT") or DEFAULT_TIMEOUT)
        self._endpoint: str | None = None
        #: the service's id of the last request (``x-openstack-request-id``): the audit trail's
        self.request_id: str | None = None

    # ------------------------------------------------------------------ the wire

    def _url(self, path: str) -> str:
        if self._endpoint is None:
            from keystoneauth1 import exceptions as ks_exceptions

            try:
                found = self.session.get_endpoint(service_type=SERVICE_TYPE, interface=self.interface)
            except ks_exceptions.ClientException as exc:
                raise CloudError(cloud=self.cloud, reason=f"{type(exc).__name__}: {exc}") from None
            if not found:
                raise CloudError(
                    cloud=self.cloud,
                    reason=f"its catalog has no {SERVICE_TYPE} endpoint (run novakit identity bootstrap)",
                )
            self._endpoint = found.rstrip("/")
        return self._endpoint + path

    def _call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        from keystoneauth1 import exceptions as ks_exceptions

        url = self._url(path)
        try:
            resp = self.session.request(
                url,
                method,
                json=dict(body) if body is not None else None,
                params=dict(params) if params else None,
                raise_exc=False,
                headers={"Accept": "application/json"},
                # Bodies carry user data and passwords: never logged, even at debug level.
                log=False,
            )
        except ks_exceptions.ClientException as exc:
            raise CloudError(cloud=self.cloud, reason=f"{type(exc).__name__}: {exc}") from None
        self.request_id = resp.headers.get("x-openstack-request-id") or self.request_id
        answer = resp.json() if resp.content else None
        if resp.status_code >= 400:
            raise _raised(self.cloud, resp.status_code, answer)
        return answer

    def caller(self) -> RequestContext:
        """Who the cloud's credentials are, as the service will see them: the token's user,
        project and roles (read from the authentication, no other request). The tools read it
        where they show or ask for what depends on it (a host column, ``--all-projects``); the
        service decides again on every call."""
        from keystoneauth1 import exceptions as ks_exceptions

        try:
            access = self.session.auth.get_access(self.session)  # type: ignore[union-attr]
        except ks_exceptions.ClientException as exc:
            raise CloudError(cloud=self.cloud, reason=f"{type(exc).__name__}: {exc}") from None
        return RequestContext(
            project_id=access.project_id or "",
            user_id=access.user_id or "",
            roles=list(access.role_names or []),
        )

    # ------------------------------------------------------------------ reads

    def get(self, ctx: RequestContext, ref: str, *, deleted: bool = False) -> dict[str, Any]:
        del ctx
        server: dict[str, Any] = self._call("POST", "/servers/get", {"ref": ref, "deleted": deleted})
        return server

    def _find(self, ref: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._call("POST", "/servers/get", {"ref": ref, "deleted": False})
        except exceptions.InstanceNotFound:
            return None
        return found

    def list_servers(self, ctx: RequestContext, query: Any = None) -> builtins.list[dict[str, Any]]:
        return self.list_servers_and_down(ctx, query)[0]

    def list_servers_and_down(
        self, ctx: RequestContext, query: Any = None
    ) -> tuple[builtins.list[dict[str, Any]], builtins.list[str]]:
        del ctx
        given = query.model_dump(exclude_none=True) if hasattr(query, "model_dump") else dict(query or {})
        answer = self._call("POST", "/servers/list", {"query": given})
        return answer["servers"], answer["down_cells"]

    def console_output(self, ctx: RequestContext, ref: str, lines: int | None = None) -> str:
        del ctx
        text: str = self._call("POST", "/servers/console", {"ref": ref, "lines": lines})["output"]
        return text

    def list_actions(
        self, ctx: RequestContext, ref: str, *, deleted: bool = False
    ) -> builtins.list[dict[str, Any]]:
        del ctx
        actions: builtins.list[dict[str, Any]] = self._call(
            "POST", "/servers/actions", {"ref": ref, "deleted": deleted}
        )["actions"]
        return actions

    def image_id(self, ctx: RequestContext, ref: str) -> str:
        del ctx
        found: str = self._call("POST", "/images/usable", {"ref": ref})["id"]
        return found

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` run by the service, which gives its ``db``, ``conf`` and
        ``ctx`` (``novakit.client.calls``): one of the library's front-door calls it serves
        (``novakit.service.native.CALLS``)."""
        body = {"name": call_name(fn), "args": list(args), "kwargs": dict(kwargs)}
        return self._call("POST", "/call", body)["result"]

    # ------------------------------------------------------------------ creates and actions

    def create_servers(
        self,
        ctx: RequestContext,
        data: Mapping[str, Any],
        *,
        dry_run: bool = False,
        declarative: bool = False,
    ) -> CreateOutcome:
        del ctx
        body = {"server": dict(data), "dry_run": dry_run, "declarative": declarative}
        answer = self._call("POST", "/servers/create", body)
        return CreateOutcome(**answer)

    def create(
        self, ctx: RequestContext, data: Mapping[str, Any], *, build: bool = True, dry_run: bool = False
    ) -> builtins.list[dict[str, Any]]:
        """The servers as built (``build``: waited for) or, with ``build=False``, as recorded; the
        service builds them either way."""
        if dry_run:
            return [
                {"name": n, "host": h}
                for n, h in self.create_servers(ctx, data, dry_run=True).would_schedule_to.items()
            ]
        outcome = self.create_servers(ctx, data)
        if not build:
            return outcome.servers
        return [self._settle(ctx, s) for s in outcome.servers]

    def act(
        self,
        ctx: RequestContext,
        ref: str,
        action: str,
        options: Mapping[str, Any] | None = None,
        *,
        dry_run: bool = False,
        defer: bool = False,
        declarative: bool = False,
    ) -> ActOutcome:
        """The library's ``act``; without ``defer`` (the CLI), it returns once the server has
        settled, as the library's returns once the action is done."""
        body = {
            "ref": ref,
            "action": action,
            "options": dict(options or {}),
            "dry_run": dry_run,
            "declarative": declarative,
        }
        answer = self._call("POST", "/servers/act", body)
        outcome = ActOutcome(**answer)
        if defer or dry_run or not outcome.changed or outcome.server is None:
            return outcome
        outcome.server = self._settle(ctx, outcome.server)
        return outcome

    def _settle(self, ctx: RequestContext, server: dict[str, Any]) -> dict[str, Any]:
        """``server`` once its work has ended (its last view when it is gone); a timeout is
        desired's ``WaitTimeout``, the work going on in the service."""
        seen, why = worker.wait_for(lambda: self._find(server["id"]), worker.steady, self.timeout)
        if why is not None:
            raise self._timeout(seen or server)
        if seen is None:  # deleted: as the library's delete answers it
            return {**server, "vm_state": "deleted", "status": "DELETED", "task_state": None}
        return seen

    def _timeout(self, server: dict[str, Any]) -> exceptions.WaitTimeout:
        return exceptions.WaitTimeout(
            server,
            changed=True,
            timeout=self.timeout,
            wanted="settled",
            goes_on="; the service goes on with it",
        )

    def carry_on(self, ctx: RequestContext, server: str, then: Sequence[worker.Step]) -> None:
        """The later steps of a path (``desired``): the service has the build or the action's host
        part; each step is started once the server has settled from the one before."""
        for step in then:
            view = self._find(server)
            if view is None:
                return
            view = self._settle(ctx, view)
            if view["vm_state"] == "error":
                return
            self.act(ctx, server, step.action, step.options, defer=True, declarative=True)

    # ------------------------------------------------------------------ the playbooks' steps

    def run_step(
        self, ctx: RequestContext, params: Mapping[str, Any], *, check_mode: bool = False, diff: bool = False
    ) -> dict[str, Any]:
        """A ``novakit.cloud.conductor`` step (``playflow.run_step``) run by the service, which
        delivers its requests to the hosts; a schedule or an action step then waits until its
        servers have settled and returns them as they are (a summary's report and failures)."""
        body = {"params": dict(params), "check_mode": check_mode, "diff": diff}
        out: dict[str, Any] = self._call("POST", "/steps", body)
        if check_mode or params.get("step") not in ("schedule", "action") or not out.get("instances"):
            return out
        summary = {"params": {"step": "summary", "instances": list(out["instances"])}}

        def all_steady(seen: dict[str, Any] | None) -> bool:
            return seen is not None and all(worker.steady(s) for s in seen["servers"])

        now, why = worker.wait_for(lambda: self._call("POST", "/steps", summary), all_steady, self.timeout)
        assert now is not None
        if why is not None:
            raise self._timeout(next(s for s in now["servers"] if not worker.steady(s)))
        failed = [*out.get("failed_servers", []), *now["failed_servers"]]
        out.update(servers=now["servers"], report=now["report"], failed_servers=failed)
        if "published" in out:
            out["published"] = now["published"]
        return out


def _raised(cloud: str, status: int, answer: Any) -> exceptions.NovakitError:
    """The library exception an error answer names, with its message and what it carries; an
    answer of another shape (a 401 of the identity service) as a ``CloudError``."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict) or "type" not in error:
        message = (error or {}).get("message") if isinstance(error, dict) else None
        if status == 401:
            return CloudError(cloud=cloud, reason="the service refused the credentials (401)")
        return CloudError(cloud=cloud, reason=f"HTTP {status}: {message or 'no message'}")
    kind = getattr(exceptions, str(error["type"]), None)
    if not (isinstance(kind, type) and issubclass(kind, exceptions.NovakitError)):
        kind = exceptions.NovakitError
    exc = kind.__new__(kind)
    exceptions.NovakitError.__init__(exc, str(error.get("message") or ""), code=status)
    for name in CARRIED:
        if name in error:
            setattr(exc, name, error[name])
    return exc
