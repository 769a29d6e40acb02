"""The collection as a user gets it: built, installed, its library installed from its own files, run by FQCN.

One copy of the checkout with the litter a working tree collects (build/, dist/, .state/, a database,
caches) is built with ``ansible-galaxy collection build``; the tarball must hold exactly the collection
and the library. It is installed into an empty collections path, the library is pip-installed (not
editable) from the same tarball into a fresh venv (the installed collection stays as it was: verify
passes), and everything after that runs from a
directory that is neither the checkout nor the collection, with that venv's Ansible: the playbooks by
FQCN, then an AWX-style job through ansible-runner, then ``novakit boot`` and ``novakit.runner``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit.context import RequestContext
from tests.e2e.prepared import BASE_CONFIG, api_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ADMIN = RequestContext("admin", "admin", ["admin"])
FAKE_HOSTS = ("compute-small", "compute-medium", "compute-large")

pytestmark = pytest.mark.e2e

# What the tarball holds, written from the rule in words (galaxy.yml's allow list is the other writing
# of it): the collection's own directories, the metadata files at the top, the generated changelog,
# and the library with what pip needs to build it. Never the checkout's own collections path.
TOP_FILES = {
    "README.md",
    "LICENSE",
    "CHANGELOG.rst",
    "requirements.txt",
    "bindep.txt",
    "pyproject.toml",
    "changelogs/changelog.yaml",
}
TREES = ("plugins/", "roles/", "meta/", "playbooks/", "novakit/")
NOT_PACKED = ("playbooks/collections/", "meta/awx/context/")


def _packed(path: str) -> bool:
    if path in TOP_FILES:
        return True
    return path.startswith(TREES) and not path.startswith(NOT_PACKED)


def _clean_env(**extra: str) -> dict[str, str]:
    """This machine's environment without anything that points at the checkout or its venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANSIBLE_", "NOVAKIT_", "VIRTUAL_ENV", "PYTHON")) and k != "JOB_ID"
    }
    return {**env, "NOVAKIT_PROJECT": "admin", "NOVAKIT_USER": "admin", "NOVAKIT_ROLES": "admin", **extra}


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def tracked() -> list[str]:
    out = _run(["git", "ls-files", "-z"], cwd=ROOT, check=True).stdout
    return [p for p in out.split("\0") if p]


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    # Not under pytest's basetemp: other pytest sessions of the same user on this machine prune
    # basetemps they think old, and this module's directories live for minutes.
    path = Path(tempfile.mkdtemp(prefix="novakit-collection-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def built(base: Path, tracked: list[str]) -> dict[str, Any]:
    """The copied checkout with strays, its tarball, the installed collection, and a venv with the library."""
    src = base / "checkout"
    for rel in tracked:
        source, dest = ROOT / rel, src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            dest.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, dest)
    strays = [
        "build/lib/novakit/cli.py",
        "dist/novakit-0.1.0-py3-none-any.whl",
        ".state/novakit.db",
        "x.db",
        "novakit/x.db",
        "__pycache__/conftest.cpython-311.pyc",
        "novakit/__pycache__/cli.cpython-311.pyc",
        "plugins/modules/__pycache__/server.cpython-311.pyc",
        "novakit.egg-info/PKG-INFO",
        ".venv/bin/python",
        "novakit-cloud-0.0.1.tar.gz",
        # What building the execution environment leaves next to its definition.
        "meta/awx/novakit-cloud-0.1.0.tar.gz",
        "meta/awx/context/_build/requirements.yml",
    ]
    for rel in strays:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("stray\n")
    out = base / "out"
    proc = _run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out)], cwd=src)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = out.glob("novakit-cloud-*.tar.gz")

    collections = base / "collections"
    collections.mkdir()
    proc = _run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(collections),
            str(tarball),
        ],
        cwd=base,
        # Only the empty path counts: a novakit.cloud in ~/.ansible/collections would make it "Nothing to do".
        env=_clean_env(ANSIBLE_COLLECTIONS_PATH=str(collections)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = collections / "ansible_collections" / "novakit" / "cloud"
    installed_files = {str(p.relative_to(installed)) for p in installed.rglob("*") if p.is_file()}

    venv = base / "venv"
    # A venv of its own (no system site-packages). This pip installs into it (--python): the venv's own
    # copy of pip would only cost time. Not editable: the library is built from the collection's files
    # and copied into the venv's site-packages.
    proc = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert proc.returncode == 0, proc.stderr
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(venv / "bin" / "python"),
        "install",
        "-q",
        "--no-compile",
    ]
    # From the tarball (README): pip unpacks and builds it in a directory of its own. Built from the
    # installed collection it wrote build/ and novakit.egg-info/ into it, and verify then failed.
    proc = _run([*pip, str(tarball)], env=_clean_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {str(p.relative_to(installed)) for p in installed.rglob("*") if p.is_file()} == installed_files
    proc = _run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "verify",
            "--offline",
            "-p",
            str(collections),
            "novakit.cloud",
        ],
        cwd=base,
        env=_clean_env(ANSIBLE_COLLECTIONS_PATH=str(collections)),
    )
    assert proc.returncode == 0 and "Successfully verified" in proc.stdout, proc.stdout + proc.stderr
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return {
        "tarball": tarball,
        "collections": collections,
        "installed": installed,
        "installed_files": installed_files,
        "venv": venv,
        "elsewhere": elsewhere,
    }


def test_the_tarball_holds_exactly_the_collection_and_the_library(
    built: dict[str, Any], tracked: list[str]
) -> None:
    files = {p for p in tracked if _packed(p) and not (ROOT / p).is_symlink()} | {
        "MANIFEST.json",
        "FILES.json",
    }
    dirs = {str(parent) for p in files for parent in Path(p).parents if str(parent) != "."}
    with tarfile.open(built["tarball"]) as tar:
        members = {m.name.rstrip("/") for m in tar.getmembers()}
    assert sorted(members - files - dirs) == [], "packed but not part of the collection"
    assert sorted((files | dirs) - members) == [], "part of the collection but not packed"
    # Installed, the same files: the library with its build recipe, for pip.
    assert built["installed_files"] == files
    assert {"pyproject.toml", "novakit/runner.py", "novakit/data/local_inventory.yml"} <= files


@pytest.fixture(scope="module")
def fleet(built: dict[str, Any], base: Path) -> dict[str, str]:
    """The embedded default's state in a temp dir, its fake fleet registered by novakit.cloud.compute_node."""
    root = base / "fleet"
    root.mkdir()
    (root / "novakit.toml").write_text(BASE_CONFIG)
    (root / "tmp").mkdir()
    env = _clean_env(
        PATH=f"{built['venv'] / 'bin'}:{os.environ.get('PATH', '')}",
        ANSIBLE_COLLECTIONS_PATH=str(built["collections"]),
        NOVAKIT_STATE_DIR=str(root / "state"),
        NOVAKIT_FAKE_STATE_DIR=str(root / "state" / "fake"),
        NOVAKIT_CONFIG=str(root / "novakit.toml"),
        # The runner's private directories go here: what is left after a run is visible.
        TMPDIR=str(root / "tmp"),
    )
    proc = _py(built, env, "from novakit import runner; print(runner.default_inventory())")
    inventory = Path(proc.stdout.strip())
    # The installed library's own copy, not the checkout's inventory/local.yml.
    assert inventory.is_relative_to(built["venv"]), inventory
    env["INVENTORY"] = str(inventory)
    _playbook(built, env, "novakit.cloud.compute_node")
    return env


def _py(built: dict[str, Any], env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    proc = _run([str(built["venv"] / "bin" / "python"), "-c", code], cwd=built["elsewhere"], env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _playbook(built: dict[str, Any], env: dict[str, str], fqcn: str, *extra: str, ok: bool = True) -> str:
    cmd = [str(built["venv"] / "bin" / "ansible-playbook"), "-i", env["INVENTORY"], fqcn, *extra]
    proc = _run(cmd, cwd=built["elsewhere"], env=env)
    assert (proc.returncode == 0) is ok, proc.stdout[-4000:] + proc.stderr[-3000:]
    return proc.stdout


def _servers(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    api = api_for(env)
    return {s["name"]: s for s in api.list(ADMIN)}


def test_the_playbooks_run_by_fqcn_from_another_directory(
    built: dict[str, Any], fleet: dict[str, str]
) -> None:
    _playbook(
        built, fleet, "novakit.cloud.boot", "-e", "server_name=web", "-e", "count=2", "-e", "flavor=m1.tiny"
    )
    servers = _servers(fleet)
    assert {n: (s["status"], s["vm_state"]) for n, s in servers.items()} == {
        "web-1": ("ACTIVE", "active"),
        "web-2": ("ACTIVE", "active"),
    }
    assert all(s["host"] in FAKE_HOSTS for s in servers.values())

    _playbook(built, fleet, "novakit.cloud.server_action", "-e", "server_action=stop", "-e", "servers=web-1")
    _playbook(built, fleet, "novakit.cloud.delete", "-e", "servers=web-2")
    servers = _servers(fleet)
    assert {n: s["vm_state"] for n, s in servers.items()} == {"web-1": "stopped"}

    # The guest of web-1 vanishes from its (fake) hypervisor behind novakit's back: heal finds it.
    uuid = servers["web-1"]["id"]
    host_file = Path(fleet["NOVAKIT_FAKE_STATE_DIR"]) / f"{servers['web-1']['host']}.json"
    state = json.loads(host_file.read_text())
    del state["instances"][uuid]
    host_file.write_text(json.dumps(state))
    _playbook(built, fleet, "novakit.cloud.heal")
    healed = _servers(fleet)["web-1"]
    assert healed["vm_state"] == "error", healed
    assert healed["fault"]["message"]


def _failing(env: dict[str, str]) -> dict[str, str]:
    """Every fake host fails every spawn (the fake driver's failure injection)."""
    return {
        **env,
        **{f"NOVAKIT_FAKE_FAILURE_{h.upper().replace('-', '_')}": "fail_every_spawn" for h in FAKE_HOSTS},
    }


def _awx_job(built: dict[str, Any], env: dict[str, str], name: str, job_id: int) -> dict[str, Any]:
    """ansible-runner as AWX drives it: its own private directory, the job id, the env of a credential."""
    code = textwrap.dedent(
        f"""
        import json, os, sys, tempfile
        import ansible_runner
        private = tempfile.mkdtemp()
        r = ansible_runner.run(
            private_data_dir=private,
            playbook="novakit.cloud.boot",
            inventory=os.environ["INVENTORY"],
            extravars={{"server_name": {name!r}, "flavor": "m1.tiny", "awx_job_id": {job_id}}},
            envvars={{"JOB_ID": "{job_id}", "ANSIBLE_CALLBACKS_ENABLED": "novakit.cloud.novakit"}},
            quiet=True,
        )
        stats = [e["event_data"] for e in r.events if e["event"] == "playbook_on_stats"]
        print(json.dumps({{"status": r.status, "rc": r.rc, "artifacts": stats[-1].get("artifact_data")}}))
        """
    )
    return json.loads(_py(built, env, code).stdout.strip().splitlines()[-1])


def test_an_awx_job_through_ansible_runner(built: dict[str, Any], fleet: dict[str, str]) -> None:
    job = _awx_job(built, fleet, "awx", 4242)
    assert (job["status"], job["rc"]) == ("successful", 0), job
    # set_stats data is what AWX shows as the job's artifacts.
    (published,) = job["artifacts"]["novakit_servers"]
    assert job["artifacts"]["novakit_request_id"] == "req-awx-4242"
    assert published["name"] == "awx" and published["status"] == "ACTIVE"
    actions = api_for(fleet).list_actions(ADMIN, "awx")
    assert [(a["action"], a["request_id"]) for a in actions] == [("create", "req-awx-4242")]

    # Every fake host fails every spawn: the servers end in error, and the job fails as AWX shows it.
    failing = _failing(fleet)
    job = _awx_job(built, failing, "doomed", 4243)
    assert job["status"] == "failed" and job["rc"] != 0, job
    assert _servers(fleet)["doomed"]["vm_state"] == "error"
    actions = api_for(fleet).list_actions(ADMIN, "doomed")
    assert [(a["action"], a["request_id"]) for a in actions] == [("create", "req-awx-4243")]


def test_novakit_boot_and_the_runner_use_the_installed_collection(
    built: dict[str, Any], fleet: dict[str, str]
) -> None:
    tmp = Path(fleet["TMPDIR"])
    code = textwrap.dedent(
        """
        import json
        from novakit import runner
        r = runner.run("boot", extravars={"server_name": "rn", "flavor": "m1.tiny", "awx_job_id": 4300})
        print(json.dumps({"ok": r.ok, "servers": r.servers, "request_id": r.request_id,
                          "playbook": runner.playbook_path("boot")}))
        """
    )
    result = json.loads(_py(built, fleet, code).stdout.strip().splitlines()[-1])
    assert result["ok"] and result["playbook"] == "novakit.cloud.boot", result
    assert [(s["name"], s["status"]) for s in result["servers"]] == [("rn", "ACTIVE")]
    # Run as an AWX job would run it, the library's runner names the request by the job id too.
    assert result["request_id"] == "req-awx-4300"
    assert [a["request_id"] for a in api_for(fleet).list_actions(ADMIN, "rn")] == ["req-awx-4300"]
    assert list(tmp.glob("novakit-runner-*")) == []

    novakit = str(built["venv"] / "bin" / "novakit")
    proc = _run([novakit, "boot", "cli", "--flavor", "m1.tiny"], cwd=built["elsewhere"], env=fleet)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _servers(fleet)["cli"]["status"] == "ACTIVE"

    # A failed boot says why: the playbook's last words name the server and its fault.
    failing = _failing(fleet)
    proc = _run([novakit, "boot", "nope", "--flavor", "m1.tiny"], cwd=built["elsewhere"], env=failing)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nope" in proc.stderr and "fake failure: every spawn" in proc.stderr, proc.stderr
    assert "ansible-playbook failed" in proc.stderr
    assert list(tmp.glob("novakit-runner-*")) == []
