"""The network, subnet and port modules, the server module's nics and boot.yml's networks, run by
ansible-runner against the prepared fleet: idempotent, check mode truthful, addresses known at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.network import networks, ports, subnets
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_flows import play, results_of

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
ADMIN = RequestContext.admin()


def test_network_modules_are_idempotent_and_the_server_gets_its_ports(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    result = play(ROOT / "tests" / "e2e" / "playbooks" / "networks.yml", tmp_path, env)
    assert result.ok, result.runner.stdout.read()

    def one(task: str) -> dict[str, Any]:
        (res,) = results_of(result, task)
        return res

    assert one("Plan the network (check mode)")["changed"]
    assert one("Create the network")["network"]["is_default"] is True
    assert one("Create the network again")["changed"] is False
    # Check mode writes nothing, and refuses what the real run refuses.
    assert one("Plan a wide subnet (check mode, nothing to overlap yet)")["changed"]
    assert (
        "overlaps subnet lan-v4" in one("Plan an overlapping subnet again (check mode, now refused)")["msg"]
    )
    assert one("Create the subnet")["subnet"]["allocation_pools"] == [
        {"start": "10.30.1.10", "end": "10.30.1.20"}
    ]
    port = one("Create the port")["port"]
    assert port["fixed_ips"][0]["ip_address"] == "10.30.1.15"
    assert one("Create the port again")["changed"] is False
    server = one("Create a server on the port and on the network")["server"]
    assert server["addresses"] == ["10.30.1.15", "10.30.1.10"]
    assert server["nics"][0]["mac"] == port["mac_address"]
    assert one("Create the server again")["changed"] is False
    assert one("Delete the port")["changed"] and one("Delete the port again")["changed"] is False
    assert ports.list_ports(api.db, ADMIN) == [] and [s["name"] for s in subnets.list_subnets(api.db)] == [
        "lan-v4"
    ]


def test_boot_yml_takes_networks_and_publishes_the_fixed_ip(prepared_fleet: Path, tmp_path: Path) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    networks.create(api.db, ADMIN, {"name": "data"})
    subnets.create(api.db, ADMIN, {"name": "data-v4", "network": "data", "cidr": "10.31.0.0/24"})
    first = play("boot", tmp_path, env, {"server_name": "pb", "networks": "data"})
    assert first.ok, first.runner.stdout.read()
    [server] = api.list(ADMIN)
    assert server["addresses"] == ["10.31.0.2"] and server["status"] == "ACTIVE"
    again = play("boot", tmp_path, env, {"server_name": "pb", "networks": "data"})
    assert again.ok, again.runner.stdout.read()
    [same] = api.list(ADMIN)
    assert same["nics"] == server["nics"]


def test_module_defaults_of_the_action_group_reach_the_network_modules(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    """``module_defaults: {group/novakit.cloud.novakit: {db_url: ...}}`` sets the database of
    network, subnet and port too (meta/runtime.yml's action group), not only of the others."""
    env = fleet_env(prepared_fleet, tmp_path)
    elsewhere = Database(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    playbook = tmp_path / "defaults.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "One database for the whole play",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "module_defaults": {"group/novakit.cloud.novakit": {"db_url": elsewhere.url}},
                    "tasks": [
                        {"name": "A network", "novakit.cloud.network": {"name": "far"}},
                        {
                            "name": "A subnet",
                            "novakit.cloud.subnet": {
                                "name": "far-v4",
                                "network": "far",
                                "cidr": "10.50.0.0/24",
                            },
                        },
                        {"name": "A port", "novakit.cloud.port": {"name": "far-port", "network": "far"}},
                    ],
                }
            ]
        )
    )
    result = play(playbook, tmp_path, env)
    assert result.ok, result.runner.stdout.read()
    assert [n["name"] for n in networks.list_networks(elsewhere)] == ["far"]
    assert [s["name"] for s in subnets.list_subnets(elsewhere)] == ["far-v4"]
    assert [p["name"] for p in ports.list_ports(elsewhere, ADMIN)] == ["far-port"]
    fleet = api_for(env).db  # the database the play would use without the defaults
    assert networks.list_networks(fleet) == [] and ports.list_ports(fleet, ADMIN) == []
