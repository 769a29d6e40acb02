"""boot.yml's count is the wanted number of servers NAME-1 ... NAME-N: re-runs scale, check mode says how.

On the embedded default (inventory/local.yml, three fake hosts, SQLite), through ansible-runner.
"""

from __future__ import annotations

import threading
from pathlib import Path

import ansible_runner
import pytest

from novakit.context import RequestContext
from tests.e2e.runner import run_playbook
from tests.e2e.test_boot_playbook import _api

pytestmark = pytest.mark.e2e
ADMIN = RequestContext.admin()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    state = tmp_path / "state"
    return {"NOVAKIT_STATE_DIR": str(state), "NOVAKIT_FAKE_STATE_DIR": str(state / "fake")}


def _boot(tmp_path: Path, env: dict[str, str], name: str, count: object, cmdline: str | None = None):
    run = run_playbook("boot.yml", tmp_path, env, {"server_name": name, "count": count}, cmdline=cmdline)
    out = run.stdout.read()
    assert run.rc == 0, out
    # A normal run warns of nothing (no "Could not match supplied host pattern" either).
    assert "[WARNING]" not in out and "Could not match" not in out, out
    return run, out


def _live(env: dict[str, str]) -> dict[str, str]:
    return {s["name"]: s["id"] for s in _api(env).list(ADMIN)}


def test_count_scales_up_and_down_and_the_same_count_changes_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    _boot(tmp_path, env, "sc", 2)
    first = _live(env)
    assert sorted(first) == ["sc-1", "sc-2"]

    _boot(tmp_path, env, "sc", 3)  # adds sc-3, keeps the two
    up = _live(env)
    assert sorted(up) == ["sc-1", "sc-2", "sc-3"]
    assert {n: up[n] for n in first} == first
    assert all(s["status"] == "ACTIVE" for s in _api(env).list(ADMIN))

    again, _ = _boot(tmp_path, env, "sc", 3)
    assert again.stats["changed"] == {}, again.stats
    assert _live(env) == up

    down, out = _boot(tmp_path, env, "sc", 1)  # sc-3 and sc-2 go, the highest first
    assert _live(env) == {"sc-1": up["sc-1"]}
    api = _api(env)
    for name in ("sc-2", "sc-3"):
        gone = api.list_actions(ADMIN, up[name])
        assert [a["action"] for a in gone] == ["create", "delete"], gone
        assert gone[-1]["finish_time"] is not None
        assert f"{name}: DELETED" in out
    # The claims of the deleted servers are freed: the hosts' usage is sc-1's alone.
    with api.db.reader() as session:
        from novakit.db.models import Allocation

        consumers = {a.consumer_id for a in session.query(Allocation).all()}
    assert consumers == {up["sc-1"]}


def test_without_a_count_one_server_has_the_name_and_a_blank_answer_is_unset(
    tmp_path: Path, env: dict[str, str]
) -> None:
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    run = run_playbook("boot.yml", tmp_path, env, {"server_name": "solo", "count": "", "min_count": ""})
    out = run.stdout.read()
    assert run.rc == 0, out
    assert "[WARNING]" not in out
    assert sorted(_live(env)) == ["solo"]
    # count=1 is the numbered family's first member, beside it
    _boot(tmp_path, env, "solo", 1)
    assert sorted(_live(env)) == ["solo", "solo-1"]


def test_a_count_that_is_no_number_is_refused_naming_it(tmp_path: Path, env: dict[str, str]) -> None:
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    run = run_playbook("boot.yml", tmp_path, env, {"server_name": "bad", "count": "three"})
    out = run.stdout.read()
    assert run.rc != 0
    assert "count: Input should be a valid integer" in out, out
    assert _live(env) == {}


def test_check_mode_says_what_would_be_created_and_deleted_and_changes_nothing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    _boot(tmp_path, env, "ck", 3)
    before = _live(env)

    _, up = _boot(tmp_path, env, "ck", 5, cmdline="--check --diff")
    assert "ck-4 would be scheduled to compute-" in up
    assert "ck-5 would be scheduled to compute-" in up
    assert "would be deleted (numbered" not in up

    _, down = _boot(tmp_path, env, "ck", 1, cmdline="--check --diff")
    assert "ck-3 would be deleted" in down and "ck-2 would be deleted" in down
    assert down.index("ck-3 would be deleted") < down.index("ck-2 would be deleted")
    assert "(created)" not in down
    # --diff shows the plan: ck-2 and ck-3 go
    assert '-    "ck-2": {' in down and '-    "ck-3": {' in down, down

    assert _live(env) == before
    assert all(len(_api(env).list_actions(ADMIN, uuid)) == 1 for uuid in before.values())


def test_diff_shows_each_server_before_and_after(tmp_path: Path, env: dict[str, str]) -> None:
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    _boot(tmp_path, env, "df", 1)
    _, out = _boot(tmp_path, env, "df", 2, cmdline="--diff")
    # df-1 was there before and after; df-2 is new
    assert '+    "df-2": {' in out, out
    assert '"status": "ACTIVE"' in out

    stop = run_playbook(
        "server_action.yml", tmp_path, env, {"server_action": "stop", "servers": "df-2"}, cmdline="--diff"
    )
    out = stop.stdout.read()
    assert stop.rc == 0 and "[WARNING]" not in out, out
    assert '-        "status": "ACTIVE"' in out and '+        "status": "SHUTOFF"' in out, out

    gone = run_playbook("delete.yml", tmp_path, env, {"servers": "df-2"}, cmdline="--diff")
    out = gone.stdout.read()
    assert gone.rc == 0 and "[WARNING]" not in out, out
    assert '-    "df-2": {' in out, out
    assert sorted(_live(env)) == ["df-1"]


def test_two_runs_scaling_the_same_name_at_once_make_each_server_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    assert run_playbook("compute_node.yml", tmp_path, env).rc == 0
    runs: dict[str, ansible_runner.Runner] = {}

    def boot(tag: str) -> None:
        (tmp_path / tag).mkdir()
        runs[tag] = run_playbook("boot.yml", tmp_path / tag, env, {"server_name": "race", "count": 3})

    threads = [threading.Thread(target=boot, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tag, run in runs.items():
        assert run.rc == 0, (tag, run.stdout.read())
    servers = _api(env).list(ADMIN)
    assert sorted(s["name"] for s in servers) == ["race-1", "race-2", "race-3"]
    assert all(s["status"] == "ACTIVE" for s in servers), servers
    api = _api(env)
    with api.db.reader() as session:
        from novakit.db.models import Allocation

        rows = [(a.consumer_id, a.resource_provider_id, a.resource_class) for a in session.query(Allocation)]
    # each server claimed once: one provider, one allocation per resource class
    assert {c for c, _, _ in rows} == {s["id"] for s in servers}
    for s in servers:
        mine = [(p, rc) for c, p, rc in rows if c == s["id"]]
        assert len({p for p, _ in mine}) == 1 and len(mine) == len({rc for _, rc in mine}), mine
