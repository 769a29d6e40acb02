"""Every file a migration run reads ships in the package (pyproject's package-data).

The migration trees are directories of scripts without ``__init__.py``: setuptools takes them
into a wheel only by the globs of ``[tool.setuptools.package-data]``. A tree or a file kind
missing there installs fine in editable mode and fails on an installed copy at the first
``novakit db upgrade``.
"""

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_migration_file_is_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    db = ROOT / "novakit" / "db"
    trees = [p for p in db.iterdir() if p.is_dir() and (p / "env.py").exists()]
    assert {t.name for t in trees} >= {"migrations", "cell_migrations"}
    missing = [
        str(f.relative_to(db))
        for tree in trees
        for f in tree.rglob("*")
        if f.is_file()
        and "__pycache__" not in f.parts
        and not any(fnmatch(str(f.relative_to(db)), g) for g in globs["novakit.db"])
    ]
    assert missing == []
