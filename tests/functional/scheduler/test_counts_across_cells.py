"""The scheduler counts every server on a host, whichever database holds it.

``NumInstancesFilter`` and the I/O filter and weigher read how many servers each candidate host
runs. With cells, the servers of cell1 (the API database's own) are counted in the candidate
query itself and those of a cell with a database of its own are asked of that cell: the limit
holds on the hosts of both.
"""

from __future__ import annotations

from pathlib import Path

from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from tests.functional.cloud import HOSTS, Cloud
from tests.functional.test_cells import cell2_url, cells  # noqa: F401  (the fixtures)


def test_one_server_per_host_holds_on_the_hosts_of_both_cells(
    cells: Cloud,  # noqa: F811
    db: Database,
    tmp_path: Path,
    ctx: RequestContext,
) -> None:
    cloud = cells
    conf = load_config(
        db_url=db.url,
        state_dir=tmp_path / "state",
        quota={"instances": -1, "cores": -1, "ram": -1},
        scheduler={
            "enabled_filters": [*cloud.conf.scheduler.enabled_filters, "NumInstancesFilter"],
            "max_instances_per_host": 1,
        },
    )
    api = API(db, conf)

    placed = []
    for n in range(len(HOSTS)):
        server = api.create(ctx, {"name": f"one-{n}", "flavor": "m1.small", "image": "tiny"})[0]
        assert server["status"] == "ACTIVE", server
        placed.append(api.get(cloud.admin, server["id"]))
    assert sorted(s["host"] for s in placed) == sorted(HOSTS)
    assert {db.cells.of_instance(s["id"]).name for s in placed} == {"cell1", "cell2"}

    # Every host, cell2's compute-3 (the roomiest) as well, runs its one server: no room left.
    extra = api.create(ctx, {"name": "one-too-many", "flavor": "m1.small", "image": "tiny"})[0]
    assert extra["status"] == "ERROR", extra
    assert "NumInstancesFilter" in api.get(cloud.admin, extra["id"])["fault"]["message"]
