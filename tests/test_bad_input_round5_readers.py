"""Bad input, round 5, the store readers: history servers that dribble, never end or close kept-alive connections;
hash layouts with odd field names; Redis URL options redis-py refuses; a store that changes under the audit;
entries that are UTF-16; the position of a bad byte. Real servers on loopback (a raw-socket HTTP server, a real
redis-server), every wait bounded.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import free_port
from oracle import http_reader
from oracle.http_reader import HttpReader
from oracle.store import StoreError, StoreOptions

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# ---- raw-socket HTTP servers: the replies a ThreadingHTTPServer cannot give ---------------------------------------

class OddServer:
    """A history server on a free loopback port answering each connection with ``reply(conn)``; stopped by close()
    (which also ends every reply in progress)."""

    def __init__(self, reply):
        self.reply = reply
        self.port = free_port()
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.conns: list[socket.socket] = []
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/h/{{session}}"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self.conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            conn.recv(65536)
            self.reply(conn, self.stop)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def close(self):
        self.stop.set()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def odd_server():
    servers = []

    def start(reply):
        servers.append(OddServer(reply))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def dribble_body(conn, stop):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[")
    while not stop.wait(0.2):
        conn.sendall(b" ")


def dribble_headers(conn, stop):
    for ch in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100000:
        if stop.wait(0.2):
            return
        conn.sendall(bytes([ch]))


def endless_chunked(conn, stop):
    """An endless chunked body, for the test's sake ending after 48 MB (a reader with no cap reads it all)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    conn.sendall(b"1\r\n[\r\n")
    chunk = b"\"" + b"x" * 1_000_000 + b"\","
    for _ in range(48):
        if stop.is_set():
            return
        conn.sendall(hex(len(chunk))[2:].encode() + b"\r\n" + chunk + b"\r\n")
    conn.sendall(b"2\r\n0]\r\n0\r\n\r\n")


def keepalive_then_close(conn, stop):
    """A legal persistent connection that the server closes when idle: one reply per connection, no
    ``Connection: close``, the connection closed 0.2 s later (a request sent meanwhile is reset)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]")
    stop.wait(0.2)


def read_in_thread(reader, sessions, timeout):
    """reader.read(sessions) in a daemon thread: ("done", batches) / ("error", exc), or ("hung", None) after
    ``timeout`` seconds (the unfixed reader: the test fails rather than hangs)."""
    out = {}

    def run():
        try:
            out["done"] = [list(b) for b in reader.read(sessions)]
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            out["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return "hung", None
    return ("done", out["done"]) if "done" in out else ("error", out["error"])


# ---- 1. a dribbled reply: a deadline per GET ------------------------------------------------------------------------

@pytest.mark.parametrize("reply", [dribble_body, dribble_headers], ids=["body", "headers"])
def test_a_dribbled_reply_stops_the_read_at_the_deadline_naming_the_url(odd_server, monkeypatch, reply):
    """Was: hung forever (11 minutes until killed), a byte every 0.5 s never tripping the 10 s socket timeout."""
    server = odd_server(reply)
    monkeypatch.setattr(http_reader, "REQUEST_DEADLINE_S", 2.0, raising=False)
    reader = HttpReader(StoreOptions(http_url=server.url, timeout_s=5))
    started = time.monotonic()
    how, error = read_in_thread(reader, ["s1"], timeout=20)
    assert how == "error", how
    assert isinstance(error, StoreError), repr(error)
    assert "GET http://127.0.0.1:" in str(error) and "/h/s1" in str(error) and "did not finish within 2s" in str(error)
    assert time.monotonic() - started < 10


def test_sigterm_to_an_audit_reading_a_dribbling_server_exits_at_once(tmp_path, odd_server):
    """Was: SIGTERM printed "interrupted" and the process never exited (it waited for the reader's threads)."""
    from test_bad_input_round3 import journaled

    run = tmp_path / "run"
    journaled(run)
    server = odd_server(dribble_body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "oracle", "audit", str(run), "--http-url", server.url],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while server.accepted < 1 and time.monotonic() < deadline:  # the reader is waiting for the dribble
            time.sleep(0.1)
        assert server.accepted >= 1
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "interrupted" in err, err
    assert proc.returncode not in (0, 1, 3), (proc.returncode, err)


# ---- 2. an endless history: a cap per history -----------------------------------------------------------------------

def test_an_endless_chunked_history_stops_at_the_cap_naming_the_url_and_the_cap(odd_server, monkeypatch):
    """Was: read until MemoryError, exit 3 (here 48 MB read whole and taken as a history)."""
    server = odd_server(endless_chunked)
    monkeypatch.setattr(http_reader, "MAX_HISTORY_BYTES", 4_000_000, raising=False)
    reader = HttpReader(StoreOptions(http_url=server.url))
    how, error = read_in_thread(reader, ["s1"], timeout=60)
    assert how == "error", how
    assert isinstance(error, StoreError), repr(error)
    assert "/h/s1" in str(error) and "larger than 4,000,000 bytes" in str(error)
    assert http_reader.MAX_HISTORY_BYTES == 4_000_000


def test_the_history_cap_is_documented_and_fits_a_snapshot_line():
    from contracts.jsonl import LINE_BYTES

    assert http_reader.MAX_HISTORY_BYTES == 32 << 20 and 2 * http_reader.MAX_HISTORY_BYTES <= LINE_BYTES
    assert "MAX_HISTORY_BYTES" in (REPO / "docs" / "oracle.md").read_text()


# ---- 3. idle keep-alive connections closed by the server: one retry on a fresh connection ---------------------------

def test_a_server_closing_kept_alive_connections_is_read_with_one_retry(odd_server):
    """Was: "GET ... failed: ('Connection aborted.', ConnectionResetError(104, ...))", exit 2."""
    server = odd_server(keepalive_then_close)
    reader = HttpReader(StoreOptions(http_url=server.url), workers=1)
    how, batches = read_in_thread(reader, [f"s{i}" for i in range(6)], timeout=60)
    assert how == "done", (how, batches)
    raws = [raw for batch in batches for raw in batch]
    assert [r.session for r in raws] == [f"s{i}" for i in range(6)]
    assert all(r.exists and r.entries == [] for r in raws)


def test_a_server_resetting_every_new_connection_is_still_an_error(odd_server):
    """The retry is for a reused connection only: a server that resets a fresh one is not retried forever."""
    def reset(conn, stop):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    server = odd_server(reset)
    reader = HttpReader(StoreOptions(http_url=server.url), workers=1)
    how, error = read_in_thread(reader, ["s1"], timeout=30)
    assert how == "error" and isinstance(error, StoreError), (how, error)
    assert "GET http://127.0.0.1:" in str(error)


# ---- 4. hash fields that are no message position ------------------------------------------------------------------

def _hash_world(tmp_path, redis_server, odd_name: str):
    """Two sessions in numbered hashes; the first's last message stored under ``odd_name`` instead of its
    number. Returns (run, that session)."""
    from support_oracle import build_world, write_journal
    from test_store_shapes import clean_specs, numbered_hash, plain

    world = build_world(clean_specs(2), seed=13)
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = redis_server.client()
    first, second = world.order
    messages = [m for _, m in world.stored[first]]
    numbered_hash(client, first, messages[:-1])
    client.hset(f"chat:{first}", odd_name, json.dumps(plain(messages[-1])))
    numbered_hash(client, second, [m for _, m in world.stored[second]])
    return run, first


@pytest.mark.parametrize("odd_name", ["-1", "9" * 5000], ids=["minus-one", "5000-digits"])
def test_a_hash_field_that_is_no_message_position_is_a_corrupt_entry_not_a_lost_turn(tmp_path, redis_server,
                                                                                        odd_name):
    """Was: "-1" silently ignored, its stored message reported lost; 5,000 digits: a ValueError traceback, exit 3."""
    from oracle.audit import audit_run
    from support_oracle import read_findings
    from test_store_shapes import options

    run, first = _hash_world(tmp_path, redis_server, odd_name)
    audit_run(run, options(redis_server))
    findings = read_findings(run)
    corrupt = [f for f in findings if f["class"] == "corrupt"]
    assert [f["session"] for f in corrupt] == [first], findings
    assert "is no message number" in corrupt[0]["evidence"]["excerpt"], corrupt[0]
    assert odd_name[:12] in corrupt[0]["evidence"]["excerpt"]
    assert not [f for f in findings if f["class"] in ("lost", "stored_loss")], findings


def test_hash_history_orders_plain_numbers_and_sets_odd_fields_apart():
    from oracle.redis_reader import hash_history
    from oracle.store import RawSession

    raw = RawSession("s", "k", True, None)
    hash_history(raw, {b"10": b"c", b"2": b"b", b"0": b"a", b"title": b"t", b"+1": b"p"}, "messages")
    assert raw.entries[:3] == [b"a", b"b", b"c"] and len(raw.entries) == 4
    assert raw.entries[3].startswith(b"<hash field '+1' is no message number") and raw.entries[3].endswith(b" p")


# ---- 5. Redis URL options redis-py refuses; the database given twice ----------------------------------------------

@pytest.mark.parametrize("query,named", [
    ("socket_timeout=-1", "URL option socket_timeout=-1.0: must be a number of seconds above 0"),
    ("socket_connect_timeout=nan", "URL option socket_connect_timeout=nan: must be a number of seconds above 0"),
    ("unknown_opt=1", "URL option unknown_opt: not an option of redis-py's redis:// connection"),
    ("ssl_cert_reqs=none", "URL option ssl_cert_reqs: a TLS (rediss://) option"),
    ("db=5", "the database is given twice, /0 in the path and db=5 in the query: give it once"),
])
def test_a_bad_redis_url_option_is_named_not_blamed_on_the_server(tmp_path, redis_server, query, named):
    """Was: "cannot reach the store ...: it does not answer as a Redis server" (the server was fine), or, for
    /0?db=5, database 5 read without a word."""
    from test_bad_input_round3 import cli, journaled

    run = tmp_path / "run"
    journaled(run)
    done = cli("oracle", "audit", run, "--store-url", f"{redis_server.url}?{query}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr, done.stderr
    assert "does not answer as a Redis server" not in done.stderr


def test_good_url_options_and_one_database_still_pass():
    from contracts.redis_url import check_url

    for url in ["redis://h/0?db=0", "redis://h/?db=5", "redis://h/0?socket_timeout=2&health_check_interval=3",
                "rediss://h/0?ssl_cert_reqs=none", "redis+sentinel://h:1/mymaster/0?socket_timeout=2",
                "unix:///tmp/redis.sock?db=3"]:
        check_url(url)
    with pytest.raises(ValueError, match="given twice"):
        check_url("redis+sentinel://h:1,h:2/mymaster/0?db=2")


# ---- 6. the store changing under the read: a key's type, a password -----------------------------------------------

def test_a_key_flipping_type_during_the_read_is_reread_or_named(redis_server):
    """Was: "the store ... failed after 67327 sessions: ... WRONGTYPE ...; run the audit again once the store is
    back" (the store never failed: a writer switched the key between list and hash)."""
    from oracle.redis_reader import RedisReader

    client = redis_server.client()
    sessions = [f"s{i}" for i in range(30)]
    message = json.dumps({"role": "user", "content": "hi"})
    stop = threading.Event()

    def flip():
        flipper = redis_server.client()
        as_hash = False
        while not stop.is_set():
            pipe = flipper.pipeline(transaction=True)
            for s in sessions:
                pipe.delete(f"chat:{s}")
                if as_hash:
                    pipe.hset(f"chat:{s}", "0", message)
                else:
                    pipe.set(f"chat:{s}", f"[{message}]")
            pipe.execute()
            as_hash = not as_hash
    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    reader = RedisReader(StoreOptions(url=redis_server.url, key_template="chat:{session}", format="list"))
    named, read = 0, 0
    try:
        end = time.monotonic() + 4
        while time.monotonic() < end:
            try:
                for batch in reader.read(sessions):
                    read += len(batch)
            except StoreError as exc:
                assert "changed type while it was read" in str(exc) and "chat:s" in str(exc), exc
                named += 1
    finally:
        stop.set()
        thread.join(10)
        client.close()
    assert read > 0


def test_a_password_set_on_the_store_mid_read_is_said_so(redis_server):
    """Was: "failed after 60000 sessions: HELLO must be called with the client already authenticated ...; run
    the audit again once the store is back" (an authentication problem worded as an outage)."""
    from oracle.redis_reader import RedisReader

    admin = redis_server.client()
    for i in range(4):
        admin.rpush(f"chat:s{i}", json.dumps({"role": "user", "content": "hi"}))
    reader = RedisReader(StoreOptions(url=redis_server.url, key_template="chat:{session}", batch=2))
    batches = reader.read([f"s{i}" for i in range(4)])
    assert len(next(batches)) == 2
    admin.config_set("requirepass", "sesame")
    admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")  # new connections must log in
    with pytest.raises(StoreError) as caught:
        next(batches)
    assert "now requires a password" in str(caught.value) and "AUTH" in str(caught.value), caught.value
    assert "give it in the URL" in str(caught.value) and "failed" not in str(caught.value)
    admin.config_set("requirepass", "")
    admin.close()


# ---- 7. UTF-16 / UTF-32 entries are not UTF-8: corrupt ------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16", "utf-32"])
def test_utf16_or_utf32_bytes_are_a_decode_error(encoding):
    """Was: codec.loads(UTF-16 bytes) -> the object (the stdlib's json.loads(bytes) detects UTF-16/32)."""
    from contracts import codec

    with pytest.raises(codec.DecodeError, match="not UTF-8"):
        codec.loads('{"a": "x"}'.encode(encoding))
    assert codec.loads(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}  # a UTF-8 byte order mark is still skipped
    assert codec.loads(b"[NaN]")[0] != codec.loads(b"[NaN]")[0]  # the stdlib's second opinion stands


def test_a_utf16_entry_in_a_stored_list_is_corrupt(tmp_path, redis_server):
    """Was: d_list_entry_utf16, PASS with nothing observed."""
    from oracle.audit import audit_run
    from support_oracle import build_world, raw_entries, read_findings, write_journal
    from test_store_shapes import clean_specs

    world = build_world(clean_specs(2), seed=17)
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = redis_server.client()
    first = world.order[0]
    for s in world.order:
        entries = raw_entries(world, s)
        if s == first:
            entries[0] = (entries[0] if isinstance(entries[0], str) else entries[0].decode()).encode("utf-16-le")
        client.lpush(f"message_store:{s}", *entries)
    audit_run(run, StoreOptions(url=redis_server.url))
    corrupt = [f for f in read_findings(run) if f["class"] == "corrupt"]
    assert [f["session"] for f in corrupt] == [first], read_findings(run)


# ---- 8. the position of a bad byte --------------------------------------------------------------------------------

def test_a_bad_byte_is_placed_in_the_document_not_in_its_string():
    """Was: 0xFF at byte 26 of a document said "at byte 1" (or 3): the offset inside the string msgspec decoded."""
    from contracts import codec

    data = b'{"run": "r", "label": "abc\xffdef"}'
    assert data.index(b"\xff") == 26
    with pytest.raises(codec.DecodeError, match=r"not UTF-8 text \(byte 0xff at offset 26\)"):
        codec.loads(data)


def test_a_run_json_with_a_bad_byte_names_its_place(tmp_path):
    from contracts import codec

    path = tmp_path / "run.json"
    path.write_bytes(b'{"run": "x", "label": "v1\xff", "start": 1}')
    with pytest.raises(codec.DecodeError, match=r"at offset 25\)"):
        codec.load_document(path)
