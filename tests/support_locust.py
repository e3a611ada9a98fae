"""Helpers for the Locust tests: small real test bots (gevent WSGI) and a Locust runner.

The test bots are real HTTP servers in their own processes, each a deliberately simple
*test double* of a chatbot that speaks the reference grammar (docs/CONTRACTS.md):

    memory     remembers each session's facts (a correct bot)
    forget     keeps no memory at all (every probe is amnesia)
    leaky      one fact table shared by all sessions (a leaking test bot: cross-talk)
    badredirect  answers every turn but a probe, redirected to a Location that is no URL
    hangprobe  answers every turn but a probe, whose reply never ends (a space every 0.2 s, for a minute)
    lapse      forgets every eighth conversation it meets: a few failed probes, not most
    flaky      cycles through: ok, 200 with a non-JSON body, 200 JSON without the reply field
    slow       remembers, but sleeps --delay seconds first (timeouts)
    contract2  a different API: POST /api/v2/converse, session id in header X-Conversation-Id,
               message at input.text, reply at data.answer.text, needs `Authorization: Bearer t0k`
    openai     OpenAI-like streaming: POST /v1/chats/<session>/completions, {"model": "gf", "stream": true,
               "messages": [{"role": "user", "content": ...}]} (400 without the model), answers server-sent
               events of chunks (choices.0.delta.content, a role-only first chunk, [DONE]), chunked
    langserve  LangServe-like streaming: POST /chat/stream, {"input": {"question": ..., "language": ...},
               "config": {"configurable": {"session_id": ...}}} (422 without the language), answers
               metadata, data ({"content": piece}) and end events
    plaintext  POST /chat?session=<session> with {"message": ...}, answers text/plain
    forgetful-stream  the openai API, with no memory (every probe is amnesia)
    issued     Dify-like: the bot issues the conversation id. POST /v1/chat-messages {"query": ...,
               "conversation_id": "" (a new conversation) or an id it issued (404 for one it did not)}, answers
               {"answer": ..., "conversation_id": <id>} and the header X-Conversation-Id: <id> (also read from the
               request's X-Conversation-Id header when the body has none)
    cookie     POST /chat {"message": ...}: the conversation is the session cookie ``sid`` (set when absent)
    reissue    the issued API, but every turn starts a new conversation whatever id it is sent (amnesia)
    form       a Flask request.form bot: POST /get, form-encoded msg and session_id (415 for anything else),
               answers text/plain
    flaskget   the classic Flask tutorial bot: GET /get?msg=...&session_id=..., answers text/plain
    twilio     an SMS webhook: POST /sms, form-encoded Body and From (the conversation is the phone number),
               answers TwiML: <Response><Message>...</Message></Response>
    rasa       Rasa's REST channel: POST /webhooks/rest/webhook {"sender": ..., "message": ...} answers a list of
               two messages, [{"recipient_id": ..., "text": "Let me check."}, {..., "text": <the answer>}], and
               stores both
    threads    two calls: POST /threads {"assistant": "gf"} (400 without it) answers 201 {"id": "th <n>"} (a space:
               sent back percent-encoded), then POST /threads/<id>/messages {"content": ...} (404 for an unknown id)
    threads-flaky  the threads API, whose every third start answers 503
    jobs       a job API: POST /chat {"session_id", "message"} answers 202 {"job": {"id": "j <n>", "links":
               {"self": "/jobs/j%20<n>"}}} (stored at
               once), GET /jobs/<id> answers {"status": "running"} twice (with Authorization as sent), then
               {"status": "done", "output": {"text": <the answer>}}; 404 for an unknown job
    jobs-stuck the job API, whose probes' jobs never finish
    jobs-partial the job API, whose running jobs answer the text so far: {"status": "running", "output": {"text": ...}}
    jobs-located the job API, whose turns answer 202 with an empty body and the job's path in ``Location``
               (RFC 9110's asynchronous answer)
    limited    the default API, rate-limited after the fact: every third turn is stored, then refused 429 with
               Retry-After (a limiter behind the memory write; the client will send it again)
    located    the threads API, whose start answers 201 with an empty body and the thread's whole URL in
               ``Location`` (``http://<host>/threads/th%20<n>``)

Every mode serves what it stored at ``GET /history/<session>``: ``{"messages": [{"role": "user",
"content": ...}, {"role": "assistant", ...}]}`` (a layout other than LangChain's, for audit tests).

Run one: ``python tests/support_locust.py --port P --mode memory [--log FILE] [--delay S]``.
With ``--log`` every received user message is appended (one line each) before answering. Every answer
carries ``X-Turn-Token``: the token of the message it answers (a stand-in for a replica header whose
right value per turn is known, to check ``--replica-header`` tags each journal record with its own turn's).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")
CHATFILE = str(REPO / "locustfiles" / "chat.py")
PLANT_RE = re.compile(r"\bMy ([a-z][a-z ]*?) is (\S+)\.")
PROBE_RE = re.compile(r"\bWhat is my ([a-z][a-z ]*?)\?")
TOKEN_RE = re.compile(r"\[(gf[0-9a-f]+t\d+)\]")


# ---- the test bots (run in a subprocess) -------------------------------------------------------
def answer(facts: dict, message: str) -> str:
    """A test bot's answer: a plant is noted (into ``facts``), a probe recalled from ``facts``."""
    if p := PLANT_RE.search(message):
        facts[p[1]] = p[2]
        return "Noted."
    if q := PROBE_RE.search(message):
        return f"Your {q[1]} is {facts[q[1]]}." if q[1] in facts else f"I don't know your {q[1]}."
    return "Noted."


def make_app(mode: str, delay: float = 0.0, log_path: str | None = None):
    import gevent

    memory: dict[str, dict[str, str]] = {}
    histories: dict[str, list[dict]] = {}  # served at GET /history/<session> in an OpenAI-like layout
    shared: dict[str, str] = {}
    counter = itertools.count()
    lapsed: dict = {}  # lapse: session -> whether the bot forgets it
    jobs: dict[str, list] = {}  # jobs: id -> [the answer or None (never done), polls so far]
    log = open(log_path, "a", buffering=1) if log_path else None

    def respond(start, status: str, body: bytes, ctype: str = "application/json", extra=()):
        start(status, [("Content-Type", ctype), ("Content-Length", str(len(body))), *extra])
        return [body]

    def app(environ, start):
        path = environ.get("PATH_INFO") or ""
        if environ.get("REQUEST_METHOD") == "GET" and path.startswith("/history/"):  # what the bot stored, oldest first
            stored = histories.get(path[len("/history/"):], [])
            return respond(start, "200 OK", json.dumps({"messages": stored}).encode())
        if mode.startswith("jobs") and environ.get("REQUEST_METHOD") == "GET" and path.startswith("/jobs/"):
            job = jobs.get(path[len("/jobs/"):])
            if job is None or environ.get("HTTP_AUTHORIZATION") != "Bearer t0k":
                return respond(start, "404 Not Found", b'{"error": "no such job"}')
            job[1] += 1
            done = job[0] is not None and job[1] > 2
            running = {"status": "running"} if mode != "jobs-partial" else \
                {"status": "running", "output": {"text": job[0][:4 * job[1]]}}  # the text so far (Replicate's)
            return respond(start, "200 OK", json.dumps({"status": "done", "output": {"text": job[0]}} if done
                                                       else running).encode())
        raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        if mode in ("openai", "forgetful-stream"):
            parts = path.split("/")  # /v1/chats/<session>/completions
            body = json.loads(raw)
            if len(parts) != 5 or parts[:3] != ["", "v1", "chats"] or parts[4] != "completions":
                return respond(start, "404 Not Found", b'{"error": "no such path"}')
            if body.get("model") != "gf" or body.get("stream") is not True:
                return respond(start, "400 Bad Request", b'{"error": "model and stream are required"}')
            session, message = parts[3], body["messages"][0]["content"]
        elif mode == "langserve":
            body = json.loads(raw)
            if path != "/chat/stream":
                return respond(start, "404 Not Found", b'{"error": "no such path"}')
            if "language" not in body["input"]:
                return respond(start, "422 Unprocessable Entity", b'{"detail": "input.language is required"}')
            session, message = body["config"]["configurable"]["session_id"], body["input"]["question"]
        elif mode == "plaintext":
            session, message = environ.get("QUERY_STRING", "").partition("session=")[2], json.loads(raw)["message"]
        elif mode in ("issued", "reissue"):
            body = json.loads(raw)
            if path != "/v1/chat-messages" or "query" not in body:
                return respond(start, "404 Not Found", b'{"message": "no such path"}')
            session = body.get("conversation_id") or environ.get("HTTP_X_CONVERSATION_ID") or ""
            message = body["query"]
            if session and session not in histories:
                return respond(start, "404 Not Found", b'{"code": "not_found", "message": "Conversation Not Exists."}')
            if not session or mode == "reissue":
                session = f"conv-{next(counter)}-{os.getpid()}"
                histories[session] = []
        elif mode == "flaskget":
            from urllib.parse import parse_qs
            if environ.get("REQUEST_METHOD") != "GET" or path != "/get":
                return respond(start, "405 Method Not Allowed", b"GET /get only", "text/plain")
            query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
            session, message = query["session_id"], query["msg"]
        elif mode in ("form", "twilio"):
            if not (environ.get("CONTENT_TYPE") or "").startswith("application/x-www-form-urlencoded"):
                return respond(start, "415 Unsupported Media Type", b"a form, please", "text/plain")
            from urllib.parse import parse_qs
            form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
            session, message = (form["session_id"], form["msg"]) if mode == "form" else (form["From"], form["Body"])
        elif mode == "rasa":
            body = json.loads(raw)
            if path != "/webhooks/rest/webhook":
                return respond(start, "404 Not Found", b"[]")
            session, message = body["sender"], body["message"]
        elif mode in ("threads", "threads-flaky", "located"):
            body = json.loads(raw)
            if path == "/threads":
                if body.get("assistant") != "gf":
                    return respond(start, "400 Bad Request", b'{"error": "assistant is required"}')
                n = next(counter)
                if mode == "threads-flaky" and n % 3 == 2:
                    return respond(start, "503 Service Unavailable", b'{"error": "busy"}')
                thread = f"th {n}"
                histories[thread] = []
                if mode == "located":
                    where = f"http://{environ.get('HTTP_HOST')}/threads/{quote(thread)}"
                    return respond(start, "201 Created", b"", extra=[("Location", where)])
                return respond(start, "201 Created", json.dumps({"id": thread, "object": "thread"}).encode())
            parts = path.split("/")  # /threads/<id>/messages, the id decoded by the server
            if len(parts) != 4 or parts[1] != "threads" or parts[3] != "messages" or parts[2] not in histories:
                return respond(start, "404 Not Found", b'{"error": "no such thread"}')
            session, message = parts[2], body["content"]
        elif mode == "cookie":
            jar = dict(c.strip().partition("=")[::2] for c in environ.get("HTTP_COOKIE", "").split(";") if "=" in c)
            session, message = jar.get("sid") or f"sid{next(counter)}x{os.getpid()}", json.loads(raw)["message"]
        elif mode == "contract2":
            if environ.get("PATH_INFO") != "/api/v2/converse":
                return respond(start, "404 Not Found", b'{"error": "no such path"}')
            if environ.get("HTTP_AUTHORIZATION") != "Bearer t0k":
                return respond(start, "401 Unauthorized", b'{"error": "auth"}')
            session, message = environ.get("HTTP_X_CONVERSATION_ID"), json.loads(raw)["input"]["text"]
        else:
            body = json.loads(raw)
            session, message = body["session_id"], body["message"]
        token = TOKEN_RE.match(message)
        extra = [("X-Turn-Token", token[1])] if token else []
        if log:
            log.write(message + "\n")
        if mode == "badredirect" and PROBE_RE.search(message):  # a Location no client can follow
            return respond(start, "307 Temporary Redirect", b"", extra=[("Location", "http://[bad/x")])
        if mode == "hangprobe" and PROBE_RE.search(message):  # a probe's reply never ends: a space every 0.2 s
            start("200 OK", [("Content-Type", "application/json")])
            return (gevent.sleep(0.2) or b" " for _ in range(300))  # bounded: a minute
        if mode == "slow":
            gevent.sleep(delay)
        if mode == "flaky":
            kind = next(counter) % 3
            if kind == 1:
                return respond(start, "200 OK", b"hello, not json", "text/plain", extra)
            if kind == 2:
                return respond(start, "200 OK", b'{"answer": "the reply is under another name"}', extra=extra)
        if mode == "lapse" and session not in lapsed:  # every eighth conversation the bot meets, forgotten
            lapsed[session] = len(lapsed) % 8 == 0
        if mode in ("forget", "forgetful-stream") or (mode == "lapse" and lapsed[session]):
            text = answer({}, message)  # lapse: as a replica that is not sticky forgets some conversations
        elif mode == "leaky":
            text = answer(shared, message)
        else:
            text = answer(memory.setdefault(session, {}), message)
        histories.setdefault(session, []).extend([{"role": "user", "content": message},
                                                  {"role": "assistant", "content": text}])
        if mode == "rasa":  # the answer comes second, after a message of its own
            histories[session].insert(-1, {"role": "assistant", "content": "Let me check."})
            said = [{"recipient_id": session, "text": t} for t in ("Let me check.", text)]
            return respond(start, "200 OK", json.dumps(said).encode(), extra=extra)
        if mode == "limited" and next(counter) % 3 == 2:
            return respond(start, "429 Too Many Requests", b'{"error": "slow down"}', extra=[("Retry-After", "1")])
        if mode == "broken":  # stores the turn, then fails every request
            return respond(start, "500 Internal Server Error", b'{"error": "boom"}', extra=extra)
        if mode == "contract2":
            return respond(start, "200 OK", json.dumps({"data": {"answer": {"text": text}}}).encode(), extra=extra)
        if mode.startswith("jobs"):
            job = f"j {next(counter)}"
            jobs[job] = [None if mode == "jobs-stuck" and PROBE_RE.search(message) else text, 0]
            if mode == "jobs-located":
                return respond(start, "202 Accepted", b"", extra=[*extra, ("Location", f"/jobs/{quote(job)}")])
            return respond(start, "202 Accepted", json.dumps({"job": {"id": job, "links": {"self": f"/jobs/{quote(job)}"}}}
                                                             ).encode(), extra=extra)
        if mode in ("openai", "forgetful-stream", "langserve"):
            return stream(start, mode, text, extra)
        if mode in ("issued", "reissue"):
            return respond(start, "200 OK", json.dumps({"answer": text, "conversation_id": session}).encode(),
                           extra=[*extra, ("X-Conversation-Id", session)])
        if mode == "cookie":
            extra = [*extra, ("Set-Cookie", f"sid={session}; Path=/; HttpOnly")]
        if mode == "twilio":
            from xml.sax.saxutils import escape
            twiml = f'<?xml version="1.0" encoding="UTF-8"?><Response><Message>{escape(text)}</Message></Response>'
            return respond(start, "200 OK", twiml.encode(), "text/xml", extra)
        if mode in ("plaintext", "form", "flaskget"):
            return respond(start, "200 OK", text.encode(), "text/plain; charset=utf-8", extra)
        return respond(start, "200 OK", json.dumps({"reply": text}).encode(), extra=extra)

    return app


def stream(start, mode: str, text: str, extra) -> list[bytes]:
    """Server-sent events, each a chunk of its own (no Content-Length: chunked transfer encoding)."""
    pieces = [text[i:i + 4] for i in range(0, len(text), 4)]
    if mode == "langserve":
        events = [b'event: metadata\r\ndata: {"run_id": "r"}\r\n\r\n']
        events += [b"event: data\r\ndata: " + json.dumps({"content": p, "type": "AIMessageChunk"}).encode()
                   + b"\r\n\r\n" for p in pieces]
        events.append(b"event: end\r\n\r\n")
    else:
        chunks = [{"delta": {"role": "assistant"}}] + [{"delta": {"content": p}} for p in pieces] + \
            [{"delta": {}, "finish_reason": "stop"}]
        events = [b"data: " + json.dumps({"choices": [c]}).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
    start("200 OK", [("Content-Type", "text/event-stream"), *extra])
    return events


def main() -> None:
    from gevent.pywsgi import WSGIServer

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", default="memory")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--log")
    a = p.parse_args()
    WSGIServer(("127.0.0.1", a.port), make_app(a.mode, a.delay, a.log), log=None).serve_forever()


# ---- used by the tests -------------------------------------------------------------------------
def _kill_group(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(10)



def run_patched(test_file: str, flag: str) -> None:
    """Run ``test_file``'s tests again in a fresh interpreter that gevent-patches first, as Locust does (ChatUser
    can only be imported so), with the environment variable ``flag`` set; fail with that run's output."""
    code = ("from gevent import monkey; monkey.patch_all()\n"
            "import sys, pytest\n"
            "sys.exit(pytest.main([sys.argv[1], '-q', '-p', 'no:cacheprovider', '-rf']))")
    proc = subprocess.run([sys.executable, "-c", code, test_file], capture_output=True, text=True, timeout=240,
                          env={**os.environ, flag: "1"}, cwd=os.path.dirname(test_file))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout, proc.stdout[-3000:]

def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout)`` of a Locust master or local runner; one still running then is asked for
    every greenlet's stack (SIGUSR2, locustfiles/endofrun.py) and killed, and the test fails with its output."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR2)
        try:
            proc.communicate(timeout=3)  # the dump is printed at once; the process stays stuck
        except subprocess.TimeoutExpired:
            pass
        _kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"locust did not finish in {timeout}s; its greenlets are at the end:\n{out}\n{err}")


@contextmanager
def chat_bot(mode: str = "memory", delay: float = 0.0, log: Path | None = None):
    """Start a test bot on a free loopback port; yields its base URL; always stopped."""
    from conftest import free_port

    port = free_port()
    args = [sys.executable, __file__, "--port", str(port), "--mode", mode, "--delay", str(delay)]
    if log:
        args += ["--log", str(log)]
    with serve_program(args, port, f"test bot {mode}") as url:
        yield url


@contextmanager
def serve_program(args: list, port: int, name: str):
    """Run ``args``, a server listening on loopback ``port``; yields its base URL once it accepts connections;
    always stopped (its process group killed)."""
    from conftest import wait_until
    import socket

    errors = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server can never block on it
    proc = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        def up():
            if proc.poll() is not None:
                errors.seek(0)
                raise AssertionError(f"{name} exited: {errors.read().decode()[-2000:]}")
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        wait_until(up, timeout=30, what=f"{name} on port {port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        _kill_group(proc)
        errors.close()


class LocustRun:
    """A finished headless Locust run: exit code, output, run folder, Locust's final stats."""

    def __init__(self, proc: subprocess.CompletedProcess, run_dir: Path, stats_file: Path):
        self.returncode, self.output, self.run_dir = proc.returncode, proc.stdout + proc.stderr, run_dir
        self.stats = json.loads(stats_file.read_text()) if stats_file.exists() else []

    def rows(self, method: str | None = None, prefix: str = "") -> list[dict]:
        return [r for r in self.stats if (method is None or r["method"] == method) and r["name"].startswith(prefix)]

    def count(self, method: str | None = None, prefix: str = "", failures: bool = False) -> int:
        key = "num_failures" if failures else "num_requests"
        return sum(r[key] for r in self.rows(method, prefix))

    def chat_successes(self) -> int:
        return self.count(None, "chat ") - self.count(None, "chat ", failures=True)

    def records(self) -> list[dict]:
        return journal_records(self.run_dir)

    def turns(self) -> list:
        return journal_turns(self.run_dir)

    def raw_records(self) -> list[dict]:
        """Every line of the journal as written, in-flight records included."""
        from contracts.jsonl import read_jsonl
        from contracts.runfolder import RunFolder

        return [r for shard in RunFolder(self.run_dir).shards() for r in read_jsonl(shard)]


def journal_records(run_dir) -> list[dict]:
    """The journal's turns, one record per turn (contracts.journal.one_per_turn: an outcome supersedes the
    first turn's in-flight record)."""
    return [turn_dict(t) for t in journal_turns(run_dir)]


def journal_turns(run_dir) -> list:
    from contracts.journal import decode_line, one_per_turn
    from contracts.jsonl import read_jsonl
    from contracts.runfolder import RunFolder

    sessions: dict[str, list] = {}
    for shard in RunFolder(run_dir).shards():
        for t in read_jsonl(shard, decode_line):
            sessions.setdefault(t.session, []).append(t)
    return [t for turns in sessions.values() for t in one_per_turn(sorted(turns, key=lambda t: t.turn))[0]]


def turn_dict(turn) -> dict:
    import msgspec

    return {k: list(v) if isinstance(v, tuple) else v for k, v in msgspec.structs.asdict(turn).items()}


def locust_cmd(host: str, run_dir: Path, *extra, users: int = 10, rate: int = 10, time_s: str = "4s") -> list[str]:
    return [LOCUST, "-f", CHATFILE, "--headless", "-u", str(users), "-r", str(rate), "-t", time_s,
            "--host", host, "--run-dir", str(run_dir), "--json-file", str(run_dir / "locust" / "stats"),
            "--loglevel", "WARNING", *map(str, extra)]


def run_locust(host: str, run_dir: Path, *extra, timeout: float = 120, cwd: Path | None = None, **kw) -> LocustRun:
    """Run ``locust -f locustfiles/chat.py --headless`` to completion in its own process group."""
    (run_dir / "locust").mkdir(parents=True, exist_ok=True)
    cmd = locust_cmd(host, run_dir, *extra, **kw)
    proc = subprocess.Popen(cmd, cwd=cwd or run_dir.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = finish(proc, timeout)
    finally:
        _kill_group(proc)
    return LocustRun(subprocess.CompletedProcess(cmd, proc.returncode, out, err), run_dir,
                     run_dir / "locust" / "stats.json")


QUICK_SCRIPT = """\
name: quick
steps:
  - plant: order number
  - chatter
  - probe: order number
  - burst: 2
  - plant: postcode
  - probe: postcode
"""


def quick_script(directory: Path) -> Path:
    """A short script with every step kind and no think steps, so short runs finish many conversations."""
    path = Path(directory) / "quick.yaml"
    path.write_text(QUICK_SCRIPT)
    return path


if __name__ == "__main__":
    main()
