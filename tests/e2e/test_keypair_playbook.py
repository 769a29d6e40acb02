"""The keypair module and boot.yml's key_name through ansible-playbook (issue 26): one run of each."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from novakit import runner
from novakit.context import RequestContext
from novakit.keypairs import registry as keypairs
from novakit.virt.driver import load_driver
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.runner import run_playbook, task_results
from tests.functional.test_keypairs import ED25519, ED25519_FP, RSA

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
ADMIN = RequestContext.admin()


def test_the_keypair_module_and_boot_yml_s_key_name(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    private_file = tmp_path / "id_deploy"
    # novakit.runner.run: the collection of this checkout, for a playbook outside playbooks/.
    run = runner.run(
        ROOT / "tests" / "e2e" / "playbooks" / "keypairs.yml",
        private_data_dir=tmp_path / "runner",
        envvars=env,
        extravars={"imported_key": ED25519, "other_key": RSA, "private_key_file": str(private_file)},
    )
    assert run.ok, run.stdout
    (imported,) = task_results(run, "Import a public key")
    assert imported["changed"] and imported["keypair"]["fingerprint"] == ED25519_FP
    assert "private_key" not in imported["keypair"]
    assert task_results(run, "Import it again")[0]["changed"] is False
    assert task_results(run, "Generate it again (it exists)")[0]["changed"] is False
    (clash,) = task_results(run, "Another key under a taken name")
    assert "cannot change" in clash["msg"]

    # The private key reached the file the play named, and no event.
    private = serialization.load_ssh_private_key(private_file.read_bytes(), password=None)
    assert stat.S_IMODE(private_file.stat().st_mode) == 0o600
    api = api_for(env)
    deploy = keypairs.show(api.db, ADMIN, "deploy")
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert deploy["public_key"].split()[:2] == public.decode().split()
    body = "".join(private_file.read_text().splitlines()[1:-1])[:60]
    assert body not in json.dumps(run.events, default=str) and body not in run.stdout

    boot = run_playbook("boot.yml", tmp_path, env, {"server_name": "keyed", "key_name": "deploy"})
    assert boot.rc == 0, boot.stdout.read()
    server = api.get(ADMIN, "keyed")
    assert server["status"] == "ACTIVE" and server["key_name"] == "deploy"
    fake = load_driver("fake", server["host"], {"state_dir": env["NOVAKIT_FAKE_STATE_DIR"]})
    guest = json.loads(fake.state_file.read_text())
    assert guest["instances"][server["id"]]["ssh_authorized_keys"] == [deploy["public_key"]]
