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

A reply that says it is one page of more is followed when it names its next page's URL (a next URL in the
document, a ``Link: rel="next"`` header: on the same server, at most ``MAX_PAGES``, the pages' messages joined in
the order read, or in reverse page order when the pages' goldfish tokens show them going newest to oldest: see
``_join``), else refused (TemplateMismatch: exit 2, nothing judged) naming what said so (has_more: true, a
cursor): a partial history judged would be every other page's turns lost. So is a 401/403 (the API refused the
GET: how to authenticate it), which is no failure of the store.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.client import RemoteDisconnected
from typing import Iterable, Iterator
from urllib.parse import quote, urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from contracts import redact
from contracts.tokens import TOKEN_RE
from contracts.jsonl import LINE_BYTES
from oracle.decode import get_path, message_list
from oracle.keys import TemplateMismatch
from oracle.store import RawSession, StoreError, StoreOptions, batches

REQUEST_DEADLINE_S = 120.0            # one history GET, connect to last byte (a socket timeout is per read)
# one session's history, as decoded (a gzip body counts unpacked): half the longest snapshot line (contracts/jsonl.py
# LINE_BYTES, 64 MB), as the snapshot holds the whole history on one line, escaped or base64; 8 GETs at once stay
# within half a gigabyte
MAX_HISTORY_BYTES = LINE_BYTES // 2
MAX_PAGES = 1000                      # pages of one session's history followed by their next URL
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


# How a history API says a reply is one page of more (docs/oracle.md "Readers"). Looked for in the document, in the
# object holding the message list (--messages-field a.b: a) and in their paging objects below.
_PAGING_OBJECTS = ("pagination", "paging", "meta", "page_info", "pageInfo", "response_metadata", "links", "_links")
# true: more pages (OpenAI, Anthropic, Dify, Notion: has_more; GraphQL: hasNextPage); false: this is the last page,
# whatever else the document holds (OpenAI's last_id is there on the last page too)
_FLAGS = ("has_more", "hasMore", "has_next", "hasNext", "has_next_page", "hasNextPage")
# the next page's URL (Django REST framework, Laravel, Azure/OData, JSON:API links.next, HAL _links.next.href,
# Facebook paging.next), absolute or relative to the page's: followed, on the same server only
_NEXT_URLS = ("next", "next_url", "nextUrl", "next_page_url", "nextPageUrl", "next_link", "nextLink", "@odata.nextLink")
# a token only the API knows where to put (Slack, Notion, Google: a cursor or page token): not followed
_CURSORS = ("next_cursor", "nextCursor", "next_page_token", "nextPageToken", "next_token", "nextToken",
            "continuation_token", "continuationToken")
_URL_STARTS = ("http://", "https://", "/", "?", "./", "../")
_AGAIN = ("; ask the API for the whole history in one reply (a page size in --http-url, e.g. ?limit=1000, if it "
          "takes one), or read the store itself with --store-url or --reader (docs/oracle.md \"Readers\"). Judged "
          "as it is, every message on the other pages would be a turn the store lost; nothing was judged")


def _more(document, messages_field: str, response: requests.Response) -> tuple[str | None, str | None]:
    """Whether a history reply is a page of more: (the next page's URL or None, what says so), (None, None) when it
    is the whole history (or its last page). A ``Link: <...>; rel="next"`` header is followed; in the document, a
    false has_more (or its kin) ends the history, a next-page URL is followed, and a true flag, a cursor or a next
    that is no URL (a page number, a token) is a page of more that cannot be followed."""
    link = (response.links or {}).get("next", {}).get("url") if response.headers.get("Link") else None
    if link:
        return link, 'a Link: rel="next" header'
    if not isinstance(document, dict):
        return None, None
    holders, parent = [("", document)], messages_field.rpartition(".")[0]
    found = get_path(document, parent) if parent else None
    if isinstance(found, dict) and found is not document:
        holders.append((parent + ".", found))
    for prefix, holder in list(holders):
        holders += [(f"{prefix}{name}.", holder[name]) for name in _PAGING_OBJECTS if isinstance(holder.get(name), dict)]
    flags = [(f"{prefix}{name}", holder[name]) for prefix, holder in holders for name in _FLAGS
             if isinstance(holder.get(name), bool)]
    if flags and not any(value for _, value in flags):
        return None, None  # the last page says so
    urls, tokens = [], []
    for prefix, holder in holders:
        for name in _NEXT_URLS:
            value = holder.get(name)
            if isinstance(value, dict) and isinstance(value.get("href"), str):  # HAL: _links.next.href
                value, name = value["href"], name + ".href"
            if isinstance(value, str) and value.strip().startswith(_URL_STARTS):
                urls.append((f"{prefix}{name}", value.strip()))
            elif value not in (None, "", False, [], {}):  # a page number, a token, true
                tokens.append((f"{prefix}{name}", value))
        tokens += [(f"{prefix}{name}", holder[name]) for name in _CURSORS if holder.get(name) not in (None, "", False)]
    if urls:
        name, value = urls[0]
        return value, f"{name}: {value[:120]!r}"
    said = [f"{name}: {str(value).lower() if isinstance(value, bool) else repr(value)[:80]}"
            for name, value in [*[(n, v) for n, v in flags if v], *tokens]]
    return (None, ", ".join(said)) if said else (None, None)


def _unread(url: str, page: int, said: str, document, why: str) -> str:
    """Why a paged history cannot be read whole (for TemplateMismatch)."""
    limit = next((f"; it answered {name}: {document[name]!r}" for name in ("limit", "page_size", "pageSize", "per_page")
                  if isinstance(document, dict) and isinstance(document.get(name), int)
                  and not isinstance(document.get(name), bool)), "")
    return (f"GET {redact.url(url)}: the history API answered page {page} of more ({said}{limit}){why}: goldfish "
            "reads one response per session, following only a next page's URL the response gives (a next URL in the "
            'document, or a Link: rel="next" header), never a cursor or a page number it would have to put in a '
            "parameter of its own guessing")


_LOOPBACK = ("localhost", "::1")  # with 127.x.x.x: one host, this machine (as oracle/keys.py's _same_store counts it)


def _host(name: str | None) -> str:
    host = (name or "").lower().rstrip(".")
    return "loopback" if host in _LOOPBACK or host.startswith("127.") else host


def _same_origin(a: str, b: str) -> bool:
    """The same scheme, host and port (a next page on another server is not followed: --http-url's credentials
    would go there); localhost, 127.x.x.x and ::1 are one host, this machine."""
    try:
        x, y = urlsplit(a), urlsplit(b)
        ports = {"http": 80, "https": 443}
        return (x.scheme, _host(x.hostname), x.port or ports.get(x.scheme)) == \
            (y.scheme, _host(y.hostname), y.port or ports.get(y.scheme))
    except ValueError:
        return False


def _turn(message) -> int | None:
    """The turn index of the first goldfish token in a message (a user message starts with its own, [gf..tN]), or
    None when it carries none."""
    if isinstance(message, (bytes, bytearray)):
        text = message.decode("utf-8", "replace")
    elif isinstance(message, str):
        text = message
    else:
        try:
            text = json.dumps(message, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = str(message)
    found = TOKEN_RE.search(text)
    return int(found.group(2)) if found else None


def _join(pages: list[list]) -> list:
    """One history from its pages, oldest first. In the order read, unless the pages' goldfish tokens show the API
    paging newest to oldest ("load older": page 1 the newest messages, each page oldest first inside, as Slack,
    Discord and Telegram do): then in reverse page order. Only whole pages are moved, never a message inside one,
    so a store's own reordering stays for the audit to judge. Reversed only when each page with tokens starts and
    ends with turns no later than the page with tokens read before it, not both the same (a turn split by a page
    boundary may be on both pages, and so may the turns of a burst stored out of order), and the pages run oldest
    first inside at least as often as newest first (a history newest first throughout is left as read, for the
    audit to name it); pages that cannot be ordered (fewer than two with tokens, or turns that interleave) stay as
    read."""
    turns = [[t for t in map(_turn, page) if t is not None] for page in pages]
    ranges = [(min(t), max(t)) for t in turns if t]
    descending = len(ranges) >= 2 and all(
        later[0] <= before[0] and later[1] <= before[1] and later != before
        for before, later in zip(ranges, ranges[1:]))
    inside = [(a, b) for t in turns for a, b in zip(t, t[1:])]
    if descending and sum(a < b for a, b in inside) >= sum(a > b for a, b in inside):
        pages = pages[::-1]
    return [m for page in pages for m in page]


class _TooLarge(Exception):
    pass


class HttpReader:
    def __init__(self, options: StoreOptions, workers: int = 8):
        self.options = options
        self.workers = workers
        self.watchdog: _Watchdog | None = None

    def _session(self) -> requests.Session:
        session = requests.Session()
        session.headers.update(dict(self.options.http_headers))  # --http-header: the history API's credentials
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
        response, content = self._fetch(url)
        if response.status_code in (404, 410):
            return RawSession(session, url, False, None, [], "none")
        self._answered(response, url, f"GET {url}")
        try:
            body = response.json()
        except ValueError:
            return RawSession(session, url, True, None, [content], "string")
        messages = message_list(body, self.options.messages_field)
        if messages is None:
            return RawSession(session, url, True, None, [content], "string")
        pages = [list(messages)]
        page, size, seen = 1, len(content), {url}
        while True:
            after, said = _more(body, self.options.messages_field, response)
            if said is None:
                return RawSession(session, url, True, None, _join(pages), "http")
            if after is None:  # more, but only a cursor or a flag: which parameter takes it would be a guess
                raise TemplateMismatch(_unread(url, page, said, body, "") + _AGAIN)
            target = urljoin(response.url or url, after)
            if not _same_origin(target, url):
                raise TemplateMismatch(_unread(url, page, said, body, f": its next page is on another server "
                                                                      f"({redact.url(target)})") + _AGAIN)
            if target in seen:
                raise StoreError(f"GET {url}: page {page} of its history names as the next page "
                                 f"{redact.url(target)}, a page already read: the API's paging goes round in a circle")
            if page >= MAX_PAGES:
                raise StoreError(f"GET {url}: its history has more than {MAX_PAGES:,} pages (MAX_PAGES in "
                                 "oracle/http_reader.py): the API never says it is done, or its pages are tiny; ask "
                                 "it for bigger pages in --http-url (e.g. ?limit=1000)")
            seen.add(target)
            page += 1
            response, content = self._fetch(target)
            size += len(content)
            if size > MAX_HISTORY_BYTES:
                raise StoreError(f"GET {url}: the history, {page} pages so far, is larger than {MAX_HISTORY_BYTES:,} "
                                 "bytes, the most one session's history may be (MAX_HISTORY_BYTES in "
                                 "oracle/http_reader.py)")
            where = f"GET {redact.url(target)} (page {page} of {url}'s history)"
            self._answered(response, target, where)
            try:
                body = response.json()
            except ValueError:
                raise StoreError(f"{where} is not JSON: {content[:200]!r}") from None
            more = message_list(body, self.options.messages_field)
            if more is None:
                raise StoreError(f"{where} holds no message list at --messages-field "
                                 f"{self.options.messages_field!r}: {content[:200]!r}")
            pages.append(list(more))

    def _fetch(self, url: str) -> tuple[requests.Response, bytes]:
        """GET ``url`` on this thread's session, which may hold a kept-alive connection from its last GET; sent once
        more on a fresh connection when the server had closed that one."""
        http = getattr(_local, "http", None)
        reused = http is not None
        if http is None:
            http = _local.http = self._session()
        try:
            return self._get(http, url)
        except _Retry as exc:
            if not reused:
                raise StoreError(f"GET {url} failed: {exc.__cause__}") from exc.__cause__
            http.close()
            http = _local.http = self._session()  # a fresh connection
            try:
                return self._get(http, url)
            except _Retry as again:
                raise StoreError(f"GET {url} failed: {again.__cause__}") from again.__cause__

    def _answered(self, response: requests.Response, url: str, where: str) -> None:
        """TemplateMismatch when the API refused the GET (``_refused``), StoreError for any other error status."""
        self._refused(response, url)
        if response.status_code >= 400:
            raise StoreError(f"{where} answered HTTP {response.status_code}: {response.text[:200]!r}")

    def _refused(self, response: requests.Response, url: str) -> None:
        """TemplateMismatch (exit 2, nothing judged) when the history API refuses the GET (401/403): the options
        cannot read it, which is no failure of the store."""
        status = response.status_code
        if status not in (401, 403, 407):
            return
        challenge = response.headers.get("WWW-Authenticate" if status != 407 else "Proxy-Authenticate", "")
        said = f"HTTP {status} {response.reason or ''}".rstrip() + (f", {challenge.split(' ', 1)[0]} asked" if
                                                                   challenge else "")
        body = response.text[:200]
        head = f"GET {redact.url(url)} answered {said} ({body!r}): the history API refused goldfish's request"
        if status == 407:
            raise TemplateMismatch(f"{head}: a proxy between goldfish and the API asks for credentials (set them in "
                                   "HTTP_PROXY / HTTPS_PROXY, http://user:password@proxy:port, or NO_PROXY for the API's "
                                   "host); nothing was judged")
        sent = getattr(getattr(response, "request", None), "headers", {}) or {}
        if "Authorization" in sent:
            raise TemplateMismatch(f"{head} with the credentials it sent (an Authorization header): they are not the "
                                   "ones it takes (a wrong or expired token or password, or a user not allowed to read "
                                   "these histories); nothing was judged")
        raise TemplateMismatch(
            f"{head}, which carried no credentials: --http-url sends no header of the chat's (--header reaches the "
            f"chat only), so a history API behind the chat's token refuses it. Authenticate the GET: --http-header 'Authorization: Bearer TOKEN' (the chat's own header), Basic "
            "credentials in --http-url (user:password@ before its host) or in ~/.netrc, or let the tester read the history "
            "endpoint without them; or read the store itself with --store-url or --reader (docs/oracle.md "
            "\"Readers\"); nothing was judged")

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
                raise StoreError(f"GET {url} failed: {exc}{_tls_hint(exc)}") from exc
            if response.headers.get("Content-Type", "").split(";")[0].strip().lower() == "text/event-stream":
                response.close()  # an event stream never ends: its keep-alives held the audit to the deadline
                raise StoreError(f"GET {url} answered an event stream (Content-Type text/event-stream), not a history: "
                                 "--http-url names the endpoint that lists a session's stored messages (JSON), not "
                                 "the bot's stream of replies")
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


def _tls_hint(exc: requests.RequestException) -> str:
    """What a certificate refused means here: Locust's client does not check certificates, so a staging bot with a
    self-signed one took the whole load and only the audit's GETs refused it (input hunt 13, m11)."""
    if isinstance(exc, requests.exceptions.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return (" (the server's certificate is not one this machine trusts, a self-signed staging certificate? "
                "Locust's turns do not check it, the audit's reads do: name its CA file in REQUESTS_CA_BUNDLE)")
    return ""


class _Retry(Exception):
    """The GET's connection was closed or reset before any byte of the reply (``__cause__``: how)."""
