"""Functions run in separate OS processes by the race tests (importable, so spawn can find them)."""

from __future__ import annotations

import time
from typing import Any

from novakit import exceptions


def wait_until(start_at: float) -> None:
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


def guarded_write(url: str, uuid: str, start_at: float) -> str:
    """Try to move the instance from task_state None to powering-off."""
    from novakit.cells.registry import targeting
    from novakit.db import api as db_api
    from novakit.db.engine import Database

    db = Database(url)
    wait_until(start_at)
    try:
        with targeting(db, uuid), db.writer() as session:
            db_api.instance_update(session, uuid, {"task_state": "powering-off"}, expected_task_state=None)
        return "won"
    except exceptions.UnexpectedTaskStateError:
        return "lost"
    finally:
        db.dispose()


def api_action(url: str, state_dir: str, uuid: str, action: str, start_at: float) -> str:
    """Run one API action as a separate caller; report how it ended."""
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext
    from novakit.db.engine import Database

    conf = load_config(db_url=url, state_dir=state_dir, quota={"instances": -1, "cores": -1, "ram": -1})
    db = Database(url)
    api = API(db, conf)
    ctx = RequestContext("project-a", "alice", ["member"])
    wait_until(start_at)
    try:
        view: dict[str, Any] = getattr(api, action)(ctx, uuid)
        return f"ok:{view['vm_state']}"
    except (exceptions.InstanceInvalidState, exceptions.UnexpectedTaskStateError) as exc:
        return f"conflict:{exc.__class__.__name__}"
    finally:
        db.dispose()


def scale(url: str, state_dir: str, name: str, count: int, start_at: float) -> str:
    """The boot playbook's schedule step for ``count`` servers ``name-N``, as a separate run; its names."""
    from novakit import playflow
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext
    from novakit.db.engine import Database

    conf = load_config(db_url=url, state_dir=state_dir, quota={"instances": -1, "cores": -1, "ram": -1})
    db = Database(url)
    api = API(db, conf)
    ctx = RequestContext("project-a", "alice", ["member"])
    wait_until(start_at)
    try:
        out = playflow.schedule(
            api, ctx, {"name": name, "flavor": "m1.small", "image": "tiny", "count": count}
        )
        return ",".join(sorted(i["name"] for r in out["requests"] for i in r["instances"]))
    except exceptions.NovakitError as exc:
        return f"error:{exc.__class__.__name__}: {exc}"
    finally:
        db.dispose()


def boot_from_volume(url: str, state_dir: str, name: str, volume: str, start_at: float) -> str:
    """Create a server booting from an existing volume, as a separate caller; how it ended."""
    from novakit.compute.api import API
    from novakit.config import load_config
    from novakit.context import RequestContext
    from novakit.db.engine import Database

    conf = load_config(db_url=url, state_dir=state_dir, quota={"instances": -1, "cores": -1, "ram": -1})
    db = Database(url)
    api = API(db, conf)
    ctx = RequestContext("demo", "alice", ["member"])
    wait_until(start_at)
    try:
        servers = api.create(ctx, {"name": name, "flavor": "m1.small", "boot_volume": volume})
        return f"ok:{servers[0]['status']}"
    except (exceptions.ValidationError, exceptions.InvalidVolume) as exc:
        return f"refused:{exc.__class__.__name__}"
    finally:
        db.dispose()
