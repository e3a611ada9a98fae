"""The chat API contract, from options: where the message and session id go, where the reply is.

Real bots differ in path, field names (dotted paths for nested JSON, e.g. ``input.text``),
whether the session id travels in the body or a header, extra headers (auth), and where the
reply sits in the response (``data.answer.text``). All of it is data, so a team with an
unusual bot writes a Locust config file, not Python.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


class NoReply(ValueError):
    """The response has no reply text at the configured place (not JSON, or the field is missing)."""


@dataclass(frozen=True)
class ChatContract:
    path: str = "/chat"
    message_field: str = "message"
    session_field: str = "session_id"
    session_header: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    reply_field: str = "reply"

    @classmethod
    def from_settings(cls, s) -> "ChatContract":
        return cls(path=s.chat_path, message_field=s.message_field,
                   session_field="" if s.session_header else s.session_field,
                   session_header=s.session_header, headers=tuple(s.headers.items()),
                   reply_field=s.reply_field)

    def request(self, session: str, message: str) -> tuple[dict, dict | None]:
        """The JSON body and the headers (None when there are none) of one turn."""
        if not self.session_header and not self.headers and "." not in self.message_field + self.session_field:
            return {self.session_field: session, self.message_field: message}, None  # the hot, common case
        body: dict = {}
        set_dotted(body, self.message_field, message)
        headers = dict(self.headers)
        if self.session_header:
            headers[self.session_header] = session
        else:
            set_dotted(body, self.session_field, session)
        return body, headers or None

    @cached_property
    def reply_path(self) -> tuple[str, ...]:
        return tuple(self.reply_field.split("."))

    def reply(self, payload) -> str:
        """The reply text inside a decoded JSON response; NoReply when it is not there."""
        value = payload
        for part in self.reply_path:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise NoReply(f"no reply field {self.reply_field!r}")
        if not isinstance(value, str):
            raise NoReply(f"reply field {self.reply_field!r} is not text")
        if not value.isascii():  # a JSON "\ud800" escape decodes to a lone surrogate, which no UTF-8 file can hold
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value


def set_dotted(target: dict, path: str, value) -> None:
    """``set_dotted(d, "a.b", v)`` -> ``d["a"]["b"] = v``."""
    *parents, last = path.split(".")
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value


def check_fields(message: str, session: str, reply: str) -> None:
    """The dotted paths of the options must name distinct places: ValueError naming the options otherwise.

    Why: ``--message-field x --session-field x`` silently drops the session id (every probe then
    looks forgotten), and ``a`` with ``a.b`` cannot both be set (a turn would fail on every send)."""
    paths = {"--message-field": message, "--session-field": session, "--reply-field": reply}
    for option, path in paths.items():
        if path and any(not part for part in str(path).split(".")):
            raise ValueError(f"{option}: {path!r} has an empty part (write a.b, not a..b, .a or a.)")
    if not (message and session):
        return
    a, b = str(message).split("."), str(session).split(".")
    if a[:len(b)] == b or b[:len(a)] == a:
        what = "are the same field" if a == b else "overlap (one lies inside the other)"
        raise ValueError(f"--message-field {message!r} and --session-field {session!r} {what}: "
                         "the message and the session id need two places in the request body")
