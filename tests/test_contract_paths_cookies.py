"""Bots whose contract goldfish once misread: a reply that is the whole conversation, a session cookie that is
Secure or quoted. Each test runs Locust against a small real bot (this file, run as a program) and audits what
it stored through its ``GET /history/<id>``.

Run one bot: ``python tests/test_contract_paths_cookies.py --port P --mode MODE``. Modes:

    history     POST /chat {"session_id", "message"} answers {"history": [{"role", "content"}, ...]}: the whole
                conversation, its answer last (a Gradio / tutorial bot)
    history-amnesia  the same, but it never reads its memory ("I don't know your order number")
    secure      POST /chat {"message"}: the conversation is the cookie sid, set with Secure (production settings
                on a plain-http staging host)
    rotate      the same cookie, not Secure, but a new conversation every turn (a bot that never reads it)
    signed      POST /chat {"message"}: the conversation is in a signed session cookie, Flask's way:
                session=base64({"conv": id, "n": turns}).timestamp.signature, a new value every turn
    pad         the conversation is the cookie sid, a base64 id with '/' and '=' that the server quotes:
                sid="ab/cd+N3=="
    ai-sdk      POST /chat {"session_id", "message"} answers the Vercel AI SDK data stream: f:{...}, 0:"piece" per
                three characters, e:{...}, d:{...}
    reissue     POST /chat {"conversation_id", "message"} answers {"conversation_id", "reply"} with a new id every
                turn, its history moved to it (a chain of response ids, as the Responses API's previous_response_id)
    bearer      POST /login answers {"access_token": "tN"}; POST /chat {"message"} with Authorization: Bearer tN:
                the token is the conversation (an API whose login issues a token per chat), 401 without it
    apikey      POST /start answers {"id": "cN"}; POST /chat {"session_id", "message"}: every request needs the header
                X-Api-Key: k (401 without it)
    browser     POST /chat {"session_id", "message"}, and a memory per browser (the cookie uid, set on the first
                request): a conversation's history starts with a note of the facts its browser told the bot before
                (ChatGPT's memory)
    cumulative  POST /chat {"session_id", "message"} answers server-sent events {"content": the whole text so far},
                three characters more each (Gradio's stream)
    stream-events  POST /chat {"session_id", "message"} answers as LangServe's /stream_events: server-sent
                events, each piece of three characters sent three times, once per level of the chain
                (on_chat_model_stream, then on_chain_stream of the sequence and of the history wrapper)
"""
from __future__ import annotations

import argparse
import base64
import itertools
import json
import re
import sys
from contextlib import contextmanager
from urllib.parse import unquote

PLANT = re.compile(r"My ([a-z ]+) is ([^ ]+)\.$")
PROBE = re.compile(r"What is my ([a-z ]+)\?$")


def make_app(mode: str):
    histories: dict[str, list] = {}
    memories: dict[str, list] = {}  # browser -> the facts it told (mode browser)
    counter = itertools.count()

    def answer(history: list, message: str) -> str:
        probe = PROBE.search(message)
        if probe:
            for said in reversed(history if mode != "history-amnesia" else []):
                plant = PLANT.search(said["content"]) if said["role"] == "user" else None
                if plant and plant[1] == probe[1]:
                    return f"Your {probe[1]} is {plant[2]}."
            return f"I don't know your {probe[1]}."
        return "Noted." if PLANT.search(message) else "I see."

    def app(environ, start):
        path = environ["PATH_INFO"]
        if path.startswith("/history/"):
            said = histories.get(unquote(path[len("/history/"):]))
            start("200 OK" if said is not None else "404 Not Found", [("Content-Type", "application/json")])
            return [json.dumps({"messages": said or []}).encode()]
        if mode == "apikey" and environ.get("HTTP_X_API_KEY") != "k":
            start("401 Unauthorized", [("Content-Type", "application/json")])
            return [b'{"error": "no API key"}']
        if mode == "apikey" and path == "/start":
            start("200 OK", [("Content-Type", "application/json")])
            return [json.dumps({"id": f"c{next(counter)}"}).encode()]
        if mode == "bearer" and path == "/login":
            start("200 OK", [("Content-Type", "application/json")])
            return [json.dumps({"access_token": f"t{next(counter)}"}).encode()]
        body = json.loads(environ["wsgi.input"].read())
        cookies = dict(c.strip().partition("=")[::2] for c in environ.get("HTTP_COOKIE", "").split(";") if "=" in c)
        headers = [("Content-Type", "application/json")]
        if mode in ("secure", "rotate", "pad"):
            session = cookies.get("sid", "").strip('"') if mode != "rotate" else ""
            session = session or (f"ab/cd+{next(counter)}==" if mode == "pad" else f"s{next(counter)}")
            value = f'"{session}"' if mode == "pad" else session
            headers.append(("Set-Cookie", f"sid={value}; Path=/; HttpOnly" + ("; Secure" if mode == "secure" else "")))
        elif mode == "signed":
            payload = cookies.get("session", "").split(".")[0]
            known = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))) if payload else {}
            session = known.get("conv") or f"c{next(counter)}"
            value = base64.urlsafe_b64encode(json.dumps({"conv": session, "n": known.get("n", 0) + 1}).encode())
            headers.append(("Set-Cookie", f"session={value.decode().rstrip('=')}.ts.sig; Path=/; HttpOnly"))
        elif mode == "bearer":
            session = environ.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ")
            if session not in histories and not re.fullmatch(r"t\d+", session):
                start("401 Unauthorized", [("Content-Type", "application/json")])
                return [b'{"error": "log in first"}']
        elif mode == "reissue":
            session = f"c{next(counter)}"
            histories[session] = histories.pop(body.get("conversation_id") or "", [])
        else:
            session = body["session_id"]
        if mode == "browser":
            browser = cookies.get("uid") or f"u{next(counter)}"
            headers.append(("Set-Cookie", f"uid={browser}; Path=/; HttpOnly"))
            if session not in histories and memories.get(browser):
                histories[session] = [{"role": "system", "content": "Known: " + " ".join(memories[browser])}]
            if PLANT.search(body["message"]):
                memories.setdefault(browser, []).append(PLANT.search(body["message"])[0])
        history = histories.setdefault(session, [])
        text = answer(history, body["message"])
        history += [{"role": "user", "content": body["message"]}, {"role": "assistant", "content": text}]
        if mode == "ai-sdk":
            parts = ['f:{"messageId":"m1"}', *("0:" + json.dumps(text[i:i + 3]) for i in range(0, len(text), 3)),
                     'e:{"finishReason":"stop","isContinued":false}', 'd:{"finishReason":"stop"}']
            start("200 OK", [("Content-Type", "text/plain; charset=utf-8"), ("x-vercel-ai-data-stream", "v1")])
            return ["".join(p + "\n" for p in parts).encode()]
        if mode == "cumulative":
            start("200 OK", [("Content-Type", "text/event-stream")])
            return ["".join(f"data: {json.dumps({'content': text[:i + 3]})}\n\n" for i in range(0, len(text), 3))
                    .encode()]
        if mode == "stream-events":
            start("200 OK", [("Content-Type", "text/event-stream")])
            return [stream_events(text)]
        start("200 OK", headers)
        body = {"history": history} if mode.startswith("history") else {"reply": text}
        if mode == "apikey":  # each answer names its message by the field that named the conversation at /start
            body["id"] = f"msg{next(counter)}"
        return [json.dumps({**body, "conversation_id": session} if mode == "reissue" else body).encode()]

    return app


def stream_events(text: str) -> bytes:
    """``text`` as LangServe's /stream_events sends a chain's answer: every piece once per level of the chain."""
    def event(kind: str, name: str, data: dict) -> str:
        return "event: data\ndata: " + json.dumps({"event": kind, "name": name, "run_id": "r", "tags": [],
                                                   "metadata": {}, "data": data, "parent_ids": []}) + "\n\n"
    chunk = lambda piece: {"chunk": {"content": piece, "type": "AIMessageChunk"}}  # noqa: E731
    out = [event("on_chain_start", "RunnableWithMessageHistory", {"input": {}})]
    for i in range(0, len(text), 3):
        out += [event("on_chat_model_stream", "FakeChatModel", chunk(text[i:i + 3])),
                event("on_chain_stream", "RunnableSequence", chunk(text[i:i + 3])),
                event("on_chain_stream", "RunnableWithMessageHistory", chunk(text[i:i + 3]))]
    out += [event("on_chain_end", "RunnableWithMessageHistory", {"output": {"content": text}}), "event: end\n\n"]
    return "".join(out).encode()


@contextmanager
def bot(mode: str):
    """This file's bot ``mode`` on a free loopback port; yields its base URL; always stopped."""
    from conftest import free_port
    from support_locust import serve_program

    port = free_port()
    with serve_program([sys.executable, __file__, "--port", str(port), "--mode", mode], port, f"bot {mode}") as url:
        yield url


def run(tmp_path, mode: str, *options):
    """A 3-second Locust run against bot ``mode``, audited through its /history/<id>."""
    from support_locust import quick_script, run_locust

    tmp_path.mkdir(parents=True, exist_ok=True)
    with bot(mode) as url:
        return run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), *options,
                          "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                          "--content-field", "content", "--settle", "0", time_s="3s")


def answered(done) -> list[dict]:
    """The journal's turns but those the end of the test cut off (a first turn cut off has no id yet)."""
    return [r for r in done.records() if not (r["error"] or "").startswith("interrupted")]


def verdict(done) -> str:
    return json.loads((done.run_dir / "audit" / "summary.json").read_text())["verdict"]["result"]


COOKIE = ["--session-from", "cookie:sid", "--session-field", ""]


def test_each_conversation_starts_with_an_empty_cookie_jar(tmp_path):
    """A Locust user's conversations are different people. A bot with a memory per browser (a cookie it sets; ChatGPT's
    memory) notes what a browser told it before at the start of its next conversation: with the jar kept from one
    conversation to the next, a correct bot recalled the last person's facts in the next one, and the audit found
    cross-talk in nearly every session (279 of 289)."""
    done = run(tmp_path, "browser")
    sessions = {r["session"] for r in answered(done)}
    assert len(sessions) > 10  # several conversations per user
    assert verdict(done) == "pass", done.output


def test_a_stream_of_the_whole_text_so_far_is_its_last_piece(tmp_path):
    """Each event the whole answer so far (Gradio's stream): joined, the reply was the answer many times over, and a
    correct bot FAILed with every reply that came in pieces unanswered. Its reply is the last piece."""
    done = run(tmp_path, "cumulative", "--reply-format", "sse", "--reply-field", "content")
    replies = [r["reply"] for r in answered(done) if r["outcome"] == "ok"]
    assert replies and all(r in ("Noted.", "I see.") or r.startswith(("Your ", "I don't know")) for r in replies)
    assert verdict(done) == "pass", done.output


def test_a_negative_index_picks_the_answer_out_of_the_whole_conversation(tmp_path):
    """A bot that answers with the whole conversation: history.-1.content is its answer, so a bot that remembers
    passes and one that never reads its memory fails (history.*.content joined the user's own echoed plant,
    which held the value, and every probe passed)."""
    good = run(tmp_path / "good", "history", "--reply-field", "history.-1.content")
    assert good.returncode == 0 and verdict(good) == "pass", good.output[-3000:]
    probes = [r for r in good.records() if r["kind"] == "probe" and r["outcome"] == "ok"]
    assert probes and all(r["reply"].startswith("Your ") for r in probes)
    bad = run(tmp_path / "bad", "history-amnesia", "--reply-field", "history.-1.content")
    assert bad.returncode == 1 and "FAIL  probe_amnesia:" in bad.output, bad.output[-3000:]


def test_a_reply_that_echoes_the_plant_is_warned_about(tmp_path):
    """history.*.content selects every message, the user's plant too: the probes pass on the echo, and the run
    says so, once, naming the option and the way out."""
    done = run(tmp_path, "history-amnesia", "--reply-field", "history.*.content")
    warnings = re.findall(r"the reply to a probe holds the user's own plant.*", done.output)
    assert len(warnings) == 1 and "--reply-field 'history.*.content'" in warnings[0] and \
        "history.-1.content" in warnings[0], done.output[-3000:]


def test_a_token_the_bot_issued_goes_in_a_header_and_nowhere_else(tmp_path):
    """A bot whose login issues a bearer token per conversation: --header 'Authorization: Bearer {session}' with no
    session field was refused ("the session id must go somewhere"), though the header carries it."""
    done = run(tmp_path, "bearer", "--start-path", "/login", "--session-from", "reply:access_token",
               "--header", "Authorization: Bearer {session}", "--session-field", "")
    assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
    issued = {r["bot_session"] for r in answered(done)}
    assert issued and all(re.fullmatch(r"t\d+", i) for i in issued), issued


def test_the_request_that_starts_a_conversation_carries_the_api_key_header(tmp_path):
    """--header 'X-Api-Key: k' went on every turn but not on --start-path's request: a bot whose every endpoint needs
    the key answered 401, no conversation started, "nothing measured" (bot hunt 8: rest_loc_auth). The id comes from
    the start request: an answer's own ``id`` (its message's) is not a new conversation id (bot hunt 8: oai_conv)."""
    done = run(tmp_path, "apikey", "--start-path", "/start", "--session-from", "reply:id", "--header", "X-Api-Key: k")
    assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
    assert {r["bot_session"] for r in answered(done)} >= {"c0"}
    assert "was issued the id" not in done.output, done.output[-3000:]


def test_a_bot_that_will_not_start_conversations_is_not_hammered(tmp_path):
    """Every start refused (401: no API key): a failed start went on to the next conversation at once, and ten users
    with --think 0 sent about 500 starts a second at the bot for the whole run. It waits now as after a failed turn
    (0.5 s, doubling up to 4 s): about 4 a user in 3 s."""
    done = run(tmp_path, "apikey", "--start-path", "/start", "--session-from", "reply:id", "--think", "0")
    starts = [r for r in done.records() if (r["error"] or "").startswith("conversation not started: HTTP 401")]
    assert done.returncode != 0 and 10 <= len(starts) <= 60, (len(starts), done.output[-2000:])


def test_a_secure_session_cookie_goes_back_over_plain_http(tmp_path):
    """The bot's session cookie is Secure and the bot is on http (loopback staging): goldfish reads that cookie
    as the conversation's id and sends it back, as a browser does to localhost; each conversation keeps one id."""
    done = run(tmp_path, "secure", *COOKIE)
    assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
    ids: dict = {}
    for r in answered(done):
        ids.setdefault(r["session"], set()).add(r["bot_session"])
    assert ids and all(len(v) == 1 and None not in v for v in ids.values()), ids


def test_a_session_cookie_that_changes_mid_conversation_is_warned_about(tmp_path):
    """A bot that sets a new session cookie on a later turn started a new conversation: said once, naming the
    cookie, the two ids and how the cookie is set."""
    done = run(tmp_path, "rotate", *COOKIE)
    warnings = re.findall(r"--session-from cookie:sid: session gf\w+ turn \d+ got the cookie sid=s\d+, not the s\d+ "
                          r"its first turn got. Either the bot started a new conversation.*Path=/ .*", done.output)
    assert done.returncode == 1 and len(warnings) == 1 and "whose payload" not in warnings[0], done.output[-3000:]


def test_a_signed_session_cookie_is_named_with_its_payload(tmp_path):
    """Flask keeps the conversation in a signed cookie whose value changes every turn while the conversation goes on
    (bot hunt 7: flask_cookie): the warning said "the bot started a new conversation", though no probe failed. It now
    says the cookie is a signed session and shows its payload, where the id the store uses is."""
    done = run(tmp_path, "signed", "--session-from", "cookie:session", "--session-field", "")
    warnings = re.findall(r"--session-from cookie:session: .* not the \S+ its first turn got\. .*", done.output)
    assert len(warnings) == 1 and re.search(r'a signed session cookie whose payload is \{"conv":"c\d+","n":\d+\}',
                                            warnings[0]), done.output[-3000:]
    assert "reply:FIELD or header:NAME" in warnings[0] and done.returncode == 2, done.output[-3000:]


def test_a_quoted_session_cookie_is_the_id_inside_the_quotes(tmp_path):
    """sid="ab/cd+1==" (a value with '/' or '=' is quoted by Starlette): the id, journaled and read from the store,
    is ab/cd+1==."""
    done = run(tmp_path, "pad", *COOKIE)
    assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
    ids = {r["bot_session"] for r in answered(done)}
    assert ids and all(re.fullmatch(r"ab/cd\+\d+==", i) for i in ids), ids


if __name__ == "__main__":
    from gevent.pywsgi import WSGIServer

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", required=True)
    a = p.parse_args()
    WSGIServer(("127.0.0.1", a.port), make_app(a.mode), log=None).serve_forever()


def test_a_bot_that_issues_a_new_id_every_turn_is_said_once(tmp_path):
    """A bot that issues a new conversation id with every reply (a chain of response ids) FAILed every probe as
    forgotten, with no word of why: goldfish sends every turn with the first id. It now says so, once."""
    done = run(tmp_path, "reissue", "--session-from", "reply:conversation_id", "--session-field", "conversation_id")
    said = re.findall(r"--session-from reply:conversation_id: session \S+ turn \d+ was issued the id 'c\d+', not the "
                      r"'c\d+' its first turn was.*", done.output)
    assert len(said) == 1 and "not supported" in said[0], done.output[-3000:]
