"""``novakit quota``: a project's limits and use, as ``openstack quota show`` and ``quota set``
(Nova's, Cinder's and Neutron's quota sets, which novakit keeps as one).

The library is ``novakit.quota``: anyone reads their own project's quota, an admin any
project's, and only an admin sets one (``show_quota``, ``apply``, both called through
``base.call``, so ``--os-cloud`` runs them in ``novakit serve``).
"""

from __future__ import annotations

from typing import Any

import typer

from novakit.cli import output
from novakit.cli.base import app as root_app
from novakit.cli.base import call, group
from novakit.cli.output import Col

quota_app = group("Quotas: a project's limits and what it holds against them.", root_app, "quota")

COLUMNS = [Col("Resource", "resource"), Col("Limit", "limit"), Col("In Use", "in_use")]
PROJECT = typer.Argument(None, help="the project (default: the caller's own)")


def _rows(usage: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    return [{"resource": name, **counted} for name, counted in usage.items()]


@quota_app.command("show")
@output.lists(COLUMNS, "quota")
def quota_show(project: str | None = PROJECT) -> list[dict[str, Any]]:
    """A project's limits (-1: unlimited) and use; another project's for admins."""
    from novakit import quota

    return _rows(call(quota.show_quota, project))


def _limit(help_text: str) -> Any:
    return typer.Option(None, help=help_text, show_default=False)


@quota_app.command("set")
@output.lists(COLUMNS, "quota")
def quota_set(
    project: str | None = PROJECT,
    instances: int | None = _limit("most servers"),
    cores: int | None = _limit("most vCPUs"),
    ram: int | None = _limit("most RAM (MB)"),
    volumes: int | None = _limit("most volumes"),
    gigabytes: int | None = _limit("most GiB of volumes"),
    key_pairs: int | None = typer.Option(
        None, "--key-pairs", help="most key pairs per user", show_default=False
    ),
    secgroups: int | None = _limit("most security groups"),
    secgroup_rules: int | None = typer.Option(
        None, "--secgroup-rules", help="most security group rules", show_default=False
    ),
    force: bool = typer.Option(False, "--force", help="set a limit below the project's use"),
) -> list[dict[str, Any]]:
    """Set a project's limits (-1: unlimited; admins); one below its use only with --force.
    Options left out keep their limit. Shows the quota as set."""
    from novakit import quota

    given = {
        "instances": instances,
        "cores": cores,
        "ram": ram,
        "volumes": volumes,
        "gigabytes": gigabytes,
        "key_pairs": key_pairs,
        "security_groups": secgroups,
        "security_group_rules": secgroup_rules,
    }
    limits = {name: value for name, value in given.items() if value is not None}
    return _rows(call(quota.apply, project, limits, force=force)["quota"])
