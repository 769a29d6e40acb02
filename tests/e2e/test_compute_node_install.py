"""The compute_node role's install path (compute_node_install: true) on this machine as the host.

As root on Debian: apt of packages that are already there is a no-op, and pip installs the
repository checkout (a copy of its package) into a virtual environment of the test's own,
without the libvirt extra: the fake driver needs no libvirt-python, and compiling it would
add about a minute.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from novakit.compute import hosts
from tests.conftest import need_real
from tests.e2e.prepared import BASE_CONFIG, api_for
from tests.e2e.test_flows import play

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
INSTALL_TASKS = (
    "Install libvirt, QEMU and what libvirt-python builds with",
    "What the virtual environment holds before the install",
    "Install novakit into its own virtual environment",
    "Tell whether the install changed the virtual environment",
    "Ask whether libvirtd answers",
    "Find the host's service manager (the play may not gather facts)",
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


def checkout_snapshot(dest: Path) -> Path:
    """The checkout's package as it is now, for pip: pip builds a directory in place (build/,
    egg-info), and the shared tree may change between the test's two runs."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "novakit", dest / "novakit", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


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
    extravars = {
        "compute_node_install": True,
        "compute_node_venv": str(venv),
        "compute_node_package": str(checkout_snapshot(tmp_path / "checkout")),
    }
    already = {name: running(pidfile) for name, pidfile in DAEMONS.items()}
    try:
        first = play("compute_node", tmp_path, env, extravars, inventory=tmp_path / "hosts.yml")
        assert first.ok, first.runner.stdout.read()

        check = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import novakit.compute.manager, novakit; print(novakit.__file__)",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,  # not the checkout, which python -c would import first
        )
        assert check.returncode == 0, check.stderr
        assert check.stdout.startswith(str(venv)), check.stdout  # installed there, not the checkout

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
