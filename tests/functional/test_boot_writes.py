"""Where a boot's writes land and what a process killed between them leaves behind."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from novakit.compute import rounds
from novakit.conductor import builds
from novakit.context import RequestContext
from novakit.db.models import InstanceMapping
from tests.functional.cloud import HOSTS, Cloud


class Killed(BaseException):
    """The process stops here (nothing after it runs, no handler catches it)."""


def _kill(*_args: object, **_kwargs: object) -> None:
    raise Killed


def test_a_boot_killed_right_after_its_claim_leaves_its_server_placed_in_its_cell(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell is the API database (the embedded default): the server's mapping names the cell
    in the claim's own transaction, so a process killed the moment the claim committed (before
    any move or host call) leaves a server both placed on its host and mapped to its cell."""
    monkeypatch.setattr(builds, "move_to_cell", _kill)
    monkeypatch.setattr(rounds, "run", _kill)
    with pytest.raises(Killed):
        cloud.api.create(ctx, {"name": "cut", "flavor": "m1.small", "image": "tiny"})
    monkeypatch.undo()
    with cloud.db.reader() as session:
        cell_id = session.execute(
            select(InstanceMapping.cell_id).where(InstanceMapping.display_name == "cut")
        ).scalar_one()
    assert cell_id == cloud.db.cells.get("cell1").id
    server = cloud.api.get(cloud.admin, "cut")
    assert (server["status"], server["host"] in HOSTS) == ("BUILD", True)
