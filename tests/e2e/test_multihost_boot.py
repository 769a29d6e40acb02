"""Real boots across the testbed: K compute hosts on this machine, each a Unix user reached over SSH
with its own libvirtd, guests under QEMU/TCG.

What a user sees: the hosts register with their real capacity; playbooks/boot.yml, run through
ansible-runner, puts the tiny guest on the hosts the scheduler chose; each guest's console, read through
the compute module on its host, shows its own hostname; the audit trail and the claims add up.
"""

from __future__ import annotations

import pytest

from novakit.context import RequestContext
from novakit.fleet import hosts as compute_hosts
from novakit.placement.inventories import get_inventory
from novakit.virt import guest_ready_line
from tests.e2e.runner import task_results
from tests.e2e.testbed import catalog
from tests.e2e.testbed.fixtures import (
    Cloud,
    assert_nothing_lost,
    console_output,
    usage_by_host,
    wait_for_marker,
)

pytest_plugins = ["tests.e2e.testbed.fixtures"]
pytestmark = pytest.mark.e2e


def test_hosts_register_with_their_real_capacity(cloud: Cloud) -> None:
    api = cloud.api()
    reported_mb = catalog.host_memory_mb(cloud.bed)
    for host in cloud.bed.names():
        node = compute_hosts.get_node(api.db, host)
        assert node.hypervisor_type == "QEMU"
        # What libvirt said at registration. This machine is itself a VM whose memory the hypervisor
        # under it may grow or shrink meanwhile (128 MiB between two reads was seen): within 2%.
        assert abs(node.memory_mb - reported_mb) <= reported_mb // 50, (node.memory_mb, reported_mb)
        assert node.driver["driver"] == "libvirt" and node.driver["options"]["uri"] == "qemu:///session"
        memory = get_inventory(api.db, host)["MEMORY_MB"]
        assert memory.total - memory.reserved == catalog.HOST_ROOM_MB
    listed = {h["host"] for h in compute_hosts.list_hosts(api.db, api.conf)}
    assert listed == set(cloud.bed.names())


def test_boot_playbook_boots_real_guests_across_the_hosts(cloud: Cloud) -> None:
    run = cloud.run(
        "boot.yml",
        {"server_name": "web", "count": 3, "flavor": "tb.small", "image": "tiny"},
        ident="tb-boot-1",
    )
    assert run.rc == 0, run.stdout.read()

    api = cloud.api()
    admin = RequestContext.admin()
    servers = sorted(api.list(admin), key=lambda s: s["name"])
    assert [s["name"] for s in servers] == ["web-1", "web-2", "web-3"]
    assert all(s["status"] == "ACTIVE" and s["power_state_name"] == "Running" for s in servers), servers
    # Three hosts with equal room: the RAM weigher spreads one guest to each.
    assert sorted(s["host"] for s in servers) == sorted(cloud.bed.names())

    for s in servers:
        assert guest_ready_line(s["hostname"], s["id"]) in wait_for_marker(cloud.bed, s["host"], s)
    consoles = console_output(cloud, servers)
    for s in servers:
        assert guest_ready_line(s["hostname"], s["id"]) in consoles[s["id"]]
        assert all(f"hostname={o['hostname']} " not in consoles[s["id"]] for o in servers if o is not s)

    (published,) = task_results(run, "Publish each server's uuid, host, addresses and status")
    request_id = published["ansible_stats"]["data"]["novakit_request_id"]
    for s in servers:
        (create,) = api.list_actions(admin, s["id"])
        assert create["action"] == "create" and create["request_id"] == request_id
        assert create["finish_time"] is not None
        assert [(e["event"], e["host"], e["result"]) for e in create["events"]] == [
            ("compute__do_build_and_run_instance", s["host"], "Success")
        ]
    usage = usage_by_host(api.db)
    for s in servers:
        assert usage[s["host"]]["MEMORY_MB"] == 128 and usage[s["host"]]["VCPU"] == 1
    assert_nothing_lost(cloud)
