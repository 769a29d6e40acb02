"""The image module's ``visibility``: who sees the image, set on create and changed in place."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic

from novakit.catalog import images
from novakit.context import RequestContext
from tests.functional.cloud import Cloud

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"project": "admin-project", "user": "admin", "roles": ["admin"]}
LOCATION = "/var/lib/novakit/images/base.qcow2"


def _image(cloud: Cloud, monkeypatch: pytest.MonkeyPatch, check: bool = False, **args: Any) -> dict[str, Any]:
    monkeypatch.syspath_prepend(str(ROOT / "playbooks" / "collections"))
    module = importlib.import_module("ansible_collections.novakit.cloud.plugins.modules.image")
    given = {**ADMIN, "db_url": cloud.db.url, **args, "_ansible_check_mode": check}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": given}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def test_the_image_modules_visibility(cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    member = RequestContext("team-b", "bob", ["member"])
    made = _image(cloud, monkeypatch, name="base", location=LOCATION, visibility="private")
    assert made["changed"] and made["image"]["visibility"] == "private", made
    assert "base" not in {i["name"] for i in images.list_images(cloud.db, member)}
    again = _image(cloud, monkeypatch, name="base", location=LOCATION, visibility="private")
    assert not again["changed"], again
    unset = _image(cloud, monkeypatch, name="base", location=LOCATION)  # unset: kept as it is
    assert not unset["changed"], unset
    before = images.show(cloud.db, cloud.admin, "base")
    planned = _image(cloud, monkeypatch, check=True, name="base", location=LOCATION, visibility="public")
    assert planned["changed"] and images.show(cloud.db, cloud.admin, "base") == before
    public = _image(cloud, monkeypatch, name="base", location=LOCATION, visibility="public")
    assert public["changed"] and public["image"]["visibility"] == "public", public
    assert "base" in {i["name"] for i in images.list_images(cloud.db, member)}
