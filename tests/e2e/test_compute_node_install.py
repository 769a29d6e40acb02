"""The compute_node role's install path (compute_node_install: true) on this machine as the host.

As root on Debian: apt of packages that are already there is a no-op, and the role's default
installs the library that came with the collection (here the checkout): packed on the controller,
copied to the host next to a virtual environment of the test's own, installed by pip from there,
with no package index asked for novakit. The fake driver gets no libvirt extra (libvirt-python
and what it compiles with are for the libvirt driver only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from sqlalchemy import text

from novakit.fleet import hosts
from tests.conftest import need_real
from tests.e2e.prepared import BASE_CONFIG, api_for
from tests.e2e.test_flows import play

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
INSTALL_TASKS = (
    "Install libvirt, QEMU and Python's venv",
    "Install what libvirt-python builds with (libvirt driver only)",
    "A scratch directory on the controller for the library's source archive",
    "Pack the library that came with this collection",
    "Make the directory for the library's source archive",
    "Copy the library's source archive to the host",
    "Remove the controller's scratch directory",
    "What the virtual environment holds before the install",
    "Install novakit into its own virtual environment",
    "Tell whether the install changed the virtual environment",
    "Ask whether libvirtd answers",
    "Find whether systemd runs the host",
    "Start virtlogd and libvirtd (hosts without systemd)",
    "Start libvirtd (hosts with systemd)",
    "Run novakit's modules on this host with the Python that has novakit",
)
INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  hosts:
    localhost:
  children:
    novakit_compute:
      hosts:
        compute-installed:
          # root on the host itself: nothing to become (a fresh Debian has no sudo)
          compute_node_become: false
          novakit_driver: fake
          novakit_driver_options: {vcpus: 6, memory_mb: 12288, local_gb: 77}
"""
DAEMONS = {"libvirtd": Path("/run/libvirtd.pid"), "virtlogd": Path("/run/virtlogd.pid")}


def running(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


@pytest.fixture
def root_on_debian() -> None:
    if os.geteuid() != 0:
        need_real(
            "the compute_node install test installs Debian packages and starts libvirtd: run it as root"
        )
    if shutil.which("apt-get") is None:
        need_real("the compute_node install test needs a Debian host (apt-get)")


def test_compute_node_install_on_this_machine(root_on_debian: None, tmp_path: Path) -> None:
    (tmp_path / "novakit.toml").write_text(BASE_CONFIG)
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    env = {
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_FAKE_STATE_DIR": str(tmp_path / "state" / "fake"),
        "NOVAKIT_CONFIG": str(tmp_path / "novakit.toml"),
    }
    venv = tmp_path / "venv"
    extravars = {"compute_node_install": True, "compute_node_venv": str(venv)}
    already = {name: running(pidfile) for name, pidfile in DAEMONS.items()}
    try:
        first = play("compute_node", tmp_path, env, extravars, inventory=tmp_path / "hosts.yml")
        assert first.ok, first.runner.stdout.read()

        check = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import importlib.metadata as m, importlib.util, json, novakit.host.manager, novakit;"
                "print(json.dumps([novakit.__file__, json.loads(m.distribution('novakit')"
                ".read_text('direct_url.json'))['url'], importlib.util.find_spec('libvirt') is None]))",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,  # not the checkout, which python -c would import first
        )
        assert check.returncode == 0, check.stderr
        where, source, no_libvirt = json.loads(check.stdout)
        assert where.startswith(str(venv)), where  # installed there, not the checkout
        # from the archive the role packed and copied, whose files are the checkout's
        assert source == f"file://{tmp_path / 'novakit-src.tar.gz'}"
        with tarfile.open(tmp_path / "novakit-src.tar.gz") as archive:
            packed = archive.getnames()
        library = {
            f"novakit-src/{p.relative_to(ROOT).as_posix()}"
            for p in (ROOT / "novakit").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        assert set(packed) - library == {"novakit-src/pyproject.toml", "novakit-src/README.md"} | {
            f"novakit-src/{p.name}" for p in ROOT.glob("LICENSE*")
        }
        assert library <= set(packed)
        assert no_libvirt, "the fake driver's host got libvirt-python"

        api = api_for(env)
        (host,) = hosts.list_hosts(api.db, api.conf)
        assert (host["host"], host["status"], host["state"], host["driver"]) == (
            "compute-installed",
            "enabled",
            "up",
            "fake",
        )
        assert host["capacity"]["VCPU"] > 0 and host["capacity"]["DISK_GB"] > 0, host
        with api.db.reader() as session:
            node = session.execute(text("SELECT vcpus, memory_mb, local_gb FROM compute_nodes")).one()
        assert tuple(node) == (6, 12288, 77)

        second = play("compute_node", tmp_path, env, extravars, inventory=tmp_path / "hosts.yml")
        assert second.ok, second.runner.stdout.read()
        changed = [
            e["event_data"]["task"]
            for e in second.runner.events
            if e.get("event") == "runner_on_ok" and e["event_data"]["res"].get("changed")
        ]
        assert not set(changed) & set(INSTALL_TASKS), changed
        # The role left libvirtd answering (started without systemd here, if it was not running).
        virsh = subprocess.run(["virsh", "-c", "qemu:///system", "version"], capture_output=True)
        assert virsh.returncode == 0, virsh.stderr
    finally:
        # Stop the daemons the role started for this test, by the pids in their pid files.
        for name, pidfile in DAEMONS.items():
            pid = running(pidfile)
            if already[name] is None and pid is not None:
                os.kill(pid, 15)
