"""HAProxy's runtime API, as the lb faults use it (local socket or a container's published port)."""
from __future__ import annotations

import socket


def runtime_command(address: str | tuple[str, int], command: str, timeout: float = 10) -> str:
    """Send one command; return HAProxy's answer, raising with it when it is not a success.

    ``address`` is a unix socket path or a (host, port) pair. The commands the faults send
    (``shutdown sessions server``, ``set server ... state``) answer with nothing on success.
    """
    if isinstance(address, str):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        conn.connect(address)
    else:
        conn = socket.create_connection(address, timeout=timeout)
    with conn:
        conn.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks).decode(errors="replace").strip()
    if answer:
        raise RuntimeError(f"HAProxy refused {command!r}: {answer}")
    return answer
