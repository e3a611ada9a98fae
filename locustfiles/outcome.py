"""Jepsen-style outcome of one turn, from what came back (no Locust import: unit-testable).

``ok`` 2xx with a reply; ``fail`` the request never left (connection refused, name not
resolved); ``info`` anything after which the bot may or may not have stored the turn
(timeout, reset, any non-2xx status, a 2xx without a readable reply: locustfiles/contract.py).
"""
from __future__ import annotations

import errno
import socket

from gevent import Timeout as GeventTimeout

from locustfiles.contract import ChatContract, NoReply


class BadRedirect(ValueError):
    """The bot answered with a redirect whose Location cannot be followed (no URL, a bad port...)."""


def classify_error(exc: BaseException | None) -> tuple[str, str]:
    """(outcome, short error) for a request that got no HTTP response."""
    if isinstance(exc, BadRedirect):  # the request reached the bot: indeterminate, and a failed request
        return "info", f"a redirect that cannot be followed: {str(exc)[:100]}"
    chain = exc
    while chain is not None:
        if isinstance(chain, ConnectionRefusedError) or getattr(chain, "errno", None) == errno.ECONNREFUSED:
            return "fail", "connection refused"
        if isinstance(chain, socket.gaierror):
            return "fail", "host name not resolved"
        if isinstance(chain, (TimeoutError, socket.timeout, GeventTimeout)):
            return "info", "timeout"
        chain = chain.__cause__ or chain.__context__
    if isinstance(exc, ConnectionResetError):
        return "info", "connection reset"
    detail = str(exc)[:100] if exc is not None else ""
    return "info", f"connection error: {type(exc).__name__}" + (f": {detail}" if detail else "")


def judge_response(status: int, content: bytes | None, error: BaseException | None,
                   contract: ChatContract) -> tuple[str, str | None, str | None]:
    """(outcome, reply, error text) of one turn from what came back (status 0: no HTTP response)."""
    if not status:
        outcome, text = classify_error(error)
        return outcome, None, text
    if not 200 <= status < 300:
        return "info", None, f"HTTP {status}"
    try:
        return "ok", contract.reply(content or b""), None
    except NoReply as exc:
        return "info", None, str(exc)
