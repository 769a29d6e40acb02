"""playbooks/heal.yml with import_unmanaged: check mode lists the guests it would import and changes
nothing; the real run imports them, and a second run has nothing left to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from novakit.context import RequestContext
from novakit.virt.driver import load_driver
from tests.e2e.prepared import api_for, fleet_env
from tests.e2e.test_check_mode import snapshot
from tests.e2e.test_flows import play, results_of

pytestmark = pytest.mark.e2e
ADMIN = RequestContext.admin()


def _imports(result) -> list[tuple[str, bool]]:  # type: ignore[no-untyped-def]
    [heal] = results_of(result, "Record the heal")
    return [
        (c["instance"], c["applied"]) for c in heal["report"]["corrections"] if c["kind"] == "imported_guest"
    ]


def test_heal_playbook_imports_unmanaged_guests_and_its_check_mode_only_lists_them(
    prepared_fleet: Path, tmp_path: Path
) -> None:
    env = fleet_env(prepared_fleet, tmp_path)
    api = api_for(env)
    with api.db.reader() as session:
        host = sorted(session.execute(text("SELECT host FROM compute_nodes")).scalars())[0]
    fake = load_driver("fake", host, {"state_dir": env["NOVAKIT_FAKE_STATE_DIR"]})
    uuid = fake.define_foreign("brown", vcpus=1, memory_mb=512, root_gb=5)  # type: ignore[attr-defined]
    before = snapshot(env)

    check = play("heal", tmp_path, env, {"import_unmanaged": True, "import_project": ""}, check=True)
    assert check.ok, check.runner.stdout.read()
    assert _imports(check) == [(uuid, False)]
    assert snapshot(env) == before

    real = play("heal", tmp_path, env, {"import_unmanaged": "true", "import_project": "brownfield"})
    assert real.ok, real.runner.stdout.read()
    assert _imports(real) == [(uuid, True)]
    server = api.get(ADMIN, uuid)
    assert (server["name"], server["status"], server["project_id"]) == ("brown", "ACTIVE", "brownfield")

    again = play("heal", tmp_path, env, {"import_unmanaged": True})
    assert again.ok and _imports(again) == []
