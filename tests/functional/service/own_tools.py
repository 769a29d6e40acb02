"""The served cloud that novakit's own tools are tested against (issue 29, part 6): a
``novakit serve`` with fake hosts, a ``lan`` network, an admin (``nk``, by password) and a member
(``dev``, by application credential) in one clouds.yaml, and an environment that names no
database and points the embedded default at an empty directory (a call that fell back to a
database would find none of the cloud's servers, and would leave a file there).

The ``tools`` fixture (``cloud_for_tools``, which a test module imports) is module-scoped: each
test module that takes it gets a cloud of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from novakit.compute.api import API
from novakit.context import RequestContext
from tests.functional.cloud import make_cloud
from tests.functional.service.conftest import (
    Served,
    add_user,
    keystone_admin,
    make_lan,
    openstack,
    os_env,
    serve_cloud,
)
from tests.unit.test_awx_credential_type import inject

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


@dataclass
class Tools:
    served: Served
    directory: Path
    env: dict[str, str]  # no database URL; clouds.yaml with "nk" (the admin) and "dev" (a member)
    admin: RequestContext  # the admin as the service knows it
    awx: dict[str, str]  # what AWX's novakit credential injects for the member's application credential

    def novakit(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "novakit.cli.main", *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=180,
        )

    def play(self, path: Path, *options: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
        """ansible-playbook of ``path`` on localhost with this checkout's collection, in the
        tools' environment (no database URL), with ``options`` (``--check``, ``--diff``)."""
        return subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", *options, str(path)]
            + ["-e", f"ansible_python_interpreter={sys.executable}"],
            env={**self.env, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "playbooks" / "collections")},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )

    def server(self, name: str) -> dict[str, Any] | None:
        """The server of that name as the service's database has it (None: none, or deleted)."""
        db = self.served.database()
        try:
            return next((s for s in API(db).list(self.admin) if s["name"] == name), None)
        finally:
            db.dispose()

    def embedded_default_untouched(self) -> bool:
        return not any((self.directory / "own-state").rglob("*.db"))


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module", name="tools")
def cloud_for_tools(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    directory = tmp_path_factory.mktemp("own")
    with serve_cloud(backend, directory, "own") as served:
        add_user(served, "dev", "dev-pw-1", project="admin")
        db = served.database()
        try:
            make_cloud(db, directory)
            admin = keystone_admin(served)
            make_lan(db, admin)
        finally:
            db.dispose()
        # The member's application credential, made with the real openstack command (AWX's form).
        dev = os_env(served, user="dev", password="dev-pw-1")
        made = openstack(dev, "application", "credential", "create", "dev-cred", "-f", "json")
        assert made.returncode == 0, made.stderr
        cred = json.loads(made.stdout)
        served.secrets.append(cred["Secret"])
        by_credential = served.novakit(
            "identity",
            "clouds-yaml",
            "dev",
            "--application-credential-id",
            cred["ID"],
            OS_APPLICATION_CREDENTIAL_SECRET=cred["Secret"],
        ).stdout
        clouds = yaml.safe_load(by_credential)
        # The admin by password: a file the operator writes (clouds-yaml never writes a password).
        clouds["clouds"]["nk"] = {
            "auth": {
                "auth_url": f"{served.url}/identity/v3",
                "username": "admin",
                "password": served.password,
                "project_name": "admin",
                "user_domain_name": "Default",
                "project_domain_name": "Default",
            },
            "region_name": "RegionOne",
            "interface": "public",
            "identity_api_version": 3,
        }
        config = directory / "clouds.yaml"
        config.write_text(yaml.safe_dump(clouds))
        config.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "NOVAKIT_", "ANSIBLE_"))}
        env.update(
            OS_CLIENT_CONFIG_FILE=str(config),
            NOVAKIT_STATE_DIR=str(directory / "own-state"),
            PATH=f"{BIN}:{env.get('PATH', '')}",
            ANSIBLE_LOCAL_TEMP=str(directory / "ansible-tmp"),
            ANSIBLE_HOME=str(directory / "ansible-home"),
        )
        awx_files = directory / "awx"
        awx_files.mkdir()
        awx = inject(
            {
                "auth_url": f"{served.url}/identity/v3",
                "application_credential_id": cred["ID"],
                "application_credential_secret": cred["Secret"],
            },
            awx_files,
        )
        yield Tools(served, directory, env, admin, awx)
