"""Eight OS processes add rules and ports to one security group at once: nothing is lost.

No group exists when they start: each process's first call makes its project's ``default``
group on first use, so that races too. Then each process (spawned: nothing shared but the
database) adds rules of its own to ``default``, tries one rule that every process adds (the
same rule: one create wins, the others get Neutron's 409), and creates ports (a new port
carries ``default``). Afterwards, on SQLite and PostgreSQL:

* there is one ``default`` group, with Neutron's four rules, every process's own rules, and the
  shared rule once;
* every port carries the group, and its effective rule set is exactly the group's rules with the
  ingress-from-``default`` rule expanded into every port's fixed IP.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from pathlib import Path
from typing import Any

from novakit.db.engine import Database

PROCESSES = 8
RULES = 2  # each process's own
PORTS = 2  # each process's


def _worker(url: str, state_dir: str, n: int, start: Any, results: Any) -> None:
    from novakit import exceptions
    from novakit.config import load_config
    from novakit.context import RequestContext
    from novakit.network import ports
    from novakit.network import security_groups as sg

    conf = load_config(db_url=url, state_dir=state_dir)
    db = Database(url, auto_upgrade=False)
    ctx = RequestContext("race", f"racer-{n}", ["member"])
    made: list[str] = []
    lost = 0
    start.wait()
    try:
        for i in range(max(RULES, PORTS)):
            if i < RULES:
                rule = {"security_group": "default", "protocol": "tcp", "port_range_min": 1000 + 10 * n + i}
                sg.create_rule(db, conf, ctx, rule)
            if i < PORTS:
                port = ports.create(db, ctx, {"name": f"p{n}-{i}", "network": "lan"})
                assert port is not None
                made.append(port["id"])
        try:
            sg.create_rule(
                db, conf, ctx, {"security_group": "default", "protocol": "udp", "port_range_min": 53}
            )
        except exceptions.SecurityGroupRuleExists:
            lost = 1
        results.put(("ok", made, lost))
    except Exception:
        results.put(("error", traceback.format_exc(), 0))
    finally:
        db.dispose()


def test_eight_processes_add_rules_and_ports_to_one_group_nothing_lost(db_url: str, tmp_path: Path) -> None:
    from novakit.context import RequestContext
    from novakit.network import networks, subnets
    from novakit.network import security_groups as sg
    from novakit.network.filter_rules import FilterRule

    db = Database(db_url)
    admin = RequestContext.admin()
    networks.create(db, admin, {"name": "lan"})
    subnets.create(db, admin, {"name": "lan-v4", "network": "lan", "cidr": "10.30.0.0/24"})
    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    state = str(tmp_path / "state")
    procs = [ctx.Process(target=_worker, args=(db_url, state, n, start, results)) for n in range(PROCESSES)]
    for proc in procs:
        proc.start()
    start.set()
    out = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    errors = [o[1] for o in out if o[0] == "error"]
    assert errors == [], "\n".join(errors)
    # The shared rule was made once: every other process was told it exists.
    assert sum(o[2] for o in out) == PROCESSES - 1

    member = RequestContext("race", "checker", ["member"])
    [group] = sg.list_groups(db, member)
    assert group["name"] == "default"
    own = {
        (r["protocol"], r["port_range_min"]) for r in group["security_group_rules"] if r["protocol"] == "tcp"
    }
    assert own == {("tcp", 1000 + 10 * n + i) for n in range(PROCESSES) for i in range(RULES)}
    assert len(group["security_group_rules"]) == 4 + PROCESSES * RULES + 1

    made = [uuid for o in out for uuid in o[1]]
    assert len(made) == PROCESSES * PORTS
    from novakit.network import ports

    listed = {p["id"]: p for p in ports.list_ports(db, member)}
    assert set(listed) == set(made) and all(p["security_groups"] == ["default"] for p in listed.values())
    addresses = [p["fixed_ips"][0]["ip_address"] for p in listed.values()]
    expected = {
        FilterRule("egress", "IPv4"),
        FilterRule("egress", "IPv6"),
        FilterRule("ingress", "IPv4", "udp", 53, 53),
        *(
            FilterRule("ingress", "IPv4", "tcp", p, p)
            for p in (1000 + 10 * n + i for n in range(PROCESSES) for i in range(RULES))
        ),
        *(FilterRule("ingress", "IPv4", remote_ip_prefix=f"{a}/32") for a in addresses),
    }
    rules = sg.effective_rules(db, made)
    assert set(rules) == set(made)
    for uuid in made:
        assert set(rules[uuid]) == expected and len(rules[uuid]) == len(expected)
    db.dispose()
