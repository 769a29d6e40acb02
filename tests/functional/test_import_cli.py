"""`novakit host import` and `novakit heal --import-unmanaged` as an operator types them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from novakit.cli.main import app
from novakit.compute.states import PowerState
from novakit.virt.driver import load_driver

Run = Callable[..., Result]


@pytest.fixture
def nk(db_url: str, tmp_path: Path) -> Run:
    env = {
        "NOVAKIT_DB_URL": db_url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_FAKE_STATE_DIR": None,
        "NOVAKIT_CONFIG": None,
        "NOVAKIT_PROJECT": "admin",
        "NOVAKIT_USER": "admin",
        "NOVAKIT_ROLES": "admin",
        "NOVAKIT_REQUEST_ID": None,
        "JOB_ID": None,
        "AWX_JOB_ID": None,
        "COLUMNS": "250",
    }
    runner = CliRunner()

    def run(*args: str, code: int = 0, **extra: str | None) -> Result:
        result = runner.invoke(app, list(args), env={**env, **extra})
        assert result.exit_code == code, (args, result.stdout, result.stderr, result.exception)
        assert "Traceback" not in result.output
        return result

    run("db", "upgrade")
    run("host", "add", "compute-1", "--vcpus", "8", "--memory-mb", "16384", "--disk-gb", "200")
    run("flavor", "create", "m1.small", "--vcpus", "1", "--ram", "1024", "--disk", "10")
    return run


def test_host_import_lists_in_a_dry_run_then_imports_once(nk: Run, tmp_path: Path) -> None:
    fake = load_driver("fake", "compute-1", {"state_dir": str(tmp_path / "state" / "fake")})
    web = fake.define_foreign("web01", vcpus=1, memory_mb=1024, root_gb=10)  # type: ignore[attr-defined]
    db = fake.define_foreign("db01", vcpus=2, memory_mb=3000, root_gb=20, power_state=PowerState.SHUTDOWN)  # type: ignore[attr-defined]

    dry = nk("host", "import", "compute-1", "--dry-run").stdout
    assert "dry run: nothing changed" in dry and "would import 2 of 2 unmanaged guest(s)" in dry
    assert "imported-2c-3000m-20g (new)" in dry and "m1.small" in dry
    assert json.loads(nk("server", "list", "-o", "json").stdout) == []

    report = json.loads(nk("host", "import", "compute-1", "--project", "legacy", "-o", "json").stdout)
    assert report["project_id"] == "legacy"
    assert [(g["name"], g["uuid"], g["outcome"], g["vm_state"]) for g in report["guests"]] == [
        ("db01", db, "imported", "stopped"),
        ("web01", web, "imported", "active"),
    ]
    hosts = json.loads(nk("host", "list", "-o", "json").stdout)
    assert (hosts[0]["instances"], hosts[0]["used"]["MEMORY_MB"]) == (2, 4024)
    assert "imported 0 of 0 unmanaged guest(s)" in nk("host", "import", "compute-1").stdout

    denied = nk("host", "import", "compute-1", code=1, NOVAKIT_ROLES="member")
    assert "host:import" in denied.stderr
    bad = nk("host", "import", "compute-1", "--project", " ", code=1)
    assert "Invalid project: must be 1 to 255 printable characters" in bad.stderr


def test_heal_import_unmanaged_from_the_command_line(nk: Run, tmp_path: Path) -> None:
    fake = load_driver("fake", "compute-1", {"state_dir": str(tmp_path / "state" / "fake")})
    uuid = fake.define_foreign("old", vcpus=1, memory_mb=1024, root_gb=10)  # type: ignore[attr-defined]

    assert "0 correction(s)" in nk("heal").stdout
    dry = json.loads(nk("heal", "--dry-run", "--import-unmanaged", "-o", "json").stdout)
    assert [(c["kind"], c["instance"], c["applied"]) for c in dry["corrections"]] == [
        ("imported_guest", uuid, False)
    ]
    done = json.loads(nk("heal", "--import-unmanaged", "--import-project", "legacy", "-o", "json").stdout)
    assert [(c["kind"], c["instance"], c["applied"]) for c in done["corrections"]] == [
        ("imported_guest", uuid, True)
    ]
    shown = json.loads(nk("server", "show", uuid, "-o", "json", NOVAKIT_PROJECT="legacy").stdout)
    assert (shown["name"], shown["status"]) == ("old", "ACTIVE")
