"""The compute side never loads the database layer (ARCHITECTURE.md: "It never opens the database").

Checked in a fresh interpreter, because in the test process something else has
always imported ``novakit.db`` already.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import novakit.virt

COMPUTE_SIDE = [
    "novakit.host.manager",
    "novakit.host.__main__",
    "novakit.transport.ssh",
    *sorted(m.name for m in pkgutil.walk_packages(novakit.virt.__path__, "novakit.virt.")),
]


def _modules_loaded_by(module: str) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"try:\n    importlib.import_module({module!r})\n"
        "except ImportError as exc:\n"
        "    # libvirt-python may be missing; what matters is what was imported before that.\n"
        "    if 'libvirt' not in str(exc): raise\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return list(json.loads(out.stdout))


def test_the_compute_side_never_imports_the_database() -> None:
    offenders = {}
    for module in COMPUTE_SIDE:
        loaded = _modules_loaded_by(module)
        assert module in loaded or module.startswith("novakit.virt.libvirt"), module
        db_modules = [m for m in loaded if m == "novakit.db" or m.startswith(("novakit.db.", "sqlalchemy"))]
        if db_modules:
            offenders[module] = db_modules
    assert offenders == {}


def test_running_a_request_on_the_compute_side_never_imports_the_database(tmp_path: object) -> None:
    request = {
        "request_id": "req-1",
        "host": "h1",
        "operation": "get_available_resource",
        "driver": {"driver": "fake", "options": {"state_dir": str(tmp_path)}},
    }
    code = (
        "import io, json, sys\n"
        "from novakit.host.__main__ import main\n"
        "out = io.StringIO()\n"
        "status = main(io.StringIO(sys.argv[1]), out)\n"
        "report = {'status': status, 'result': json.loads(out.getvalue()), 'modules': sorted(sys.modules)}\n"
        "print(json.dumps(report))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(request)], check=True, capture_output=True, text=True
    )
    report = json.loads(done.stdout)
    assert report["status"] == 0
    assert report["result"]["resources"]["hypervisor_type"] == "fake"
    assert not [m for m in report["modules"] if m.startswith(("novakit.db", "sqlalchemy"))]
