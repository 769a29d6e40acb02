"""A real ``novakit serve`` process for the service tests, on SQLite and on PostgreSQL.

``serve_cloud`` makes a database of its own (a SQLite file, or a PostgreSQL database named for
the process and the module on the tests' server, migrated with ``novakit db upgrade``), sets up
the Fernet keys and bootstraps the admin with the real ``novakit`` commands, starts ``novakit
serve`` on a free loopback port and waits until it answers. The process is ended by its pid
(and its workers', its descendants) when the module is done; its log is kept for the tests
that read it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from novakit.context import RequestContext
from novakit.db.engine import Database
from tests.conftest import PG_URL, need_real
from tests.pgdatabases import own_database
from tests.processes import process_table, terminate, with_descendants

NOVAKIT = [sys.executable, "-m", "novakit.cli.main"]


@dataclass
class Served:
    """One running service: where it answers, how it was set up, what it wrote to its log."""

    url: str
    env: dict[str, str]
    db_url: str
    password: str
    log: Path
    keys: Path
    pid: int
    #: every token and password a test handed to the service: none may show in the log
    secrets: list[str] = field(default_factory=list)
    #: the certificate to trust (a service started with TLS), else True
    verify: str | bool = True

    def novakit(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*NOVAKIT, *args], env={**self.env, **env}, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done

    def database(self) -> Database:
        return Database(self.db_url)

    def client(self) -> httpx.Client:
        verify = ssl.create_default_context(cafile=self.verify) if isinstance(self.verify, str) else True
        return httpx.Client(base_url=self.url, timeout=30, verify=verify)

    def password_auth(
        self, user: str = "admin", password: str | None = None, project: str | None = "admin"
    ) -> dict[str, Any]:
        """A ``POST /v3/auth/tokens`` body, as keystoneauth's password plugin sends it."""
        body: dict[str, Any] = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": user,
                            "domain": {"name": "Default"},
                            "password": self.password if password is None else password,
                        }
                    },
                }
            }
        }
        if project is not None:
            body["auth"]["scope"] = {"project": {"name": project, "domain": {"name": "Default"}}}
        return body

    def issue(self, user: str = "admin", password: str | None = None, project: str | None = "admin") -> str:
        with self.client() as http:
            answer = http.post("/identity/v3/auth/tokens", json=self.password_auth(user, password, project))
        assert answer.status_code == 201, answer.text
        token = answer.headers["x-subject-token"]
        self.secrets.append(token)
        return token

    def validate(self, subject: str, caller: str | None = None) -> httpx.Response:
        headers = {"X-Auth-Token": caller or subject, "X-Subject-Token": subject}
        with self.client() as http:
            return http.get("/identity/v3/auth/tokens", headers=headers)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until_answering(served: Served, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    log = served.log
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"novakit serve ended with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError), served.client() as http:
            if http.get("/identity/v3", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    pytest.fail(f"novakit serve did not answer within 60 s:\n{log.read_text()}")


@contextlib.contextmanager
def _database(backend: str, directory: Path, tag: str) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'novakit.db'}"
        return
    if not PG_URL:
        need_real("NOVAKIT_TEST_PG_URL is not set (tests/services/postgres.sh start prints it)")
    with own_database(f"nksrv_{os.getpid()}_{tag}") as url:
        yield url


@contextlib.contextmanager
def serve_cloud(
    backend: str, directory: Path, tag: str, *extra_args: str, tls: tuple[Path, Path] | None = None
) -> Iterator[Served]:
    """Bootstrap a database and serve it (the module docstring); ``extra_args`` go to serve;
    ``tls``: (certificate, key) to serve https with."""
    with _database(backend, directory, tag) as db_url:
        port = free_port()
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        if tls:
            extra_args = (*extra_args, "--ssl-certfile", str(tls[0]), "--ssl-keyfile", str(tls[1]))
        password = "pw-" + secrets.token_urlsafe(16)
        env = {
            **os.environ,
            "NOVAKIT_DB_URL": db_url,
            "NOVAKIT_STATE_DIR": str(directory / "state"),
            "NOVAKIT_FERNET_KEYS": str(directory / "fernet-keys"),
            "NOVAKIT_PROJECT": "admin",
            "NOVAKIT_USER": "admin",
            "NOVAKIT_ROLES": "admin",
        }
        env.pop("NOVAKIT_TOKEN_EXPIRATION", None)
        log = directory / "serve.log"
        served = Served(url, env, db_url, password, log, directory / "fernet-keys", 0, [password])
        served.verify = str(tls[0]) if tls else True
        if backend != "sqlite":
            served.novakit("db", "upgrade")
        served.novakit("identity", "fernet-setup")
        served.novakit("identity", "bootstrap", "--public-url", url, NOVAKIT_BOOTSTRAP_PASSWORD=password)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [*NOVAKIT, "serve", "--bind", f"127.0.0.1:{port}", "--log-level", "debug", *extra_args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        served.pid = process.pid
        try:
            _wait_until_answering(served, process)
            yield served
        finally:
            terminate(with_descendants([process.pid], process_table()))
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.contextmanager
def identity_session(served: Served) -> Iterator[Any]:
    """A write transaction on the served database, for what the service has no route for yet
    (users other than the admin, disabling, a new password, taking a role away)."""
    db = served.database()
    try:
        with db.writer() as session:
            yield session
    finally:
        db.dispose()


def keystone_admin(served: Served) -> RequestContext:
    """The library's caller for the bootstrap admin as the service knows it: its token's user and
    project ids (Keystone's), not the operator path's project names."""
    body = served.validate(served.issue()).json()["token"]
    return RequestContext(project_id=body["project"]["id"], user_id=body["user"]["id"], roles=["admin"])


def make_lan(db: Database, owner: RequestContext) -> str:
    """The network ``lan`` (with its subnet 10.0.0.0/24) of ``owner``'s project; its id."""
    from novakit.network import networks, subnets

    net = networks.create(db, owner, {"name": "lan"})
    subnets.create(db, owner, {"name": "lan-v4", "network": "lan", "cidr": "10.0.0.0/24"})
    return str(net["id"])


def add_user(served: Served, name: str, password: str, role: str = "member", project: str = "admin") -> None:
    from novakit.identity import assignments, projects, roles, users

    with identity_session(served) as session:
        user = users.create(session, name, password)
        found_project, found_role = projects.find(session, project), roles.find(session, role)
        assert found_project is not None and found_role is not None
        assignments.grant(session, user, found_project, found_role)
    served.secrets.append(password)


def identity_tables_text(served: Served) -> str:
    """Every row of the identity tables (and the audit trail's), as text: what a test searches
    for a secret that should not be there."""
    from sqlalchemy import MetaData

    db = served.database()
    try:
        meta = MetaData()
        meta.reflect(db.engine)
        rows = []
        with db.engine.connect() as conn:
            for name, table in meta.tables.items():
                if name.startswith(("identity_", "instance_action")):
                    rows += [repr(tuple(r)) for r in conn.execute(table.select())]
        return "\n".join(rows)
    finally:
        db.dispose()


OPENSTACK = Path(sys.executable).parent / "openstack"


def os_env(
    served: Served, user: str = "admin", password: str | None = None, project: str = "admin", **over: str
) -> dict[str, str]:
    """The environment the real ``openstack`` command authenticates with: this service's
    identity URL, ``user`` (its password, by default the admin's) scoped to ``project``; ``over``
    replaces any ``OS_*`` variable. No ``OS_*`` of the test's own environment leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(
        OS_AUTH_URL=f"{served.url}/identity/v3",
        OS_IDENTITY_API_VERSION="3",
        OS_USERNAME=user,
        OS_PASSWORD=password or served.password,
        OS_PROJECT_NAME=project,
        OS_USER_DOMAIN_NAME="Default",
        OS_PROJECT_DOMAIN_NAME="Default",
        OS_INTERFACE="public",
        OS_REGION_NAME="RegionOne",
    )
    env.update(over)
    return env


def openstack(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``openstack`` command of the tests' venv, run to its end."""
    return subprocess.run([str(OPENSTACK), *args], env=env, capture_output=True, text=True, timeout=120)
