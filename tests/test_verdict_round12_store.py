"""Verdict hunt 12: a live re-audit of a store that lost keys since the run's audit, and a TTL floor read by others.

- W2 reaudit_after_ttl_expiry_flips_fail_to_pass: a bot keeping histories 8 s after the last message (by design)
  that dropped entries FAILed; `oracle audit RUN --store-url` once every key had expired said PASS (stored loss
  judged over 0 turns) and replaced store/ and audit/summary.json: the FAIL could not be recovered. The run's own
  complete read of the store found keys that are gone now: the re-audit is refused (exit 2), the snapshot kept. Any
  one key gone since is enough.
- W4 ttl_bot_fails_when_another_run_reads: the TTL a key was given is bounded by its TTL left + OBJECT IDLETIME,
  which any read restarts: a key read a moment before it expired pulled the floor (the minimum) to 0, and a correct
  bot's by-design expiries read as "expired" (FAIL). The floor is the largest of the keys' bounds now.
Real redis-server (tests/conftest.py), real audits of journaled runs (support_oracle).
"""
from __future__ import annotations

import json
import random
import time

import pytest

from oracle import audit_cli
from oracle.audit import audit_run
from oracle.keys import TemplateMismatch, ttl_floor
from oracle.store import StoreOptions
from oracle.verdict import exit_code
from support_oracle import TurnSpec, build_world, fill_redis, inject, session_id, write_journal

TEMPLATE = "message_store:{session}"


def expire_now(client, keys) -> None:
    """Let ``keys`` expire (a short PEXPIRE, so the server counts them expired), polled until they are gone."""
    for key in keys:
        client.pexpire(key, 20)
    deadline = time.monotonic() + 10
    while any(client.exists(k) for k in keys):  # Redis expires lazily on access and actively in the background
        assert time.monotonic() < deadline, "keys did not expire"
        time.sleep(0.02)


def ttl_run(tmp_path, client, sessions: int, seed: int):
    """A run of a bot whose keys carry a 30 s TTL: conversations a minute old, its telemetry saw the TTL."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(sessions)], start=time.time() - 90, seed=seed)
    world.ttl = {s: 30 for s in world.order}
    now = time.time()
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": now - 91, "end": now}))
    (tmp_path / "telemetry.jsonl").write_text(json.dumps(
        {"time": now - 60, "users": sessions, "rss": {}, "store": {"template_ttl_floor": 29.0}, "store_error": None})
        + "\n")
    return world


def test_a_live_reaudit_after_a_ttl_bots_keys_expired_does_not_replace_its_fail(tmp_path, redis_server):
    """The run FAILed (an acknowledged turn lost), one session's key already expired by its own audit (after its
    conversation: by design). Every key then expires; the live re-audit said PASS over 0 turns and replaced the
    snapshot. Refused now, exit 2, snapshot and summary kept; the snapshot re-audit still FAILs."""
    client = redis_server.client()
    world = ttl_run(tmp_path, client, 8, seed=23)
    assert inject(world, world.order[1], "lost", random.Random(3))
    write_journal(tmp_path, world.records)
    fill_redis(client, world)
    expire_now(client, [TEMPLATE.format(session=world.order[0])])  # after its conversation, before the audit
    world.gone.add(world.order[0])
    store = StoreOptions(url=redis_server.url)
    first = audit_run(tmp_path, store, jobs=1)
    assert exit_code(first["verdict"]) == 1 and first["anomalies"] == {"lost": 1}
    assert [p for p in first["problems"] if "1 session(s) expired after their conversations ended" in p]
    snapshot = (tmp_path / "store" / "meta.json").read_text()
    summary = (tmp_path / "audit" / "summary.json").read_text()

    expire_now(client, [TEMPLATE.format(session=s) for s in world.order if s not in world.gone])
    with pytest.raises(TemplateMismatch, match=r"no longer holds what the run's audit read.* 7 of the 7 sessions "
                                               r"whose keys .* are gone now.*without --store-url"):
        audit_run(tmp_path, store, jobs=1)
    assert audit_cli.main([str(tmp_path), "--store-url", redis_server.url, "--jobs", "1"]) == 2
    assert (tmp_path / "store" / "meta.json").read_text() == snapshot
    assert (tmp_path / "audit" / "summary.json").read_text() == summary
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 1  # the run's own reading: still its FAIL


def test_one_key_gone_since_the_runs_audit_is_enough_to_refuse_a_live_reaudit(tmp_path, redis_server):
    """A store that still holds every key re-audits live as before; one that lost one key since the run's audit
    measures something else than the run did (it said FAIL: 1 session vanished, and replaced the PASS)."""
    client = redis_server.client()
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(8)],
                        start=time.time() + 2, seed=29)
    write_journal(tmp_path, world.records)
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": time.time()}))
    fill_redis(client, world)
    store = StoreOptions(url=redis_server.url)
    assert exit_code(audit_run(tmp_path, store, jobs=1)["verdict"]) == 0
    assert exit_code(audit_run(tmp_path, store, jobs=1)["verdict"]) == 0  # the store still holds everything
    snapshot = (tmp_path / "store" / "meta.json").read_text()
    client.delete(TEMPLATE.format(session=world.order[3]))
    with pytest.raises(TemplateMismatch, match=r"1 of the 8 sessions whose keys .* are gone now"):
        audit_run(tmp_path, store, jobs=1)
    assert (tmp_path / "store" / "meta.json").read_text() == snapshot
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 0


def test_a_key_read_just_before_it_expires_does_not_pull_the_ttl_floor_to_zero(redis_server):
    """Keys given a 60 s TTL; one read a moment before it expires (TTL left 0.3 s, idle 0) bounded the TTL by ~0,
    and the floor (the minimum) was 0. A genuinely short TTL stays short."""
    client = redis_server.client()
    keys = [TEMPLATE.format(session=session_id(i, 31)) for i in range(5)]
    for key in keys:
        client.rpush(key, "hello")
        client.expire(key, 60)
    client.pexpire(keys[0], 300)
    client.lrange(keys[0], 0, -1)  # another reader: IDLETIME restarts
    floor = ttl_floor(client, TEMPLATE)[0]
    assert 55 < floor <= 60
    for key in keys:
        client.expire(key, 2)
    assert ttl_floor(client, TEMPLATE)[0] <= 2


def test_a_ttl_bots_keys_read_by_another_run_before_they_expire_still_expired_after_the_conversation(
        tmp_path, redis_server):
    """A correct bot keeping histories 30 s after the last message; its keys expired after the conversations (a
    minute ago). Beside it on the Redis, another goldfish run's keys (60 s TTL), one read by its audit just before
    it expires: the floor was 0, every session "expired" and the run FAILed. PASS now, the sessions after their end."""
    client = redis_server.client()
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(6)], start=time.time() - 90, seed=37)
    world.ttl = {s: 30 for s in world.order}
    write_journal(tmp_path, world.records)
    fill_redis(client, world)
    expire_now(client, [TEMPLATE.format(session=s) for s in world.order[1:]])  # one still there: not all gone
    others = [TEMPLATE.format(session=session_id(i, 41)) for i in range(4)]
    for key in others:
        client.rpush(key, "hello")
        client.expire(key, 60)
    client.pexpire(others[0], 300)
    client.lrange(others[0], 0, -1)  # the other run's audit reads it as it is about to expire
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)
    assert 25 < json.loads((tmp_path / "store" / "meta.json").read_text())["evidence"]["ttl_floor"] <= 60
    assert not summary["anomalies"].get("expired")
    assert [p for p in summary["problems"] if "5 session(s) expired after their conversations ended" in p]
    assert exit_code(summary["verdict"]) == 0
