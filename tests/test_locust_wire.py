"""ChatUser's request path against Locust's own: the same bytes on the wire, the same outcomes.

A turn does not go through ``FastHttpSession.request`` (catch_response, per-request wrapper)
nor, while nothing needs it, through ``UserAgent.urlopen`` (docs/locust.md "Performance"). These
tests pin what that path must keep equal to Locust's, against a real raw HTTP server on loopback
that records every request it gets and answers what each test tells it to: the request head and
body, cookies, redirects, bad statuses, timeouts, refused and dropped connections. They also pin
the Locust internals the path relies on (the headers FastHttpSession adds, its base-URL join).

Locust must be imported before anything imports ssl (it monkey-patches at import), and pytest's
plugins import ssl first; so the checks run in a fresh interpreter that patches first, started by
the one test pytest collects here: ``test_request_path_matches_locusts``.
"""
from __future__ import annotations

import json
import os
import socket
import struct

import pytest

from support_locust import run_patched

INNER = os.environ.get("GOLDFISH_WIRE_CHECKS") == "1"
if INNER:
    import gevent
    from gevent.server import StreamServer

    from locustfiles.conversation import ChatUser, locust_headers
    from locustfiles.outcome import judge_response


def test_request_path_matches_locusts():
    if INNER:
        pytest.skip("this is the inner run")
    run_patched(__file__, "GOLDFISH_WIRE_CHECKS")


# ---- a raw HTTP server that records requests and answers from a script -----------------------
class RawServer:
    """Answers each request with ``handler(path, head, body)`` -> bytes to send, or "close" (close
    without a response), "reset" (RST), "hang" (never answer). Keeps every raw request."""

    def __init__(self, handler):
        self.handler, self.requests, self.connections = handler, [], 0
        self.server = StreamServer(("127.0.0.1", 0), self._serve)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _serve(self, sock, _addr):
        self.connections += 1
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buf) < length:
                buf += sock.recv(65536)
            body, buf = buf[:length], buf[length:]
            self.requests.append((head, body))
            path = head.split(b" ")[1].decode()
            answer = self.handler(path, head, body)
            if answer == "close":
                sock.close()
                return
            if answer == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
                return
            if answer == "hang":
                gevent.sleep(30)
                return
            sock.sendall(answer)

    def stop(self):
        self.server.stop(timeout=0)


def response(status: str = "200 OK", body: bytes = b'{"reply": "Noted."}', headers=()) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@pytest.fixture
def raw_server():
    servers = []

    def start(handler):
        server = RawServer(handler)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def make_user(host: str, *args: str, timeout: float = 5.0) -> ChatUser:
    """A ChatUser in this process, with goldfish's options parsed as Locust would (no journal)."""
    from locust import events
    from locust.argument_parser import get_parser
    from locust.env import Environment

    from locustfiles import hooks  # noqa: F401 - registers goldfish's options
    from locustfiles.options import Settings
    from locustfiles.runtime import Runtime

    options = get_parser().parse_args(["--timeout", str(timeout), *args])
    user_class = type("WireUser", (ChatUser,), {"host": host})
    env = Environment(user_classes=[user_class], host=host, events=events)
    env.goldfish = Runtime.from_settings(Settings.from_options(options))
    return user_class(env)


def send(user: ChatUser, lean: bool, session: str = "gf0123456789abcdef", message: str = "[gf0123456789abcdeft0] hi"):
    """One turn's request through the lean path or through urlopen:
    (status, outcome, reply, error text, type of the error urlopen would raise)."""
    user._lean = lean
    wire = user.wire()
    payload, headers = wire.request(session, message)
    url, uri = wire.target(session)
    _resp, status, content, error = user.send(wire, url, uri, payload, headers)
    return (status,) + judge_response(status, content, error, user.rt.contract) + (type(error).__name__,)


def heads(server: RawServer) -> list[list[bytes]]:
    return [head.split(b"\r\n") for head, _body in server.requests]


# ---- Locust internals the path relies on -----------------------------------------------------
@pytest.mark.parametrize("given", [None, {"Authorization": "Bearer x", "X-Tenant": "t"},
                                   {"content-type": "text/plain", "ACCEPT": "*/*"}, {"Accept-Encoding": "identity"}])
@pytest.mark.parametrize("host", ["http://127.0.0.1:9", "http://user:p%40ss@127.0.0.1:9"])
def test_locust_headers_are_the_headers_fasthttpsession_sends(given, host):
    from locust.contrib.fasthttp import FastHttpSession

    seen = {}

    class Sent(Exception):
        pass

    def capture(method, url, **kw):
        seen.update(kw, url=url)
        raise Sent

    session = FastHttpSession(host, request_event=None, user=None)
    session._send_request_safe_mode = capture
    with pytest.raises(Sent):
        session.request("POST", "/chat", json={"a": 1}, headers=dict(given) if given else None)
    assert seen["headers"] == locust_headers(given, session.auth_header)
    assert list(seen["headers"]) == list(locust_headers(given, session.auth_header))  # same order
    assert seen["url"] == session._build_url("/chat")


# ---- the same bytes on the wire --------------------------------------------------------------
def test_lean_path_sends_the_request_urlopen_sends_and_locust_post_sends(raw_server):
    server = raw_server(lambda path, head, body: response())
    user = make_user(server.url)
    assert send(user, lean=True) == send(user, lean=False) == (200, "ok", "Noted.", None, "NoneType")
    user.client.post("/chat", json={"session_id": "gf0123456789abcdef", "message": "[gf0123456789abcdeft0] hi"})
    (lean_head, lean_body), (urlopen_head, urlopen_body), (locust_head, locust_body) = server.requests
    assert lean_head == urlopen_head and lean_body == urlopen_body  # byte for byte
    # Locust's own post: same request line and headers, the same JSON (its encoder adds spaces)
    strip = lambda head: [h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length")]  # noqa: E731
    assert strip(lean_head) == strip(locust_head)
    assert json.loads(lean_body) == json.loads(locust_body)
    assert b"Content-Type: application/json" in lean_head.split(b"\r\n")


def test_contract_with_headers_and_credentials_in_the_host_sends_what_locust_sends(raw_server):
    server = raw_server(lambda path, head, body: response(body=b'{"data": {"text": "yo"}}'))
    host = server.url.replace("http://", "http://me:s%3Acret@")
    user = make_user(host, "--chat-path", "/v2/chat?x=1", "--message-field", "input.text", "--session-header",
                     "X-Conv", "--header", "X-Tenant: t", "--header", "Authorization: Bearer mine",
                     "--reply-field", "data.text")
    assert send(user, lean=True) == send(user, lean=False) == (200, "ok", "yo", None, "NoneType")
    user.client.post("/v2/chat?x=1", json={"input": {"text": "[gf0123456789abcdeft0] hi"}},
                     headers={"X-Tenant": "t", "Authorization": "Bearer mine", "X-Conv": "gf0123456789abcdef"})
    (lean_head, lean_body), (urlopen_head, urlopen_body), (locust_head, _) = server.requests
    assert lean_head == urlopen_head and lean_body == urlopen_body
    strip = lambda head: [h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length")]  # noqa: E731
    assert strip(lean_head) == strip(locust_head)
    assert lean_head.startswith(b"POST /v2/chat?x=1 HTTP/1.1")


def test_a_form_body_is_sent_as_locust_sends_a_data_dict(raw_server):
    server = raw_server(lambda path, head, body: response())
    user = make_user(server.url, "--body-format", "form", "--body", '{"lang": "en"}')
    assert send(user, lean=True) == send(user, lean=False) == (200, "ok", "Noted.", None, "NoneType")
    user.client.post("/chat", data={"lang": "en", "message": "[gf0123456789abcdeft0] hi",
                                    "session_id": "gf0123456789abcdef"})
    (lean_head, lean_body), (urlopen_head, urlopen_body), (locust_head, locust_body) = server.requests
    assert lean_head == urlopen_head and lean_body == urlopen_body
    assert lean_body == locust_body == b"lang=en&message=%5Bgf0123456789abcdeft0%5D+hi&session_id=gf0123456789abcdef"
    lower = lambda head: sorted(h.lower() for h in head.split(b"\r\n")[1:])  # noqa: E731 - its names are lower case
    assert lower(lean_head) == lower(locust_head)


def test_a_get_turn_is_sent_as_locust_sends_a_get(raw_server):
    server = raw_server(lambda path, head, body: response())
    user = make_user(server.url, "--chat-method", "GET", "--chat-path", "/get?v=1", "--message-field", "msg")
    wire = user.wire()
    payload, headers = wire.request("gf0123456789abcdef", "[gf0123456789abcdeft0] hi")
    url = wire.with_query(wire.target("gf0123456789abcdef")[0], payload)
    assert user.send(wire, url, "", None, headers)[1] == 200
    user.client.get("/get?v=1&session_id=gf0123456789abcdef&msg=%5Bgf0123456789abcdeft0%5D+hi")
    (ours, our_body), (locusts, _) = server.requests
    assert ours == locusts and our_body == b""
    assert ours.startswith(b"GET /get?v=1&session_id=gf0123456789abcdef&msg=%5Bgf0123456789abcdeft0%5D+hi HTTP/1.1")


def test_session_in_the_path_and_query_is_sent_as_locust_sends_it(raw_server):
    server = raw_server(lambda path, head, body: response())
    user = make_user(server.url, "--chat-path", "/v1/chats/{session}/messages?conversation={session}",
                     "--session-field", "")
    assert send(user, lean=True) == send(user, lean=False) == (200, "ok", "Noted.", None, "NoneType")
    assert send(user, lean=True, session="gffedcba9876543210")[1] == "ok"
    user.client.post("/v1/chats/gf0123456789abcdef/messages?conversation=gf0123456789abcdef",
                     json={"message": "[gf0123456789abcdeft0] hi"})
    (lean_head, lean_body), (urlopen_head, urlopen_body), (other_head, _), (locust_head, _) = server.requests
    assert lean_head == urlopen_head and lean_body == urlopen_body
    assert json.loads(lean_body) == {"message": "[gf0123456789abcdeft0] hi"}  # not in the body
    strip = lambda head: [h for h in head.split(b"\r\n") if not h.lower().startswith(b"content-length")]  # noqa: E731
    assert strip(lean_head) == strip(locust_head)
    assert lean_head.startswith(b"POST /v1/chats/gf0123456789abcdef/messages?conversation=gf0123456789abcdef ")
    assert other_head.startswith(b"POST /v1/chats/gffedcba9876543210/messages?conversation=gffedcba9876543210 ")


def chunked(*chunks: bytes, content_type: str = "text/event-stream") -> bytes:
    """A streamed response: chunked transfer encoding, one chunk per piece."""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def test_streamed_replies_are_read_whole_and_put_together(raw_server):
    openai = [b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
              b'data: {"choices":[{"delta":{"content":"Your pin "}}]}\n\n',
              b'data: {"choices":[{"delta":{"content":"is 1234-ABCD."}}]}\n\n',
              b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"]
    server = raw_server(lambda path, head, body: chunked(*openai))
    user = make_user(server.url, "--reply-format", "sse", "--reply-field", "choices.0.delta.content",
                     "--body", '{"model": "m", "stream": true}', "--message-field", "messages.0.content")
    assert send(user, lean=True) == send(user, lean=False) == (200, "ok", "Your pin is 1234-ABCD.", None, "NoneType")
    head, body = server.requests[0]
    assert b"Accept: text/event-stream" in head.split(b"\r\n")
    assert json.loads(body) == {"model": "m", "stream": True, "messages": [{"content": "[gf0123456789abcdeft0] hi"}],
                                "session_id": "gf0123456789abcdef"}
    lines = [b'{"message":{"content":"Noted"},"done":false}\n', b'{"message":{"content":"."},"done":true}\n']
    server = raw_server(lambda path, head, body: chunked(*lines, content_type="application/x-ndjson"))
    user = make_user(server.url, "--reply-format", "ndjson", "--reply-field", "message.content")
    assert send(user, lean=True) == (200, "ok", "Noted.", None, "NoneType")
    server = raw_server(lambda path, head, body: chunked(b"Noted", b", thanks.", content_type="text/plain"))
    user = make_user(server.url, "--reply-format", "text")
    assert send(user, lean=True) == (200, "ok", "Noted, thanks.", None, "NoneType")


def test_headers_template_is_never_written_into_by_any_path(raw_server):
    """The 422 regression at unit level: every path, also the error ones, leaves the template alone."""
    answers = iter(["close", "reset", response("503 Service Unavailable", b"busy"), response()])
    server = raw_server(lambda path, head, body: next(answers))
    user = make_user(server.url)
    wire = user.wire()
    template = dict(wire.headers)
    results = [send(user, lean=True) for _ in range(4)]
    assert [r[1] for r in results] == ["info", "info", "info", "ok"], results
    assert wire.headers == template
    user._lean = False
    refused = make_user("http://127.0.0.1:9")
    for lean in (True, False):
        assert send(refused, lean)[1:] == ("fail", None, "connection refused", "ConnectionRefusedError")
    assert refused.wire().headers == template
    assert all(b"Content-Type: application/json" in h for h, _ in server.requests)


def test_urlopen_never_retries_a_post(raw_server):
    """The lean path's premise: it never retries, because urlopen never retries a POST. True since
    geventhttpclient 2.6; 2.5 (which Locust 2.47 still accepts) sent a POST again after a dropped
    connection or a timeout, hence its pin in pyproject.toml."""
    server = raw_server(lambda path, head, body: "close")
    user = make_user(server.url)
    assert send(user, lean=False)[1:3] == ("info", None)
    assert len(server.requests) == 1


def test_a_connection_idle_too_long_is_not_reused(raw_server, monkeypatch):
    """A correct bot behind uvicorn (keep-alive 5 s) failed a run at random: a burst's second connection, idle
    4.998 s, was reused just as the server closed it, and the turn failed without reaching the bot (errors: 1,
    no fault to explain it). A connection idle for MAX_IDLE_S (here shortened) is replaced, on both paths."""
    from locustfiles import conversation

    monkeypatch.setattr(conversation, "MAX_IDLE_S", 0.2)
    server = raw_server(lambda path, head, body: response())
    user = make_user(server.url)
    for lean in (True, False):
        gevent.sleep(0.3)  # the idle time under test (not a wait for something): what is pooled is stale now
        before = server.connections
        assert send(user, lean)[1] == "ok" and send(user, lean)[1] == "ok"
        assert server.connections == before + 1  # a new one for the first turn, reused back to back
        gevent.sleep(0.3)
        assert send(user, lean)[1] == "ok"
        assert server.connections == before + 2


def test_a_connection_close_header_opens_a_connection_per_turn(raw_server):
    """`--header 'Connection: close'` (docs/locust.md: a connection per turn) was sent, yet the connection was
    reused when the response did not say close: a server that closed after each response failed 3% of a correct
    bot's turns, each sent on the connection it had just closed (bot hunt 13). RFC 9112 9.6: never reused."""
    server = raw_server(lambda path, head, body: response())  # keeps the connection open: reuse would be seen
    user = make_user(server.url, "--header", "Connection: close")
    for lean in (True, False):
        before = server.connections
        assert send(user, lean)[1] == "ok" and send(user, lean)[1] == "ok"
        assert server.connections == before + 2
    assert all(b"Connection: close" in head for head, _ in server.requests)
    plain = make_user(server.url)
    before = server.connections
    assert send(plain, True)[1] == "ok" and send(plain, True)[1] == "ok"
    assert server.connections == before + 1  # without the header: one connection, reused


@pytest.mark.parametrize("reply_format, content_type, body", [
    ("text", "text/plain; charset=ISO-8859-1", "¿Señor, qué tal?".encode("latin-1")),
    ("json", "application/json; charset=windows-1252", '{"reply": "¿Señor, qué tal?"}'.encode("cp1252")),
    ("text", "text/plain; charset=utf-8", "¿Señor, qué tal?".encode()),
    # UTF-8 labelled ISO-8859-1 (PHP's default_charset): RFC 8259 says the label has no effect (API hunt 18)
    ("json", "application/json; charset=iso-8859-1", '{"reply": "¿Señor, qué tal?"}'.encode()),
    ("text", "text/plain; charset=ISO-8859-1", "¿Señor, qué tal?".encode()),
])
def test_a_reply_is_read_in_the_charset_the_bot_declares(raw_server, reply_format, content_type, body):
    """A bot answering text/plain in ISO-8859-1 was read as UTF-8, each accent replaced (so its stored replies,
    kept in the right characters, differed from the journal's and 1,560 turns were 'unanswered'); JSON declared
    as windows-1252 was 'not JSON'. The declared charset is honoured, on both paths."""
    server = raw_server(lambda path, head, b: response(body=body, headers=()).replace(
        b"Content-Type: application/json", f"Content-Type: {content_type}".encode()))
    user = make_user(server.url, "--reply-format", reply_format)
    for lean in (True, False):
        assert send(user, lean)[1:3] == ("ok", "¿Señor, qué tal?")


# ---- the same outcomes -----------------------------------------------------------------------
ANSWERS = {
    "ok": lambda: response(),
    "503": lambda: response("503 Service Unavailable", b"down"),
    "404": lambda: response("404 Not Found", b'{"detail": "no"}'),
    "not json": lambda: response(body=b"hello"),
    "no field": lambda: response(body=b'{"answer": "x"}'),
    "closed": lambda: "close",
    "reset": lambda: "reset",
    "gzip": lambda: None,  # below
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_lean_path_and_urlopen_give_the_same_outcome(raw_server, case):
    import gzip

    def handler(path, head, body):
        if case == "gzip":
            data = gzip.compress(b'{"reply": "zipped"}')
            return response(body=data, headers=("Content-Encoding: gzip",))
        return ANSWERS[case]()

    server = raw_server(handler)
    user = make_user(server.url)
    lean, urlopen = send(user, lean=True), send(user, lean=False)
    assert lean == urlopen, (lean, urlopen)


def test_timeout_is_the_same_on_both_paths(raw_server):
    server = raw_server(lambda path, head, body: "hang")
    user = make_user(server.url, timeout=0.3)
    assert send(user, lean=True) == send(user, lean=False) == (0, "info", None, "timeout", "RetriesExceeded")


def test_a_cookie_set_by_the_bot_is_sent_back_on_later_turns(raw_server):
    server = raw_server(lambda path, head, body: response(headers=("Set-Cookie: sticky=bot-2; Path=/",)))
    user = make_user(server.url)
    for _ in range(3):
        assert send(user, lean=True)[1] == "ok"
    cookies = [[h for h in head if h.lower().startswith(b"cookie:")] for head in heads(server)]
    assert cookies == [[], [b"Cookie: sticky=bot-2"], [b"Cookie: sticky=bot-2"]]


@pytest.mark.parametrize("code,method", [(308, b"POST"), (307, b"POST"), (302, b"GET"), (301, b"GET"), (303, b"GET")])
def test_a_redirect_is_followed_as_urlopen_follows_it(raw_server, code, method):
    def handler(path, head, body):
        if path == "/chat":
            return response(f"{code} Moved", b"", headers=("Location: /v2/chat",))
        return response(body=json.dumps({"reply": f"{head.split(b' ')[0].decode()} {len(body)}"}).encode())

    server = raw_server(handler)
    lean_user, urlopen_user = make_user(server.url), make_user(server.url)
    lean = send(lean_user, lean=True)
    after_lean = len(server.requests)
    urlopen = send(urlopen_user, lean=False)
    assert lean == urlopen and lean[1] == "ok", (lean, urlopen)
    assert lean[2].startswith(method.decode())
    # the two paths asked the server for the same things, in the same way
    first, second = server.requests[:after_lean], server.requests[after_lean:]
    assert [(h, b) for h, b in first] == [(h, b) for h, b in second]
    assert not lean_user._lean  # a redirecting bot: urlopen from then on
    before = len(server.requests)
    assert send(lean_user, lean=lean_user._lean) == lean  # through urlopen now: the same again
    assert [h.split(b" ")[:2] for h, _ in server.requests[before:]] == [[b"POST", b"/chat"], [method, b"/v2/chat"]]


def test_cookies_from_a_redirect_response_are_kept(raw_server):
    def handler(path, head, body):
        if path == "/chat":
            return response("307 Temporary Redirect", b"", headers=("Location: /v2/chat", "Set-Cookie: a=1; Path=/"))
        return response()

    server = raw_server(handler)
    user = make_user(server.url)
    assert send(user, lean=True)[1] == "ok"
    assert [h for h in heads(server)[1] if h.lower().startswith(b"cookie:")] == [b"Cookie: a=1"]
    assert len(user.client.client.cookiejar) == 1


def test_the_request_event_is_fired_once_per_turn_with_locusts_fields(raw_server, tmp_path):
    answers = iter([response(), response("500 Internal Server Error", b"x")])
    server = raw_server(lambda path, head, body: next(answers))
    user = make_user(server.url)
    fired = []
    user.environment.events.request.add_listener(lambda **kw: fired.append(kw))
    facts = {}
    user.turn("gf0123456789abcdef", 0, "gf0123456789abcdeft0", "chatter", "[gf0123456789abcdeft0] hi", None, None,
              facts)
    user.turn("gf0123456789abcdef", 1, "gf0123456789abcdeft1", "chatter", "[gf0123456789abcdeft1] hi", None, None,
              facts)
    assert [(e["request_type"], e["name"]) for e in fired] == [("POST", "chat chatter")] * 2
    ok, failed = fired
    assert ok["exception"] is None and ok["response_length"] == len(b'{"reply": "Noted."}')
    assert repr(failed["exception"]) == "CatchResponseError('HTTP 500')"
    for event in fired:
        assert set(event) == {"request_type", "name", "response_time", "response_length", "exception", "context",
                              "response", "start_time", "url"}
        assert event["url"] == f"{server.url}/chat" and event["context"] == {} and event["response_time"] > 0


if not INNER:  # collected in the fresh interpreter only (see the module docstring)
    for _name in [n for n in list(globals()) if n.startswith("test_") and n != "test_request_path_matches_locusts"]:
        del globals()[_name]
