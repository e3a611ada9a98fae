"""--websocket: frames that are no turn's reply (locustfiles/socket_turns.py). A WebSocket chat bot may send, besides
one reply frame per turn, a greeting on connect, the user's own message echoed back (a chat room's), or its answer
streamed in token frames before a final frame with the whole answer. None of them is the reply to the turn being
sent; taken as one, every later reply shifts by a turn and a correct bot FAILs (the bot hunt's ws_greeting, ws_echo,
ws_stream). Real bots and real Locust runs.

The bots are tests/support_ws.py's modes greet, echo, stream, tokens, parrot and chatty-forget. A FAIL of a bot
whose replies came in several frames is NOT TRUSTED (exit 3): run.json's streamed_replies.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import free_port
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


def audit_again(run, url) -> subprocess.CompletedProcess:
    """``oracle audit RUN`` of the run's folder, the store read again through the bot's /history/<id>."""
    return subprocess.run([sys.executable, "-m", "oracle", "audit", str(run.run_dir), "--http-url",
                           f"{url}/history/{{session}}", "--role-field", "role", "--content-field", "content"],
                          capture_output=True, text=True, timeout=120)


def assert_not_trusted_for_streaming(run) -> None:
    """A FAIL of a bot whose replies came in several frames: exit 3, NOT TRUSTED naming the cause and the fix, in
    the run's end, in run.json (``streamed_replies``) and in the report's badge."""
    assert run.returncode == 3, run.output[-3000:]
    assert "verdict FAIL" in run.output and "NOT TRUSTED — --websocket: after" in run.output
    assert "--reply-where (type=done, say)" in run.output and ": NOT TRUSTED, exit code 3" in run.output
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["streamed_replies"]["count"] > 0 and '"token"' in meta["streamed_replies"]["first"]
    assert meta["exit_code"] == 3
    assert '<div class="badge warn">NOT TRUSTED</div>' in (run.run_dir / "report.html").read_text()


def test_a_bot_that_streams_tokens_with_no_whole_answer_frame_is_not_trusted(tmp_path):
    """Token frames, then {"type": "end"}, and no frame with the whole answer (bot hunt 10: ws_token_frames): each
    turn took the first token, and the rest answered the next turns (0.5 ms after they were sent), so a correct bot
    FAILed, amnesia, unanswered and stored loss, exit 1, with only a warning in the log. The FAIL is NOT TRUSTED,
    exit 3, naming --reply-where, at the run's end and in a re-audit of its folder."""
    with ws_bot("tokens") as url:
        run = ws_run(url, tmp_path, "--think", "0")
        again = audit_again(run, url)
    assert_not_trusted_for_streaming(run)
    assert again.returncode == 3, again.stdout[-3000:] + again.stderr[-3000:]
    assert "NOT TRUSTED — --websocket: after" in again.stdout and "--reply-where" in again.stdout


def test_a_streamed_answer_fails_not_trusted_without_reply_where_and_passes_with_it(tmp_path):
    """Token frames, then the whole answer: without --reply-where each turn took the first token, a FAIL NOT
    TRUSTED (exit 3); with --reply-where naming the whole answer's frame, a PASS (exit 0) and no streamed_replies:
    no frame holding a reply came after a turn's reply."""
    with ws_bot("stream") as url:
        (tmp_path / "plain").mkdir()
        (tmp_path / "where").mkdir()
        plain = ws_run(url, tmp_path / "plain", "--think", "0.1")
        where = ws_run(url, tmp_path / "where", "--think", "0", "--reply-where", "type=message")
    assert_not_trusted_for_streaming(plain)
    assert where.returncode == 0, where.output[-3000:]
    assert "NOT TRUSTED" not in where.output
    assert "streamed_replies" not in json.loads((where.run_dir / "run.json").read_text())


@pytest.mark.slow
def test_streamed_replies_seen_by_workers_reach_the_masters_verdict(tmp_path):
    """--processes 2: the frames come to the workers, whose warning the master never saw; their stats reports carry
    the count to the master, and the FAIL is NOT TRUSTED there too."""
    port = free_port()
    with ws_bot("tokens") as url:
        run = ws_run(url, tmp_path, "--think", "0", "--processes", "2", "--master-bind-host", "127.0.0.1",
                     "--master-bind-port", port, "--master-host", "127.0.0.1", "--master-port", port, time_s="6s")
    assert_not_trusted_for_streaming(run)


def test_the_master_adds_up_its_workers_streamed_replies_from_their_latest_reports():
    """Each worker's count rides its stats reports, absolute: the master keeps the latest of each (a worker that went
    missing keeps its last), adds them up, and a late report of an earlier run is not this one's."""
    from locustfiles.live import Live, Tally, report_to_master

    tallies = {"w1": Tally("r1"), "w2": Tally("r1")}
    live = Live()
    live.start("r1")
    tallies["w1"].streamed(b'{"type": "token", "reply": "Note"}')
    for worker, tally in tallies.items():
        tally.streamed(b'{"type": "token", "reply": "d."}')
        data = {}
        report_to_master(tally, data)
        live.on_worker_report(worker, data)  # w2's last report: then it dies
    report_to_master(Tally("r0"), stale := {})
    stale["goldfish"]["streamed"] = {"count": 99, "first": "old"}
    live.on_worker_report("w1", stale)
    assert live.streamed_replies() == {"count": 3, "first": '{"type": "token", "reply": "Note"}'}
    live.start("r2", Tally("r2"))
    assert live.streamed_replies() is None
