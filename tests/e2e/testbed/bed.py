"""K compute hosts on one machine: one Unix user, one session libvirtd and one SSH login each.

Everything lives under one base directory (``NOVAKIT_TESTBED_DIR``, default /opt/novakit-testbed):

``venv/``            a Python the hosts' users can run (/root is 0700, so the repository's .venv is not
                     theirs), with a copy of the repository's library, made anew whenever its sources
                     change: hosts run the current code, from a checkout at any path
``images/``          the image store every host reads and writes (one store, as a shared Glance
                     file store): the tiny guest, world-readable, and the snapshots the hosts
                     write; writable by the group ``nk-hosts`` of the hosts' users, sticky, so a
                     host removes only the images it wrote
``run/``             this bring-up: sshd config, host key, the client key, known_hosts, authorized keys,
                     pid file, ``inventory.yml``, ``state.json``
``home/nk-hN``       each host user's home: its instances and image cache, and ``.ssh/id_ed25519``,
                     the host's own key, with which it reaches the other hosts' daemons for a move

``venv/`` and the tiny guest in ``images/`` are caches kept by ``down`` (``down(purge=True)`` removes
them too); everything else (the hosts' snapshots too), and every process started here, goes.
Processes are found by pid: the pid files of sshd, the libvirtds, their virtlogds and guests, and
the descendants of those and of sshd's sessions; never by user (a uid can be reused by someone
else's processes).
Only 127.0.0.1 is ever listened on.

Moves: the two hosts of a move talk to each other's daemons, as nova-compute's libvirt does
(the destination reads a cold move's disks from the source's daemon; the source drives a live
migration into the destination's). A session daemon's socket is its user's alone, so each host
reaches the others the way Ansible reaches it: ``qemu+ssh://nk-hM@127.0.0.1:<port>/session``
(its ``migration_uri``), logging in with its own key, which every other host's
``authorized_keys`` holds; QEMU's stream goes to 127.0.0.1 (``live_migration_inbound_addr``).
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests import processes

REPO = Path(__file__).resolve().parents[3]
DEFAULT_BASE = Path(os.environ.get("NOVAKIT_TESTBED_DIR", "/opt/novakit-testbed"))
TINY_IMAGE_DIR = Path(os.environ.get("NOVAKIT_TINY_IMAGE_DIR", REPO / ".state" / "tiny-image"))
IMAGE_FILES = ("vmlinuz", "initrd.img", "root.qcow2", "cmdline")
# Besides novakit/, what the hosts' copy of the library is built from.
SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE")
USER_PREFIX = "nk-h"
#: the hosts' users' common group: theirs is the image store
HOSTS_GROUP = "nk-hosts"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Debian packages that provide the commands bring-up runs.
NEEDED_COMMANDS = {
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "libvirtd": "libvirt-daemon-system",
    "virsh": "libvirt-clients",
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "useradd": "passwd",
    "runuser": "util-linux",
}


class TestbedError(RuntimeError):
    """Bring-up or tear-down could not be done; the message says what to fix."""


@dataclass(frozen=True)
class TestbedHost:
    """One compute "host": an inventory name that is also its Unix user."""

    __test__ = False

    name: str
    uid: int
    home: Path

    @property
    def runtime_dir(self) -> Path:
        return Path(f"/run/user/{self.uid}")

    @property
    def libvirtd_pidfile(self) -> Path:
        return self.runtime_dir / "libvirt" / "libvirtd.pid"

    @property
    def libvirt_socket(self) -> Path:
        return self.runtime_dir / "libvirt" / "libvirt-sock"

    @property
    def instances_path(self) -> Path:
        return self.home / "instances"

    @property
    def image_cache_path(self) -> Path:
        return self.home / "image-cache"

    @property
    def ssh_dir(self) -> Path:
        return self.home / ".ssh"

    @property
    def move_key(self) -> Path:
        """The key this host logs in to the other hosts with, for a move. At ssh's default
        place: a host's ``migration_uri`` is the same for every host that connects to it, so
        it cannot name the connecting host's key file; each one's ssh finds its own here."""
        return self.ssh_dir / "id_ed25519"

    def env(self) -> dict[str, str]:
        """The environment of this host's processes (and of its SSH sessions, through sshd's SetEnv).

        LIBVIRT_AUTOSTART=0: a client that finds no daemon fails instead of starting one of its own,
        so a stopped libvirtd stays stopped, as on a real host.
        """
        return {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": SYSTEM_PATH,
            "XDG_RUNTIME_DIR": str(self.runtime_dir),
            "LIBVIRT_AUTOSTART": "0",
        }


def _pid_alive(pid: int, comm: str | None = None) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if comm is None:
        return True
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == comm
    except OSError:
        return False


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source_digest() -> str:
    """A hash of what the hosts' copy of the library is built from."""
    digest = hashlib.sha256()
    files = [REPO / name for name in SOURCE_FILES]
    files += sorted(p for p in (REPO / "novakit").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Testbed:
    """Bring-up, tear-down and the handles the tests use (stop a daemon, run virsh as a host)."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, base: Path = DEFAULT_BASE, hosts: int = 3, image_dir: Path = TINY_IMAGE_DIR) -> None:
        self.base = Path(base)
        self.count = hosts
        self.image_dir = Path(image_dir)
        self.venv = self.base / "venv"
        self.image_store = self.base / "images"
        self.run_dir = self.base / "run"
        self.homes = self.base / "home"
        self.state_file = self.run_dir / "state.json"
        self.inventory_path = self.run_dir / "inventory.yml"
        self.client_key = self.run_dir / "id_ed25519"
        self.host_key = self.run_dir / "ssh_host_ed25519_key"
        self.known_hosts = self.run_dir / "known_hosts"
        self.authorized_keys = self.run_dir / "authorized_keys"
        self.sshd_config = self.run_dir / "sshd_config"
        self.sshd_pidfile = self.run_dir / "sshd.pid"
        self.control_path_dir = self.run_dir / "cp"

    # --- what is there ----------------------------------------------------------------

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def names(self) -> list[str]:
        return [f"{USER_PREFIX}{i}" for i in range(1, self.count + 1)]

    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_file.read_text()))
        except (OSError, ValueError):
            return {}

    @property
    def port(self) -> int:
        port = self.state().get("port")
        if not port:
            raise TestbedError(f"the testbed in {self.base} is not up (no {self.state_file})")
        return int(port)

    def host(self, name: str) -> TestbedHost:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise TestbedError(f"user {name} does not exist; run bring-up first") from None
        return TestbedHost(name=name, uid=pw.pw_uid, home=Path(pw.pw_dir))

    def hosts(self) -> list[TestbedHost]:
        return [self.host(n) for n in self.names()]

    def sshd_pid(self) -> int | None:
        pid = processes.read_pid(self.sshd_pidfile)
        return pid if pid is not None and _pid_alive(pid, "sshd") else None

    def libvirtd_pid(self, host: TestbedHost) -> int | None:
        pid = processes.read_pid(host.libvirtd_pidfile)
        return pid if pid is not None and _pid_alive(pid, "libvirtd") else None

    def status(self) -> dict[str, Any]:
        """What runs, per piece: for ``testbed.sh status`` and for the tests' preconditions."""
        out: dict[str, Any] = {
            "base": str(self.base),
            "sshd": None,
            "port": self.state().get("port"),
            "inventory": str(self.inventory_path),
            "hosts": {},
        }
        out["sshd"] = self.sshd_pid()
        for name in self.state().get("hosts", self.names()):
            try:
                h = self.host(name)
            except TestbedError:
                out["hosts"][name] = {"user": False}
                continue
            out["hosts"][name] = {
                "user": True,
                "uid": h.uid,
                "libvirtd": self.libvirtd_pid(h),
                "guests": len(self.domains(h)) if self.libvirtd_pid(h) else None,
            }
        return out

    def is_up(self) -> bool:
        st = self.status()
        return (
            bool(st["sshd"])
            and len(st["hosts"]) == self.count
            and all(h.get("libvirtd") for h in st["hosts"].values())
        )

    # --- running things as a host -----------------------------------------------------

    def as_user(
        self, host: TestbedHost, argv: list[str], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = [f"{k}={v}" for k, v in host.env().items()]
        cmd = ["runuser", "-u", host.name, "--", "env", "-i", *env, *argv]
        if check:
            return _run(cmd)
        return subprocess.run(cmd, capture_output=True, text=True)

    def virsh(self, host: TestbedHost, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.as_user(host, ["virsh", "-q", "-c", "qemu:///session", *args], check=check)

    def domains(self, host: TestbedHost) -> list[str]:
        """Names of every domain of this host's daemon, running or not."""
        proc = self.virsh(host, "list", "--all", "--name", check=False)
        return [line.strip() for line in proc.stdout.splitlines() if line.strip()]

    def ssh(
        self, host: TestbedHost, command: str, port: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on the host the way Ansible reaches it (for checks; never raises)."""
        return subprocess.run(
            [
                "ssh",
                "-p",
                str(port or self.port),
                "-i",
                str(self.client_key),
                *self._ssh_options(),
                "-o",
                "ConnectTimeout=5",
                f"{host.name}@127.0.0.1",
                command,
            ],
            capture_output=True,
            text=True,
        )

    def _ssh_options(self) -> list[str]:
        return [
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
        ]

    # --- bring-up ---------------------------------------------------------------------

    def up(self) -> None:
        """Make every piece run; pieces that already run are left as they are."""
        if os.geteuid() != 0:
            raise TestbedError("the testbed makes users and daemons: run it as root")
        missing = sorted(
            {pkg for cmd, pkg in NEEDED_COMMANDS.items() if shutil.which(cmd, path=SYSTEM_PATH) is None}
        )
        if missing:
            raise TestbedError(f"missing Debian packages: {' '.join(missing)} (apt-get install them)")
        for d in (self.base, self.run_dir, self.homes, self.image_store, self.authorized_keys):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o755)
        os.chown(self.image_store, 0, self._hosts_group())
        self.image_store.chmod(0o1775)
        self.control_path_dir.mkdir(mode=0o700, exist_ok=True)
        self._image_store()
        self._venv()
        self._keys()
        hosts = [self._user(name) for name in self.names()]
        for host in hosts:  # once every host has its key
            self.authorize(host)
        self._start_libvirtds(hosts)
        self._sshd(hosts)
        self.write_inventory(self.inventory_path)
        self.state_file.write_text(json.dumps({**self.state(), "hosts": self.names()}, indent=2))

    def _image_store(self) -> None:
        if not (self.image_dir / "SHA256SUMS").exists():
            script = REPO / "tests" / "images" / "build-tiny-image.sh"
            _run([str(script), str(self.image_dir)])
        for name in IMAGE_FILES:
            src, dst = self.image_dir / name, self.image_store / name
            if not dst.exists() or _sha256(src) != _sha256(dst):
                tmp = dst.with_suffix(".tmp")
                shutil.copyfile(src, tmp)
                tmp.chmod(0o644)
                tmp.replace(dst)

    def _venv(self) -> None:
        """The hosts' Python: Debian's python3 with a copy of the repository's current library.

        A copy, not an editable install: the hosts' users cannot read a checkout under a home
        directory such as /root. The copy is stamped with a hash of the sources and made anew
        whenever they change, so the hosts always run the code under test.
        """
        stamp = self.venv / "novakit-source.sha256"
        digest = _source_digest()
        if self.python.exists() and stamp.exists() and stamp.read_text() == digest:
            # From /: run in the checkout, "-c" would find its novakit/ instead of the copy.
            probe = subprocess.run(
                [str(self.python), "-c", "import libvirt, novakit"], capture_output=True, cwd="/"
            )
            if probe.returncode == 0:
                return
        if not self.python.exists():
            # Debian's python3: the pyenv Python under /root is out of the hosts' users' reach.
            _run(["/usr/bin/python3", "-m", "venv", str(self.venv)])
        with tempfile.TemporaryDirectory(prefix="novakit-src-") as tmp:
            src = Path(tmp) / "novakit"
            src.mkdir()
            for name in SOURCE_FILES:
                shutil.copy2(REPO / name, src / name)
            shutil.copytree(REPO / "novakit", src / "novakit", ignore=shutil.ignore_patterns("__pycache__"))
            pip = [str(self.venv / "bin" / "pip"), "install", "-q", "--no-cache-dir"]
            _run([*pip, "--force-reinstall", "--no-deps", str(src)])
            _run([*pip, f"{src}[libvirt]"])
        for path in [self.venv, *self.venv.rglob("*")]:
            mode = path.lstat().st_mode
            if not path.is_symlink():
                path.chmod(mode | 0o044 | (0o011 if mode & 0o100 else 0))
        stamp.write_text(digest)

    def _keys(self) -> None:
        for key in (self.client_key, self.host_key):
            if not key.exists():
                _run(
                    [
                        "ssh-keygen",
                        "-q",
                        "-t",
                        "ed25519",
                        "-N",
                        "",
                        "-C",
                        f"novakit-testbed {key.name}",
                        "-f",
                        str(key),
                    ]
                )

    def _hosts_group(self) -> int:
        try:
            return grp.getgrnam(HOSTS_GROUP).gr_gid
        except KeyError:
            _run(["groupadd", HOSTS_GROUP])
            return grp.getgrnam(HOSTS_GROUP).gr_gid

    def _user(self, name: str) -> TestbedHost:
        try:
            pwd.getpwnam(name)
        except KeyError:
            _run(
                [
                    "useradd",
                    "--create-home",
                    "--home-dir",
                    str(self.homes / name),
                    "--shell",
                    "/bin/sh",
                    "--user-group",
                    "--groups",
                    HOSTS_GROUP,
                    "--comment",
                    "novakit testbed compute host",
                    name,
                ]
            )
        # "*": no password login, yet not "locked" ("!"), which sshd without PAM refuses even for keys.
        _run(["usermod", "-p", "*", "-a", "-G", HOSTS_GROUP, name])
        host = self.host(name)
        for d in (host.runtime_dir, host.instances_path, host.image_cache_path):
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, host.uid, -1)
        host.runtime_dir.chmod(0o700)
        self._move_key(host)
        return host

    def _move_key(self, host: TestbedHost) -> None:
        """The host's own key (made by the host's user: ssh wants it private to its owner)."""
        if host.move_key.exists():
            return
        host.ssh_dir.mkdir(mode=0o700, exist_ok=True)
        os.chown(host.ssh_dir, host.uid, -1)
        comment = f"novakit-testbed {host.name}"
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(host.move_key)]
        self.as_user(host, keygen)

    def authorize(self, host: TestbedHost) -> None:
        """Let the run's key and the other hosts' keys log in as this host (undone by ``deauthorize``)."""
        keys = [self.client_key.with_suffix(".pub")]
        keys += [h.move_key.with_suffix(".pub") for h in self.hosts() if h.name != host.name]
        path = self.authorized_keys / host.name
        path.write_text("".join(k.read_text() for k in keys if k.exists()))
        path.chmod(0o644)

    def deauthorize(self, host: TestbedHost) -> None:
        (self.authorized_keys / host.name).unlink(missing_ok=True)

    def _start_libvirtds(self, hosts: list[TestbedHost]) -> None:
        for host in hosts:
            if self.libvirtd_pid(host) is None:
                self.start_libvirtd(host, wait=False)
        for host in hosts:
            self._wait_libvirtd(host)

    def start_libvirtd(self, host: TestbedHost, wait: bool = True) -> None:
        """This host's session daemon; it daemonizes and writes its pid file in its runtime dir."""
        if self.libvirtd_pid(host) is not None:
            return
        host.libvirtd_pidfile.unlink(missing_ok=True)
        self.as_user(host, ["libvirtd", "--daemon"])
        if wait:
            self._wait_libvirtd(host)

    def _wait_libvirtd(self, host: TestbedHost, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if host.libvirt_socket.exists() and self.virsh(host, "version", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise TestbedError(f"the libvirtd of {host.name} does not answer on {host.libvirt_socket}")

    def stop_libvirtd(self, host: TestbedHost) -> None:
        """Stop this host's daemon (its guests keep running, as when libvirtd dies on a real host)."""
        pid = self.libvirtd_pid(host)
        if pid is not None:
            processes.terminate([pid])
        host.libvirt_socket.unlink(missing_ok=True)

    def _sshd(self, hosts: list[TestbedHost]) -> None:
        """One sshd for all hosts; a running one keeps its port and re-reads a changed config (SIGHUP)."""
        pid = self.sshd_pid()
        port = int(self.state().get("port") or 0) if pid is not None else 0
        port = port or _free_port()
        config = self._sshd_config(hosts, port)
        sshd = shutil.which("sshd", path=SYSTEM_PATH) or "/usr/sbin/sshd"
        changed = not self.sshd_config.exists() or self.sshd_config.read_text() != config
        # sshd (also `sshd -t`) wants its privilege-separation directory; on a fresh machine
        # without systemd nothing has made it.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        if changed:
            self.sshd_config.write_text(config)
            _run([sshd, "-t", "-f", str(self.sshd_config)])
        if pid is None:
            _run([sshd, "-f", str(self.sshd_config)])
        elif changed:
            os.kill(pid, signal.SIGHUP)
            time.sleep(0.3)
        self.state_file.write_text(json.dumps({**self.state(), "port": port}, indent=2))
        self._wait_ssh(hosts[0])

    def _sshd_config(self, hosts: list[TestbedHost], port: int) -> str:
        lines = [
            "# novakit testbed: loopback only, keys only, this run's host key and users.",
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.sshd_pidfile}",
            f"AuthorizedKeysFile {self.authorized_keys}/%u",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin no",
            "UsePAM no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "PrintMotd no",
            # Ansible copies modules with sftp when it does not pipeline.
            "Subsystem sftp internal-sftp",
            "MaxStartups 100:30:200",
            "MaxSessions 50",
            f"AllowUsers {' '.join(h.name for h in hosts)}",
        ]
        # No systemd/PAM session here: sshd itself gives each user the runtime dir of its daemon.
        for h in hosts:
            env = " ".join(
                f"{k}={v}" for k, v in h.env().items() if k in ("XDG_RUNTIME_DIR", "LIBVIRT_AUTOSTART")
            )
            lines += [f"Match User {h.name}", f"    SetEnv {env}"]
        return "\n".join(lines) + "\n"

    def _wait_ssh(self, host: TestbedHost, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        proc = None
        while time.monotonic() < deadline:
            proc = self.ssh(host, "true")
            if proc.returncode == 0:
                return
            time.sleep(0.2)
        why = proc.stderr.strip() if proc else ""
        raise TestbedError(f"cannot log in as {host.name} on port {self.port}: {why}")

    # --- the inventory ----------------------------------------------------------------

    def inventory(self, port: int | None = None, host_ports: dict[str, int] | None = None) -> dict[str, Any]:
        """The Ansible inventory of the testbed; ``host_ports`` gives single hosts another port."""
        hosts: dict[str, Any] = {}
        for h in self.hosts():
            ssh_port = (host_ports or {}).get(h.name) or port or self.port
            hosts[h.name] = {
                "ansible_user": h.name,
                "novakit_driver_options": {
                    "uri": "qemu:///session",
                    "domain_type": "qemu",
                    "instances_path": str(h.instances_path),
                    "image_cache_path": str(h.image_cache_path),
                    "image_store": str(self.image_store),
                    # A soft reboot of the tiny guest takes a few seconds; do not wait a minute if it hangs.
                    "reboot_timeout": 30,
                    # How the other host of a move reaches this host's daemon (with its own key,
                    # at ssh's default place; no_tty: never a prompt), and where QEMU takes a
                    # live migration. virt-ssh-helper (or nc) runs as this host on the far side.
                    "migration_uri": f"qemu+ssh://{h.name}@127.0.0.1:{ssh_port}/session?no_verify=1&no_tty=1",
                    "live_migration_inbound_addr": "127.0.0.1",
                },
            }
            if host_ports and h.name in host_ports:
                hosts[h.name]["ansible_port"] = host_ports[h.name]
        ssh_args = " ".join(self._ssh_options() + ["-o", "ConnectTimeout=10"])
        return {
            "all": {
                "hosts": {
                    "localhost": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    }
                },
                "children": {
                    "novakit_compute": {
                        "vars": {
                            "ansible_connection": "ssh",
                            "ansible_host": "127.0.0.1",
                            "ansible_port": port or self.port,
                            "ansible_ssh_private_key_file": str(self.client_key),
                            "ansible_ssh_common_args": ssh_args,
                            "ansible_control_path_dir": str(self.control_path_dir),
                            "ansible_python_interpreter": str(self.python),
                            # Modules go through the SSH session's stdin: no copy, no temp files.
                            "ansible_pipelining": True,
                            "novakit_driver": "libvirt",
                            # Registered with each host: how the controller reaches it outside a
                            # play, as it does for every step of a move (Fabric, the same login).
                            "compute_node_transport": "ssh",
                        },
                        "hosts": hosts,
                    }
                },
            }
        }

    def write_inventory(self, path: Path, **kwargs: Any) -> Path:
        path.write_text(
            "# Generated by tests/e2e/testbed: compute hosts reached over SSH on 127.0.0.1.\n"
            + yaml.safe_dump(self.inventory(**kwargs), sort_keys=False)
        )
        return path

    # --- tear-down --------------------------------------------------------------------

    def down(self, purge: bool = False) -> None:
        """Stop every process of the testbed by pid and remove its users and files. Idempotent."""
        names = list(dict.fromkeys(self.state().get("hosts", []) + self._existing_users()))
        sshd = self.sshd_pid()
        # The SSH sessions (and what they run: nc, virt-ssh-helper) are sshd's descendants: note them
        # before sshd goes, since its end leaves them to init.
        table = processes.process_table()
        sessions = processes.with_descendants([sshd], table)[1:] if sshd is not None else []
        if sshd is not None:
            processes.terminate([sshd])
        for name in names:
            try:
                host = self.host(name)
            except TestbedError:
                continue
            self._stop_host_processes(host, sessions)
            subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
            shutil.rmtree(host.runtime_dir, ignore_errors=True)
            shutil.rmtree(host.home, ignore_errors=True)
        # SSH client masters that Ansible left for this run's control path.
        self._stop_ssh_masters()
        self.remove_snapshots()
        self._remove_hosts_group()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.homes, ignore_errors=True)
        if purge:
            shutil.rmtree(self.base, ignore_errors=True)

    def _remove_hosts_group(self) -> None:
        """The hosts' group, once its users are gone (a group someone else joined stays)."""
        try:
            members = grp.getgrnam(HOSTS_GROUP).gr_mem
        except KeyError:
            return
        if not members:
            subprocess.run(["groupdel", HOSTS_GROUP], capture_output=True, text=True)

    def remove_snapshots(self) -> None:
        """Remove the images the hosts wrote into the store (snapshots, shelved images); the tiny
        guest's files stay."""
        if not self.image_store.is_dir():
            return
        for path in self.image_store.iterdir():
            if path.name not in IMAGE_FILES and not path.is_dir():
                path.unlink(missing_ok=True)

    def _stop_host_processes(self, host: TestbedHost, sessions: list[int]) -> None:
        """End what the testbed started as this host: by pid, never every process of the uid.

        Started here are the host's libvirtd, the virtlogd and the QEMU guests it spawned (each has
        a pid file in the host's runtime directory; QEMU daemonizes, so it is no child of libvirtd)
        and the host's SSH sessions, each with its descendants.
        """
        processes.end_started(host.uid, sessions, host.runtime_dir)

    def _existing_users(self) -> list[str]:
        """Users of this testbed that exist: named nk-hN, with their home under our base."""
        found = []
        for pw in pwd.getpwall():
            if pw.pw_name.startswith(USER_PREFIX) and Path(pw.pw_dir).is_relative_to(self.homes):
                found.append(pw.pw_name)
        return found

    def _stop_ssh_masters(self) -> None:
        marker = str(self.control_path_dir).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and cmdline.startswith(b"ssh"):
                pids.append(int(entry.name))
        if pids:
            processes.terminate(pids)


def catalog_flavors() -> list[str]:
    from tests.e2e.testbed import catalog

    return list(catalog.FLAVORS)


def write_catalog(bed: Testbed) -> Path:
    """For people trying the testbed: a config and a SQLite database with its flavors and image."""
    from novakit.db.engine import Database
    from tests.e2e.testbed import catalog

    state = bed.run_dir / "state"
    state.mkdir(exist_ok=True)
    (bed.run_dir / "novakit.toml").write_text(catalog.config_toml(catalog.host_memory_mb(bed)))
    db = Database(f"sqlite:///{state / 'novakit.db'}")
    try:
        catalog.register(db, bed.image_store)
    finally:
        db.dispose()
    return state / "novakit.db"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.e2e.testbed", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "status", "catalog"])
    parser.add_argument("--hosts", type=int, default=int(os.environ.get("NOVAKIT_TESTBED_HOSTS", "3")))
    parser.add_argument("--base", type=Path, default=DEFAULT_BASE)
    parser.add_argument("--purge", action="store_true", help="down: also remove the venv and image store")
    args = parser.parse_args(argv)
    bed = Testbed(args.base, args.hosts)
    try:
        if args.command == "up":
            started = time.monotonic()
            bed.up()
            print(
                f"testbed up in {time.monotonic() - started:.1f} s: {args.hosts} hosts, inventory "
                f"{bed.inventory_path}"
            )
        elif args.command == "catalog":
            path = write_catalog(bed)
            print(f"flavors {', '.join(catalog_flavors())} and image tiny registered in {path}")
        elif args.command == "down":
            bed.down(purge=args.purge)
            print("testbed down")
        else:
            print(json.dumps(bed.status(), indent=2))
            return 0 if bed.is_up() else 3
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 1
    return 0
