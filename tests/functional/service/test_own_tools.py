"""novakit's own tools through ``novakit serve`` (issue 29, part 6): the ``novakit`` command with
``--os-cloud`` (or ``OS_CLOUD``), the ``novakit.cloud`` server modules with ``cloud:``, and the
``boot.yml`` and ``server_action.yml`` playbooks, with no database URL in their environment.

Their environment names no database and points the embedded default at an empty directory: a
call that fell back to a database would find none of the cloud's servers (and would leave a file
there, which the tests look for). What they did is read back from the service's database.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from novakit.context import RequestContext
from tests.functional.service.own_tools import BIN, ROOT, Tools, cloud_for_tools, ok  # noqa: F401 (the fixture)

pytestmark = pytest.mark.xdist_group("service_own_tools")


def test_the_command_runs_a_server_s_life_through_the_cloud(tools: Tools) -> None:
    """create, list, show, stop (OS_CLOUD), start, events, delete: all answered by the service."""
    out = ok(
        tools.novakit(
            "--os-cloud", "nk", "server", "create", "cli-web", "--flavor", "m1.small", "--image", "tiny",
            "--nic", "net-id=lan", "-f", "json",
        )
    )  # fmt: skip
    (created,) = json.loads(out)
    assert (created["name"], created["status"]) == ("cli-web", "ACTIVE"), created
    assert (tools.server("cli-web") or {}).get("status") == "ACTIVE"

    listed = json.loads(ok(tools.novakit("--os-cloud", "nk", "server", "list", "-f", "json")))
    assert "cli-web" in [s["name"] for s in listed]

    ok(tools.novakit("server", "stop", "cli-web", OS_CLOUD="nk"))
    assert (tools.server("cli-web") or {}).get("status") == "SHUTOFF"
    shown = json.loads(ok(tools.novakit("server", "show", "cli-web", "-f", "json", OS_CLOUD="nk")))
    assert shown["status"] == "SHUTOFF"

    ok(tools.novakit("--os-cloud", "nk", "server", "start", "cli-web"))
    events = ok(tools.novakit("--os-cloud", "nk", "server", "events", "cli-web"))
    for action in ("create", "stop", "start"):
        assert action in events

    ok(tools.novakit("--os-cloud", "nk", "server", "delete", "cli-web"))
    assert tools.server("cli-web") is None
    assert tools.embedded_default_untouched()


def test_the_command_s_refusals_come_from_the_service(tools: Tools) -> None:
    """The library's errors, word for word, as one line and status 1; a command that opens the
    database says it does not go through a cloud; identity options are the token's."""
    missing = tools.novakit("--os-cloud", "nk", "server", "show", "no-such-server")
    assert missing.returncode == 1 and "no-such-server" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = tools.novakit(
        "--os-cloud", "nk", "server", "create", "bad", "--flavor", "no-such-flavor", "--image", "tiny"
    )
    assert bad.returncode == 1 and "no-such-flavor" in bad.stderr
    assert tools.server("bad") is None
    opened = tools.novakit("--os-cloud", "nk", "db", "upgrade")
    assert opened.returncode == 1 and "does not go through a cloud" in opened.stderr
    named = tools.novakit("--os-cloud", "nk", "--project", "other", "server", "list")
    assert named.returncode == 1 and "--project" in named.stderr
    unknown = tools.novakit("--os-cloud", "nowhere", "server", "list")
    assert unknown.returncode == 1 and "nowhere" in unknown.stderr
    assert tools.embedded_default_untouched()


def test_the_catalog_commands_go_through_the_cloud(tools: Tools) -> None:
    """network, subnet, keypair and server group commands: the service's calls and policy (a
    member's network create refused, its key pair its own)."""
    made = json.loads(ok(tools.novakit("--os-cloud", "nk", "network", "create", "cli-net", "-f", "json")))
    assert made["name"] == "cli-net"
    ok(tools.novakit("--os-cloud", "nk", "subnet", "create", "cli-net-v4", "--network", "cli-net",
                      "--subnet-range", "10.8.0.0/24"))  # fmt: skip
    subnets = json.loads(ok(tools.novakit("--os-cloud", "nk", "subnet", "list", "-f", "json")))
    assert "10.8.0.0/24" in [s["cidr"] for s in subnets]
    refused = tools.novakit("--os-cloud", "dev", "network", "create", "dev-cli-net")
    assert refused.returncode == 1 and "network:create" in refused.stderr
    listed = json.loads(ok(tools.novakit("--os-cloud", "dev", "network", "list", "-f", "json")))
    assert "dev-cli-net" not in [n["name"] for n in listed]
    key = ok(tools.novakit("--os-cloud", "dev", "keypair", "create", "cli-key"))
    assert "PRIVATE KEY" in key
    keys = json.loads(ok(tools.novakit("--os-cloud", "dev", "keypair", "list", "-f", "json")))
    assert [k["name"] for k in keys] == ["cli-key"]
    assert json.loads(ok(tools.novakit("--os-cloud", "nk", "keypair", "list", "-f", "json"))) == []
    ok(tools.novakit("--os-cloud", "dev", "server", "group", "create", "cli-grp", "--policy", "affinity"))
    shown = json.loads(
        ok(tools.novakit("--os-cloud", "dev", "server", "group", "show", "cli-grp", "-f", "json"))
    )
    assert shown["policy"] == "affinity"
    ok(tools.novakit("--os-cloud", "dev", "server", "group", "delete", "cli-grp"))
    ok(tools.novakit("--os-cloud", "dev", "keypair", "delete", "cli-key"))
    ok(tools.novakit("--os-cloud", "nk", "network", "delete", "cli-net"))
    assert tools.embedded_default_untouched()


def test_security_group_and_interface_commands_go_through_the_cloud(tools: Tools) -> None:
    """A member's security group, its rule, the group added to and removed from its server, and a
    port attached to that server and detached: the service's calls, read back from its database;
    a bad rule refused with the library's words."""
    from novakit.network import ports

    def nk(*args: str) -> subprocess.CompletedProcess[str]:
        return tools.novakit("--os-cloud", "dev", *args)

    made = json.loads(ok(nk("security", "group", "create", "cli-web", "-f", "json")))
    assert made["name"] == "cli-web"
    ok(nk("security", "group", "rule", "create", "cli-web", "--protocol", "tcp", "--dst-port", "8080"))
    bad = nk("security", "group", "rule", "create", "cli-web", "--protocol", "gre", "--dst-port", "1:2")
    assert bad.returncode == 1 and "port_range" in bad.stderr, bad.stderr
    rules = json.loads(ok(nk("security", "group", "rule", "list", "cli-web", "-f", "json")))
    assert [r["port_range_min"] for r in rules if r["direction"] == "ingress"] == [8080]
    assert "cli-web" in [g["name"] for g in json.loads(ok(nk("security", "group", "list", "-f", "json")))]
    ok(nk("server", "create", "sg-1", "--flavor", "m1.small", "--image", "tiny", "--nic", "net-id=lan"))
    assert "added" in ok(nk("server", "add", "security", "group", "sg-1", "cli-web"))
    server = tools.server("sg-1")
    assert server is not None
    db = tools.served.database()
    try:
        (port,) = ports.list_ports(db, tools.admin, device_id=server["id"])
        assert "cli-web" in port["security_groups"], port
        assert "attached to server sg-1" in ok(nk("server", "add", "network", "sg-1", "lan"))
        attached = ports.list_ports(db, tools.admin, device_id=server["id"])
        assert len(attached) == 2
        extra = next(p for p in attached if p["id"] != port["id"])
        assert "detached" in ok(nk("server", "remove", "port", "sg-1", extra["id"]))
        assert [p["id"] for p in ports.list_ports(db, tools.admin, device_id=server["id"])] == [port["id"]]
        assert "removed" in ok(nk("server", "remove", "security", "group", "sg-1", "cli-web"))
        (port,) = ports.list_ports(db, tools.admin, device_id=server["id"])
        assert "cli-web" not in port["security_groups"]
    finally:
        db.dispose()
    ok(nk("server", "delete", "sg-1"))
    ok(nk("security", "group", "delete", "cli-web"))
    assert tools.embedded_default_untouched()


def test_the_host_commands_go_through_the_cloud(tools: Tools) -> None:
    """An admin's host list, show, disable, enable and custom traits, as Nova's os-services and
    placement's traits: the service's calls, read back from its database; a member refused by
    the service's policy; the host's own registration still opens the database."""
    from sqlalchemy import select

    from novakit.db.models import Service

    def nk(*args: str, cloud: str = "nk") -> subprocess.CompletedProcess[str]:
        return tools.novakit("--os-cloud", cloud, *args)

    listed = json.loads(ok(nk("host", "list", "-f", "json")))
    name = sorted(h["host"] for h in listed)[0]
    assert name == "compute-1", listed
    assert "disabled" in ok(nk("host", "disable", name, "--reason", "disk swap"))
    db = tools.served.database()
    try:
        with db.reader() as session:
            service = session.execute(select(Service).where(Service.host == name)).scalar_one()
            assert (service.disabled, service.disabled_reason) == (True, "disk swap")
    finally:
        db.dispose()
    shown = json.loads(ok(nk("host", "show", name, "-f", "json")))
    assert (shown["status"], shown["disabled_reason"]) == ("disabled", "disk swap"), shown
    assert "CUSTOM_GPU" in ok(nk("host", "set", name, "--trait", "CUSTOM_GPU"))
    assert "CUSTOM_GPU" not in ok(nk("host", "unset", name, "--trait", "CUSTOM_GPU")).split(":")[-1]
    ok(nk("host", "enable", name))
    assert json.loads(ok(nk("host", "show", name, "-f", "json")))["status"] == "enabled"
    refused = nk("host", "list", cloud="dev")
    assert refused.returncode == 1 and "host:list" in refused.stderr, refused.stderr
    refused = nk("host", "disable", name, cloud="dev")
    assert refused.returncode == 1 and "host:disable" in refused.stderr, refused.stderr
    opened = nk("host", "heartbeat")
    assert opened.returncode == 1 and "opens the database" in opened.stderr
    assert tools.embedded_default_untouched()


def test_a_host_is_drained_through_the_cloud(tools: Tools) -> None:
    """``host drain`` through the cloud: the service moves each server (in the request, so the
    answer says where each went), the host stays disabled until ``--enable-after``; a dry run
    moves nothing; a member is refused by the service's policy."""

    def nk(*args: str, cloud: str = "nk") -> subprocess.CompletedProcess[str]:
        return tools.novakit("--os-cloud", cloud, *args)

    ok(nk("server", "create", "dr-1", "--flavor", "m1.small", "--image", "tiny", "--nic", "net-id=lan"))
    before = tools.server("dr-1")
    assert before is not None and before["status"] == "ACTIVE"
    source = before["host"]
    planned = json.loads(ok(nk("host", "drain", source, "--dry-run", "-f", "json")))
    assert [(r["name"], r["result"]) for r in planned["servers"]] == [("dr-1", "would move")]
    assert (tools.server("dr-1") or {}).get("host") == source
    refused = nk("host", "drain", source, cloud="dev")
    assert refused.returncode == 1 and "host:disable" in refused.stderr, refused.stderr
    report = json.loads(ok(nk("host", "drain", source, "--enable-after", "-f", "json")))
    (row,) = report["servers"]
    assert (row["name"], row["result"], row["from"]) == ("dr-1", "moved", source), row
    after = tools.server("dr-1")
    assert after is not None and after["status"] == "ACTIVE" and after["host"] == row["to"] != source
    assert json.loads(ok(nk("host", "show", source, "-f", "json")))["status"] == "enabled"
    ok(nk("server", "delete", "dr-1"))
    assert tools.embedded_default_untouched()


def test_a_member_s_credential_sees_only_its_own_and_no_hosts(tools: Tools) -> None:
    """The member's application credential: its servers only, no host column, admin actions refused."""
    out = ok(
        tools.novakit(
            "--os-cloud", "dev", "server", "create", "dev-1", "--flavor", "m1.small", "--image", "tiny",
            "--nic", "net-id=lan", "-f", "json",
        )
    )  # fmt: skip
    (created,) = json.loads(out)
    assert created["status"] == "ACTIVE" and not created.get("host"), created
    shown = json.loads(ok(tools.novakit("--os-cloud", "dev", "server", "show", "dev-1", "-f", "json")))
    assert not shown.get("host")
    refused = tools.novakit("--os-cloud", "dev", "server", "migrate", "dev-1")
    assert refused.returncode == 1 and "policy" in refused.stderr.lower()
    ok(tools.novakit("--os-cloud", "dev", "server", "delete", "dev-1"))
    assert tools.server("dev-1") is None


def _playbook(tools: Tools, name: str, *extra: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    args = [str(BIN / "ansible-playbook"), "-i", str(ROOT / "inventory" / "local.yml"), str(ROOT / name)]
    done = subprocess.run(
        [*args, *extra, *(["--check"] if check else [])],
        env={**{k: v for k, v in tools.env.items() if k != "OS_CLIENT_CONFIG_FILE"}, **tools.awx},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    shown = done.stdout + done.stderr
    assert not [s for s in tools.served.secrets if s in shown], "a secret reached the playbook's output"
    return done


@pytest.mark.slow  # ansible-playbook runs
def test_the_boot_and_action_playbooks_go_through_the_cloud(tools: Tools, backend: str) -> None:
    """boot.yml with only what AWX's novakit credential injects for an application credential
    (OS_CLOUD, the clouds.yaml): the service schedules and builds; a second run changes nothing;
    server_action.yml stops one (its check mode first) and reboots it hard; a lower count deletes
    the surplus."""
    if backend != "sqlite":
        pytest.skip("the playbooks drive the same service and calls on both back ends: SQLite only")
    boot = ("-e", "server_name=pb", "-e", "count=2", "-e", "networks=lan", "-e", "flavor=m1.small")
    done = _playbook(tools, "playbooks/boot.yml", *boot)
    assert done.returncode == 0, done.stdout[-3000:]
    for name in ("pb-1", "pb-2"):
        assert (tools.server(name) or {}).get("status") == "ACTIVE"
    again = _playbook(tools, "playbooks/boot.yml", *boot)
    assert again.returncode == 0 and "changed=0" in again.stdout.split("PLAY RECAP")[-1], again.stdout[-3000:]

    stop = ("-e", "servers=pb-1", "-e", "server_action=stop")
    checked = _playbook(tools, "playbooks/server_action.yml", *stop, check=True)
    assert checked.returncode == 0 and "stop would run on: pb-1" in checked.stdout, checked.stdout[-3000:]
    assert (tools.server("pb-1") or {}).get("status") == "ACTIVE"
    done = _playbook(tools, "playbooks/server_action.yml", *stop)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tools.server("pb-1") or {}).get("status") == "SHUTOFF"
    reboot = ("-e", "servers=pb-1", "-e", "server_action=reboot", "-e", "reboot_type=hard")
    done = _playbook(tools, "playbooks/server_action.yml", *reboot)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tools.server("pb-1") or {}).get("status") == "ACTIVE"

    down = ("-e", "server_name=pb", "-e", "count=1", "-e", "networks=lan", "-e", "flavor=m1.small")
    done = _playbook(tools, "playbooks/boot.yml", *down)
    assert done.returncode == 0, done.stdout[-3000:]
    assert tools.server("pb-2") is None and (tools.server("pb-1") or {}).get("status") == "ACTIVE"
    assert tools.embedded_default_untouched()


@pytest.mark.slow  # ansible-playbook runs
def test_novakit_boot_runs_its_playbook_through_the_cloud(tools: Tools, backend: str) -> None:
    """``novakit --os-cloud dev boot``: the boot playbook it runs takes the command's cloud, even
    with a database URL in the environment (the command's --os-cloud wins, as for its own calls)."""
    if backend != "sqlite":
        pytest.skip("the playbook drives the same service and calls on both back ends: SQLite only")
    stray = tools.directory / "stray.db"
    done = tools.novakit(
        "--os-cloud", "dev", "boot", "nb", "--count", "1", "-f", "json", NOVAKIT_DB_URL=f"sqlite:///{stray}"
    )
    out = json.loads(ok(done))
    assert out["ok"] and [(s["name"], s["status"]) for s in out["servers"]] == [("nb-1", "ACTIVE")], out
    assert (tools.server("nb-1") or {}).get("status") == "ACTIVE"
    assert not stray.exists()
    ok(tools.novakit("--os-cloud", "dev", "server", "delete", "nb-1"))


@pytest.mark.slow  # ansible-playbook runs
def test_the_server_modules_take_a_cloud(tools: Tools, backend: str) -> None:
    """server (state stopped), server_action (lock), server_info, network, subnet, keypair and
    server_group with ``cloud:``; a second run changes nothing; check mode; the identity options
    are refused, and so is what the token's roles do not allow (a member's network)."""
    if backend != "sqlite":
        pytest.skip("the modules drive the same service and calls on both back ends: SQLite only")
    play = tools.directory / "modules.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "stopped server",
                            "novakit.cloud.server": {
                                "cloud": "dev",
                                "name": "mod-1",
                                "flavor": "m1.small",
                                "image": "tiny",
                                "nics": [{"net-name": "lan"}],
                                "state": "stopped",
                            },
                            "register": "made",
                        },
                        {
                            "name": "locked",
                            "novakit.cloud.server_action": {
                                "cloud": "dev",
                                "server": "mod-1",
                                "action": "lock",
                            },
                            "register": "locked",
                        },
                        {
                            "name": "info",
                            "novakit.cloud.server_info": {"cloud": "dev", "server": "mod-1"},
                            "register": "info",
                        },
                        {
                            "name": "identity given",
                            "novakit.cloud.server_info": {"cloud": "dev", "project": "other"},
                            "register": "named",
                            "ignore_errors": True,
                        },
                        {
                            "name": "network",
                            "novakit.cloud.network": {"cloud": "nk", "name": "mod-net"},
                            "register": "net",
                        },
                        {
                            "name": "subnet",
                            "novakit.cloud.subnet": {
                                "cloud": "nk",
                                "name": "mod-net-v4",
                                "network": "mod-net",
                                "cidr": "10.9.0.0/24",
                            },
                            "register": "subnet",
                        },
                        {
                            "name": "subnet again",
                            "novakit.cloud.subnet": {
                                "cloud": "nk",
                                "name": "mod-net-v4",
                                "network": "mod-net",
                                "cidr": "10.9.0.0/24",
                            },
                            "register": "subnet_again",
                        },
                        {
                            "name": "network by a member",
                            "novakit.cloud.network": {"cloud": "dev", "name": "dev-net"},
                            "register": "dev_net",
                            "ignore_errors": True,
                        },
                        {
                            "name": "a host's drain planned",
                            "novakit.cloud.host_maintenance": {"cloud": "nk", "host": "compute-3"},
                            "check_mode": True,
                            "register": "drain_planned",
                        },
                        {
                            "name": "a host's drain by a member",
                            "novakit.cloud.host_maintenance": {"cloud": "dev", "host": "compute-3"},
                            "register": "drain_member",
                            "ignore_errors": True,
                        },
                        {
                            "name": "a module of the operator's path, given only a cloud",
                            "novakit.cloud.db": {},
                            "environment": {"OS_CLOUD": "nk"},
                            "register": "operators",
                            "ignore_errors": True,
                        },
                        {
                            "name": "key pair",
                            "novakit.cloud.keypair": {"cloud": "dev", "name": "dev-key"},
                            "register": "key",
                        },
                        {
                            "name": "server group in check mode",
                            "novakit.cloud.server_group": {
                                "cloud": "dev",
                                "name": "dev-grp",
                                "policy": "anti-affinity",
                            },
                            "check_mode": True,
                            "register": "group_checked",
                        },
                        {
                            "name": "server group",
                            "novakit.cloud.server_group": {
                                "cloud": "dev",
                                "name": "dev-grp",
                                "policy": "anti-affinity",
                            },
                            "register": "group",
                        },
                        {
                            "name": "security group",
                            "novakit.cloud.security_group": {
                                "cloud": "dev",
                                "name": "dev-web",
                                "description": "web",
                            },
                            "register": "sg",
                        },
                        {
                            "name": "security group rule",
                            "novakit.cloud.security_group_rule": {
                                "cloud": "dev",
                                "security_group": "dev-web",
                                "protocol": "tcp",
                                "port_range_min": 80,
                                "port_range_max": 80,
                            },
                            "register": "rule",
                        },
                        {
                            "ansible.builtin.copy": {
                                "dest": str(tools.directory / "modules.json"),
                                "content": "{{ {'made': made, 'locked': locked, 'info': info, 'named': named,"
                                " 'net': net, 'subnet': subnet, 'subnet_again': subnet_again,"
                                " 'dev_net': dev_net, 'key': key, 'group_checked': group_checked,"
                                " 'group': group, 'sg': sg, 'rule': rule,"
                                " 'operators': operators, 'drain_planned': drain_planned,"
                                " 'drain_member': drain_member} | to_json }}",
                            },
                        },
                    ],
                }
            ]
        )
    )
    done = tools.play(play)
    assert done.returncode == 0, done.stdout[-3000:]
    seen = json.loads((tools.directory / "modules.json").read_text())
    assert seen["made"]["changed"] and seen["made"]["actions"] == ["create", "stop"]
    assert seen["made"]["server"]["status"] == "SHUTOFF"
    assert seen["locked"]["changed"] and seen["locked"]["server"]["locked"]
    (info,) = seen["info"]["servers"]
    assert (info["name"], info["status"], info["locked"]) == ("mod-1", "SHUTOFF", True)
    assert seen["named"]["failed"] and "project" in seen["named"]["msg"]
    assert (tools.server("mod-1") or {}).get("locked") is True
    # The catalog modules through the same door (novakit.client.calls): the service's policy.
    assert seen["net"]["changed"] and seen["net"]["network"]["name"] == "mod-net"
    assert seen["subnet"]["changed"] and seen["subnet"]["subnet"]["cidr"] == "10.9.0.0/24"
    assert not seen["subnet_again"]["changed"]
    assert seen["dev_net"]["failed"] and "network:create" in seen["dev_net"]["msg"]
    # A drain through the cloud: planned in check mode (nothing disabled), refused to a member.
    assert seen["drain_planned"]["changed"] and seen["drain_planned"]["host"] == "compute-3"
    assert seen["drain_member"]["failed"] and "host:list" in seen["drain_member"]["msg"]
    db = tools.served.database()
    try:
        from sqlalchemy import select

        from novakit.db.models import Service

        with db.reader() as session:
            service = session.execute(select(Service).where(Service.host == "compute-3")).scalar_one()
            assert not service.disabled
    finally:
        db.dispose()
    # No fall back to the embedded default: the module that opens the database says so.
    assert seen["operators"]["failed"] and "db_url" in seen["operators"]["msg"], seen["operators"]
    assert "does not go through a cloud (nk)" in seen["operators"]["msg"]
    assert seen["key"]["changed"] and seen["key"]["keypair"]["private_key"].startswith("-----BEGIN")
    assert seen["group_checked"]["changed"] and seen["group"]["changed"]
    db = tools.served.database()
    try:
        from novakit.compute import server_groups
        from novakit.keypairs import registry
        from novakit.network import networks

        dev = RequestContext(tools.admin.project_id, seen["key"]["keypair"]["user_id"], ["member"])
        assert registry.find(db, dev, "dev-key") is not None
        assert (server_groups.find(db, dev, "dev-grp") or {}).get("policy") == "anti-affinity"
        assert "dev-net" not in [n["name"] for n in networks.list_networks(db)]
    finally:
        db.dispose()
    assert seen["sg"]["changed"] and seen["sg"]["security_group"]["name"] == "dev-web"
    assert seen["rule"]["changed"] and seen["rule"]["rule"]["port_range_min"] == 80
    db = tools.served.database()
    try:
        from novakit.network import security_groups

        dev = RequestContext(tools.admin.project_id, seen["key"]["keypair"]["user_id"], ["member"])
        rules = security_groups.show_group(db, dev, "dev-web")["security_group_rules"]
        assert [r["port_range_min"] for r in rules if r["direction"] == "ingress"] == [80]
    finally:
        db.dispose()
    assert not [s for s in tools.served.secrets if s in done.stdout]
    assert tools.embedded_default_untouched()


def test_the_service_runs_only_its_listed_calls_with_its_own_caller(tools: Tools) -> None:
    """/novakit/v1/call: a library function not listed (the cells' listing: nova-manage's, on the
    database), a caller or database given by the client, or no token: refused, nothing run."""
    token = tools.served.issue("dev", "dev-pw-1", "admin")
    headers = {"X-Auth-Token": token}

    def call(body: dict[str, Any], sent: dict[str, str] | None = None) -> Any:
        with tools.served.client() as http:
            return http.post("/novakit/v1/call", json=body, headers=headers if sent is None else sent)

    listed = call({"name": "novakit.network.networks.list_networks"})
    assert listed.status_code == 200 and "lan" in [n["name"] for n in listed.json()["result"]]
    for body, field in (
        ({"name": "novakit.cells.manage.list_cells"}, "name"),
        ({"name": "novakit.db.engine.Database.writer"}, "name"),
        ({"name": "novakit.network.networks.show", "args": ["lan"], "kwargs": {"ctx": None}}, "ctx"),
        (
            {
                "name": "novakit.network.networks.create",
                "args": [{"name": "x"}],
                "kwargs": {"db": "sqlite://"},
            },
            "db",
        ),
        ({"name": "novakit.network.networks.show", "args": ["lan", "extra", "more"]}, "args"),
        ({"name": "novakit.network.networks.show", "args": ["lan"], "surprise": 1}, "surprise"),
    ):
        refused = call(body)
        assert refused.status_code == 400, refused.text
        assert (
            refused.json()["error"]["type"] == "ValidationError"
            and field in refused.json()["error"]["message"]
        )
    assert call({"name": "novakit.network.networks.list_networks"}, sent={}).status_code == 401
    assert "x" not in [n["name"] for n in listed.json()["result"]]


def test_no_secret_reaches_the_service_log(tools: Tools) -> None:
    """The passwords and the application credential's secret the tools authenticated with, and
    the tokens they got, are nowhere in the service's log (run last: after the others' calls)."""
    logged = tools.served.log.read_text()
    assert "/novakit/v1/servers/create" in logged or "/novakit/v1/" in logged
    assert not [s for s in tools.served.secrets if s in logged]
