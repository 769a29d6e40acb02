"""``novakit serve`` under load: the OpenStack face's listing, boots, token checks and workers.

One service (``python -m novakit.cli.main serve``, as ``tests/functional/service/conftest.py``
starts it: the database migrated, ``novakit identity fernet-setup`` and ``identity bootstrap``,
then serve on a free loopback port) on a fresh SQLite file or, with ``--db-url``, on PostgreSQL,
holding ``--servers`` servers of the admin token's Keystone project. The servers are made fast,
as ``list_servers.py`` makes them: a few real boots on fake hosts (``cloud.fake_hosts``), then
their rows copied under new uuids and names (then, on PostgreSQL, ``ANALYZE``: a fleet's tables
have statistics). The project's quotas are lifted first and a network (``lan``) made for it, as
the service tests' fixture does.

* ``listing``: ``--clients`` threads (one ``httpx.Client`` each) share ``--requests`` requests of
  ``GET /compute/v2.1/servers/detail?limit=100``: p50 and p99 latency and requests per second.
* ``boots``: ``--boots`` servers through the Python API (``API.create``, one after another, in this
  process, on the same database and hosts), then as many through HTTP (``POST /servers``, answered
  202, the build in the service's pool): one client, a boot after another, each done when a
  ``GET`` of the server (every ``--poll`` ms, 5) says ACTIVE; then ``--clients`` clients POSTing at
  once and one watcher whose ``GET /servers?name=^many-&status=ACTIVE`` (every ``--watch`` ms) counts them
  done (each client polling its own servers, even every 50 ms, was most of the service's work:
  8 boots/s instead of 35 on SQLite). Servers per second, each HTTP figure's ratio to the Python
  API's (issue 28's goal: 0.8), the POSTs' answer times, and each server's ``created_at`` to
  ``launched_at`` as its row has them (the build, the client's polling left out). The many
  clients' figure is also given by the records: from the first POST to the last server's
  ``launched_at``, the service's own rate, without the watcher's lag (``--watch`` ms, 100).
  The Python API's boots run again after the HTTP ones: each boot costs a little more on the
  grown store, so the ratios are to the mean of its two figures (both printed).
* ``tokens``: the cost of a token check, sequential requests of one client: ``GET /compute`` (the
  version document, no token), ``GET /compute/v2.1/flavors`` without a token (401 before any
  check), with one, and ``GET /identity/v3/auth/tokens`` (``X-Subject-Token``: the caller's token
  and the subject's both checked). Median and min..max, and the medians' differences.
* ``workers``: the listing again against a service of ``--workers 2`` on the same database, beside
  the one-worker figure of the same run.
* ``ports`` (issue 29): ``--ports`` ports on the admin's network (one made by the library, the
  rest its rows copied), then ``--clients`` clients on ``GET /network/v2.0/ports?limit=100`` and
  on the whole listing: p50, p99, requests per second.
* ``upload`` (issue 29): an image's data of ``--upload-mib`` MiB (1 GiB) through ``PUT
  /image/v2/images/{id}/file``, streamed from the file in 4 MiB pieces, against ``cp`` of the same
  file on the same disk, in turn, ``--upload-rounds`` times: MiB/s and the ratio (issue 29's goal:
  0.7); then the three digests the service computes, of the same data alone (the ceiling).

The clients run in this process, on the same cores as the service (two on the machine the
results were taken on), so the figures are the pair's, as a deployment's would not be. The
service logs at ``info`` (its access log included) to a file.

    python bench/api.py [--servers 10000] [--boots 100] [--clients 16] [--requests 400]
    python bench/api.py --db-url postgresql+psycopg://... [--only listing,boots,tokens,workers] [--poll 5]
    python bench/api.py --only boots --serve-workers 2     # the boots against two worker processes

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import inspect, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cloud import FLAVOR, IMAGE, bench_config, fake_hosts, fresh_database  # noqa: E402

from novakit.catalog import flavors, images  # noqa: E402
from novakit.catalog.image_data import DIGESTS  # noqa: E402
from novakit.compute.api import API  # noqa: E402
from novakit.context import RequestContext  # noqa: E402
from novakit.db.engine import Database  # noqa: E402
from novakit.network import networks, ports, subnets  # noqa: E402
from novakit.quota import set_quota  # noqa: E402

NOVAKIT = [sys.executable, "-m", "novakit.cli.main"]
HOSTS = 20
SEEDS = 5
LISTING = "/compute/v2.1/servers/detail?limit=100"
#: what the upload's client reads from the file and sends at once
UPLOAD_PIECE = 4 << 20


@dataclass
class Service:
    """One running ``novakit serve``: where it answers and its process."""

    url: str
    process: subprocess.Popen[bytes]


@dataclass
class Cloud:
    """The set-up every part measures: the database, the service's environment, the admin's token
    and the ids a create names."""

    db: Database
    area: Path
    env: dict[str, str]
    password: str
    token: str = ""
    owner: RequestContext | None = None
    flavor: str = ""
    image: str = ""
    #: seconds between the GETs that wait for boots (``--poll``)
    poll: float = 0.005
    #: seconds between the many clients' watcher's GETs (``--watch``)
    watch: float = 0.1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _novakit(env: dict[str, str], *args: str, **more: str) -> None:
    done = subprocess.run([*NOVAKIT, *args], env={**env, **more}, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        sys.exit(f"novakit {' '.join(args)} failed:\n{done.stderr[-4000:]}")


def _descendants(pid: int) -> list[int]:
    """``pid``'s children and theirs, as /proc has them now (the workers of a ``--workers`` serve)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        each = todo.pop()
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{each}/task").iterdir():
                children = [int(c) for c in (task / "children").read_text().split()]
                found += children
                todo += children
    return found


@contextlib.contextmanager
def _serve(cloud: Cloud, workers: int) -> Iterator[Service]:
    """``novakit serve`` on a free loopback port until it answers; ended by its pid (and its
    workers') when the block ends."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = cloud.area / f"serve-{workers}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*NOVAKIT, "serve", "--bind", f"127.0.0.1:{port}", "--workers", str(workers)],
            env=cloud.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                sys.exit(f"novakit serve ended with {process.returncode}:\n{log.read_text()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/identity/v3", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                sys.exit(f"novakit serve did not answer within 60 s:\n{log.read_text()[-4000:]}")
            time.sleep(0.1)
        yield Service(url, process)
    finally:
        pids = [*_descendants(process.pid), process.pid]
        for pid in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait(timeout=5)


def _setup(db_url: str | None, area: Path) -> Cloud:
    """A fresh database, migrated, with its Fernet keys, the bootstrapped admin, fake hosts and the
    catalog (the service's first start comes after: the admin's token needs it)."""
    db = fresh_database(db_url, area)
    password = "pw-" + secrets.token_urlsafe(16)
    env = {
        **os.environ,
        "NOVAKIT_DB_URL": db.url,
        "NOVAKIT_STATE_DIR": str(area / "state"),
        "NOVAKIT_FERNET_KEYS": str(area / "fernet-keys"),
        "NOVAKIT_PROJECT": "admin",
        "NOVAKIT_USER": "admin",
        "NOVAKIT_ROLES": "admin",
    }
    env.pop("NOVAKIT_TOKEN_EXPIRATION", None)
    _novakit(env, "identity", "fernet-setup")
    _novakit(
        env, "identity", "bootstrap", "--public-url", "http://127.0.0.1", NOVAKIT_BOOTSTRAP_PASSWORD=password
    )
    fake_hosts(db, bench_config(db, area), area, HOSTS)
    return Cloud(db, area, env, password)


def _issue(url: str, password: str) -> str:
    body = {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {"user": {"name": "admin", "domain": {"name": "Default"}, "password": password}},
            },
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}},
        }
    }
    answer = httpx.post(f"{url}/identity/v3/auth/tokens", json=body, timeout=30)
    if answer.status_code != 201:
        sys.exit(f"no token: {answer.status_code} {answer.text}")
    return answer.headers["x-subject-token"]


def _fill(cloud: Cloud, service: Service, servers: int) -> None:
    """The admin's token, its project's network and lifted quotas, then ``servers`` servers of it:
    a few real boots, the rest their rows copied (``list_servers.py``)."""
    cloud.token = _issue(service.url, cloud.password)
    headers = {"X-Auth-Token": cloud.token, "X-Subject-Token": cloud.token}
    body = httpx.get(f"{service.url}/identity/v3/auth/tokens", headers=headers, timeout=30).json()["token"]
    project = body["project"]["id"]
    cloud.owner = RequestContext(project_id=project, user_id=body["user"]["id"], roles=["admin"])
    networks.create(cloud.db, cloud.owner, {"name": "lan"})
    subnets.create(cloud.db, cloud.owner, {"name": "lan-v4", "network": "lan", "cidr": "10.0.0.0/16"})
    for resource in ("instances", "cores", "ram"):
        set_quota(cloud.db, project, resource, -1)
    admin = RequestContext.admin()
    cloud.flavor = flavors.show(cloud.db, admin, FLAVOR)["id"]
    cloud.image = images.show(cloud.db, admin, IMAGE)["id"]
    api = API(cloud.db, bench_config(cloud.db, cloud.area))
    for n in range(SEEDS):
        server = api.create(cloud.owner, {"name": f"seed-{n}", "flavor": FLAVOR, "image": IMAGE})[0]
        assert server["status"] == "ACTIVE", server
    _copy_rows(cloud.db, servers - SEEDS)


def _copy_rows(db: Database, count: int) -> None:
    """``count`` more servers: the first seed's instance and mapping rows under new uuids and names."""
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
    if db.engine.dialect.name == "postgresql":
        # A fleet's tables have their statistics; right after the copy the planner would still plan
        # for the few seeds' rows until autovacuum's analyze came (boots 4x slower, seen either way).
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))


def _together(clients: int, jobs: int, job: Callable[[httpx.Client, int], None], url: str) -> float:
    """``jobs`` calls of ``job`` shared by ``clients`` threads, each with a client of its own;
    the wall time in seconds."""
    taken = iter(range(jobs))
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def run() -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            start.wait()
            while True:
                with lock:
                    n = next(taken, None)
                if n is None:
                    return
                job(http, n)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began


def _listing(
    cloud: Cloud,
    service: Service,
    clients: int,
    requests: int,
    path: str = LISTING,
    key: str = "servers",
    expect: int = 100,
) -> dict[str, float]:
    """``requests`` GETs of ``path`` by ``clients`` clients; each must answer ``expect`` ``key``
    items (else it counts as failed)."""
    headers = {"X-Auth-Token": cloud.token}
    times: list[float] = []
    failed = []

    def get(http: httpx.Client, _n: int) -> None:
        began = time.perf_counter()
        answer = http.get(path, headers=headers)
        times.append((time.perf_counter() - began) * 1000)
        if answer.status_code != 200 or len(answer.json()[key]) != expect:
            failed.append(answer.status_code)

    with httpx.Client(base_url=service.url, timeout=120) as http:
        get(http, 0)  # the first request warms the service's engine and caches
    times.clear()
    wall = _together(clients, requests, get, service.url)
    cuts = statistics.quantiles(times, n=100)
    return {"p50": cuts[49], "p99": cuts[98], "per_s": requests / wall, "failed": len(failed)}


def _create(http: httpx.Client, cloud: Cloud, name: str, posts: list[float]) -> str:
    """``POST /servers`` (202); the new server's id. Appends the answer's time (ms) to ``posts``."""
    server = {"name": name, "flavorRef": cloud.flavor, "imageRef": cloud.image, "networks": "auto"}
    began = time.perf_counter()
    answer = http.post(
        "/compute/v2.1/servers", headers={"X-Auth-Token": cloud.token}, json={"server": server}
    )
    posts.append((time.perf_counter() - began) * 1000)
    if answer.status_code != 202:
        # in a client's thread: its traceback shows, and the boots it did not make are not ACTIVE
        raise RuntimeError(f"create answered {answer.status_code}: {answer.text[:300]}")
    return str(answer.json()["server"]["id"])


def _wait_active(
    http: httpx.Client, cloud: Cloud, path: str, done: Callable[[Any], bool], every: float | None = None
) -> bool:
    """GET ``path`` every ``every`` seconds (``cloud.poll``) until ``done`` of its body (True) or
    120 s (False)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        answer = http.get(path, headers={"X-Auth-Token": cloud.token})
        if answer.status_code == 200 and done(answer.json()):
            return True
        time.sleep(cloud.poll if every is None else every)
    return False


def _boots(cloud: Cloud, service: Service, boots: int, clients: int) -> dict[str, Any]:
    assert cloud.owner is not None
    api = API(cloud.db, bench_config(cloud.db, cloud.area))
    began = time.perf_counter()
    active = 0
    for i in range(boots):
        server = api.create(cloud.owner, {"name": f"py-{i}", "flavor": FLAVOR, "image": IMAGE})[0]
        active += server["status"] == "ACTIVE"
    out: dict[str, Any] = {"python": boots / (time.perf_counter() - began), "python_active": active}
    posts: list[float] = []
    with httpx.Client(base_url=service.url, timeout=120) as http:
        began = time.perf_counter()
        active = 0
        for i in range(boots):
            server_id = _create(http, cloud, f"http-{i}", posts)
            active += _wait_active(
                http, cloud, f"/compute/v2.1/servers/{server_id}", lambda b: b["server"]["status"] == "ACTIVE"
            )
        out["serial"] = boots / (time.perf_counter() - began)
        out["serial_active"] = active
        out["serial_posts"] = posts
        many: list[float] = []
        path = f"/compute/v2.1/servers?name=%5Emany-&status=ACTIVE&limit={boots + 1}"

        def watch() -> None:
            _wait_active(http, cloud, path, lambda body: len(body["servers"]) >= boots, cloud.watch)

        def create(client: httpx.Client, n: int) -> None:
            _create(client, cloud, f"many-{n}", many)

        watcher = threading.Thread(target=watch)
        began = time.perf_counter()
        began_utc = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # as the rows keep time
        watcher.start()
        _together(clients, boots, create, service.url)
        watcher.join()
        wall = time.perf_counter() - began
        last = http.get(path, headers={"X-Auth-Token": cloud.token}).json()["servers"]
    out["clients"] = boots / wall
    out["clients_records"] = boots / (_last_launched(cloud.db, "many-") - began_utc).total_seconds()
    # The Python API again, on the store the HTTP boots grew: each boot costs a little more than
    # the last (more rows, fuller fake hosts), so the ratios are to the mean of both runs.
    began = time.perf_counter()
    for i in range(boots):
        api.create(cloud.owner, {"name": f"py-after-{i}", "flavor": FLAVOR, "image": IMAGE})
    out["python_before"], out["python_after"] = out["python"], boots / (time.perf_counter() - began)
    out["python"] = (out["python_before"] + out["python_after"]) / 2
    out["clients_active"] = len(last)
    out["clients_posts"] = many
    for key, prefix in (("python", "py-"), ("serial", "http-"), ("clients", "many-")):
        out[key + "_built"] = _built(cloud.db, prefix)
    return out


def _built(db: Database, prefix: str) -> list[float]:
    """Each ``prefix`` server's time from its row's ``created_at`` to its ``launched_at`` (ms): the
    build as the library recorded it, the client's polling left out."""
    query = text("SELECT created_at, launched_at FROM instances WHERE display_name LIKE :p")
    with db.engine.connect() as conn:
        rows = conn.execute(query, {"p": prefix + "%"}).all()

    def when(value: Any) -> datetime.datetime:  # SQLite's text columns come back as text here
        return datetime.datetime.fromisoformat(value) if isinstance(value, str) else value

    return [(when(launched) - when(created)).total_seconds() * 1000 for created, launched in rows if launched]


def _last_launched(db: Database, prefix: str) -> datetime.datetime:
    """The latest ``launched_at`` of the ``prefix`` servers: when the last of them became ACTIVE."""
    query = text("SELECT MAX(launched_at) FROM instances WHERE display_name LIKE :p")
    with db.engine.connect() as conn:
        value = conn.execute(query, {"p": prefix + "%"}).scalar_one()
    return datetime.datetime.fromisoformat(value) if isinstance(value, str) else value


def _fill_ports(cloud: Cloud, count: int) -> None:
    """``count`` ports on the admin's ``lan``: one made by the library (its address, its default
    group), the rest its rows copied under new uuids, MACs and addresses, as the servers are."""
    assert cloud.owner is not None
    seed = ports.create(cloud.db, cloud.owner, {"network": "lan", "name": "port-seed"})
    assert seed is not None
    columns = [c["name"] for c in inspect(cloud.db.engine).get_columns("ports")]
    kept = [c for c in columns if c not in ("id", "uuid", "name", "mac_address")]
    copy_port = text(
        f"INSERT INTO ports (uuid, name, mac_address, {', '.join(kept)}) "
        f"SELECT :u, :n, :m, {', '.join(kept)} FROM ports WHERE uuid = :t"
    )
    copy_address = text(
        "INSERT INTO ip_allocations (port_id, subnet_id, network_id, ip_address) "
        "SELECT p.id, a.subnet_id, a.network_id, :ip FROM ports p, ip_allocations a "
        "JOIN ports s ON s.id = a.port_id WHERE p.uuid = :u AND s.uuid = :t"
    )
    copy_groups = text(
        "INSERT INTO security_group_port_bindings (port_id, security_group_id) "
        "SELECT p.id, b.security_group_id FROM ports p, security_group_port_bindings b "
        "JOIN ports s ON s.id = b.port_id WHERE p.uuid = :u AND s.uuid = :t"
    )
    rows = [
        {
            "u": str(uuid.uuid4()),
            "n": f"port-{i}",
            "m": f"fa:16:3e:{0x80 + i // 65536:02x}:{i // 256 % 256:02x}:{i % 256:02x}",
            "ip": f"10.0.{128 + i // 256}.{i % 256}",
            "t": seed["id"],
        }
        for i in range(count - 1)
    ]
    with cloud.db.engine.begin() as conn:
        for statement in (copy_port, copy_address, copy_groups):
            conn.execute(statement, rows)
    if cloud.db.engine.dialect.name == "postgresql":
        with cloud.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))


def _upload(cloud: Cloud, service: Service, mib: int, rounds: int) -> dict[str, list[float]]:
    """``mib`` MiB uploaded as an image's data (``POST /image/v2/images``, then ``PUT .../file``
    streamed from the file in ``UPLOAD_PIECE`` pieces with its ``Content-Length``; the image
    deleted after) and copied by ``cp`` to the same disk, in turn, ``rounds`` times: MiB/s of
    each. Then the digests the service computes, of the same file, alone (``_digests``)."""
    source = cloud.area / "upload.raw"
    block = os.urandom(1 << 20)
    with open(source, "wb") as out:
        for _ in range(mib):
            out.write(block)
    headers = {"X-Auth-Token": cloud.token}

    def pieces() -> Iterator[bytes]:
        # Large pieces and a known length: httpx frames a body of unknown length in chunks,
        # which doubled the client's CPU time (it shares the cores with the service).
        with open(source, "rb", buffering=0) as data:
            while piece := data.read(UPLOAD_PIECE):
                yield piece

    out: dict[str, list[float]] = {"cp": [], "upload": []}
    with httpx.Client(base_url=service.url, timeout=600) as http:
        for n in range(rounds):
            copy = cloud.area / "copy.raw"
            began = time.perf_counter()
            subprocess.run(["cp", str(source), str(copy)], check=True)
            out["cp"].append(mib / (time.perf_counter() - began))
            copy.unlink()
            image = {"name": f"upload-{n}", "disk_format": "raw", "container_format": "bare"}
            made = http.post("/image/v2/images", headers=headers, json=image)
            assert made.status_code == 201, made.text
            image_id = made.json()["id"]
            began = time.perf_counter()
            put = http.put(
                f"/image/v2/images/{image_id}/file",
                headers={
                    **headers,
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(source.stat().st_size),
                },
                content=pieces(),
            )
            out["upload"].append(mib / (time.perf_counter() - began))
            assert put.status_code == 204, put.text
            assert http.delete(f"/image/v2/images/{image_id}", headers=headers).status_code == 204
    out.update(_digests(source, mib))
    source.unlink()
    return out


def _digests(source: Path, mib: int) -> dict[str, list[float]]:
    """MiB/s of each digest an upload computes (MD5, SHA-256, SHA-512) of ``source`` alone, one
    after another, and of the three at once in three threads (as the service computes them),
    the file read beforehand: the upload's ceiling on these cores, whatever else it does."""
    data = source.read_bytes()
    pieces = [data[i : i + (4 << 20)] for i in range(0, len(data), 4 << 20)]
    out: dict[str, list[float]] = {}

    def digest(name: str) -> None:
        hasher = hashlib.new(name)
        for piece in pieces:
            hasher.update(piece)

    for name in DIGESTS:
        began = time.perf_counter()
        digest(name)
        out[name] = [mib / (time.perf_counter() - began)]
    threads = [threading.Thread(target=digest, args=(name,)) for name in DIGESTS]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["digests"] = [mib / (time.perf_counter() - began)]
    return out


def _print_upload(u: dict[str, list[float]], mib: int) -> None:
    print(f"image upload of {mib} MiB, {len(u['cp'])} rounds in turn with cp (load {os.getloadavg()[0]:.2f})")
    for kind, label in (("cp", "cp of the same file"), ("upload", "PUT /image/v2/images/{id}/file")):
        rates = u[kind]
        print(f"  {label:<50} {statistics.median(rates):8.1f} MiB/s  [{min(rates):.1f}..{max(rates):.1f}]")
    paired = [a / b for a, b in zip(u["upload"], u["cp"], strict=True)]
    print(
        f"  upload / cp: {statistics.median(u['upload']) / statistics.median(u['cp']):.2f} (medians), "
        f"paired {statistics.median(paired):.2f} [{min(paired):.2f}..{max(paired):.2f}] (goal 0.7)"
    )
    alone = ", ".join(f"{name} {u[name][0]:.0f}" for name in DIGESTS)
    together = u["digests"][0]
    print(
        f"  the digests of the file alone, in memory: {alone} MiB/s; the three at once in three "
        f"threads {together:.0f} MiB/s (ratio to cp {together / statistics.median(u['cp']):.2f}: "
        "the upload's ceiling)"
    )


def _tokens(cloud: Cloud, service: Service, requests: int) -> dict[str, list[float]]:
    token = {"X-Auth-Token": cloud.token}
    kinds: dict[str, tuple[str, dict[str, str], int]] = {
        "version": ("/compute", {}, 200),
        "no_token": ("/compute/v2.1/flavors", {}, 401),
        "flavors": ("/compute/v2.1/flavors", token, 200),
        "validate": ("/identity/v3/auth/tokens", {**token, "X-Subject-Token": cloud.token}, 200),
    }
    out: dict[str, list[float]] = {k: [] for k in kinds}
    with httpx.Client(base_url=service.url, timeout=30) as http:
        for round_ in range(requests + 20):
            for kind, (path, headers, status) in kinds.items():  # in turn: the same load on each
                began = time.perf_counter()
                answer = http.get(path, headers=headers)
                took = (time.perf_counter() - began) * 1000
                assert answer.status_code == status, (path, answer.status_code, answer.text)
                if round_ >= 20:  # the first ones warm up
                    out[kind].append(took)
    return out


def _line(label: str, times: list[float]) -> str:
    return f"{label:<52} {statistics.median(times):8.2f} ms  [{min(times):.2f}..{max(times):.2f}]"


def _listing_line(label: str, f: dict[str, float]) -> str:
    failed = f"  ({int(f['failed'])} failed)" if f["failed"] else ""
    return f"{label:<52} p50 {f['p50']:7.1f} ms  p99 {f['p99']:7.1f} ms  {f['per_s']:7.1f} req/s{failed}"


def _print_tokens(t: dict[str, list[float]], requests: int) -> None:
    print(f"token checks, {requests} sequential requests of each (load {os.getloadavg()[0]:.2f})")
    print(_line("  GET /compute (version document, no token)", t["version"]))
    print(_line("  GET /compute/v2.1/flavors without a token (401)", t["no_token"]))
    print(_line("  GET /compute/v2.1/flavors with a token", t["flavors"]))
    print(_line("  GET /identity/v3/auth/tokens (X-Subject-Token)", t["validate"]))
    med = {k: statistics.median(v) for k, v in t.items()}
    print(
        f"  medians' differences: flavors with a token - without {med['flavors'] - med['no_token']:.2f} ms, "
        f"validate - version document {med['validate'] - med['version']:.2f} ms"
    )


def _print_boots(b: dict[str, Any], boots: int, clients: int, poll: float, watch: float) -> None:
    print(f"boots, {boots} of each (load {os.getloadavg()[0]:.2f})")
    print(
        f"  Python API, serial: {b['python_before']:.1f} servers/s before the HTTP boots "
        f"({int(b['python_active'])} ACTIVE), {b['python_after']:.1f} after them; "
        f"the ratios are to their mean, {b['python']:.1f}"
    )
    print(_line("    created_at to launched_at", b["python_built"]))
    for key, label in (
        ("serial", f"1 client: POST, GET until ACTIVE (every {poll * 1000:g} ms), next"),
        ("clients", f"{clients} clients POSTing, 1 watcher's GET (every {watch * 1000:g} ms)"),
    ):
        print(
            f"  HTTP, {label}: {b[key]:.1f} servers/s ({int(b[key + '_active'])} ACTIVE), "
            f"ratio to the Python API {b[key] / b['python']:.2f}"
        )
        if key == "clients":
            print(
                f"    by the records (first POST to the last launched_at): {b['clients_records']:.1f} "
                f"servers/s, ratio to the Python API {b['clients_records'] / b['python']:.2f}"
            )
        print(_line("    its POSTs' answers (202)", b[key + "_posts"]))
        print(_line("    created_at to launched_at", b[key + "_built"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db-url", default=None, help="PostgreSQL URL (its tables are dropped!); default SQLite"
    )
    parser.add_argument("--servers", type=int, default=10000)
    parser.add_argument("--boots", type=int, default=100, help="boots of each kind")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--requests", type=int, default=400, help="listing requests per run (and token checks)"
    )
    parser.add_argument("--poll", type=float, default=5, help="ms between one client's GETs of its server")
    parser.add_argument(
        "--watch", type=float, default=100, help="ms between the many clients' watcher's listings"
    )
    parser.add_argument(
        "--only", default="listing,boots,tokens,workers,ports,upload", help="comma-separated parts"
    )
    parser.add_argument("--ports", type=int, default=10000, help="ports of the admin's network (ports)")
    parser.add_argument("--upload-mib", type=int, default=1024, help="MiB of the image uploaded (upload)")
    parser.add_argument("--upload-rounds", type=int, default=3)
    parser.add_argument(
        "--serve-workers", type=int, default=1, help="the service's workers for listing, boots and tokens"
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    unknown = parts - {"listing", "boots", "tokens", "workers", "ports", "upload"}
    if unknown:
        parser.error(f"--only: unknown part(s) {', '.join(sorted(unknown))}")
    backend = "PostgreSQL" if args.db_url else "SQLite"
    with tempfile.TemporaryDirectory(prefix="nk-api-") as tmp:
        cloud = _setup(args.db_url, Path(tmp))
        cloud.poll, cloud.watch = args.poll / 1000, args.watch / 1000
        try:
            began = time.perf_counter()
            with _serve(cloud, args.serve_workers) as service:
                _fill(cloud, service, args.servers)
                fill = time.perf_counter() - began
                print(
                    f"novakit serve ({args.serve_workers} worker(s)) on {backend}, {args.servers} servers "
                    "of the admin's project "
                    f"(set up in {fill:.1f} s), {HOSTS} fake hosts, load {os.getloadavg()[0]:.2f}"
                )
                one = None
                if parts & {"listing", "workers"}:
                    one = _listing(cloud, service, args.clients, args.requests)
                    label = f"{args.clients} clients x GET servers/detail?limit=100, 1 worker"
                    print(_listing_line(label, one))
                if "tokens" in parts:
                    _print_tokens(_tokens(cloud, service, args.requests), args.requests)
                if "boots" in parts:
                    booted = _boots(cloud, service, args.boots, args.clients)
                    _print_boots(booted, args.boots, args.clients, cloud.poll, cloud.watch)
                if "ports" in parts:
                    _fill_ports(cloud, args.ports)
                    with cloud.db.engine.connect() as conn:  # the seed servers' ports too
                        everyone = int(conn.execute(text("SELECT COUNT(*) FROM ports")).scalar_one())
                    for path, requests, expect in (
                        ("/network/v2.0/ports?limit=100", args.requests, 100),
                        ("/network/v2.0/ports", max(args.requests // 20, args.clients), everyone),
                    ):
                        found = _listing(cloud, service, args.clients, requests, path, "ports", expect)
                        print(_listing_line(f"{args.clients} clients x GET {path}", found))
                if "upload" in parts:
                    _print_upload(
                        _upload(cloud, service, args.upload_mib, args.upload_rounds), args.upload_mib
                    )
            if "workers" in parts and one is not None:
                with _serve(cloud, 2) as service:
                    two = _listing(cloud, service, args.clients, args.requests)
                label = f"{args.clients} clients x GET servers/detail?limit=100, 2 workers"
                print(_listing_line(label, two))
                print(
                    f"  2 workers / 1 worker: requests/s {two['per_s'] / one['per_s']:.2f}, "
                    f"p50 {two['p50'] / one['p50']:.2f}, p99 {two['p99'] / one['p99']:.2f} "
                    f"(load {os.getloadavg()[0]:.2f})"
                )
        finally:
            cloud.db.dispose()


if __name__ == "__main__":
    main()
