"""--websocket: a bot a chat page talks to over a WebSocket (tests/support_ws.py), driven by real Locust runs."""
from __future__ import annotations

import json

from support_ws import ws_bot, ws_run

def test_a_websocket_bot_that_remembers_passes(tmp_path):
    """Each conversation's turns go as text frames over its own connection; the typing frame before each reply
    is skipped, the reply frame's field is the turn's reply, and Locust counts each turn once, as WS."""
    with ws_bot("memory") as url:
        run = ws_run(url, tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    records = [r for r in run.records() if not (r["error"] or "").startswith("interrupted")]
    assert records and {r["outcome"] for r in records} == {"ok"}
    assert {r["reply"] for r in records if r["kind"] == "plant"} == {"Noted."}
    assert {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}
    assert run.count("WS", "chat ") == len(records) == run.chat_successes()
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["verdict"]["result"] == "pass" and summary["metrics"]["stored_loss"]["total"] >= len(records)


def test_an_id_issued_in_the_bots_welcome_frame_is_the_conversations(tmp_path):
    """A bot that sends the conversation's id on connect ({"type": "session", "session_id": ...}) and none in its
    replies: with --session-from reply:session_id every turn was "no session id issued", NOTHING MEASURED (bot hunt
    15). The welcome's id is taken; the bot's history under it is audited, and it remembers: PASS."""
    with ws_bot("issue-id") as url:
        run = ws_run(url, tmp_path, "--session-from", "reply:session_id")
    assert run.returncode == 0, run.output[-3000:]
    records = [r for r in run.records() if r["outcome"] == "ok"]
    assert records and all((r["bot_session"] or "").startswith("ws_") for r in records)
    assert len({r["bot_session"] for r in records}) == len({r["session"] for r in records})
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["metrics"]["stored_loss"]["total"] >= len(records)


def test_a_websocket_bot_that_forgets_fails(tmp_path):
    with ws_bot("forget") as url:
        run = ws_run(url, tmp_path)
    assert run.returncode == 1, run.output[-3000:]
    assert {r["verdict"] for r in run.records() if r["kind"] == "probe" and r["outcome"] == "ok"} == {"amnesia"}
    assert "FAIL  probe_amnesia:" in run.output


def test_a_refused_handshake_is_a_turn_that_never_left(tmp_path):
    """The bot answers the handshake 404 (a wrong --chat-path): no frame was sent, so every turn is ``fail``
    (not ``info``) naming the status, and with nothing acknowledged the run is exit 2, never a PASS."""
    with ws_bot("memory") as url:
        run = ws_run(url, tmp_path, "--chat-path", "/chat")
    assert run.returncode == 2, run.output[-3000:]
    records = [r for r in run.records() if not (r["error"] or "").startswith("interrupted")]
    assert records and {r["outcome"] for r in records} == {"fail"}
    assert {r["error"] for r in records} == {"not sent: the WebSocket handshake was answered HTTP 404"}


def test_a_connection_the_bot_closes_is_an_indeterminate_turn_and_the_next_turn_opens_another(tmp_path):
    """The bot closes each connection after storing its fourth turn, unanswered: that turn is ``info`` (it was
    sent: the bot may have it, and here it does), the conversation's next turn opens a new connection and is
    answered, and its probes still pass (the bot keys memory by session id, not connection)."""
    with ws_bot("drop") as url:
        run = ws_run(url, tmp_path)
    records = sorted((r for r in run.records() if not (r["error"] or "").startswith("interrupted")),
                     key=lambda r: (r["session"], r["turn"]))
    dropped = [r for r in records if r["outcome"] != "ok"]
    assert dropped and {r["outcome"] for r in dropped} == {"info"}, run.output[-3000:]
    assert all(r["error"].startswith("connection error: WebSocketConnectionClosedException") for r in dropped)
    after = {(r["session"], r["turn"] + 1) for r in dropped}
    assert {r["outcome"] for r in records if (r["session"], r["turn"]) in after} == {"ok"}
    assert {r["verdict"] for r in records if r["kind"] == "probe" and r["outcome"] == "ok"} == {"pass"}
