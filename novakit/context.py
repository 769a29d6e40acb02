"""Who is asking: the RequestContext that every API call carries.

novakit has no Keystone. The trust model (README, "Trust model"):

* whoever holds the database credential is an operator: that credential is the
  fleet's root, and every entry point needs it;
* the caller's identity is the **operator's** to give: the environment
  (``NOVAKIT_PROJECT``, ``NOVAKIT_USER``, ``NOVAKIT_ROLES``: an AWX credential's
  injectors, a job template's environment, the operator's shell), over the
  configuration file's ``[identity]``. Nothing set means a ``member`` of project
  ``default`` as the Unix user: never an admin;
* identity options the call gives itself (a task's ``project``/``user``/``roles``,
  the CLI's ``--project``/``--user``/``--role``: things a member can set on a run)
  are honoured for an admin (who may act as anyone, or drop roles), and for
  anyone else only where they change nothing or drop roles, unless the operator's
  configuration sets ``identity.trust_given_identity``. Otherwise the call is
  refused (``IdentityNotAllowed``), naming the option.

A context with the ``admin`` role sees every project; any other sees its own
project only, and another project's instance looks exactly like one that does
not exist. What needs the admin role is ``novakit.policy``'s table.

Every entry point (the CLI, the Ansible modules, the conductor action plugin,
the callback plugin) builds its context with ``context_from`` and finds the
Ansible run's request id with ``run_request_id``: one precedence order, here,
so that the instance actions of one run share one request id whichever of them
recorded it.
"""

from __future__ import annotations

import os
import pwd
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from novakit.config import IdentityConfig

# The variables and environment that name a run, in the order ``run_request_id`` reads them.
REQUEST_ID_VAR = "novakit_request_id"  # extra variable
REQUEST_ID_ENV = "NOVAKIT_REQUEST_ID"
AWX_JOB_VARS = ("awx_job_id", "tower_job_id")  # extra variables AWX gives every job
AWX_JOB_ENV = ("JOB_ID", "AWX_JOB_ID", "TOWER_JOB_ID")
# ansible-runner names no variable after the ident alone: it gives the playbook's processes
# AWX_ISOLATED_DATA_DIR = <artifact dir>/<ident> (``/runner/artifacts/<ident>`` in a container).
RUNNER_ARTIFACTS_ENV = "AWX_ISOLATED_DATA_DIR"
# The play variables ``run_request_id`` looks at; a caller that holds all of a task's
# variables hands over these only.
RUN_VARS = (REQUEST_ID_VAR, *AWX_JOB_VARS)


def generate_request_id() -> str:
    return f"req-{uuid.uuid4()}"


def normalize_request_id(value: Any, *, awx: bool = False) -> str:
    """The form the audit trail keys requests by: ``req-<id>``, and ``req-awx-<id>`` for an AWX job.

    An id that already starts with ``req-`` is kept as it is, so an id that has
    been through here (the callback's, handed on in the environment) comes back
    unchanged however often it is normalised again.
    """
    text = str(value).strip()
    if text.startswith("req-"):
        return text
    return f"req-awx-{text}" if awx else f"req-{text}"


def run_request_id(
    extra_vars: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The request id of the Ansible run this code runs in; None when there is no run to name.

    The first of these that is set (not empty) wins:

    1. the extra variable ``novakit_request_id``: the caller named the request;
    2. ``NOVAKIT_REQUEST_ID`` in the environment: the id handed down to this run,
       by the novakit callback plugin (which puts its own answer to this function
       there), by ``novakit.runner``, or by the operator;
    3. the AWX job id, as ``req-awx-<id>``: the extra variables ``awx_job_id``,
       ``tower_job_id``, then ``JOB_ID``, ``AWX_JOB_ID``, ``TOWER_JOB_ID`` in the
       environment;
    4. the ansible-runner ident, as ``req-<ident>``: the last part of
       ``AWX_ISOLATED_DATA_DIR``, which ansible-runner sets for the playbook and so
       for every module and action plugin of the run on the controller.

    ``extra_vars`` are the play variables the caller can see: the callback
    plugin's extra variables, the action plugin's task variables; modules see
    none and pass None. ``environ`` defaults to ``os.environ``.

    (2) comes before (3) because modules read only the environment: with the
    callback's answer ahead of the AWX job id, a module finds the id the
    callback chose even when a ``novakit_request_id`` given to an AWX job made
    that answer something other than the job id.
    """
    variables: Mapping[str, Any] = extra_vars or {}
    env: Mapping[str, str] = os.environ if environ is None else environ
    if _given(variables.get(REQUEST_ID_VAR)):
        return normalize_request_id(variables[REQUEST_ID_VAR])
    if _given(env.get(REQUEST_ID_ENV)):
        return normalize_request_id(env[REQUEST_ID_ENV])
    for job_id in [variables.get(name) for name in AWX_JOB_VARS] + [env.get(name) for name in AWX_JOB_ENV]:
        if _given(job_id):
            return normalize_request_id(job_id, awx=True)
    artifacts = str(env.get(RUNNER_ARTIFACTS_ENV) or "").rstrip("/")
    if _given(os.path.basename(artifacts)):
        return normalize_request_id(os.path.basename(artifacts))
    return None


def context_from(
    params: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    identity: IdentityConfig | None = None,
) -> RequestContext:
    """The caller's context: the operator's identity for it, what the call gave, the request id.

    ``params`` may hold ``project``, ``user``, ``roles`` and ``request_id`` (a
    module's or the CLI's options); None, or an empty string, means "not given"
    (an AWX survey sends an empty string for a blank answer). An empty list of
    roles is given: a caller with no roles. ``identity`` is the configuration's
    ``[identity]`` section.

    - the operator's identity (``operator_identity``): ``NOVAKIT_PROJECT``,
      ``NOVAKIT_USER`` (else ``USER``, ``LOGNAME``, the password database), ``NOVAKIT_ROLES``
      (comma-separated; set but empty means none), each over ``identity``'s, else project ``default``, the
      Unix user, role ``member``;
    - the given options replace it where the module docstring says they may;
    - request id: ``request_id`` (normalised), else the run's
      (``run_request_id(extra_vars, environ)``), else a new one.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    project, user, roles = operator_identity(env, identity)
    trusted = "admin" in roles or bool(identity and identity.trust_given_identity)
    given_project, given_user, given_roles = params.get("project"), params.get("user"), params.get("roles")
    if _given(given_project) and str(given_project) != project:
        _may_give(trusted, "project", str(given_project))
        project = str(given_project)
    if _given(given_user) and str(given_user) != user:
        _may_give(trusted, "user", str(given_user))
        user = str(given_user)
    if given_roles is not None:
        wanted = _roles(given_roles)
        extra = [r for r in wanted if r not in roles]
        if extra:
            _may_give(trusted, "roles", ",".join(extra))
        roles = wanted
    given = params.get("request_id")
    if _given(given):
        request_id = normalize_request_id(given)
    else:
        request_id = run_request_id(extra_vars, env) or generate_request_id()
    return RequestContext(project, user, roles, request_id)


def _may_give(trusted: bool, option: str, value: str) -> None:
    if not trusted:
        from novakit import exceptions

        raise exceptions.IdentityNotAllowed(option=option, value=value)


def _given(value: Any) -> bool:
    return value is not None and str(value).strip() != ""


def _roles(value: Any) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    return [str(r).strip() for r in value if _given(r)]


def _unix_user() -> str:
    """The name of the process's own user in the password database (a cron job, a systemd unit
    or ``env -i`` set no USER), ``uid-<n>`` for a uid that has no entry there."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid-{os.getuid()}"


#: the identity of a caller nobody named: a member, never an admin
DEFAULT_PROJECT = "default"
DEFAULT_ROLES = ("member",)


def operator_identity(
    environ: Mapping[str, str] | None = None, identity: IdentityConfig | None = None
) -> tuple[str, str, list[str]]:
    """(project, user, roles) as the operator gives them: the environment over the configuration."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    conf_project = identity.project if identity else None
    conf_user = identity.user if identity else None
    project = next(str(v) for v in (env.get("NOVAKIT_PROJECT"), conf_project, DEFAULT_PROJECT) if _given(v))
    user = next(
        str(v)
        for v in (env.get("NOVAKIT_USER"), conf_user, env.get("USER"), env.get("LOGNAME"), _unix_user())
        if _given(v)
    )
    roles: Any
    if "NOVAKIT_ROLES" in env:
        roles = env["NOVAKIT_ROLES"]
    elif identity is not None and identity.roles is not None:
        roles = identity.roles
    else:
        roles = list(DEFAULT_ROLES)
    return project, user, _roles(roles)


@dataclass(frozen=True)
class RequestContext:
    project_id: str
    user_id: str
    roles: list[str] = field(default_factory=list)
    request_id: str = field(default_factory=generate_request_id)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    def with_request_id(self, request_id: str) -> RequestContext:
        return RequestContext(self.project_id, self.user_id, list(self.roles), request_id)

    @classmethod
    def from_env(cls, request_id: str | None = None) -> RequestContext:
        """The environment's identity, and this request id or a new one (not the run's: ``context_from``)."""
        project, user, roles = operator_identity(os.environ)
        return cls(project, user, roles, request_id or generate_request_id())

    @classmethod
    def admin(cls, request_id: str | None = None) -> RequestContext:
        return cls("admin", "admin", ["admin"], request_id or generate_request_id())
