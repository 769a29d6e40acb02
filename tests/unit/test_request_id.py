"""One order for the run's request id and the caller's identity (``novakit.context``).

The precedence cases pass their variables and environment as plain mappings. The
last tests load the three Ansible faces that name a request - the callback plugin,
the modules' base class, the conductor action plugin - and check that each run gives
all three the same id.
"""

from __future__ import annotations

import importlib
import os
import pwd
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from novakit import exceptions
from novakit.config import IdentityConfig, load_config
from novakit.context import context_from, normalize_request_id, run_request_id

ROOT = Path(__file__).resolve().parents[2]
RUNNER_DIR = "/tmp/runner-x/artifacts/3f2c"  # what ansible-runner sets: <private dir>/artifacts/<ident>


@pytest.mark.parametrize(
    ("extra_vars", "environ", "expected"),
    [
        pytest.param({}, {}, None, id="no run"),
        pytest.param({"novakit_request_id": "mine"}, {}, "req-mine", id="explicit"),
        pytest.param({"novakit_request_id": "req-mine"}, {}, "req-mine", id="explicit, already req-"),
        pytest.param(
            {"novakit_request_id": "mine", "awx_job_id": 7},
            {"NOVAKIT_REQUEST_ID": "req-cb", "JOB_ID": "7", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR},
            "req-mine",
            id="explicit beats everything",
        ),
        pytest.param(
            {"awx_job_id": 7},
            {"NOVAKIT_REQUEST_ID": "req-cb", "JOB_ID": "7", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR},
            "req-cb",
            id="handed-down id beats AWX and runner",
        ),
        pytest.param({"awx_job_id": 7}, {"AWX_ISOLATED_DATA_DIR": RUNNER_DIR}, "req-awx-7", id="awx_job_id"),
        pytest.param({"tower_job_id": "8"}, {}, "req-awx-8", id="tower_job_id"),
        pytest.param({"awx_job_id": 7}, {"JOB_ID": "9"}, "req-awx-7", id="AWX variable before AWX env"),
        pytest.param({}, {"JOB_ID": "9", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR}, "req-awx-9", id="JOB_ID"),
        pytest.param({}, {"AWX_JOB_ID": "10"}, "req-awx-10", id="AWX_JOB_ID"),
        pytest.param({}, {"TOWER_JOB_ID": "11"}, "req-awx-11", id="TOWER_JOB_ID"),
        pytest.param({}, {"AWX_ISOLATED_DATA_DIR": RUNNER_DIR}, "req-3f2c", id="runner ident"),
        pytest.param(
            {}, {"AWX_ISOLATED_DATA_DIR": RUNNER_DIR + "/"}, "req-3f2c", id="runner, trailing slash"
        ),
        pytest.param(
            {}, {"AWX_ISOLATED_DATA_DIR": "/runner/artifacts/55"}, "req-55", id="runner in a container"
        ),
        pytest.param(
            {"novakit_request_id": "", "awx_job_id": None},
            {"NOVAKIT_REQUEST_ID": "", "JOB_ID": " ", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR},
            "req-3f2c",
            id="empty values are not given",
        ),
        pytest.param({}, {"AWX_ISOLATED_DATA_DIR": "/"}, None, id="no ident in the artifact dir"),
    ],
)
def test_the_first_source_that_is_set_names_the_run(
    extra_vars: dict[str, Any], environ: dict[str, str], expected: str | None
) -> None:
    assert run_request_id(extra_vars, environ) == expected


def test_modules_see_the_environment_only() -> None:
    assert run_request_id(None, {"JOB_ID": "12"}) == "req-awx-12"


def test_normalising_keeps_req_ids_and_marks_awx_jobs() -> None:
    assert normalize_request_id("abc") == "req-abc"
    assert normalize_request_id(42, awx=True) == "req-awx-42"
    assert normalize_request_id("req-abc", awx=True) == "req-abc"
    assert normalize_request_id(normalize_request_id(" x ")) == "req-x"


def test_an_unset_identity_is_a_member_never_an_admin() -> None:
    ctx = context_from({}, environ={})
    identity = (ctx.project_id, ctx.user_id, ctx.roles, ctx.is_admin)
    # No USER or LOGNAME: the Unix user from the password database (issue 25, item 18).
    unix_user = pwd.getpwuid(os.getuid()).pw_name
    assert identity == ("default", unix_user, ["member"], False)
    assert context_from({}, environ={"USER": "ana"}).user_id == "ana"


def test_the_operators_configuration_gives_the_identity_under_the_environment() -> None:
    identity = IdentityConfig(project="ops", user="olga", roles=["admin"])
    ctx = context_from({}, environ={}, identity=identity)
    assert (ctx.project_id, ctx.user_id, ctx.roles) == ("ops", "olga", ["admin"])
    env = {"NOVAKIT_PROJECT": "p1", "NOVAKIT_ROLES": "member"}
    ctx = context_from({}, environ=env, identity=identity)
    assert (ctx.project_id, ctx.user_id, ctx.roles) == ("p1", "olga", ["member"])


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"roles": ["admin"]}, "roles"),
        ({"roles": ["member", "admin"]}, "roles"),
        ({"project": "team-a"}, "project"),
        ({"user": "alice"}, "user"),
    ],
)
def test_a_member_may_not_give_itself_another_identity(given: dict[str, Any], option: str) -> None:
    env = {"NOVAKIT_PROJECT": "team-b", "NOVAKIT_USER": "bob", "NOVAKIT_ROLES": "member"}
    with pytest.raises(exceptions.IdentityNotAllowed) as refused:
        context_from(given, environ=env)
    assert refused.value.format_message().startswith(f"{option} ")
    # Naming what it already is, or dropping roles, is fine.
    assert context_from({"project": "team-b", "user": "bob", "roles": []}, environ=env).roles == []
    # Unless the operator trusts what calls give.
    trusting = IdentityConfig(trust_given_identity=True)
    assert context_from(given, environ=env, identity=trusting).roles == given.get("roles", ["member"])


def test_the_environment_beats_the_defaults() -> None:
    env = {"NOVAKIT_PROJECT": "p1", "NOVAKIT_USER": "u1", "NOVAKIT_ROLES": "member, reader", "USER": "ana"}
    ctx = context_from({}, environ=env)
    assert (ctx.project_id, ctx.user_id, ctx.roles) == ("p1", "u1", ["member", "reader"])
    assert context_from({}, environ={"NOVAKIT_ROLES": ""}).roles == []


def test_an_admins_parameters_beat_the_environment() -> None:
    env = {"NOVAKIT_PROJECT": "p1", "NOVAKIT_USER": "u1", "NOVAKIT_ROLES": "admin"}
    ctx = context_from({"project": "p2", "user": "u2", "roles": ["member"]}, environ=env)
    assert (ctx.project_id, ctx.user_id, ctx.roles, ctx.is_admin) == ("p2", "u2", ["member"], False)


def test_none_and_empty_strings_are_not_given_but_an_empty_role_list_is() -> None:
    env = {"NOVAKIT_PROJECT": "p1", "NOVAKIT_USER": "u1", "NOVAKIT_ROLES": "admin"}
    ctx = context_from({"project": "", "user": None, "roles": None, "request_id": ""}, environ=env)
    assert (ctx.project_id, ctx.user_id, ctx.roles) == ("p1", "u1", ["admin"])
    assert context_from({"roles": []}, environ=env).roles == []


def test_the_request_id_parameter_beats_the_run() -> None:
    run = {"NOVAKIT_REQUEST_ID": "req-cb", "JOB_ID": "7"}
    assert context_from({"request_id": "later-step"}, environ=run).request_id == "req-later-step"
    assert (
        context_from({"request_id": "req-s1"}, environ=run, extra_vars={"awx_job_id": 7}).request_id
        == "req-s1"
    )


def test_without_a_parameter_the_run_names_the_request() -> None:
    assert context_from({}, environ={"JOB_ID": "7"}).request_id == "req-awx-7"
    assert context_from({}, environ={}, extra_vars={"awx_job_id": 7}).request_id == "req-awx-7"
    assert context_from({}, environ={"AWX_ISOLATED_DATA_DIR": RUNNER_DIR}).request_id == "req-3f2c"


def test_outside_a_run_every_call_gets_a_new_id() -> None:
    first, second = context_from({}, environ={}).request_id, context_from({}, environ={}).request_id
    assert first.startswith("req-") and second.startswith("req-") and first != second


# --- the callback, the modules' base and the conductor action plugin agree -----------------


def _collection(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """A plugin of the checkout's collection (playbooks/collections links to the repository)."""
    monkeypatch.syspath_prepend(str(ROOT / "playbooks" / "collections"))
    return importlib.import_module(f"ansible_collections.novakit.cloud.plugins.{name}")


RUNS = [
    pytest.param({}, {"AWX_ISOLATED_DATA_DIR": RUNNER_DIR}, "req-3f2c", id="ansible-runner"),
    pytest.param(
        {"awx_job_id": 7}, {"JOB_ID": "7", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR}, "req-awx-7", id="AWX"
    ),
    pytest.param(
        {"novakit_request_id": "mine", "awx_job_id": 7},
        {"JOB_ID": "7", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR},
        "req-mine",
        id="AWX job given an id",
    ),
    pytest.param(
        {},
        {"NOVAKIT_REQUEST_ID": "req-runner", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR},
        "req-runner",
        id="novakit.runner",
    ),
    pytest.param({}, {}, None, id="plain ansible-playbook"),
]
RUN_ENV = ("NOVAKIT_REQUEST_ID", "JOB_ID", "AWX_JOB_ID", "TOWER_JOB_ID", "AWX_ISOLATED_DATA_DIR")


def _run_environment(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> None:
    # monkeypatch puts back what it found, also what the callback writes during the test.
    for name in RUN_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)


def _module_id(monkeypatch: pytest.MonkeyPatch, params: dict[str, Any], run_vars: Any = None) -> str:
    base = _collection(monkeypatch, "module_utils.novakit").NovakitModule
    module = SimpleNamespace(
        params=params, config=lambda: load_config(), extra_vars=run_vars or {}, cloud=lambda: None
    )
    return str(base.context(module).request_id)


def _action_id(monkeypatch: pytest.MonkeyPatch, args: dict[str, Any], task_vars: dict[str, Any]) -> str:
    """The id of a module run in Ansible's worker (plugin_utils/in_process.py), seeing the run variables."""
    from ansible.template import Templar

    action = _collection(monkeypatch, "action.conductor").ActionModule
    step = SimpleNamespace(_templar=Templar(loader=None))
    return _module_id(monkeypatch, args, action._run_vars(step, task_vars))


@pytest.mark.parametrize(("extra_vars", "environ", "expected"), RUNS)
def test_with_the_callback_all_three_use_its_id(
    monkeypatch: pytest.MonkeyPatch, extra_vars: dict[str, Any], environ: dict[str, str], expected: str | None
) -> None:
    _run_environment(monkeypatch, environ)
    callback = _collection(monkeypatch, "callback.novakit").CallbackModule()
    callback.v2_playbook_on_play_start(
        SimpleNamespace(_variable_manager=SimpleNamespace(extra_vars=extra_vars))
    )
    if expected is None:  # a run with nothing to name it: the callback makes up one id for the run
        expected = callback.request_id
        assert expected.startswith("req-")
    assert callback.request_id == expected
    assert _module_id(monkeypatch, {}) == expected
    assert _action_id(monkeypatch, {}, dict(extra_vars, inventory_hostname="localhost")) == expected


@pytest.mark.parametrize(("extra_vars", "environ", "expected"), RUNS[:2])
def test_without_the_callback_modules_and_steps_find_the_run_themselves(
    monkeypatch: pytest.MonkeyPatch, extra_vars: dict[str, Any], environ: dict[str, str], expected: str
) -> None:
    _run_environment(monkeypatch, environ)
    assert _module_id(monkeypatch, {}) == expected
    assert _action_id(monkeypatch, {}, dict(extra_vars)) == expected


def test_the_action_plugin_takes_the_awx_job_from_its_task_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # No callback, no environment: only the play's variables know the job (a playbook that omits request_id).
    _run_environment(monkeypatch, {})
    assert _action_id(monkeypatch, {}, {"awx_job_id": 31}) == "req-awx-31"


def test_a_later_step_keeps_the_request_id_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    _run_environment(monkeypatch, {"JOB_ID": "7", "AWX_ISOLATED_DATA_DIR": RUNNER_DIR})
    task_vars = {"awx_job_id": 7, "novakit_request_id": "req-awx-7"}
    assert _action_id(monkeypatch, {"request_id": "req-first-step"}, task_vars) == "req-first-step"
    assert _module_id(monkeypatch, {"request_id": "req-first-step"}) == "req-first-step"
