"""Host maintenance: empty a host of its servers, each moved the best way it can be.

``drain_host`` disables the host (so nothing new lands on it), then moves every server on
it through ``API.act``, as a user of the API would, one after the other:

* an active or paused server live, unless ``live`` is False; when a live migration fails and
  ``live`` is None (the default, "live where possible"), it is moved cold instead;
* a stopped server cold (``migrate``), and every cold move is confirmed at once: a drain is
  maintenance, nobody waits to verify a resize;
* a server that cannot move now (building, in error, rescued, suspended, shelved, with a task
  running, waiting for its own resize confirm) is skipped, with the reason.

The scheduler places each server as a boot would (its server group, its networks, capacity),
so a server that fits nowhere fails with the scheduler's explanation. The answer is a row per
server: moved (from, to, how) or failed or skipped (why), so the moves run in the caller's
thread even in ``novakit serve`` (``API.inline``). ``playbooks/host_maintenance.yml`` and
``novakit host drain`` are this function, in their process or (with a cloud) in the service's.
"""

from __future__ import annotations

from typing import Any

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.fleet import hosts

#: statuses whose servers a drain moves
_LIVE = ("ACTIVE", "PAUSED")
_COLD = ("ACTIVE", "SHUTOFF")


def drain_host(
    api: Any,
    ctx: RequestContext,
    host: str,
    *,
    live: bool | None = None,
    reason: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Disable ``host`` and move its servers away (see the module docstring). ``live``: True only
    live, False only cold, None live where possible. ``dry_run``: the API's dry run of each move
    (what a real run would refuse), nothing disabled or moved."""
    policy.authorize(ctx, "host:disable")
    policy.authorize(ctx, "server:migrate")
    hosts.get_node(api.db, host)  # ComputeHostNotFound names it
    api = api.inline()  # each move's end is in the answer: none is handed to a pool
    if not dry_run:
        hosts.set_disabled(
            api.db,
            ctx,
            host,
            True,
            reason or "draining for maintenance (novakit host drain)",
            keep_reason=reason is None,
        )
    servers = sorted(api.list(ctx, host=host, all_projects=True), key=lambda s: s["name"])
    rows = [_move_one(api, ctx, host, s, live, dry_run) for s in servers]
    return {"host": host, "disabled": not dry_run, "dry_run": dry_run, "servers": rows}


def evacuate_host(api: Any, ctx: RequestContext, host: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Rebuild every server of a host that is down on other hosts (Nova's host-evacuate). The
    host is disabled too, so that it takes nothing new when it comes back before its repair.
    A server that cannot be evacuated (shelved, with a task, with volumes) is failed or
    skipped with the reason; the API's own check refuses all of them while the host is up."""
    policy.authorize(ctx, "host:disable")
    policy.authorize(ctx, "server:migrate")
    hosts.get_node(api.db, host)
    api = api.inline()
    if not dry_run:
        hosts.set_disabled(api.db, ctx, host, True, "evacuated: its host is down (novakit)", keep_reason=True)
    rows = []
    for server in sorted(api.list(ctx, host=host, all_projects=True), key=lambda s: s["name"]):
        row = _row(server, host, "evacuate")
        if row["reason"] is None:
            try:
                out = api.act(ctx, server["id"], "evacuate", dry_run=dry_run)
                if dry_run:
                    row.update(result="would move", to=out.would_move_to)
                elif out.error is not None:
                    row.update(result="failed", reason=out.error)
                else:
                    now = api.get(ctx, server["id"])
                    row.update(result="moved", to=now.get("host"), status=now["status"])
            except exceptions.NovakitError as exc:
                row.update(result="failed", reason=exc.format_message())
        rows.append(row)
    return {"host": host, "disabled": not dry_run, "dry_run": dry_run, "servers": rows}


def _row(server: dict[str, Any], host: str, how: str | None) -> dict[str, Any]:
    """A server's row of a drain or an evacuation, skipped until it moves: skipped with the
    reason when a task is running on it."""
    task = server.get("task_state")
    return {
        "id": server["id"],
        "name": server["name"],
        "status": server["status"],
        "from": host,
        "to": None,
        "how": how,
        "result": "skipped",
        "reason": f"a task is running ({task})" if task else None,
    }


def _move_one(
    api: Any, ctx: RequestContext, host: str, server: dict[str, Any], live: bool | None, dry_run: bool
) -> dict[str, Any]:
    row = _row(server, host, None)
    status = server["status"]
    if row["reason"] is not None:
        return row
    ways: list[str] = []
    if live is not False and status in _LIVE:
        ways.append("live")
    if live is not True and status in _COLD:
        ways.append("cold")
    if not ways:
        row["reason"] = f"a server in status {status} cannot be moved" + (
            " live" if live is True and status in _COLD else ""
        )
        return row
    failures: list[str] = []
    for how in ways:
        action = "live_migrate" if how == "live" else "migrate"
        try:
            out = api.act(ctx, server["id"], action, dry_run=dry_run)
        except exceptions.NovakitError as exc:
            failures.append(f"{how}: {exc.format_message()}")
            continue
        if dry_run:
            row.update(result="would move", how=how, to=out.would_move_to)
            return row
        if out.error is not None:  # failed on a host and rolled back
            failures.append(f"{how}: {out.error}")
            continue
        now = api.get(ctx, server["id"])
        if now["status"] == "VERIFY_RESIZE":
            api.act(ctx, server["id"], "confirm_resize")
            now = api.get(ctx, server["id"])
        row.update(result="moved", how=how, to=now.get("host"), status=now["status"])
        return row
    row.update(result="failed", reason="; ".join(failures))
    return row
