"""The bot's memory modes: the correct one, and each memory bug as it happens in the field.

Every mode answers three questions for the app: what context does the model get for a
turn (``context``), how is a finished turn stored (``record``), and what does this replica's
memory hold for a session (``history``, served by ``GET /sessions/{id}/history``, before
any prompt building). ``turn`` strings them together around the model's think time; modes
whose bug lives in that sequence (shared-instance, read-modify-write) override ``turn``.

Store layout (what the oracle reads), unless a mode says otherwise: LangChain's
RedisChatMessageHistory — a Redis list per session at ``message_store:<session>``, LPUSH,
newest first, each element ``{"type": ..., "data": {"content": ...}}``.
"""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import pickle
import re
import sys
import time
import warnings
from collections import defaultdict

import anyio.to_thread
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, message_to_dict, messages_from_dict

with warnings.catch_warnings():  # langchain-community announces its sunset on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.chat_message_histories import RedisChatMessageHistory
# The in-memory history is deprecated in LangChain 1.x; the buggy modes use it on purpose.
warnings.filterwarnings("ignore", message=r"The class `InMemoryChatMessageHistory` was deprecated")

from contracts.redis_url import is_sentinel_url, redis_client
from refbot.config import Config
from refbot.model import Model

log = logging.getLogger("refbot.memory")
WRONG_PREFIX = "chat_history:"  # context-key-mismatch: the prompt builder's (wrong) key prefix


async def in_thread(fn, *args):
    """Run blocking redis-py/LangChain calls off the event loop, as a real async app must."""
    return await anyio.to_thread.run_sync(fn, *args)


def turn_messages(message: str, reply: str) -> list[BaseMessage]:
    return [HumanMessage(content=message), AIMessage(content=reply)]


class NotReplicated(RuntimeError):
    """WAIT confirmed fewer replicas than asked: the turn is written but not acknowledged (HTTP 503)."""


def langchain_history(config: Config, ttl: int | None) -> RedisChatMessageHistory:
    """LangChain's RedisChatMessageHistory for ``config.redis_url``.

    Its constructor parses the URL itself and knows one sentinel at most (and sets no socket
    timeouts), so for a Sentinel URL the class is given a client built by redis-py's Sentinel
    over every sentinel listed (contracts/redis_url.py); its storage code is untouched either way."""
    if not is_sentinel_url(config.redis_url):
        return RedisChatMessageHistory("template", url=config.redis_url, key_prefix=config.key_prefix, ttl=ttl)
    history = object.__new__(RedisChatMessageHistory)
    vars(history).update(session_id="template", key_prefix=config.key_prefix, ttl=ttl,
                         redis_client=redis_client(config.redis_url))
    return history


class Memory:
    """Base: subclasses fill in context/record/history; ``turn`` is the request's life."""

    def __init__(self, config: Config):
        self.config = config

    async def start(self) -> None:
        """Called once when the app starts (background tasks begin here)."""

    async def stop(self) -> None:
        """Called on graceful shutdown."""

    async def context(self, session_id: str) -> list[BaseMessage]:
        raise NotImplementedError

    async def record(self, session_id: str, message: str, reply: str) -> None:
        raise NotImplementedError

    async def history(self, session_id: str) -> list[BaseMessage]:
        raise NotImplementedError

    async def turn(self, session_id: str, message: str, model: Model) -> str:
        context = await self.context(session_id)
        reply = await model.respond(context, message)
        await self.record(session_id, message, reply)
        return reply


class RedisMemory(Memory):
    """correct: a RedisChatMessageHistory per request, as LangChain's docs show.

    The constructor opens a new connection and sends INFO every time (langchain-community's
    ``get_client``), which cut a replica's throughput about threefold here. So one history is built at
    start-up and each request gets a shallow copy with its own ``session_id``, sharing the
    connection pool. Storage behaviour is the class's own, untouched.
    """

    def __init__(self, config: Config, ttl: int | None = None):
        super().__init__(config)
        self.ttl = ttl
        self.template = langchain_history(config, ttl)
        self.client = self.template.redis_client

    def store(self, session_id: str, key_prefix: str | None = None) -> RedisChatMessageHistory:
        history = copy.copy(self.template)
        history.session_id = session_id
        if key_prefix is not None:
            history.key_prefix = key_prefix
        return history

    async def context(self, session_id):
        return await in_thread(lambda: self.store(session_id).messages)

    async def record(self, session_id, message, reply):
        if self.config.wait_replicas:
            await in_thread(self.record_replicated, session_id, turn_messages(message, reply))
        else:
            await in_thread(self.store(session_id).add_messages, turn_messages(message, reply))

    def record_replicated(self, session_id: str, messages: list[BaseMessage]) -> None:
        """The class's own writes, then WAIT, on one connection: WAIT counts the replicas that have
        this connection's writes, so through a pool the writes and the WAIT must not part."""
        with self.client.pipeline(transaction=False) as pipe:
            history = self.store(session_id)
            history.redis_client = pipe
            history.add_messages(messages)
            pipe.wait(self.config.wait_replicas, max(1, round(self.config.wait_ms)))
            confirmed = pipe.execute()[-1]
        if confirmed < self.config.wait_replicas:
            raise NotReplicated(f"WAIT confirmed {confirmed} of {self.config.wait_replicas} replica(s) "
                                f"within {self.config.wait_ms:g} ms; the turn is not acknowledged")

    async def history(self, session_id):
        return await in_thread(lambda: self.store(session_id).messages)


class TtlMemory(RedisMemory):
    """ttl:N — LangChain's own ``ttl``: the key expires N s after the last write."""

    def __init__(self, config: Config):
        super().__init__(config, ttl=config.ttl)


class WindowMemory(RedisMemory):
    """window:k — the store keeps everything, but only the last k turns reach the prompt."""

    async def context(self, session_id):
        messages = await super().context(session_id)
        return messages[-2 * self.config.window:]


class ContextKeyMismatchMemory(RedisMemory):
    """context-key-mismatch — the writer and the prompt builder were configured apart.

    Turns are stored at ``message_store:<session>``; the prompt builder's history uses the
    key prefix ``chat_history:``, which nothing ever writes, so the model sees nothing.
    """

    async def context(self, session_id):
        return await in_thread(lambda: self.store(session_id, key_prefix=WRONG_PREFIX).messages)


class ProcessLocalMemory(Memory):
    """process-local — LangChain's quick-start ``store = {}`` dict, one per process."""

    def __init__(self, config: Config):
        super().__init__(config)
        self.sessions: dict[str, InMemoryChatMessageHistory] = defaultdict(InMemoryChatMessageHistory)

    async def context(self, session_id):
        return list(self.sessions[session_id].messages)

    async def record(self, session_id, message, reply):
        self.sessions[session_id].add_messages(turn_messages(message, reply))

    async def history(self, session_id):
        return list(self.sessions[session_id].messages) if session_id in self.sessions else []


class FreshPerRequestMemory(Memory):
    """fresh-per-request — the history object is built inside the handler and dies with it."""

    async def turn(self, session_id, message, model):
        history = InMemoryChatMessageHistory()  # the bug: a new, empty memory every request
        reply = await model.respond(list(history.messages), message)
        history.add_messages(turn_messages(message, reply))
        return reply

    async def history(self, session_id):
        return list(InMemoryChatMessageHistory().messages)


class SharedInstanceMemory(RedisMemory):
    """shared-instance — one module-level history whose ``session_id`` each request reassigns.

    Correct while requests are serial. When they overlap, another request reassigns
    ``session_id`` during this one's think time, so this turn is written to (and read
    from) the other user's key: cross-talk, from a real race, not a coin flip.
    """

    def __init__(self, config: Config):
        super().__init__(config)
        self.shared = self.store("default")

    async def turn(self, session_id, message, model):
        history = self.shared
        history.session_id = session_id
        context = await in_thread(lambda: history.messages)
        reply = await model.respond(context, message)
        await in_thread(lambda: history.add_messages(turn_messages(message, reply)))
        return reply

    async def history(self, session_id):
        self.shared.session_id = session_id
        return await in_thread(lambda: self.shared.messages)


class ReadModifyWriteMemory(RedisMemory):
    """read-modify-write — the whole history is read, the turn appended, the whole written back.

    No WATCH/MULTI-check: two overlapping turns of one session both read the same old
    history and the later write erases the earlier turn (a lost update). Layout stays the
    LangChain list (newest first), rewritten whole with DEL + RPUSH in one transaction, so
    the oracle reads it with its default options.
    """

    async def turn(self, session_id, message, model):
        key = self.config.key_prefix + session_id
        raw = await in_thread(self.client.lrange, key, 0, -1)
        context = messages_from_dict([json.loads(item) for item in raw[::-1]])
        reply = await model.respond(context, message)
        new = [json.dumps(message_to_dict(m)) for m in reversed(turn_messages(message, reply))]

        def write_back():
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(key)
            pipe.rpush(key, *new, *raw)
            pipe.execute()

        await in_thread(write_back)
        return reply


class FireAndForgetMemory(RedisMemory):
    """fire-and-forget — turns are acknowledged once queued; a background task writes them later.

    Reads merge Redis with this replica's pending queue (read-your-writes on one replica),
    so nothing looks wrong until the process dies: SIGKILL loses every acknowledged turn
    still queued (``REFBOT_FLUSH_MS``, default 1000 ms). A graceful stop drains the queue.
    """

    def __init__(self, config: Config):
        super().__init__(config)
        self.pending: dict[str, list[BaseMessage]] = defaultdict(list)
        self.queue: asyncio.Queue | None = None
        self.stopping: asyncio.Event | None = None
        self.worker: asyncio.Task | None = None

    async def start(self):
        self.queue = asyncio.Queue()
        self.stopping = asyncio.Event()
        self.worker = asyncio.create_task(self._drain())

    async def stop(self):
        """Graceful shutdown (SIGTERM): write everything still queued, now."""
        self.stopping.set()
        self.queue.put_nowait(None)
        await self.worker

    async def _drain(self):
        while (item := await self.queue.get()) is not None:
            due, session_id, messages = item
            delay = due - time.monotonic()
            if delay > 0 and not self.stopping.is_set():
                try:
                    await asyncio.wait_for(self.stopping.wait(), delay)
                except TimeoutError:
                    pass
            try:
                await self._write(session_id, messages)
            except Exception:  # noqa: BLE001 - the field bug: a failed background write is only logged
                log.exception("background write for session %s failed; turn dropped", session_id)
                self._forget(session_id, messages)

    async def _write(self, session_id, messages):
        await in_thread(self.store(session_id).add_messages, messages)
        self._forget(session_id, messages)

    def _forget(self, session_id, messages):
        queued = self.pending.get(session_id, [])
        del queued[: len(messages)]
        if not queued:
            self.pending.pop(session_id, None)

    async def context(self, session_id):
        stored = await super().context(session_id)
        return stored + list(self.pending.get(session_id, []))

    async def record(self, session_id, message, reply):
        messages = turn_messages(message, reply)
        self.pending[session_id].extend(messages)
        self.queue.put_nowait((time.monotonic() + self.config.flush_ms / 1000.0, session_id, messages))

    async def history(self, session_id):
        return await self.context(session_id)


def _release_tag(release: str) -> str:
    return re.sub(r"\W", "_", release)


def stored_message_class(release: str) -> type:
    """The class this release pickles messages as, registered under a release-specific name.

    In the field a refactor renames or moves the pickled class between releases; pickles
    reference it by module and name, so a replica of another release cannot load them.
    Only the running release's class exists in a process.
    """
    name = f"StoredMessage_{_release_tag(release)}"
    module = sys.modules[__name__]
    if not hasattr(module, name):
        cls = type(name, (), {"__module__": __name__, "__qualname__": name,
                              "__init__": lambda self, type, content: self.__dict__.update(type=type, content=content)})
        setattr(module, name, cls)
    return getattr(module, name)


class PickleDriftMemory(RedisMemory):
    """pickle-drift — messages pickled as this release's class; other releases' entries do not load.

    Same key and LPUSH order as LangChain, but each element is a pickle. A replica that
    cannot unpickle an entry logs it and treats the whole history as empty (the silent
    amnesia), then keeps appending its own pickles, so the list mixes releases. A JSON
    reader sees every element as corrupt.
    """

    def __init__(self, config: Config):
        super().__init__(config)
        self.cls = stored_message_class(config.release)

    def _load(self, session_id) -> list[BaseMessage]:
        raw = self.client.lrange(self.config.key_prefix + session_id, 0, -1)
        try:
            loaded = [pickle.loads(item) for item in raw[::-1]]
            return [HumanMessage(m.content) if m.type == "human" else AIMessage(m.content) for m in loaded]
        except Exception as exc:  # noqa: BLE001 - the field bug: swallow and start afresh
            log.warning("session %s: history does not unpickle (%s); starting empty", session_id, exc)
            return []

    async def context(self, session_id):
        return await in_thread(self._load, session_id)

    async def history(self, session_id):
        return await in_thread(self._load, session_id)

    async def record(self, session_id, message, reply):
        items = [pickle.dumps(self.cls(m.type, m.content)) for m in turn_messages(message, reply)]
        await in_thread(lambda: self.client.lpush(self.config.key_prefix + session_id, *items))


MEMORIES: dict[str, type[Memory]] = {
    "correct": RedisMemory,
    "process-local": ProcessLocalMemory,
    "fresh-per-request": FreshPerRequestMemory,
    "shared-instance": SharedInstanceMemory,
    "read-modify-write": ReadModifyWriteMemory,
    "fire-and-forget": FireAndForgetMemory,
    "pickle-drift": PickleDriftMemory,
    "window": WindowMemory,
    "context-key-mismatch": ContextKeyMismatchMemory,
    "ttl": TtlMemory,
}


def build_memory(config: Config) -> Memory:
    """The memory for ``config.mode`` (already validated by ``parse_mode``)."""
    return MEMORIES[config.mode_name](config)
