"""Ask every cell, gather the answers (Nova's ``scatter_gather_cells``).

The cells are asked side by side, one thread each; a cell whose database does not
answer is reported in ``down`` with the reason, and the others' answers still come back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.cells.registry import Cell

if TYPE_CHECKING:
    from novakit.db.engine import Database

T = TypeVar("T")


@dataclass
class Gathered(Generic[T]):
    results: dict[Cell, T] = field(default_factory=dict)
    down: dict[Cell, str] = field(default_factory=dict)


def scatter(
    db: Database, fn: Callable[[Cell, Session], T], cells: Sequence[Cell] | None = None
) -> Gathered[T]:
    """``fn(cell, session)`` in a reader transaction of each cell (every listed one by default)."""
    targets = list(cells) if cells is not None else db.cells.listed()
    out: Gathered[T] = Gathered()

    def one(cell: Cell) -> T:
        with db.target_cell(cell), db.reader() as session:
            return fn(cell, session)

    def gather(cell: Cell, answer: Callable[[], T]) -> None:
        try:
            out.results[cell] = answer()
        except exceptions.CellDown as exc:
            out.down[cell] = str(exc.kwargs.get("reason") or exc)

    if len(targets) <= 1:
        for cell in targets:
            gather(cell, lambda cell=cell: one(cell))  # type: ignore[misc]
        return out
    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        futures = [(cell, pool.submit(one, cell)) for cell in targets]
        for cell, fut in futures:
            gather(cell, fut.result)
    return out
