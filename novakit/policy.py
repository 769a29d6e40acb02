"""Who may do what: the one table of operations that need the ``admin`` role.

Nova keeps such rules in its policy defaults, one name per operation, checked
where the operation is done. So does novakit: every operation that changes the
fleet (hosts, flavors, images, quotas) or other projects' records (heal, the
conductor's record of a host's answer for another project's servers), or shows
what only an operator may see (hosts and their usage), is named here, and the
function that does it calls ``authorize`` with that name, whichever entry point
(the CLI, a module, a playbook step, the Python API) reached it.

Everything not named here is a project-scoped operation: any caller may do it on
its own project's records, and another project's looks like one that does not exist.
Every look-up says so the same way, with ``scope`` ("a member sees only its own
project"; ``project:any`` lets an admin see them all). Nothing outside this module
reads ``RequestContext.is_admin``: a decision about who may do or see something is a
rule of this table, asked through ``authorize``, ``allowed`` or ``scope``.
"""

from __future__ import annotations

from typing import Any, Protocol, Self, TypeVar

from novakit import exceptions
from novakit.context import RequestContext


class _Filterable(Protocol):
    """A statement rows can be filtered out of (SQLAlchemy's ``Select``, ``Update``, ...)."""

    def where(self, *whereclause: Any) -> Self: ...


_Stmt = TypeVar("_Stmt", bound=_Filterable)

#: operation -> what it is (shown in ``novakit states``-style docs and in the refusal)
ADMIN_ONLY: dict[str, str] = {
    "host:register": "register a compute host or change its inventory (compute_node, host add)",
    "host:disable": "disable or enable a host for scheduling",
    "host:force_down": "force a host down or up",
    "host:delete": "delete a compute host (its service, node and resource provider)",
    "host:heartbeat": "record a host's contact (heartbeat)",
    "host:list": "list hosts with their usage and state",
    "host:import": "turn guests on a host that novakit did not create into servers with claims",
    "host:show": "see which host and node a server is on, and the scheduler's per-host explanation",
    "host:traits": "set or remove a host's custom traits (CUSTOM_*)",
    "aggregate:create": "create a host aggregate (or availability zone)",
    "aggregate:update": "rename an aggregate, set or unset its zone and metadata",
    "aggregate:delete": "delete an empty host aggregate",
    "aggregate:list": "list and show host aggregates with their hosts",
    "aggregate:host": "add a host to an aggregate or remove it",
    "availability_zone:detail": "list availability zones with their hosts (--long)",
    "server:forced_host": "create a server on a named host (availability_zone zone:host or zone::node)",
    "flavor:create": "create a flavor",
    "flavor:delete": "delete a flavor",
    "flavor:list_private": "list and show private flavors (Nova's flavors without public access)",
    "flavor:extra_specs": "set and unset a flavor's extra specs (openstack flavor set/unset --property)",
    "flavor:access": "list, give and take away projects' access to a private flavor (openstack flavor "
    "set/unset --project)",
    "image:create": "register an image",
    "image:delete": "delete another project's image (an image's owner deletes its own)",
    "image:deactivate": "deactivate an image or reactivate it (Glance's deactivate, reactivate)",
    "image:publicize": "make an image public (Glance's publicize_image)",
    # A network is a libvirt network or bridge on the hosts: the fleet's, as Neutron's provider networks.
    "network:create": "create a network or a subnet (a libvirt network or bridge of the hosts)",
    "network:delete": "delete a network or a subnet",
    "network:update": "rename a network or a subnet, share or unshare a network, set a subnet's DNS servers",
    "security_group:project": "create a security group in another project (Neutron's admin)",
    "security_group:delete_default": "delete a project's default security group (Neutron lets only an admin)",
    "quota:update": "set a project's quota",
    "heal": "compare hosts with the database and correct it",
    "db:upgrade": "create or upgrade the database schema (the db module, db_upgrade.yml)",
    "identity:token_of_another_user": "validate, check or revoke another user's token (Keystone's "
    "identity:validate_token for an admin)",
    "identity:bootstrap": "create the admin user, project, roles and service catalog (keystone-manage "
    "bootstrap's part)",
    # The identity API (Keystone's identity:* rules, an admin's here).
    "identity:create_user": "create a user (openstack user create)",
    "identity:list_users": "list users (openstack user list)",
    "identity:get_user": "show a user (openstack user show)",
    "identity:update_user": "rename, enable, disable a user or set its password (openstack user set)",
    "identity:delete_user": "delete a user, its role assignments and application credentials",
    "identity:create_project": "create a project (openstack project create)",
    "identity:list_projects": "list projects (openstack project list)",
    "identity:get_project": "show a project (openstack project show)",
    "identity:delete_project": "delete a project, its role assignments and application credentials",
    "identity:list_roles": "list and show roles (openstack role list)",
    "identity:create_grant": "give a user a role on a project (openstack role add)",
    "identity:revoke_grant": "take a user's role on a project away (openstack role remove)",
    "identity:list_role_assignments": "list and check role assignments (openstack role assignment list)",
    "identity:application_credential_of_another_user": "list, show and delete another user's "
    "application credentials (anyone may its own)",
    "cell:create": "map a cell to its database, enable or disable it",
    "cell:list": "list the cells with their databases",
    "cell:delete": "unmap an empty cell",
    "servers:all_projects": "list the servers of every project",
    "server:migrate": "move a server to another host (cold migrate, live migrate, evacuate)",
    "migration:list": "list the migrations of servers between hosts",
    "migration:abort": "abort a live migration under way (Nova's os_compute_api:servers:migrations:delete)",
    # Records of every project and what only the operator may read or override.
    "project:any": "find, show and act on any project's servers, volumes, ports and server groups "
    "(anyone else finds its own project's only: ``scope``)",
    "server:lock_override": "act on a server its owner locked, and unlock one an admin locked "
    "(Nova's unlock_override)",
    # Key pairs are a user's (Nova's os-keypairs ``user_id``): an admin may act on anyone's.
    "keypair:any_user": "list, show, create and delete another user's key pairs (``user_id``, --user)",
    # The Placement API (``/placement``): admin for everything, as Placement's own policy defaults.
    "placement:read": "read resource providers, their inventories, usages, traits, aggregates, "
    "allocations, allocation candidates and projects' usages (the Placement API)",
    "placement:allocations:update": "set or delete a consumer's allocations (Placement's PUT and "
    "DELETE /allocations/{consumer_uuid})",
    "server:fault_details": "see a fault's host, details and traceback, the scheduler's reasons "
    "behind 'No valid host was found.', and a host's words when a console log fails",
}


def authorize(ctx: RequestContext, operation: str) -> None:
    """Raise ``PolicyNotAuthorized`` unless ``ctx`` may do ``operation``."""
    if operation not in ADMIN_ONLY:
        raise KeyError(f"{operation!r} is not a policy rule (see novakit.policy.ADMIN_ONLY)")
    if not ctx.is_admin:
        raise exceptions.PolicyNotAuthorized(action=operation)


def allowed(ctx: RequestContext, operation: str) -> bool:
    """Whether ``ctx`` may do ``operation`` (for what a view shows, where refusing would be wrong)."""
    if operation not in ADMIN_ONLY:
        raise KeyError(f"{operation!r} is not a policy rule (see novakit.policy.ADMIN_ONLY)")
    return ctx.is_admin


def scope(ctx: RequestContext, stmt: _Stmt, project_column: Any, project_id: str | None = None) -> _Stmt:
    """``stmt`` limited to the rows ``ctx`` may see: "a member sees only its own project".

    ``project_column`` is the project id column of the rows (``Instance.project_id``, ...).
    A caller allowed ``project:any`` (an admin) sees every project's rows; anyone else its
    own project's only, so that another project's row looks like one that does not exist.
    ``project_id``, when given, narrows to that project for anyone (a filter the caller asked
    for, or the caller's own project first).
    """
    if project_id is not None:
        return stmt.where(project_column == project_id)
    if allowed(ctx, "project:any"):
        return stmt
    return stmt.where(project_column == ctx.project_id)


def scope_shared(ctx: RequestContext, stmt: _Stmt, project_column: Any, shared_column: Any) -> _Stmt:
    """``scope`` for what a project may share with every other (Neutron's shared networks): a
    member sees its own project's rows and the shared ones; an admin (``project:any``) all."""
    if allowed(ctx, "project:any"):
        return stmt
    return stmt.where((project_column == ctx.project_id) | shared_column.is_(True))


def project_filter(ctx: RequestContext, asked: str | None = None) -> str | None:
    """The project a listing is limited to: the one asked for, else none for a caller allowed
    ``project:any``, else the caller's own (``scope`` for callers that build no statement)."""
    if asked is not None:
        return asked
    return None if allowed(ctx, "project:any") else ctx.project_id
