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
    try:
        if isinstance(sock, (tuple, list)):
            conn = socket.create_connection(tuple(sock), timeout=timeout)
        else:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(timeout)
            try:
                conn.connect(str(sock))
            except OSError:
                conn.close()
                raise
    except OSError as exc:  # name the socket: a bare "[Errno 2] No such file or directory" says not which
        raise type(exc)(f"HAProxy's runtime API socket {_where(sock)}: {exc.strerror or exc}") from exc
    with conn:
        conn.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _where(sock: Address) -> str:
    return f"{sock[0]}:{sock[1]}" if isinstance(sock, (tuple, list)) else str(sock)


def unreachable(sock: Address, timeout: float = 5.0) -> str | None:
    """Why HAProxy's runtime API at ``sock`` does not answer (a ``show info``), else None: checked before a run
    with lb faults, which otherwise failed only after the whole load."""
    if not isinstance(sock, (tuple, list)) and not Path(sock).exists():
        return f"the stack state's haproxy_socket {sock} does not exist (HAProxy is not running there)"
    try:
        if "Name:" in command(sock, "show info", timeout):
            return None
        return f"the stack state's haproxy_socket {_where(sock)} does not answer as HAProxy's runtime API"
    except OSError as exc:  # it names the socket
        return f"the stack state's haproxy_socket does not answer: {exc}"


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
