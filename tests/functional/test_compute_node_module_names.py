"""The compute_node module refuses a host name against RFC 1123 in check mode as in a real run."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic

from novakit.db.engine import Database

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"project": "admin-project", "user": "admin", "roles": ["admin"]}
RESOURCES = {
    "hypervisor_hostname": "h",
    "hypervisor_type": "fake",
    "vcpus": 1,
    "memory_mb": 512,
    "local_gb": 1,
}


def _compute_node(db: Database, monkeypatch: pytest.MonkeyPatch, check: bool, host: str) -> dict[str, Any]:
    monkeypatch.syspath_prepend(str(ROOT / "playbooks" / "collections"))
    module = importlib.import_module("ansible_collections.novakit.cloud.plugins.modules.compute_node")
    given = {**ADMIN, "db_url": db.url, "host": host, "resources": RESOURCES, "_ansible_check_mode": check}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": given}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_a_bad_host_name_fails_the_task_alike(
    db: Database, monkeypatch: pytest.MonkeyPatch, check: bool
) -> None:
    refused = _compute_node(db, monkeypatch, check, "../x")
    assert refused.get("failed") and "RFC 1123" in refused["msg"], refused
    assert _compute_node(db, monkeypatch, check, "compute-1.example.com").get("failed") is None
