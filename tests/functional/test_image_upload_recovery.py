"""An image upload killed half way (its process gets SIGKILL with part of the data written):
the image stays ``saving`` with a partial file until heal, once the upload made no progress for
``compute.build_timeout``, makes it ``queued`` again and removes the file; then the upload is
made again. Heal leaves an upload that still progresses alone. On SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time

from novakit.catalog import image_data, images
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import utcnow
from novakit.heal.manager import heal

CHUNK = 64 * 1024

#: a process that uploads three chunks, says so, and then waits (for its SIGKILL)
UPLOADER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from novakit.catalog import image_data
    from novakit.context import RequestContext
    from novakit.db.engine import Database

    def chunks():
        for _ in range(3):
            yield b"x" * {chunk}
        print("written", flush=True)
        time.sleep(120)
        yield b"never"

    owner = RequestContext(project_id="web", user_id="alice", roles=["member"])
    image_data.upload(Database(sys.argv[1]), owner, sys.argv[2], chunks(), Path(sys.argv[3]))
    """
).format(chunk=CHUNK)


def _status(db: Database, owner: RequestContext, image_id: str) -> str:
    with db.reader() as session:
        return str(images.find(session, owner, image_id).status)


def test_an_upload_killed_half_way_is_queued_again_by_heal(db: Database, conf: Config) -> None:
    owner = RequestContext(project_id="web", user_id="alice", roles=["member"])
    made = images.create_queued(db, owner, {"name": "half", "disk_format": "raw", "container_format": "bare"})
    store = image_data.store_of(conf)
    partial = store / f".{made['id']}.partial"
    child = subprocess.Popen(
        [sys.executable, "-c", UPLOADER, conf.database_url, made["id"], str(store)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "written"
        deadline = time.monotonic() + 30
        while not (partial.exists() and partial.stat().st_size >= 3 * CHUNK) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert _status(db, owner, made["id"]) == "saving" and partial.stat().st_size >= 3 * CHUNK

    # Within the timeout the upload may still be alive: heal leaves it.
    assert [c for c in heal(db, conf).corrections if c.kind == "upload_recovered"] == []
    later = utcnow() + dt.timedelta(seconds=conf.compute.build_timeout + 5)
    dry = heal(db, conf, clock=lambda: later, dry_run=True)
    assert [(c.instance, c.applied) for c in dry.corrections if c.kind == "upload_recovered"] == [
        (made["id"], False)
    ]
    assert _status(db, owner, made["id"]) == "saving"
    report = heal(db, conf, clock=lambda: later)
    found = [c for c in report.corrections if c.kind == "upload_recovered"]
    assert [(c.instance, c.before, c.after, c.applied) for c in found] == [
        (made["id"], "saving", "queued", True)
    ]
    assert _status(db, owner, made["id"]) == "queued" and not partial.exists()
    assert [c for c in heal(db, conf, clock=lambda: later).corrections if c.kind == "upload_recovered"] == []

    # The upload is made again, whole.
    done = image_data.upload(db, owner, made["id"], [b"y" * CHUNK, b"z" * CHUNK], store)
    assert done["status"] == "active" and done["size"] == 2 * CHUNK
    assert (store / made["id"]).stat().st_size == 2 * CHUNK
