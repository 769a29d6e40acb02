"""The cost of a novakit module task on the controller: in Ansible's worker vs a module process.

A playbook of 24 ordinary controller tasks (flavors, a network, a subnet, a server, its info,
an action, the deletes) is run with the modules in Ansible's worker process (the action
plugins of ``plugins/plugin_utils/in_process.py``, the default) and as module processes
(``NOVAKIT_MODULES_IN_PROCESS=0``, each task a fresh interpreter that imports novakit), in
turn, on a fresh SQLite database each run. Prints min/median/max of each, the paired ratio and
the cost per task. Asserts nothing.

    .venv/bin/python bench/module_tasks.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from novakit.catalog import images  # noqa: E402
from novakit.config import load_config  # noqa: E402
from novakit.db.engine import Database  # noqa: E402
from novakit.fleet import hosts  # noqa: E402
from novakit.host.messages import HostResources  # noqa: E402

FLAVORS = 8
PLAYBOOK = """---
- name: Ordinary controller tasks
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Flavors
      novakit.cloud.flavor: {name: "bench.{{ item }}", vcpus: 1, ram: 512, disk: 1}
      loop: "{{ range(FLAVORS) | list }}"
    - name: A network
      novakit.cloud.network: {name: benchnet}
    - name: A subnet
      novakit.cloud.subnet: {name: benchsub, network_name: benchnet, cidr: 10.9.0.0/24}
    - name: A server
      novakit.cloud.server: {name: bench-vm, flavor: bench.0, image: tiny, nics: [{net-name: benchnet}]}
    - name: Its info
      novakit.cloud.server_info: {server: bench-vm}
      loop: "{{ range(5) | list }}"
    - name: An action
      novakit.cloud.server_action: {server: bench-vm, action: lock}
    - name: The server away
      novakit.cloud.server: {name: bench-vm, state: absent}
    - name: The flavors away
      novakit.cloud.flavor: {name: "bench.{{ item }}", state: absent}
      loop: "{{ range(FLAVORS) | list }}"
""".replace("FLAVORS", str(FLAVORS))
TASKS = FLAVORS * 2 + 2 + 1 + 5 + 1 + 1


def prepare(work: Path) -> dict[str, str]:
    state = work / "state"
    conf_file = work / "novakit.toml"
    conf_file.write_text("[compute]\nservice_down_time = 86400\n")
    conf = load_config(conf_file, state_dir=str(state))
    db = Database.from_config(conf)
    hosts.register_host(
        db,
        conf,
        "bench-host",
        HostResources(
            hypervisor_hostname="bench-host",
            hypervisor_type="fake",
            vcpus=64,
            memory_mb=65536,
            local_gb=400,
            security_groups="none",  # its ports unfiltered, knowingly: the bench measures the tasks
        ),
        {"driver": "fake", "transport": "local"},
    )
    from novakit.context import RequestContext

    images.create(db, RequestContext.admin(), {"name": "tiny"})
    db.dispose()
    (work / "play.yml").write_text(PLAYBOOK)
    return {
        **os.environ,
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(conf_file),
        "NOVAKIT_PROJECT": "admin",
        "NOVAKIT_ROLES": "admin",
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "playbooks" / "collections"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCALHOST_WARNING": "false",
    }


def one_run(in_process: bool) -> float:
    work = Path(tempfile.mkdtemp(prefix="nk-bench-tasks-"))
    try:
        env = prepare(work)
        env["NOVAKIT_MODULES_IN_PROCESS"] = "1" if in_process else "0"
        playbook = str(Path(sys.executable).parent / "ansible-playbook")
        start = time.perf_counter()
        done = subprocess.run(
            [playbook, str(work / "play.yml")], env=env, cwd=work, capture_output=True, text=True
        )
        took = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"the playbook failed:\n{done.stdout[-3000:]}")
        return took
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    inside, modules = [], []
    for _ in range(args.runs):  # in turn, so that the machine's load falls on both alike
        inside.append(one_run(True))
        modules.append(one_run(False))
    ratios = sorted(m / i for i, m in zip(inside, modules, strict=True))
    for name, runs in (("in the worker", inside), ("module processes", modules)):
        print(
            f"{name:17s} {TASKS} tasks: min {min(runs):6.2f} s  median {statistics.median(runs):6.2f} s  "
            f"max {max(runs):6.2f} s  ({statistics.median(runs) / TASKS * 1000:5.0f} ms a task)"
        )
    print(
        f"paired ratio module/worker: median {statistics.median(ratios):.2f} "
        f"(min {ratios[0]:.2f}, max {ratios[-1]:.2f})"
    )


if __name__ == "__main__":
    main()
