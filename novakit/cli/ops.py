"""``novakit db``, ``states``, ``heal`` and ``boot``: the fleet as a whole."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from novakit.cli import output
from novakit.cli.base import app, conf, console, ctx, db, db_app, err_console, fail, guard, playbook_env
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or upgrade the schema to the newest revision: the API database, then every cell's.

    A database made before cells becomes the API database and cell1 at once, with cell0 made
    beside it; its servers, actions and claims stay as they are.
    """
    from novakit import policy
    from novakit.cells.manage import upgrade_all

    guard(lambda: policy.authorize(ctx(), "db:upgrade"))
    database = db()
    done = guard(lambda: upgrade_all(database))
    console.print(f"database at revision {database.current_revision()}")
    for name, revision in done.items():
        if name != "(api)":
            console.print(f"cell {name}: {revision}", highlight=False)


@app.command("states")
def states_table() -> None:
    """Print the instance state table (actions, allowed states, where they end)."""
    from novakit.compute.states import state_table_markdown

    sys.stdout.write(state_table_markdown() + "\n")


CORRECTION_COLUMNS = [
    Col("Kind", "kind"),
    Col("Instance", "instance"),
    Col("Host", "host"),
    Col("Before", "before"),
    Col("After", "after"),
    Col("Applied", lambda c: "yes" if c["applied"] else ("no: " + c["error"] if c.get("error") else "no")),
    Col("Detail", "detail"),
]


@app.command("heal")
def heal_command(
    host: list[str] | None = typer.Option(None, "--host", help="only this host (repeat)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="report what would change, change nothing"),
    destroy_orphans: bool = typer.Option(
        False, "--destroy-orphans", help="destroy guests that no server on their host owns"
    ),
    import_unmanaged: bool = typer.Option(
        False, "--import-unmanaged", help="import guests novakit did not create (as `host import`)"
    ),
    import_project: str | None = typer.Option(
        None, "--import-project", help="whose servers imported guests become (default yours)"
    ),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Make the database agree with the hypervisors (power states, vanished guests, stuck builds, orphans)."""
    from novakit.heal.manager import heal

    report = guard(
        lambda: heal(
            db(),
            conf(),
            hosts=host or None,
            dry_run=dry_run,
            destroy_orphans=destroy_orphans,
            import_unmanaged=import_unmanaged,
            import_project=import_project,
            ctx=ctx(),
        )
    )
    form = guard(lambda: output.chosen(fmt, out))
    if form in (Format.json, Format.yaml) and not column:
        output.dump(report.model_dump(mode="json"), form)
        return
    if form != Format.table or column:
        rows = [c.model_dump(mode="json") for c in report.corrections]
        guard(lambda: output.emit_list(rows, CORRECTION_COLUMNS, form, None, column))
        return
    title = f"heal {report.request_id}" + (" (dry run: nothing changed)" if dry_run else "")
    table = Table(title=title)
    for col in ("kind", "instance", "host", "before", "after", "applied", "detail"):
        table.add_column(col)
    for c in report.corrections:
        applied = "yes" if c.applied else ("no: " + c.error if c.error else "no")
        table.add_row(c.kind, c.instance, output.text(c.host), c.before, c.after, applied, escape(c.detail))
    console.print(table)
    console.print(f"{len(report.corrections)} correction(s) on {len(report.hosts)} host(s)", highlight=False)
    for name, why in sorted(report.unreachable.items()):
        err_console.print(f"host {name} did not answer: {escape(why)}", highlight=False, soft_wrap=True)
    for zone in report.zones_without_enabled_host:
        err_console.print(f"availability zone {zone} has no enabled host that is up", highlight=False)
    for name, why in sorted(report.down_cells.items()):
        err_console.print(
            f"cell {name} did not answer (its servers and hosts were left as they are): {escape(why)}",
            highlight=False,
            soft_wrap=True,
        )


#: how much of the playbook's output a failed `novakit boot` shows
BOOT_FAILURE_LINES = 20


@app.command("boot")
def boot_command(
    name: str,
    flavor: str = typer.Option("m1.small", help="flavor name or id"),
    image: str = typer.Option("tiny", help="image name or id"),
    count: int | None = typer.Option(
        None,
        help="the wanted number of servers NAME-1 ... NAME-N: a re-run with another count adds the "
        "missing ones and deletes those numbered above it (without --count: one server named NAME)",
    ),
    inventory: Path | None = typer.Option(
        None, help="Ansible inventory (default: the fake fleet of local.yml)"
    ),
    user_data: Path | None = typer.Option(None, help="file with cloud-init user data"),
    check: bool = typer.Option(False, "--check", help="check mode: say where they would land"),
    keep_artifacts: bool = typer.Option(
        False,
        "--keep-artifacts",
        help="keep ansible-runner's directory of the run (output, events; never the environment)",
    ),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Boot servers with novakit.cloud.boot through ansible-runner, showing its progress."""
    from novakit import runner

    if user_data is not None and not user_data.is_file():
        fail(f"--user-data: no such file: {user_data}")
    text = user_data.read_text() if user_data is not None else None
    result = _with_progress(
        lambda on_event: runner.boot(
            name,
            flavor=flavor,
            image=image,
            count=count,
            inventory=inventory,
            user_data=text,
            check=check,
            keep_artifacts=keep_artifacts,
            on_event=on_event,
            envvars=playbook_env(),
        )
    )
    servers = result.servers
    form = guard(lambda: output.chosen(fmt, out))
    if form in (Format.json, Format.yaml) and not column:
        output.dump({"ok": result.ok, "request_id": result.request_id, "servers": servers}, form)
    else:
        columns = [Col("ID", "id"), Col("Name", "name"), Col("Status", "status"), Col("Host", "host")]
        columns.append(Col("Networks", "addresses"))
        guard(lambda: output.emit_list(servers, columns, form, None, column, f"request {result.request_id}"))
    if result.artifact_dir is not None:
        err_console.print(
            f"the run's artifacts are in {result.artifact_dir}", highlight=False, soft_wrap=True
        )
    if not result.ok:
        _boot_failed(result)


def _with_progress(run: Callable[[Callable[[dict[str, Any]], None]], Any]) -> Any:
    """``run(on_event)`` with a spinner naming the playbook's current task."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("starting ansible-playbook", total=None)

        def on_event(event: dict[str, Any]) -> None:
            data = event.get("event_data") or {}
            if event.get("event") == "playbook_on_task_start" and data.get("task"):
                progress.update(task, description=escape(str(data["task"])))

        return guard(lambda: run(on_event))


def _boot_failed(result: Any) -> NoReturn:
    """Say why the boot playbook failed (its output's end, when its directory is gone), exit 1."""
    if result.artifact_dir is None:
        # The run's directory is gone: its output's end says which task failed and why.
        tail = "\n".join(result.stdout.rstrip().splitlines()[-BOOT_FAILURE_LINES:])
        err_console.print(escape(tail), highlight=False, soft_wrap=True)
    err_console.print(
        f"ansible-playbook failed (rc {result.rc})"
        + ("" if result.artifact_dir is not None else "; --keep-artifacts keeps the whole run"),
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(1)
