"""User entries that hold more than one token: every token is read, not only the first.

Two bots a tester ran against goldfish (/tmp/hunt-bots-bots/bot.py, MODE=prevglobal and MODE=merge):

- one keeps the "previous message" for context in a module-level variable and appends it to each stored user
  entry, so another user's message (and the fact it planted) is in this user's history: cross-talk, which the
  audit PASSed because only the first token of a user entry was read (and oracle/clean.py proved such sessions
  clean, as their texts start with their own token);
- one merges a message that arrives while the same session's previous one is in flight into that entry
  ("[...t1] ...\\n[...t2] ..."): every message is stored, yet the audit called the merged turns ``lost``.

The first token names the entry's turn; a later token of this session is that turn stored merged into the entry
(not lost, no anomaly in itself); a later token of another session is cross-talk (oracle/checkers.py).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from oracle.audit import audit_run
from oracle.clean import prove_clean
from oracle.decode import Shape
from oracle.history import read_journal
from oracle.store import RawSession, StoreOptions
from oracle.verdict import FAIL, PASS, parse_gates
from support_oracle import (TurnSpec, build_world, finding_keys, lc, raw_entries, read_findings, write_journal,
                            write_snapshot)


def _audit(tmp_path, world):
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    return audit_run(tmp_path, gates=parse_gates("strict"))


def _plant_world(sessions: int = 3, seed: int = 11):
    """Sessions that plant a fact, chat, and probe it: each turn alone (no bursts)."""
    return build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok"),
                         TurnSpec("chatter", "ok")] for _ in range(sessions)], seed=seed)


def _with_previous_message(world, same_session: bool) -> dict:
    """Store each user entry as a "previous message" bot does: "<message>\\n(previous message: <the one before>)",
    the one before being the message received just before it from any session (``same_session`` False: a
    module-level variable) or from this session (True: kept per session, as it should be). Returns
    {(session, entry index): (source session, source turn)} for the entries that got another session's message."""
    records = {(r["session"], r["turn"]): r for r in world.records}
    received = sorted(world.records, key=lambda r: r["sent"])
    previous, last_of = None, {}
    appended: dict = {}
    texts: dict = {}
    for r in received:
        before = last_of.get(r["session"]) if same_session else previous
        texts[(r["session"], r["turn"])] = (r["message"] if before is None else
                                            f"{r['message']}\n(previous message: {before['message']})", before)
        previous = last_of[r["session"]] = r
    for s in world.order:
        for i, (turn, m) in enumerate(world.stored[s]):
            if isinstance(m, dict) and m["type"] == "human":
                text, before = texts[(s, turn)]
                assert records[(s, turn)]["message"] == m["data"]["content"]
                world.stored[s][i] = (turn, lc("human", text))
                if before is not None and before["session"] != s:
                    appended[(s, i)] = (before["session"], before["turn"])
    return appended


def test_another_sessions_message_appended_to_a_user_entry_is_crosstalk(tmp_path):
    world = _plant_world()
    appended = _with_previous_message(world, same_session=False)
    assert len(appended) >= 6  # three sessions interleaved: most entries carry another's message
    planted = [v for v in appended.values() if v[1] == 0]
    assert planted, "some entry carries another session's plant (its value)"
    summary = _audit(tmp_path, world)
    findings = read_findings(tmp_path)
    assert {f["class"] for f in findings} == {"crosstalk"}
    got = {(f["session"], f["evidence"]["entry_index"]): (f["evidence"]["source_session"], f["evidence"]["source_turn"])
           for f in findings}
    assert got == appended
    assert all(f["evidence"]["source_journaled"] is True and "role" not in f["evidence"] for f in findings)
    assert summary["verdict"]["result"] == FAIL
    rules = {r["gate"]: r for r in summary["verdict"]["rules"]}
    assert rules["crosstalk"]["result"] == FAIL and rules["crosstalk"]["count"] == len(world.order)
    assert rules["stored_loss"]["count"] == 0


def test_a_user_entry_with_a_later_token_is_never_proven_clean():
    """oracle/clean.py must leave such a session to the exact checkers: its texts start with their own tokens,
    so checking that alone proved it clean (a PASS however the checkers read it)."""
    world = _plant_world(sessions=2)
    _with_previous_message(world, same_session=False)
    with tempfile.TemporaryDirectory() as tmp:
        write_journal(Path(tmp), world.records)
        turns, _ = read_journal(Path(tmp))
    opts = StoreOptions()
    raws = [RawSession(s, opts.key(s), True, None, raw_entries(world, s), "list") for s in world.order]
    assert prove_clean(raws, turns, Shape(opts)).clean == [False, False]
    clean_world = _plant_world(sessions=2)  # the same sessions stored one token an entry: proven
    raws = [RawSession(s, opts.key(s), True, None, raw_entries(clean_world, s), "list") for s in clean_world.order]
    assert prove_clean(raws, turns, Shape(opts)).clean == [True, True]


def _merged(world, session: str, a: int, b: int) -> None:
    """Store turn ``b``'s message merged into turn ``a``'s user entry (whichever of the two the store holds first
    names the entry), as a bot that folds a double-sent message into the one in flight does; both replies stay."""
    stored = world.stored[session]
    users = {t: i for i, (t, m) in enumerate(stored) if isinstance(m, dict) and m["type"] == "human" and t in (a, b)}
    first, second = sorted(users, key=users.get)
    text = stored[users[first]][1]["data"]["content"] + "\n" + stored[users[second]][1]["data"]["content"]
    stored[users[first]] = (first, lc("human", text))
    del stored[users[second]]


def _burst_world(sessions: int = 3, seed: int = 4):
    """Turns 1 and 2 of each session double-sent (a burst: the second arrives while the first is in flight)."""
    return build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
                         TurnSpec("probe", "ok")] for _ in range(sessions)], seed=seed)


def test_double_sent_turns_stored_merged_in_one_entry_are_not_lost(tmp_path):
    world = _burst_world()
    for s in world.order:
        _merged(world, s, 1, 2)
        humans = [m["data"]["content"] for _, m in world.stored[s] if m["type"] == "human"]
        assert len(humans) == 3 and any(f"[{s}t1]" in h and f"[{s}t2]" in h for h in humans)
    summary = _audit(tmp_path, world)
    assert read_findings(tmp_path) == []
    assert summary["anomalies"] == {} and summary["verdict"]["result"] == PASS
    assert summary["metrics"]["stored_loss"]["count"] == 0


def test_a_merged_turn_still_owes_its_reply_and_its_fact(tmp_path):
    """Merged is stored, not excused: the merged turn's reply must follow (else unanswered), and a plant merged
    into another entry must keep the value it planted there (else lost, altered)."""
    world = _burst_world(sessions=2)
    a, b = world.order
    _merged(world, a, 1, 2)
    world.stored[a] = [(t, m) for t, m in world.stored[a] if not (t == 2 and m["type"] == "ai")]
    _merged(world, b, 0, 1)  # the plant (turn 0) and turn 1 in one entry, the value cut out
    stored = world.stored[b]
    at = next(i for i, (t, m) in enumerate(stored) if m["type"] == "human" and f"[{b}t1]" in m["data"]["content"])
    value = next(r["nonce"] for r in world.records if r["session"] == b and r["turn"] == 0)
    stored[at] = (stored[at][0], lc("human", stored[at][1]["data"]["content"].replace(value, "[redacted]")))
    _audit(tmp_path, world)
    # turn 1 was sent once turn 0 was answered: merged into its entry, it reads before turn 0's answer, a reorder
    assert finding_keys(tmp_path) == {("unanswered", a, 2), ("lost", b, 0), ("reordered", b, 1)}
    lost = next(f for f in read_findings(tmp_path) if f["class"] == "lost")
    assert lost["evidence"]["altered"] is True


def test_a_turn_merged_into_an_entry_answered_before_it_was_sent_is_a_reorder(tmp_path):
    """A bot that folds every new message into the last user entry, its answers after them all: the history reads
    turn 3's question before turn 0's answer, and it PASSed (bot hunt 10). Only a message that arrived while the
    previous one was in flight (a double-send) is merged by design."""
    world = _burst_world(sessions=2)
    a, b = world.order
    _merged(world, a, 1, 2)  # a double-send: merged by design
    _merged(world, b, 0, 3)  # turn 3 was sent long after turn 0 was answered
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("reordered", b, 3)}
    reorder = read_findings(tmp_path)[0]
    assert reorder["evidence"]["merged_into_turn"] == 0 and reorder["evidence"]["merged_turns"] == [3]
    assert "inside turn 0's user entry, before that turn's answer" in reorder["explanation"]
    assert summary["verdict"]["result"] == "fail"


def test_a_user_entry_quoting_its_own_sessions_earlier_message_stays_clean(tmp_path):
    """A bot that keeps the previous message per session, as it should, stores this session's earlier token again
    in each entry: that turn is stored on its own too, so nothing is merged, duplicated or cross-talk."""
    world = _plant_world()
    appended = _with_previous_message(world, same_session=True)
    assert appended == {}
    quoting = [m["data"]["content"] for s in world.order for _, m in world.stored[s]
               if m["type"] == "human" and m["data"]["content"].count("[gf") == 2]
    assert len(quoting) == 3 * len(world.order)
    summary = _audit(tmp_path, world)
    assert read_findings(tmp_path) == []
    assert summary["anomalies"] == {} and summary["verdict"]["result"] == PASS


def test_tokens_the_client_itself_sent_are_not_read_as_writes(tmp_path):
    """A message whose text quotes another token (a script's chatter line, say) is what the client sent: the
    journal has it, so the token after the entry's own is neither a merge nor cross-talk."""
    world = _plant_world(sessions=2)
    a, b = world.order
    quoted = f" (as in [{b}t0] and [{a}t3])"
    for r in world.records:
        if r["session"] == a and r["turn"] == 1:
            r["message"] += quoted
    world.stored[a] = [(t, lc("human", m["data"]["content"] + quoted) if t == 1 and m["type"] == "human" else m)
                       for t, m in world.stored[a]]
    summary = _audit(tmp_path, world)
    assert read_findings(tmp_path) == [] and summary["verdict"]["result"] == PASS
    assert json.loads((tmp_path / "audit" / "summary.json").read_text())["anomalies"] == {}


def test_a_turn_appended_to_another_sessions_entry_instead_of_its_own_is_one_misroute(tmp_path):
    """The later token resolves like a first one (oracle/rootcause.py): a turn missing from its own session and
    found appended to another's user entry is one fault, a misroute, not also a store loss."""
    world = _plant_world(sessions=2)
    a, b = world.order
    moved = next(m for t, m in world.stored[a] if t == 1 and m["type"] == "human")["data"]["content"]
    world.stored[a] = [(t, m) for t, m in world.stored[a] if t != 1]
    at = next(i for i, (t, m) in enumerate(world.stored[b]) if t == 2 and m["type"] == "human")
    world.stored[b][at] = (2, lc("human", world.stored[b][at][1]["data"]["content"] + "\n" + moved))
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("lost", a, 1), ("crosstalk", b, None)}
    assert {f["cause"] for f in read_findings(tmp_path)} == {"misroute"}
    rules = {r["gate"]: r for r in summary["verdict"]["rules"]}
    assert rules["stored_loss"]["count"] == 0 and rules["crosstalk"]["result"] == FAIL


def _with_retrieved_context(world, others: bool = False) -> None:
    """Store each user entry as a RAG chain's prompt does: "Context: <the session's two previous messages>
    Question: <the message>" (``others``: the previous two messages received from any session, a retriever
    over every user's history)."""
    received = sorted(world.records, key=lambda r: r["sent"])
    before: dict = {}
    for i, r in enumerate(received):
        mine = [p for p in received[:i] if p["session"] == r["session"]]
        before[(r["session"], r["turn"])] = [p["message"] for p in (received[max(0, i - 2):i] if others else mine[-2:])]
    for s in world.order:
        for i, (turn, m) in enumerate(world.stored[s]):
            if isinstance(m, dict) and m["type"] == "human" and before[(s, turn)]:
                context = "\n".join(before[(s, turn)])
                world.stored[s][i] = (turn, lc("human", f"Context:\n{context}\n\nQuestion: {m['data']['content']}"))


def test_a_rag_prompt_quoting_the_sessions_own_earlier_messages_is_its_turns_entry(tmp_path):
    """A correct RAG chain stores each user entry as its prompt: the session's earlier messages (their tokens
    first), then the message. The entry is the later turn's; the quotes of turns stored already are no second
    copy of them (duplicated) and no write out of order (reordered): PASS. Retrieval over every user's
    messages is cross-talk still."""
    world = _plant_world()
    _with_retrieved_context(world)
    summary = _audit(tmp_path / "own", world)
    assert read_findings(tmp_path / "own") == [] and summary["verdict"]["result"] == PASS
    leaky = _plant_world()
    _with_retrieved_context(leaky, others=True)
    _audit(tmp_path / "leak", leaky)
    assert {f["class"] for f in read_findings(tmp_path / "leak")} == {"crosstalk"}
