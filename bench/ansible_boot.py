"""100 servers on 10 fake hosts through playbooks/boot.yml, against Ansible's own floor.

The floor: a playbook that only runs the compute module on each host, with build requests
prepared by hand (the hosts chosen round-robin), so it pays what any Ansible fan-out pays
(start-up, one module per host) and nothing of novakit's controller steps. The full flow adds
the schedule step (records, quota, scheduler, claims), the record step and the extra plays;
its controller steps run in Ansible's own process (the conductor action plugin), so they cost
the library's work and one import of novakit per run, not a module each.
Goal: the full flow within 1.5x of the floor. Prints medians and spread; asserts nothing.

    .venv/bin/python bench/ansible_boot.py [--runs 3] [--servers 100] [--hosts 10]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from novakit.catalog import flavors, images  # noqa: E402
from novakit.config import load_config  # noqa: E402
from novakit.context import RequestContext  # noqa: E402
from novakit.db.engine import Database  # noqa: E402
from novakit.fleet import hosts  # noqa: E402
from novakit.host.messages import ComputeRequest, HostResources  # noqa: E402
from novakit.runner import run  # noqa: E402

FLOOR_PLAYBOOK = """---
- name: Build what was assigned by hand (the floor)
  hosts: novakit_compute
  gather_facts: false
  tasks:
    - name: Build and run
      novakit.cloud.compute:
        host: "{{ inventory_hostname }}"
        requests: "{{ lookup('file', bench_dir ~ '/' ~ inventory_hostname ~ '.json') | from_json }}"
"""


def inventory(path: Path, n_hosts: int) -> Path:
    lines = [
        "all:",
        "  vars:",
        "    ansible_connection: local",
        '    ansible_python_interpreter: "{{ ansible_playbook_python }}"',
        "  hosts:",
        "    localhost:",
        "  children:",
        "    novakit_compute:",
        "      hosts:",
    ]
    lines += [f"        bench-{i:02d}:" for i in range(n_hosts)]
    path.write_text("\n".join(lines) + "\n")
    return path


def prepare(work: Path, n_hosts: int) -> dict[str, str]:
    state = work / "state"
    conf_file = work / "novakit.toml"
    conf_file.write_text(
        "[compute]\nservice_down_time = 86400\n[quota]\ninstances = -1\ncores = -1\nram = -1\n"
    )
    env = {
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_CONFIG": str(conf_file),
    }
    conf = load_config(conf_file, state_dir=str(state))
    db = Database.from_config(conf)
    for i in range(n_hosts):
        host = f"bench-{i:02d}"
        hosts.register_host(
            db,
            conf,
            host,
            HostResources(
                hypervisor_hostname=host, hypervisor_type="fake", vcpus=64, memory_mb=262144, local_gb=4000
            ),
            {"driver": "fake", "transport": "local"},
        )
    admin = RequestContext.admin()
    flavors.create(db, admin, {"name": "m1.tiny", "vcpus": 1, "memory_mb": 512, "root_gb": 1})
    images.create(db, admin, {"name": "tiny"})
    return env


def floor_requests(work: Path, env: dict[str, str], n: int, n_hosts: int) -> None:
    """Build requests assigned round-robin, shaped as the conductor shapes them (no claims)."""
    from novakit.compute.api import API
    from novakit.compute.rpc import instance_spec
    from novakit.compute.schemas import ServerCreate

    conf = load_config(env["NOVAKIT_CONFIG"], state_dir=env["NOVAKIT_STATE_DIR"])
    api = API(Database.from_config(conf), conf)
    uuids = api.create_records(
        RequestContext.admin(), ServerCreate(name="floor", flavor="m1.tiny", image="tiny", max_count=n)
    )
    from novakit.cells.registry import UNSCHEDULED

    # The records wait in the API database until they are scheduled (novakit.cells).
    with api.db.target_cell(UNSCHEDULED), api.db.reader() as session:
        from novakit.db import api as db_api

        specs = [
            instance_spec(session, i)
            for i in db_api.instance_get_all(session, RequestContext.admin(), uuids=uuids)
        ]
    for i in range(n_hosts):
        host = f"bench-{i:02d}"
        req = ComputeRequest(
            request_id="req-floor", host=host, operation="build", instances=specs[i::n_hosts]
        )
        (work / f"{host}.json").write_text(json.dumps([req.to_wire()]))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=10)
    args = parser.parse_args()
    full, floor = [], []
    for r in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="nk-bench-"))
        try:
            inv = inventory(work / "hosts.yml", args.hosts)
            env = prepare(work, args.hosts)
            floor_requests(work, env, args.servers, args.hosts)
            (work / "floor.yml").write_text(FLOOR_PLAYBOOK)

            def run_floor() -> None:
                res = run(
                    work / "floor.yml",
                    inventory=inv,
                    envvars=env,
                    extravars={"bench_dir": str(work)},
                    private_data_dir=work / "rf",
                )
                assert res.ok, res.runner.stdout.read()

            def run_full() -> None:
                res = run(
                    "boot",
                    inventory=inv,
                    envvars=env,
                    private_data_dir=work / "rb",
                    extravars={"server_name": f"b{r}", "count": args.servers, "flavor": "m1.tiny"},
                )
                assert res.ok and all(s["status"] == "ACTIVE" for s in res.servers), res.runner.stdout.read()

            floor.append(timed(run_floor))
            full.append(timed(run_full))
            print(
                f"run {r + 1}: floor {floor[-1]:.1f} s, boot.yml {full[-1]:.1f} s "
                f"({full[-1] / floor[-1]:.2f}x)",
                flush=True,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for name, values in (("floor (compute module only)", floor), ("boot.yml (full flow)", full)):
        med = statistics.median(values)
        print(
            f"{name:30s} median {med:6.1f} s  spread {min(values):.1f}-{max(values):.1f} s  "
            f"{1000 * med / args.servers:6.0f} ms/instance"
        )
    ratios = [a / b for a, b in zip(full, floor, strict=True)]
    print(
        f"full / floor: {statistics.median(full) / statistics.median(floor):.2f}x of the medians "
        f"(per run {min(ratios):.2f}-{max(ratios):.2f}x; goal <= 1.5x)"
    )


if __name__ == "__main__":
    main()
