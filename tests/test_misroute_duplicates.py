"""A misrouted turn is one fault: cross-talk (cause misroute) where it landed, never also a `duplicated` reply there.

A multi-tenant bot that filed some users' turns under another user's key (the user entry and its answer) FAILed
rightly for cross-talk, but the victim's key then held more copies of the bot's generic answers ("I see. How else
can I help?") than the victim's own turns were answered with, so those answers were also counted `duplicated`,
explained as "a retried write": one misroute counted twice, the second time with a wrong cause. The answer stored
right after another session's message is that message's answer, part of the misroute (oracle/checkers.py
``_replies_to_others``); a reply of the victim's own turn written twice is still `duplicated`.
"""
from __future__ import annotations

import csv

from oracle.audit import audit_run
from oracle.store import StoreOptions
from oracle.verdict import FAIL, PASS, parse_gates
from support_oracle import (TurnSpec, build_world, lc, read_findings, store_with_langchain, write_journal,
                            write_snapshot)

GENERIC = ("I see. How else can I help?", "Noted, thank you.")  # a canned bot: many turns, the same few answers
MISROUTED = (1, 3)  # the turns of session a the bot filed under session b's key


def misrouted_world():
    """Three sessions of five turns answered with canned texts; a's turns 1 and 3 (user entry and answer) are
    stored under b's key, each right after b's exchange of the same turn, as a bot misrouting them would."""
    world = build_world([[TurnSpec("chatter", "ok") for _ in range(5)] for _ in range(3)], seed=5)
    for r in world.records:
        r["reply"] = GENERIC[r["turn"] % 2]
    for s in world.order:
        world.stored[s] = [(t, lc("ai", GENERIC[t % 2]) if m["type"] == "ai" else m) for t, m in world.stored[s]]
    a, b, _ = world.order
    moved = {t: [(t, m) for tt, m in world.stored[a] if tt == t] for t in MISROUTED}
    world.stored[a] = [(t, m) for t, m in world.stored[a] if t not in MISROUTED]
    home = world.stored[b]
    world.stored[b] = []
    for t, m in home:
        world.stored[b].append((t, m))
        if m["type"] == "ai" and t in moved:
            world.stored[b] += [(None, m2) for _, m2 in moved[t]]
    return world, a, b


def audit(run, world, store_url: str | None = None) -> dict:
    write_journal(run, world.records)
    if store_url is None:
        write_snapshot(run, world)
        return audit_run(run, gates=parse_gates("strict"))
    store_with_langchain(store_url, world)
    return audit_run(run, StoreOptions(url=store_url), gates=parse_gates("strict"))


def rules(summary: dict) -> dict:
    return {r["gate"]: r for r in summary["verdict"]["rules"]}


def duplicated_in(run, session: str) -> str:
    with open(run / "audit" / "sessions.csv") as fh:
        return next(r["duplicated"] for r in csv.DictReader(fh) if r["session"] == session)


def assert_one_misroute(run, summary: dict, a: str, b: str) -> None:
    found = read_findings(run)
    misroute = sorted((f["class"], f["session"], f["turn"]) for f in found if f["cause"] == "misroute")
    assert misroute == [("crosstalk", b, None), ("crosstalk", b, None), ("lost", a, 1), ("lost", a, 3)]
    cross = [f for f in found if f["class"] == "crosstalk"]
    assert sorted(f["evidence"]["source_turn"] for f in cross) == list(MISROUTED)
    assert all(f["evidence"]["source_session"] == a for f in cross)
    assert summary["verdict"]["result"] == FAIL and rules(summary)["crosstalk"]["result"] == FAIL
    row = next(r for r in summary["verdict"]["root_causes"] if r["cause"] == "misroute")
    assert (row["count"], row["findings"]) == (2, 4)  # two turns misrouted: lost at home, cross-talk under b


def test_answers_to_misrouted_turns_are_the_misroute_not_duplicated_replies(tmp_path):
    world, a, b = misrouted_world()
    summary = audit(tmp_path, world)
    assert_one_misroute(tmp_path, summary, a, b)
    found = read_findings(tmp_path)
    assert [f for f in found if f["class"] == "duplicated"] == []
    assert not any("retried write" in f["explanation"] for f in found)
    assert rules(summary)["duplicated"]["count"] == 0 and rules(summary)["duplicated"]["result"] == PASS
    assert "duplicated" not in summary["anomalies"] and duplicated_in(tmp_path, b) == "0"


def test_answers_to_misrouted_turns_on_a_real_redis(tmp_path, redis_server):
    world, a, b = misrouted_world()
    summary = audit(tmp_path, world, redis_server.url)
    assert_one_misroute(tmp_path, summary, a, b)
    assert [f for f in read_findings(tmp_path) if f["class"] == "duplicated"] == []
    assert rules(summary)["duplicated"]["count"] == 0


def test_a_reply_written_twice_next_to_a_misroute_is_still_duplicated(tmp_path):
    """b's own turn 4 answered once, its reply stored twice (a retried write), in the key holding a's turns."""
    world, a, b = misrouted_world()
    at = next(i for i, (t, m) in enumerate(world.stored[b]) if t == 4 and m["type"] == "ai")
    world.stored[b].insert(at + 1, (4, lc("ai", GENERIC[0])))
    summary = audit(tmp_path, world)
    assert_one_misroute(tmp_path, summary, a, b)
    dup = [f for f in read_findings(tmp_path) if f["class"] == "duplicated"]
    assert [(f["session"], f["turn"], f["cause"]) for f in dup] == [(b, 4, "duplicated")]
    e = dup[0]["evidence"]
    assert e["role"] == "assistant" and e["copies"] == 2 and e["positions"] == [at, at + 1]
    assert e["reply"] == GENERIC[0] and "retried write" in dup[0]["explanation"]
    assert rules(summary)["duplicated"]["count"] == 1 and rules(summary)["duplicated"]["result"] == FAIL
    assert duplicated_in(tmp_path, b) == "1"


def test_a_message_appended_to_the_sessions_own_entry_leaves_its_reply_its_own(tmp_path):
    """Another session's message appended to b's own user entry (a "previous message" kept across sessions) is
    cross-talk, but the answer after that entry is b's: stored twice, it is still b's duplicated reply."""
    world = build_world([[TurnSpec("chatter", "ok") for _ in range(3)] for _ in range(3)], seed=5)
    for r in world.records:
        r["reply"] = GENERIC[0]
    for s in world.order:
        world.stored[s] = [(t, lc("ai", GENERIC[0]) if m["type"] == "ai" else m) for t, m in world.stored[s]]
    a, b, _ = world.order
    stored = world.stored[b]
    user = next(i for i, (t, m) in enumerate(stored) if t == 1 and m["type"] == "human")
    other = next(r["message"] for r in world.records if r["session"] == a and r["turn"] == 0)
    stored[user] = (1, lc("human", stored[user][1]["data"]["content"] + " " + other))
    stored.insert(user + 2, (1, lc("ai", GENERIC[0])))
    audit(tmp_path, world)
    found = read_findings(tmp_path)
    assert sorted((f["class"], f["session"], f["turn"]) for f in found) == [("crosstalk", b, None),
                                                                          ("duplicated", b, 1)]
    dup = next(f for f in found if f["class"] == "duplicated")
    assert dup["cause"] == "duplicated" and dup["evidence"]["positions"] == [user + 1, user + 2]
