"""What a move costs next to a boot, through the Python API with the fake driver (the control plane
only: no disk is copied, no guest really moves).

On a fresh database and 10 fake hosts, per round: N servers are booted one after another (the
baseline, in the same process and round), then each is cold-migrated and confirmed, live-migrated,
shelved (offloaded at once) and unshelved, and finally one host holding N servers is drained.
Printed: the median and spread (min-max over rounds) of the time per server of each, and its ratio
to a boot. A move is several host calls and guarded writes (a resize is a scheduling, three host
steps and six transactions; a boot is one scheduling, one host call and two), so a ratio of 2-3 is
what the shape costs, not a fault.

    python bench/moves.py [--servers 30] [--rounds 3] [--db-url postgresql+psycopg://...]

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cloud import FLAVOR, IMAGE, bench_config, fake_hosts, fresh_database  # noqa: E402

from novakit.compute.api import API  # noqa: E402
from novakit.context import RequestContext  # noqa: E402
from novakit.fleet import hosts  # noqa: E402
from novakit.moves.drain import drain_host  # noqa: E402

ADMIN = RequestContext.admin()


def one_round(servers: int, db_url: str | None) -> dict[str, float]:
    """Seconds per server for each operation in one round."""
    with tempfile.TemporaryDirectory(prefix="novakit-bench-moves-") as tmp:
        area = Path(tmp)
        db = fresh_database(db_url, area)
        conf = bench_config(db, area)
        names = fake_hosts(db, conf, area, 10, vcpus=64)
        api = API(db, conf)
        out: dict[str, float] = {}

        def timed(label: str, fn: object, refs: list[str]) -> None:
            start = time.perf_counter()
            for ref in refs:
                fn(ref)  # type: ignore[operator]
            out[label] = (time.perf_counter() - start) / len(refs)

        uuids: list[str] = []

        def boot(i: str) -> None:
            server = api.create(ADMIN, {"name": f"m{i}", "flavor": FLAVOR, "image": IMAGE})[0]
            uuids.append(server["id"])

        timed("boot", boot, [str(i) for i in range(servers)])
        timed(
            "migrate + confirm",
            lambda u: (api.act(ADMIN, u, "migrate"), api.act(ADMIN, u, "confirm_resize")),
            uuids,
        )
        timed("live migrate", lambda u: api.act(ADMIN, u, "live_migrate"), uuids)
        timed("shelve (offloaded)", lambda u: api.act(ADMIN, u, "shelve"), uuids)
        timed("unshelve", lambda u: api.act(ADMIN, u, "unshelve"), uuids)
        # A drain: every server onto one host first (the others disabled), then away again.
        for other in names[1:]:
            hosts.set_disabled(db, ADMIN, other, True, "bench")
        for u in uuids:
            if api.get(ADMIN, u)["host"] != names[0]:
                api.act(ADMIN, u, "live_migrate", {"host": names[0]})
        for other in names[1:]:
            hosts.set_disabled(db, ADMIN, other, False)
        start = time.perf_counter()
        result = drain_host(api, ADMIN, names[0])
        out["drain (live)"] = (time.perf_counter() - start) / len(uuids)
        assert all(r["result"] == "moved" for r in result["servers"]), result
        db.engine.dispose()
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db-url", default=None)
    args = parser.parse_args()
    runs: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.rounds):
        for label, seconds in one_round(args.servers, args.db_url).items():
            runs[label].append(seconds)
    backend = "PostgreSQL" if args.db_url else "SQLite"
    print(f"moves on fake hosts, {backend}, {args.servers} servers x {args.rounds} rounds (ms per server)")
    base = statistics.median(runs["boot"])
    print(f"{'operation':<22}{'median':>10}{'min':>10}{'max':>10}{'x boot':>9}")
    for label, values in runs.items():
        med = statistics.median(values)
        print(
            f"{label:<22}{med * 1000:>10.1f}{min(values) * 1000:>10.1f}{max(values) * 1000:>10.1f}"
            f"{med / base:>9.2f}"
        )


if __name__ == "__main__":
    main()
