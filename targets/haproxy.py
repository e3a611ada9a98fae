"""HAProxy's runtime API: one command over the admin socket (a unix path, or a (host, port) pair
for a runtime API published over TCP, as in the compose stack), and the views of ``show stat``
that the stack and the lb faults need. Standard library only."""
from __future__ import annotations

import csv
import io
import socket
from pathlib import Path

Address = str | Path | tuple[str, int] | list


def command(sock: Address, line: str, timeout: float = 5.0) -> str:
    """Send one runtime-API command (e.g. ``show stat``) and return HAProxy's answer."""
    if isinstance(sock, (tuple, list)):
        conn = socket.create_connection(tuple(sock), timeout=timeout)
    else:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        conn.connect(str(sock))
    with conn:
        conn.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def runtime_command(address: Address, line: str, timeout: float = 10) -> str:
    """Send one command; raise with HAProxy's answer when it is not a success.

    The commands the faults send (``shutdown sessions server``, ``set server ... state``)
    answer with nothing on success."""
    answer = command(address, line, timeout).strip()
    if answer:
        raise RuntimeError(f"HAProxy refused {line!r}: {answer}")
    return answer


def _stat_rows(address: Address, timeout: float) -> list[dict]:
    return list(csv.DictReader(io.StringIO(command(address, "show stat", timeout).lstrip("# "))))


def server_status(sock: Address, backend: str = "bots", timeout: float = 5.0) -> dict[str, str]:
    """Each server's status in ``backend`` as HAProxy sees it: ``{"bot-1": "UP", "bot-2": "DOWN", ...}``."""
    return {row["svname"]: row["status"] for row in _stat_rows(sock, timeout)
            if row.get("pxname") == backend and row["svname"] not in ("FRONTEND", "BACKEND")}


def server_sessions(address: Address, server: str, timeout: float = 10) -> int | None:
    """Sessions open on ``backend/server`` right now (``scur`` of ``show stat``): what an lb-drop will
    cut, so the timeline can tell a drop that cut nothing (ineffective) from one that cut something."""
    backend, _, name = server.partition("/")
    for row in _stat_rows(address, timeout):
        if row.get("pxname") == backend and row.get("svname") == name:
            return int(row["scur"]) if (row.get("scur") or "").isdigit() else None
    return None
