"""Which replica answered a turn, from a response header the bot sets (``--replica-header X-Refbot-Replica``).

A listener on Locust's ``request`` event reads the header of each chat turn's response; the journal record
of that same turn takes it (live.TalliedJournal). ChatUser fires a turn's request event and then journals
the turn in the same greenlet with no gevent switch in between (conversation.py ``turn`` -> ``finish``), so
"the last response seen" is that turn's. A turn the stop interrupted fired no request event: its replica
is null, and ``take`` clears the value so it never lends one turn's replica to another.
"""
from __future__ import annotations

CHAT_PREFIX = "chat "


class ReplicaTag:
    """Always listening; a no-op while ``header`` is empty (it is set per test: the web UI's form, or the
    master's options on a worker)."""

    def __init__(self, header: str = ""):
        self.header = header
        self.last: str | None = None

    def on_request(self, name: str = "", response=None, **_kw) -> None:
        if self.header and name.startswith(CHAT_PREFIX):
            headers = getattr(response, "headers", None)
            value = headers.get(self.header) if headers is not None else None
            self.last = str(value) if value else None

    def take(self) -> str | None:
        value, self.last = self.last, None
        return value
