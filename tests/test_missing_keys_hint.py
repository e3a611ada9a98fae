"""A bot keeping one Redis hash per message (langchain-redis: ``chat:<session>:<message id>``) under a wrong template.

The audit stopped (exit 2, right) but suggested ``--key-template 'chat:{session}:<one message's id>'``; following
it, every other message was 'gone' (exit 1, 55 sessions whose whole history is gone). No template names such a
history: the message must say so and point to --reader, never bake a message id in.
"""
from __future__ import annotations

import time

import pytest

from oracle.audit import audit_run
from oracle.keys import TemplateMismatch
from oracle.store import StoreOptions
from support_oracle import TurnSpec, build_world, write_journal


def journaled_world(tmp_path):
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(4)],
                        start=time.time() - 60, seed=5)
    write_journal(tmp_path, world.records)
    return world


def test_one_hash_per_message_is_named_not_turned_into_a_template(tmp_path, redis_server):
    world = journaled_world(tmp_path)
    pipe = redis_server.client().pipeline()
    for s in world.order:
        for n, (_, m) in enumerate(world.stored[s]):
            mid = f"{time.time_ns() + n:020d}{n:06x}"  # time-ordered ids: they share leading digits
            pipe.hset(f"chat:{s}:{mid}", mapping={"session_id": s, "type": m["type"], "content": m["data"]["content"]})
            pipe.zadd(f"chat:{s}:index", {mid: n})
    pipe.execute()
    with pytest.raises(TemplateMismatch) as err:
        audit_run(tmp_path, StoreOptions(url=redis_server.url, key_template="chat:{session}"))
    message = str(err.value)
    assert "try --key-template" not in message, message
    assert "The bot keeps one key per message under 'chat:{session}:*'" in message, message
    assert "--reader" in message and 'docs/oracle.md "Readers"' in message


def test_a_history_key_beside_a_metadata_key_is_still_suggested(tmp_path, redis_server):
    """A few keys per session whose names recur for every session: one of them is the template."""
    world = journaled_world(tmp_path)
    client = redis_server.client()
    for s in world.order:
        client.rpush(f"bot:{s}", *[m["data"]["content"] for _, m in world.stored[s]])
        client.hset(f"bot:{s}:meta", mapping={"title": "Support chat"})
    with pytest.raises(TemplateMismatch, match=r"try --key-template 'bot:\{session\}(:meta)?'") as err:
        audit_run(tmp_path, StoreOptions(url=redis_server.url, key_template="chat:{session}"))
    assert "one key per message" not in str(err.value)


def test_one_key_per_message_numbered_by_a_counter_per_session_is_named(tmp_path, redis_server):
    """``msg:<session>:000001`` from an INCR per session gives every session the same key names, which read as a
    history key beside a metadata key: the audit suggested --key-template 'msg:{session}:000022', one message."""
    world = journaled_world(tmp_path)
    pipe = redis_server.client().pipeline()
    for s in world.order:
        for n, (_, m) in enumerate(world.stored[s], 1):
            pipe.set(f"msg:{s}:{n:06d}", '{"role": "%s", "content": "%s"}' % (m["type"], m["data"]["content"]))
        pipe.set(f"seq:{s}", len(world.stored[s]))
    pipe.execute()
    with pytest.raises(TemplateMismatch) as err:
        audit_run(tmp_path, StoreOptions(url=redis_server.url, key_template="msg:{session}"))
    message = str(err.value)
    assert "try --key-template" not in message, message
    assert "The bot keeps one key per message under 'msg:{session}:*'" in message, message


def test_a_counter_key_found_first_does_not_hide_the_message_keys(redis_server):
    """The session's id was first found in its counter key (seq:<id>), which SCAN may list first: the message keys
    were looked for under seq: only, and the audit advised --key-template 'seq:{session}' (a CI run)."""
    from oracle.keys import _message_keys

    client = redis_server.client()
    sessions = ["gf0000000000000001", "gf0000000000000002"]
    for s in sessions:
        for n in range(1, 6):
            client.set(f"msg:{s}:{n:06d}", "{}")
        client.set(f"seq:{s}", 5)
    found = {sessions[0]: [(0, f"seq:{sessions[0]}"), (0, f"msg:{sessions[0]}:000001")],
             sessions[1]: [(0, f"msg:{sessions[1]}:000003")]}
    assert _message_keys(client, found)[0] == "msg:{session}:*"


def test_a_store_restarted_after_the_run_ended_is_no_loss_and_keeps_the_snapshot(tmp_path, redis_server, capsys):
    """A run PASSed; its Redis restarted later without persistence (a staging Redis rebooted overnight). A live
    re-audit said "FAIL: 17 sessions whose whole history is gone", exit 1, and replaced the PASSing snapshot, so the
    snapshot re-audit FAILed too (verdict hunt 10). A restart after run.json's end says nothing of the run: exit 2,
    the run's own snapshot kept."""
    import json

    from oracle import audit_cli
    from support_oracle import write_snapshot

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(4)],
                        seed=6)  # the run was long ago; the server started since
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    last = max(r["received"] or r["sent"] for r in world.records)
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": world.records[0]["sent"],
                                                   "end": last + 60}))
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 0  # its own reading PASSes
    before = (tmp_path / "store" / "meta.json").read_text(), (tmp_path / "audit" / "summary.json").read_text()
    capsys.readouterr()

    assert audit_cli.main([str(tmp_path), "--store-url", redis_server.url, "--jobs", "1"]) == 2
    said = capsys.readouterr()
    assert "after this run ended" in said.err and "without --store-url re-judges its snapshot" in said.err, said.err
    assert (tmp_path / "store" / "meta.json").read_text() == before[0]
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 0


def test_replies_kept_in_a_key_beside_the_sessions_are_named(tmp_path, redis_server):
    """A bot keeping its replies in message_store:<id>:ai, beside the user's messages in message_store:<id>: every
    turn 'unanswered', explained as an answer never kept, with no word of the keys that hold them (bot hunt 9)."""
    import json

    world = journaled_world(tmp_path)
    client = redis_server.client()
    for s in world.order:
        for _, m in world.stored[s]:
            key = f"message_store:{s}" + (":ai" if m["type"] == "ai" else "")
            client.lpush(key, json.dumps(m))
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url))
    assert summary["anomalies"].get("unanswered"), summary["anomalies"]
    said = [p for p in summary["problems"] if "keys named after this run's sessions with more after the id" in p]
    assert len(said) == 1 and ":ai, message_store:" in said[0], summary["problems"]
    client.flushdb()
    for s in world.order:  # the same bot without the sibling keys: nothing to name
        for _, m in world.stored[s]:
            if m["type"] != "ai":
                client.lpush(f"message_store:{s}", json.dumps(m))
    client.set("message_store:unrelated", "x")
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url))
    assert not [p for p in summary["problems"] if "more after the id" in p], summary["problems"]


def test_the_message_keys_are_found_whichever_key_of_the_first_session_was_found(redis_server):
    """find_session_keys stops at a session's first key: the first session known only by its counter (seq:<id>) had
    the message keys looked for under seq: only, and the advice depended on SCAN's order (a CI run)."""
    from oracle.keys import _message_keys

    client = redis_server.client()
    a, b = "gf00000000000000a1", "gf00000000000000b2"
    for s in (a, b):
        client.set(f"seq:{s}", 3)
        for n in range(1, 4):
            client.set(f"msg:{s}:{n:06d}", "x")
    pattern, _ = _message_keys(client, {a: [(0, f"seq:{a}")], b: [(0, f"msg:{b}:000002")]})
    assert pattern == "msg:{session}:*"


def sessions_under(redis_server, tmp_path, keys_of) -> str:
    """The TemplateMismatch of an audit under the default template, the sessions' histories under ``keys_of(i, s)``."""
    world = journaled_world(tmp_path)
    client = redis_server.client()
    for i, s in enumerate(world.order):
        contents = [m["data"]["content"] for _, m in world.stored[s]]
        keys = keys_of(i, s)
        for k, key in enumerate(keys):
            client.rpush(key, *contents[k::len(keys)])
    with pytest.raises(TemplateMismatch) as err:
        audit_run(tmp_path, StoreOptions(url=redis_server.url))
    return str(err.value)


def test_sessions_under_a_prefix_per_user_get_no_template_that_reads_a_third_of_them(tmp_path, redis_server):
    """`t<n>:message_store:<id>`, a prefix per tenant: the advice named one prefix, and following it FAILed the rest
    of the sessions as gone (bot hunt 11, W1)."""
    message = sessions_under(redis_server, tmp_path, lambda i, s: [f"t{i % 3}:message_store:{s}"])
    assert "try --key-template" not in message and "different sessions under different keys" in message, message
    assert "--reader" in message


def test_a_history_split_over_keys_gets_no_template_that_reads_one_page(tmp_path, redis_server):
    message = sessions_under(redis_server, tmp_path, lambda i, s: [f"chat:{s}:p0", f"chat:{s}:p1"])
    assert "try --key-template" not in message and "in 2 keys (chat:{session}:p0, chat:{session}:p1)" in message


def test_one_key_per_message_under_ids_the_bot_issued_gets_no_template_that_reads_one_message(tmp_path,
                                                                                             redis_server):
    """`history:<uuid>:<n>` = one JSON message each, under ids the bot issued (--session-from): the keys were looked
    for under goldfish's own ids only, so the advice was `try --key-template 'history:{session}:1'`, and following
    it, "not messages with a role and a text" for the right --role-field (bot hunt 16)."""
    import json
    import uuid

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]] * 3)
    issued = {s: str(uuid.UUID(int=i + 1)) for i, s in enumerate(world.order)}
    for r in world.records:
        r["bot_session"] = issued[r["session"]]
    write_journal(tmp_path, world.records)
    client = redis_server.client()
    for s in world.order:
        for n, (_, m) in enumerate(world.stored[s], 1):
            client.set(f"history:{issued[s]}:{n}", json.dumps({"role": m["type"], "content": m["data"]["content"]}))
        client.set(f"history:{issued[s]}:count", len(world.stored[s]))  # INCR'd for the next message's number
    with pytest.raises(TemplateMismatch) as err:
        audit_run(tmp_path, StoreOptions(url=redis_server.url, key_template="history:{session}", role_field="role",
                                         content_field="content"))
    message = str(err.value)
    assert "try --key-template" not in message and "one key per message under 'history:{session}:*'" in message, \
        message
    assert "--reader" in message
