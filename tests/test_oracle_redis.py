"""The oracle against a real redis-server holding histories written by LangChain's own class."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from conftest import wait_until
from oracle.audit import audit_run
from oracle.keys import TemplateMismatch
from oracle.snapshot import SnapshotError
from oracle.store import StoreError, StoreOptions
from support_oracle import (build_world, finding_keys, inject, read_findings, simple_specs, store_with_langchain,
                            write_journal)

ROOT = Path(__file__).resolve().parents[1]


def make_run(tmp_path, server, damage: str | None = None, sessions: int = 6, seed: int = 3):
    world = build_world(simple_specs(sessions), seed=seed)
    expected = inject(world, world.order[1], damage, random.Random(seed)) if damage else set()
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(server.url, world)
    return run, world, expected


def test_clean_store_has_zero_anomalies_and_reaudits_from_snapshot(tmp_path, redis_server):
    run, world, _ = make_run(tmp_path, redis_server)
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert finding_keys(run) == set()
    assert summary["anomalies"] == {}
    # strict gates: only what the journal itself shows fails (failed probes, failed requests), nothing stored
    failed = {r["gate"] for r in summary["verdict"]["rules"] if r["result"] == "fail"}
    journal_shows = {"probe_amnesia": any(r["verdict"] == "amnesia" for r in world.records),
                     "errors": any(r["outcome"] != "ok" for r in world.records)}
    assert failed == {gate for gate, shown in journal_shows.items() if shown}
    assert summary["turns"]["info_stored"] == len(world.order)  # every info turn was stored ("both")
    meta = json.loads((run / "store" / "meta.json").read_text())
    assert meta["complete"] and meta["sessions_read"] == len(world.order)
    redis_server.stop()
    again = audit_run(run)  # no store: from the snapshot
    assert again["metrics"] == summary["metrics"] and again["store"]["source"] == "snapshot"


@pytest.mark.parametrize("damage", ["lost", "vanished", "unanswered", "duplicated", "crosstalk", "corrupt",
                                    "truncated", "aborted", "reordered"])
def test_each_damage_class_is_found(tmp_path, redis_server, damage):
    run, world, expected = make_run(tmp_path, redis_server, damage)
    assert expected, f"the scenario could not inject {damage}"
    audit_run(run, StoreOptions(url=redis_server.url))
    assert finding_keys(run) == expected
    for f in read_findings(run):
        assert f["explanation"] and f["id"].startswith(f["class"] + "-")


def test_answers_langchain_stored_from_a_stream_are_answers(tmp_path, redis_server):
    """A streamed RunnableWithMessageHistory stores each answer as an AIMessageChunk: an assistant role by default
    (it was 'unanswered' on every turn). Told otherwise, the audit stops naming the role that holds the replies
    (every turn 'unanswered' was a false FAIL of a correct bot)."""
    world = build_world(simple_specs(3), seed=4)
    write_journal(tmp_path / "run", world.records)
    store_with_langchain(redis_server.url, world, streamed=True)
    assert b"AIMessageChunk" in b"".join(redis.Redis.from_url(redis_server.url).lrange(f"message_store:{world.order[0]}",
                                                                                       0, -1))
    assert audit_run(tmp_path / "run", StoreOptions(url=redis_server.url))["anomalies"] == {}
    with pytest.raises(TemplateMismatch, match=r"entries of role 'AIMessageChunk'.*--assistant-role AIMessageChunk"):
        audit_run(tmp_path / "run", StoreOptions(url=redis_server.url, assistant_roles=("ai",)))
    redis_server.stop()  # found out after the run: the snapshot's entries, read again with the role named
    from oracle.audit_cli import main
    named = ["--assistant-role", "ai", "--assistant-role", "AIMessageChunk", "--gate", "off"]
    assert main([str(tmp_path / "run"), *named]) == 0
    again = json.loads((tmp_path / "run" / "audit" / "summary.json").read_text())
    assert again["anomalies"] == {} and again["store"]["source"] == "snapshot"
    assert main([str(tmp_path / "run"), "--user-role", "ai"]) == 2  # both a user's and an assistant's: refused


def paused_an_hour(run, world, session) -> None:
    """The session's user paused two hours after its second turn: longer than a 1-hour TTL, so its key may have
    expired while the conversation went on (a key that expired only after it ended is no finding). Twice the TTL:
    the TTL read back is its EXPIRE plus the idle time before it (OBJECT IDLETIME), seconds more under load."""
    for r in world.records:
        if r["session"] == session and r["turn"] >= 2:
            r["sent"] += 7200
            r["received"] = r["received"] + 7200 if r["received"] is not None else None
    write_journal(run, world.records)


def test_expired_when_keys_carry_a_ttl_and_foreign_keys(tmp_path, redis_server):
    run, world, _ = make_run(tmp_path, redis_server)
    client = redis_server.client()
    for s in world.order:
        client.expire(f"message_store:{s}", 3600)
    gone = world.order[2]
    paused_an_hour(run, world, gone)
    client.pexpire(f"message_store:{gone}", 1)
    wait_until(lambda: not client.exists(f"message_store:{gone}"), what="the key to expire")
    client.rpush("message_store:not-ours", "x")
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert finding_keys(run) == {("expired", gone, None)}  # a key that is not ours is information, not a finding
    assert summary["information"]["foreign_keys"] == {"other_goldfish_runs": 0, "not_goldfish": 1,
                                                      "examples": ["message_store:not-ours"], "scanned": True}
    foreign = [json.loads(line) for line in (run / "store" / "foreign.jsonl").read_text().splitlines()]
    assert foreign == [{"key": "message_store:not-ours", "type": "list", "length": 1}]


def three_sessions_one_lost(tmp_path):
    """A journaled world of three sessions, the first of which lost a turn: (world, expected, run)."""
    world = build_world(simple_specs(3), seed=5)
    expected = inject(world, world.order[0], "lost", random.Random(1))
    write_journal(tmp_path / "run", world.records)
    return world, expected, tmp_path / "run"


def plain(m: dict) -> dict:
    """A stored LangChain message as an OpenAI-style one."""
    return {"role": "user" if m["type"] == "human" else "assistant", "content": m["data"]["content"]}


def test_blob_layout_and_custom_shape(tmp_path, redis_server):
    """A JSON-blob key (read-modify-write bots) next to rewritten lists, RPUSH order, role/content shape."""
    world, expected, run = three_sessions_one_lost(tmp_path)
    client = redis_server.client()
    blob_session, list_session, other = world.order
    client.set(f"chat:{blob_session}", json.dumps([plain(m) for _, m in world.stored[blob_session]]))
    client.rpush(f"chat:{list_session}", *[json.dumps(plain(m)) for _, m in world.stored[list_session]])
    client.set(f"chat:{other}", json.dumps({"messages": [plain(m) for _, m in world.stored[other]]}))
    options = StoreOptions(url=redis_server.url, key_template="chat:{session}", direction="rpush",
                           role_field="role", content_field="content")
    audit_run(run, options)
    assert finding_keys(run) == expected
    client.set(f"chat:{other}", b"\x80\x04garbage")
    audit_run(run, options)
    found = read_findings(run)
    assert {(f["class"], f["session"]) for f in found} >= {("corrupt", other)}
    corrupt = next(f for f in found if f["session"] == other and f["class"] == "corrupt")
    assert "pickle" in corrupt["evidence"]["reason"] and corrupt["evidence"]["excerpt"].startswith("hex:8004")
    # nothing of that session can be read back, so each acknowledged turn is lost as well
    ok_turns = {r["turn"] for r in world.turns(other) if r["outcome"] == "ok"}
    assert {f["turn"] for f in found if f["session"] == other and f["class"] == "lost"} == ok_turns


def test_sorted_set_and_stream_layouts(tmp_path, redis_server):
    """A history kept in a stream (fields per message, or one field holding its JSON) or a sorted set
    scored by time reads as the messages in order: a clean one is clean, a lost turn is found, and the
    snapshot re-audits to the same findings."""
    world, expected, run = three_sessions_one_lost(tmp_path)
    client = redis_server.client()
    fields, zset, one_field = world.order
    for _, m in world.stored[fields]:
        client.xadd(f"chat:{fields}", plain(m))
    client.zadd(f"chat:{zset}", {json.dumps(plain(m)): i for i, (_, m) in enumerate(world.stored[zset])})
    for _, m in world.stored[one_field]:
        client.xadd(f"chat:{one_field}", {"message": json.dumps(plain(m))})
    options = StoreOptions(url=redis_server.url, key_template="chat:{session}", direction="rpush",
                           role_field="role", content_field="content")
    summary = audit_run(run, options)
    assert expected and finding_keys(run) == expected
    assert summary["metrics"]["stored_loss"]["count"] == len(expected)
    meta = [json.loads(line) for part in sorted((run / "store").glob("sessions*.jsonl"))
            for line in part.read_text().splitlines()]
    assert {m["session"]: m["type"] for m in meta} == {fields: "stream", zset: "zset", one_field: "stream"}
    again = audit_run(run)  # from the snapshot, no store
    assert finding_keys(run) == expected and again["metrics"] == summary["metrics"]
    # the rolling audit has no cheap digest of these: a judgement of one never stands unread
    from oracle.redis_reader import RedisReader, digest
    reader = RedisReader(options)
    raws = next(reader.read([zset, fields]))
    assert [digest(r) for r in raws] == [["zset"], ["stream"]]
    assert reader.digests([zset, fields]) == {zset: ["zset", "not digested"], fields: ["stream", "not digested"]}


def test_hash_layouts(tmp_path, redis_server):
    """A history kept in a Redis hash: a field named --messages-field holding the JSON list (beside other
    fields), or one field per message numbered 0, 1, 2 ... (out of order on the wire); a hash of anything else
    is corrupt, naming its fields. The lost turn is found, and the snapshot re-audits the same."""
    world, expected, run = three_sessions_one_lost(tmp_path)
    client = redis_server.client()
    field, numbered, other = world.order
    client.hset(f"chat:{field}", mapping={"title": "t", "messages": json.dumps([plain(m) for _, m in world.stored[field]])})
    client.hset(f"chat:{numbered}", mapping={str(i): json.dumps(plain(m)) for i, (_, m) in
                                             reversed(list(enumerate(world.stored[numbered])))})
    client.rpush(f"chat:{other}", *[json.dumps(plain(m)) for _, m in world.stored[other]])
    options = StoreOptions(url=redis_server.url, key_template="chat:{session}", direction="rpush",
                           role_field="role", content_field="content")
    summary = audit_run(run, options)
    assert expected and finding_keys(run) == expected
    assert audit_run(run)["metrics"] == summary["metrics"]
    client.delete(f"chat:{other}")
    client.hset(f"chat:{other}", mapping={"title": "t", "user": "u"})
    audit_run(run, options)
    corrupt = next(f for f in read_findings(run) if f["class"] == "corrupt")
    assert corrupt["session"] == other and "without a field 'messages'" in corrupt["evidence"]["excerpt"], corrupt


def rasa_tracker(session: str, messages: list) -> str:
    """A Rasa RedisTrackerStore value: the dialogue's events, the messages among actions and slots that hold no text."""
    events = [{"event": "action", "name": "action_session_start"}, {"event": "session_started"},
              {"event": "action", "name": "action_listen"}]
    for _, m in messages:
        if m["type"] == "human":
            events.append({"event": "user", "text": m["data"]["content"], "parse_data": {"intent": {"name": "x"}}})
            events.append({"event": "action", "name": "utter_answer", "policy": "RulePolicy"})
        else:
            events += [{"event": "bot", "text": m["data"]["content"], "data": {}},
                       {"event": "action", "name": "action_listen"}]
    return json.dumps({"name": session, "events": events})


def test_a_document_with_the_messages_among_other_events(tmp_path, redis_server):
    """Rasa's tracker store: one JSON document per conversation whose ``events`` list holds the user and bot
    messages among actions, slots and session starts without text (--messages-field events --role-field event
    --content-field text --user-role user --assistant-role bot). The lost turn is found, nothing else."""
    world, expected, run = three_sessions_one_lost(tmp_path)
    client = redis_server.client()
    for s in world.order:
        client.set(f"tracker:{s}", rasa_tracker(s, world.stored[s]))
    options = StoreOptions(url=redis_server.url, key_template="tracker:{session}", role_field="event",
                           content_field="text", user_roles=("user",), assistant_roles=("bot",),
                           messages_field="events")
    summary = audit_run(run, options)
    assert expected and finding_keys(run) == expected
    assert audit_run(run)["metrics"] == summary["metrics"]  # the snapshot re-audit decodes the documents the same way
    client.set(f"tracker:{world.order[1]}", json.dumps({"name": "x", "evnts": []}))
    audit_run(run, options)
    corrupt = next(f for f in read_findings(run) if f["class"] == "corrupt")
    assert "blob is a JSON dict and has no list at 'events'" in corrupt["evidence"]["reason"]


def test_histories_kept_under_ids_the_bot_issued(tmp_path, redis_server):
    """--session-from: the journal names the bot's own id of two conversations (bot_session) and the store keeps
    their histories under it. The audit reads them there (and the third under the journal's id), finds the lost
    turn, takes none of the run's keys for a stranger's, and the snapshot re-audits to the same findings."""
    world = build_world(simple_specs(3), seed=5)
    expected = inject(world, world.order[0], "lost", random.Random(1))
    issued = {s: f"conv-{i}" for i, s in enumerate(world.order[:2])}
    for r in world.records:
        if r["session"] in issued:
            r["bot_session"] = issued[r["session"]]
    write_journal(tmp_path / "run", world.records)
    client = redis_server.client()
    for s in world.order:
        client.rpush(f"chat:{issued.get(s, s)}", *[json.dumps(plain(m)) for _, m in world.stored[s]])
    options = StoreOptions(url=redis_server.url, key_template="chat:{session}", direction="rpush",
                           role_field="role", content_field="content")
    summary = audit_run(tmp_path / "run", options)
    assert expected and finding_keys(tmp_path / "run") == expected
    assert summary["information"]["foreign_keys"]["not_goldfish"] == 0, summary["information"]
    meta = [json.loads(line) for part in sorted((tmp_path / "run" / "store").glob("sessions*.jsonl"))
            for line in part.read_text().splitlines()]
    assert {m["session"]: m["key"] for m in meta} == {s: f"chat:{issued.get(s, s)}" for s in world.order}
    again = audit_run(tmp_path / "run")  # from the snapshot, no store
    assert finding_keys(tmp_path / "run") == expected and again["metrics"] == summary["metrics"]


def test_one_id_issued_to_two_conversations_is_named(tmp_path, redis_server):
    """A bot whose id counter starts again after a restart gives a new conversation an id an earlier one holds: both
    histories go into one key. The cross-talk FAIL was right, but the reuse was never named (bot hunt 15): each
    finding now says which conversations the key was read for, and the run says so once."""
    world = build_world(simple_specs(3), seed=7)
    first, second, third = world.order
    for r in world.records:
        r["bot_session"] = "conv-1" if r["session"] in (first, second) else "conv-2"
    write_journal(tmp_path / "run", world.records)
    client = redis_server.client()
    for s in world.order:
        client.rpush("chat:conv-1" if s != third else "chat:conv-2", *[json.dumps(plain(m)) for _, m in world.stored[s]])
    summary = audit_run(tmp_path / "run", StoreOptions(url=redis_server.url, key_template="chat:{session}",
                                                       direction="rpush", role_field="role", content_field="content"))
    assert summary["verdict"]["result"] == "fail" and summary["anomalies"]["crosstalk"]
    crosstalk = [f for f in read_findings(tmp_path / "run") if f["class"] == "crosstalk"]
    assert {f["session"] for f in crosstalk} == {first, second}
    for f in crosstalk:
        assert f["evidence"]["key_read_for"] == sorted([first, second]) and f["evidence"]["key_read_for_count"] == 2
        assert f"read as the history of 2 of this run's conversations" in f["explanation"]
    said = [p for p in summary["problems"] if "more than one of this run's conversations" in p]
    assert len(said) == 1 and "chat:conv-1, for 2" in said[0] and "one id" in said[0], summary["problems"]


def test_histories_under_a_renamed_key_are_named_as_this_runs(tmp_path, redis_server, monkeypatch):
    """A release renamed the key (chat:<id> became chat:v2:<id>) mid-run: the FAIL was right, but the renamed keys,
    which hold this run's ids, were said to be "not this run's", and the gone sessions not looked for (only a sample
    is) and the split sessions' lost turns were blamed on nothing, or a race or a trim (bot hunt 15 #1)."""
    world = build_world(simple_specs(4), seed=9)
    write_journal(tmp_path / "run", world.records)
    client = redis_server.client()
    split, *renamed = world.order
    for s in world.order:
        entries = [json.dumps(plain(m)) for _, m in world.stored[s]]
        if s == split:  # its first two entries before the release, the rest after
            client.rpush(f"chat:{s}", *entries[:2])
            client.rpush(f"chat:v2:{s}", *entries[2:])
        else:
            client.rpush(f"chat:v2:{s}", *entries)
    from oracle import keys
    monkeypatch.setattr(keys, "SAMPLE", 1)  # one gone session looked for: the others are most likely where it was
    summary = audit_run(tmp_path / "run", StoreOptions(url=redis_server.url, key_template="chat:{session}",
                                                       direction="rpush", role_field="role", content_field="content"))
    assert summary["verdict"]["result"] == "fail"
    foreign = summary["information"]["foreign_keys"]
    assert foreign["named_after_run"] == 4 and len(foreign["named_examples"]) == 4, foreign
    said = [p for p in summary["problems"] if "name this run's sessions in another place" in p]
    assert len(said) == 1 and "chat:v2:gf" in said[0], summary["problems"]
    findings = read_findings(tmp_path / "run")
    gone = [f for f in findings if f["class"] == "vanished"]
    assert len(gone) == 3 and sum("found_under" in f["evidence"] for f in gone) == 1
    for f in gone:
        assert "found_under" in f["evidence"] or "most likely there too" in f["explanation"], f["explanation"]
    lost = [f for f in findings if f["class"] == "lost" and f["session"] == split]
    assert lost and all("other key names (chat:v2:gf" in f["explanation"] for f in lost), lost[0]["explanation"]


def test_a_lone_surrogate_in_a_stored_entry_is_a_finding_not_the_end_of_the_audit(tmp_path, redis_server):
    """A bot that cuts a string inside an emoji stores a "\\ud800" escape. A finding that quoted that entry (a plant
    whose value is broken) could not be written: the audit stopped, exit 2, blaming "a file read", the snapshot left
    incomplete (input hunt 16). It is a finding of that session, its text mended (U+FFFD), and the run FAILs."""
    run, world, _ = make_run(tmp_path, redis_server)
    client = redis_server.client()
    victim = world.order[2]
    key = f"message_store:{victim}"
    entries = client.lrange(key, 0, -1)
    at, plant = next((i, json.loads(e)) for i, e in enumerate(entries)
                     if json.loads(e)["type"] == "human" and "My " in json.loads(e)["data"]["content"])
    text = plant["data"]["content"]
    cut = text.rindex(" is ") + 6
    plant["data"]["content"] = text[:cut] + "\ud800" + text[cut:]  # the planted value cut in two
    client.lset(key, at, json.dumps(plant))  # ensure_ascii: the JSON text holds the escape
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["verdict"]["result"] == "fail", summary["verdict"]
    found = [f for f in read_findings(run) if f["session"] == victim]
    assert found and all("\ud800" not in json.dumps(f, ensure_ascii=False) for f in found)
    assert any("\ufffd" in json.dumps(f, ensure_ascii=False) for f in found), found
    assert json.loads((run / "store" / "meta.json").read_text())["complete"] is True


def test_a_store_flushed_while_a_re_audit_reads_it_keeps_the_runs_evidence(tmp_path, redis_server):
    """The check that a store lost nothing since the run's own read ran before the read only: a FLUSHALL while a live
    re-audit read replaced the earlier complete snapshot and its PASS with "vanished 3800", exit 1 (input hunt 16).
    It runs again as the read ends: refused, the earlier snapshot and tables kept."""
    run, _, _ = make_run(tmp_path, redis_server, sessions=24)
    first = audit_run(run, StoreOptions(url=redis_server.url))
    assert first["anomalies"] == {}
    summary = (run / "audit" / "summary.json").read_bytes()
    flushed = []

    def flush_once(partition, sessions):  # called after each batch judged
        if not flushed:
            redis_server.client().flushall()
            flushed.append(sessions)

    with pytest.raises(TemplateMismatch, match="found as this audit's read ended: the store lost them while it was"):
        audit_run(run, StoreOptions(url=redis_server.url, batch=4, on_batch=flush_once))
    assert flushed
    meta = json.loads((run / "store" / "meta.json").read_text())
    assert meta["complete"] is True and meta["sessions_read"] == 24
    assert (run / "audit" / "summary.json").read_bytes() == summary
    assert audit_run(run)["anomalies"] == {}  # the run's own read, re-judged: not the flushed store's "vanished"


def test_redis_killed_mid_audit_keeps_partial_snapshot_and_rerun_completes(tmp_path, redis_factory):
    server = redis_factory("aof-always")
    run, world, _ = make_run(tmp_path, server, sessions=24)
    killed = []

    calls = []

    def kill_after_two(partition, sessions):  # called after each batch judged
        calls.append(sessions)
        if len(calls) == 2 and not killed:
            server.stop(signal.SIGKILL)
            killed.append(sessions)

    with pytest.raises(StoreError) as failure:
        audit_run(run, StoreOptions(url=server.url, batch=4, timeout_s=3, on_batch=kill_after_two))
    message = str(failure.value)
    meta = json.loads((run / "store" / "meta.json").read_text())
    read = meta["sessions_read"]
    assert meta["complete"] is False and read == 8  # two batches of 4, then the store died
    assert f"127.0.0.1:{server.port}" in message and f"after {read} sessions" in message
    assert "incomplete" in message
    assert sum(len(f.read_text().splitlines()) for f in (run / "store").glob("sessions.*.jsonl")) == read
    assert not (run / "audit" / "anomalies.jsonl").exists()
    with pytest.raises(SnapshotError, match=rf"incomplete: .* stopped after {read} sessions \(\w*Error: "):
        audit_run(run)
    meta["error"] = meta["sessions_read"] = None  # a meta.json written by hand, or damaged: no Python None said
    (run / "store" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SnapshotError, match=r"stopped part way\. Read the store again") as said:
        audit_run(run)
    assert "None" not in str(said.value)
    server.start()
    summary = audit_run(run, StoreOptions(url=server.url, batch=4))
    assert summary["store"]["complete"] and finding_keys(run) == set()
    assert json.loads((run / "store" / "meta.json").read_text())["complete"] is True


def oracle_cli(*args, timeout=120):
    """The real command line, in a subprocess (used once: imports take seconds on a busy machine)."""
    return subprocess.run([sys.executable, "-m", "oracle", "audit", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def in_process(capsys, *args):
    """``python -m oracle audit ...`` through its main(), in this process: (exit code, stdout, stderr)."""
    from oracle.__main__ import main
    code = main(["audit", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_exit_codes_and_messages(tmp_path, redis_server, capsys):
    run, world, _ = make_run(tmp_path, redis_server, "lost")
    code, _, err = in_process(capsys, run)
    assert code == 2 and "pass --store-url" in err
    done = oracle_cli(run, "--store-url", redis_server.url)
    assert done.returncode == 1, done.stderr  # strict: one lost turn fails the run
    assert "FAIL" in done.stdout and "lost 1" in done.stdout
    assert "FAIL          stored_loss: 1 acknowledged turns lost by the store of" in done.stdout
    lenient = "stored_loss=1,probe_amnesia=off,errors=off"
    code, out, _ = in_process(capsys, run, "--gate", lenient)  # from the snapshot now
    assert code == 0 and "PASS" in out and "stored_loss: 1 acknowledged turns lost by the store" in out
    code, out, _ = in_process(capsys, run, "--gate", "probe_amnesia=off,errors=off", "--max-stored-loss", "0")
    assert code == 1 and "stored_loss" in out  # the older spelling over a gate set
    code, _, err = in_process(capsys, run, "--gate", lenient, "--max-stored-loss", "0")  # the same gate twice
    assert code == 2 and "keep one" in err
    code, _, err = in_process(capsys, run, "--gate", "lost=lots")
    assert code == 2 and "--gate 'lost=lots': 'lots' is not a limit" in err
    code, _, err = in_process(capsys, tmp_path / "nope")
    assert code == 2 and "not a run folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = in_process(capsys, tmp_path / "empty")
    assert code == 2 and "no journal" in err
    redis_server.stop()
    code, _, err = in_process(capsys, run, "--store-url", redis_server.url)
    assert code == 2 and f"127.0.0.1:{redis_server.port}" in err
    code, _, err = in_process(capsys, run, "--store-url", "redis://127.0.0.1:1/0", "--key-template", "no-placeholder")
    assert code == 2 and "must contain {session}" in err


def test_damage_done_in_redis_after_langchain_wrote(tmp_path, redis_server):
    """Damage applied with Redis commands to lists LangChain wrote: LREM, LSET, DEL, RPUSH."""
    run, world, _ = make_run(tmp_path, redis_server, sessions=5)
    client = redis_server.client()
    key = "message_store:{}".format
    s_lost, s_corrupt, s_gone, s_dup, s_clean = world.order
    turn = next(r for r in world.turns(s_lost) if r["outcome"] == "ok")
    user = next(e for e in client.lrange(key(s_lost), 0, -1) if turn["token"].encode() in e and b'"human"' in e)
    assert client.lrem(key(s_lost), 0, user) == 1
    client.lset(key(s_corrupt), 0, b"\x80\x04\x95garbage")  # the newest entry: the last turn's reply
    client.delete(key(s_gone))
    first_user = client.lrange(key(s_dup), -1, -1)[0]  # the oldest entry: turn 0's user message
    client.lpush(key(s_dup), first_user)
    audit_run(run, StoreOptions(url=redis_server.url))
    last_ok = max(r["turn"] for r in world.turns(s_corrupt) if r["outcome"] == "ok")
    # the mangled newest entry is the last turn's reply: one corrupt finding tied to that turn, not also unanswered
    assert finding_keys(run) == {("lost", s_lost, turn["turn"]), ("corrupt", s_corrupt, last_ok),
                                 ("vanished", s_gone, None), ("duplicated", s_dup, 0)}


@pytest.mark.parametrize("depth", [1100, 100_000])
def test_an_entry_nested_too_deeply_is_corrupt_and_the_snapshot_reads_back(tmp_path, redis_server, depth):
    """A stored entry that is valid JSON with a field nested deeper than the decoder goes (input hunt 9: W3): the
    audit crashed with RecursionError (exit 3, no verdict) where a garbage entry is a corrupt finding; and the
    snapshot of it must read back in a re-audit, with the same finding."""
    run, world, _ = make_run(tmp_path, redis_server, sessions=3)
    client = redis_server.client()
    s_deep = world.order[0]
    newest = json.loads(client.lindex(f"message_store:{s_deep}", 0))
    deep = json.dumps(newest)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    client.lset(f"message_store:{s_deep}", 0, deep)
    last_ok = max(r["turn"] for r in world.turns(s_deep) if r["outcome"] == "ok")
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert finding_keys(run) == {("corrupt", s_deep, last_ok)} and summary["verdict"]["result"] == "fail"
    again = audit_run(run)  # from the snapshot
    assert finding_keys(run) == {("corrupt", s_deep, last_ok)} and again["anomalies"] == summary["anomalies"]


def test_store_evidence_reads_the_evictions_the_run_s_telemetry_sampled(tmp_path, redis_server):
    """The eviction counter over the run comes from telemetry.jsonl's ``store`` samples (then the audit's
    own INFO), so a session gone before the store began evicting is not called evicted."""
    from contracts.runfolder import RunFolder
    from oracle.judge import Evidence
    from oracle.keys import store_evidence
    from oracle.store import make_reader

    samples = [{"time": 100.0, "store": {"evicted_keys": 0}}, {"time": 110.0, "store": None, "store_error": "x"},
               {"time": 120.0, "store": {"evicted_keys": 7}}]
    RunFolder(tmp_path).telemetry.write_text("".join(json.dumps(s) + "\n" for s in samples))
    evidence = store_evidence(make_reader(StoreOptions(url=redis_server.url)), RunFolder(tmp_path))
    assert [tuple(e) for e in evidence["evictions"][:2]] == [(100.0, 0), (120.0, 7)]  # then the audit's INFO
    gone = Evidence(False, evidence["evictions"][:2])
    assert gone.gone_class(105.0) == "evicted" and gone.gone_class(125.0) == "vanished"


def test_a_key_deleted_younger_than_the_ttl_its_store_gives_is_vanished_though_other_keys_expired(tmp_path, redis_server):
    """A bot whose histories carry a 1-hour TTL and a sweeper that DELs them after 3 s idle, on a Redis whose
    rate-limit keys expire every second: its lost sessions were `expired` ("key expiry"), and with
    `--gate expired=off` (the TTL is by design) the run PASSed with nearly every turn gone. A session younger
    than the shortest TTL the store's keys under the template were given cannot have expired."""
    import time

    from oracle.verdict import parse_gates

    world = build_world(simple_specs(6), start=time.time() - 20, seed=3)  # sessions a few seconds old
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world, ttl=3600)
    client = redis_server.client()
    expired = int(client.info("stats")["expired_keys"])
    client.set("ratelimit:user-1", "1", px=1)  # not under the template: expires (the counter rises)
    wait_until(lambda: int(client.info("stats")["expired_keys"]) > expired, what="a rate-limit key to expire")
    swept = world.order[:2]
    client.delete(*[f"message_store:{s}" for s in swept])
    summary = audit_run(run, StoreOptions(url=redis_server.url), gates=parse_gates("strict,expired=off"))
    assert summary["anomalies"] == {"vanished": 2}
    assert summary["verdict"]["result"] == "fail"
    assert 3590 < json.loads((run / "store" / "meta.json").read_text())["evidence"]["ttl_floor"] <= 3600


def test_only_keys_under_the_template_with_a_ttl_make_a_gone_session_expired(tmp_path, redis_server):
    """A shared staging Redis holds other applications' caches with TTLs; one of them made every session of a bot
    that never wrote its history "expired" (the key's TTL ran out), not "vanished". Only a TTL on a key under the
    key template says this bot's histories expire."""
    run, world, _ = make_run(tmp_path, redis_server, "vanished")
    paused_an_hour(run, world, world.order[1])
    client = redis_server.client()
    client.set("unrelated:cache:1", "x", ex=3600)
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["anomalies"] == {"vanished": 1}
    client.expire(f"message_store:{world.order[0]}", 3600)
    expired = int(client.info("stats")["expired_keys"])
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["anomalies"] == {"expired" if expired else "vanished": 1}  # a store that never expired a key
    client.set("message_store:short-lived", "x", px=1)                       # ...expires one now
    wait_until(lambda: client.get("message_store:short-lived") is None and
               int(client.info("stats")["expired_keys"]) > expired, what="a key expired")
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["anomalies"] == {"expired": 1}


def test_a_shared_store_s_foreign_keys_are_all_counted_and_the_first_listed(tmp_path, redis_server, monkeypatch):
    """A staging Redis with a million other keys under message_store:* took 31 s of TYPE and length calls per audit
    and wrote 63 MB of store/foreign.jsonl into every run folder. The first MAX_FOREIGN_LISTED are listed, every
    one is counted, and a re-audit from the snapshot says the same counts."""
    from oracle import redis_reader

    monkeypatch.setattr(redis_reader, "MAX_FOREIGN_LISTED", 5)
    run, world, _ = make_run(tmp_path, redis_server)
    client = redis_server.client()
    client.mset({f"message_store:other-app-{i}": "x" for i in range(40)})
    client.mset({f"message_store:gf{i:016x}": "x" for i in range(3)})  # another goldfish run's
    live = audit_run(run, StoreOptions(url=redis_server.url))
    counts = {"other_goldfish_runs": 3, "not_goldfish": 40}
    assert {k: live["information"]["foreign_keys"][k] for k in counts} == counts
    listed = (run / "store" / "foreign.jsonl").read_text().splitlines()
    assert 5 <= len(listed) < 43 and all(json.loads(line)["type"] == "string" for line in listed)
    offline = audit_run(run)
    assert {k: offline["information"]["foreign_keys"][k] for k in counts} == counts


def test_a_store_not_scanned_says_so_rather_than_zero_foreign_keys(tmp_path, redis_server, capsys):
    """--no-scan looked for no key that is not the run's, yet the summary said 0 of them, as a scan that found none
    would. Now the summary, the audit's output, a re-audit from the snapshot and the report say it was not scanned."""
    from oracle.audit_cli import main
    from oracle.explain import NOT_SCANNED
    from oracle.report import information

    run, _, _ = make_run(tmp_path, redis_server)
    redis_server.client().rpush("message_store:not-ours", "x")
    live = audit_run(run, StoreOptions(url=redis_server.url, scan_foreign=False))
    assert live["information"]["foreign_keys"] == {"other_goldfish_runs": 0, "not_goldfish": 0, "examples": [],
                                                   "scanned": False}
    assert NOT_SCANNED in information(live)
    assert main([str(run)]) in (0, 1) and f"information: {NOT_SCANNED}" in capsys.readouterr().out  # from the snapshot
    assert audit_run(run)["information"]["foreign_keys"]["scanned"] is False
    assert audit_run(run, StoreOptions(url=redis_server.url))["information"]["foreign_keys"]["not_goldfish"] == 1


def test_unreadable_journal_lines_fail_the_strict_verdict_counted_exactly_with_the_first_100_named(
        tmp_path, redis_server, capsys):
    from oracle.audit import journal_verdict
    from support_oracle import write_journal

    run, world, _ = make_run(tmp_path, redis_server)
    garbage = [f"not a turn {i}\n" for i in range(150)] + [f'{{"session": "gf{i:016x}", "turn": "x"}}\n'
                                                          for i in range(60)]  # names a session, is no turn
    write_journal(run, world.records, extra_lines={0: garbage + [json.dumps(world.records[0])[:40]]})  # torn tail
    code, out, _ = in_process(capsys, run, "--store-url", redis_server.url, "--gate", "strict,probe_amnesia=off,errors=off")
    summary = json.loads((run / "audit" / "summary.json").read_text())
    assert code == 1 and "FAIL          unreadable: 210 journal lines that are not a turn of" in out
    assert summary["observed"]["unreadable"] == {"count": 210, "total": summary["turns"]["total"] + 210}
    # the 210 lines, and one more: the world's failed probes over a store that kept every turn (stored_yet_forgotten)
    assert len(summary["problems"]) == 100 and summary["problems_total"] == 211
    assert summary["problems"][0].startswith(f"{run / 'journal' / 'local-0.jsonl'}:{len(world.records) + 1}: ")
    assert "201 more warnings (summary.json lists the first 100)" in out
    assert summary["anomalies"] == {} and summary["sessions"] == len(world.order)  # the readable rest is judged
    code, out, _ = in_process(capsys, run, "--gate", "strict,probe_amnesia=off,errors=off,unreadable=off")
    assert code == 0, out
    online = journal_verdict(run)
    assert online["observed"]["unreadable"]["count"] == 210 and "unreadable" in " ".join(online["verdict"]["failed"])


def test_a_run_the_target_acknowledged_nothing_of_is_no_pass(tmp_path, redis_server, capsys):
    from support_oracle import write_journal

    run, world, _ = make_run(tmp_path, redis_server)
    refused = [{**r, "outcome": "fail", "reply": None, "received": None} for r in world.records]
    write_journal(run, refused)  # the bot was down all along: every turn refused, nothing stored is expected
    redis.Redis.from_url(redis_server.url).flushdb()
    for gates in ("strict,errors=off", "strict"):  # strict: every refused turn fails the errors gate too (it was 1)
        code, out, _ = in_process(capsys, run, "--store-url", redis_server.url, "--gate", gates)
        summary = json.loads((run / "audit" / "summary.json").read_text())
        assert code == 2 and "NOTHING MEASURED — nothing measured: no turn was acknowledged by the target" in out, gates
        assert summary["verdict"]["result"] == "fail" and summary["turns"]["ok"] == 0
    store_with_langchain(redis_server.url, world)  # ... but the refused turns are stored: that is a finding
    for gates in ("strict,errors=off", "strict"):
        code, out, _ = in_process(capsys, run, "--store-url", redis_server.url, "--gate", gates)
        assert code == 1 and "aborted" in out


def test_a_damaged_snapshot_or_run_folder_is_bad_input_never_a_quieter_verdict(tmp_path, redis_server, capsys):
    import shutil

    run, world, _ = make_run(tmp_path, redis_server, "lost", sessions=24)
    assert in_process(capsys, run, "--store-url", redis_server.url)[0] == 1  # one lost turn: strict fails
    store = run / "store"
    parts = sorted(p for p in store.glob("sessions.*.jsonl") if p.stat().st_size)
    assert len(parts) >= 2
    damaged = tmp_path / "damaged"
    shutil.copytree(run, damaged)  # two partitions' files swapped: their sessions are not where they belong
    a, b = (damaged / "store" / p.name for p in parts[:2])
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    code, _, err = in_process(capsys, damaged)
    assert code == 2 and "lacks" in err and "the snapshot is damaged" in err, err
    (damaged / "store" / parts[0].name).write_bytes(b"")  # emptied: the same
    assert in_process(capsys, damaged)[0] == 2
    line = json.loads(parts[0].read_text().splitlines()[0])
    del line["exists"]
    (damaged / "store" / parts[0].name).write_text(json.dumps(line) + "\n")
    code, _, err = in_process(capsys, damaged)
    assert code == 2 and f"{damaged / 'store' / parts[0].name}:1: not a snapshot line" in err, err
    makers = {"Is a directory": os.mkdir, "not a regular file but a FIFO": os.mkfifo,  # a FIFO never opens alone
              "not a regular file but a character device": lambda path: os.symlink("/dev/zero", path)}  # nor ends
    for where, args in (("journal/x.jsonl", ()), ("chaos.jsonl", ()), ("store/meta.json", ()),
                        ("workers/x.jsonl", ()), ("telemetry.jsonl", ("--store-url", redis_server.url))):
        for n, (why, make) in enumerate(makers.items()):
            broken = tmp_path / f"{where.replace('/', '-')}-{n}"
            shutil.copytree(run, broken)
            (broken / where).unlink(missing_ok=True)
            (broken / where).parent.mkdir(exist_ok=True)
            make(broken / where)
            code, _, err = in_process(capsys, broken, *args)
            assert code == 2 and f"cannot read {broken / where}: {why}" in err, (where, err)


@pytest.mark.parametrize("option, value, fragment", [
    ("--window", "0", "shorter than 1s"), ("--window", "1e-9", "shorter than 1s"), ("--window", "nan", "finite"),
    ("--window", "-1", "finite"), ("--window", "inf", "finite"), ("--recovery", "nan", "finite"),
    ("--recovery", "-5", "finite"), ("--window", "soon", "is not a duration"), ("--jobs", "0", "is not at least 1"),
    ("--jobs", "-3", "is not at least 1"), ("--jobs", "two", "is not a whole number")])
def test_window_and_recovery_are_durations_checked_before_anything_is_read(tmp_path, capsys, option, value, fragment):
    with pytest.raises(SystemExit) as exit_:
        in_process(capsys, tmp_path, f"{option}={value}")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {option}: " in err and fragment in err, err


def test_window_takes_the_duration_grammar(tmp_path, redis_server, capsys):
    run, _, _ = make_run(tmp_path, redis_server)
    assert in_process(capsys, run, "--store-url", redis_server.url, "--window", "1m", "--recovery", "500ms",
                      "--gate", "off")[0] == 0
    assert json.loads((run / "audit" / "summary.json").read_text())["window_s"] == 60.0


@pytest.mark.parametrize("ttl, warned", [(30, True), (7200, False)])
def test_history_keys_that_expire_within_the_hour_are_named_beside_the_verdict(tmp_path, redis_server, ttl, warned):
    """A bot whose histories expire 30 s after the last write forgets a user who pauses for a minute; an audit that
    read the keys in time PASSed silently. Its TTL is named beside the verdict; a TTL of hours is not."""
    run, world, _ = make_run(tmp_path, redis_server)
    client = redis_server.client()
    for s in world.order:
        client.expire(f"message_store:{s}", ttl)
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["anomalies"] == {}, summary["anomalies"]
    said = [p for p in summary["problems"] if "expire" in p and "TTL" in p]
    assert bool(said) == warned, summary["problems"]
    if warned:
        assert "about 30 s" in said[0] or "about 29 s" in said[0], said[0]


def stored_with_a_ttl(redis_server, world):
    """The world stored as LangChain stores it with a 30 s TTL, once the store has expired a key under the template
    (so a gone key may have expired); the client."""
    store_with_langchain(redis_server.url, world, ttl=30)
    client = redis_server.client()
    expired = int(client.info("stats")["expired_keys"])
    client.set("message_store:short-lived", "x", px=1)
    wait_until(lambda: client.get("message_store:short-lived") is None and
               int(client.info("stats")["expired_keys"]) > expired, what="a key to expire")
    return client


def test_no_probe_answered_and_every_history_expired_after_its_end_is_nothing_measured(tmp_path, redis_server):
    """A script without recall probes, every key expired once its conversation was over, before the audit read it:
    nothing was judged, and the run PASSed (bot hunt 17: a TTL never refreshed, expiring mid-conversation, looked
    the same). Exit 2, NOTHING MEASURED, naming --settle and --audit-every; no 'facts kept' warning either."""
    import time

    from support_oracle import TurnSpec
    from oracle.verdict import NOTHING_JUDGED, exit_code

    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("chatter", "ok")] for _ in range(4)]
    world = build_world(specs, start=time.time() - 120, seed=4)
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = stored_with_a_ttl(redis_server, world)
    client.delete(*[f"message_store:{s}" for s in world.order])  # as their TTL would have
    (run / "telemetry.jsonl").write_text(json.dumps(  # the run's telemetry saw the keys with their 30 s TTL
        {"time": world.records[0]["sent"] + 1, "users": 4, "store": {"template_ttls": {s: 30 for s in world.order}}})
        + "\n")

    summary = audit_run(run, StoreOptions(url=redis_server.url))

    assert summary["anomalies"] == {} and summary["observed"]["stored_loss"]["total"] == 0
    assert summary["verdict"]["failed"] == [NOTHING_JUDGED] and exit_code(summary["verdict"]) == 2
    rules = {r["gate"]: r["result"] for r in summary["verdict"]["rules"]}
    assert rules["stored_loss"] == "not measured"
    assert not any("not read back" in p for p in summary["problems"])


def test_a_key_that_expired_after_its_conversation_ended_is_no_finding(tmp_path, redis_server):
    """A bot that keeps a history N seconds after its last message (LangChain's ``ttl``), audited more than N
    seconds after a conversation ended: its key is gone by design and its user never came back, yet every such
    session was `expired` and its turns stored loss, so a soak longer than the TTL FAILed a correct bot (bot hunt 9,
    real LangChain). It is no finding now, said in a warning, and its turns are out of stored loss; a session with a
    pause as long as the TTL inside it is still `expired`."""
    import time

    world = build_world(simple_specs(6), start=time.time() - 120, seed=4)  # ended about 110 s ago, pauses of 0.2-1.2 s
    paused = world.order[2]
    late = [r for r in world.records if r["session"] == paused and r["turn"] >= 2]
    for r in late:  # this user came back after 40 s: longer than the keys' TTL
        r["sent"] += 40
        r["received"] = r["received"] + 40 if r["received"] is not None else None
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = stored_with_a_ttl(redis_server, world)
    after_end, kept = world.order[:2], world.order[3:]
    client.delete(*[f"message_store:{s}" for s in after_end + [paused]])  # as their TTL would have

    summary = audit_run(run, StoreOptions(url=redis_server.url))

    assert summary["anomalies"] == {"expired": 1}, summary["anomalies"]
    assert {f["session"] for f in read_findings(run)} == {paused}
    ok_turns = {s: sum(r["outcome"] == "ok" for r in world.records if r["session"] == s) for s in world.order}
    stored_loss = summary["observed"]["stored_loss"]
    assert stored_loss["total"] == sum(ok_turns[s] for s in kept + [paused])
    assert stored_loss["count"] == ok_turns[paused]
    # the headline metric (compare and trend pool it) is over the same judged turns: "0 of 874" was read as measured
    metric = summary["metrics"]["stored_loss"]  # (verdict hunt 17)
    assert (metric["count"], metric["total"]) == (ok_turns[paused], stored_loss["total"])
    said = [p for p in summary["problems"] if "expired after their conversations ended" in p]
    assert len(said) == 1 and "the keys of 2 session(s)" in said[0], summary["problems"]
