"""A reply stored twice is `duplicated`, like a user entry stored twice; a bot that answers two turns with the same
text, or stores its replies without the footer its API adds, is not.

A bot that appends the AI message on the write path and again in a callback stored every answer twice and PASSed:
duplicates were judged on user entries (tokens) only, and oracle/clean.py sends such sessions (entries != 2 x ok
turns) to the checkers, which found nothing."""
from __future__ import annotations

import csv
import json

import pytest


from contracts.journal import Turn
from contracts.tokens import make_token
from oracle.audit import audit_run
from oracle.checkers import check_session
from oracle.decode import Shape, decode_session
from oracle.store import RawSession, StoreOptions
from oracle.verdict import parse_gates
from support_oracle import (TurnSpec, build_world, finding_keys, lc, read_findings, store_with_langchain,
                            write_journal, write_snapshot)

S = "gf00000000000000aa"


# ---- the checker on one session -------------------------------------------------------------------------------

def turn(n: int, reply: str | None, outcome: str = "ok") -> Turn:
    token = make_token(S, n)
    return Turn(session=S, turn=n, token=token, message=f"[{token}] hello {n}", sent=100.0 + n,
                received=100.5 + n if outcome != "fail" else None, outcome=outcome,
                status=200 if outcome == "ok" else None, reply=reply if outcome == "ok" else None)


def judge(turns: list[Turn], stored: list[tuple[str, object]]) -> list[dict]:
    """check_session over a history given as [("human", turn number) | ("ai", text)], oldest first."""
    entries = [json.dumps(lc("human", f"[{make_token(S, what)}] hello {what}") if role == "human" else lc("ai", what))
               for role, what in stored]
    raw = RawSession(S, f"message_store:{S}", True, None, entries)
    return check_session(S, turns, raw, decode_session(raw, Shape(StoreOptions())), {S: turns}).findings


def classes(findings: list[dict]) -> list[tuple]:
    return sorted((f["class"], f["turn"]) for f in findings)


def test_a_reply_stored_twice_is_one_duplicated_finding_for_its_turn():
    turns = [turn(0, "Hi."), turn(1, "Sure."), turn(2, "Bye.")]
    found = judge(turns, [("human", 0), ("ai", "Hi."), ("human", 1), ("ai", "Sure."), ("ai", "Sure."),
                          ("human", 2), ("ai", "Bye.")])
    assert classes(found) == [("duplicated", 1)]
    e = found[0]["evidence"]
    assert e["role"] == "assistant" and e["reply"] == "Sure." and e["outcome"] == "ok"
    assert e["copies"] == 2 and e["positions"] == [3, 4] and e["turns_with_this_reply"] == 1
    # a callback that appends the copy late, after the next question: still this turn's reply, not a reorder
    late = judge(turns, [("human", 0), ("ai", "Hi."), ("human", 1), ("ai", "Sure."), ("human", 2), ("ai", "Sure."),
                         ("ai", "Bye.")])
    assert classes(late) == [("duplicated", 1)] and late[0]["evidence"]["positions"] == [3, 5]


def test_a_generic_reply_stored_twice_is_also_told_as_maybe_another_conversation_s():
    """A bot appending its "Noted." to another open conversation's key (a fan-out bug) was explained as a retried write
    only, a certainty sending the reader to the retry path (bot hunt 14 #9); a reply holding this session's token is
    this session's."""
    from oracle.explain import explain

    turns = [turn(0, "Hi."), turn(1, "Sure.")]
    found = judge(turns, [("human", 0), ("ai", "Hi."), ("human", 1), ("ai", "Sure."), ("ai", "Sure.")])
    assert "another conversation's answer of the same text" in explain(found[0])
    own = f"Noted {make_token(S, 1)}."
    turns = [turn(0, "Hi."), turn(1, own)]
    found = judge(turns, [("human", 0), ("ai", "Hi."), ("human", 1), ("ai", own), ("ai", own)])
    assert classes(found) == [("duplicated", 1)]
    assert "wrote the same answer twice" in explain(found[0]) and "another conversation" not in explain(found[0])


def test_every_reply_stored_twice_gives_one_finding_per_turn_and_nothing_else():
    turns = [turn(n, f"Answer {n}.") for n in range(3)]
    stored = [e for n in range(3) for e in (("human", n), ("ai", f"Answer {n}."), ("ai", f"Answer {n}."))]
    assert classes(judge(turns, stored)) == [("duplicated", 0), ("duplicated", 1), ("duplicated", 2)]


def test_a_pair_written_twice_is_one_finding_carrying_both_copies():
    turns = [turn(0, "Hi."), turn(1, "Sure.")]
    found = judge(turns, [("human", 0), ("ai", "Hi."), ("human", 1), ("ai", "Sure."), ("human", 1), ("ai", "Sure.")])
    assert classes(found) == [("duplicated", 1)]
    e = found[0]["evidence"]
    assert e["copies"] == 2 and e["positions"] == [1, 2]          # the user entry's, among the user entries
    assert e["reply_copies"] == 2 and e["reply_positions"] == [3, 5]  # the reply's, among all entries


def test_the_same_text_for_two_turns_stored_once_each_is_no_duplicate():
    turns = [turn(0, "OK."), turn(1, "OK."), turn(2, "Done.")]
    assert judge(turns, [("human", 0), ("ai", "OK."), ("human", 1), ("ai", "OK."), ("human", 2), ("ai", "Done.")]) == []
    # one more copy than turns answered so: one of them was written twice, the one holding two copies
    found = judge(turns, [("human", 0), ("ai", "OK."), ("human", 1), ("ai", "OK."), ("ai", "OK."), ("human", 2),
                          ("ai", "Done.")])
    assert classes(found) == [("duplicated", 1)] and found[0]["evidence"]["turns_with_this_reply"] == 2


def test_an_indeterminate_turn_may_have_stored_a_reply_of_the_same_text():
    """An info turn (a timeout) whose exchange was stored: its reply is "OK." too, which the journal never saw."""
    turns = [turn(0, "OK."), turn(1, None, "info"), turn(2, "Done.")]
    assert judge(turns, [("human", 0), ("ai", "OK."), ("human", 1), ("ai", "OK."), ("human", 2), ("ai", "Done.")]) == []
    refused = [turn(0, "OK."), turn(1, None, "fail")]  # a refused turn stored anyway is aborted, its reply with it
    assert classes(judge(refused, [("human", 0), ("ai", "OK."), ("human", 1), ("ai", "OK.")])) == [("aborted", 1)]


def test_replies_matched_only_by_count_are_no_duplicates():
    """A footer bot: turn 0 was sent "OK.\\n\\nSources: ..." and stored as "OK.", which is turn 1's reply verbatim."""
    turns = [turn(0, "OK.\n\nSources: the knowledge base."), turn(1, "OK.")]
    found = judge(turns, [("human", 0), ("ai", "OK."), ("human", 1), ("ai", "OK.")])
    assert "duplicated" not in {f["class"] for f in found}


def test_a_welcome_stored_before_the_first_message_is_no_copy_of_a_later_reply_of_its_text():
    """A bot that stores "How can I help you today?" when the thread is created, and answers small talk with the
    same line: the welcome was counted a second copy of that turn's reply (a false FAIL, 349 duplicated)."""
    welcome = "How can I help you today?"
    turns = [turn(0, "Noted."), turn(1, welcome), turn(2, "Bye.")]
    stored = [("human", 0), ("ai", "Noted."), ("human", 1), ("ai", welcome), ("human", 2), ("ai", "Bye.")]
    assert judge(turns, [("ai", welcome)] + stored) == []
    twice = stored[:4] + [("ai", welcome)] + stored[4:]  # the reply itself written twice is still found
    assert classes(judge(turns, [("ai", welcome)] + twice)) == [("duplicated", 1)]
    greeting = [("ai", "Hi there!"), ("ai", welcome)]  # a welcome in two bubbles: neither is a copy
    assert judge(turns, greeting + stored) == []


def test_copies_of_a_reply_stored_before_the_first_message_are_excused_once():
    """Every assistant entry before the first user entry was excused as a welcome: 100,000 copies of a reply written
    at the old end of a history PASSed, where one at the new end FAILed (fuzz hunt 18). One of each text is."""
    turns = [turn(0, "Noted."), turn(1, "Sure."), turn(2, "Bye.")]
    stored = [("human", 0), ("ai", "Noted."), ("human", 1), ("ai", "Sure."), ("human", 2), ("ai", "Bye.")]
    assert judge(turns, [("ai", "Bye.")] + stored) == []  # once: maybe a welcome of that text
    found = judge(turns, [("ai", "Bye.")] * 50 + stored)
    assert classes(found) == [("duplicated", 2)] and found[0]["evidence"]["copies"] == 50, found  # one excused


def test_a_message_stored_again_without_its_token_is_a_second_copy_of_it():
    """A bot that stores each user message twice, the second copy with the [gf...tN] tag cleaned off (for its
    embeddings): the model sees every message twice, and the run PASSed, the copy being 'no goldfish message'."""
    turns = [turn(0, "Hi."), turn(1, "Sure.")]
    entries = [json.dumps(e) for e in (lc("human", turns[0].message), lc("human", "hello 0"), lc("ai", "Hi."),
                                       lc("human", turns[1].message), lc("ai", "Sure."))]
    raw = RawSession(S, f"message_store:{S}", True, None, entries)
    found = check_session(S, turns, raw, decode_session(raw, Shape(StoreOptions())), {S: turns}).findings
    assert classes(found) == [("duplicated", 0)]
    alone = [json.dumps(e) for e in (lc("human", "hello 0"), lc("ai", "Hi."))]  # a note of the bot's own: no turn's
    raw = RawSession(S, f"message_store:{S}", True, None, [json.dumps(lc("human", turns[0].message))] + alone[1:] + [
        json.dumps(lc("human", "hello 7")), json.dumps(lc("human", turns[1].message)), json.dumps(lc("ai", "Sure."))])
    assert check_session(S, turns, raw, decode_session(raw, Shape(StoreOptions())), {S: turns}).findings == []


@pytest.mark.parametrize("copy", ["HELLO 0", "hello   0", "Q: hello 0", "hello 0.", "User:hello, 0!"],
                         ids=["upper-case", "white-space", "labelled", "punctuation", "label-and-punctuation"])
def test_a_message_stored_again_cleaned_more_than_of_its_token_is_still_a_second_copy(copy):
    """The cleaned copy also lower-cased, its spaces changed, a "Q: " put before it or its full stop dropped: only
    an exact copy was seen, and these PASSed with every message stored twice (bot hunt 6: dup_cleaned_*)."""
    turns = [turn(0, "Hi."), turn(1, "Sure.")]
    entries = [json.dumps(e) for e in (lc("human", turns[0].message), lc("human", copy), lc("ai", "Hi."),
                                       lc("human", turns[1].message), lc("ai", "Sure."))]
    raw = RawSession(S, f"message_store:{S}", True, None, entries)
    found = check_session(S, turns, raw, decode_session(raw, Shape(StoreOptions())), {S: turns}).findings
    assert classes(found) == [("duplicated", 0)]


def test_a_reply_stored_as_a_json_object_with_its_sources_is_the_reply():
    """A RAG bot stores {"answer": ..., "sources": [...]} as the text: a reply holding a quote is stored with the
    quote escaped (\\"), and 3,366 replies of a correct bot were 'unanswered' (bot hunt 6: reply_json_content)."""
    turns = [turn(0, 'He said "hi" to you.'), turn(1, "Sure.")]
    stored = [json.dumps({"answer": t.reply, "sources": ["kb/greetings.md"]}) for t in turns]
    entries = [json.dumps(e) for e in (lc("human", turns[0].message), lc("ai", stored[0]),
                                       lc("human", turns[1].message), lc("ai", stored[1]))]
    raw = RawSession(S, f"message_store:{S}", True, None, entries)
    assert check_session(S, turns, raw, decode_session(raw, Shape(StoreOptions())), {S: turns}).findings == []


def test_empty_replies_stored_twice_are_not_judged():
    turns = [turn(0, ""), turn(1, "Sure.")]
    assert judge(turns, [("human", 0), ("ai", ""), ("ai", ""), ("human", 1), ("ai", "Sure.")]) == []


# ---- through the whole audit ---------------------------------------------------------------------------------

def chatter_world(sessions: int = 3, turns: int = 3, seed: int = 7):
    return build_world([[TurnSpec("chatter", "ok") for _ in range(turns)] for _ in range(sessions)], seed=seed)


def store_replies_twice(world, session: str) -> None:
    """The bot appends each AI message on the write path and again in a callback."""
    world.stored[session] = [e for t, m in world.stored[session]
                             for e in ([(t, m)] if m["type"] == "human" else [(t, m), (t, m)])]


def audit_world(run, world) -> dict:
    """The world journaled and snapshotted in ``run``, audited under the strict gates: the summary."""
    write_journal(run, world.records)
    write_snapshot(run, world)
    return audit_run(run, gates=parse_gates("strict"))


def rows(run) -> dict:
    with open(run / "audit" / "sessions.csv") as fh:
        return {r["session"]: r for r in csv.DictReader(fh)}


def test_a_bot_storing_each_reply_twice_fails_the_audit_on_a_real_redis(tmp_path, redis_server):
    world = chatter_world()
    doubled, *clean = world.order
    store_replies_twice(world, doubled)
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world)
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert finding_keys(run) == {("duplicated", doubled, t) for t in range(3)}  # nothing reordered, crosstalk, ...
    replies = {r["turn"]: r["reply"] for r in world.records if r["session"] == doubled}
    for f in read_findings(run):
        e = f["evidence"]
        assert e["role"] == "assistant" and e["copies"] == 2 and e["reply"] == replies[f["turn"]][:120]
        assert e["positions"] == [3 * f["turn"] + 1, 3 * f["turn"] + 2] and f["cause"] == "duplicated"
    assert summary["anomalies"] == {"duplicated": 3}
    rule = next(r for r in summary["verdict"]["rules"] if r["gate"] == "duplicated")
    assert rule["result"] == "fail" and rule["count"] == 3 and summary["verdict"]["result"] == "fail"
    assert rows(run)[doubled]["duplicated"] == "3" and all(rows(run)[s]["duplicated"] == "0" for s in clean)


def test_a_duplicated_reply_is_explained_as_a_reply(tmp_path):
    world = chatter_world(sessions=1)
    store_replies_twice(world, world.order[0])
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    audit_run(tmp_path, gates=parse_gates("strict"))
    f = read_findings(tmp_path)[0]
    assert "reply" in f["explanation"] and "user entry" not in f["explanation"]


def test_the_same_answer_to_two_turns_stored_once_each_passes_the_audit(tmp_path):
    world = chatter_world()
    for r in world.records:
        r["reply"] = "OK."
    for s in world.order:
        world.stored[s] = [(t, lc("ai", "OK.") if m["type"] == "ai" else m) for t, m in world.stored[s]]
    world.stored[world.order[0]].insert(2, (None, lc("ai", "OK.")))  # and one extra copy somewhere is found
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path, gates=parse_gates("strict"))
    assert finding_keys(tmp_path) == {("duplicated", world.order[0], 0)}
    assert summary["anomalies"] == {"duplicated": 1}


def test_a_store_that_decorates_replies_passes_and_one_storing_them_twice_is_caught(tmp_path):
    """The store keeps each reply with a time stamp and in bold (what the client got, decorated): no stored reply
    equals its journaled one. Stored once each: PASS. Stored twice (a retried write): every turn's reply is
    duplicated; it PASSed, as only verbatim copies were counted."""
    world = chatter_world(turns=4)
    for s in world.order:
        world.stored[s] = [(t, lc("ai", f"[12:00:0{t}] **{m['data']['content']}**") if m["type"] == "ai" else m)
                           for t, m in world.stored[s]]
    assert audit_world(tmp_path / "decorated", world)["anomalies"] == {}
    doubled = world.order[1]
    store_replies_twice(world, doubled)
    audit_world(tmp_path / "doubled", world)
    assert finding_keys(tmp_path / "doubled") == {("duplicated", doubled, turn) for turn in range(4)}


def test_a_footer_bot_passes_and_a_footer_bot_storing_replies_twice_is_caught(tmp_path):
    world = chatter_world(turns=4)
    for r in world.records:
        if r["turn"] % 2:
            r["reply"] += "\n\nSources: the knowledge base."  # sent with it, stored without it
    assert audit_world(tmp_path / "footer", world)["anomalies"] == {}
    doubled = world.order[1]
    store_replies_twice(world, doubled)
    audit_world(tmp_path / "doubled", world)
    # the footed turns' stored texts are parts of their replies (the footer cut), not the reply: they cannot be
    # judged (a bubble of a reply in several is a part too); the verbatim ones are
    assert finding_keys(tmp_path / "doubled") == {("duplicated", doubled, 0), ("duplicated", doubled, 2)}
