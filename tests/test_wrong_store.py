"""A wrong place to read is exit 2 (nothing judged), not a FAIL of every turn: an HTTP history API that answers an
empty list for every session, and another Redis than the run's, empty (docs/oracle.md "Missing keys").

Real parts: real redis-servers on free loopback ports (tests/conftest.py), a real HTTP server on a free loopback
port for the history API, journaled runs from tests/support_oracle.py.
"""
from __future__ import annotations

import dataclasses
import json
import time
from http.server import BaseHTTPRequestHandler

import pytest
import redis

from conftest import http_server
from oracle.audit import audit_run
from oracle.keys import TemplateMismatch
from oracle.store import StoreOptions
from support_oracle import build_world, fill_redis, read_findings, simple_specs, write_journal


def journaled(tmp_path, ago: float = 60, sessions: int = 4, forgot: bool = False):
    """A run folder with a journal of ``sessions`` sessions acknowledged ``ago`` seconds ago, whose bot remembered
    every fact (``forgot``: none), and the world a correct store holds for it."""
    specs = [[dataclasses.replace(spec, verdict_amnesia=forgot) for spec in session]
             for session in simple_specs(sessions)]
    world = build_world(specs, start=time.time() - ago, seed=9)
    if forgot:
        for r in world.records:
            if r["verdict"] == "pass":
                r["verdict"] = "amnesia"
    run = tmp_path / "run"
    write_journal(run, world.records)
    return run, world


def record_store_url(run, url: str) -> None:
    """run.json as a Locust run writes it: the store it wrote to in options.store.url."""
    (run / "run.json").write_text(json.dumps({
        "run": "run-test", "options": {"store": {"url": url, "key_template": "message_store:{session}"}}}))


# the journal's failed requests (simple_specs' refused turns) would fail the verdict from the journal alone, exit 1
QUIET_ERRORS = ("--gate", "strict,errors=off")


def in_process(capsys, *args):
    """``python -m oracle audit ...`` through its main(): (exit code, stderr)."""
    from oracle.__main__ import main
    code = main(["audit", *map(str, args)])
    return code, capsys.readouterr().err


# ---- --http-url: every session empty ------------------------------------------------------------------------------

class _History(BaseHTTPRequestHandler):
    """/empty/<id>: 200 [] for any id (an API that lists nothing for an id it does not know); /mixed/<id>: 404 for
    the ids in ``missing``, [] for the rest; /store/<id>: the messages in ``store`` (404 when it has none)."""
    store: dict = {}
    missing: set = set()

    def do_GET(self):  # noqa: N802 - http.server's name
        _, kind, session = self.path.split("/")[:3]
        if kind == "store" and session in self.store:
            body = json.dumps(self.store[session]).encode()
        elif kind == "empty" or kind == "mixed" and session not in self.missing:
            body = b"[]"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def history_api():
    _History.store, _History.missing = {}, set()
    with http_server(_History) as server:
        yield f"http://127.0.0.1:{server.server_port}"


def test_an_http_api_empty_for_every_session_is_the_wrong_url_when_the_bot_remembered(tmp_path, history_api, capsys):
    """Every session answered 200 [] (a wrong --http-url on an API that answers [] for an unknown id) was FAIL
    "N acknowledged turns the store lost", exit 1, while the same wrong URL answering 404 is exit 2. The bot
    remembered (no probe failed), so its memory is somewhere this URL does not read: exit 2, naming the URL."""
    run, world = journaled(tmp_path)
    url = f"{history_api}/empty/{{session}}"
    with pytest.raises(TemplateMismatch, match=r"--http-url http://127\.0\.0\.1:\d+/empty/\{session\} came back "
                                               r"empty for every one of the 4 sessions.*the bot remembered \(0 of "):
        audit_run(run, StoreOptions(http_url=url))
    assert not (run / "audit" / "summary.json").exists()
    code, err = in_process(capsys, run, "--http-url", url, *QUIET_ERRORS)
    assert code == 2 and "came back empty for every one of the 4 sessions" in err and "/empty/{session}" in err

    # some sessions 404, the rest []: still not one message anywhere
    _History.missing = set(world.order[:2])
    with pytest.raises(TemplateMismatch, match=r"or 404/410 for 2 with acknowledged turns"):
        audit_run(run, StoreOptions(http_url=f"{history_api}/mixed/{{session}}"))


def test_an_http_api_empty_for_every_session_behind_a_bot_that_forgot_is_still_a_loss(tmp_path, history_api):
    """The same empty answers, but the bot failed its recall probes: it keeps no memory there or anywhere, a loss
    (FAIL), never 'the wrong URL'. One session empty among full ones is a loss of that session's turns too."""
    run, world = journaled(tmp_path, forgot=True)
    s = audit_run(run, StoreOptions(http_url=f"{history_api}/empty/{{session}}"))
    assert s["verdict"]["result"] == "fail" and s["metrics"]["stored_loss"]["count"] > 0

    run, world = journaled(tmp_path / "one")
    _History.store = {sess: [m for _, m in world.stored[sess]] for sess in world.order[1:]}
    s = audit_run(run, StoreOptions(http_url=f"{history_api}/store/{{session}}"))
    lost = {f["session"] for f in read_findings(run) if f["class"] in ("lost", "vanished")}
    assert s["verdict"]["result"] == "fail" and lost == {world.order[0]}


class _Stream(BaseHTTPRequestHandler):
    """A bot's event stream: 200 text/event-stream, a keep-alive comment every 0.2 s (at most 300), never an end."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.end_headers()
        try:
            for _ in range(300):
                self.wfile.write(b": ping\n\n")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.mark.timeout(60)
def test_an_event_stream_given_as_the_history_url_is_refused_at_once(tmp_path):
    """The bot's SSE endpoint given as --http-url (an easy slip): its keep-alives restarted each read's timeout, and
    the audit waited out the 120 s deadline of every GET (input hunt 17). Refused at its first reply, exit 2."""
    from oracle.store import StoreError

    run, _ = journaled(tmp_path)
    with http_server(_Stream) as server:
        with pytest.raises(StoreError, match=r"answered an event stream \(Content-Type text/event-stream\), not a "
                                             r"history"):
            audit_run(run, StoreOptions(http_url=f"http://127.0.0.1:{server.server_port}/s/{{session}}"))


# ---- --store-url: another, empty Redis ----------------------------------------------------------------------------

def test_another_empty_redis_than_the_run_s_is_the_wrong_store_not_a_loss(tmp_path, redis_factory, capsys):
    """A re-audit with --store-url at another Redis (a typo'd port, the wrong environment), empty and started after
    the run's turns: it looked like a restart that lost everything, FAIL "sessions whose whole history is gone",
    exit 1, with no word that run.json records another store. Exit 2, naming both URLs, the password masked."""
    ours, other = redis_factory(), redis_factory()
    run, world = journaled(tmp_path)
    fill_redis(redis.Redis(port=ours.port), world)
    record_store_url(run, f"redis://:hunter2@127.0.0.1:{ours.port}/0")
    with pytest.raises(TemplateMismatch) as caught:
        audit_run(run, StoreOptions(url=other.url))
    text = str(caught.value)
    assert f"at redis://127.0.0.1:{other.port}/0, and that is not the store the run wrote to" in text
    assert f"run.json records redis://:***@127.0.0.1:{ours.port}/0" in text and "hunter2" not in text
    assert "this store holds no key at all" in text and "started after the run" in text
    code, err = in_process(capsys, run, "--store-url", other.url, *QUIET_ERRORS)
    assert code == 2 and "not the store the run wrote to" in err and "hunter2" not in err

    # the same other store holding unrelated keys: still not the run's
    other.client().set("cache:1", "v")
    with pytest.raises(TemplateMismatch, match="not the store the run wrote to") as caught:
        audit_run(run, StoreOptions(url=other.url))
    assert "holds no key at all" not in str(caught.value)

    # the run's own store (named otherwise: localhost, no database) judges it: nothing lost
    s = audit_run(run, StoreOptions(url=f"redis://localhost:{ours.port}"))
    assert s["anomalies"] == {} and s["metrics"]["stored_loss"]["count"] == 0


def test_the_run_s_own_store_that_lost_everything_in_a_restart_is_still_a_loss(tmp_path, redis_server):
    """The URL run.json records, after a restart without persistence emptied the store: a real loss, FAIL."""
    run, world = journaled(tmp_path)
    fill_redis(redis_server.client(), world)
    record_store_url(run, redis_server.url)
    redis_server.stop()
    time.sleep(1.1)  # the restart must be visibly later than the acknowledgements (uptime counts seconds)
    redis_server.start()
    s = audit_run(run, StoreOptions(url=f"redis://localhost:{redis_server.port}/0"))
    gone = [f for f in read_findings(run) if f["class"] == "vanished"]
    assert len(gone) == len(world.order) and s["verdict"]["result"] == "fail"
    assert all(f["evidence"]["store_restarted"] for f in gone)


def test_a_wrong_database_on_the_run_s_server_keeps_its_own_hint(tmp_path, redis_server):
    """Another database of the run's server is another place too, but the ids found in the run's database say more:
    the existing hint (the database to pass) stands."""
    run, world = journaled(tmp_path)
    fill_redis(redis_server.client(), world)
    record_store_url(run, redis_server.url)
    with pytest.raises(TemplateMismatch, match="database 0 in --store-url"):
        audit_run(run, StoreOptions(url=f"redis://127.0.0.1:{redis_server.port}/3"))
