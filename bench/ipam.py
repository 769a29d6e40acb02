"""What a port's address costs on a /24 and on a /8 (``novakit.network.ipam``).

Issue 25 item 12: the free count and the choice of the next address walked every
address of the pools, so a port on a /8 took 20-70 s. This creates a network with
a /24 subnet and one with a /8 in a fresh SQLite database (or the database URL
given), then per round creates ``--ports`` ports on each (the free count and the
allocation, in one transaction each, as ``novakit port create`` does) and deletes
them again, and prints the median per port, the spread over the rounds
(min-max) and the ratio /8 : /24. Pool size should not matter: a ratio near 1.

    python bench/ipam.py [--rounds 7] [--ports 20] [--db-url URL]

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.network import networks, ports, subnets


def _setup(db: Database, admin: RequestContext, tag: str) -> dict[str, str]:
    cidrs = {"/24": "192.168.77.0/24", "/8": "10.0.0.0/8"}
    names = {}
    for size, cidr in cidrs.items():
        name = f"bench-{tag}-{size[1:]}"
        networks.create(db, admin, {"name": name})
        subnets.create(db, admin, {"name": f"{name}-v4", "network": name, "cidr": cidr})
        names[size] = name
    return names


def _round(db: Database, ctx: RequestContext, network: str, count: int, tag: str) -> float:
    """Seconds per port over ``count`` port creations on ``network`` (deleted afterwards)."""
    made = []
    started = time.perf_counter()
    for i in range(count):
        port = ports.create(db, ctx, {"name": f"{tag}-{i}", "network": network})
        assert port is not None
        made.append(port["id"])
    took = (time.perf_counter() - started) / count
    for port_id in made:
        ports.delete_port(db, ctx, port_id)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ports", type=int, default=20)
    parser.add_argument("--db-url", default="", help="default: a new SQLite file in a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        db = Database(url)
        db.upgrade_if_needed()
        admin = RequestContext.admin()
        tag = str(int(time.time()))
        names = _setup(db, admin, tag)
        timings: dict[str, list[float]] = {size: [] for size in names}
        for r in range(args.rounds):
            # Alternate the order so that neither size always runs on a warmer cache.
            order = list(names) if r % 2 == 0 else list(reversed(names))
            for size in order:
                timings[size].append(_round(db, admin, names[size], args.ports, f"b{tag}-{r}-{size[1:]}"))
        if args.db_url:  # a temporary database goes with its directory
            for name in names.values():
                networks.delete(db, admin, name)
        db.dispose()
    print(f"database: {'SQLite (temporary file)' if not args.db_url else db.engine.url.get_backend_name()}")
    print(f"{args.rounds} rounds of {args.ports} ports per subnet; per port:")
    medians = {}
    for size, values in timings.items():
        medians[size] = statistics.median(values)
        print(
            f"  {size:>3}: median {medians[size] * 1000:8.2f} ms"
            f"  (spread {min(values) * 1000:.2f}-{max(values) * 1000:.2f} ms)"
        )
    print(f"  ratio /8 : /24 = {medians['/8'] / medians['/24']:.2f}")


if __name__ == "__main__":
    main()
