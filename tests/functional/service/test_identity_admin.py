"""The identity CRUD and application credentials through a real ``novakit serve``: the real
``openstack`` command for what an operator and an AWX job do (a project, a user, a role, an
application credential, a clouds.yaml from ``novakit identity clouds-yaml``), httpx for the
answers to good and bad callers.

One service per back end for the module (``conftest.serve_cloud``). The ``openstack`` command
costs a second or two of start-up a call: it runs on SQLite only, where the behaviour is the
library's; the PostgreSQL service gets the checks where the database's own behaviour matters
(unique names, cascades, expiry compared in SQL).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import func, select, update

from novakit.db.models import (
    IdentityApplicationCredential,
    IdentityApplicationCredentialRole,
    IdentityProject,
    IdentityRoleAssignment,
    IdentityUser,
)
from tests.functional.service.conftest import (
    Served,
    add_user,
    identity_session,
    identity_tables_text,
    openstack,
    os_env,
    serve_cloud,
)

pytestmark = pytest.mark.xdist_group("service_identity_admin")

V3 = "/identity/v3"
TOKENS = f"{V3}/auth/tokens"


@pytest.fixture(scope="module")
def served(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_cloud(backend, tmp_path_factory.mktemp("serve"), "idadmin") as service:
        yield service


@pytest.fixture
def sqlite_only(backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("the library's behaviour, checked once: on SQLite")


@pytest.fixture(scope="module")
def admin(served: Served) -> str:
    """An admin token for the module (each password token costs an argon2 verification)."""
    return served.issue()


@pytest.fixture(scope="module")
def admin_token(admin: str) -> str:
    """The same, where ``admin`` names the admin's ``openstack`` environment."""
    return admin


@pytest.fixture(scope="module")
def body_checker(served: Served) -> tuple[str, str]:
    """A member (its id and token) whose bad bodies the parametrized tests send."""
    return _member(served, "body-checker", "body-checker-pw")


def _ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def _call(
    served: Served, method: str, path: str, token: str, body: Any = None, **params: str
) -> httpx.Response:
    with served.client() as http:
        return http.request(method, f"{V3}{path}", headers={"X-Auth-Token": token}, json=body, params=params)


def _member(served: Served, name: str, password: str, project: str = "admin") -> tuple[str, str]:
    """A user with the member role on ``project``: its id and a project token."""
    add_user(served, name, password, project=project)
    token = served.issue(name, password, project)
    return served.validate(token).json()["token"]["user"]["id"], token


def _cred_auth(cred_id: str, secret: str) -> dict[str, Any]:
    return {
        "auth": {
            "identity": {
                "methods": ["application_credential"],
                "application_credential": {"id": cred_id, "secret": secret},
            }
        }
    }


def _count(served: Served, model: Any) -> int:
    with identity_session(served) as session:
        return int(session.execute(select(func.count()).select_from(model)).scalar_one())


# --- the real openstack command ---------------------------------------------------------------


def test_an_operator_and_an_awx_job_with_the_openstack_command(
    served: Served, sqlite_only: None, admin_token: str, tmp_path: Path
) -> None:
    """The admin makes a project and a user and gives the user a role (``openstack project
    create``, ``user create``, ``role add``, ``role assignment list --names``); the user gets a
    token with its password and makes an application credential; a clouds.yaml from ``novakit
    identity clouds-yaml`` with that credential gets a token (``--os-cloud``) scoped to the
    project; once the credential is deleted the same file gets 401."""
    admin = os_env(served)
    project = _ok(openstack(admin, "project", "create", "awx", "--description", "CI", "-f", "json"))
    assert (project["name"], project["description"], project["enabled"]) == ("awx", "CI", True)
    user = _ok(openstack(admin, "user", "create", "awx-job", "--password", "awx-pw-1", "-f", "json"))
    served.secrets.append("awx-pw-1")
    assert "awx-pw-1" not in json.dumps(user) and user["name"] == "awx-job"
    _ok(openstack(admin, "role", "add", "--user", "awx-job", "--project", "awx", "member"))
    listed = _ok(
        openstack(
            admin,
            "role",
            "assignment",
            "list",
            "--user",
            "awx-job",
            "--project",
            "awx",
            "--names",
            "-f",
            "json",
        )
    )
    assert [(a["Role"], a["User"], a["Project"]) for a in listed] == [
        ("member", "awx-job@Default", "awx@Default")
    ]

    job = os_env(served, OS_USERNAME="awx-job", OS_PASSWORD="awx-pw-1", OS_PROJECT_NAME="awx")
    issued = _ok(openstack(job, "token", "issue", "-f", "json"))
    served.secrets.append(issued["id"])
    assert (issued["user_id"], issued["project_id"]) == (user["id"], project["id"])
    cred = _ok(openstack(job, "application", "credential", "create", "awx-cred", "-f", "json"))
    served.secrets.append(cred["Secret"])
    assert cred["Project ID"] == project["id"] and [r["name"] for r in cred["Roles"]] == ["member"]

    clouds = served.novakit(
        "identity",
        "clouds-yaml",
        "awx",
        "--application-credential-id",
        cred["ID"],
        OS_APPLICATION_CREDENTIAL_SECRET=cred["Secret"],
    ).stdout
    entry = yaml.safe_load(clouds)["clouds"]["awx"]
    assert entry["auth_type"] == "v3applicationcredential"
    assert entry["auth"]["auth_url"] == f"{served.url}/identity/v3"
    config = tmp_path / "clouds.yaml"
    config.write_text(clouds)
    config.chmod(0o600)
    by_file = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    by_file["OS_CLIENT_CONFIG_FILE"] = str(config)
    by_cred = _ok(openstack(by_file, "--os-cloud", "awx", "token", "issue", "-f", "json"))
    served.secrets.append(by_cred["id"])
    assert (by_cred["user_id"], by_cred["project_id"]) == (user["id"], project["id"])
    body = served.validate(by_cred["id"]).json()["token"]
    assert body["methods"] == ["application_credential"]
    assert [r["name"] for r in body["roles"]] == ["member"]
    assert body["application_credential"] == {"id": cred["ID"], "name": "awx-cred", "restricted": True}

    _ok(openstack(job, "application", "credential", "delete", "awx-cred"))
    refused = openstack(by_file, "--os-cloud", "awx", "token", "issue")
    assert refused.returncode != 0 and "HTTP 401" in refused.stderr
    # ... and the token it had stopped validating with it; the user's own token goes on.
    assert served.validate(by_cred["id"], caller=admin_token).status_code == 404
    assert served.validate(issued["id"], caller=admin_token).status_code == 200


def test_a_member_is_refused_the_admin_commands(served: Served, sqlite_only: None) -> None:
    _member(served, "cli-member", "cli-member-pw")
    member = os_env(served, OS_USERNAME="cli-member", OS_PASSWORD="cli-member-pw")
    refused = openstack(member, "user", "list")
    assert refused.returncode != 0
    assert "403" in refused.stderr and "identity:list_users" in refused.stderr


def test_user_set_enable_and_password_then_disable_and_delete(
    served: Served, sqlite_only: None, admin: str
) -> None:
    """``openstack user set --enable --password`` (openstacksdk's PATCH) lets a user made
    disabled in with the new password only; disabling it ends its tokens at once; deleting it
    removes it (the CLI's other calls are the same requests, checked over HTTP)."""
    body = {"user": {"name": "set-user", "password": "set-pw-1", "enabled": False}}
    made = _call(served, "POST", "/users", admin, body).json()["user"]
    served.secrets += ["set-pw-1", "set-pw-2"]
    assert made["enabled"] is False
    _ok(openstack(os_env(served), "user", "set", "--enable", "--password", "set-pw-2", "set-user"))
    reader = _call(served, "GET", "/roles", admin, name="reader").json()["roles"][0]["id"]
    project = _call(served, "GET", "/projects", admin, name="admin").json()["projects"][0]["id"]
    grant = f"/projects/{project}/users/{made['id']}/roles/{reader}"
    assert _call(served, "PUT", grant, admin).status_code == 204
    with served.client() as http:
        assert http.post(TOKENS, json=served.password_auth("set-user", "set-pw-1")).status_code == 401
    token = served.issue("set-user", "set-pw-2")
    disabled = _call(served, "PATCH", f"/users/{made['id']}", admin, {"user": {"enabled": False}})
    assert disabled.status_code == 200 and disabled.json()["user"]["enabled"] is False
    assert served.validate(token, caller=admin).status_code == 404
    assert _call(served, "DELETE", f"/users/{made['id']}", admin).status_code == 204
    assert _call(served, "GET", f"/users/{made['id']}", admin).status_code == 404
    roles = _call(served, "GET", "/roles", admin).json()["roles"]
    assert [r["name"] for r in roles] == ["admin", "member", "reader"]


# --- HTTP: the CRUD -----------------------------------------------------------------------------


def test_users_and_projects_crud_over_http(served: Served, admin: str) -> None:
    """Create, show, find by name, list, update, delete; a duplicate name 409, an unknown id
    404; a project's deletion takes its assignments and credentials with it (a cascade, on
    both back ends)."""
    made = _call(served, "POST", "/projects", admin, {"project": {"name": "crud-p", "description": "d"}})
    assert made.status_code == 201, made.text
    project = made.json()["project"]
    assert project["links"]["self"] == f"{served.url}{V3}/projects/{project['id']}"
    assert _call(served, "POST", "/projects", admin, {"project": {"name": "crud-p"}}).status_code == 409
    user_body = {"user": {"name": "crud-u", "password": "crud-pw-1", "domain_id": "default"}}
    served.secrets.append("crud-pw-1")
    made = _call(served, "POST", "/users", admin, user_body)
    assert made.status_code == 201 and "crud-pw-1" not in made.text
    user = made.json()["user"]
    assert set(user) >= {"id", "name", "enabled", "domain_id", "links"} and "password" not in user
    duplicate = _call(served, "POST", "/users", admin, user_body)
    assert duplicate.status_code == 409 and "crud-pw-1" not in duplicate.text
    assert _call(served, "GET", f"/users/{user['id']}", admin).json()["user"]["name"] == "crud-u"
    by_name = _call(served, "GET", "/users", admin, name="crud-u").json()["users"]
    assert [u["id"] for u in by_name] == [user["id"]]
    assert _call(served, "GET", "/users/no-such-user", admin).status_code == 404
    assert _call(served, "GET", "/projects/no-such-project", admin).status_code == 404
    renamed = _call(served, "PATCH", f"/users/{user['id']}", admin, {"user": {"name": "crud-u2"}})
    assert renamed.status_code == 200 and renamed.json()["user"]["name"] == "crud-u2"
    taken = _call(served, "PATCH", f"/users/{user['id']}", admin, {"user": {"name": "admin"}})
    assert taken.status_code == 409

    member = _call(served, "GET", "/roles", admin, name="member").json()["roles"][0]
    grant = f"/projects/{project['id']}/users/{user['id']}/roles/{member['id']}"
    assert _call(served, "PUT", grant, admin).status_code == 204
    assert _call(served, "PUT", grant, admin).status_code == 204  # again: nothing changes
    assert _call(served, "HEAD", grant, admin).status_code == 204
    token = served.issue("crud-u2", "crud-pw-1", "crud-p")
    made = _call(
        served,
        "POST",
        f"/users/{user['id']}/application_credentials",
        token,
        {"application_credential": {"name": "crud-cred"}},
    )
    assert made.status_code == 201, made.text
    served.secrets.append(made.json()["application_credential"]["secret"])
    assignments = _call(served, "GET", "/role_assignments", admin, **{"user.id": user["id"]}).json()
    assert [a["scope"]["project"]["id"] for a in assignments["role_assignments"]] == [project["id"]]

    assert _call(served, "DELETE", f"/projects/{project['id']}", admin).status_code == 204
    assert _call(served, "DELETE", f"/projects/{project['id']}", admin).status_code == 404
    assert served.validate(token, caller=admin).status_code == 404
    with identity_session(served) as session:
        user_row = session.execute(select(IdentityUser).where(IdentityUser.uuid == user["id"])).scalar_one()
        left = session.execute(
            select(func.count())
            .select_from(IdentityApplicationCredential)
            .where(IdentityApplicationCredential.user_id == user_row.id)
        ).scalar_one()
        assigned = session.execute(
            select(func.count())
            .select_from(IdentityRoleAssignment)
            .where(IdentityRoleAssignment.user_id == user_row.id)
        ).scalar_one()
    assert (left, assigned) == (0, 0)
    assert _call(served, "DELETE", f"/users/{user['id']}", admin).status_code == 204
    assert _call(served, "GET", f"/users/{user['id']}", admin).status_code == 404


def test_a_member_gets_403_on_every_admin_route_and_nothing_is_written(
    served: Served, sqlite_only: None, body_checker: tuple[str, str]
) -> None:
    user_id, token = body_checker
    routes = [
        ("POST", "/users", {"user": {"name": "x-by-member"}}),
        ("GET", "/users", None),
        ("GET", f"/users/{user_id}", None),
        ("PATCH", f"/users/{user_id}", {"user": {"enabled": True}}),
        ("DELETE", f"/users/{user_id}", None),
        ("POST", "/projects", {"project": {"name": "x-by-member"}}),
        ("GET", "/projects", None),
        ("GET", "/roles", None),
        ("PUT", f"/projects/x/users/{user_id}/roles/y", None),
        ("DELETE", f"/projects/x/users/{user_id}/roles/y", None),
        ("GET", "/role_assignments", None),
    ]
    before = (_count(served, IdentityUser), _count(served, IdentityProject))
    answers = [_call(served, method, path, token, body) for method, path, body in routes]
    assert [a.status_code for a in answers] == [403] * len(routes), [a.text for a in answers]
    assert all(a.json()["error"]["title"] == "Forbidden" for a in answers)
    assert (_count(served, IdentityUser), _count(served, IdentityProject)) == before
    # No token: 401 before anything.
    with served.client() as http:
        assert http.get(f"{V3}/users").status_code == 401
        assert http.post(f"{V3}/users/{user_id}/application_credentials", json={}).status_code == 401


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/users", {"user": {"name": ""}}, "user.name"),
        ("/users", {"user": {"name": "bad", "password": 7}}, "user.password"),
        ("/users", {"user": {"name": "bad", "enabled": "maybe"}}, "user.enabled"),
        ("/users", {"user": {"name": "bad", "colour": "red"}}, "user.colour"),
        ("/users", {"user": {"name": "bad", "domain_id": "elsewhere"}}, "user.domain_id"),
        ("/users", {"name": "bad"}, "user"),
        ("/projects", {"project": {"name": "x" * 256}}, "project.name"),
        ("/projects", {"project": {"name": "bad", "is_domain": True}}, "project.is_domain"),
        ("/projects", {"project": {}}, "project.name"),
    ],
)
def test_bad_bodies_answer_400_naming_the_field_and_write_nothing(
    served: Served, sqlite_only: None, admin: str, path: str, body: Any, field: str
) -> None:
    before = (_count(served, IdentityUser), _count(served, IdentityProject))
    answer = _call(served, "POST", path, admin, body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["message"]
    assert (_count(served, IdentityUser), _count(served, IdentityProject)) == before


# --- HTTP: application credentials ------------------------------------------------------------


def _make_cred(served: Served, user_id: str, token: str, **spec: Any) -> httpx.Response:
    body = {"application_credential": spec}
    return _call(served, "POST", f"/users/{user_id}/application_credentials", token, body)


def test_application_credential_lifecycle_and_the_secret_shown_once(served: Served, admin: str) -> None:
    user_id, token = _member(served, "cred-user", "cred-user-pw")
    made = _make_cred(served, user_id, token, name="ci", description="a job", secret="given-secret-1")
    assert made.status_code == 201, made.text
    served.secrets.append("given-secret-1")
    cred = made.json()["application_credential"]
    assert cred["secret"] == "given-secret-1" and cred["unrestricted"] is False
    assert [r["name"] for r in cred["roles"]] == ["member"] and cred["expires_at"] is None
    generated = _make_cred(served, user_id, token, name="ci-2").json()["application_credential"]
    served.secrets.append(generated["secret"])
    assert len(generated["secret"]) >= 64
    assert _make_cred(served, user_id, token, name="ci").status_code == 409
    base = f"/users/{user_id}/application_credentials"
    shown = _call(served, "GET", f"{base}/{cred['id']}", token)
    assert shown.status_code == 200 and "secret" not in shown.json()["application_credential"]
    listed = _call(served, "GET", base, token).json()["application_credentials"]
    assert [c["name"] for c in listed] == ["ci", "ci-2"] and not any("secret" in c for c in listed)
    assert [
        c["id"] for c in _call(served, "GET", base, token, name="ci-2").json()["application_credentials"]
    ] == [generated["id"]]
    # By id and secret, by name and user id, by name and user name + domain.
    ways = [
        _cred_auth(cred["id"], "given-secret-1"),
        {
            "auth": {
                "identity": {
                    "methods": ["application_credential"],
                    "application_credential": {
                        "name": "ci",
                        "user": {"id": user_id},
                        "secret": "given-secret-1",
                    },
                }
            }
        },
        {
            "auth": {
                "identity": {
                    "methods": ["application_credential"],
                    "application_credential": {
                        "name": "ci",
                        "user": {"name": "cred-user", "domain": {"name": "Default"}},
                        "secret": "given-secret-1",
                    },
                }
            }
        },
    ]
    with served.client() as http:
        answers = [http.post(TOKENS, json=w) for w in ways]
        wrong = http.post(TOKENS, json=_cred_auth(cred["id"], "not-the-secret"))
        scoped = _cred_auth(cred["id"], "given-secret-1")
        scoped["auth"]["scope"] = {"project": {"name": "admin", "domain": {"name": "Default"}}}
        with_scope = http.post(TOKENS, json=scoped)
    assert [a.status_code for a in answers] == [201, 201, 201], [a.text for a in answers]
    served.secrets += [a.headers["x-subject-token"] for a in answers]
    assert all(a.json()["token"]["project"]["name"] == "admin" for a in answers)
    assert (wrong.status_code, with_scope.status_code) == (401, 401)
    # A token from a restricted credential cannot make or delete credentials.
    cred_token = answers[0].headers["x-subject-token"]
    assert _make_cred(served, user_id, cred_token, name="minted").status_code == 403
    assert _call(served, "DELETE", f"{base}/{generated['id']}", cred_token).status_code == 403
    # Another member sees the user's credentials as an admin's only (403), the admin any.
    _, other = _member(served, "cred-other", "cred-other-pw")
    assert _call(served, "GET", base, other).status_code == 403
    assert _call(served, "GET", f"{base}/{cred['id']}", admin).status_code == 200
    assert _call(served, "DELETE", f"{base}/{cred['id']}", token).status_code == 204
    assert _call(served, "GET", f"{base}/{cred['id']}", token).status_code == 404
    assert served.validate(cred_token, caller=token).status_code == 404
    with served.client() as http:
        assert http.post(TOKENS, json=_cred_auth(cred["id"], "given-secret-1")).status_code == 401


def test_roles_a_credential_may_carry_and_what_ends_it(served: Served, admin: str) -> None:
    """Roles: a subset of the caller's on the project (another is 400); the token carries the
    credential's roles only. It ends when its role is taken from the user, when the user is
    disabled, and when it expires (an expiry in the past is refused at creation)."""
    user_id, token = _member(served, "ends-user", "ends-user-pw")
    reader = _call(served, "GET", "/roles", admin, name="reader").json()["roles"][0]
    project_id = served.validate(token).json()["token"]["project"]["id"]
    assert (
        _call(
            served, "PUT", f"/projects/{project_id}/users/{user_id}/roles/{reader['id']}", admin
        ).status_code
        == 204
    )
    token = served.issue("ends-user", "ends-user-pw")
    refused = _make_cred(served, user_id, token, name="too-much", roles=[{"name": "admin"}])
    assert refused.status_code == 400 and "roles" in refused.json()["error"]["message"]
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    refused = _make_cred(served, user_id, token, name="past", expires_at=past)
    assert refused.status_code == 400 and "expires_at" in refused.json()["error"]["message"]
    assert _count(served, IdentityApplicationCredentialRole) >= 0  # nothing half-written below
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    creds = {}
    for name, spec in [("by-reader", {"roles": [{"name": "reader"}]}), ("expiring", {"expires_at": soon})]:
        made = _make_cred(served, user_id, token, name=name, **spec)
        assert made.status_code == 201, made.text
        creds[name] = made.json()["application_credential"]
        served.secrets.append(creds[name]["secret"])
    with served.client() as http:
        tokens = {n: http.post(TOKENS, json=_cred_auth(c["id"], c["secret"])) for n, c in creds.items()}
    assert {n: t.status_code for n, t in tokens.items()} == {"by-reader": 201, "expiring": 201}
    served.secrets += [t.headers["x-subject-token"] for t in tokens.values()]
    assert [r["name"] for r in tokens["by-reader"].json()["token"]["roles"]] == ["reader"]
    assert sorted(r["name"] for r in tokens["expiring"].json()["token"]["roles"]) == ["member", "reader"]

    # Expired (its time moved back in the database): its token and its secret are refused.
    with identity_session(served) as session:
        session.execute(
            update(IdentityApplicationCredential)
            .where(IdentityApplicationCredential.uuid == creds["expiring"]["id"])
            .values(expires_at=dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(seconds=1))
        )
    assert served.validate(tokens["expiring"].headers["x-subject-token"], caller=admin).status_code == 404
    # The reader role taken away: the credential carrying it stops working, the user's password
    # token (member still) goes on.
    revoke = f"/projects/{project_id}/users/{user_id}/roles/{reader['id']}"
    assert _call(served, "DELETE", revoke, admin).status_code == 204
    assert _call(served, "DELETE", revoke, admin).status_code == 404
    assert served.validate(tokens["by-reader"].headers["x-subject-token"], caller=admin).status_code == 404
    with served.client() as http:
        for cred in creds.values():
            assert http.post(TOKENS, json=_cred_auth(cred["id"], cred["secret"])).status_code == 401
    assert served.validate(served.issue("ends-user", "ends-user-pw")).status_code == 200
    # Disabled: every credential of the user is refused too.
    fresh = _make_cred(served, user_id, served.issue("ends-user", "ends-user-pw"), name="fresh")
    fresh_cred = fresh.json()["application_credential"]
    served.secrets.append(fresh_cred["secret"])
    assert _call(served, "PATCH", f"/users/{user_id}", admin, {"user": {"enabled": False}}).status_code == 200
    with served.client() as http:
        assert http.post(TOKENS, json=_cred_auth(fresh_cred["id"], fresh_cred["secret"])).status_code == 401


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "application_credential.name"),
        ({"name": "x", "secret": ""}, "application_credential.secret"),
        ({"name": "x", "expires_at": "tomorrow"}, "application_credential.expires_at"),
        ({"name": "x", "unrestricted": "yes please"}, "application_credential.unrestricted"),
        ({"name": "x", "roles": [{}]}, "application_credential.roles"),
        ({"name": "x", "access_rules": [{"service": "compute"}]}, "application_credential.access_rules"),
        ({"name": "x", "colour": "red"}, "application_credential.colour"),
    ],
)
def test_bad_credential_bodies_answer_400_and_write_nothing(
    served: Served, sqlite_only: None, body_checker: tuple[str, str], spec: dict[str, Any], field: str
) -> None:
    user_id, token = body_checker
    before = _count(served, IdentityApplicationCredential)
    answer = _make_cred(served, user_id, token, **spec)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["message"]
    assert _count(served, IdentityApplicationCredential) == before


def test_clouds_yaml_for_a_user_never_prints_a_password(served: Served, sqlite_only: None) -> None:
    done = served.novakit("identity", "clouds-yaml", "mine", "--username", "alice", "--project", "web")
    entry = yaml.safe_load(done.stdout)["clouds"]["mine"]
    assert entry["auth_type"] == "password"
    assert entry["auth"] == {
        "auth_url": f"{served.url}/identity/v3",
        "username": "alice",
        "user_domain_name": "Default",
        "project_name": "web",
        "project_domain_name": "Default",
    }
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "novakit.cli.main",
            "identity",
            "clouds-yaml",
            "mine",
            "--username",
            "alice",
            "--password",
            "pw-on-cli",
        ],
        env=served.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "pw-on-cli" not in refused.stdout + refused.stderr


def test_no_secret_in_the_log_nor_the_tables(served: Served) -> None:
    """Runs last in the module: no password, token or application credential secret the
    module's tests gave or got is in the service's log (debug level) or in any identity table,
    where credentials' secrets are argon2 hashes only. It makes and uses a credential of its own
    first, so that it checks one whichever tests ran before it on this service (a module-scoped
    service may be made again when its tests are not run in a row)."""
    user_id, token = _member(served, "leak-check", "leak-check-pw-1")
    served.secrets += ["leak-check-pw-1", token]
    made = _make_cred(served, user_id, token, name="leak-check", secret="leak-check-secret-1")
    assert made.status_code == 201, made.text
    served.secrets.append("leak-check-secret-1")
    cred_id = made.json()["application_credential"]["id"]
    with served.client() as http:
        used = http.post(f"{V3}/auth/tokens", json=_cred_auth(cred_id, "leak-check-secret-1"))
    assert used.status_code == 201, used.text
    served.secrets.append(used.headers["X-Subject-Token"])
    log = served.log.read_text()
    assert "POST /identity/v3/auth/tokens" in log
    assert [s[:12] for s in served.secrets if s in log] == []
    dump = identity_tables_text(served)
    assert [s[:12] for s in served.secrets if s in dump] == []
    with identity_session(served) as session:
        hashes = session.execute(select(IdentityApplicationCredential.secret_hash)).scalars().all()
    assert hashes and all(h.startswith("$argon2id$") for h in hashes)
