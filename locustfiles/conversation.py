"""ChatUser: one whole scripted conversation per task iteration, every turn journaled and judged.

Each turn is a normal Locust request named ``chat <kind>`` (a handful of rows, never one per
session) that succeeds only when the outcome is ``ok``; it is the only request event a turn fires, so
Locust's totals count real HTTP turns. Whether a probe recalled its fact and whether a reply carried
another session's token or nonce (and whose) are judged here and written to the journal record, which
the web UI's goldfish tab counts live (locustfiles/live.py) and the oracle audits.

Outcomes follow Jepsen: ``ok`` 2xx with a reply; ``fail`` the request never left (connection
refused, name not resolved); ``info`` anything after which the bot may or may not have stored
the turn (timeout, reset, any non-2xx status, a 2xx without a readable reply, a turn still in
flight when the test stopped).

The request path (docs/locust.md "Performance"): a turn sends what ``self.client.post(path,
json=body)`` sends, on the same connections, but not through Locust's per-request wrapper and
``catch_response`` (the ``request`` event is fired once, by hand, with the verdict already known)
nor through ``UserAgent.urlopen`` while its cookie and redirect layers would do nothing (``send``).
tests/test_locust_wire.py checks the bytes on the wire and the outcomes against Locust's own path.
That path uses Locust and geventhttpclient internals, so pyproject.toml pins both to the range CI
tests at both ends (docs/locust.md "Why the turn path is not on Locust's public API").
"""
from __future__ import annotations

import base64
import logging
import os
import random
import zlib
from collections.abc import Callable
from http.cookiejar import DefaultCookiePolicy
from time import perf_counter, time
from urllib.parse import quote, urlencode

import gevent
from gevent import GreenletExit
from geventhttpclient.header import Headers
from geventhttpclient.url import URL
from locust import FastHttpUser, task
from locust.contrib.fasthttp import FAILURE_EXCEPTIONS, ErrorResponse, FastHttpSession, FastRequest, FastResponse
from locust.exception import CatchResponseError

from locustfiles.contract import SESSION, ChatContract, cookie_id
from contracts import codec
from contracts.codec import dumps
from contracts.journal import Turn, in_flight
from locustfiles.judge import Fact, crosstalk, planted, probe_verdict
from locustfiles.outcome import BadRedirect, as_utf8, classify_error, judge_response
from locustfiles.script import MAX_BURST
from contracts.tokens import make_token, new_nonce, new_session_id

log = logging.getLogger("goldfish")
CROSSTALK_LOG_LIMIT = 10  # per process: the first few cross-talks are logged with their source
INTERRUPTED = "interrupted: the test stopped with this turn in flight"
HUNG = "no complete reply within --timeout {:g}s: still in flight when the test stopped"  # an error, not interrupted
# A pooled connection idle longer than this is not reused: servers close idle keep-alive connections
# (gunicorn after 2 s, uvicorn and Node after 5 s), and a turn sent just as the server closes one fails
# without ever reaching the bot (geventhttpclient checks the socket first, but the close can land between
# the check and the send): a failed request no bot and no fault caused, at random (docs/locust.md).
MAX_IDLE_S = 1.0
# After a turn that got no acknowledged answer, the conversation waits before its next turn, doubling per failure
# in a row: at --think 0 it burned its turns in milliseconds while a restarted bot was down, so no conversation
# outlived a restart and a bot whose memory the restart wiped PASSed (oracle/audit.py ``unspanned``).
RETRY_WAIT_S, RETRY_WAIT_MAX_S = 0.5, 4.0
SESSION_MARK = "GOLDFISH-SESSION-ID"  # stands for {session} in a URL until a turn knows its session
REQUEST_NAMES = {kind: f"chat {kind}" for kind in ("plant", "probe", "chatter", "burst")}
POLL_EVERY_S = 0.2  # --poll-path: how often a turn's job is asked for its reply


class Frame:
    """What a WebSocket turn's reply has of an HTTP response (--websocket): no headers, no cookies."""
    headers: dict = {}
    status_code = 200


FRAME = Frame()


def socket_url(url: str) -> str:
    """The WebSocket URL of a turn's HTTP one: http -> ws, https -> wss."""
    return "ws" + url[4:] if url.startswith("http") else url
WARNED: set[str] = set()  # per process: the one-time warnings given (an echoed plant, a session cookie not kept)
# What FastHttpSession.request adds to a ``json=`` request unless the caller set it (pinned
# against Locust itself by tests/test_locust_wire.py).
LOCUST_JSON_HEADERS = (("Accept-Encoding", "gzip, deflate, br"), ("Content-Type", "application/json"),
                       ("Accept", "application/json"))
# ... and with a ``data=`` dict, which geventhttpclient form-encodes (--body-format form); and without a body
LOCUST_FORM_HEADERS = (("Accept-Encoding", "gzip, deflate, br"),
                       ("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"))
LOCUST_BODYLESS_HEADERS = (("Accept-Encoding", "gzip, deflate, br"),)


def locust_headers(headers: dict | None, auth_header: str | None, defaults: tuple = LOCUST_JSON_HEADERS) -> dict:
    """A new dict: the headers ``FastHttpSession.request`` sends with a ``json=`` body (or ``defaults``)."""
    out = dict(headers) if headers else {}
    if auth_header:  # credentials in --host
        out["Authorization"] = auth_header
    for name, value in defaults:
        if name not in out and name.lower() not in out:
            out[name] = value
    return out


def with_body(resp, status: int, error: BaseException | None = None) -> tuple:
    """(response, status, body in UTF-8, error); a body lost mid-read makes the turn indeterminate (status 0)."""
    try:
        content = resp.content
    except Exception as exc:  # noqa: BLE001 - body lost mid-read
        return resp, 0, None, exc
    return resp, status, as_utf8(content, resp.headers.get("content-type")), error


class Wire:
    """What a turn sends, worked out once per contract (the web UI or a worker's test_start may
    swap the contract between runs): the URL and the headers template. A ``{session}`` in the path
    is built with a URL-safe stand-in, which each turn replaces with its session id (``target``)."""

    def __init__(self, contract: ChatContract, client: FastHttpSession):
        self.contract = contract
        self.per_session = SESSION in contract.path
        # Locust's own base-URL join (pinned by a test)
        self.url = client._build_url(contract.path.replace(SESSION, SESSION_MARK))  # noqa: SLF001
        self.url_split = URL(self.url)
        # the request target LocustUserAgent._urlopen sends (quoted_uri since geventhttpclient 2.3.4)
        self.uri = getattr(self.url_split, "quoted_uri", self.url_split.request_uri)
        self.auth_header = client.auth_header
        self.method = "WS" if contract.websocket else contract.method  # as Locust's statistics show the turns
        self.in_query = self.method == "GET"  # the fields are the query string, form-encoded
        self.form = contract.body_format == "form" or self.in_query
        self.defaults = LOCUST_BODYLESS_HEADERS if self.in_query else LOCUST_FORM_HEADERS if self.form \
            else LOCUST_JSON_HEADERS
        self.headers = locust_headers(None, self.auth_header, self.defaults)  # no contract headers: copied per turn

    def target(self, session: str) -> tuple[str, str]:
        """(URL, request target) of a turn of ``session`` (session ids are URL-safe: contracts/tokens.py)."""
        if not self.per_session:
            return self.url, self.uri
        return self.url.replace(SESSION_MARK, session), self.uri.replace(SESSION_MARK, session)

    def with_query(self, url: str, query: bytes) -> str:
        """A GET turn's URL: its fields as the query string."""
        return url + ("&" if "?" in url else "?") + query.decode()

    def request(self, session: str | None, message: str, conversation: str | None = None) -> tuple[bytes, dict]:
        """The body (a GET's query) and a fresh headers dict (urlopen's error path writes into the dict it is
        given); ``conversation``: goldfish's own id of it (``{conversation}``)."""
        body, headers = self.contract.request(session, message, conversation)
        payload = urlencode(body).encode() if self.form else dumps(body)
        return payload, self.headers.copy() if headers is None else locust_headers(headers, self.auth_header,
                                                                                   self.defaults)


class SessionCookiePolicy(DefaultCookiePolicy):
    """The jar's policy with a session cookie (``--session-from cookie:NAME``): that cookie goes back also when
    it is ``Secure`` and the bot is on plain http (a staging host, loopback), as browsers send it to localhost;
    goldfish reads that cookie as the conversation's id and sends it back itself."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def return_ok_secure(self, cookie, request) -> bool:
        return cookie.name == self.name or super().return_ok_secure(cookie, request)


def retry_wait(failures: int) -> float:
    """Seconds a user waits after ``failures`` failed tries in a row (turns, or conversation starts)."""
    return min(RETRY_WAIT_S * 2 ** (failures - 1), RETRY_WAIT_MAX_S)


def signed_payload(value: str) -> str | None:
    """The JSON payload of a signed session cookie (itsdangerous' ``payload.timestamp.signature``, as Flask's and
    Starlette's, a leading ``.`` when compressed), shortened; None for any other value."""
    compressed, data = value.startswith("."), value.lstrip(".").split(".")[0]
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        loaded = codec.loads(zlib.decompress(raw) if compressed else raw)
    except (ValueError, zlib.error):  # codec.DecodeError is a ValueError
        return None
    return dumps(loaded).decode()[:200] if isinstance(loaded, dict) and "." in value.lstrip(".") else None


def warn_once(what: str, message: str, *args) -> None:
    if what not in WARNED:
        WARNED.add(what)
        log.warning(message, *args)


def reuse_only_fresh(client, never: Callable[[], bool] = lambda: False) -> None:
    """Make ``client`` (a geventhttpclient HTTPClient: one per host, holding the user's connections) open a
    new connection instead of reusing one idle for MAX_IDLE_S or more, or any while ``never()`` (the turns send
    `Connection: close`: a server that closed after its response without saying so failed 3% of a correct bot's
    turns, each sent on the closed connection, bot hunt 13). Its pool has no idle limit of its own, so its two
    calls are wrapped: giving a socket back stamps the time, taking one checks it."""
    pool = client._connection_pool  # noqa: SLF001 - geventhttpclient is pinned (pyproject.toml)
    alive, give_back, returned = pool._is_socket_alive, pool.return_socket, {}  # noqa: SLF001

    def return_socket(sock) -> None:
        returned[sock] = perf_counter()
        give_back(sock)

    def is_socket_alive(sock) -> bool:
        at = returned.pop(sock, None)
        return at is not None and perf_counter() - at < MAX_IDLE_S and not never() and alive(sock)

    pool.return_socket, pool._is_socket_alive = return_socket, is_socket_alive  # noqa: SLF001


class ChatUser(FastHttpUser):
    """A user who holds whole conversations from a script (``--script``), one per iteration."""

    concurrency = MAX_BURST  # connections a burst may open at once

    def __init__(self, environment):
        self.rt = environment.goldfish
        self.network_timeout = self.connection_timeout = self.rt.settings.timeout
        super().__init__(environment)
        self.user_id = f"{os.getpid()}-u{self.rt.next_user_id()}"
        self._wire: Wire | None = None
        self._lean = True  # False once the bot redirected: then every turn goes through urlopen
        self.bot_session: str | None = None  # the id the bot issued for the conversation in progress (--session-from)
        self.socket = None  # the conversation's WebSocket (--websocket): locustfiles/socket_turns.py
        self.failed_starts = 0  # conversations in a row the bot did not start (--start-path)
        reuse_only_fresh(self.client.client.clientpool.get_client(URL(self.host)),
                         lambda: self.rt.contract.closes_connections)

    def wait_time(self):
        return self.think()

    def think(self) -> float:
        low, high = self.rt.settings.think
        return low if low == high else random.uniform(low, high)

    def wire(self) -> Wire:
        wire = self._wire
        if wire is None or wire.contract is not self.rt.contract:
            wire = self._wire = Wire(self.rt.contract, self.client)
        return wire

    @task
    def conversation(self) -> None:
        if not self.rt.contract.websocket:
            return self.hold_conversation()
        from locustfiles.socket_turns import SocketTurns

        self.socket = SocketTurns(self.rt.settings.timeout, self.streamed)
        try:
            self.hold_conversation()
        finally:
            self.socket.close()
            self.socket = None

    def streamed(self, frame: bytes) -> None:
        """A WebSocket reply frame came after a turn's reply (socket_turns.py): counted in this test's tally, which
        carries it to the master (live.py) and so to run.json's ``streamed_replies``."""
        tally = getattr(self.rt.journal, "tally", None)  # None between tests
        if tally is not None:
            tally.streamed(frame)

    def hold_conversation(self) -> None:
        rt = self.rt
        session = new_session_id()
        self.bot_session = None
        jar = self.client.client.cookiejar
        # a new conversation is another person: the cookies the bot set for the last one (its session, a memory per
        # browser) are not theirs. Kept, a correct bot recalled the last person's facts here: cross-talk
        jar.clear()
        if rt.contract.session_from.startswith("cookie:") and \
                not isinstance(getattr(self, "cookie_policy", None), SessionCookiePolicy):  # once per user's jar
            self.cookie_policy = SessionCookiePolicy(rt.contract.session_source[1])
            jar.set_policy(self.cookie_policy)
        if rt.contract.start_path and not self.start_conversation(session):
            # the bot did not start a conversation: its first turn is journaled as never sent (fail); the next try
            # waits as after a failed turn (without it, ten users sent a failing start 500 times a second)
            self.failed_starts += 1
            gevent.sleep(retry_wait(self.failed_starts))
            return
        self.failed_starts = 0
        facts: dict[str, Fact] = {}  # fact -> what was planted of it (locustfiles/judge.py: planted, probe_verdict)
        turn = 0
        steps = rt.script.steps
        pause = rt.settings.think[1] > 0
        failed = 0  # turns in a row that got no acknowledged answer
        for i, step in enumerate(steps):
            kind = step.kind
            if kind == "think":
                gevent.sleep(random.uniform(*step.think))
                continue
            if kind == "burst":
                self.burst(session, turn, step.turns, facts)
                turn += step.turns
            else:
                token = make_token(session, turn)
                if kind == "plant":
                    nonce = new_nonce()
                    outcome = self.turn(session, turn, token, kind, f"[{token}] My {step.fact} is {nonce}.", step.fact,
                                        nonce, facts)
                elif kind == "probe":
                    outcome = self.turn(session, turn, token, kind, f"[{token}] What is my {step.fact}?", step.fact,
                                        None, facts)
                else:
                    outcome = self.turn(session, turn, token, kind, f"[{token}] {step.text or self.chatter_line(None)}",
                                        None, None, facts)
                turn += 1
                failed = 0 if outcome == "ok" else failed + 1
                if failed and i + 1 < len(steps):  # as a person whose message failed waits before the next one
                    gevent.sleep(retry_wait(failed))
            if pause and i + 1 < len(steps):
                gevent.sleep(self.think())

    def start_conversation(self, session: str) -> bool:
        """POST ``--start-path``: the response issues the conversation's id (``--session-from``; read as JSON).
        A normal Locust request named ``chat start``, which fails when no id comes back. Then the first turn
        is journaled as ``fail`` (definitely not applied: it never left), so the errors gate counts a bot that
        cannot start conversations as it counts one that cannot answer them."""
        contract, rt = self.rt.contract, self.rt
        sent = time()
        with self.client.post(contract.start_path, json=contract.start_request(session), name="chat start",
                              headers=contract.start_headers(session) or None, catch_response=True) as resp:
            if resp.status_code and 200 <= resp.status_code < 300:
                answer = resp.content or b""
                self.bot_session = contract.issued_session(answer, resp.headers.get, self.cookie, "json")
                error = None if self.bot_session else \
                    contract.no_session_issued(answer, resp.headers.get, self.cookie, "json")
            else:
                error = f"HTTP {resp.status_code}" if resp.status_code else classify_error(resp.error)[1]
            if error:
                resp.failure(error)
        if error and rt.journal is not None:
            first = next((step.kind for step in rt.script.steps if step.kind != "think"), "chatter")
            rt.journal.record(Turn(rt.settings.run_id, session, 0, first, make_token(session, 0), None, None, None,
                                   sent, time(), "fail", resp.status_code or None, None,
                                   f"conversation not started: {error}", None, (), rt.step, self.user_id))
        return error is None

    def burst(self, session: str, first: int, turns: int, facts: dict) -> None:
        """``turns`` turns of one session at once: one greenlet per turn, all joined. Before the bot has
        issued the session id (``--session-from``) the first goes alone: each would start a conversation."""
        if self.rt.contract.session_from and self.bot_session is None:
            token = make_token(session, first)
            self.turn(session, first, token, "burst", f"[{token}] {self.chatter_line(None)}", None, None, facts)
            first, turns = first + 1, turns - 1
        greenlets = []
        for k in range(first, first + turns):
            token = make_token(session, k)
            greenlets.append(gevent.spawn(self.turn, session, k, token, "burst", f"[{token}] {self.chatter_line(None)}",
                                          None, None, facts))
        try:
            gevent.joinall(greenlets)
        except GreenletExit:
            gevent.killall(greenlets)  # each in-flight burst turn journals itself as interrupted
            raise

    def chatter_line(self, text: str | None) -> str:
        return text or random.choice(self.rt.script.chatter)

    def turn(self, session: str, turn: int, token: str, kind: str, message: str, fact: str | None,
             nonce: str | None, facts: dict) -> str:
        """Send one turn (``message`` already carries ``token``), judge it, fire its events and
        journal it (also when interrupted); its outcome."""
        rt = self.rt
        if kind == "plant":
            rt.plants.add(nonce, session)
        elif kind == "probe" and fact in facts:
            nonce = facts[fact].latest  # journaled: the latest plant sent
        wire = self.wire()
        issued = bool(rt.contract.session_from)
        payload, headers = wire.request(self.bot_session if issued else session, message, session)
        # an id the bot issued goes into the path percent-encoded (goldfish's own are URL-safe: contracts/tokens.py)
        url, uri = wire.target(quote(self.bot_session, safe="") if issued and wire.per_session else session)
        if wire.in_query:
            url, payload = wire.with_query(url, payload), None
        sent, unpolled = time(), None
        if turn == 0 and rt.journal is not None:  # the session is journaled before its first turn leaves
            rt.journal.record(in_flight(Turn(rt.settings.run_id, session, 0, kind, token, message, fact, nonce, sent,
                                             step=rt.step, user=self.user_id, bot_session=self.bot_session)))
        start = perf_counter()
        try:
            if self.socket is not None:  # --websocket
                status, content, error = self.socket.exchange(socket_url(url), payload, headers, rt.contract,
                                                             message)
                resp = FRAME
            else:
                resp, status, content, error = self.send(wire, url, uri, payload, headers)
            if rt.contract.poll_path and 200 <= status < 300:
                resp, status, content, error, unpolled = self.poll(resp, content, self.bot_session or session, headers,
                                                                   sent)
        except GreenletExit:
            now = time()  # in flight past --timeout (a stream that never ends resets the socket's timer): a hang
            hung = now - sent > rt.settings.timeout
            self.finish(session, turn, token, kind, message, fact, nonce, sent, now, "info", None, None,
                        HUNG.format(rt.settings.timeout) if hung else INTERRUPTED, facts, 0.0)
            raise
        response_ms = (perf_counter() - start) * 1000
        received = time()
        outcome, reply, error_text = judge_response(status, content, error, rt.contract)
        if unpolled:  # --poll-path: the job gave no reply; the bot may still store the turn
            outcome, reply, error_text = "info", None, unpolled
        if issued and outcome == "ok" and self.bot_session is None:
            self.bot_session = rt.contract.issued_session(content, resp.headers.get, self.cookie) or \
                self.greeted_session(rt.contract)
            if self.bot_session is None:  # the bot stored this turn somewhere we cannot name: not acknowledged
                outcome, reply = "info", None
                error_text = rt.contract.no_session_issued(content, resp.headers.get, self.cookie)
        elif issued and outcome == "ok" and rt.contract.session_source[0] == "cookie":
            self.check_cookie(session, turn)
        elif issued and outcome == "ok" and "reissued" not in WARNED and not rt.contract.start_path:  # else the id
            # came from the start request; a turn's answer may name its own message by the same field
            self.check_reissued(rt.contract.issued_session(content, resp.headers.get, self.cookie), session, turn)
        self.environment.events.request.fire(
            request_type=wire.method, name=REQUEST_NAMES[kind], response_time=response_ms,
            response_length=len(content) if content else 0,
            exception=None if outcome == "ok" else CatchResponseError(error_text),
            context=self.context(), response=resp, start_time=sent, url=url)
        self.finish(session, turn, token, kind, message, fact, nonce, sent, received, outcome, status or None, reply,
                    error_text, facts, response_ms)
        return outcome

    def poll(self, answered, answer: bytes, session: str, headers: dict, sent: float) -> tuple:
        """A job API's turn (``--poll-path``): the turn was answered with a job; GET it every POLL_EVERY_S until
        its answer holds the reply (--reply-field) and no longer says it runs, another status comes, or --timeout
        after the turn was sent.
        Each GET is a Locust request named ``poll``. Returns the last answer as ``send`` does, and why the job
        gave no reply (None when it did): such a turn is ``info``, as the bot may still store it."""
        contract, timeout = self.rt.contract, self.rt.settings.timeout
        path = contract.poll_target(answer, session, answered.headers.get)
        if path is None:
            return answered, 200, answer, None, f"no job to poll: the turn's answer holds no value for --poll-path " \
                                                f"{contract.poll_path}"
        headers = {name: value for name, value in headers.items() if name.lower() != "content-type"}  # a GET
        while True:
            polled = self.client.get(path, headers=headers, name="poll")
            resp, status, content, error = with_body(polled, polled.status_code or 0, getattr(polled, "error", None))
            if not 200 <= status < 300 or contract.has_reply(content or b"") and contract.job_done(content):
                return resp, status, content, error, None  # the reply, or what came instead
            if time() - sent + POLL_EVERY_S > timeout:
                return resp, status, content, None, f"no reply: its job {path} had none after {timeout:g}s (--timeout)"
            gevent.sleep(POLL_EVERY_S)

    def cookie(self, name: str) -> str | None:
        """The value of the cookie ``name`` in this user's jar (the bot's session cookie), without the double
        quotes RFC 6265 allows around it, and the signature around an express-session id (``cookie_id``)."""
        jar = self.client.client.cookiejar
        value = next((c.value for c in jar if c.name == name), None) if jar is not None else None
        return cookie_id(value) if value else value

    def greeted_session(self, contract) -> str | None:
        """The id a WebSocket bot issued in a frame it sent on connect (``{"type": "session", "session_id": ...}``,
        as chat widgets do) with --session-from reply:FIELD: the replies carry none (bot hunt 15: every turn was
        'no session id issued', NOTHING MEASURED)."""
        if self.socket is None:
            return None
        return next(filter(None, (contract.issued_session(frame) for frame in self.socket.greetings)), None)

    def check_cookie(self, session: str, turn: int) -> None:
        """A later turn whose session cookie names another conversation than the first turn's: the bot started
        over (it got no cookie back, or lost the conversation); said once, with what the cookie is set with."""
        if "cookie" in WARNED:
            return
        name = self.rt.contract.session_source[1]
        value = self.cookie(name)
        if value is not None and value != self.bot_session:
            c = next(c for c in self.client.client.cookiejar if c.name == name)
            payload = signed_payload(value)
            inside = f"; it is a signed session cookie whose payload is {payload}: the id the store uses is " \
                     "probably one of its fields, which goldfish cannot read out of a signed cookie" if payload else ""
            warn_once("cookie", "--session-from cookie:%s: session %s turn %s got the cookie %s=%s, not the %s its "
                      "first turn got. Either the bot started a new conversation, or the cookie holds more than the "
                      "conversation's id (a signed session cookie, as Flask's, changes every turn)%s. The audit reads "
                      "the history of the first value; if probes pass, the conversation went on: take the id from "
                      "where it stays the same (--session-from reply:FIELD or header:NAME). The cookie is set with "
                      "Path=%s Domain=%s%s", name, session, turn, name, value, self.bot_session, inside, c.path,
                      c.domain, " Secure" if c.secure else "")

    def check_reissued(self, issued: str | None, session: str, turn: int) -> None:
        """A later turn's reply or header naming another id than the first turn's: the bot issues one per turn
        (a chain such as the Responses API's previous_response_id) or started over; said once, since every turn
        goes on under the first id and the audit reads its history (probes then fail as forgotten)."""
        if issued is not None and issued != self.bot_session:
            warn_once("reissued", "--session-from %s: session %s turn %s was issued the id %r, not the %r its first "
                      "turn was: goldfish sends every turn with the first id and the audit reads its history; a bot "
                      "that issues an id per turn (a chain of response ids) is not supported: send a conversation id "
                      "it keeps", self.rt.contract.session_from, session, turn, issued, self.bot_session)

    def send(self, wire: Wire, url: str, uri: str, payload: bytes, headers: dict) -> tuple:
        """POST one turn: (response, status (0: no HTTP response), body, error).

        What ``UserAgent.urlopen`` does for a POST, minus the layers a turn does not need while
        they would do nothing: no cookie to add (the jar is empty; a response that sets one is
        fed to the jar, and from then on this user goes through urlopen itself), no redirect (the
        first one is followed the way urlopen follows it, and this user goes through urlopen from
        then on), no retry (urlopen never retries a POST). Same client, same headers, same errors
        (urlopen's own error hooks), same response type. tests/test_locust_wire.py checks both
        paths put the same bytes on the wire and give the same outcomes."""
        ua = self.client.client
        jar = ua.cookiejar
        if not self._lean or (jar is not None and len(jar)) or wire.method != "POST":  # other methods: urlopen
            return self.send_urlopen(url, payload, headers, wire.method)
        req_headers = ua.default_headers.copy()  # a new Headers each turn, as urlopen builds it
        req_headers.update(headers)
        try:
            try:
                raw = ua.clientpool.get_client(wire.url_split).request("POST", uri, body=payload,
                                                                       headers=req_headers)
            except GreenletExit:
                raise
            except BaseException as exc:  # noqa: BLE001 - exactly urlopen's handling of a POST that failed
                raise ua._handle_retries_exceeded(url, last_error=ua._handle_error(exc, url=url))  # noqa: SLF001
            resp = FastResponse(raw, sent_request=getattr(raw, "_sent_request", None))
            if jar is not None and ("set-cookie" in resp.headers or "set-cookie2" in resp.headers):
                jar.extract_cookies(resp, FastRequest(url, method="POST", headers=req_headers, payload=payload))
            status = resp.status_code
            if status in ua.redirect_response_codes and ua.max_redirects > 0 and \
                    isinstance(resp.headers.get("location"), str):
                self._lean = False  # a redirecting bot: urlopen from now on; this turn goes on as urlopen would
                request = FastRequest(url, method="POST", headers=req_headers, payload=payload)
                resp.release()
                request.redirect(status, resp.headers.get("location"))
                return self.send_urlopen(request.url, request.payload, request.headers, request.method,
                                         ua.max_redirects - 1)
            try:
                ua._verify_status(status, url=url)  # noqa: SLF001 - Locust's accepted codes
            except Exception as exc:  # noqa: BLE001
                exc.response = resp
                raise
        except FAILURE_EXCEPTIONS as exc:
            return self.error_response(url, payload, headers, exc)
        except ValueError as exc:  # the redirect's Location (Locust's own session would raise it to the user)
            return self.error_response(url, payload, headers, BadRedirect(str(exc)))
        return with_body(resp, status)

    def send_urlopen(self, url: str, payload, headers, method: str = "POST", max_redirects: int | None = None) -> tuple:
        """The turn through ``UserAgent.urlopen`` (what FastHttpSession.request calls)."""
        try:
            resp = self.client.client.urlopen(url, method=method, headers=headers, payload=payload,
                                              max_redirects=max_redirects)
        except FAILURE_EXCEPTIONS as exc:
            return self.error_response(url, payload, headers, exc, method)
        except ValueError as exc:  # a redirect's Location urlopen cannot parse (a bad port, a broken IPv6 host)
            return self.error_response(url, payload, headers, BadRedirect(str(exc)), method)
        return with_body(resp, resp.status_code)

    @staticmethod
    def error_response(url: str, payload, headers, exc: BaseException, method: str = "POST") -> tuple:
        """What FastHttpSession makes of a failed urlopen: the response if there was one, else a
        stand-in (built on a copy of the headers: geventhttpclient's request builder writes into
        the mapping it is given, which is how a shared headers dict once turned every later turn
        into an HTTP 422)."""
        resp = getattr(exc, "response", None)
        if resp is None:
            resp = ErrorResponse(FastRequest(url, method=method, headers=Headers(headers), payload=payload), exc)
        resp.error = exc
        status = resp.status_code
        if not status:
            return resp, 0, None, exc
        return with_body(resp, status, exc)

    def finish(self, session: str, turn: int, token: str, kind: str, message: str, fact, nonce, sent: float,
               received: float, outcome: str, status, reply, error, facts: dict, response_ms: float) -> None:
        """Online judgement and the journal line; no gevent switch happens in here.

        ``facts[fact]`` is what was planted of the fact (judge.Fact). A probe accepts the latest ``ok``
        plant's value and the value of every ``info`` plant of the fact sent before it, also one sent
        before that ``ok`` plant (an indeterminate write may land at any later time); never a ``fail``
        plant's value. When no plant of the fact is certain, "I don't know" is no evidence of amnesia
        either: the verdict stays null (indeterminate). Values match in any case (judge.probe_verdict
        has the rule). The judgements go to the journal record (and from it to the web UI's goldfish
        tab), never into Locust's request totals."""
        rt = self.rt
        verdict, sources = None, []
        if kind == "plant":
            planted(facts, fact, nonce, outcome)
        if outcome == "ok":
            if kind == "probe" and nonce is not None:
                verdict = probe_verdict(facts, fact, reply)
                if verdict == "pass" and rt.contract.joins_messages and "echo" not in WARNED and \
                        f"My {fact} is {nonce}." in reply:
                    warn_once("echo", "session %s turn %s: the reply to a probe holds the user's own plant, verbatim "
                              "(%r): --reply-field %r / --reply-format %s selects more than the bot's answer, so "
                              "probes pass on the echo (the last item of a list: a negative index, history.-1.content)",
                              session, turn, f"My {fact} is {nonce}.", rt.contract.reply_field,
                              rt.contract.reply_format)
            sources = crosstalk(reply, session, rt.plants)
            if sources:
                if rt.crosstalk_logged < CROSSTALK_LOG_LIMIT:
                    rt.crosstalk_logged += 1
                    log.warning("cross-talk: session %s turn %s got a reply carrying %s", session, turn,
                                ", ".join(sources))
        if rt.journal is not None:
            rt.journal.record(Turn(rt.settings.run_id, session, turn, kind, token, message, fact, nonce, sent, received,
                                   outcome, status, reply, error, verdict, sources, rt.step, self.user_id,
                                   bot_session=self.bot_session))
