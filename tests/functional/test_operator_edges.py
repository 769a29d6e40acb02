"""Edges an operator hits before anything runs (issue 25, items 10, 14 and 18).

A configuration that cannot be read says which file or field is wrong, not "internal error";
the Unix user is the user id when the environment names none; ``db upgrade`` is the admin's.
"""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest
from typer.testing import CliRunner

from novakit import exceptions
from novakit.cli.main import app
from novakit.config import load_config
from novakit.context import operator_identity


def test_a_config_file_that_is_not_utf8_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "novakit.toml"
    path.write_bytes(b'db_url = "sqlite:///x\xff\xfe.db"\n')
    with pytest.raises(exceptions.ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and "UTF-8" in str(err.value)


@pytest.mark.parametrize("url", ["xyz://", "not a url", "postgresql+nodriver://u@h/d"])
def test_a_db_url_of_no_known_database_is_refused_naming_the_field(url: str) -> None:
    with pytest.raises(exceptions.ConfigError) as err:
        load_config(db_url=url)
    assert "db_url" in str(err.value)


def test_the_cli_says_which_file_and_field_is_wrong(tmp_path: Path) -> None:
    bad_bytes = tmp_path / "bytes.toml"
    bad_bytes.write_bytes(b"# caf\xe9\n")
    bad_url = tmp_path / "url.toml"
    bad_url.write_text("db_url = 'xyz://'\n")
    runner = CliRunner()
    for path, words in ((bad_bytes, str(bad_bytes)), (bad_url, "db_url")):
        result = runner.invoke(
            app, ["server", "list"], env={"NOVAKIT_CONFIG": str(path), "NOVAKIT_DB_URL": None}
        )
        assert result.exit_code != 0
        assert "internal error" not in result.output
        assert words in result.output


def test_with_no_user_in_the_environment_the_user_is_the_unix_users_name() -> None:
    _, user, _ = operator_identity({})
    assert user == pwd.getpwuid(__import__("os").getuid()).pw_name
    assert operator_identity({"LOGNAME": "logname-user"})[1] == "logname-user"
    assert operator_identity({"USER": "u", "LOGNAME": "l"})[1] == "u"


def test_db_upgrade_is_refused_to_a_member(db_url: str) -> None:
    runner = CliRunner()
    env = {
        "NOVAKIT_DB_URL": db_url,
        "NOVAKIT_CONFIG": None,
        "NOVAKIT_PROJECT": "p",
        "NOVAKIT_ROLES": "member",
    }
    refused = runner.invoke(app, ["db", "upgrade"], env=env)
    assert refused.exit_code != 0
    assert "db:upgrade" in refused.output
    done = runner.invoke(app, ["db", "upgrade"], env={**env, "NOVAKIT_ROLES": "admin"})
    assert done.exit_code == 0, done.output


def test_the_cli_refuses_an_unknown_filter_at_start(tmp_path: Path) -> None:
    # The registries check the names (config.py imports no scheduler code): still at start-up.
    path = tmp_path / "novakit.toml"
    path.write_text('[scheduler]\nweighers = ["RAMWeigher", "TypoWeigher"]\n')
    env = {"NOVAKIT_CONFIG": str(path), "NOVAKIT_DB_URL": None, "NOVAKIT_STATE_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, ["server", "list"], env=env)
    assert result.exit_code != 0
    assert "scheduler.weighers" in result.output and "TypoWeigher" in result.output
