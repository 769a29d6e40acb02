"""Many processes opening a new SQLite file at once (the first Ansible run: one module per host).

Each of them finds no schema, so one must create it while the others wait, and
none may fail with "database is locked" (SQLite cannot turn a new file into WAL,
or let a deferred transaction write, while another process writes).
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

from sqlalchemy import text

from novakit.db.engine import Database

PROCESSES = 6
ROUNDS = 4


def _register(url: str, area: str, host: str, start: Any, results: Any) -> None:
    try:
        from novakit.config import load_config
        from novakit.fleet import hosts
        from novakit.virt.fake import FakeDriver

        start.wait()
        db = Database(url)  # first use: upgrades the new file
        conf = load_config(db_url=url, state_dir=Path(area))
        driver = FakeDriver(host, {"state_dir": area, "vcpus": 4, "memory_mb": 8192, "local_gb": 40})
        driver.init_host()
        hosts.register_host(db, conf, host, driver.get_available_resource(), {"driver": "fake"})
        results.put((host, "ok"))
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put((host, f"{exc.__class__.__name__}: {exc}"))


def test_processes_opening_a_new_sqlite_file_at_once_all_succeed(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    for round_ in range(ROUNDS):
        area = tmp_path / f"round-{round_}"
        area.mkdir()
        url = f"sqlite:///{area / 'novakit.db'}"
        start, results = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_register, args=(url, str(area), f"first-{n}", start, results))
            for n in range(PROCESSES)
        ]
        for proc in procs:
            proc.start()
        start.set()
        outcomes = dict(results.get(timeout=120) for _ in procs)
        for proc in procs:
            proc.join(timeout=60)
        assert outcomes == {f"first-{n}": "ok" for n in range(PROCESSES)}
        db = Database(url, auto_upgrade=False)
        with db.reader() as session:
            assert session.execute(text("SELECT COUNT(*) FROM alembic_version")).scalar_one() == 1
            assert session.execute(text("SELECT COUNT(*) FROM compute_nodes")).scalar_one() == PROCESSES
            assert session.execute(text("SELECT COUNT(*) FROM resource_providers")).scalar_one() == PROCESSES
            assert session.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
        db.dispose()
