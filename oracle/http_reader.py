"""Read stored histories over HTTP: GET a URL template per session, JSON with a messages list.

For bots whose store the tester cannot reach directly. 404 (or 410) means the session has
no history (the key is gone); other errors stop the read, like a dead Redis would. Requests
run on a small thread pool, in order, one batch at a time, so memory stays bounded.

Bad servers cannot hang or exhaust the audit: each GET, from connecting to its last byte, must be
done within ``REQUEST_DEADLINE_S`` (a watchdog shuts the socket of a reply dribbled in a byte at a
time, in its headers or its body, which no socket timeout catches), and a history may hold at most
``MAX_HISTORY_BYTES``; either stops the read with a message naming the URL. A GET sent on a kept-alive
connection that the server closed meanwhile (legal HTTP: servers close idle connections) and answered
with no byte at all is sent once more on a fresh connection.
"""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.client import RemoteDisconnected
from typing import Iterable, Iterator
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from contracts.jsonl import LINE_BYTES
from oracle.decode import message_list
from oracle.store import RawSession, StoreError, StoreOptions, batches

REQUEST_DEADLINE_S = 120.0            # one history GET, connect to last byte (a socket timeout is per read)
# one session's history, as decoded (a gzip body counts unpacked): half the longest snapshot line (contracts/jsonl.py
# LINE_BYTES, 64 MB), as the snapshot holds the whole history on one line, escaped or base64; 8 GETs at once stay
# within half a gigabyte
MAX_HISTORY_BYTES = LINE_BYTES // 2
_CHUNK = 1024 * 1024
_STALE = (RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

_local = threading.local()  # this worker thread's in-flight GET (a _Slot), and its own requests.Session


class _Slot:
    """One thread's GET in flight: its deadline and the connection it is sent on (for the watchdog)."""

    def __init__(self, deadline: float):
        self.deadline = deadline
        self.conn = None
        self.expired = False    # the watchdog shut its socket: the deadline passed
        self.aborted = False    # the read was stopped (an interrupt): shut for that


class _Watched:
    """A urllib3 connection that tells the thread's slot it carries the thread's GET."""

    def request(self, *args, **kwargs):
        slot = getattr(_local, "slot", None)
        if slot is not None:
            slot.conn = self
        return super().request(*args, **kwargs)


class _HTTPConnection(_Watched, HTTPConnection):
    pass


class _HTTPSConnection(_Watched, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class _Adapter(HTTPAdapter):
    """requests' adapter with watched connections (a SOCKS proxy keeps its own; then only the body is timed)."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def proxy_manager_for(self, proxy, **kwargs):
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
        return manager


def _shut(slot: _Slot) -> None:
    sock = getattr(slot.conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # a blocked recv returns at once, in whichever thread it waits
        except OSError:
            pass


class _Watchdog:
    """Shuts the socket of every GET past its deadline (again and again until the GET ends: its connection may
    still be opening when the deadline passes), and of every GET when the read is stopped."""

    def __init__(self):
        self.slots: set[_Slot] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.aborted = False
        self.thread = threading.Thread(target=self._run, name="http-reader-watchdog", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            now = time.monotonic()
            with self.lock:
                late = [slot for slot in self.slots if slot.aborted or slot.deadline <= now]
            for slot in late:
                slot.expired = slot.expired or not slot.aborted
                _shut(slot)

    def add(self, slot: _Slot) -> None:
        with self.lock:
            slot.aborted = self.aborted
            self.slots.add(slot)

    def remove(self, slot: _Slot) -> None:
        with self.lock:
            self.slots.discard(slot)

    def abort(self) -> None:
        with self.lock:
            self.aborted = True
            slots = list(self.slots)
        for slot in slots:
            slot.aborted = True
            _shut(slot)

    def close(self) -> None:
        self.stop.set()


def _stale(exc: BaseException) -> bool:
    """The connection was closed or reset under the GET before any byte of its reply came."""
    seen = 0
    todo = [exc]
    while todo and seen < 20:
        item = todo.pop()
        seen += 1
        if isinstance(item, _STALE):
            return True
        todo += [a for a in getattr(item, "args", ()) if isinstance(a, BaseException)]
        todo += [e for e in (item.__cause__, item.__context__) if e is not None]
    return False


class _TooLarge(Exception):
    pass


class HttpReader:
    def __init__(self, options: StoreOptions, workers: int = 8):
        self.options = options
        self.workers = workers
        self.watchdog: _Watchdog | None = None

    @staticmethod
    def _session() -> requests.Session:
        session = requests.Session()
        adapter = _Adapter()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def read(self, sessions: list[str]) -> Iterator[list[RawSession]]:
        self.watchdog = watchdog = _Watchdog()
        pool = ThreadPoolExecutor(self.workers)
        try:
            for batch in batches(sessions, self.options.batch):
                yield list(pool.map(self._one, batch))
        except BaseException:  # an error, an interrupt (SIGTERM, Ctrl-C): stop the GETs in flight, not wait on them
            watchdog.abort()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)  # quick: every socket in flight is shut, or every GET is done
            watchdog.close()

    def _one(self, session: str) -> RawSession:
        url = self.options.http_url.replace("{session}", quote(session, safe=""))  # a bot's own id may need it
        http = getattr(_local, "http", None)
        reused = http is not None  # this thread's session may hold a kept-alive connection from its last GET
        if http is None:
            http = _local.http = self._session()
        try:
            response, content = self._get(http, url)
        except _Retry as exc:
            if not reused:
                raise StoreError(f"GET {url} failed: {exc.__cause__}") from exc.__cause__
            http.close()
            http = _local.http = self._session()  # a fresh connection
            try:
                response, content = self._get(http, url)
            except _Retry as again:
                raise StoreError(f"GET {url} failed: {again.__cause__}") from again.__cause__
        if response.status_code in (404, 410):
            return RawSession(session, url, False, None, [], "none")
        if response.status_code >= 400:
            raise StoreError(f"GET {url} answered HTTP {response.status_code}: {response.text[:200]!r}")
        try:
            body = response.json()
        except ValueError:
            return RawSession(session, url, True, None, [content], "string")
        messages = message_list(body, self.options.messages_field)
        if messages is None:
            return RawSession(session, url, True, None, [content], "string")
        return RawSession(session, url, True, None, list(messages), "http")

    def _get(self, http: requests.Session, url: str) -> tuple[requests.Response, bytes]:
        """GET ``url`` within the deadline, its body read whole up to the cap; _Retry when the connection was
        closed before any byte of the reply, StoreError for everything else."""
        slot = _local.slot = _Slot(time.monotonic() + REQUEST_DEADLINE_S)
        watchdog = self.watchdog
        if watchdog is not None:
            watchdog.add(slot)
        try:
            try:
                response = http.get(url, timeout=self.options.timeout_s, stream=True)
            except requests.RequestException as exc:
                self._late(slot, url, exc)
                if _stale(exc):
                    raise _Retry() from exc
                raise StoreError(f"GET {url} failed: {exc}") from exc
            try:
                content = self._body(response, slot)
            except _TooLarge:
                raise StoreError(f"GET {url}: the history is larger than {MAX_HISTORY_BYTES:,} bytes, the most one "
                                 f"session's history may be (MAX_HISTORY_BYTES in oracle/http_reader.py); the server "
                                 "sends more than a history, or never ends its reply") from None
            except (requests.RequestException, OSError) as exc:
                self._late(slot, url, exc)
                raise StoreError(f"GET {url} failed while its reply was read: {exc}") from exc
            finally:
                response.close()
            response._content, response._content_consumed = content, True  # .json() / .text read it
            return response, content
        finally:
            _local.slot = None
            if watchdog is not None:
                watchdog.remove(slot)

    @staticmethod
    def _body(response: requests.Response, slot: _Slot) -> bytes:
        length = response.headers.get("Content-Length", "")
        if length.strip().isdigit() and int(length) > MAX_HISTORY_BYTES and "gzip" not in \
                response.headers.get("Content-Encoding", ""):
            raise _TooLarge()
        parts, size = [], 0
        for part in response.iter_content(_CHUNK):
            size += len(part)
            if size > MAX_HISTORY_BYTES:
                raise _TooLarge()
            if slot.deadline <= time.monotonic():
                slot.expired = True
                raise OSError("deadline passed")
            parts.append(part)
        return b"".join(parts)

    @staticmethod
    def _late(slot: _Slot, url: str, exc: BaseException) -> None:
        """StoreError when the GET outlived its deadline (the watchdog shut its socket) or the read was stopped."""
        if slot.aborted:
            raise StoreError(f"GET {url}: stopped (the read was interrupted)") from exc
        if slot.expired:
            raise StoreError(f"GET {url} did not finish within {REQUEST_DEADLINE_S:g}s (REQUEST_DEADLINE_S in "
                             "oracle/http_reader.py): the server sends its reply too slowly, or never ends it") from exc

    def foreign(self, owned) -> Iterable[dict]:
        return ()  # an HTTP endpoint cannot be listed

    def check(self) -> None:
        pass


class _Retry(Exception):
    """The GET's connection was closed or reset before any byte of the reply (``__cause__``: how)."""
