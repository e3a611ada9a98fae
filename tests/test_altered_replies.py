"""A bot that stores its answers otherwise than it sent them (a value masked in the stored reply only).

Each such turn is `unanswered` (the stored context is not what the user saw), but the explanation said "the bot
answered the user without keeping its answer", which is false: the answer is kept, altered (bot hunt 9,
h_redact_ai). The finding now names what the store holds in its place.
"""
from __future__ import annotations

import time

from oracle.audit import audit_run
from oracle.explain import explain
from oracle.store import StoreOptions
from support_oracle import TurnSpec, build_world, fill_redis, read_findings, write_journal


def test_a_reply_stored_masked_is_named_with_what_was_stored(tmp_path, redis_server):
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(3)], start=time.time() - 60, seed=11)
    for r in world.records:
        if r["kind"] == "plant":
            r["reply"] = f"Got it, your {r['fact']} is {r['nonce']}."
    masked = 0
    for session, entries in world.stored.items():
        for n, (turn, message) in enumerate(entries):
            record = next(r for r in world.turns(session) if r["turn"] == turn)
            if message["type"] == "ai":
                content = record["reply"].replace(record["nonce"], "****") if record["kind"] == "plant" \
                    else record["reply"]
                masked += content != record["reply"]
                entries[n] = (turn, {**message, "data": {**message["data"], "content": content}})
    assert masked == 3
    write_journal(tmp_path, world.records)
    fill_redis(redis_server.client(), world)
    audit_run(tmp_path, StoreOptions(url=redis_server.url))
    found = [f for f in read_findings(tmp_path) if f["class"] == "unanswered"]
    assert sorted((f["session"], f["turn"]) for f in found) == sorted((s, 0) for s in world.order)
    for f in found:
        assert "****" in f["evidence"]["stored_instead"]
        text = explain(f)
        assert "holds 'Got it, your" in text and "****" in text and "without keeping its answer" not in text, text
