"""The verbs written once for every noun (``novakit.cli.verbs``) and the printing decorators
(``output.shows``/``output.lists``): what a user of a command built with them sees."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from novakit import exceptions
from novakit.cli import output
from novakit.cli.base import group
from novakit.cli.output import Col
from novakit.cli.verbs import Noun

FIELDS = [Col("ID", "id"), Col("Name", "name")]
RECORDS = {"w1": {"id": "w1", "name": "first"}}


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    """A root with one noun, ``widget``, kept by a library module made for the test."""
    library = types.ModuleType("widgets_for_test")

    def show(ref: str) -> dict[str, Any]:
        if ref not in RECORDS:
            raise exceptions.NotFound(f"Widget {ref} could not be found.")
        return RECORDS[ref]

    library.show = show  # type: ignore[attr-defined]
    library.delete = lambda ref: show(ref)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "widgets_for_test", library)

    root = typer.Typer()
    widget_app = group("Widgets.", root, "widget")
    noun = Noun(widget_app, "widget", FIELDS, "widgets_for_test", "widget_ref")

    @widget_app.command("create")
    @output.shows(FIELDS, "widget {name}", failed=lambda w: w["name"] == "broken")
    def create(name: str = typer.Argument(..., help="its name")) -> dict[str, Any]:
        """Make a widget."""
        return {"id": "w2", "name": name}

    @widget_app.command("list")
    @output.lists(FIELDS, "widgets")
    def widget_list(prefix: str = typer.Option("", help="names starting so")) -> list[dict[str, Any]]:
        """The widgets."""
        return [w for w in RECORDS.values() if w["name"].startswith(prefix)]

    noun.show("One widget.", lambda lib, ref: lib.show(ref))
    noun.delete("Delete a widget.", lambda lib, ref: lib.delete(ref), lambda gone, _ref: gone["name"])
    return root


def run(app: typer.Typer, *args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_show_names_its_argument_as_declared_and_takes_the_output_options(app: typer.Typer) -> None:
    helped = run(app, "widget", "show", "--help")
    assert helped.exit_code == 0
    assert "widget_ref" in helped.output and "One widget." in helped.output
    assert "--format" in helped.output and "--column" in helped.output
    missing = run(app, "widget", "show")
    assert missing.exit_code == 2 and "Missing argument 'widget_ref'" in missing.output
    shown = run(app, "widget", "show", "w1", "-f", "json")
    assert shown.exit_code == 0 and json.loads(shown.output) == RECORDS["w1"]
    table = run(app, "widget", "show", "w1", "-c", "Name")
    assert "widget first" in table.output and "first" in table.output and "w1" not in table.output


def test_delete_says_what_is_gone_and_a_library_error_is_one_line(app: typer.Typer) -> None:
    gone = run(app, "widget", "delete", "w1")
    assert gone.exit_code == 0 and gone.output.strip() == "widget first deleted"
    missing = run(app, "widget", "delete", "nope")
    assert missing.exit_code == 1 and "Widget nope could not be found." in missing.output


def test_a_bad_column_is_refused_before_the_command_acts(app: typer.Typer) -> None:
    refused = run(app, "widget", "create", "w", "-c", "Colour")
    assert refused.exit_code == 1 and "'Colour' is not a column here" in refused.output


def test_a_record_that_tells_of_a_failure_is_shown_then_exits_1(app: typer.Typer) -> None:
    made = run(app, "widget", "create", "broken", "-f", "value")
    assert made.exit_code == 1 and made.output.split() == ["w2", "broken"]


def test_list_keeps_the_command_s_own_options_before_the_output_ones(app: typer.Typer) -> None:
    listed = run(app, "widget", "list", "--prefix", "fi", "-f", "value")
    assert listed.exit_code == 0 and listed.output == "w1 first\n"
    assert run(app, "widget", "list", "--prefix", "zz", "-f", "json").output.strip() == "[]"
