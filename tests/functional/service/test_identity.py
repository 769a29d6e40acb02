"""Keystone v3 through a real ``novakit serve``: the real ``openstack`` command and keystoneauth,
and the HTTP answers (status, headers, bodies) of ``/identity`` for good and bad callers.

One service per back end for the module (``conftest.serve_cloud``); each test makes the users
it changes, so that the tests share nothing but the admin.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from novakit.db.models import IdentityRevokedToken
from novakit.identity.bootstrap import ENDPOINTS
from tests.functional.service.conftest import (
    Served,
    add_user,
    identity_session,
    openstack,
    os_env,
    serve_cloud,
)

pytestmark = pytest.mark.xdist_group("service_identity")

REQUEST_ID = re.compile(r"^req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TOKENS = "/identity/v3/auth/tokens"
UNAUTHORIZED = {
    "error": {
        "code": 401,
        "title": "Unauthorized",
        "message": "The request you have made requires authentication.",
    }
}


@pytest.fixture(scope="module")
def served(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_cloud(backend, tmp_path_factory.mktemp("serve"), "identity") as service:
        yield service


def _ids(served: Served) -> tuple[str, str]:
    """The admin user's and project's ids, as the admin's own token shows them."""
    token = served.issue()
    body = served.validate(token).json()["token"]
    return body["user"]["id"], body["project"]["id"]


def test_openstack_token_issue(served: Served) -> None:
    """The unpatched ``openstack`` command (python-openstackclient through keystoneauth's
    discovery of /identity/v3) gets a project-scoped token; the token validates, until the
    command revokes it."""
    done = openstack(os_env(served), "token", "issue", "-f", "json")
    assert done.returncode == 0, done.stderr
    issued = json.loads(done.stdout)
    served.secrets.append(issued["id"])
    user_id, project_id = _ids(served)
    assert (issued["user_id"], issued["project_id"]) == (user_id, project_id)
    expires = dt.datetime.strptime(issued["expires"], "%Y-%m-%dT%H:%M:%S%z")
    lifetime = expires - dt.datetime.now(dt.UTC)
    assert dt.timedelta(minutes=58) < lifetime <= dt.timedelta(hours=1)
    assert served.validate(issued["id"]).status_code == 200
    # ... and ``openstack token revoke`` ends it (DELETE /v3/auth/tokens).
    revoked = openstack(os_env(served), "token", "revoke", issued["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert served.validate(issued["id"], caller=served.issue()).status_code == 404


def test_openstack_token_issue_from_the_unversioned_url_and_a_wrong_password(served: Served) -> None:
    done = openstack(os_env(served, OS_AUTH_URL=f"{served.url}/identity"), "token", "issue", "-f", "json")
    assert done.returncode == 0, done.stderr
    served.secrets.append(json.loads(done.stdout)["id"])
    refused = openstack(os_env(served, OS_PASSWORD="not-the-password"), "token", "issue")
    assert refused.returncode != 0
    assert "HTTP 401" in refused.stderr
    served.secrets.append("not-the-password")


def test_keystoneauth_password_session_and_catalog(served: Served) -> None:
    from keystoneauth1 import session
    from keystoneauth1.identity import v3

    auth = v3.Password(
        auth_url=f"{served.url}/identity/v3",
        username="admin",
        password=served.password,
        user_domain_name="Default",
        project_name="admin",
        project_domain_name="Default",
    )
    sess = session.Session(auth=auth)
    token = sess.get_token()
    assert token
    served.secrets.append(token)
    access = auth.get_access(sess)
    assert access.project_name == "admin" and access.username == "admin"
    assert "admin" in access.role_names
    compute = sess.get_endpoint(service_type="compute", interface="public", region_name="RegionOne")
    assert compute == f"{served.url}/compute/v2.1"
    identity = sess.get_endpoint(service_type="identity", interface="public")
    assert identity.rstrip("/") == f"{served.url}/identity/v3"


def test_version_documents(served: Served) -> None:
    with served.client() as http:
        root = http.get("/identity")
        v3 = http.get("/identity/v3")
    assert root.status_code == 300
    assert v3.status_code == 200
    version = v3.json()["version"]
    assert version["id"].startswith("v3.") and version["status"] == "stable"
    assert version["links"] == [{"rel": "self", "href": f"{served.url}/identity/v3/"}]
    assert root.json() == {"versions": {"values": [version]}}


def test_every_answer_carries_its_own_request_id(served: Served) -> None:
    with served.client() as http:
        answers = [
            http.get("/identity/v3"),
            http.post(TOKENS, json=served.password_auth()),
            http.post(TOKENS, json=served.password_auth(password="wrong")),
            http.post(TOKENS, content=b"{not json"),
            http.get("/no/such/path"),
            http.put(TOKENS),
        ]
    assert [a.status_code for a in answers] == [200, 201, 401, 400, 404, 405]
    served.secrets.append(answers[1].headers["x-subject-token"])
    ids = [a.headers["x-openstack-request-id"] for a in answers]
    assert all(REQUEST_ID.match(i) for i in ids), ids
    assert len(set(ids)) == len(ids)
    for answer in answers[2:]:
        error = answer.json()["error"]
        assert error["code"] == answer.status_code and error["title"] and error["message"]


def test_token_body_as_keystone_answers(served: Served) -> None:
    with served.client() as http:
        answer = http.post(TOKENS, json=served.password_auth())
    assert answer.status_code == 201
    token = answer.headers["x-subject-token"]
    served.secrets.append(token)
    body = answer.json()["token"]
    assert body["methods"] == ["password"]
    assert body["user"]["name"] == "admin"
    assert body["user"]["domain"] == {"id": "default", "name": "Default"}
    assert body["project"]["name"] == "admin" and body["project"]["domain"]["id"] == "default"
    assert body["is_domain"] is False
    assert [r["name"] for r in body["roles"]] == ["admin"]
    assert len(body["audit_ids"]) == 1
    for stamp in ("issued_at", "expires_at"):
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$", body[stamp])
    catalog = {entry["type"]: entry for entry in body["catalog"]}
    # Every service the bootstrap puts in the catalog (identity, compute, image, network, ...).
    assert set(catalog) == {service_type for service_type, _, _ in ENDPOINTS}
    (compute,) = catalog["compute"]["endpoints"]
    assert compute["url"] == f"{served.url}/compute/v2.1"
    assert (compute["interface"], compute["region_id"]) == ("public", "RegionOne")
    # Validation answers the same body; HEAD the same status and no body; ?nocatalog leaves it out.
    validated = served.validate(token)
    assert validated.status_code == 200
    assert validated.headers["x-subject-token"] == token
    assert validated.json() == answer.json()
    headers = {"X-Auth-Token": token, "X-Subject-Token": token}
    with served.client() as http:
        head = http.head(TOKENS, headers=headers)
        bare = http.get(TOKENS + "?nocatalog", headers=headers)
    assert head.status_code == 200 and head.content == b""
    assert "catalog" not in bare.json()["token"]


def test_unscoped_token_and_the_token_method(served: Served) -> None:
    """An unscoped token has no project, roles nor catalog; the token method scopes it: the new
    token expires with the first, and carries both audit ids."""
    unscoped = served.issue(project=None)
    first = served.validate(unscoped).json()["token"]
    assert not {"project", "roles", "catalog"} & set(first)
    body = {
        "auth": {
            "identity": {"methods": ["token"], "token": {"id": unscoped}},
            "scope": {"project": {"name": "admin", "domain": {"id": "default"}}},
        }
    }
    with served.client() as http:
        answer = http.post(TOKENS, json=body)
    assert answer.status_code == 201, answer.text
    served.secrets.append(answer.headers["x-subject-token"])
    scoped = answer.json()["token"]
    assert scoped["methods"] == ["token", "password"]
    assert scoped["project"]["name"] == "admin"
    assert scoped["expires_at"] == first["expires_at"]
    assert scoped["audit_ids"][1] == first["audit_ids"][0]


def test_bad_credentials_all_answer_the_same_401(served: Served) -> None:
    """Wrong password, unknown user, unknown project, a project the user has no role on, another
    domain: one answer, which does not say which part was wrong."""
    add_user(served, "norole-user", "norole-pw-1", role="member")
    with identity_session(served) as session:
        from novakit.identity import projects

        projects.create(session, "elsewhere")
    bodies = [
        served.password_auth(password="wrong-password"),
        served.password_auth(user="nobody"),
        served.password_auth(project="no-such-project"),
        served.password_auth(user="norole-user", password="norole-pw-1", project="elsewhere"),
    ]
    other_domain = served.password_auth()
    other_domain["auth"]["identity"]["password"]["user"]["domain"] = {"name": "Elsewhere"}
    bodies.append(other_domain)
    with served.client() as http:
        answers = [http.post(TOKENS, json=b) for b in bodies]
    assert [a.status_code for a in answers] == [401] * len(bodies)
    assert all(a.json() == UNAUTHORIZED for a in answers)
    assert all("x-subject-token" not in a.headers for a in answers)
    served.secrets.append("wrong-password")


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["auth"].pop("identity"), "auth.identity"),
        (lambda b: b["auth"]["identity"].update(methods=["kerberos"]), "auth.identity.methods"),
        (lambda b: b["auth"]["identity"].update(methods="password"), "auth.identity.methods"),
        (lambda b: b["auth"]["identity"]["password"]["user"].update(password=12345), "password"),
        (lambda b: b["auth"]["identity"]["password"]["user"].update(extra="x"), "extra"),
        (lambda b: b["auth"]["identity"]["password"]["user"].update(password="p" * 5000), "password"),
        (lambda b: b["auth"].update(scope={"domain": {"id": "default"}}), "auth.scope"),
    ],
)
def test_malformed_bodies_answer_400_naming_the_field(served: Served, mutate: Any, field: str) -> None:
    body = served.password_auth()
    mutate(body)
    with served.client() as http:
        answer = http.post(TOKENS, json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["title"]) == (400, "Bad Request")
    assert field in error["message"]
    assert served.password not in answer.text


def test_not_json_not_an_object_and_too_large(served: Served) -> None:
    with served.client() as http:
        not_json = http.post(TOKENS, content=b'{"auth": ', headers={"content-type": "application/json"})
        a_list = http.post(TOKENS, json=[served.password_auth()])
        huge = http.post(TOKENS, content=b"{" + b" " * (1024 * 1024 + 10) + b"}")
    assert (not_json.status_code, a_list.status_code, huge.status_code) == (400, 400, 413)
    assert "body" in not_json.json()["error"]["message"]
    assert huge.json()["error"]["code"] == 413
    assert served.password not in a_list.text


def test_tampered_and_foreign_tokens(served: Served) -> None:
    """A token with one character changed is refused: 404 as the subject, 401 as the caller."""
    token = served.issue()
    middle = len(token) // 2
    tampered = token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]
    assert served.validate(tampered, caller=token).status_code == 404
    assert served.validate(token, caller=tampered).status_code == 401
    assert served.validate("gAAAAAB-not-a-token", caller=token).status_code == 404
    with served.client() as http:
        assert http.get(TOKENS, headers={"X-Subject-Token": token}).status_code == 401
        missing = http.get(TOKENS, headers={"X-Auth-Token": token})
    assert missing.status_code == 400 and "X-Subject-Token" in missing.json()["error"]["message"]


def test_revoked_token_is_404_as_subject_and_401_as_caller(served: Served) -> None:
    add_user(served, "revoke-user", "revoke-pw-1")
    token = served.issue("revoke-user", "revoke-pw-1")
    admin = served.issue()
    headers = {"X-Auth-Token": token, "X-Subject-Token": token}
    with identity_session(served) as session:
        before = session.execute(select(func.count()).select_from(IdentityRevokedToken)).scalar_one()
    with served.client() as http:
        # A bad caller revokes nothing.
        assert (
            http.delete(TOKENS, headers={"X-Auth-Token": "bogus", "X-Subject-Token": token}).status_code
            == 401
        )
        with identity_session(served) as session:
            assert (
                session.execute(select(func.count()).select_from(IdentityRevokedToken)).scalar_one() == before
            )
        assert http.delete(TOKENS, headers=headers).status_code == 204
    assert served.validate(token, caller=admin).status_code == 404
    assert served.validate(admin, caller=token).status_code == 401
    with served.client() as http:
        again = http.post(TOKENS, json={"auth": {"identity": {"methods": ["token"], "token": {"id": token}}}})
    assert again.status_code == 401
    # The user can still log in: only that token was revoked.
    assert served.validate(served.issue("revoke-user", "revoke-pw-1")).status_code == 200


def test_a_member_validates_its_own_tokens_only(served: Served) -> None:
    add_user(served, "member-user", "member-pw-1")
    mine = served.issue("member-user", "member-pw-1")
    admin = served.issue()
    body = served.validate(mine).json()["token"]
    assert [r["name"] for r in body["roles"]] == ["member"]
    answer = served.validate(admin, caller=mine)
    assert answer.status_code == 403 and answer.json()["error"]["title"] == "Forbidden"
    assert served.validate(mine, caller=admin).status_code == 200


def test_disabling_a_user_refuses_its_tokens_at_once_and_for_good(served: Served) -> None:
    from novakit.identity import users

    add_user(served, "disabled-user", "disabled-pw-1")
    token = served.issue("disabled-user", "disabled-pw-1")
    admin = served.issue()
    assert served.validate(token, caller=admin).status_code == 200
    with identity_session(served) as session:
        user = users.find(session, "disabled-user")
        assert user is not None
        users.set_enabled(user, False)
    assert served.validate(token, caller=admin).status_code == 404
    assert served.validate(admin, caller=token).status_code == 401
    with served.client() as http:
        refused = http.post(TOKENS, json=served.password_auth("disabled-user", "disabled-pw-1"))
    assert refused.status_code == 401 and refused.json() == UNAUTHORIZED
    with identity_session(served) as session:
        user = users.find(session, "disabled-user")
        assert user is not None
        users.set_enabled(user, True)
    assert served.validate(token, caller=admin).status_code == 404
    assert served.validate(served.issue("disabled-user", "disabled-pw-1")).status_code == 200


def test_a_new_password_refuses_the_tokens_issued_before(served: Served) -> None:
    from novakit.identity import users

    add_user(served, "pw-user", "pw-user-old")
    old = served.issue("pw-user", "pw-user-old")
    with identity_session(served) as session:
        user = users.find(session, "pw-user")
        assert user is not None
        users.set_password(user, "pw-user-new")
    served.secrets.append("pw-user-new")
    admin = served.issue()
    assert served.validate(old, caller=admin).status_code == 404
    with served.client() as http:
        assert http.post(TOKENS, json=served.password_auth("pw-user", "pw-user-old")).status_code == 401
    assert served.validate(served.issue("pw-user", "pw-user-new")).status_code == 200


def test_a_role_taken_away_refuses_the_project_token(served: Served) -> None:
    from novakit.identity import assignments, projects, roles, users

    add_user(served, "role-user", "role-pw-1")
    scoped = served.issue("role-user", "role-pw-1")
    unscoped = served.issue("role-user", "role-pw-1", project=None)
    with identity_session(served) as session:
        user, project, role = (
            users.find(session, "role-user"),
            projects.find(session, "admin"),
            roles.find(session, "member"),
        )
        assert user is not None and project is not None and role is not None
        assert assignments.revoke(session, user, project, role)
    admin = served.issue()
    assert served.validate(scoped, caller=admin).status_code == 404
    # Unscoped, the token still proves who the user is; it cannot be scoped to the project now.
    assert served.validate(unscoped, caller=admin).status_code == 200
    with served.client() as http:
        rescope = {
            "auth": {
                "identity": {"methods": ["token"], "token": {"id": unscoped}},
                "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}},
            }
        }
        assert http.post(TOKENS, json=rescope).status_code == 401


def test_no_password_nor_token_in_the_log_the_database_or_error_bodies(served: Served) -> None:
    """Runs last in the module: every password and token the module's tests gave the service
    (and this test's own attempts) is absent from the service's log (debug level) and from
    every identity table; error bodies never echo a credential (checked here once more)."""
    add_user(served, "secret-user", "secret-pw-1")
    token = served.issue("secret-user", "secret-pw-1")
    with served.client() as http:
        answers = [
            http.post(TOKENS, json=served.password_auth("secret-user", "secret-pw-WRONG")),
            http.post(
                TOKENS, json={"auth": {"identity": {"methods": ["token"], "token": {"id": token + "x"}}}}
            ),
            http.get(TOKENS, headers={"X-Auth-Token": token, "X-Subject-Token": token[:-3]}),
            http.post(TOKENS, content=b'{"auth": {"password": "secret-pw-1"'),
        ]
    served.secrets.append("secret-pw-WRONG")
    for answer in answers:
        assert answer.status_code >= 400
        assert not any(s in answer.text for s in served.secrets)
    log = served.log.read_text()
    assert "POST /identity/v3/auth/tokens" in log  # the log is the one written
    leaked = [s[:12] for s in served.secrets if s in log]
    assert leaked == []
    dump = _dump_identity_tables(served)
    assert not [s[:12] for s in served.secrets if s in dump]
    assert "$argon2id$" in dump  # passwords are there as hashes only


def _dump_identity_tables(served: Served) -> str:
    from sqlalchemy import MetaData

    db = served.database()
    try:
        meta = MetaData()
        meta.reflect(db.engine)
        rows = []
        with db.engine.connect() as conn:
            for name, table in meta.tables.items():
                if name.startswith("identity_") or name.startswith("instance_action"):
                    rows += [repr(tuple(r)) for r in conn.execute(table.select())]
        return "\n".join(rows)
    finally:
        db.dispose()
