"""The AWX credential type of meta/awx/: its two halves agree, and novakit reads what it injects.

AWX renders each injector with a sandboxed Jinja environment over the credential's
inputs, leaving out inputs that were not given (they render as ""); ``inject`` here
does the same, so the environment a job gets is the one these tests look at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

from novakit.config import load_config
from novakit.context import context_from

AWX = Path(__file__).resolve().parents[2] / "meta" / "awx"
INJECTED = {"NOVAKIT_DB_URL", "NOVAKIT_PROJECT", "NOVAKIT_USER", "NOVAKIT_ROLES"}


def load() -> tuple[dict[str, Any], dict[str, Any]]:
    inputs = yaml.safe_load((AWX / "credential_type_inputs.yml").read_text())
    injectors = yaml.safe_load((AWX / "credential_type_injectors.yml").read_text())
    return inputs, injectors


def inject(values: dict[str, str]) -> dict[str, str]:
    """The environment AWX gives a job whose credential of this type has ``values`` as inputs."""
    _, injectors = load()
    sandbox = ImmutableSandboxedEnvironment()
    given = {k: v for k, v in values.items() if v}
    return {name: sandbox.from_string(tmpl).render(**given) for name, tmpl in injectors["env"].items()}


def test_every_injector_uses_a_defined_input_and_every_input_is_injected() -> None:
    inputs, injectors = load()
    ids = [f["id"] for f in inputs["fields"]]
    assert len(ids) == len(set(ids))
    assert len({f["label"] for f in inputs["fields"]}) == len(ids)
    assert all(f.get("type", "string") == "string" for f in inputs["fields"])
    assert set(inputs["required"]) <= set(ids)
    sandbox = ImmutableSandboxedEnvironment()
    used = set()
    for template in injectors["env"].values():
        referenced = meta.find_undeclared_variables(sandbox.parse(template))
        assert referenced and referenced <= set(ids), template
        used |= referenced
    assert used == set(ids)


def test_only_environment_variables_are_injected_and_the_url_is_secret() -> None:
    inputs, injectors = load()
    # No extra_vars (they show in the job's variables and events) and no files.
    assert set(injectors) == {"env"}
    assert set(injectors["env"]) == INJECTED
    fields = {f["id"]: f for f in inputs["fields"]}
    assert fields["db_url"]["secret"] is True
    assert {"db_url", "project", "user"} <= set(inputs["required"])


def test_novakit_reads_the_database_and_identity_the_credential_injects(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'novakit.db'}"
    env = inject({"db_url": url, "project": "demo", "user": "alice", "roles": "reader,auditor"})
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NOVAKIT_CONFIG", raising=False)
    assert load_config().database_url == url
    ctx = context_from({}, environ=env)
    assert (ctx.project_id, ctx.user_id, ctx.roles) == ("demo", "alice", ["reader", "auditor"])


def test_a_credential_without_roles_is_not_an_admin() -> None:
    # Roles left empty render as "": set but empty means no roles, not the admin default.
    env = inject({"db_url": "sqlite:///x.db", "project": "demo", "user": "alice", "roles": ""})
    assert env["NOVAKIT_ROLES"] == ""
    ctx = context_from({}, environ=env)
    assert ctx.roles == [] and not ctx.is_admin
