"""Notifications as Nova emits them, for other automation to react to.

``instance.create.start`` / ``.end`` / ``.error``, ``instance.<action>.start`` /
``.end``, and ``instance.update`` with the old and new states. Each is one JSON
line appended to ``notifications_file`` (when configured) and handed to every
listener registered with ``subscribe`` in this process.
"""

from __future__ import annotations

import fcntl
import json
import threading
from collections.abc import Callable
from typing import Any

from novakit import files
from novakit.config import Config
from novakit.db.models import utcnow

Listener = Callable[[dict[str, Any]], None]

_LISTENERS: list[Listener] = []
_LOCK = threading.Lock()


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with every notification; returns a function that unsubscribes."""
    with _LOCK:
        _LISTENERS.append(listener)

    def unsubscribe() -> None:
        with _LOCK:
            if listener in _LISTENERS:
                _LISTENERS.remove(listener)

    return unsubscribe


class Notifier:
    def __init__(self, conf: Config, publisher_id: str = "novakit-conductor") -> None:
        self.path = conf.notifications_file
        self.publisher_id = publisher_id

    @property
    def listening(self) -> bool:
        """Whether a notification goes anywhere now: to the file, or to a listener of this
        process. What is read only to be told (a state change's old state) is not read else."""
        return self.path is not None or bool(_LISTENERS)

    def emit(self, event_type: str, instance_uuid: str, **payload: Any) -> dict[str, Any]:
        note = {
            "event_type": event_type,
            "publisher_id": self.publisher_id,
            "timestamp": utcnow().isoformat(),
            "payload": {"instance_id": instance_uuid, **payload},
        }
        if self.path is not None:
            # The payloads name servers, hosts and faults: for the operator only (novakit.files).
            files.private_dir(self.path.parent)
            line = json.dumps(note, default=str) + "\n"
            with files.open_private(self.path, "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fh.write(line)
        with _LOCK:
            listeners = list(_LISTENERS)
        for listener in listeners:
            listener(note)
        return note

    def state_update(
        self,
        instance_uuid: str,
        old: tuple[str, str | None],
        new: tuple[str, str | None],
        host: str | None = None,
    ) -> None:
        self.emit(
            "instance.update",
            instance_uuid,
            old_state=old[0],
            old_task_state=old[1],
            state=new[0],
            new_task_state=new[1],
            host=host,
        )
