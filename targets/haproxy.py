"""HAProxy's runtime API as the lb faults use it: a command that must succeed (local socket or a
container's published port). The exchange itself is refbot.haproxy.command."""
from __future__ import annotations

import csv
import io

from refbot.haproxy import command


def runtime_command(address: str | tuple[str, int], line: str, timeout: float = 10) -> str:
    """Send one command; raise with HAProxy's answer when it is not a success.

    The commands the faults send (``shutdown sessions server``, ``set server ... state``)
    answer with nothing on success."""
    answer = command(address, line, timeout).strip()
    if answer:
        raise RuntimeError(f"HAProxy refused {line!r}: {answer}")
    return answer


def server_sessions(address: str | tuple[str, int], server: str, timeout: float = 10) -> int | None:
    """Sessions open on ``backend/server`` right now (``scur`` of ``show stat``): what an lb-drop will
    cut, so the timeline can tell a drop that cut nothing (ineffective) from one that cut something."""
    backend, _, name = server.partition("/")
    rows = csv.DictReader(io.StringIO(command(address, "show stat", timeout).lstrip("# ")))
    for row in rows:
        if row.get("pxname") == backend and row.get("svname") == name:
            return int(row["scur"]) if (row.get("scur") or "").isdigit() else None
    return None
