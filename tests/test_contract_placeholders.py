"""Placeholders of the chat API contract: ``{session}`` (the session id, the bot's own with --session-from) and
``{conversation}`` (goldfish's id of the conversation, known from its first turn) in --body, --header and
--start-body. No value may go out with a literal placeholder. Each run test runs Locust against a small real bot
(this file, run as a program) and audits what it stored through its ``GET /history/<id>``.

Run one bot: ``python tests/test_contract_placeholders.py --port P --mode MODE [--id-len N]``. Modes:

    dify     POST /chat {"query", "conversation_id", "user"} (or the user in the header X-User-Id), Dify's way: a
             first turn (conversation_id "") starts a conversation owned by its user, and answers
             {"conversation_id", "answer"}; a later turn from another user is 404. Ids are --id-len characters
    threads  POST /threads {"user_id"} answers {"thread_id"}; POST /threads/<id>/runs {"input"} answers {"output"}
Both serve GET /owners: {conversation id: the user who started it}.
"""
from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from contextlib import contextmanager
from urllib.parse import unquote

PLANT = re.compile(r"My ([a-z ]+) is ([^ ]+)\.$")
PROBE = re.compile(r"What is my ([a-z ]+)\?$")


def make_app(mode: str, id_len: int):
    histories: dict[str, list] = {}
    owners: dict[str, str] = {}
    counter = itertools.count()

    def answer(history: list, message: str) -> str:
        probe = PROBE.search(message)
        if probe:
            for said in reversed(history):
                plant = PLANT.search(said["content"]) if said["role"] == "user" else None
                if plant and plant[1] == probe[1]:
                    return f"Your {probe[1]} is {plant[2]}."
            return f"I don't know your {probe[1]}."
        return "Noted." if PLANT.search(message) else "I see."

    def new_id(prefix: str) -> str:
        name = f"{prefix}{next(counter)}-"
        return (name + "x" * id_len)[:max(id_len, len(name))]

    def app(environ, start):
        path = environ["PATH_INFO"]

        def send(status: str, value) -> list:
            start(status, [("Content-Type", "application/json")])
            return [json.dumps(value).encode()]

        if path.startswith("/history/"):
            said = histories.get(unquote(path[len("/history/"):]))
            return send("200 OK" if said is not None else "404 Not Found", {"messages": said or []})
        if path == "/owners":
            return send("200 OK", owners)
        body = json.loads(environ["wsgi.input"].read() or b"{}")
        if mode == "threads" and path == "/threads":
            thread = new_id("t")
            owners[thread], histories[thread] = body.get("user_id", ""), []
            return send("200 OK", {"thread_id": thread})
        if mode == "threads":
            thread = unquote(path.split("/")[2])
            if thread not in histories:
                return send("404 Not Found", {"error": "no such thread"})
            message, conversation = body["input"], thread
        else:
            user = body.get("user") or environ.get("HTTP_X_USER_ID")
            if not user:
                return send("400 Bad Request", {"error": "user is required"})
            message, conversation = body["query"], body.get("conversation_id") or ""
            if not conversation:
                conversation = new_id("c")
                owners[conversation], histories[conversation] = user, []
            elif owners.get(conversation) != user:
                return send("404 Not Found", {"code": "not_found", "message": "Conversation Not Exists."})
        history = histories[conversation]
        text = answer(history, message)
        history += [{"role": "user", "content": message}, {"role": "assistant", "content": text}]
        if mode == "threads":
            return send("200 OK", {"output": text})
        return send("200 OK", {"conversation_id": conversation, "answer": text})

    return app


@contextmanager
def bot(mode: str, id_len: int):
    """This file's bot ``mode`` on a free loopback port; yields its base URL; always stopped."""
    from conftest import free_port
    from support_locust import serve_program

    port = free_port()
    with serve_program([sys.executable, __file__, "--port", str(port), "--mode", mode, "--id-len", str(id_len)],
                       port, f"bot {mode}") as url:
        yield url


def run(tmp_path, mode: str, *options, id_len: int = 8):
    """A 3-second Locust run against bot ``mode``, audited through its /history/<id>; and the bot's /owners."""
    from urllib.request import urlopen

    from support_locust import quick_script, run_locust

    tmp_path.mkdir(parents=True, exist_ok=True)
    with bot(mode, id_len) as url:
        done = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), *options,
                          "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                          "--content-field", "content", "--settle", "0", time_s="3s")
        with urlopen(f"{url}/owners") as resp:
            return done, json.loads(resp.read())


def verdict(done) -> str:
    return json.loads((done.run_dir / "audit" / "summary.json").read_text())["verdict"]["result"]


def users_by_session(done, owners: dict) -> dict:
    """goldfish's session -> the user the bot says started the conversation it issued for it."""
    return {r["session"]: owners[r["bot_session"]] for r in done.records() if r["bot_session"] in owners}


DIFY = ["--chat-path", "/chat", "--session-from", "reply:conversation_id", "--session-field", "conversation_id",
        "--message-field", "query", "--reply-field", "answer"]
THREADS = ["--start-path", "/threads", "--session-from", "reply:thread_id", "--chat-path", "/threads/{session}/runs",
           "--session-field", "", "--message-field", "input", "--reply-field", "output"]


def test_conversation_is_goldfishs_own_id_in_a_body_and_a_header():
    """A bare contract: {conversation} is goldfish's id on every turn, also the first, before the bot issued its
    own (session None); {session} the bot's, once issued."""
    from locustfiles.contract import ChatContract

    dify = ChatContract(session_field="conversation_id", session_from="reply:conversation_id",
                        body='{"conversation_id": "", "user": "u-{conversation}"}',
                        headers=(("X-User-Id", "u-{conversation}"),))
    for issued in (None, "c-1"):
        body, headers = dify.request(issued, "hi", "gf1")
        assert body["user"] == "u-gf1" and headers == {"X-User-Id": "u-gf1"}, (body, headers)
    assert dify.request(None, "hi", 'a"b')[0]["user"] == 'u-a"b'  # escaped as JSON text
    threads = ChatContract(start_path="/threads", session_from="reply:id", start_body='{"user_id": "u-{conversation}"}',
                           headers=(("X-User-Id", "u-{conversation}"), ("Authorization", "Bearer {session}")))
    assert threads.start_request("gf1") == {"user_id": "u-gf1"}
    assert threads.start_headers("gf1") == {"X-User-Id": "u-gf1"}


def test_a_dify_user_per_conversation_is_constant_from_its_first_turn(tmp_path):
    """Dify's user must stay one over a conversation. Written u-{session}, the first turn went as the literal
    "u-{session}" (the bot had issued no id yet), the second as u-<id>: every later turn 404, "nothing measured"
    (bot hunt 9: dify_body_session, dify_header_session). {conversation} is goldfish's id from the first turn."""
    for n, where in enumerate((["--body", '{"conversation_id": "", "user": "u-{conversation}"}'],
                               ["--body", '{"conversation_id": ""}', "--header", "X-User-Id: u-{conversation}"])):
        done, owners = run(tmp_path / str(n), "dify", *DIFY, *where)
        assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
        users = users_by_session(done, owners)
        assert users and all(user == f"u-{session}" for session, user in users.items()), users


def test_session_that_a_first_turn_cannot_fill_is_refused(tmp_path):
    """With --session-from and no --start-path, a {session} in --body or --header has no id on a conversation's
    first turn: it went out literally. The run is refused, naming {conversation}."""
    from support_locust import run_locust

    for where in (["--body", '{"user": "u-{session}"}'], ["--header", "X-User-Id: u-{session}"]):
        done = run_locust("http://127.0.0.1:9", tmp_path / where[0][2:] / "run", *DIFY, *where, time_s="3s")
        assert done.returncode == 2 and f"{where[0]}: {{session}}" in done.output and \
            "{conversation}" in done.output, done.output[-3000:]


def test_a_start_body_carries_goldfishs_id_of_the_conversation(tmp_path):
    """--start-body '{"user_id": "u-{session}"}' went out literally on every start: one user for all conversations
    (a bot with a memory per user mixed them: crosstalk, bot hunt 9: start_body_session). {conversation} is filled
    in; {session}, the id this very request is answered with, is refused, naming {conversation}."""
    done, owners = run(tmp_path / "ok", "threads", *THREADS, "--start-body", '{"user_id": "u-{conversation}"}')
    assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
    users = users_by_session(done, owners)
    assert users and all(user == f"u-{session}" for session, user in users.items()), users

    from support_locust import run_locust

    done = run_locust("http://127.0.0.1:9", tmp_path / "refused" / "run", *THREADS,
                      "--start-body", '{"user_id": "u-{session}"}', time_s="3s")
    assert done.returncode == 2 and "--start-body: {session}" in done.output and "{conversation}" in done.output, \
        done.output[-3000:]


def test_a_long_issued_id_is_used_and_a_too_long_one_is_named(tmp_path):
    """A 466-character id (a JWT) was dropped as unusable (over 200): every turn HTTP 200, yet "no session id
    issued" and "nothing measured" (bot hunt 9: long_issued_id). One over the limit says it was too long."""
    body = ["--body", '{"conversation_id": "", "user": "u-{conversation}"}']
    done, _ = run(tmp_path / "jwt", "dify", *DIFY, *body, id_len=466)
    assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
    assert {len(r["bot_session"]) for r in done.records() if r["bot_session"]} == {466}

    done, _ = run(tmp_path / "huge", "dify", *DIFY, *body, id_len=5000)
    errors = {r["error"] for r in done.records() if r["error"] and not r["error"].startswith("interrupted")}
    assert errors == {"the session id issued is 5000 characters long, more than 4096 "
                      "(--session-from reply:conversation_id)"}, errors


if __name__ == "__main__":
    from gevent.pywsgi import WSGIServer

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--id-len", type=int, default=8)
    a = p.parse_args()
    WSGIServer(("127.0.0.1", a.port), make_app(a.mode, a.id_len), log=None).serve_forever()
