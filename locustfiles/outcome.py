"""Jepsen-style outcome of one turn, from what came back (no Locust import: unit-testable).

``ok`` 2xx with a reply; ``fail`` the request never left (connection refused, name not
resolved) or was refused by a rate limit (429: the client is told to send it again, so a bot that
stored it will store it twice); ``info`` anything after which the bot may or may not have stored the turn
(timeout, reset, any non-2xx status, a 2xx without a readable reply: locustfiles/contract.py).
"""
from __future__ import annotations

import codecs
import errno
import re
import socket

from gevent import Timeout as GeventTimeout

from locustfiles.contract import ChatContract, NoReply


class BadRedirect(ValueError):
    """The bot answered with a redirect whose Location cannot be followed (no URL, a bad port...)."""


class NotSent(ConnectionError):
    """The turn never left: the connection it goes over could not be opened (a WebSocket's, --websocket)."""


def classify_error(exc: BaseException | None) -> tuple[str, str]:
    """(outcome, short error) for a request that got no HTTP response."""
    if isinstance(exc, NotSent):
        return "fail", str(exc)
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


_CHARSET = re.compile(r";\s*charset\s*=\s*\"?([^\";\s]+)", re.IGNORECASE)


def as_utf8(content: bytes | None, content_type) -> bytes | None:
    """The body in UTF-8, which every reply format is read as: a bot answering ``text/plain; charset=ISO-8859-1``
    (or JSON it declares so) was read byte for byte as UTF-8, its accents replaced, and its stored replies then
    differed from the journal's. An unknown charset is left as it is, and so is a body that is UTF-8 with some
    character beyond ASCII whatever its label says: text in a one-byte charset with accents almost never decodes as
    UTF-8, while frameworks label UTF-8 JSON ``charset=iso-8859-1`` by default (PHP's default_charset), which a
    browser's ``fetch().json()`` ignores as RFC 8259 says: read as Latin-1, every reply was mojibake and a correct
    bot FAILed "unanswered" (API hunt 18)."""
    match = _CHARSET.search(content_type) if content and isinstance(content_type, str) else None
    if match is None or not content.isascii() and _is_utf8(content):
        return content
    try:
        charset = codecs.lookup(match.group(1)).name
    except LookupError:
        return content
    return content if charset == "utf-8" else content.decode(charset, "replace").encode("utf-8")


def _is_utf8(content: bytes) -> bool:
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def judge_response(status: int, content: bytes | None, error: BaseException | None,
                   contract: ChatContract) -> tuple[str, str | None, str | None]:
    """(outcome, reply, error text) of one turn from what came back (status 0: no HTTP response)."""
    if not status:
        outcome, text = classify_error(error)
        return outcome, None, text
    if status == 429:  # refused before any work: the client is told to send it again, so it must not be stored
        return "fail", None, "HTTP 429: refused, too many requests"
    if not 200 <= status < 300:
        return "info", None, f"HTTP {status}"
    try:
        return "ok", contract.reply(content or b""), None
    except NoReply as exc:
        job = f" (HTTP {status}: a job API? --poll-path polls for its reply)" if status in (201, 202) and not \
            contract.poll_path and not (content or b"").strip() else ""
        return "info", None, f"{exc}{job}"
