"""A fresh benchmark cloud: an empty database, fake compute hosts, one flavor and one image.

Shared by the benchmarks that boot through the Python API (``boot_api.py``,
``fleet_scale.py``), so that both measure the same set-up.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from novakit.compute import flavors, hosts, images  # noqa: E402
from novakit.config import Config, load_config  # noqa: E402
from novakit.context import RequestContext  # noqa: E402
from novakit.db.engine import Database  # noqa: E402
from novakit.db.models import Base  # noqa: E402
from novakit.virt.driver import load_driver  # noqa: E402

#: what every benchmark server is built from
FLAVOR, IMAGE = "m1.tiny", "tiny"


def fresh_database(db_url: str | None, area: Path) -> Database:
    """An empty, migrated database: SQLite in ``area`` by default; a PostgreSQL URL has its
    novakit tables dropped first."""
    url = db_url or f"sqlite:///{area / 'novakit.db'}"
    db = Database(url, auto_upgrade=False)
    if not db.is_sqlite:
        with db.engine.begin() as conn:
            Base.metadata.drop_all(conn)
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    db.upgrade_if_needed()
    return db


def bench_config(db: Database, area: Path) -> Config:
    """The configuration every process of a benchmark uses: no quota limits."""
    return load_config(db_url=db.url, state_dir=area, quota={"instances": -1, "cores": -1, "ram": -1})


def fake_hosts(
    db: Database,
    conf: Config,
    area: Path,
    count: int,
    vcpus: int = 64,
    *,
    exact: bool = False,
    prefix: str = "bench",
    catalog: bool = True,
) -> list[str]:
    """Register ``count`` fake hosts (``bench-NN``) that spawn at once, and the catalog.

    ``exact``: each host takes exactly ``vcpus`` one-vCPU servers (no overcommit), so that a
    stacking scheduler fills every host alike instead of piling the fleet on the first few.
    """
    admin = RequestContext.admin()
    names = []
    width = max(2, len(str(count - 1)))
    overrides = {"cpu_allocation_ratio": 1.0, "reserved_host_cpus": 0} if exact else None
    for n in range(count):
        name = f"{prefix}-{n:0{width}d}"
        info = {
            "driver": "fake",
            "transport": "local",
            "options": {
                "vcpus": vcpus,
                "memory_mb": vcpus * 4096,
                "local_gb": vcpus * 64,
                "spawn_delay": 0,
                "state_dir": str(area / "fake"),
            },
        }
        driver = load_driver("fake", name, info["options"])
        driver.init_host()
        hosts.register_host(db, conf, name, driver.get_available_resource(), info, overrides)
        names.append(name)
    if not catalog:
        return names
    flavors.create(db, admin, {"name": FLAVOR, "vcpus": 1, "memory_mb": 512, "root_gb": 1})
    images.create(db, admin, {"name": IMAGE})
    return names
