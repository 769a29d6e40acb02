"""How every list and show command prints: ``-f table|json|yaml|value|csv`` and ``-c COLUMN``.

As python-openstackclient's formatters do: a table for people; ``value`` (the
values, space-separated, one row per line, no heading) and ``csv`` for the shell,
and ``shell`` (one record's fields as ``name="value"`` lines to ``eval``);
``json`` and ``yaml`` for programs. ``-c`` (repeatable) keeps the named columns,
by the name the table heads them with (case does not matter) or their key.

``json`` and ``yaml`` without ``-c`` print the whole record as the library gives
it, which is what ``--output json`` (``-o json``), kept as an alias of
``--format``, always printed; with ``-c`` they print the chosen columns, keyed by
their names as shown.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import inspect
import io
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from novakit import exceptions
from novakit.cli.base import console, guard


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    value = "value"
    csv = "csv"
    shell = "shell"


FORMAT = typer.Option(
    None,
    "--format",
    "-f",
    help="output format: table (default), json, yaml, value, csv or shell (one record)",
    show_default=False,
)
OUTPUT = typer.Option(None, "--output", "-o", help="the same as --format (e.g. -o json)", show_default=False)
COLUMN = typer.Option(
    None,
    "--column",
    "-c",
    help="show only this column (repeat for more), named as the table heads it",
    show_default=False,
)

SORT_COLUMN = typer.Option(
    None,
    "--sort-column",
    help="order the rows by this column (repeat for more), named as the table heads it",
    show_default=False,
)
SORT_DESCENDING = typer.Option(
    False, "--sort-descending/--sort-ascending", help="the order of --sort-column (default ascending)"
)


@dataclass(frozen=True)
class Col:
    """A column: its heading, and the record's key or a function of the record."""

    header: str
    get: str | Callable[[dict[str, Any]], Any]

    def value(self, record: dict[str, Any]) -> Any:
        return record.get(self.get) if isinstance(self.get, str) else self.get(record)

    def names(self) -> set[str]:
        keys = {self.header.lower(), self.header.lower().replace(" ", "_")}
        if isinstance(self.get, str):
            keys.add(self.get.lower())
        return keys


def chosen(fmt: Format | None, output: Format | None) -> Format:
    if fmt is not None and output is not None and fmt != output:
        raise exceptions.ValidationError("format", f"--format {fmt} and --output {output} disagree; give one")
    return fmt or output or Format.table


def validated(
    columns: Sequence[Col], fmt: Format | None, output: Format | None, wanted: Sequence[str] | None
) -> Format:
    """The output options checked before a command acts: a command that creates something must
    not do its work and then fail on a misspelt ``-c`` (the work would be done, the exit 1)."""
    select(columns, wanted)
    return chosen(fmt, output)


def select(columns: Sequence[Col], wanted: Sequence[str] | None) -> list[Col]:
    """The columns ``-c`` names: by heading first (``Image``), else by key (``image``)."""
    if not wanted:
        return list(columns)
    out = []
    for name in wanted:
        wanted_name = name.lower()
        match = next((c for c in columns if wanted_name == c.header.lower()), None)
        match = match or next((c for c in columns if wanted_name in c.names()), None)
        if match is None:
            known = ", ".join(c.header for c in columns)
            raise exceptions.ValidationError("column", f"{name!r} is not a column here; columns: {known}")
        out.append(match)
    return out


def sorted_rows(
    rows: list[dict[str, Any]], columns: Sequence[Col], by: Sequence[str] | None, descending: bool = False
) -> list[dict[str, Any]]:
    """``rows`` ordered by the columns ``--sort-column`` names, as openstack's lists order what they
    print (empty values first); the listing's own order breaks ties."""
    if not by:
        return rows
    keys = select(columns, by)

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple((v is not None, text(v)) for v in (c.value(row) for c in keys))

    return sorted(rows, key=key, reverse=descending)


def text(v: Any) -> str:
    """A value as a table cell or a ``value``/``csv`` field shows it."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "-"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) or "-"
    return str(v)


def _plain(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return str(v)


def dump(data: Any, fmt: Format) -> None:
    """``data`` as JSON or YAML on stdout."""
    if fmt == Format.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True))
    else:
        sys.stdout.write(json.dumps(_plain(data), indent=2) + "\n")


def _csv(cols: Sequence[Col], rows: list[dict[str, Any]]) -> None:
    """A header line of ``cols`` and a line per row, every field quoted (openstack's csv)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    writer.writerow([c.header for c in cols])
    for r in rows:
        writer.writerow([text(c.value(r)) for c in cols])
    sys.stdout.write(buffer.getvalue())


Record = dict[str, Any]


def _machine_readable(
    form: Format, cols: Sequence[Col], records: list[Record], wanted: Any, one: bool
) -> bool:
    """``records`` (``one``: a single record's fields) in a format for programs or the shell;
    False when ``form`` is the table, which lists and shows draw differently."""
    if form in (Format.json, Format.yaml):
        picked = [{c.header: c.value(r) for c in cols} for r in records] if wanted else records
        dump(picked[0] if one else picked, form)
    elif form == Format.value:
        if one:
            lines = [text(c.value(records[0])) for c in cols]
        else:
            lines = [" ".join(text(c.value(r)) for c in cols) for r in records]
        sys.stdout.write("".join(line + "\n" for line in lines))
    elif form == Format.csv:
        _csv(cols, records)
    elif form == Format.shell:
        if not one:
            raise exceptions.ValidationError("format", "shell prints one record: use it with a show command")
        for c in cols:
            sys.stdout.write(f"{_shell_name(c.header)}={_shell_quote(text(c.value(records[0])))}\n")
    else:
        return False
    return True


def emit_list(
    rows: list[Record],
    columns: Sequence[Col],
    fmt: Format | None,
    output: Format | None = None,
    wanted: Sequence[str] | None = None,
    title: str | None = None,
) -> None:
    """Rows in the chosen format; ``columns`` are the table's (and what ``-c`` chooses from)."""
    form, cols = chosen(fmt, output), select(columns, wanted)
    if _machine_readable(form, cols, rows, wanted, one=False):
        return
    table = Table(title=title)
    for c in cols:
        # A narrow terminal folds a value over lines rather than cutting it: an id cut short
        # ("611b94b3…") cannot be pasted into the next command.
        table.add_column(c.header, overflow="fold")
    for r in rows:
        table.add_row(*(Text(text(c.value(r))) for c in cols))
    console.print(table)


def emit_show(
    record: Record,
    fields: Sequence[Col],
    fmt: Format | None,
    output: Format | None = None,
    wanted: Sequence[str] | None = None,
    title: str | None = None,
) -> None:
    """One record: a Field/Value table, or its fields in the chosen format."""
    form, cols = chosen(fmt, output), select(fields, wanted)
    if _machine_readable(form, cols, [record], wanted, one=True):
        return
    table = Table(title=title)
    table.add_column("Field")
    table.add_column("Value", overflow="fold")
    for c in cols:
        table.add_row(c.header, Text(text(c.value(record))))
    console.print(table)


# --- the commands that print: the output options and the printing, once ------------------------

#: ``-f``/``-o``/``-c`` as the last parameters of a command that prints records
_OUTPUT_PARAMETERS = [
    inspect.Parameter("fmt", inspect.Parameter.KEYWORD_ONLY, default=FORMAT, annotation=Format | None),
    inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=OUTPUT, annotation=Format | None),
    inspect.Parameter("column", inspect.Parameter.KEYWORD_ONLY, default=COLUMN, annotation=list[str] | None),
]

Title = str | Callable[[Record], str] | None


def _title(title: Title, record: Record) -> str | None:
    """A table's title: a template filled from the record (``"network {name}"``), or a function of it."""
    if title is None:
        return None
    return title(record) if callable(title) else title.format_map(record)


def _printing(
    fetch: Callable[..., Any], emit: Callable[[Any, Format | None, Format | None, list[str] | None], None]
) -> Callable[..., None]:
    """``fetch`` as a typer command that also takes the output options and prints what it returns.

    typer reads a command's parameters from its signature: the command's is ``fetch``'s own
    followed by ``--format``, ``--output`` and ``--column``, so that every printing command takes
    them alike without writing them out.
    """
    signature = inspect.signature(fetch, eval_str=True)
    parameters = [*signature.parameters.values(), *_OUTPUT_PARAMETERS]

    @functools.wraps(fetch)
    def command(
        *args: Any,
        fmt: Format | None = None,
        out: Format | None = None,
        column: list[str] | None = None,
        **kw: Any,
    ) -> None:
        emit(lambda: fetch(*args, **kw), fmt, out, column)

    command.__signature__ = signature.replace(parameters=parameters, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters}
    return command


def shows(
    fields: Sequence[Col] | Callable[[], Sequence[Col]],
    title: Title = None,
    failed: Callable[[Record], bool] | None = None,
) -> Callable[[Callable[..., Record | None]], Callable[..., None]]:
    """A command that makes or reads one record and shows it (``emit_show``) with ``fields``
    (or those a function gives, when they depend on the caller).

    The output options are checked before the command acts: one that creates something must
    not do its work and then fail on a misspelt ``-c`` (the work would be done, the exit 1).
    ``failed``: the record tells of a failure (a volume in error): shown, then exit status 1.
    """

    def decorate(fetch: Callable[..., Record | None]) -> Callable[..., None]:
        def emit(
            call: Callable[[], Record | None], fmt: Format | None, out: Format | None, column: Any
        ) -> None:
            cols = fields() if callable(fields) else fields
            guard(lambda: validated(cols, fmt, out, column))
            record = guard(call)
            assert record is not None
            guard(lambda: emit_show(record, cols, fmt, out, column, _title(title, record)))
            if failed is not None and failed(record):
                raise typer.Exit(1)

        return _printing(fetch, emit)

    return decorate


def lists(columns: Sequence[Col], title: str) -> Callable[[Callable[..., list[Record]]], Callable[..., None]]:
    """A command that lists records and prints them (``emit_list``) under ``title``."""

    def decorate(fetch: Callable[..., list[Record]]) -> Callable[..., None]:
        def emit(
            call: Callable[[], list[Record]], fmt: Format | None, out: Format | None, column: Any
        ) -> None:
            rows = guard(call)
            guard(lambda: emit_list(rows, columns, fmt, out, column, title))

        return _printing(fetch, emit)

    return decorate


def _shell_name(header: str) -> str:
    """A heading as a shell variable name, as openstack's shell format makes it (``OS-EXT-STS:vm_state``
    -> ``os_ext_sts_vm_state``)."""
    return "".join(ch if ch.isalnum() else "_" for ch in header.lower())


def _shell_quote(value: str) -> str:
    """A value in double quotes that ``eval`` gives back unchanged."""
    escaped = "".join("\\" + ch if ch in '"\\$`' else ch for ch in value)
    return f'"{escaped}"'
