"""HAProxy's runtime API as the lb faults use it: a command that must succeed (local socket or a
container's published port). The exchange itself is refbot.haproxy.command."""
from __future__ import annotations

from refbot.haproxy import command


def runtime_command(address: str | tuple[str, int], line: str, timeout: float = 10) -> str:
    """Send one command; raise with HAProxy's answer when it is not a success.

    The commands the faults send (``shutdown sessions server``, ``set server ... state``)
    answer with nothing on success."""
    answer = command(address, line, timeout).strip()
    if answer:
        raise RuntimeError(f"HAProxy refused {line!r}: {answer}")
    return answer
