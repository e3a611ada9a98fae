"""Where stored histories come from: the options that describe a store, and what a read yields.

A reader turns a list of session ids into ``RawSession`` records, in batches, so the audit
holds one batch in memory at a time. The raw entries are kept exactly as stored (bytes or
str) so the snapshot can replay them later and decoding problems become findings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

from contracts import redact


class StoreError(Exception):
    """The store could not be read (refused, died mid-read, bad options)."""


@dataclass(slots=True)
class RawSession:
    session: str
    key: str
    exists: bool
    ttl: int | None = None
    entries: list = field(default_factory=list)  # oldest first; str, bytes, or decoded JSON values
    type: str = "list"  # one of RAW_TYPES


# the types a reader gives a session (RawSession.type): Redis's, "string" one JSON blob, "other" for a Redis type
# that holds no history, "http", "none" for a missing key; a snapshot line of another is damaged (oracle/snapshot.py)
RAW_TYPES = ("list", "string", "zset", "stream", "hash", "other", "http", "none")


@dataclass
class StoreOptions:
    """How to find and read a session's stored history (defaults: LangChain's Redis layout)."""
    url: str | None = None                    # redis://... for the Redis reader
    key_template: str = "message_store:{session}"
    format: str = "auto"                      # auto | list | blob (auto: decide per key by TYPE)
    direction: str = "lpush"                  # lpush: newest first (LangChain); rpush: oldest first
    role_field: str = "type"                  # dotted path to the role inside an element
    content_field: str = "data.content"       # dotted path to the text inside an element
    user_roles: tuple = ("human", "user", "HumanMessage", "HumanMessageChunk")  # LangChain stores a streamed
    assistant_roles: tuple = ("ai", "assistant", "AIMessage", "AIMessageChunk")  # message as its chunk type
    # (RunnableWithMessageHistory); a hand-written history may store the message's class name
    http_url: str | None = None               # e.g. http://host/sessions/{session}/history
    http_headers: tuple = ()                  # (name, value) pairs every --http-url GET sends (secret: the chat's token)
    messages_field: str = "messages"          # dotted path to the message list in a JSON document (a blob, an
                                              # HTTP reply); a document that is a list is the list
    reader: str | None = None                 # module:function
    batch: int = 1000                         # sessions per pipeline round trip
    scan_foreign: bool = True                 # SCAN the namespace for keys no session owns
    timeout_s: float = 10.0
    own_ids: bool = False                     # keys named by goldfish's own conversation ids (``{conversation}`` in
    #                                           --key-template), also where the bot issued ids of its own
    on_batch: Callable[[int, int], None] | None = None  # hook(partition, its sessions judged) per batch, for tests

    def key(self, session: str) -> str:
        return self.key_template.replace("{session}", session)

    def given_template(self) -> str:
        """--key-template as the user gives it (``{conversation}`` for ``own_ids``), for a command to run again."""
        return self.key_template.replace("{session}", CONVERSATION) if self.own_ids else self.key_template

    def name(self) -> str:
        """The reader kind, for messages and store/meta.json."""
        if self.reader:
            return f"function:{self.reader}"
        if self.http_url:
            return "http"
        return "redis"

    def where(self) -> str:
        """The store's address with any password masked, for messages and meta.json."""
        return redact.url(self.http_url or self.url or self.reader or "")

    def validate(self) -> None:
        if self.direction not in ("lpush", "rpush"):
            raise StoreError(f"--direction must be lpush or rpush, not {self.direction!r}")
        if self.format not in ("auto", "list", "blob"):
            raise StoreError(f"--format must be auto, list or blob, not {self.format!r}")
        if "{session}" not in self.key_template:
            raise StoreError(f"--key-template {self.key_template!r} must contain {{session}} (or {{conversation}}: "
                             "goldfish's own id of the conversation, where the bot issues ids of its own)")
        if self.http_url and "{session}" not in self.http_url:
            raise StoreError(f"--http-url {self.http_url!r} must contain {{session}}")
        if not (self.url or self.http_url or self.reader):
            raise StoreError("no store given: pass --store-url, --http-url or --reader")


def own_ids_template(template: str) -> tuple[str, bool]:
    """``--key-template`` with ``{conversation}`` read as ``{session}``, and whether it named goldfish's own ids so:
    a bot that issues a login token (--session-from) but keys its histories by the conversation id goldfish sends
    in the body (``{conversation}``) could not be audited (API hunt 18)."""
    if CONVERSATION in template and "{session}" not in template:
        return template.replace(CONVERSATION, "{session}"), True
    return template, False


CONVERSATION = "{conversation}"


class Reader(Protocol):
    def read(self, sessions: list[str]) -> Iterator[list[RawSession]]: ...
    def foreign(self, owned) -> Iterable[dict]: ...  # owned.owns(keys) -> [bool]


def batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def make_reader(options: StoreOptions) -> Reader:
    """The reader the options name: a user function, HTTP, or Redis (the default)."""
    options.validate()
    if options.reader:
        from oracle.function_reader import FunctionReader
        return FunctionReader(options)
    if options.http_url:
        from oracle.http_reader import HttpReader
        return HttpReader(options)
    from oracle.redis_reader import RedisReader
    return RedisReader(options)
