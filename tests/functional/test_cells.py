"""Cells v2: two cells on two databases (two SQLite files; two PostgreSQL servers), cell0.

The API database is the test's usual one and cell1 at once (as the embedded default is);
cell2 is a database of its own: a second SQLite file, or a database on a second PostgreSQL
server that ``tests/run.sh`` starts (``NOVAKIT_TEST_PG2_URL``) and that the down-cell test
stops and starts again.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from typer.testing import CliRunner

from novakit import exceptions
from novakit.catalog import flavors
from novakit.cells import manage
from novakit.cli.main import app
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Base, InstanceMapping
from tests.conftest import need_real
from tests.functional.cloud import Cloud, make_cloud

PG2_URL = os.environ.get("NOVAKIT_TEST_PG2_URL", "")
ROOT = Path(__file__).resolve().parents[2]


def _pg2(action: str) -> None:
    env = {
        **os.environ,
        "NOVAKIT_PG_INSTANCE": "2",
        "NOVAKIT_PG_PORT": PG2_URL.rsplit(":", 1)[1].split("/")[0],
    }
    subprocess.run(
        [str(ROOT / "tests/services/postgres.sh"), action], check=True, env=env, capture_output=True
    )


def _empty_pg2() -> None:
    db = Database(PG2_URL, kind="cell", auto_upgrade=False)
    with db.engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(text(f'DROP TABLE IF EXISTS "{table.name}" CASCADE'))
        conn.execute(text("DROP TABLE IF EXISTS alembic_version_cell"))
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    db.dispose()


@pytest.fixture
def cell2_url(db_url: str, tmp_path: Path) -> str:
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'cell2.db'}"
    if not PG2_URL:
        need_real("NOVAKIT_TEST_PG2_URL is not set (tests/run.sh starts a second PostgreSQL server)")
    _empty_pg2()
    return PG2_URL


@pytest.fixture
def cells(db: Database, tmp_path: Path, cell2_url: str) -> Iterator[Cloud]:
    """compute-1 and compute-2 in cell1 (the API database), compute-3 in cell2."""
    cloud = make_cloud(db, tmp_path)
    manage.create_cell(db, cloud.admin, "cell2", cell2_url, migrate=True)
    with db.writer() as session:
        session.execute(text("DELETE FROM host_mappings WHERE host = 'compute-3'"))
    manage.discover_hosts(db, cloud.admin, "cell2")
    yield cloud


def cell_of(cloud: Cloud, uuid: str) -> str:
    return cloud.db.cells.of_instance(uuid).name


def rows_in(cloud: Cloud, cell: str) -> set[str]:
    """The instance uuids a cell's own database holds."""
    cell_db = cloud.db.cells.database(cloud.db.cells.get(cell))
    with cell_db.engine.connect() as conn:
        return set(conn.execute(text("SELECT uuid FROM instances")).scalars())


def test_servers_live_in_their_hosts_cell_and_every_read_finds_them(
    cells: Cloud, ctx: RequestContext
) -> None:
    cloud = cells
    # compute-3 (cell2) has the most room: the spreading weigher sends the first there.
    made = cloud.api.create(ctx, {"name": "web", "flavor": "m1.large", "image": "tiny", "max_count": 6})
    assert [s["status"] for s in made] == ["ACTIVE"] * 6
    by_cell: dict[str, set[str]] = {}
    for s in made:
        shown = cloud.api.get(cloud.admin, s["id"])
        by_cell.setdefault(cell_of(cloud, s["id"]), set()).add(shown["host"])
    assert by_cell["cell2"] == {"compute-3"}
    assert by_cell["cell1"] <= {"compute-1", "compute-2"} and by_cell["cell1"]
    # Each server's row is in its own cell's database, and only there.
    in2 = rows_in(cloud, "cell2")
    assert {s["id"] for s in made if cell_of(cloud, s["id"]) == "cell2"} == in2
    assert not in2 & rows_in(cloud, "cell1")
    # Every read finds them wherever they are: list, show by name, the audit trail.
    listed = cloud.api.list_servers(ctx)
    # Servers of one request share their creation time; between cells such a tie is broken by
    # cell order (a stable order for pages), not by name.
    assert sorted(s["name"] for s in listed) == [f"web-{i}" for i in range(1, 7)]
    far = next(s for s in made if cell_of(cloud, s["id"]) == "cell2")
    assert cloud.api.get(ctx, far["name"])["id"] == far["id"]
    events = cloud.api.list_actions(ctx, far["name"])
    assert [a["action"] for a in events] == ["create"]
    assert [e["result"] for e in events[0]["events"]][-1] == "Success"
    # Names are the project's across cells: a second web-1 is refused whichever cell it would go to.
    with pytest.raises(exceptions.DuplicateName):
        cloud.api.create(ctx, {"name": far["name"], "flavor": "m1.small", "image": "tiny"})


def test_every_lifecycle_action_and_delete_reach_a_server_in_another_cell(
    cells: Cloud, ctx: RequestContext
) -> None:
    cloud = cells
    made = cloud.api.create(ctx, {"name": "app", "flavor": "m1.large", "image": "tiny", "max_count": 8})
    far = next(s["name"] for s in made if cell_of(cloud, s["id"]) == "cell2")
    for action, options, status in [
        ("stop", None, "SHUTOFF"),
        ("start", None, "ACTIVE"),
        ("reboot", {"reboot_type": "HARD"}, "ACTIVE"),
        ("pause", None, "PAUSED"),
        ("unpause", None, "ACTIVE"),
        ("suspend", None, "SUSPENDED"),
        ("resume", None, "ACTIVE"),
        ("rebuild", {"image": "tiny-2"}, "ACTIVE"),
        ("lock", None, "ACTIVE"),
        ("unlock", None, "ACTIVE"),
        ("rename", {"name": "app-far"}, "ACTIVE"),
    ]:
        ref = "app-far" if action != "rename" and far == "app-far" else far
        out = cloud.api.act(ctx, ref, action, options)
        assert out.server is not None and out.server["status"] == status, (action, out.server)
        far = "app-far" if action == "rename" else far
    shown = cloud.api.get(ctx, "app-far")
    assert shown["image_name"] == "tiny-2"
    assert [a["action"] for a in cloud.api.list_actions(ctx, "app-far")][-1] == "rename"
    # The new name is taken in every cell; the old one is free again.
    with pytest.raises(exceptions.DuplicateName):
        cloud.api.act(
            ctx,
            next(s["name"] for s in made if cell_of(cloud, s["id"]) == "cell1"),
            "rename",
            {"name": "app-far"},
        )
    uuid = shown["id"]
    cloud.api.delete(ctx, "app-far")
    with pytest.raises(exceptions.InstanceNotFound):
        cloud.api.get(ctx, "app-far")
    gone = cloud.api.get(ctx, "app-far", deleted=True)
    assert gone["id"] == uuid and gone["vm_state"] == "deleted"
    with cloud.db.reader() as session:
        mapping = session.execute(
            select(InstanceMapping).where(InstanceMapping.instance_uuid == uuid)
        ).scalar_one()
        assert mapping.deleted != 0
        # Its claim is gone from placement, which is global.
        assert not session.execute(
            text("SELECT 1 FROM allocations WHERE consumer_id = :u"), {"u": uuid}
        ).first()


def test_a_server_that_fits_nowhere_goes_to_cell0_with_its_fault(cells: Cloud, ctx: RequestContext) -> None:
    cloud = cells
    flavors.create(cloud.db, cloud.admin, {"name": "huge", "vcpus": 1, "memory_mb": 10**6, "root_gb": 1})
    [server] = cloud.api.create(ctx, {"name": "whale", "flavor": "huge", "image": "tiny"})
    assert server["status"] == "ERROR"
    assert cell_of(cloud, server["id"]) == "cell0"
    assert rows_in(cloud, "cell0") == {server["id"]}
    assert server["id"] not in rows_in(cloud, "cell1") | rows_in(cloud, "cell2")
    shown = cloud.api.get(ctx, "whale")
    assert shown["status"] == "ERROR" and "No valid host" in shown["fault"]["message"]
    assert cloud.api.list_actions(ctx, "whale")[0]["events"][0]["result"] == "Error"
    # It is listed with the others and deleted like them.
    cloud.api.create(ctx, {"name": "minnow", "flavor": "m1.small", "image": "tiny"})
    assert {s["name"] for s in cloud.api.list_servers(ctx)} == {"whale", "minnow"}
    cloud.api.delete(ctx, "whale")
    assert {s["name"] for s in cloud.api.list_servers(ctx)} == {"minnow"}


def test_server_groups_and_quotas_count_every_cell(cells: Cloud, ctx: RequestContext) -> None:
    from novakit import quota
    from novakit.compute import server_groups

    cloud = cells
    server_groups.create(cloud.db, ctx, "spread", "anti-affinity", {})
    made = cloud.api.create(
        ctx, {"name": "g", "flavor": "m1.small", "image": "tiny", "max_count": 3, "server_group": "spread"}
    )
    hosts = {cloud.api.get(cloud.admin, s["id"])["host"] for s in made}
    assert hosts == {"compute-1", "compute-2", "compute-3"}  # one a host, across both cells
    assert {cell_of(cloud, s["id"]) for s in made} == {"cell1", "cell2"}
    [fourth] = cloud.api.create(
        ctx, {"name": "g-4", "flavor": "m1.small", "image": "tiny", "server_group": "spread"}
    )
    assert fourth["status"] == "ERROR" and cell_of(cloud, fourth["id"]) == "cell0"
    # A member that could not be placed stays one, as in Nova, until it is deleted.
    assert server_groups.get(cloud.db, ctx, "spread")["members"] == [*(s["id"] for s in made), fourth["id"]]
    # Quota is counted over every cell: 3 servers in two cells, a limit of 4 leaves room for one.
    quota.set_quota(cloud.db, ctx.project_id, "instances", 4)
    conf = cloud.conf.model_copy(update={"quota": cloud.conf.quota.model_copy(update={"instances": 4})})
    assert quota.get_quota_usage(cloud.db, conf, ctx.project_id)["instances"]["in_use"] == 3
    with pytest.raises(exceptions.OverQuota):
        type(cloud.api)(cloud.db, conf).create(
            ctx, {"name": "q", "flavor": "m1.small", "image": "tiny", "max_count": 2}
        )


def test_listing_pages_through_every_cell_in_one_order(cells: Cloud, ctx: RequestContext) -> None:
    cloud = cells
    made = cloud.api.create(ctx, {"name": "p", "flavor": "m1.large", "image": "tiny", "max_count": 9})
    assert {cell_of(cloud, s["id"]) for s in made} == {"cell1", "cell2"}
    for sort_key, sort_dir in [("created_at", "asc"), ("name", "desc"), ("uuid", "asc")]:
        whole = [s["id"] for s in cloud.api.list_servers(ctx, {"sort_key": sort_key, "sort_dir": sort_dir})]
        assert len(whole) == 9
        paged: list[str] = []
        marker = None
        while True:
            page = cloud.api.list_servers(
                ctx,
                {
                    "sort_key": sort_key,
                    "sort_dir": sort_dir,
                    "limit": 2,
                    **({"marker": marker} if marker else {}),
                },
            )
            if not page:
                break
            paged.extend(s["id"] for s in page)
            marker = page[-1]["id"]
        assert paged == whole, (sort_key, sort_dir)
    with pytest.raises(exceptions.MarkerNotFound):
        cloud.api.list_servers(ctx, {"marker": "00000000-0000-4000-8000-000000000000"})


def _stop_cell2(cloud: Cloud, url: str, tmp_path: Path) -> Any:
    """Make cell2's database unreachable; returns how to bring it back."""
    cloud.db.cells.dispose()  # connections already open would outlive a stopped server
    if url.startswith("sqlite"):
        path = Path(url.split("///", 1)[1])
        hidden = tmp_path / "hidden"
        hidden.mkdir()
        for f in path.parent.glob(path.name + "*"):
            f.rename(hidden / f.name)
        # A file in a directory that is gone cannot be opened: SQLite's "unable to open database file".
        path.parent.joinpath("cell2.db").mkdir()

        def back() -> None:
            path.parent.joinpath("cell2.db").rmdir()
            for f in hidden.iterdir():
                f.rename(path.parent / f.name)
            cloud.db.cells.dispose()

        return back
    _pg2("stop")

    def back_pg() -> None:
        _pg2("start")
        cloud.db.cells.dispose()

    return back_pg


def test_a_down_cell_leaves_the_rest_working(
    cells: Cloud, ctx: RequestContext, cell2_url: str, tmp_path: Path
) -> None:
    from novakit.cells import registry

    cloud = cells
    made = cloud.api.create(ctx, {"name": "d", "flavor": "m1.large", "image": "tiny", "max_count": 8})
    far = [s for s in made if cell_of(cloud, s["id"]) == "cell2"]
    near = [s for s in made if cell_of(cloud, s["id"]) == "cell1"]
    assert far and near
    back = _stop_cell2(cloud, cell2_url, tmp_path)
    try:
        registry.PROBE_SECONDS = 0.0
        servers, down = cloud.api.list_servers_and_down(ctx)
        assert down == ["cell2"]
        by_id = {s["id"]: s for s in servers}
        assert {s["id"] for s in near} | {s["id"] for s in far} == set(by_id)
        assert all(by_id[s["id"]]["status"] == "ACTIVE" for s in near)
        for s in far:
            assert by_id[s["id"]]["status"] == "UNKNOWN" and by_id[s["id"]]["name"] == s["name"]
            shown = cloud.api.get(ctx, s["name"])
            assert shown["status"] == "UNKNOWN" and shown["cell"] == "cell2"
        # New servers go only where a cell answers; the scheduler says why compute-3 was left out.
        more = cloud.api.create(ctx, {"name": "late", "flavor": "m1.small", "image": "tiny", "max_count": 2})
        assert all(s["status"] == "ACTIVE" and cell_of(cloud, s["id"]) == "cell1" for s in more)
        assert "cell2 is down" in cloud.db.cells.unusable_hosts()["compute-3"]
        # The cells list says which one is down.
        listed = {c["name"]: c["status"] for c in manage.list_cells(cloud.db, cloud.admin)}
        assert listed["cell1"] == "up" and listed["cell2"].startswith("down")
        # And so does the command, with no traceback: the list with UNKNOWN, the show of one of them.
        env = {
            "NOVAKIT_DB_URL": cloud.db.url,
            "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
            "NOVAKIT_PROJECT": ctx.project_id,
            "NOVAKIT_USER": ctx.user_id,
            "NOVAKIT_ROLES": "member",
        }
        out = CliRunner().invoke(app, ["server", "list", "-f", "json"], env=env)
        assert out.exit_code == 0 and "cell cell2 did not answer" in out.stderr, out.stderr
        assert {s["name"]: s["status"] for s in json.loads(out.stdout)}[far[0]["name"]] == "UNKNOWN"
        out = CliRunner().invoke(app, ["server", "show", far[0]["name"], "-f", "json"], env=env)
        assert out.exit_code == 0 and json.loads(out.stdout)["status"] == "UNKNOWN", out.stderr
        out = CliRunner().invoke(app, ["server", "stop", far[0]["name"]], env=env)
        assert (
            out.exit_code == 1 and "Cell cell2 is unreachable" in out.stderr and "Traceback" not in out.stderr
        )
    finally:
        back()
        registry.PROBE_SECONDS = 2.0
    servers, down = cloud.api.list_servers_and_down(ctx)
    assert down == [] and all(s["status"] == "ACTIVE" for s in servers) and len(servers) == 10
    assert cloud.api.act(ctx, far[0]["name"], "stop").server["status"] == "SHUTOFF"


def test_a_bad_cell_is_refused_with_what_is_wrong_and_nothing_changes(
    cells: Cloud, tmp_path: Path, db_url: str
) -> None:
    cloud = cells
    admin = cloud.admin
    before = cloud.snapshot()
    missing = tmp_path / "nowhere" / "c.db"
    cases = [
        (f"sqlite:///{missing}", "does not exist"),
        (f"sqlite:///{tmp_path / 'never.db'}", "is not migrated"),
        (cloud.db.url, "is cell cell1's already"),
        ("postgresql+psycopg://novakit:secret@127.0.0.1:1/none", "cannot be reached"),
        ("mysql://x@y/z", "not a supported database"),
    ]
    for url, said in cases:
        with pytest.raises(exceptions.InvalidCell) as err:
            manage.create_cell(cloud.db, admin, "bad", url)
        assert "Cell bad:" in str(err.value) and said in str(err.value), (url, str(err.value))
        assert "secret" not in str(err.value)
    assert not (tmp_path / "never.db").exists()
    # An API database given as a cell's.
    other_api = tmp_path / "other-api.db"
    Database(f"sqlite:///{other_api}").dispose()
    with pytest.raises(exceptions.InvalidCell, match="is an API database"):
        manage.create_cell(cloud.db, admin, "bad", f"sqlite:///{other_api}")
    # A cell with hosts or servers, and cell0, cannot be deleted; a host lives in one cell.
    with pytest.raises(exceptions.CellInUse, match="1 host"):
        manage.delete_cell(cloud.db, admin, "cell2")
    with pytest.raises(exceptions.CellInUse):
        manage.delete_cell(cloud.db, admin, "cell0")
    from novakit.fleet import hosts

    driver_info = cloud.driver_info("compute-3")
    from novakit.virt.driver import load_driver

    drv = load_driver("fake", "compute-3", driver_info["options"])
    with pytest.raises(exceptions.HostMappedElsewhere, match="already mapped to cell cell2, not cell1"):
        hosts.register_host(
            cloud.db, cloud.conf, "compute-3", drv.get_available_resource(), driver_info, cell="cell1"
        )
    assert cloud.snapshot() == before
    # Members may not manage cells.
    member = RequestContext("p", "u", ["member"])
    with pytest.raises(exceptions.PolicyNotAuthorized):
        manage.list_cells(cloud.db, member)


def test_an_empty_cell_is_deleted_and_its_hosts_rediscovered(cells: Cloud) -> None:
    cloud = cells
    with cloud.db.writer() as session:
        session.execute(text("DELETE FROM host_mappings WHERE host = 'compute-3'"))
    assert manage.delete_cell(cloud.db, cloud.admin, "cell2")["deleted"]
    assert [c["name"] for c in manage.list_cells(cloud.db, cloud.admin)] == ["cell0", "cell1"]
    assert manage.discover_hosts(cloud.db, cloud.admin) == ["compute-3"]
    assert cloud.db.cells.of_host("compute-3").name == "cell1"
