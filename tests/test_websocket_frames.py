"""--websocket: frames that are no turn's reply (locustfiles/socket_turns.py). A WebSocket chat bot may send, besides
one reply frame per turn, a greeting on connect, the user's own message echoed back (a chat room's), or its answer
streamed in token frames before a final frame with the whole answer. None of them is the reply to the turn being
sent; taken as one, every later reply shifts by a turn and a correct bot FAILs (the bot hunt's ws_greeting, ws_echo,
ws_stream). Real bots and real Locust runs.

The bots are tests/support_ws.py's modes greet, echo, stream, parrot and chatty-forget.
"""
from __future__ import annotations

import json

from support_ws import GREETING, ws_bot, ws_run


def answered(run) -> list[dict]:
    return [r for r in run.records() if not (r["error"] or "").startswith("interrupted")]


def test_a_greeting_on_connect_is_no_turns_reply(tmp_path):
    """The welcome frame comes before the first turn is sent: it was the first turn's "reply" and every reply after
    came a turn late (100% amnesia, reordered). Now the connection is read up to the pong of a ping first."""
    with ws_bot("greet") as url:
        run = ws_run(url, tmp_path)
    records = answered(run)
    assert run.returncode == 0, run.output[-3000:]
    assert records and {r["outcome"] for r in records} == {"ok"}
    assert GREETING not in {r["reply"] for r in records}
    assert {r["reply"] for r in records if r["kind"] == "plant"} == {"Noted."}
    assert {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}


def test_the_users_own_message_echoed_back_is_not_the_reply(tmp_path):
    """The bot echoes each message before answering it: each probe was "answered" with itself. Now a frame whose
    reply is the message just sent is passed over."""
    with ws_bot("echo") as url:
        run = ws_run(url, tmp_path)
    records = answered(run)
    assert run.returncode == 0, run.output[-3000:]
    assert records and all(r["reply"] != r["message"] for r in records)
    assert {r["reply"] for r in records if r["kind"] == "plant"} == {"Noted."}
    assert {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}


def test_a_bot_that_greets_echoes_and_forgets_still_fails(tmp_path):
    with ws_bot("chatty-forget") as url:
        run = ws_run(url, tmp_path)
    assert run.returncode == 1, run.output[-3000:]
    probes = [r for r in answered(run) if r["kind"] == "probe" and r["outcome"] == "ok"]
    assert probes and {r["verdict"] for r in probes} == {"amnesia"}
    assert all(r["reply"].startswith("I don't know your") for r in probes)
    assert "FAIL  probe_amnesia:" in run.output


def test_the_rest_of_a_streamed_reply_does_not_answer_the_next_turn(tmp_path):
    """Token frames, then the whole answer: each turn takes the first frame holding --reply-field (its first token),
    and the frames left over are dropped before the next turn leaves (they answered it, 0.04 ms after it was sent,
    with a piece of the last reply); a warning says the bot streams its answer. The think time lets the rest of the
    stream arrive before the next turn (a stream may still be arriving then: only --reply-where tells its end)."""
    with ws_bot("stream") as url:
        run = ws_run(url, tmp_path, "--think", "0.1")
    records = answered(run)
    assert records and {r["outcome"] for r in records} == {"ok"}, run.output[-3000:]
    assert {r["reply"] for r in records if r["kind"] == "plant"} == {"Note"}  # never "d.", never "Noted."
    assert {r["reply"] for r in records if r["kind"] == "probe"} == {"Your"}
    assert "the bot answers in several frames (a streamed answer?)" in run.output


def test_reply_where_picks_the_frame_with_the_whole_answer(tmp_path):
    """--reply-where on a lone --reply-field keeps only the frames it matches (type=done: the final one), over a
    real connection to the streaming bot."""
    from locustfiles.contract import ChatContract
    from locustfiles.socket_turns import SocketTurns

    contract = ChatContract(reply_field="reply", reply_where="type=message", websocket=True)
    turns = SocketTurns(timeout=10)
    with ws_bot("stream") as url:
        ws = url.replace("http://", "ws://") + "/ws"
        try:
            replies = []
            for message in ("My postcode is 1234-ABCD.", "What is my postcode?"):
                status, data, error = turns.exchange(ws, json.dumps({"session_id": "s1", "message": message}).encode(),
                                                     {}, contract, message)
                assert status == 200, error
                replies.append(contract.reply(data))
        finally:
            turns.close()
    assert replies == ["Noted.", "Your postcode is 1234-ABCD."]


def test_a_streamed_answer_is_judged_on_the_final_frame_reply_where_names(tmp_path):
    """The streaming bot with --reply-where type=done (refused with --websocket before): each turn's reply is its
    whole answer, and the run PASSes."""
    with ws_bot("stream") as url:
        run = ws_run(url, tmp_path, "--reply-where", "type=message")
    records = answered(run)
    assert run.returncode == 0, run.output[-3000:]
    assert {r["reply"] for r in records if r["kind"] == "plant"} == {"Noted."}
    assert records and {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}


def test_a_bot_that_answers_with_the_message_itself_is_answered_by_it(tmp_path):
    """An echo is passed over only while something else may come: when nothing does by --timeout, the message
    itself was the answer (not a lost reply)."""
    from locustfiles.contract import ChatContract
    from locustfiles.socket_turns import SocketTurns

    contract = ChatContract(reply_field="reply", websocket=True)
    turns = SocketTurns(timeout=1)
    with ws_bot("parrot") as url:
        ws = url.replace("http://", "ws://") + "/ws"
        try:
            status, data, error = turns.exchange(ws, json.dumps({"session_id": "s1", "message": "hello"}).encode(),
                                                 {}, contract, "hello")
        finally:
            turns.close()
    assert status == 200 and contract.reply(data) == "hello", error


def test_a_bot_that_closes_after_each_answer_is_reconnected_without_losing_a_turn(tmp_path):
    """The bot closes the connection cleanly right behind each answer (bot hunt 8: ws_close_each). A turn sent at
    once (a burst, --think 0) went into that close: 19% of the turns failed, FAIL errors. A turn right after a reply
    now waits until the connection has been quiet a few milliseconds, sees the close, and opens another."""
    with ws_bot("close-each") as url:
        run = ws_run(url, tmp_path, "--think", "0")
    records = answered(run)
    assert run.returncode == 0, run.output[-3000:]
    assert len(records) > 50 and {r["outcome"] for r in records} == {"ok"}
    assert {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}


def test_a_greeting_after_the_first_turn_left_is_named_and_left_out_by_its_type(tmp_path):
    """The welcome comes 50 ms after the connection opened, after the ping's pong and after the first turn left (bot
    hunt 8: ws_greet_late): the first turn took it, and every reply came a turn late. No timing tells it from an
    answer; the warning said only "a streamed answer?". It names the greeting now, and a greeting with a field of its
    own is left out with --reply-where."""
    with ws_bot("greet-late") as url:
        (tmp_path / "plain").mkdir()
        (tmp_path / "where").mkdir()
        plain = ws_run(url, tmp_path / "plain", "--think", "0.1")
        where = ws_run(url, tmp_path / "where", "--think", "0.1", "--reply-where", "type!=greeting")
    assert "or it greets a new connection after the first turn has left" in plain.output, plain.output[-3000:]
    records = answered(where)
    assert where.returncode == 0, where.output[-3000:]
    assert records and GREETING not in {r["reply"] for r in records}
    assert {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}
