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
INJECTED = {
    "NOVAKIT_DB_URL",
    "NOVAKIT_PROJECT",
    "NOVAKIT_USER",
    "NOVAKIT_ROLES",
    "OS_CLOUD",
    "OS_CLIENT_CONFIG_FILE",
}
#: what AWX itself gives an injector besides the inputs: the files it wrote, by name
AWX_NAMES = {"tower"}


def load() -> tuple[dict[str, Any], dict[str, Any]]:
    inputs = yaml.safe_load((AWX / "credential_type_inputs.yml").read_text())
    injectors = yaml.safe_load((AWX / "credential_type_injectors.yml").read_text())
    return inputs, injectors


def inject(values: dict[str, str], files: Path | None = None) -> dict[str, str]:
    """The environment AWX gives a job whose credential of this type has ``values`` as inputs;
    the files it injects are written into ``files`` (mode 0600, as AWX writes them), else to
    a path that is not written."""
    _, injectors = load()
    sandbox = ImmutableSandboxedEnvironment()
    given: dict[str, Any] = {k: v for k, v in values.items() if v}
    paths = {}
    for key, template in injectors.get("file", {}).items():
        name = key.removeprefix("template.")
        path = (files or Path("/nonexistent")) / f"awx-{name}"
        if files is not None:
            path.write_text(sandbox.from_string(template).render(**given))
            path.chmod(0o600)
        paths[name] = str(path)
    given["tower"] = {"filename": paths}
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
    for template in [*injectors["env"].values(), *injectors["file"].values()]:
        referenced = meta.find_undeclared_variables(sandbox.parse(template))
        assert referenced and referenced <= set(ids) | AWX_NAMES, template
        used |= referenced
    assert used - AWX_NAMES == set(ids)


def test_only_environment_variables_and_the_clouds_file_are_injected_and_secrets_are_secret() -> None:
    inputs, injectors = load()
    # No extra_vars (they show in the job's variables and events); one file, the clouds.yaml.
    assert set(injectors) == {"env", "file"}
    assert set(injectors["file"]) == {"template.clouds"}
    assert set(injectors["env"]) == INJECTED
    fields = {f["id"]: f for f in inputs["fields"]}
    assert {k for k, f in fields.items() if f.get("secret")} == {"db_url", "application_credential_secret"}


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


# openstacksdk's notice about its metrics back ends, raised when it loads any cloud.
@pytest.mark.filterwarnings("ignore:Support for InfluxDB")
def test_the_service_path_names_the_cloud_and_writes_its_clouds_yaml(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An application credential: OS_CLOUD and a clouds.yaml that openstacksdk's loader reads
    as novakit's client will; no database URL, so the cloud wins (``cloud_name``)."""
    from openstack import config as os_config

    from novakit.client import cloud_name

    env = inject(
        {
            "auth_url": "https://novakit.example.com:8774/identity/v3",
            "application_credential_id": "3f1c0d",
            "application_credential_secret": "s3cr3t-not-real",
        },
        tmp_path,
    )
    assert env["OS_CLOUD"] == "novakit" and env["NOVAKIT_DB_URL"] == ""
    assert cloud_name(None, None, env) == "novakit"
    written = Path(env["OS_CLIENT_CONFIG_FILE"])
    assert written.stat().st_mode & 0o077 == 0
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    region = os_config.OpenStackConfig().get_one(cloud="novakit")
    assert region.config["auth_type"] == "v3applicationcredential"
    assert region.config["auth"] == {
        "auth_url": "https://novakit.example.com:8774/identity/v3",
        "application_credential_id": "3f1c0d",
        "application_credential_secret": "s3cr3t-not-real",
    }


def test_the_operator_path_keeps_the_database() -> None:
    env = inject({"db_url": "sqlite:///x.db", "project": "demo", "user": "alice", "roles": "admin"})
    from novakit.client import cloud_name

    assert env["OS_CLOUD"] == ""
    assert cloud_name(None, None, env) is None


def test_a_cloud_named_by_the_caller_wins_and_a_database_url_beats_os_cloud() -> None:
    from novakit.client import cloud_name

    assert cloud_name("mine", "sqlite:///x.db", {"OS_CLOUD": "other"}) == "mine"
    assert cloud_name(None, "sqlite:///x.db", {"OS_CLOUD": "other"}) is None
    assert cloud_name(None, None, {"OS_CLOUD": "other", "NOVAKIT_DB_URL": "sqlite:///x.db"}) is None
    assert cloud_name(None, None, {"OS_CLOUD": "other", "NOVAKIT_DB_URL": ""}) == "other"
    assert cloud_name(None, None, {}) is None
