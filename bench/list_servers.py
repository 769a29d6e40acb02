"""The whole ``server list`` of a large fleet: ``API.list_servers`` over 10,000 servers.

The call the CLI's ``novakit server list`` makes (and the OpenStack face's ``GET /servers/detail``
will), as the project's member and as an admin with ``all_projects``. The servers are made fast:
a few real boots on fake hosts, then their rows copied (instances and their mappings) under new
uuids and names, so that each listed server is a real one's record.

``--baseline DIR``: the same figures for the library in ``DIR`` (another checkout, e.g. a
``git worktree`` of an older commit), measured in turn with this one's, each in a process of its
own, and the ratio of the medians (this library's over the baseline's: below 1 is faster).

    python bench/list_servers.py [--servers 10000] [--rounds 7] [--db-url postgresql+psycopg://...]
    python bench/list_servers.py --baseline /tmp/old-checkout

Figures only; nothing here asserts a time. Issue 27's goal: the whole list under 400 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

SEEDS = 5


def _build(db_url: str | None, area: Path, servers: int) -> tuple[Any, Any, Any]:
    """A fresh database with ``servers`` servers of project ``bench``; the API and two callers."""

    from novakit.catalog import flavors, images
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext
    from novakit.db.engine import Database
    from novakit.fleet import hosts
    from novakit.virt.driver import load_driver

    url = db_url or f"sqlite:///{area / 'list.db'}"
    if db_url:
        _empty_postgresql(db_url)
    db = Database(url)
    db.upgrade_if_needed()
    conf = load_config(db_url=url, state_dir=area / "state", quota={"instances": -1, "cores": -1, "ram": -1})
    admin = RequestContext.admin()
    for n in range(3):
        info = {
            "driver": "fake",
            "options": {"vcpus": 64, "memory_mb": 131072, "local_gb": 4000, "state_dir": str(area / "fake")},
            "transport": "local",
        }
        driver = load_driver("fake", f"host-{n}", info["options"])
        driver.init_host()
        hosts.register_host(db, conf, f"host-{n}", driver.get_available_resource(), info)
    flavors.create(db, admin, {"name": "m1.small", "vcpus": 1, "memory_mb": 512, "root_gb": 1})
    images.create(db, admin, {"name": "tiny"})
    api = API(db, conf)
    member = RequestContext(project_id="bench", user_id="bench", roles=["member"], request_id="req-list")
    for n in range(SEEDS):
        server = api.create(member, {"name": f"seed-{n}", "flavor": "m1.small", "image": "tiny"})[0]
        assert server["status"] == "ACTIVE", server
    _copy_rows(db, servers - SEEDS)
    return api, member, admin


def _empty_postgresql(url: str) -> None:
    """Every table of the database and of its cell0 database beside it goes (another benchmark's
    flavors and servers would be counted, and another checkout's schema may differ)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    from novakit.cells.registry import derived_url

    for each in (url, derived_url(url, "cell0")):
        engine = create_engine(each)
        try:
            with engine.begin() as conn:
                conn.execute(text("DROP SCHEMA public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
        except OperationalError as exc:
            if "does not exist" not in str(exc.orig):
                raise
        finally:
            engine.dispose()


def _copy_rows(db: Any, count: int) -> None:
    """``count`` more servers: the first seed's instance and mapping rows under new uuids and names."""
    from sqlalchemy import inspect, text

    columns = {
        t: [c["name"] for c in inspect(db.engine).get_columns(t)] for t in ("instances", "instance_mappings")
    }
    kept = [c for c in columns["instances"] if c not in ("id", "uuid", "display_name", "hostname")]
    kept_map = [c for c in columns["instance_mappings"] if c not in ("id", "instance_uuid", "display_name")]
    copy_instance = text(
        f"INSERT INTO instances (uuid, display_name, hostname, {', '.join(kept)}) "
        f"SELECT :u, :n, :n, {', '.join(kept)} FROM instances WHERE uuid = :t"
    )
    copy_mapping = text(
        f"INSERT INTO instance_mappings (instance_uuid, display_name, {', '.join(kept_map)}) "
        f"SELECT :u, :n, {', '.join(kept_map)} FROM instance_mappings WHERE instance_uuid = :t"
    )
    with db.engine.begin() as conn:
        seed = conn.execute(text("SELECT uuid FROM instances WHERE display_name = 'seed-0'")).scalar()
        rows = [{"u": str(uuid.uuid4()), "n": f"srv-{i}", "t": seed} for i in range(count)]
        conn.execute(copy_instance, rows)
        conn.execute(copy_mapping, rows)


def _measure(db_url: str | None, servers: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="nk-list-") as tmp:
        api, member, admin = _build(db_url, Path(tmp), servers)
        out: dict[str, list[float]] = {"member": [], "admin": []}
        for _ in range(rounds):
            for who, ctx, query in (("member", member, {}), ("admin", admin, {"all_projects": True})):
                start = time.perf_counter()
                listed = api.list_servers(ctx, query)
                out[who].append((time.perf_counter() - start) * 1000)
                assert len(listed) == servers, (who, len(listed))
        api.db.dispose()
        return out


def _child(library: str | None, args: argparse.Namespace) -> dict[str, list[float]]:
    """One measurement in a process of its own, with ``library`` first on the import path."""
    env = dict(os.environ)
    if library:
        env["PYTHONPATH"] = library
    cmd = [sys.executable, __file__, "--child", "--servers", str(args.servers), "--rounds", str(args.rounds)]
    if args.db_url:
        cmd += ["--db-url", args.db_url]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the measurement of {library or 'this checkout'} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _line(label: str, times: list[float]) -> str:
    return f"{label:<44} {statistics.median(times):8.1f} ms  [{min(times):.1f}..{max(times):.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7, help="lists of each kind, per process")
    parser.add_argument("--db-url", default=None, help="PostgreSQL URL (its server tables are emptied!)")
    parser.add_argument("--baseline", default=None, help="another checkout's directory, measured in turn")
    parser.add_argument("--turns", type=int, default=3, help="with --baseline: processes of each, in turn")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.db_url, args.servers, args.rounds)))
        return
    here = str(Path(__file__).resolve().parents[1])
    libraries = [("this", here)] + ([("baseline", args.baseline)] if args.baseline else [])
    figures: dict[str, dict[str, list[float]]] = {name: {"member": [], "admin": []} for name, _ in libraries}
    for _ in range(args.turns if args.baseline else 1):
        for name, library in libraries:
            for who, times in _child(library, args).items():
                figures[name][who] += times
    load = os.getloadavg()[0]
    backend = "PostgreSQL" if args.db_url else "SQLite"
    print(f"server list of {args.servers} servers ({backend}), load {load:.2f}")
    for who, label in (("member", "whole list, member"), ("admin", "whole list, admin --all-projects")):
        for name, _ in libraries:
            print(_line(f"{label} ({name})", figures[name][who]))
        if args.baseline:
            ratio = statistics.median(figures["this"][who]) / statistics.median(figures["baseline"][who])
            print(f"{'':<44} ratio this/baseline {ratio:.2f}")


if __name__ == "__main__":
    main()
