"""The ``novakit`` command assembled: each noun's module registers its commands on the app when
imported (package docstring: ``novakit.cli``)."""

from __future__ import annotations

# Each module registers its commands on the app when imported: importing them is what adds them,
# in this order (the order of the groups in --help).
from novakit.cli import (  # noqa: F401
    aggregates,
    catalog,
    cells,
    groups,
    hosts,
    identity,
    interfaces,
    keypairs,
    moves,
    networks,
    ops,
    quotas,
    security_groups,
    serve,
    servers,
    volumes,
)
from novakit.cli.base import app

__all__ = ["app", "main"]


def main() -> None:
    app()


if __name__ == "__main__":
    main()
