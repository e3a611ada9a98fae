"""End-to-end: real `locust -f locustfiles/chat.py --headless` runs against real HTTP test bots.

The bots are the small test doubles in tests/support_locust.py (a correct one, a forgetting
one, a leaking one, ...), each a real HTTP server in its own process.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter
from urllib.parse import quote

import pytest

from support_locust import REPO, chat_bot, quick_script, run_locust


def aggregated(run_dir) -> dict:
    """Locust's Aggregated row of the test, from the CSV goldfish writes into the run folder at its stop."""
    with open(run_dir / "locust" / "requests.csv", newline="") as f:
        return next(row for row in csv.DictReader(f) if row["Name"] == "Aggregated")


def assert_journal_matches_locust(run, records, kinds=("plant", "probe", "chatter", "burst")):
    """Locust's totals count real HTTP turns only: its Aggregated request count is the journal's turn count
    (a turn the stop interrupted is journaled, as indeterminate, but fired no request event), its
    successes are the journal's ``ok`` turns, and no pseudo-request (recall, cross-talk) is among them."""
    ok = sum(r["outcome"] == "ok" for r in records)
    assert ok > 0
    assert ok == run.chat_successes(), (ok, run.stats)
    reported = [r for r in records if not (r["error"] or "").startswith("interrupted")]
    assert len(reported) == run.count(None, "chat ") == run.count(), (len(reported), run.stats)
    assert len({row["method"] for row in run.stats}) == 1, run.stats  # the turn's method (--chat-method)
    total = aggregated(run.run_dir)
    assert int(total["Request Count"]) == len(reported), (total, len(reported))
    assert int(total["Failure Count"]) == sum(r["outcome"] != "ok" for r in reported)
    assert {r["kind"] for r in records} == set(kinds)


def test_correct_bot_journal_equals_locust_and_nothing_is_flagged(tmp_path):
    with chat_bot("memory") as url:
        run = run_locust(url, tmp_path / "run", "--label", "v9")
    assert run.returncode == 0, run.output
    records = run.records()
    assert_journal_matches_locust(run, records)
    assert {r["verdict"] for r in records if r["kind"] == "probe" and r["outcome"] == "ok"} == {"pass"}
    assert not any(r["crosstalk"] for r in records)
    # every turn of a session has a distinct index and its own token
    by_session = {}
    for r in records:
        by_session.setdefault(r["session"], []).append(r["turn"])
        assert r["token"] == f"{r['session']}t{r['turn']}" and r["message"].startswith(f"[{r['token']}] ")
    assert all(len(turns) == len(set(turns)) for turns in by_session.values())
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["label"] == "v9" and meta["script"] == "support" and meta["end"] >= meta["start"]
    assert meta["run"] == "run" and {r["run"] for r in records} == {"run"}
    assert meta["load"] == {"users": 10, "spawn_rate": 10, "run_time": 4, "shape": None}, meta  # locust_cmd's -u -r -t
    # few stats rows, whatever the number of sessions: one per step kind
    assert len(run.stats) == 4
    # Locust's own report and CSVs are in the run folder, and the run says where its verdict is
    assert (run.run_dir / "locust" / "report.html").stat().st_size > 10_000
    assert f"{run.run_dir}: PASS, exit code 0" in run.output


def test_forgetting_bot_shows_recall_failures_and_exits_1(tmp_path):
    with chat_bot("forget") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), time_s="4s")
    assert run.returncode == 1, run.output
    records = run.records()
    amnesia = sum(r["verdict"] == "amnesia" for r in records)
    assert amnesia > 0 and amnesia == sum(r["verdict"] is not None for r in records)
    assert f"amnesia {amnesia}," in run.output  # the journal's count, as the end of the run says it
    assert_journal_matches_locust(run, records)
    assert "verdict FAIL (online, from the journal" in run.output and "FAIL  probe_amnesia:" in run.output


def test_leaking_bot_shows_crosstalk_naming_the_source_in_the_journal(tmp_path):
    with chat_bot("leaky") as url:
        run = run_locust(url, tmp_path / "run", "--script", REPO / "locustfiles/scripts/bursty.yaml", time_s="4s")
    assert run.returncode == 1, run.output
    records = run.records()
    leaked = [r for r in records if r["crosstalk"]]
    assert leaked and f"cross-talk replies {len(leaked)}" in run.output
    assert_journal_matches_locust(run, records, kinds=("plant", "probe", "burst"))
    sessions = {r["session"] for r in records}
    assert all(src in sessions and src != r["session"] for r in leaked for src in r["crosstalk"])
    assert "FAIL  crosstalk:" in run.output and "cross-talk: session" in run.output


def test_bot_with_another_contract_runs_by_config_file_alone(tmp_path):
    conf = tmp_path / "bot.conf"
    conf.write_text("chat-path = /api/v2/converse\nmessage-field = input.text\nsession-header = X-Conversation-Id\n"
                    "reply-field = data.answer.text\nheader = [Authorization: Bearer t0k, X-Tenant: test]\n"
                    f"think = 0-0.01\nscript = {quick_script(tmp_path)}\n")
    with chat_bot("contract2") as url:
        run = run_locust(url, tmp_path / "run", "--config", conf, time_s="4s")
    assert run.returncode == 0, run.output
    records = run.records()
    assert_journal_matches_locust(run, records)
    assert {r["verdict"] for r in records if r["kind"] == "probe" and r["outcome"] == "ok"} == {"pass"}
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["options"]["headers"] == {"Authorization": "***", "X-Tenant": "***"}


def test_refused_connections_are_journaled_fail_and_exit_non_zero(tmp_path):
    from conftest import free_port

    run = run_locust(f"http://127.0.0.1:{free_port()}", tmp_path / "run", "--think", "0.05", users=3, time_s="6s")
    assert run.returncode == 2, run.output
    records = [r for r in run.records() if not r["error"].startswith("interrupted")]
    assert len(records) > 3  # more turns than users: the run went on after the first refusal
    assert {r["outcome"] for r in records} == {"fail"}
    assert {r["error"] for r in records} == {"connection refused"}
    assert "no turn was acknowledged" in run.output


def test_unparseable_replies_are_journaled_info_and_counted(tmp_path):
    with chat_bot("flaky") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), time_s="4s", users=4)
    assert "Traceback" not in run.output
    records = run.records()
    errors = Counter(r["error"].split(" (")[0] for r in records if r["outcome"] == "info")
    assert errors["reply is not JSON"] > 0 and errors["no reply field 'reply'"] > 0
    assert_journal_matches_locust(run, records)
    failures = {row["name"]: row["num_failures"] for row in run.rows("POST")}
    assert sum(failures.values()) == sum(v for k, v in errors.items() if not k.startswith("interrupted"))


def test_timeout_is_journaled_info(tmp_path):
    with chat_bot("slow", delay=3.0) as url:
        run = run_locust(url, tmp_path / "run", "--timeout", "0.5", users=2, time_s="4s")
    records = run.records()
    assert records and {r["outcome"] for r in records} == {"info"}
    assert Counter(r["error"] for r in records)["timeout"] >= 1
    assert all(r["received"] - r["sent"] < 2.5 for r in records if r["error"] == "timeout")
    assert run.returncode == 2, run.output


def test_malformed_script_stops_before_any_load_with_file_and_line(tmp_path):
    script = tmp_path / "mine.yaml"
    script.write_text("steps:\n  - plant: order number\n  - probe: shoe size\n")
    with chat_bot("memory", log=tmp_path / "bot.log") as url:
        run = run_locust(url, tmp_path / "run", "--script", script, time_s="2s")
    assert run.returncode == 2
    assert f"{script}:3: steps[1].probe" in run.output and "shoe size" in run.output
    assert not (tmp_path / "bot.log").exists() or (tmp_path / "bot.log").read_text() == ""


def test_step_shape_writes_step_boundaries_and_tags_turns(tmp_path):
    with chat_bot("memory") as url:
        run = run_locust(url, tmp_path / "run", "--step-users", "2", "--steps", "3", "--step-duration", "2s",
                         "--think", "0.05", time_s="60s")
    assert run.returncode == 0, run.output
    steps = [json.loads(line) for line in (run.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2] and [s["users"] for s in steps] == [2, 4, 6]
    assert all(s["end"] > s["start"] for s in steps)
    assert all(a["end"] <= b["start"] + 0.01 for a, b in zip(steps, steps[1:]))
    assert steps[-1]["end"] - steps[0]["start"] < 20  # the shape ended the run, not -t 60s
    seen = Counter(r["step"] for r in run.records())
    assert set(seen) <= {0, 1, 2} and seen[2] > 0 and seen[0] > 0


def test_the_end_of_run_audit_takes_the_oracles_store_options(tmp_path):
    """A bot whose history has another layout (an HTTP endpoint, role/content fields) is audited at
    the end of its own run, with the same options `python -m oracle audit` takes."""
    with chat_bot("memory") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--http-url",
                         f"{url}/history/{{session}}", "--role-field", "role", "--content-field", "content",
                         "--settle", "0", time_s="3s")
    assert run.returncode == 0, run.output[-3000:]
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["store"]["reader"] == "http" and summary["verdict"]["result"] == "pass"
    assert summary["metrics"]["stored_loss"]["total"] > 0 and summary["anomalies"] == {}
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["options"]["store"]["role_field"] == "role"


STREAMING_BOTS = {
    "openai": ["--chat-path", "/v1/chats/{session}/completions", "--session-field", "", "--reply-format", "sse",
               "--body", '{"model": "gf", "stream": true, "messages": [{"role": "user"}]}',
               "--message-field", "messages.0.content", "--reply-field", "choices.0.delta.content"],
    "langserve": ["--chat-path", "/chat/stream", "--body", '{"input": {"language": "Italian"}}',
                  "--message-field", "input.question", "--session-field", "config.configurable.session_id",
                  "--reply-format", "sse", "--reply-field", "content"],
    "plaintext": ["--chat-path", "/chat?session={session}", "--session-field", "", "--reply-format", "text"],
    "form": ["--chat-path", "/get", "--body-format", "form", "--message-field", "msg", "--reply-format", "text"],
    "flaskget": ["--chat-method", "GET", "--chat-path", "/get", "--message-field", "msg", "--reply-format", "text"],
    "twilio": ["--chat-path", "/sms", "--body-format", "form", "--message-field", "Body", "--session-field", "From",
               "--reply-format", "xml", "--reply-field", "Message"],
}


@pytest.mark.parametrize("mode", sorted(STREAMING_BOTS))
def test_bots_with_the_session_in_the_path_constant_fields_and_streamed_replies_are_audited(tmp_path, mode):
    """Three API shapes by options alone: the session id in the path or the query, a body template with the
    fields the bot requires (a model, a prompt variable), replies streamed as server-sent events or plain
    text. The journal holds each reply put together, which is what the bot stored: the audit passes."""
    with chat_bot(mode) as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), *STREAMING_BOTS[mode],
                         "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                         "--content-field", "content", "--settle", "0", time_s="3s")
    assert run.returncode == 0, run.output[-3000:]
    records = run.records()
    assert_journal_matches_locust(run, records)
    assert {r["outcome"] for r in records if not (r["error"] or "").startswith("interrupted")} == {"ok"}
    probes = [r for r in records if r["kind"] == "probe" and r["outcome"] == "ok"]
    assert probes and {r["verdict"] for r in probes} == {"pass"} and all(" is " in r["reply"] for r in probes)
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["verdict"]["result"] == "pass" and summary["anomalies"] == {}
    assert summary["metrics"]["stored_loss"]["total"] > 0


def test_a_streaming_bot_that_forgets_fails_the_run(tmp_path):
    with chat_bot("forgetful-stream") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), *STREAMING_BOTS["openai"],
                         time_s="3s")
    assert run.returncode == 1, run.output[-3000:]
    assert {r["verdict"] for r in run.records() if r["kind"] == "probe" and r["outcome"] == "ok"} == {"amnesia"}
    assert "FAIL  probe_amnesia:" in run.output


DIFY = ["--chat-path", "/v1/chat-messages", "--message-field", "query", "--reply-field", "answer"]
ISSUING_BOTS = {  # Dify-like: the id comes back in the reply (or a header) and goes back in the body (or the header)
    "issued": [*DIFY, "--session-field", "conversation_id", "--session-from", "reply:conversation_id",
               "--body", '{"inputs": {}, "user": "goldfish", "conversation_id": ""}'],
    "issued-header": [*DIFY, "--session-from", "header:X-Conversation-Id", "--session-header", "X-Conversation-Id"],
    "cookie": ["--session-from", "cookie:sid", "--session-field", ""],  # the conversation is the session cookie
    # two calls: a request starts the conversation and names it, the turns go to a path under that name
    "threads": ["--start-path", "/threads", "--start-body", '{"assistant": "gf"}', "--session-from", "reply:id",
                "--chat-path", "/threads/{session}/messages", "--session-field", "", "--message-field", "content"],
    # the start answers 201 with an empty body: the conversation's URL is in Location, its id the last segment
    "located": ["--start-path", "/threads", "--start-body", '{"assistant": "gf"}', "--session-from", "header:Location",
                "--chat-path", "/threads/{session}/messages", "--session-field", "", "--message-field", "content"],
}


@pytest.mark.parametrize("config", sorted(ISSUING_BOTS))
def test_bots_that_issue_the_session_id_are_audited_under_their_own_ids(tmp_path, config):
    """The bot names the conversation (in its reply, a header, a cookie, or the reply to a request that starts
    it) and keeps its history under that name: each conversation's first turn goes without an id (with
    --start-path: with the id the start issued, percent-encoded into the path), the rest carry it, every record
    from the first reply on names it, and the audit reads each history under it: PASS, nothing lost. The cookie
    bot's script opens with a double-send: its first turn goes alone (each would start a conversation)."""
    mode, script = config.partition("-")[0], quick_script(tmp_path)
    if mode == "cookie":
        script.write_text(script.read_text().replace("steps:\n", "steps:\n  - burst: 3\n", 1))
    with chat_bot(mode) as url:
        run = run_locust(url, tmp_path / "run", "--script", script, *ISSUING_BOTS[config],
                         "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                         "--content-field", "content", "--settle", "0", time_s="3s")
    assert run.returncode == 0, run.output[-3000:]
    records = [r for r in run.records() if not (r["error"] or "").startswith("interrupted")]
    assert {r["outcome"] for r in records} == {"ok"}
    issued: dict = {}
    for r in records:
        issued.setdefault(r["session"], set()).add(r["bot_session"])
    assert all(len(ids) == 1 and None not in ids for ids in issued.values()), issued
    ids = [next(iter(v)) for v in issued.values()]
    assert len(set(ids)) == len(ids) and not set(ids) & set(issued)  # one per conversation, the bot's own
    assert {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["verdict"]["result"] == "pass" and summary["anomalies"] == {}, summary["anomalies"]
    assert summary["metrics"]["stored_loss"]["total"] >= len(records)
    stored = [json.loads(line) for part in sorted((run.run_dir / "store").glob("sessions.*.jsonl"))
              for line in part.read_text().splitlines()]
    cut = {r["session"] for r in run.records()} - set(issued)  # sessions whose only turn the stop interrupted
    assert stored and all(s["key"].endswith("/history/" + quote(next(iter(issued[s["session"]])), safe=""))
                          for s in stored if s["session"] not in cut)
    if config in ("threads", "located"):  # one start per conversation, a request of its own in Locust's statistics
        assert run.count("POST", "chat start") >= len(issued) and not run.count("POST", "chat start", failures=True)


def test_conversations_a_bot_fails_to_start_fail_the_run(tmp_path):
    """Every third start answers 503, with no fault in force: each such conversation's first turn is journaled
    as never sent (fail, "conversation not started"), so the errors gate fails the run as it would for a turn;
    nothing is wrong in the store."""
    with chat_bot("threads-flaky") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), *ISSUING_BOTS["threads"],
                         "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                         "--content-field", "content", "--settle", "0", time_s="3s")
    assert run.returncode == 1, run.output[-3000:]
    unstarted = [r for r in run.records() if (r["error"] or "").startswith("conversation not started: HTTP 503")]
    assert unstarted and all(r["outcome"] == "fail" and r["turn"] == 0 and r["status"] == 503 for r in unstarted)
    assert run.count("POST", "chat start", failures=True) == len(unstarted)
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["anomalies"] == {} and any(f.startswith("errors:") for f in summary["verdict"]["failed"])


JOBS = ["--poll-path", "/jobs/{reply.job.id}", "--reply-field", "output.text", "--header", "Authorization: Bearer t0k",
        "--role-field", "role", "--content-field", "content", "--settle", "0"]


@pytest.mark.parametrize("poll", ["/jobs/{reply.job.id}", "{reply.job.links.self}", "{header.Location}"],
                         ids=["id", "link", "location"])
def test_a_job_api_is_polled_for_each_reply(tmp_path, poll):
    """A job API answers each turn 202 with a job, whose reply comes at its third GET: every turn is polled
    (with the turn's headers, the job id percent-encoded) until its reply is there, and judged on it: PASS.
    Each GET is a Locust request named ``poll``; the turns' own requests still equal the journal's. A job the
    answer gives only as a link (``{"links": {"self": "/jobs/j%207"}}``) is polled at that link as it is: a
    --poll-path of one {reply.FIELD} alone (it had to start with '/', and the link went percent-encoded). A job
    answered 202 with an empty body and its path in ``Location`` (RFC 9110) is polled there: ``{header.Location}``
    (the turns failed "reply is not JSON")."""
    with chat_bot("jobs-located" if poll == "{header.Location}" else "jobs") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path),
                         *[poll if a == "/jobs/{reply.job.id}" else a for a in JOBS],
                         "--http-url", f"{url}/history/{{session}}", time_s="3s")
    assert run.returncode == 0, run.output[-3000:]
    records = [r for r in run.records() if not (r["error"] or "").startswith("interrupted")]
    assert records and {r["outcome"] for r in records} == {"ok"}
    assert {r["reply"] for r in records if r["kind"] == "plant"} == {"Noted."}
    assert {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}
    assert run.count(None, "chat ") == len(records) and run.chat_successes() == len(records)
    assert run.count("GET", "poll") >= 3 * len(records) and not run.count("GET", "poll", failures=True)


@pytest.mark.parametrize("where", [[], ["--reply-where", "status=done"]])
def test_a_job_that_answers_its_text_so_far_while_it_runs_is_polled_until_it_is_done(tmp_path, where):
    """A job whose answer holds the text generated so far while it runs (Replicate's): the first answer holding
    --reply-field was a piece of the reply, and a correct bot FAILed every probe. A job whose status says it still
    runs is polled on; --reply-where says when a job is done instead (status=done)."""
    with chat_bot("jobs-partial") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), *JOBS, *where,
                         "--http-url", f"{url}/history/{{session}}", time_s="3s")
    assert run.returncode == 0, run.output[-3000:]
    records = [r for r in run.records() if not (r["error"] or "").startswith("interrupted")]
    assert {r["reply"] for r in records if r["kind"] == "plant"} == {"Noted."}
    assert records and {r["verdict"] for r in records if r["kind"] == "probe"} == {"pass"}


def test_a_job_that_never_finishes_is_an_indeterminate_turn(tmp_path):
    """The probes' jobs never finish: each probe is polled until --timeout and journaled ``info`` saying so
    (the bot may still answer and store it), never ``ok`` with the running job's answer as its reply; with
    no probe answered the run cannot PASS."""
    with chat_bot("jobs-stuck") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--timeout", "1",
                         *JOBS, "--http-url", f"{url}/history/{{session}}", time_s="4s")
    assert run.returncode == 1, run.output[-3000:]
    probes = [r for r in run.records() if r["kind"] == "probe" and not (r["error"] or "").startswith("interrupted")]
    assert probes and {r["outcome"] for r in probes} == {"info"}
    assert all(r["error"].startswith("no reply: its job /jobs/j%20") and r["error"].endswith("had none after 1s "
                                                                                          "(--timeout)") for r in probes)
    assert {r["outcome"] for r in run.records() if r["kind"] == "plant"} == {"ok"}


def test_an_exception_in_a_locust_user_never_passes(tmp_path):
    """A user class whose conversations end in an exception (a bug in the harness, or in a user class built on
    ChatUser): every journaled turn is fine and every gate holds, yet conversations were cut short unjudged,
    so the run exits 3, saying why, instead of 0."""
    locustfile = tmp_path / "broken.py"
    locustfile.write_text("from locust import task\n"
                          "from locustfiles import hooks  # noqa: F401\n"
                          "from locustfiles.conversation import ChatUser\n\n\n"
                          "class BrokenUser(ChatUser):\n"
                          "    @task\n"
                          "    def conversation(self):\n"
                          "        super().conversation()\n"
                          "        raise RuntimeError('a bug after the conversation')\n")
    with chat_bot("memory") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "-f", locustfile, "BrokenUser",
                         "--http-url", f"{url}/history/{{session}}", "--role-field", "role", "--content-field",
                         "content", "--settle", "0", cwd=REPO, time_s="2s")
    assert run.returncode == 3, run.output[-3000:]
    assert "NOT TRUSTED — Locust users raised" in run.output and "conversations were cut short" in run.output
    assert "a bug after the conversation" in run.output
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["exit_code"] == 3 and meta["user_exceptions"]["count"] >= 1
    assert meta["untrusted"].startswith("Locust users raised")
    report = (run.run_dir / "report.html").read_text()
    assert "Locust users raised" in report and "cannot be trusted" in report
    assert '<div class="badge warn">NOT TRUSTED</div>' in report
    again = subprocess.run([sys.executable, "-m", "oracle", "audit", str(run.run_dir)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)  # offline, from the snapshot: the same code as the run's
    assert again.returncode == 3, again.stdout + again.stderr
    assert "NOT TRUSTED — Locust users raised" in again.stdout


def test_a_bot_that_answers_in_several_messages(tmp_path):
    """Rasa answers a list of messages, the answer in the second: with --reply-field '*.text' the reply is all
    of them (one per line), so probes pass, and the audit finds nothing wrong with two stored bot messages per
    turn. With the first message only (0.text) every probe would look forgotten."""
    with chat_bot("rasa") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--chat-path",
                         "/webhooks/rest/webhook", "--session-field", "sender", "--reply-field", "*.text",
                         "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                         "--content-field", "content", "--settle", "0", time_s="3s")
    assert run.returncode == 0, run.output[-3000:]
    probes = [r for r in run.records() if r["kind"] == "probe" and r["outcome"] == "ok"]
    assert probes and {r["verdict"] for r in probes} == {"pass"}
    assert all(r["reply"].startswith("Let me check.\nYour ") for r in probes)
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["verdict"]["result"] == "pass" and summary["anomalies"] == {}, summary["anomalies"]


def test_a_bot_that_issues_a_new_id_every_turn_loses_the_conversation(tmp_path):
    """The bot ignores the id it is sent and starts over each turn: probes are amnesia, and the history under the
    id it first issued lacks every later acknowledged turn, which the audit reports as lost."""
    with chat_bot("reissue") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), *ISSUING_BOTS["issued"],
                         "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                         "--content-field", "content", "--settle", "0", time_s="3s")
    assert run.returncode == 1, run.output[-3000:]
    assert {r["verdict"] for r in run.records() if r["kind"] == "probe" and r["outcome"] == "ok"} == {"amnesia"}
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["anomalies"].get("lost", 0) > 0 and summary["verdict"]["result"] == "fail", summary["anomalies"]
    assert any(f.startswith("stored_loss:") for f in summary["verdict"]["failed"])


def test_a_target_that_acknowledges_nothing_is_still_audited_and_never_passes(tmp_path):
    """Every request fails (500) although the bot stores each turn: the store is still audited (a refused
    turn stored anyway would be a finding), and with nothing acknowledged the run is bad input, not a PASS."""
    with chat_bot("broken") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--http-url",
                         f"{url}/history/{{session}}", "--role-field", "role", "--content-field", "content",
                         "--settle", "0", "--gate", "strict,errors=off", time_s="3s")
    assert run.returncode == 2, run.output[-3000:]
    assert "no turn was acknowledged by the target" in run.output
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["turns"]["ok"] == 0 and summary["turns"]["info_stored"] > 0
    assert summary["verdict"]["result"] == "fail" and summary["verdict"]["failed"][0].startswith("nothing measured")
    assert json.loads((run.run_dir / "run.json").read_text())["exit_code"] == 2


def test_a_turn_refused_429_is_never_sent_and_stored_anyway_is_aborted(tmp_path):
    """A 429 tells the client to send the turn again, so the bot must not have stored it: it is journaled
    ``fail``, and a bot whose rate limit sits behind the memory write (every third turn stored, then refused)
    FAILs as ``aborted`` even with the errors gate off; it PASSed, each such turn indeterminate."""
    with chat_bot("limited") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--http-url",
                         f"{url}/history/{{session}}", "--role-field", "role", "--content-field", "content",
                         "--settle", "0", "--gate", "strict,errors=off", time_s="3s")
    assert run.returncode == 1, run.output[-3000:]
    refused = [r for r in run.records() if r["status"] == 429]
    assert refused and {(r["outcome"], r["error"]) for r in refused} == {("fail", "HTTP 429: refused, too many requests")}
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert summary["anomalies"] == {"aborted": len(refused)}, summary["anomalies"]
    assert summary["verdict"]["result"] == "fail" and any(f.startswith("aborted:") for f in summary["verdict"]["failed"])


def test_replica_header_tags_every_turn_with_its_own_response(tmp_path):
    """The test bot answers each turn with X-Turn-Token: the token of the message it answers. Journaled as
    the turn's replica, it must be the record's own token, also for the concurrent turns of double-sends;
    a turn the stop interrupted got no response, so no replica."""
    with chat_bot("memory") as url:
        run = run_locust(url, tmp_path / "run", "--script", REPO / "locustfiles/scripts/bursty.yaml",
                         "--replica-header", "X-Turn-Token", users=8, time_s="4s")
    assert run.returncode == 0, run.output
    records = run.records()
    answered = [r for r in records if r["status"]]
    assert len(answered) > 100 and sum(r["kind"] == "burst" for r in answered) > 50
    assert all(r["replica"] == r["token"] for r in answered), [r for r in answered if r["replica"] != r["token"]][:3]
    assert all(r["replica"] is None for r in records if not r["status"])
