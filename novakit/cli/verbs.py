"""The verbs every noun has and that differ only in the noun: ``show`` and ``delete``.

openstack's ``show NAME`` prints one record and ``delete NAME`` says it is gone, for networks,
subnets, ports, security groups, cells, flavors, images and the rest alike. A noun is declared
once (its group, what it is called, the argument that names one, its fields, the library module
that keeps it); each verb is then one line naming the library call and the command's help. The
verbs whose options differ per noun (``create``, ``list``) stay functions, printed by
``output.shows`` and ``output.lists``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import typer

from novakit.cli import output
from novakit.cli.base import console, guard
from novakit.cli.output import Col, Record, Title


class Noun:
    """A resource on the command line: its group, what one is called, its fields, its library.

    ``parameter`` is the name of the argument that names one (default: the noun's name): typer
    shows it in the help and in its errors (``Missing argument 'network'``), so each command
    keeps the one it had; ``argument`` is that argument (default: "NOUN name or id").
    ``library`` is imported when a command runs, not when the command line starts.
    """

    def __init__(
        self,
        app: typer.Typer,
        name: str,
        fields: Sequence[Col],
        library: str,
        parameter: str | None = None,
        argument: Any = None,
    ) -> None:
        self.app, self.name, self.fields, self.library = app, name, fields, library
        self.parameter = parameter or name
        self.argument = argument or typer.Argument(..., help=f"{name} name or id")

    def _taking_one(self, run: Callable[[ModuleType, str], Any]) -> Callable[..., Any]:
        """``run(library, ref)`` as a function of one parameter named and declared as the noun's."""

        def command(**given: Any) -> Any:
            return run(importlib.import_module(self.library), given[self.parameter])

        one = inspect.Parameter(
            self.parameter, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=self.argument, annotation=str
        )
        command.__signature__ = inspect.Signature([one])  # type: ignore[attr-defined]
        command.__annotations__ = {self.parameter: str}
        return command

    def show(
        self, help_text: str, read: Callable[[ModuleType, str], Record], title: Title = "{noun} {name}"
    ) -> None:
        """``NOUN show REF``: the record ``read`` finds, shown with the noun's fields under
        ``title``: a template of the record's fields and ``{noun}``, a function of the record, or None."""
        if isinstance(title, str):
            title = title.replace("{noun}", self.name)
        self.app.command("show", help=help_text)(output.shows(self.fields, title)(self._taking_one(read)))

    def delete(
        self,
        help_text: str,
        remove: Callable[[ModuleType, str], Any],
        gone: Callable[[Any, str], str] | None = None,
    ) -> None:
        """``NOUN delete REF``: ``remove`` it, then one line saying so; ``gone(result, ref)`` names
        what was deleted when the library's answer names it better than the argument did."""

        def run(library: ModuleType, ref: str) -> None:
            result = guard(lambda: remove(library, ref))
            console.print(f"{self.name} {gone(result, ref) if gone else ref} deleted", highlight=False)

        self.app.command("delete", help=help_text)(self._taking_one(run))
