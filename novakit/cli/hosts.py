"""``novakit host``: compute hosts (admin only: they are the operator's)."""

from __future__ import annotations

import os
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from novakit.cli import output
from novakit.cli.base import call, conf, console, ctx, db, guard, host_app
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

HOST_COLUMNS = [
    Col("Host", "host"),
    Col("Status", lambda r: r["status"] + (f" ({r['disabled_reason']})" if r["disabled_reason"] else "")),
    Col("State", lambda r: r["state"] + (f" ({r['down_reason']})" if r["down_reason"] else "")),
    Col("Last Contact", lambda r: r["last_contact_at"] or r["last_seen_up"]),
    Col("Instances", "instances"),
    Col("vCPU", lambda r: f"{r['used']['VCPU']}/{r['capacity']['VCPU']}"),
    Col("RAM (MB)", lambda r: f"{r['used']['MEMORY_MB']}/{r['capacity']['MEMORY_MB']}"),
    Col("Disk (GB)", lambda r: f"{r['used']['DISK_GB']}/{r['capacity']['DISK_GB']}"),
]


@host_app.command("add")
def host_add(
    name: str = typer.Argument(..., help="the host's name (its inventory hostname)"),
    driver: str = typer.Option("fake", help="fake or libvirt"),
    uri: str | None = typer.Option(None, help="libvirt URI (libvirt driver)"),
    vcpus: int | None = typer.Option(None, help="fake driver: vCPUs"),
    memory_mb: int | None = typer.Option(None, help="fake driver: RAM in MB"),
    disk_gb: int | None = typer.Option(None, help="fake driver: disk in GB"),
    option: list[str] | None = typer.Option(None, "--option", help="driver option key=value (repeat)"),
    cell: str | None = typer.Option(
        None, "--cell", help="the cell its servers live in (default: the default cell)"
    ),
) -> None:
    """Register a host from what its driver reports (in this process)."""
    from novakit.fleet import hosts
    from novakit.virt.driver import load_driver

    opts: dict[str, Any] = {}
    for item in option or []:
        key, _, text_value = item.partition("=")
        opts[key] = text_value
    given: dict[str, str | int | None] = {
        "uri": uri,
        "vcpus": vcpus,
        "memory_mb": memory_mb,
        "local_gb": disk_gb,
    }
    opts.update({k: v for k, v in given.items() if v is not None})
    if driver == "fake" and "state_dir" not in opts and not os.environ.get("NOVAKIT_FAKE_STATE_DIR"):
        # Where the compute module keeps fake hosts too, so a playbook and the CLI see the same guests.
        opts["state_dir"] = str(conf().state_dir / "fake")
    info = {"driver": driver, "options": opts, "transport": "local"}
    # Refused before the driver starts: starting it makes the host's state (a fake host's file).
    guard(lambda: hosts.check_register(ctx(), name))

    def run() -> dict[str, Any]:
        drv = load_driver(driver, name, opts)
        drv.init_host()
        return hosts.register_host(
            db(), conf(), name, drv.get_available_resource(), info, ctx=ctx(), cell=cell
        )

    result = guard(run)
    console.print(f"host {result['host']} registered (provider {result['provider_uuid']})")


def _bar(used: int, capacity: int, width: int = 20) -> str:
    if capacity <= 0:
        return "-"
    frac = min(1.0, used / capacity)
    filled = round(frac * width)
    colour = "green" if frac < 0.7 else "yellow" if frac < 0.9 else "red"
    return f"[{colour}]{'█' * filled}[/{colour}]{'░' * (width - filled)} {used}/{capacity}"


@host_app.command("list")
def host_list(
    fmt: Format | None = FORMAT, out: Format | None = OUTPUT, column: list[str] | None = COLUMN
) -> None:
    """Hosts with status, state (and why a host is down), last contact and usage bars."""
    from novakit.fleet import hosts

    rows = guard(lambda: call(hosts.list_hosts))
    if column or guard(lambda: output.chosen(fmt, out)) != Format.table:
        guard(lambda: output.emit_list(rows, HOST_COLUMNS, fmt, out, column))
        return
    table = Table(title="compute hosts")
    # The headings of every other format (csv, value, -c): one set of column names.
    for col in HOST_COLUMNS:
        table.add_column(col.header)
    for r in rows:
        table.add_row(
            r["host"],
            escape(HOST_COLUMNS[1].value(r)),
            escape(HOST_COLUMNS[2].value(r)),
            output.text(r["last_contact_at"] or r["last_seen_up"]),
            str(r["instances"]),
            _bar(r["used"]["VCPU"], r["capacity"]["VCPU"]),
            _bar(r["used"]["MEMORY_MB"], r["capacity"]["MEMORY_MB"]),
            _bar(r["used"]["DISK_GB"], r["capacity"]["DISK_GB"]),
        )
    console.print(table)


@host_app.command("heartbeat")
def host_heartbeat(
    host: list[str] | None = typer.Option(None, "--host", help="only this host (repeat)"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Ask each host for its resources and record the contact (run it on a schedule when
    compute.heartbeats is on); a host that does not answer is recorded down, with why."""
    from novakit.fleet import hosts

    rows = guard(lambda: hosts.heartbeat(db(), conf(), host or None, ctx=ctx()))
    if column or guard(lambda: output.chosen(fmt, out)) != Format.table:
        cols = [Col("Host", "host"), Col("Answered", "answered"), Col("State", "state")]
        guard(lambda: output.emit_list(rows, [*cols, Col("Down Reason", "down_reason")], fmt, out, column))
        return
    for r in rows:
        heard = "answered" if r["answered"] else "did not answer"
        why = f" ({escape(r['down_reason'])})" if r["down_reason"] else ""
        console.print(f"host {r['host']} {heard}: {r['state']}{why}", highlight=False)
    from novakit.fleet import aggregates

    for zone in guard(lambda: aggregates.zones_without_enabled_host(db(), conf())):
        console.print(f"availability zone {zone} has no enabled host that is up", highlight=False)


@host_app.command("down")
def host_down(
    name: str = typer.Argument(..., help="the host"),
    reason: str | None = typer.Option(None, help="why (shown by host list)"),
) -> None:
    """Force a host down (admin only): the scheduler leaves it out until `host up`."""
    from novakit.fleet import hosts

    guard(lambda: call(hosts.set_forced_down, name, True, reason))
    console.print(f"host {name} forced down")


@host_app.command("up")
def host_up(name: str = typer.Argument(..., help="the host")) -> None:
    """Lift a forced down (admin only), and a failed contact's mark: the next contact tells again."""
    from novakit.fleet import hosts

    guard(lambda: call(hosts.set_forced_down, name, False))
    console.print(f"host {name} up")


@host_app.command("disable")
def host_disable(
    name: str = typer.Argument(..., help="the host"),
    reason: str | None = typer.Option(None, help="why (shown by host list)"),
) -> None:
    """Take a host out of scheduling (admin only); its servers keep running."""
    from novakit.fleet import hosts

    guard(lambda: call(hosts.set_disabled, name, True, reason))
    console.print(f"host {name} disabled")


@host_app.command("enable")
def host_enable(name: str = typer.Argument(..., help="the host")) -> None:
    """Let the scheduler place servers on a host again (admin only)."""
    from novakit.fleet import hosts

    guard(lambda: call(hosts.set_disabled, name, False))
    console.print(f"host {name} enabled")


@host_app.command("delete")
def host_delete(name: str = typer.Argument(..., help="the host")) -> None:
    """Delete a host: its service, compute node and resource provider (admin only).

    Refused while servers are on it or claims hold its resources; delete those first.
    """
    from novakit.fleet import hosts

    guard(lambda: call(hosts.delete_host, name))
    console.print(f"host {name} deleted")


HOST_FIELDS = [
    Col("host", "host"),
    Col("status", "status"),
    Col("disabled_reason", "disabled_reason"),
    Col("state", "state"),
    Col("down_reason", "down_reason"),
    Col("availability_zone", "availability_zone"),
    Col("aggregates", lambda r: ", ".join(r["aggregates"])),
    Col("traits", lambda r: ", ".join(r["traits"])),
    Col("instances", "instances"),
    Col("capacity", "capacity"),
    Col("used", "used"),
    Col("driver", "driver"),
    Col("cell", "cell"),
    Col("last_contact_at", "last_contact_at"),
]


@host_app.command("show")
@output.shows(HOST_FIELDS, "host {host}")
def host_show(name: str = typer.Argument(..., help="the host")) -> dict[str, Any]:
    """One host: status, state, zone, aggregates, traits (the driver's and CUSTOM_ ones), usage."""
    from novakit.fleet import hosts

    return call(hosts.show_host, name)


TRAIT = typer.Option(..., "--trait", help="a custom trait, CUSTOM_[A-Z0-9_]+ (repeat)")


@host_app.command("set")
def host_set(name: str = typer.Argument(..., help="the host"), trait: list[str] = TRAIT) -> None:
    """Give a host custom traits (admin only): a flavor's trait:CUSTOM_X=required lands there."""
    from novakit.fleet import hosts

    now = guard(lambda: call(hosts.set_traits, name, trait))
    console.print(f"host {name} custom traits: {', '.join(now) or '-'}")


@host_app.command("unset")
def host_unset(name: str = typer.Argument(..., help="the host"), trait: list[str] = TRAIT) -> None:
    """Remove custom traits from a host (admin only); the driver's traits are its own."""
    from novakit.fleet import hosts

    now = guard(lambda: call(hosts.unset_traits, name, trait))
    console.print(f"host {name} custom traits: {', '.join(now) or '-'}")


IMPORT_COLUMNS = [
    Col("Guest", "name"),
    Col("UUID", "uuid"),
    Col("Size", lambda g: f"{g['vcpus']} vCPU, {g['memory_mb']} MB, {g['root_gb']}+{g['ephemeral_gb']} GB"),
    Col("Power", "power_state"),
    Col("Flavor", lambda g: (g["flavor"] or "-") + (" (new)" if g["flavor_created"] else "")),
    Col("Server", "vm_state"),
    Col("Outcome", lambda g: g["outcome"].replace("_", " ") + (f": {g['reason']}" if g["reason"] else "")),
]


@host_app.command("import")
def host_import(
    name: str = typer.Argument(..., help="the compute host"),
    guests: list[str] | None = typer.Argument(None, help="only these guests (names or uuids; default all)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list what would be imported, change nothing"),
    project: str | None = typer.Option(None, "--project", help="whose servers they become (default yours)"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Turn the guests on a host that novakit did not create into servers with claims (admin only)."""
    from novakit.fleet import importer

    report = guard(
        lambda: importer.import_guests(
            db(), conf(), name, ctx=ctx(), project=project, guests=guests or None, dry_run=dry_run
        )
    )
    form = guard(lambda: output.chosen(fmt, out))
    if form in (Format.json, Format.yaml) and not column:
        output.dump(report.model_dump(mode="json"), form)
        return
    rows = [g.model_dump(mode="json") for g in report.guests]
    title = f"import from {name} into project {report.project_id}" + (
        " (dry run: nothing changed)" if dry_run else ""
    )
    guard(lambda: output.emit_list(rows, IMPORT_COLUMNS, form, None, column, title=escape(title)))
    if form == Format.table:
        done = sum(g.outcome in ("imported", "would_import") for g in report.guests)
        verb = "would import" if dry_run else "imported"
        console.print(f"{verb} {done} of {len(report.guests)} unmanaged guest(s)", highlight=False)
