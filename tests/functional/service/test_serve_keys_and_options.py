"""``novakit serve``'s keys, token lifetime and server options, through a real process:
rotation with ``novakit identity fernet-rotate`` while the service runs, expiry, TLS with two
workers, and what ``serve`` refuses before it starts."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.service.conftest import NOVAKIT, Served, serve_cloud
from tests.processes import process_table, with_descendants

pytestmark = pytest.mark.xdist_group("service_keys")


@pytest.fixture(scope="module")
def served(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_cloud(backend, tmp_path_factory.mktemp("serve"), "keys") as service:
        yield service


def _key_files(served: Served) -> list[int]:
    return sorted(int(p.name) for p in served.keys.iterdir() if p.name.isdigit())


def test_fernet_repository_layout(served: Served) -> None:
    """Set up as Keystone's: a 0700 directory, staged key 0 and primary 1, files 0600."""
    assert served.keys.stat().st_mode & 0o777 == 0o700
    assert _key_files(served)[:1] == [0]
    assert all((served.keys / str(i)).stat().st_mode & 0o777 == 0o600 for i in _key_files(served))
    # Set up again: nothing changes.
    before = {i: (served.keys / str(i)).read_bytes() for i in _key_files(served)}
    assert "already set up" in served.novakit("identity", "fernet-setup").stdout
    assert {i: (served.keys / str(i)).read_bytes() for i in _key_files(served)} == before


def test_a_token_of_a_key_rotated_away_is_refused(served: Served) -> None:
    """With three active keys, a token survives one rotation (its key is a secondary) and not
    two (its key is gone); a token of the key promoted by the first rotation survives."""
    old = served.issue()
    served.novakit("identity", "fernet-rotate")
    assert served.validate(old).status_code == 200
    newer = served.issue()
    staged_before = (served.keys / "0").read_bytes()
    served.novakit("identity", "fernet-rotate")
    keys = _key_files(served)
    assert len(keys) == 3 and keys[0] == 0
    # The staged key became the primary: every node knew it before it encrypted anything.
    assert (served.keys / str(keys[-1])).read_bytes() == staged_before
    assert served.validate(old, caller=newer).status_code == 404
    assert served.validate(newer, caller=old).status_code == 401
    assert served.validate(newer).status_code == 200
    assert served.validate(served.issue()).status_code == 200


def test_an_expired_token_is_refused(tmp_path: Path, backend: str) -> None:
    with serve_cloud(backend, tmp_path, "expiry", "--token-expiration", "2") as served:
        token = served.issue()
        body = served.validate(token).json()["token"]
        issued = dt.datetime.strptime(body["issued_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
        expires = dt.datetime.strptime(body["expires_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
        assert expires - issued == dt.timedelta(seconds=2)
        fresh = served.issue()
        time.sleep(2.2)
        assert served.validate(token, caller=served.issue()).status_code == 404
        assert served.validate(fresh).status_code == 401


def _self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    address = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(address, critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key_path.write_bytes(private)
    return cert_path, key_path


def test_tls_with_two_workers(tmp_path: Path) -> None:
    """Two worker processes behind TLS: keystoneauth authenticates over https, trusting the
    service's certificate, and a token one worker issued validates whichever answers. (The
    options are the server's: SQLite is enough.)"""
    from keystoneauth1 import session
    from keystoneauth1.identity import v3

    cert, key = _self_signed(tmp_path)
    with serve_cloud("sqlite", tmp_path, "tls", "--workers", "2", tls=(cert, key)) as served:
        assert served.url.startswith("https://")
        workers = with_descendants([served.pid], process_table())
        assert len(workers) >= 3  # the supervisor and its two workers (and its helpers)
        auth = v3.Password(
            auth_url=f"{served.url}/identity/v3",
            username="admin",
            password=served.password,
            user_domain_name="Default",
            project_name="admin",
            project_domain_name="Default",
        )
        sess = session.Session(auth=auth, verify=str(cert))
        token = sess.get_token()
        assert token is not None
        served.secrets.append(token)
        assert all(served.validate(token).status_code == 200 for _ in range(6))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--bind", "127.0.0.1"], "--bind"),
        (["--bind", "127.0.0.1:99999"], "--bind"),
        (["--ssl-certfile", "/nonexistent.pem"], "--ssl-keyfile"),
    ],
)
def test_serve_refuses_bad_options(tmp_path: Path, args: list[str], says: str) -> None:
    done = subprocess.run(
        [*NOVAKIT, "serve", *args],
        env={"PATH": "/usr/bin:/bin", "NOVAKIT_STATE_DIR": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert says in done.stderr


def test_serve_without_keys_says_what_to_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [*NOVAKIT, "serve", "--bind", "127.0.0.1:1"],
        env={"PATH": "/usr/bin:/bin", "NOVAKIT_STATE_DIR": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "novakit identity fernet-setup" in done.stderr


def test_bootstrap_again_changes_nothing_and_a_new_password_ends_the_old_tokens(served: Served) -> None:
    """As keystone-manage bootstrap: a second run with the same settings changes nothing (tokens
    stay good); one with another password sets it, and the tokens issued before stop working."""
    token = served.issue()
    again = served.novakit(
        "identity", "bootstrap", "--public-url", served.url, NOVAKIT_BOOTSTRAP_PASSWORD=served.password
    )
    assert "nothing to do" in again.stdout
    assert served.validate(token).status_code == 200
    new_password = served.password + "-new"
    served.secrets.append(new_password)
    changed = served.novakit(
        "identity", "bootstrap", "--public-url", served.url, NOVAKIT_BOOTSTRAP_PASSWORD=new_password
    )
    assert "password of admin" in changed.stdout
    assert served.password not in changed.stdout + changed.stderr
    assert new_password not in changed.stdout + changed.stderr
    fresh = served.issue(password=new_password)
    assert served.validate(token, caller=fresh).status_code == 404
    served.novakit(
        "identity", "bootstrap", "--public-url", served.url, NOVAKIT_BOOTSTRAP_PASSWORD=served.password
    )
    assert served.validate(served.issue()).status_code == 200


def test_only_an_admin_may_bootstrap(tmp_path: Path) -> None:
    """``identity:bootstrap`` is an admin rule of the policy table: a member identity is refused,
    by the rule's name, and nothing is written."""
    from sqlalchemy import inspect, text

    from novakit.db.engine import Database

    url = f"sqlite:///{tmp_path / 'novakit.db'}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("NOVAKIT_")},
        "NOVAKIT_DB_URL": url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_PROJECT": "web",
        "NOVAKIT_USER": "alice",
        "NOVAKIT_ROLES": "member",
        "NOVAKIT_BOOTSTRAP_PASSWORD": "pw-not-shown-anywhere",
    }
    done = subprocess.run(
        [*NOVAKIT, "identity", "bootstrap"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "identity:bootstrap" in done.stderr + done.stdout
    assert "pw-not-shown-anywhere" not in done.stderr + done.stdout
    db = Database(url)
    try:
        with db.reader() as session:
            if inspect(session.get_bind()).has_table("identity_users"):
                assert session.execute(text("SELECT COUNT(*) FROM identity_users")).scalar_one() == 0
    finally:
        db.dispose()
