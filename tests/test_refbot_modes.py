"""Each memory mode of the reference bot shows its bug (or, for correct, none) on a real stack:
real redis-server, real HAProxy, real uvicorn replicas, real HTTP, real kills."""
from __future__ import annotations

import json
import signal
import time

import pytest

from conftest import wait_until
from support_refbot import new_session, refbot_stack  # noqa: F401 - fixture

NONCE = "4821-QX7Z"


def plant(session, turn=0, fact="order number", nonce=NONCE):
    return f"[{session}t{turn}] My {fact} is {nonce}."


def probe(session, turn, fact="order number"):
    return f"[{session}t{turn}] What is my {fact}?"


def chatter(session, turn):
    return f"[{session}t{turn}] Nice weather for a chat."


def remembered(reply, nonce=NONCE):
    return nonce in reply


def human_texts(entries):
    return [e["content"] for e in entries if e["type"] == "human"]


def test_correct_remembers_across_replicas_and_a_replica_restart(refbot_stack):
    stack = refbot_stack(replicas=2, think_ms=0, jitter_ms=0)
    s = new_session()
    assert stack.reply(s, plant(s, 0), via="bot-1").startswith("Noted.")
    assert remembered(stack.reply(s, probe(s, 1), via="bot-2"))
    assert remembered(stack.reply(s, probe(s, 2)))  # through HAProxy
    # Stored exactly as LangChain's RedisChatMessageHistory stores it: LPUSH, newest first.
    raw_newest_first = stack.redis().lrange(f"message_store:{s}", 0, -1)
    assert json.loads(raw_newest_first[-1])["data"]["content"] == plant(s, 0)
    assert human_texts(stack.stored(s)) == [plant(s, 0), probe(s, 1), probe(s, 2)]
    assert stack.history(s, via="bot-2") == stack.stored(s)

    old_port = stack.member("bot-1")["port"]
    stack.kill("bot-1")
    stack.restart("bot-1")
    assert stack.member("bot-1")["port"] == old_port
    assert remembered(stack.reply(s, probe(s, 3), via="bot-1"))


def test_process_local_forgets_on_another_replica_and_after_restart(refbot_stack):
    stack = refbot_stack(replicas=2, mode="process-local", think_ms=0, jitter_ms=0)
    s = new_session()
    stack.reply(s, plant(s, 0), via="bot-1")
    assert remembered(stack.reply(s, probe(s, 1), via="bot-1"))
    assert stack.reply(s, probe(s, 2), via="bot-2") == "I don't know your order number."
    assert stack.stored_raw(s) == []  # nothing ever reaches Redis
    # Through HAProxy's round-robin the probe lands on the other replica than the plant.
    u = new_session()
    planted = stack.chat(u, plant(u, 0))
    probed = stack.chat(u, probe(u, 1))
    assert planted.headers["X-Refbot-Replica"] != probed.headers["X-Refbot-Replica"]
    assert probed.json()["reply"] == "I don't know your order number."
    stack.kill("bot-1")
    stack.restart("bot-1")
    assert not remembered(stack.reply(s, probe(s, 3), via="bot-1"))


def test_fresh_per_request_never_remembers(refbot_stack):
    stack = refbot_stack(replicas=1, mode="fresh-per-request", think_ms=0, jitter_ms=0)
    s = new_session()
    stack.reply(s, plant(s, 0), via="bot-1")
    assert stack.reply(s, probe(s, 1), via="bot-1") == "I don't know your order number."
    assert stack.history(s, via="bot-1") == []
    assert stack.stored_raw(s) == []


def foreign_tokens(stack, sessions):
    """(owner, foreign session) pairs: a session's stored user entry carrying another session's token."""
    mixed = []
    for owner in sessions:
        for text in human_texts(stack.stored(owner)):
            author = text[1:19]
            if author != owner:
                mixed.append((owner, author))
    return mixed


def test_shared_instance_is_fine_serially(refbot_stack):
    stack = refbot_stack(replicas=1, mode="shared-instance")
    sessions = [new_session() for _ in range(4)]
    for turn in range(3):
        for s in sessions:
            stack.reply(s, plant(s, turn) if turn == 0 else chatter(s, turn))
    for s in sessions:
        assert remembered(stack.reply(s, probe(s, 3)))
    assert foreign_tokens(stack, sessions) == []


def test_shared_instance_mixes_sessions_under_concurrent_requests(refbot_stack):
    stack = refbot_stack(replicas=1, mode="shared-instance", think_ms=200, jitter_ms=50)
    sessions = [new_session() for _ in range(8)]
    for turn in range(3):  # each round: every session sends one turn at the same time
        responses = stack.concurrently([(s, chatter(s, turn)) for s in sessions])
        assert all(r.status_code == 200 for r in responses)
    mixed = foreign_tokens(stack, sessions)
    assert mixed, "no session's store held another session's turn"


def test_read_modify_write_keeps_serial_turns_but_loses_overlapping_ones(refbot_stack):
    stack = refbot_stack(replicas=2, mode="read-modify-write", think_ms=200, jitter_ms=50)
    s = new_session()
    for turn in range(3):
        stack.reply(s, chatter(s, turn))
    assert human_texts(stack.stored(s)) == [chatter(s, t) for t in range(3)]

    burst = [(s, chatter(s, turn)) for turn in range(3, 9)]  # the double-sending user, six at once
    responses = stack.concurrently(burst)
    assert all(r.status_code == 200 for r in responses), "every burst turn was acknowledged"
    stored = human_texts(stack.stored(s))
    assert stored[:3] == [chatter(s, t) for t in range(3)]
    lost = [m for _, m in burst if m not in stored]
    assert lost, f"no acknowledged burst turn was lost: {stored}"


def test_fire_and_forget_loses_acknowledged_turns_when_killed(refbot_stack):
    stack = refbot_stack(replicas=2, mode="fire-and-forget", think_ms=0, jitter_ms=0, flush_ms=60000)
    s = new_session()
    assert stack.chat(s, plant(s, 0), via="bot-1").status_code == 200
    assert remembered(stack.reply(s, probe(s, 1), via="bot-1"))  # read-your-writes: looks fine
    assert human_texts(stack.history(s, via="bot-1")) == [plant(s, 0), probe(s, 1)]
    assert stack.stored_raw(s) == []  # ...but nothing is in Redis yet
    stack.kill("bot-1", signal.SIGKILL)
    stack.restart("bot-1")
    assert stack.stored_raw(s) == []
    assert not remembered(stack.reply(s, probe(s, 2), via="bot-1"))


def test_fire_and_forget_writes_eventually_and_drains_on_graceful_stop(refbot_stack):
    stack = refbot_stack(replicas=2, mode="fire-and-forget", think_ms=0, jitter_ms=0, flush_ms=300)
    s = new_session()
    stack.reply(s, plant(s, 0), via="bot-1")
    wait_until(lambda: stack.stored_raw(s), timeout=30, what="the background write")
    assert remembered(stack.reply(s, probe(s, 1), via="bot-2"))

    slow = refbot_stack(replicas=1, mode="fire-and-forget", think_ms=0, jitter_ms=0, flush_ms=60000)
    t = new_session()
    slow.reply(t, plant(t, 0), via="bot-1")
    assert slow.stored_raw(t) == []
    slow.kill("bot-1", signal.SIGTERM)  # a graceful stop drains the queue
    assert human_texts(slow.stored(t)) == [plant(t, 0)]


def test_pickle_drift_loads_empty_across_releases(refbot_stack):
    stack = refbot_stack(replicas=2, mode="pickle-drift", releases="v1,v2", think_ms=0, jitter_ms=0)
    assert [stack.http.get(f"{stack.base(b)}/healthz").json()["release"] for b in ("bot-1", "bot-2")] == ["v1", "v2"]
    s = new_session()
    stack.reply(s, plant(s, 0), via="bot-1")
    assert remembered(stack.reply(s, probe(s, 1), via="bot-1"))  # same release: fine
    assert stack.history(s, via="bot-2") == []  # v2 cannot unpickle v1 entries: silently empty
    assert stack.reply(s, probe(s, 2), via="bot-2") == "I don't know your order number."
    raw = stack.stored_raw(s)
    assert len(raw) == 6  # every turn was stored, by both releases
    for entry in raw:  # a JSON reader sees corrupt entries
        with pytest.raises((UnicodeDecodeError, json.JSONDecodeError)):
            json.loads(entry.decode("utf-8"))
    assert all(b"StoredMessage_v" in entry for entry in raw)
    # bot-1 now fails too: the list mixes v1 and v2 pickles
    assert stack.reply(s, probe(s, 3), via="bot-1") == "I don't know your order number."


def test_pickle_drift_same_release_remembers_across_replicas(refbot_stack):
    stack = refbot_stack(replicas=2, mode="pickle-drift", releases="v1", think_ms=0, jitter_ms=0)
    s = new_session()
    stack.reply(s, plant(s, 0), via="bot-1")
    assert remembered(stack.reply(s, probe(s, 1), via="bot-2"))


def test_window_forgets_facts_older_than_k_turns_while_the_store_keeps_them(refbot_stack):
    stack = refbot_stack(replicas=1, mode="window:2", think_ms=0, jitter_ms=0)
    s, t = new_session(), new_session()
    stack.reply(t, plant(t, 0))
    stack.reply(t, chatter(t, 1))
    assert remembered(stack.reply(t, probe(t, 2)))  # the plant is within the last 2 turns

    stack.reply(s, plant(s, 0))
    for turn in (1, 2):
        stack.reply(s, chatter(s, turn))
    assert stack.reply(s, probe(s, 3)) == "I don't know your order number."
    assert plant(s, 0) in human_texts(stack.stored(s))  # the store is perfect
    assert plant(s, 0) in human_texts(stack.history(s, via="bot-1"))


def test_context_key_mismatch_forgets_with_a_perfect_store(refbot_stack):
    stack = refbot_stack(replicas=1, mode="context-key-mismatch", think_ms=0, jitter_ms=0)
    s = new_session()
    stack.reply(s, plant(s, 0))
    assert stack.reply(s, probe(s, 1)) == "I don't know your order number."
    assert human_texts(stack.stored(s)) == [plant(s, 0), probe(s, 1)]
    assert [e["type"] for e in stack.history(s, via="bot-1")] == ["human", "ai", "human", "ai"]


def test_ttl_expires_the_session_after_the_last_write(refbot_stack):
    stack = refbot_stack(replicas=1, mode="ttl:2", think_ms=0, jitter_ms=0)
    s = new_session()
    stack.reply(s, plant(s, 0))
    assert 0 < stack.redis().ttl(f"message_store:{s}") <= 2
    assert remembered(stack.reply(s, probe(s, 1)))
    wait_until(lambda: not stack.redis().exists(f"message_store:{s}"), timeout=30, what="the key to expire")
    assert stack.reply(s, probe(s, 2)) == "I don't know your order number."


@pytest.mark.parametrize("persistence, survives", [("none", False), ("aof-always", True)])
def test_redis_restart_loses_everything_without_persistence_and_nothing_with_aof_always(
        refbot_stack, persistence, survives):
    stack = refbot_stack(replicas=1, persistence=persistence, think_ms=0, jitter_ms=0)
    sessions = [new_session() for _ in range(5)]
    for s in sessions:
        stack.reply(s, plant(s, 0))
    stack.kill("redis", signal.SIGKILL)
    stack.restart("redis")
    kept = [s for s in sessions if stack.stored_raw(s)]
    assert kept == (sessions if survives else [])
    replies = [stack.reply(s, probe(s, 1)) for s in sessions]  # the bots reconnect by themselves
    assert all(remembered(r) == survives for r in replies), replies


def test_concurrent_requests_overlap_within_one_replica(refbot_stack):
    """Think time is awaited, not slept on the event loop: 8 turns of 300 ms finish in far less than 2.4 s."""
    stack = refbot_stack(replicas=1, think_ms=300, jitter_ms=0)
    sessions = [new_session() for _ in range(8)]
    t0 = time.monotonic()
    responses = stack.concurrently([(s, chatter(s, 0), "bot-1") for s in sessions])
    elapsed = time.monotonic() - t0
    assert all(r.status_code == 200 for r in responses)
    assert elapsed < 8 * 0.3 * 0.75, f"requests did not overlap: {elapsed:.2f}s"
