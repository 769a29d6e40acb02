"""``ansible-playbook playbooks/compute_node.yml`` on a multi-host inventory (fake driver: no
guest boots) whose hosts say their zone, aggregates and custom traits: the run makes them, all
hosts at once (an aggregate several hosts join is made once and keeps them all), and a second run
changes nothing. A host moving between zones: tests/functional/test_host_aggregate_module.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.fleet import aggregates, hosts
from tests.e2e.runner import run_playbook

SIZE = {"vcpus": 4, "memory_mb": 8192, "local_gb": 100}
HOSTS: dict[str, dict[str, Any]] = {
    "rack-a1": {
        "novakit_availability_zone": "east",
        "novakit_aggregates": [{"name": "fast", "metadata": {"ssd": "true"}}],
        "novakit_traits": ["CUSTOM_SSD"],
    },
    "rack-a2": {
        "novakit_availability_zone": "east",
        "novakit_aggregates": [{"name": "fast", "metadata": {"ssd": "true"}}, "gpu"],
        "novakit_traits": ["CUSTOM_SSD", "CUSTOM_GPU"],
    },
    # gpu and fast in the other order than rack-a2's: hosts at once take shared aggregates in one order
    "rack-b1": {
        "novakit_availability_zone": "west",
        "novakit_aggregates": ["gpu", "fast"],
        "novakit_traits": [],
    },
    "rack-b2": {"novakit_availability_zone": "west"},
    "spare": {},  # no variable: left in the default zone, in no aggregate, with no custom trait
}


def _inventory(tmp_path: Path, fleet: dict[str, dict[str, Any]]) -> Path:
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            },
            "hosts": {"localhost": None},
            "children": {
                "novakit_compute": {
                    "vars": {"novakit_driver": "fake", "novakit_driver_options": SIZE},
                    "hosts": fleet,
                }
            },
        }
    }
    path = tmp_path / "zones.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def _changed(run: Any) -> dict[str, int]:
    return {host: n for host, n in (run.stats or {}).get("changed", {}).items() if n}


@pytest.mark.e2e
def test_compute_node_playbook_makes_zones_aggregates_and_traits(tmp_path: Path, db_url: str) -> None:
    state = tmp_path / "state"
    env = {
        "NOVAKIT_STATE_DIR": str(state),
        "NOVAKIT_FAKE_STATE_DIR": str(state / "fake"),
        "NOVAKIT_DB_URL": db_url,
    }
    conf = load_config(db_url=db_url, state_dir=state)
    db, admin = Database(db_url), RequestContext.admin()
    try:
        run = run_playbook("compute_node.yml", tmp_path, env, inventory=_inventory(tmp_path, HOSTS))
        assert run.rc == 0, run.stdout.read()

        made = {a["name"]: a for a in aggregates.list_aggregates(db, admin)}
        assert {n: (a["availability_zone"], a["hosts"], a["metadata"]) for n, a in made.items()} == {
            "east": ("east", ["rack-a1", "rack-a2"], {}),
            "west": ("west", ["rack-b1", "rack-b2"], {}),
            "fast": (None, ["rack-a1", "rack-a2", "rack-b1"], {"ssd": "true"}),
            "gpu": (None, ["rack-a2", "rack-b1"], {}),
        }
        zones = {z["zone"]: z for z in aggregates.list_zones(db, admin, conf, long=True)}
        assert zones["east"]["hosts"] == ["rack-a1", "rack-a2"] and zones["west"]["hosts"] == [
            "rack-b1",
            "rack-b2",
        ]
        assert zones[conf.scheduler.default_availability_zone]["hosts"] == ["spare"]
        assert all(z["available"] for z in zones.values())
        custom = {h: hosts.custom_traits(db, h) for h in HOSTS}
        assert custom["rack-a1"] == ["CUSTOM_SSD"] and custom["rack-a2"] == ["CUSTOM_GPU", "CUSTOM_SSD"]
        assert "CUSTOM_SSD" not in custom["rack-b1"] and "CUSTOM_GPU" not in custom["spare"]

        again = run_playbook("compute_node.yml", tmp_path, env, inventory=_inventory(tmp_path, HOSTS))
        assert again.rc == 0, again.stdout.read()
        assert _changed(again) == {}, again.stdout.read()
        assert {a["name"]: a for a in aggregates.list_aggregates(db, admin)} == made

    finally:
        db.dispose()
