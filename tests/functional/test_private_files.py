"""What novakit leaves on disk is the operator's only: files 0600, directories 0700.

Each test starts from nothing and uses novakit as a user would (the ``novakit``
command), under a umask of 0, so that a file or directory created without an
explicit mode would show as world-readable, then looks at every path that use made.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner, Result

from novakit.cli.main import app
from novakit.db.engine import Database

CLEARED = (
    "NOVAKIT_DB_URL",
    "NOVAKIT_STATE_DIR",
    "NOVAKIT_FAKE_STATE_DIR",
    "NOVAKIT_CONFIG",
    "NOVAKIT_PROJECT",
    "NOVAKIT_USER",
    "NOVAKIT_ROLES",
    "NOVAKIT_NOTIFICATIONS_FILE",
    "NOVAKIT_REQUEST_ID",
)


@pytest.fixture(autouse=True)
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own: the built-in state directory is $XDG_STATE_HOME/novakit."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "250")
    # The operator (README, "Trust model"): registering hosts is theirs.
    monkeypatch.setenv("NOVAKIT_PROJECT", "admin")
    monkeypatch.setenv("NOVAKIT_ROLES", "admin")
    return tmp_path


def nk(*args: str, code: int = 0, **env: str) -> Result:
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == code, (args, result.stdout, result.stderr, result.exception)
    return result


def modes(root: Path) -> dict[str, str]:
    """{path under root: its permission bits} for root and everything in it."""
    found = {".": oct(stat.S_IMODE(root.stat().st_mode))}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = oct(stat.S_IMODE(path.lstat().st_mode))
    return found


def assert_private(found: dict[str, str], root: Path) -> None:
    wrong = {
        name: mode for name, mode in found.items() if mode != ("0o700" if (root / name).is_dir() else "0o600")
    }
    assert wrong == {}


def test_first_use_makes_a_private_state_directory(home: Path) -> None:
    # Its parents do not exist either: they are made 0700 too, as XDG asks of a state home.
    top = home / "new"
    state = top / "deeper" / "state"
    nk("server", "list", NOVAKIT_STATE_DIR=str(state))
    found = modes(top)
    assert {"deeper", "deeper/state", "deeper/state/novakit.db"} <= set(found)
    assert_private(found, top)


def test_every_file_a_fleet_leaves_behind_is_private(home: Path) -> None:
    state = home / "state"
    env = {"NOVAKIT_STATE_DIR": str(state), "NOVAKIT_NOTIFICATIONS_FILE": str(state / "notifications.jsonl")}
    nk("host", "add", "compute-1", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200", **env)
    nk("flavor", "create", "m1.small", "--vcpus", "1", "--ram", "1024", "--disk", "10", **env)
    nk("image", "create", "tiny", "--location", "/var/lib/novakit/images/tiny.qcow2", **env)
    nk("server", "create", "built", "--flavor", "m1.small", "--image", "tiny", **env)
    nk("server", "create", "later", "--flavor", "m1.small", "--image", "tiny", "--no-wait", **env)
    deadline = time.monotonic() + 60
    while not any("done:" in log.read_text() for log in (state / "workers").glob("*.log")):
        assert time.monotonic() < deadline, "the background worker did not finish"
        time.sleep(0.2)
    listed = json.loads(nk("server", "list", "--output", "json", **env).stdout)
    assert sorted((s["name"], s["status"]) for s in listed) == [("built", "ACTIVE"), ("later", "ACTIVE")]

    # SQLite's -wal and -shm exist while a connection is open; they take the database file's mode.
    db = Database(f"sqlite:///{state / 'novakit.db'}")
    try:
        with db.reader() as session:
            session.execute(text("SELECT COUNT(*) FROM instances")).scalar_one()
            found = modes(state)
    finally:
        db.dispose()
    expected = {
        "novakit.db",
        "novakit.db-wal",
        "novakit.db-shm",
        "novakit.db.writers.lock",
        "novakit.db.migrate.lock",
        "notifications.jsonl",
        "workers",
        "fake",
        "fake/compute-1.json",
        "fake/compute-1.lock",
    }
    assert expected <= set(found), sorted(found)
    assert any(name.startswith("workers/") and name.endswith(".log") for name in found)
    assert any(name.startswith("fake/build-slot-") for name in found)
    assert any(name.startswith("fake/instance-") for name in found)
    assert_private(found, state)


def test_the_built_in_state_directory_is_tightened_and_a_chosen_one_is_not(home: Path) -> None:
    # As an earlier novakit left it: world-readable, with a world-readable database in it.
    builtin = home / "xdg" / "novakit"
    builtin.mkdir(parents=True, mode=0o755)
    old = builtin / "notes.txt"
    old.write_text("left by an earlier version")
    old.chmod(0o644)
    nk("server", "list")
    assert oct(stat.S_IMODE(builtin.stat().st_mode)) == "0o700"
    assert oct(stat.S_IMODE((builtin / "novakit.db").stat().st_mode)) == "0o600"
    # A file already there keeps its mode; the directory closes it.
    assert oct(stat.S_IMODE(old.stat().st_mode)) == "0o644"

    # A directory the operator chose may be shared on purpose: its mode stays, new files are private.
    chosen = home / "shared"
    chosen.mkdir(mode=0o750)
    nk("server", "list", NOVAKIT_STATE_DIR=str(chosen))
    assert oct(stat.S_IMODE(chosen.stat().st_mode)) == "0o750"
    assert oct(stat.S_IMODE((chosen / "novakit.db").stat().st_mode)) == "0o600"


def test_an_explicit_database_url_in_a_missing_directory_is_an_error(home: Path) -> None:
    missing = home / "nonexistent" / "dir"
    url = f"sqlite:///{missing / 'x.db'}"
    result = nk("server", "list", code=1, NOVAKIT_DB_URL=url, NOVAKIT_STATE_DIR=str(home / "state"))
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert str(missing / "x.db") in lines[0] and "does not exist" in lines[0]
    assert "Traceback" not in result.output and result.stdout == ""
    assert not (home / "nonexistent").exists()
