"""novakit's own tools through ``novakit serve`` (issue 29, part 6) against the operator path.

One service on a fresh SQLite file (or ``--db-url``, PostgreSQL), set up as ``bench/api.py`` sets
it up (its ``_setup`` and ``_serve``: the database, the Fernet keys, the bootstrapped admin, fake
hosts), with the admin's network and ``--servers`` servers booted through the library. Then, in
turn, ``--rounds`` times each:

* the command: ``novakit server list -f json`` and ``novakit server show NAME -f json``, once
  with ``--db-url`` (the operator path, the admin's identity in the environment) and once with
  ``--os-cloud`` (a clouds.yaml of the admin's password): each a new process, as a user runs it;
* the calls alone, in this process: ``API.get`` against ``CloudAPI.get`` of one server, and
  ``list_servers`` of the project, ``--calls`` times each (median per call): what the wire and the
  service add once the interpreter has started.

Medians, min..max, and each cloud figure's ratio to the database path's of the same run. The
service and the commands share the machine's cores. Figures only; nothing here asserts a time.

    python bench/own_tools.py [--servers 50] [--rounds 7] [--calls 200] [--db-url postgresql+psycopg://...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api import NOVAKIT, _novakit, _serve, _setup  # noqa: E402
from cloud import FLAVOR, IMAGE, bench_config  # noqa: E402

from novakit.client.api import connect  # noqa: E402
from novakit.compute.api import API  # noqa: E402
from novakit.network import networks, subnets  # noqa: E402
from novakit.quota import set_quota  # noqa: E402


def _clouds(area: Path, url: str, password: str) -> Path:
    path = area / "clouds.yaml"
    entry = {
        "auth": {
            "auth_url": f"{url}/identity/v3",
            "username": "admin",
            "password": password,
            "project_name": "admin",
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        },
        "region_name": "RegionOne",
        "interface": "public",
        "identity_api_version": 3,
    }
    path.write_text(yaml.safe_dump({"clouds": {"bench": entry}}))
    path.chmod(0o600)
    return path


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _run(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([*NOVAKIT, *args], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"novakit {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    json.loads(done.stdout)


def _line(label: str, times: list[float], base: list[float] | None = None) -> str:
    ms = sorted(t * 1000 for t in times)
    ratio = f"  {statistics.median(times) / statistics.median(base):.2f}x the database path" if base else ""
    return f"{label:52} median {statistics.median(ms):8.1f} ms  ({ms[0]:.1f}..{ms[-1]:.1f}){ratio}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--db-url")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="novakit-bench-tools-") as tmp:
        area = Path(tmp)
        cloud = _setup(args.db_url, area)
        with _serve(cloud, 1) as service:
            # The catalog names the service's real address (bootstrap again follows the new URL).
            _novakit(
                cloud.env, "identity", "bootstrap", "--public-url", service.url,
                NOVAKIT_BOOTSTRAP_PASSWORD=cloud.password,
            )  # fmt: skip
            config = _clouds(area, service.url, cloud.password)
            remote = connect_with(config)
            owner = remote.caller()
            api = API(cloud.db, bench_config(cloud.db, area))
            for resource in ("instances", "cores", "ram"):
                set_quota(cloud.db, owner.project_id, resource, -1)
            networks.create(cloud.db, owner, {"name": "lan"})
            subnets.create(cloud.db, owner, {"name": "lan-v4", "network": "lan", "cidr": "10.0.0.0/16"})
            request = {
                "name": "tool",
                "flavor": FLAVOR,
                "image": IMAGE,
                "networks": [{"net_id": "lan"}],
            }
            api.create(owner, {**request, "max_count": args.servers, "min_count": args.servers})
            base = {k: v for k, v in cloud.env.items() if not k.startswith("OS_")}
            by_db = {
                **base,
                "NOVAKIT_PROJECT": owner.project_id,
                "NOVAKIT_USER": owner.user_id,
                "NOVAKIT_ROLES": "admin",
            }
            by_cloud = {k: v for k, v in base.items() if k != "NOVAKIT_DB_URL"}
            by_cloud["OS_CLIENT_CONFIG_FILE"] = str(config)
            commands = {
                "server list": ("server", "list", "-f", "json"),
                "server show": ("server", "show", "tool-1", "-f", "json"),
            }
            spent: dict[str, list[float]] = {}
            for _ in range(args.rounds):
                for name, words in commands.items():
                    db_args = ("--db-url", cloud.db.url, *words)
                    spent.setdefault(f"{name}, --db-url", []).append(
                        _timed(lambda a=db_args: _run(by_db, *a))
                    )
                    cloud_args = ("--os-cloud", "bench", *words)
                    spent.setdefault(f"{name}, --os-cloud", []).append(
                        _timed(lambda a=cloud_args: _run(by_cloud, *a))
                    )
            calls: dict[str, list[float]] = {}
            for _ in range(args.calls):
                calls.setdefault("get, library", []).append(_timed(lambda: api.get(owner, "tool-1")))
                calls.setdefault("get, cloud", []).append(_timed(lambda: remote.get(owner, "tool-1")))
                calls.setdefault("list_servers, library", []).append(_timed(lambda: api.list_servers(owner)))
                calls.setdefault("list_servers, cloud", []).append(_timed(lambda: remote.list_servers(owner)))
        cloud.db.dispose()
    kind = "PostgreSQL" if args.db_url else "SQLite"
    print(
        f"novakit's own tools, {kind}, {args.servers} servers, {args.rounds} rounds of each command in turn"
    )
    for name in commands:
        print(_line(f"novakit {name} (--db-url)", spent[f"{name}, --db-url"]))
        print(_line(f"novakit {name} (--os-cloud)", spent[f"{name}, --os-cloud"], spent[f"{name}, --db-url"]))
    print(f"the calls in this process, {args.calls} each")
    for name in ("get", "list_servers"):
        print(_line(f"{name} (library)", calls[f"{name}, library"]))
        print(_line(f"{name} (CloudAPI)", calls[f"{name}, cloud"], calls[f"{name}, library"]))


def connect_with(config: Path) -> Any:
    """``connect("bench")`` reading ``config`` (openstacksdk reads ``OS_CLIENT_CONFIG_FILE``)."""
    import os

    os.environ["OS_CLIENT_CONFIG_FILE"] = str(config)
    return connect("bench")


if __name__ == "__main__":
    main()
