"""Security groups' records (``novakit.network.security_groups``), with the fake driver.

Neutron's model: a project's default group on first use, rules checked as Neutron checks
them, ports carrying groups, a server's ports getting the groups its create named, and the
effective rule set of a port with ``remote_group`` expanded into the members' fixed IPs.
Every bad input is refused naming the field and the rule, with nothing written.
"""

from __future__ import annotations

from typing import Any

import pytest

from novakit import exceptions
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.network import networks, ports, subnets
from novakit.network import security_groups as sg
from novakit.network.filter_rules import FilterRule
from tests.functional.cloud import Cloud, boot
from tests.functional.test_catalog_modules import run  # noqa: F401
from tests.functional.test_cli import env, nk  # noqa: F401


def _net(cloud: Cloud, name: str = "lan", cidr: str = "10.0.0.0/24") -> None:
    networks.create(cloud.db, cloud.admin, {"name": name})
    subnets.create(cloud.db, cloud.admin, {"name": f"{name}-v4", "network": name, "cidr": cidr})


def _rule(cloud: Cloud, ctx: RequestContext, group: str, **fields: Any) -> dict[str, Any]:
    out = sg.create_rule(cloud.db, cloud.conf, ctx, {"security_group": group, **fields})
    assert out is not None
    return out


def _group(cloud: Cloud, ctx: RequestContext, name: str, **fields: Any) -> dict[str, Any]:
    out = sg.create_group(cloud.db, cloud.conf, ctx, {"name": name, **fields})
    assert out is not None
    return out


def _shape(rules: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {
        (r["direction"], r["ethertype"], r["protocol"], r["port_range_min"], r["port_range_max"],
         r["remote_ip_prefix"], r["remote_group"])
        for r in rules
    }  # fmt: skip


def _port_of(cloud: Cloud, server: dict[str, Any]) -> str:
    [nic] = server["nics"]
    return str(nic["port_id"])


def test_default_group_on_first_use_with_neutrons_rules(cloud: Cloud, ctx: RequestContext) -> None:
    [default] = sg.list_groups(cloud.db, ctx)
    assert (default["name"], default["project_id"]) == ("default", ctx.project_id)
    # Neutron's: egress anywhere and ingress only from the group's own members, IPv4 and IPv6.
    assert _shape(default["security_group_rules"]) == {
        ("egress", "IPv4", None, None, None, None, None),
        ("egress", "IPv6", None, None, None, None, None),
        ("ingress", "IPv4", None, None, None, None, "default"),
        ("ingress", "IPv6", None, None, None, None, "default"),
    }
    # Made once: a second look finds the same group.
    assert [g["id"] for g in sg.list_groups(cloud.db, ctx)] == [default["id"]]
    assert sg.show_group(cloud.db, ctx, "default")["id"] == default["id"]


def test_group_and_rules_create_list_show_delete(cloud: Cloud, ctx: RequestContext) -> None:
    web = _group(cloud, ctx, "web", description="web servers")
    # A new group starts with Neutron's egress rules.
    assert _shape(web["security_group_rules"]) == {
        ("egress", "IPv4", None, None, None, None, None),
        ("egress", "IPv6", None, None, None, None, None),
    }
    ssh = _rule(
        cloud,
        ctx,
        "web",
        protocol="tcp",
        port_range_min=22,
        port_range_max=22,
        remote_ip_prefix="192.0.2.7/24",
    )
    assert (ssh["protocol"], ssh["port_range_min"], ssh["port_range_max"], ssh["remote_ip_prefix"]) == (
        "tcp",
        22,
        22,
        "192.0.2.0/24",  # the network of the prefix, as Neutron keeps it
    )
    ping = _rule(cloud, ctx, "web", protocol="icmp", port_range_min=8, port_range_max=0)
    v6 = _rule(cloud, ctx, web["id"], ethertype="ipv6", protocol="58", remote_group="default")
    assert (v6["ethertype"], v6["protocol"], v6["remote_group"]) == ("IPv6", "ipv6-icmp", "default")
    gre = _rule(cloud, ctx, "web", protocol=47, direction="egress")
    assert gre["protocol"] == "gre"
    any_proto = _rule(cloud, ctx, "web", protocol="any", remote_ip_prefix="10.9.0.0/16")
    assert any_proto["protocol"] is None
    names = {g["name"] for g in sg.list_groups(cloud.db, ctx)}
    assert names == {"default", "web"}
    ids = {r["id"] for r in sg.list_rules(cloud.db, ctx, "web")}
    assert {ssh["id"], ping["id"], v6["id"], gre["id"], any_proto["id"]} <= ids and len(ids) == 7
    assert sg.show_rule(cloud.db, ctx, ssh["id"]) == ssh
    sg.delete_rule(cloud.db, ctx, ssh["id"])
    with pytest.raises(exceptions.SecurityGroupRuleNotFound):
        sg.show_rule(cloud.db, ctx, ssh["id"])
    sg.delete_group(cloud.db, ctx, "web")
    assert {g["name"] for g in sg.list_groups(cloud.db, ctx)} == {"default"}
    # The group's rules went with it.
    assert len(sg.list_rules(cloud.db, ctx)) == 4


BAD_RULES = [
    ({"protocol": "gre", "port_range_min": 1, "port_range_max": 2}, "port_range_min", "has no ports"),
    ({"port_range_min": 22, "port_range_max": 22}, "port_range_min", "needs a protocol"),
    (
        {"protocol": "tcp", "port_range_min": 30, "port_range_max": 20},
        "port_range_min",
        "port_range_min must be <=",
    ),
    ({"protocol": "udp", "port_range_min": 0, "port_range_max": 20}, "port_range_min", "1 to 65535"),
    ({"protocol": "tcp", "port_range_min": 1, "port_range_max": 65536}, "port_range_max", "1 to 65535"),
    ({"protocol": "icmp", "port_range_min": 256}, "port_range_min", "ICMP type"),
    ({"protocol": "icmp", "port_range_min": 8, "port_range_max": 300}, "port_range_max", "ICMP code"),
    ({"protocol": "icmp", "port_range_max": 0}, "port_range_max", "type (port_range_min) is missing"),
    (
        {"ethertype": "IPv6", "remote_ip_prefix": "10.0.0.0/8"},
        "remote_ip_prefix",
        "Conflicting value ethertype",
    ),
    ({"ethertype": "IPv4", "remote_ip_prefix": "2001:db8::/64"}, "remote_ip_prefix", "Conflicting value"),
    ({"remote_ip_prefix": "10.0.0.0/33"}, "remote_ip_prefix", "not a CIDR"),
    ({"protocol": "tcpp"}, "protocol", "not supported"),
    ({"protocol": 256}, "protocol", "0 to 255"),
    ({"ethertype": "IPv6", "protocol": "icmp"}, "protocol", "ipv6-icmp"),
    ({"ethertype": "IPv5"}, "ethertype", "IPv4 or IPv6"),
    ({"direction": "inbound"}, "direction", "ingress"),
    ({"remote_group": "nope"}, "remote_group", "does not exist"),
    ({"remote_group": "default", "remote_ip_prefix": "10.0.0.0/8"}, "remote_ip_prefix", "not both"),
    ({"colour": "red"}, "colour", "not a known field"),
]


@pytest.mark.parametrize(("fields", "field", "rule"), BAD_RULES, ids=[f"{b[1]}-{b[2]}" for b in BAD_RULES])
def test_bad_rule_refused_naming_field_and_rule_nothing_written(
    cloud: Cloud, ctx: RequestContext, fields: dict[str, Any], field: str, rule: str
) -> None:
    _group(cloud, ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        sg.create_rule(cloud.db, cloud.conf, ctx, {"security_group": "web", **fields})
    assert err.value.field == field and rule in err.value.rule, (err.value.field, err.value.rule)
    assert field in str(err.value)
    assert cloud.snapshot() == before


def test_duplicate_rule_is_neutrons_409_in_any_spelling(cloud: Cloud, ctx: RequestContext) -> None:
    _group(cloud, ctx, "web")
    first = _rule(cloud, ctx, "web", protocol="tcp", port_range_min=80)
    before = cloud.snapshot()
    for same in (
        {"protocol": "6", "port_range_min": 80, "port_range_max": 80},
        {"protocol": "TCP", "port_range_max": 80},
        {"protocol": "tcp", "port_range_min": 80, "remote_ip_prefix": "0.0.0.0/0"},
    ):
        with pytest.raises(exceptions.SecurityGroupRuleExists) as err:
            sg.create_rule(cloud.db, cloud.conf, ctx, {"security_group": "web", **same})
        assert err.value.code == 409
        assert f"Security group rule already exists. Rule id is {first['id']}." in str(err.value)
    # The group's own egress rule again, spelt with the /0 prefix.
    with pytest.raises(exceptions.SecurityGroupRuleExists):
        sg.create_rule(
            cloud.db,
            cloud.conf,
            ctx,
            {"security_group": "web", "direction": "egress", "remote_ip_prefix": "::/0", "ethertype": "IPv6"},
        )
    assert cloud.snapshot() == before


def test_group_names_unknown_duplicate_and_default(cloud: Cloud, ctx: RequestContext) -> None:
    _group(cloud, ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.Conflict, match="unique per project"):
        _group(cloud, ctx, "web")
    with pytest.raises(exceptions.Conflict, match="Default security group already exists"):
        _group(cloud, ctx, "default")
    with pytest.raises(exceptions.ValidationError) as err:
        _group(cloud, ctx, " web")
    assert err.value.field == "name"
    with pytest.raises(exceptions.SecurityGroupNotFound, match="Security group nope does not exist"):
        sg.show_group(cloud.db, ctx, "nope")
    with pytest.raises(exceptions.SecurityGroupNotFound):
        sg.delete_group(cloud.db, ctx, "nope")
    with pytest.raises(exceptions.SecurityGroupNotFound):
        sg.create_rule(cloud.db, cloud.conf, ctx, {"security_group": "nope"})
    with pytest.raises(exceptions.SecurityGroupCannotRemoveDefault) as cannot:
        sg.delete_group(cloud.db, ctx, "default")
    assert cannot.value.code == 409
    assert cloud.snapshot() == before


def test_quotas_security_groups_and_rules(cloud: Cloud, ctx: RequestContext) -> None:
    conf = load_config(
        db_url=cloud.db.url,
        state_dir=cloud.conf.state_dir,
        quota={"security_groups": 2, "security_group_rules": 8},
    )
    sg.create_group(cloud.db, conf, ctx, {"name": "a"})  # default (1, 4 rules) + a (2, 6 rules)
    before = cloud.snapshot()
    with pytest.raises(exceptions.OverQuota) as over:
        sg.create_group(cloud.db, conf, ctx, {"name": "b"})
    assert "security_groups" in str(over.value)
    assert cloud.snapshot() == before
    sg.create_rule(cloud.db, conf, ctx, {"security_group": "a", "protocol": "tcp", "port_range_min": 1})
    sg.create_rule(cloud.db, conf, ctx, {"security_group": "a", "protocol": "tcp", "port_range_min": 2})
    before = cloud.snapshot()
    with pytest.raises(exceptions.OverQuota) as over:
        sg.create_rule(cloud.db, conf, ctx, {"security_group": "a", "protocol": "tcp", "port_range_min": 3})
    assert "security_group_rules" in str(over.value)
    assert cloud.snapshot() == before
    from novakit import quota

    usage = quota.get_quota_usage(cloud.db, conf, ctx.project_id)
    assert usage["security_groups"] == {"limit": 2, "in_use": 2}
    assert usage["security_group_rules"] == {"limit": 8, "in_use": 8}


def test_projects_are_isolated(cloud: Cloud, ctx: RequestContext) -> None:
    other = RequestContext(project_id="project-b", user_id="bob", roles=["member"])
    _net(cloud)
    secret = _group(cloud, ctx, "secret")
    _group(cloud, other, "mine")
    assert {g["name"] for g in sg.list_groups(cloud.db, other)} == {"default", "mine"}
    before = cloud.snapshot()
    for ref in ("secret", secret["id"]):
        with pytest.raises(exceptions.SecurityGroupNotFound):
            sg.show_group(cloud.db, other, ref)
        with pytest.raises(exceptions.SecurityGroupNotFound):
            sg.delete_group(cloud.db, other, ref)
        with pytest.raises(exceptions.SecurityGroupNotFound):
            sg.create_rule(cloud.db, cloud.conf, other, {"security_group": ref})
        # Another project's group is not a remote group of one's own.
        with pytest.raises(exceptions.ValidationError) as err:
            sg.create_rule(cloud.db, cloud.conf, other, {"security_group": "mine", "remote_group": ref})
        assert err.value.field == "remote_group"
        with pytest.raises(exceptions.ValidationError) as err:
            cloud.api.create(
                other,
                {
                    "name": "x",
                    "flavor": "m1.small",
                    "image": "tiny",
                    "networks": [{"net_id": "lan"}],
                    "security_groups": [ref],
                },
            )
        assert err.value.field == "security_groups[0]"
    rule_id = secret["security_group_rules"][0]["id"]
    with pytest.raises(exceptions.SecurityGroupRuleNotFound):
        sg.delete_rule(cloud.db, other, rule_id)
    assert rule_id not in {r["id"] for r in sg.list_rules(cloud.db, other)}
    assert cloud.snapshot() == before
    # An admin sees every project's groups.
    assert {"secret", "mine"} <= {g["name"] for g in sg.list_groups(cloud.db, cloud.admin)}


def test_boot_gives_the_servers_ports_their_groups_and_effective_rules(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _net(cloud)
    _group(cloud, ctx, "web")
    _rule(cloud, ctx, "web", protocol="tcp", port_range_min=80, port_range_max=81)
    nic = {"networks": [{"net_id": "lan"}]}
    plain = boot(cloud, ctx, "plain", **nic)
    web = boot(cloud, ctx, "web1", security_groups=[{"name": "web"}, "default"], **nic)
    assert sg.server_groups(cloud.db, ctx, plain["id"]) == ["default"]
    assert sg.server_groups(cloud.db, ctx, "web1") == ["default", "web"]
    plain_ip = plain["addresses"][0]
    web_ip = web["addresses"][0]
    rules = sg.effective_rules(cloud.db, _port_of(cloud, web))
    assert set(rules) == {
        FilterRule("egress", "IPv4"),
        FilterRule("egress", "IPv6"),
        FilterRule("ingress", "IPv4", "tcp", 80, 81),
        # default's ingress from its members: both servers' ports, one rule per address
        FilterRule("ingress", "IPv4", remote_ip_prefix=f"{plain_ip}/32"),
        FilterRule("ingress", "IPv4", remote_ip_prefix=f"{web_ip}/32"),
    }
    # The many-ports form (what the enforcement side reads) agrees.
    many = sg.effective_rules(cloud.db, [_port_of(cloud, web), _port_of(cloud, plain)])
    assert many[_port_of(cloud, web)] == rules
    # A server without a novakit port has no groups, and a create naming groups for none is refused.
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.create(
            ctx, {"name": "legacy", "flavor": "m1.small", "image": "tiny", "security_groups": ["web"]}
        )
    assert err.value.field == "security_groups"
    assert cloud.snapshot() == before


def test_unknown_group_at_create_refused_nothing_written(cloud: Cloud, ctx: RequestContext) -> None:
    _net(cloud)
    before = cloud.snapshot()
    request = {"name": "x", "flavor": "m1.small", "image": "tiny", "networks": [{"net_id": "lan"}]}
    for dry_run in (True, False):
        with pytest.raises(exceptions.ValidationError) as err:
            cloud.api.create(ctx, {**request, "security_groups": ["default", "nope"]}, dry_run=dry_run)
        assert err.value.field == "security_groups[1]" and "'nope' does not exist" in err.value.rule
    assert cloud.snapshot() == before
    # The dry run of a good request writes nothing either (not even the default group).
    assert cloud.api.create(ctx, request, dry_run=True)[0]["name"] == "x"
    assert cloud.snapshot() == before


def test_add_and_remove_security_group_on_a_running_server(cloud: Cloud, ctx: RequestContext) -> None:
    _net(cloud)
    _group(cloud, ctx, "db")
    _rule(cloud, ctx, "db", protocol="tcp", port_range_min=5432, remote_group="db")
    app = boot(cloud, ctx, "app", networks=[{"net_id": "lan"}])
    dbs = boot(cloud, ctx, "db1", networks=[{"net_id": "lan"}], security_groups=["db"])
    app_port, db_port = _port_of(cloud, app), _port_of(cloud, dbs)
    pg = FilterRule("ingress", "IPv4", "tcp", 5432, 5432, f"{app['addresses'][0]}/32")
    assert pg not in sg.effective_rules(cloud.db, db_port)
    seen: list[list[str]] = []
    sg.add_to_server(cloud.db, ctx, "app", "db", on_change=seen.append)
    # app's port changed (it carries db now), and db1's (db's remote group gained a member).
    assert seen == [sorted([app_port, db_port])]
    assert sg.server_groups(cloud.db, ctx, "app") == ["db", "default"]
    assert pg in sg.effective_rules(cloud.db, db_port)
    before = cloud.snapshot()
    with pytest.raises(exceptions.SecurityGroupExistsForInstance):
        sg.add_to_server(cloud.db, ctx, "app", "db")
    with pytest.raises(exceptions.SecurityGroupNotFound):
        sg.add_to_server(cloud.db, ctx, "app", "nope")
    with pytest.raises(exceptions.SecurityGroupInUse, match="in use"):
        sg.delete_group(cloud.db, ctx, "db")
    assert cloud.snapshot() == before
    sg.remove_from_server(cloud.db, ctx, app["id"], "db")
    assert pg not in sg.effective_rules(cloud.db, db_port)
    assert sg.server_groups(cloud.db, ctx, "app") == ["default"]
    with pytest.raises(exceptions.SecurityGroupNotExistsForInstance):
        sg.remove_from_server(cloud.db, ctx, "app", "db")
    # Removing the last group leaves the port filtered with nothing allowed (Neutron).
    sg.remove_from_server(cloud.db, ctx, "app", "default")
    assert sg.effective_rules(cloud.db, app_port) == []
    # A server's delete takes its ports' bindings: the group can go then.
    cloud.api.delete(ctx, dbs["id"])
    sg.delete_group(cloud.db, ctx, "db")


def test_affected_ports_of_a_rule_a_membership_and_a_port(cloud: Cloud, ctx: RequestContext) -> None:
    _net(cloud)
    _group(cloud, ctx, "web")
    _group(cloud, ctx, "lb")
    _rule(cloud, ctx, "web", protocol="tcp", port_range_min=80, remote_group="lb")
    web = boot(cloud, ctx, "web1", networks=[{"net_id": "lan"}], security_groups=["web"])
    lb = boot(cloud, ctx, "lb1", networks=[{"net_id": "lan"}], security_groups=["lb"])
    web_port, lb_port = _port_of(cloud, web), _port_of(cloud, lb)
    with cloud.db.reader() as session:
        by_rule = sg.affected_ports(session, rules_of=[sg.get(session, ctx, "web").uuid])
        by_member = sg.affected_ports(session, members_of=[sg.get(session, ctx, "lb").id])
        by_port = sg.affected_ports(session, ports=[lb_port])
    assert [(a.port_id, a.host, a.instance_uuid) for a in by_rule] == [(web_port, web["host"], web["id"])]
    assert [a.port_id for a in by_member] == [web_port]
    assert sorted(a.port_id for a in by_port) == sorted([web_port, lb_port])
    seen: list[list[str]] = []
    rule = sg.create_rule(
        cloud.db,
        cloud.conf,
        ctx,
        {"security_group": "web", "protocol": "udp", "port_range_min": 53},
        on_change=seen.append,
    )
    assert rule is not None
    sg.delete_rule(cloud.db, ctx, rule["id"], on_change=seen.append)
    assert seen == [[web_port], [web_port]]


def test_port_create_carries_the_default_group(cloud: Cloud, ctx: RequestContext) -> None:
    _net(cloud)
    port = ports.create(cloud.db, ctx, {"name": "p1", "network": "lan"})
    assert port is not None and port["security_groups"] == ["default"]
    server = boot(cloud, ctx, "given", networks=[{"port_id": "p1"}])
    assert sg.server_groups(cloud.db, ctx, server["id"]) == ["default"]


def test_the_command_line_as_openstack_users_type_it(nk: Any) -> None:  # noqa: F811
    import json

    def js(*args: str) -> Any:
        return json.loads(nk(*args, "-f", "json").stdout)

    nk("db", "upgrade")
    nk("host", "add", "compute-1", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200")
    nk("flavor", "create", "m1.small", "--vcpus", "1", "--ram", "1024", "--disk", "10")
    nk("image", "create", "tiny", "--location", "/var/lib/novakit/images/tiny.qcow2")
    nk("network", "create", "lan", "--source", "default")
    nk("subnet", "create", "lan-v4", "--network", "lan", "--subnet-range", "10.8.0.0/24")
    web = js("security", "group", "create", "web", "--description", "web servers")
    assert web["name"] == "web" and len(web["security_group_rules"]) == 2
    ssh = js(
        "security",
        "group",
        "rule",
        "create",
        "web",
        "--protocol",
        "tcp",
        "--dst-port",
        "22:22",
        "--remote-ip",
        "192.0.2.0/24",
    )
    assert (ssh["protocol"], ssh["port_range_min"], ssh["remote_ip_prefix"], ssh["direction"]) == (
        "tcp",
        22,
        "192.0.2.0/24",
        "ingress",
    )
    js(
        "security",
        "group",
        "rule",
        "create",
        "web",
        "--egress",
        "--ethertype",
        "IPv6",
        "--protocol",
        "ipv6-icmp",
        "--remote-group",
        "web",
    )
    dup = nk(
        "security",
        "group",
        "rule",
        "create",
        "web",
        "--protocol",
        "6",
        "--dst-port",
        "22",
        "--remote-ip",
        "192.0.2.0/24",
        code=1,
    )
    assert f"Security group rule already exists. Rule id is {ssh['id']}." in dup.stderr
    bad = nk("security", "group", "rule", "create", "web", "--protocol", "gre", "--dst-port", "1:2", code=1)
    assert "port_range_min" in bad.stderr and "has no ports" in bad.stderr
    assert "--dst-port" in nk("security", "group", "rule", "create", "web", "--dst-port", "x", code=1).stderr
    assert {g["name"] for g in js("security", "group", "list")} == {"default", "web"}
    rules = js("security", "group", "rule", "list", "web")
    assert len(rules) == 4 and {r["security_group"] for r in rules} == {"web"}
    nk(
        "server",
        "create",
        "a",
        "--flavor",
        "m1.small",
        "--image",
        "tiny",
        "--nic",
        "net-id=lan",
        "--security-group",
        "web",
        "--security-group",
        "default",
    )
    nk("server", "create", "b", "--flavor", "m1.small", "--image", "tiny", "--nic", "net-id=lan")
    ports = {p["device_id"]: p for p in json.loads(nk("port", "list", "-f", "json").stdout)}
    assert sorted(len(p["security_groups"]) for p in ports.values()) == [1, 2]
    # server show: the groups its ports carry, as Nova shows them.
    assert js("server", "show", "a")["security_groups"] == [{"name": "default"}, {"name": "web"}]
    # A port without port security: no group, and no group may be added to its server.
    bare = js("port", "create", "bare", "--network", "lan", "--disable-port-security")
    assert (bare["port_security_enabled"], bare["security_groups"]) == (False, [])
    assert "Port Security" in nk("port", "show", "bare").stdout
    nk("server", "create", "d", "--flavor", "m1.small", "--image", "tiny", "--nic", "port-id=bare")
    assert js("server", "show", "d")["security_groups"] == []
    refused = nk("server", "add", "security", "group", "d", "web", code=1)
    assert "port bare has port security disabled" in refused.stderr
    nk("server", "delete", "d")
    assert "deleted" in nk("port", "delete", "bare").stdout
    unknown = nk(
        "server",
        "create",
        "c",
        "--flavor",
        "m1.small",
        "--image",
        "tiny",
        "--nic",
        "net-id=lan",
        "--security-group",
        "nope",
        code=1,
    )
    assert "security_groups[0]" in unknown.stderr and "'nope' does not exist" in unknown.stderr
    assert "added" in nk("server", "add", "security", "group", "b", "web").stdout
    assert "already associated" in nk("server", "add", "security", "group", "b", "web", code=1).stderr
    in_use = nk("security", "group", "delete", "web", code=1)
    assert "Security Group web in use" in in_use.stderr
    assert "removed" in nk("server", "remove", "security", "group", "b", "web").stdout
    # A member may not delete its project's default group (an admin may, once no port carries it).
    member = nk("security", "group", "delete", "default", code=1, NOVAKIT_ROLES="member")
    assert "removing default security group" in member.stderr
    nk("security", "group", "rule", "delete", ssh["id"])
    assert len(js("security", "group", "rule", "list", "web")) == 3
    nk("server", "delete", "a")
    assert "deleted" in nk("security", "group", "delete", "web").stdout


def test_the_modules_plan_create_keep_and_delete(cloud: Cloud, run: Any) -> None:  # noqa: F811
    _net(cloud)
    before = cloud.snapshot()
    plan = run("security_group", {"name": "web", "description": "web"}, check=True)
    assert plan["changed"] and cloud.snapshot() == before, plan
    made = run("security_group", {"name": "web", "description": "web"})
    assert made["changed"] and made["security_group"]["name"] == "web"
    assert not run("security_group", {"name": "web", "description": "web"})["changed"]
    rule = {
        "security_group": "web",
        "protocol": "tcp",
        "port_range_min": 22,
        "remote_ip_prefix": "192.0.2.9/24",
    }
    before = cloud.snapshot()
    assert run("security_group_rule", rule, check=True)["changed"] and cloud.snapshot() == before
    first = run("security_group_rule", rule)
    assert first["changed"] and first["rule"]["port_range_max"] == 22
    # The same rule in Neutron's spelling, and in openstack.cloud's option names: no change.
    same = {
        "security_group": "web",
        "protocol": "6",
        "port_range_min": 22,
        "port_range_max": 22,
        "ether_type": "IPv4",
        "remote_ip_prefix": "192.0.2.0/24",
    }
    again = run("security_group_rule", same)
    assert not again["changed"] and again["rule"]["id"] == first["rule"]["id"]
    bad = run(
        "security_group_rule", {"security_group": "web", "protocol": "gre", "port_range_min": 1}, check=True
    )
    assert bad.get("failed") and "port_range_min" in bad["msg"] and "has no ports" in bad["msg"]
    # A port carries the group: the group's delete is refused, in check mode as for real.
    # the modules' caller
    owner = RequestContext(project_id="admin-project", user_id="admin", roles=["admin"])
    boot(cloud, owner, "w", networks=[{"net_id": "lan"}], security_groups=["web"])
    for check in (True, False):
        refused = run("security_group", {"name": "web", "state": "absent"}, check=check)
        assert refused.get("failed") and "in use" in refused["msg"]
    assert run("security_group_rule", {**rule, "state": "absent"})["changed"]
    assert not run("security_group_rule", {**rule, "state": "absent"})["changed"]
    cloud.api.delete(owner, "w")
    assert run("security_group", {"name": "web", "state": "absent"})["changed"]
    assert not run("security_group", {"name": "web", "state": "absent"})["changed"]


def test_the_port_modules_port_security(cloud: Cloud, run: Any) -> None:  # noqa: F811
    _net(cloud)
    bare = {"name": "bare", "network": "lan", "port_security_enabled": False}
    made = run("port", bare)
    assert made["changed"] and made["port"]["port_security_enabled"] is False, made
    assert made["port"]["security_groups"] == []
    guarded = run("port", {"name": "guarded", "network": "lan"})
    assert guarded["port"]["port_security_enabled"] is True
    assert guarded["port"]["security_groups"] == ["default"]
    assert not run("port", bare)["changed"]
    assert run("port", {"name": "bare", "state": "absent"})["changed"]


def test_port_security_migration_keeps_older_ports_unfiltered(tmp_path: Any) -> None:
    """0012: a port that carried no group (made before groups existed) keeps working unfiltered,
    a port that carries groups keeps port security; a new port gets it by default."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from novakit.db.migration import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    cfg = alembic_config(url)
    command.upgrade(cfg, "0011")
    engine = create_engine(url)
    now = "2026-01-01 00:00:00"
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO networks (id, uuid, name, shared, is_default, provider, source, "
                "project_id, created_at) VALUES (1, 'n1', 'lan', 0, 0, 'network', 'default', 'p', :now)"
            ),
            {"now": now},
        )
        for pid in (1, 2):
            conn.execute(
                text(
                    "INSERT INTO ports (id, uuid, network_id, project_id, mac_address, status, "
                    "preserve_on_delete, created_at) VALUES (:id, :uuid, 1, 'p', :mac, 'DOWN', 1, :now)"
                ),
                {"id": pid, "uuid": f"port-{pid}", "mac": f"fa:16:3e:00:00:0{pid}", "now": now},
            )
        conn.execute(
            text(
                "INSERT INTO security_groups (id, uuid, name, project_id, created_at) "
                "VALUES (1, 'g1', 'default', 'p', :now)"
            ),
            {"now": now},
        )
        conn.execute(text("INSERT INTO security_group_port_bindings VALUES (2, 1)"))
    command.upgrade(cfg, "0012")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO ports (id, uuid, network_id, project_id, mac_address, status, "
                "preserve_on_delete, created_at) "
                "VALUES (3, 'port-3', 1, 'p', 'fa:16:3e:00:00:03', 'DOWN', 1, :now)"
            ),
            {"now": now},
        )
        rows = conn.execute(text("SELECT uuid, port_security_enabled FROM ports ORDER BY id")).all()
    assert [(u, bool(e)) for u, e in rows] == [("port-1", False), ("port-2", True), ("port-3", True)]
    engine.dispose()


def test_boot_playbook_variable_and_server_module_option(cloud: Cloud, ctx: RequestContext, run: Any) -> None:  # noqa: F811
    from novakit import playflow

    _net(cloud)
    _group(cloud, ctx, "web")
    # boot.yml's variable as a survey gives it: names separated by spaces.
    server = {
        "name": "pf",
        "flavor": "m1.small",
        "image": "tiny",
        "networks": "lan",
        "security_groups": "web default",
    }
    scheduled = playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": server})
    assert scheduled["changed"]
    assert sg.server_groups(cloud.db, ctx, "pf") == ["default", "web"]
    refused = {**server, "name": "pf2", "security_groups": "nope"}
    with pytest.raises(exceptions.ValidationError) as err:
        playflow.run_step(cloud.api, ctx, {"step": "schedule", "server": refused})
    assert err.value.field == "security_groups[0]"
    # The server module (openstack.cloud's option), as the modules' caller.
    _group(cloud, RequestContext("admin-project", "admin", ["admin"]), "db")
    made = run(
        "server",
        {"name": "m", "flavor": "m1.small", "image": "tiny", "nics": ["lan"], "security_groups": ["db"]},
    )
    assert made["changed"], made
    assert sg.server_groups(cloud.db, cloud.admin, made["server"]["id"]) == ["db"]


def test_an_admin_adds_the_servers_own_projects_group(cloud: Cloud, ctx: RequestContext) -> None:
    _net(cloud)
    _group(cloud, ctx, "web")
    _rule(cloud, ctx, "web", protocol="tcp", port_range_min=8080)
    _group(cloud, cloud.admin, "web")  # a group of the admin's own project, of the same name
    server = boot(cloud, ctx, "app", networks=[{"net_id": "lan"}])
    sg.add_to_server(cloud.db, cloud.admin, server["id"], "web")
    assert sg.server_groups(cloud.db, ctx, "app") == ["default", "web"]
    # The member's web (its rule), not the admin's.
    assert FilterRule("ingress", "IPv4", "tcp", 8080, 8080) in sg.effective_rules(
        cloud.db, _port_of(cloud, server)
    )


def test_the_quota_module_sets_security_group_limits(cloud: Cloud, run: Any) -> None:  # noqa: F811
    out = run("quota", {"name": "team-a", "security_groups": 3, "security_group_rules": 20})
    assert out["changed"], out
    assert out["quota"]["security_groups"] == {"limit": 3, "in_use": 0}
    assert out["quota"]["security_group_rules"] == {"limit": 20, "in_use": 0}
    assert not run("quota", {"name": "team-a", "security_groups": 3})["changed"]
