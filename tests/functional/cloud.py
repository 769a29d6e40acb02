"""A small cloud for functional tests: fake compute hosts, flavors and images."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text

from novakit.catalog import flavors, images
from novakit.compute.api import API
from novakit.config import Config, load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Base
from novakit.fleet import hosts
from novakit.virt.driver import load_driver

HOSTS = {"compute-1": 8, "compute-2": 16, "compute-3": 32}


@dataclass
class Cloud:
    db: Database
    conf: Config
    api: API
    fake_dir: Path
    admin: RequestContext

    def driver_info(self, host: str, **options: Any) -> dict[str, Any]:
        vcpus = HOSTS.get(host, 8)
        opts = {
            "vcpus": vcpus,
            "memory_mb": vcpus * 2048,
            "local_gb": vcpus * 50,
            "state_dir": str(self.fake_dir),
            **options,
        }
        return {"driver": "fake", "options": opts, "transport": "local"}

    def add_host(self, host: str, **options: Any) -> None:
        info = self.driver_info(host, **options)
        driver = load_driver("fake", host, info["options"])
        driver.init_host()
        hosts.register_host(self.db, self.conf, host, driver.get_available_resource(), info)

    def fake(self, host: str) -> Any:
        return load_driver("fake", host, self.driver_info(host)["options"])

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table, to prove that a refused request changed nothing."""
        out = {}
        with self.db.engine.connect() as conn:
            for table in Base.metadata.sorted_tables:
                rows = conn.execute(text(f"SELECT * FROM {table.name}")).all()
                out[table.name] = sorted((tuple(r) for r in rows), key=repr)
        return out


def boot(cloud: Cloud, ctx: RequestContext, name: str, **extra: Any) -> dict[str, Any]:
    """Boot one server as ``ctx``; returns it as the operator sees it (with its host)."""
    servers = cloud.api.create(ctx, {"name": name, "flavor": "m1.small", "image": "tiny", **extra})
    assert servers[0]["status"] == "ACTIVE", servers[0]
    return cloud.api.get(cloud.admin, servers[0]["id"])


def make_cloud(db: Database, tmp_path: Path, hosts: dict[str, dict[str, Any]] | None = None) -> Cloud:
    """``HOSTS`` registered, two flavors and two images; ``hosts``: each host's fake driver
    options (``failure_mode``...), the default for a host not named."""
    # Quotas are tested on their own; here they must not get in the way.
    conf = load_config(
        db_url=db.url, state_dir=tmp_path / "state", quota={"instances": -1, "cores": -1, "ram": -1}
    )
    admin = RequestContext.admin()
    c = Cloud(db=db, conf=conf, api=API(db, conf), fake_dir=tmp_path / "fake", admin=admin)
    for host in HOSTS:
        c.add_host(host, **(hosts or {}).get(host, {}))
    flavors.create(db, admin, {"name": "m1.small", "vcpus": 1, "memory_mb": 1024, "root_gb": 10})
    flavors.create(db, admin, {"name": "m1.large", "vcpus": 4, "memory_mb": 8192, "root_gb": 40})
    images.create(db, admin, {"name": "tiny"})
    images.create(db, admin, {"name": "tiny-2"})
    return c
