"""How a stored assistant entry is matched to the reply the client got (bot hunt 11: W2, W3, W4, W6, W8, W10).

Correct bots that FAILed `unanswered` (or `corrupt`) and a buggy one that got no verdict:

- W6: the API adds to what it returns (a disclaimer footer, a ``<think>`` block it shows, the question quoted
  first) and the history keeps the answer: a probe's answer ("Your order number is 1005-X0Q5.") is short, so it
  was no "part" of the reply (under half of it and under 40 characters). A short part holding the value the
  probe recalled is its answer; a generic one ("Sure.") is not.
- W8: the stored AI message is a reasoning block (or a {question, answer, sources} object) quoting the user's
  message, its token included, then the reply: any token beside the reply made it "no answer". The token of the
  turn's own message is a quote; another session's is still cross-talk.
- W4: a double-send answered together: both user entries stored, then ONE copy of the reply both turns got.
  Turns in flight together share that copy; turns one after the other do not.
- W2: a bot that pickles every entry, and reads them back (its probes pass): exit 2 naming the pickle and
  --reader, not `corrupt` 100 %; one that cannot (pickle drift: its probes fail) stays FAIL corrupt.
- W3: a bot storing its replies under the user's role was told "one entry per exchange, its reply in a field of
  the user's entry" (exit 2): it is judged, FAIL.
- W10: LangChain structured output by tool calling: the AIMessage's content is empty, the answer in
  ``tool_calls[0].args.answer``: read as the reply when it is the reply verbatim.
"""
from __future__ import annotations

import json
import pickle
import time

import pytest

from oracle.audit import audit_run
from oracle.keys import TemplateMismatch
from oracle.store import StoreOptions
from oracle.verdict import parse_gates
from support_oracle import TurnSpec, build_world, finding_keys, lc, read_findings, store_with_langchain, write_journal

FOOTER = "\n\n*AI-generated answer. Please verify important information.*"


def world_of(kinds=("plant", "chatter", "probe", "chatter", "plant", "probe"), sessions=3, seed=21, **spec):
    return build_world([[TurnSpec(kind, "ok", **spec) for kind in kinds] for _ in range(sessions)],
                       start=time.time() - 60, seed=seed)


def audit(tmp_path, redis_server, world, name="run", langchain=False, entries=None, **options):
    """Store the world (LangChain's layout by default; ``entries``: session -> raw entries, oldest first, RPUSHed)
    and audit it strictly; the summary."""
    run = tmp_path / name
    write_journal(run, world.records)
    client = redis_server.client()
    client.flushall()
    if entries is not None:
        for s, values in entries.items():
            client.rpush(f"message_store:{s}", *values)
        options.setdefault("direction", "rpush")
    elif langchain:
        store_with_langchain(redis_server.url, world)
    else:
        for s in world.order:
            client.lpush(f"message_store:{s}", *[json.dumps(m) for _, m in world.stored[s]])
    return audit_run(run, StoreOptions(url=redis_server.url, **options), gates=parse_gates("strict"))


def record(world, session, turn):
    return next(r for r in world.records if r["session"] == session and r["turn"] == turn)


def set_stored_reply(world, session, turn, content):
    world.stored[session] = [(t, lc("ai", content) if t == turn and m["type"] == "ai" else m)
                             for t, m in world.stored[session]]


# ---- W6: the client got the stored answer plus what the API added ---------------------------------------------

DECORATIONS = {
    "footer": lambda r, answer: answer + FOOTER,
    "think shown": lambda r, answer: "<think>\nThe user asks for a fact they told me earlier; I look it up.\n"
                                     "</think>\n\n" + answer,
    "question quoted": lambda r, answer: "> " + r["message"] + "\n\n" + answer,
}


def recall_world(decorate, keep):
    """Probes answered "Your <fact> is <value>." (31 characters) decorated by the API; the store keeps ``keep``."""
    world = world_of()
    for s in world.order:
        for r in world.turns(s):
            if r["kind"] == "probe":
                answer = f"Your {r['fact']} is {r['nonce']}."
                r["reply"] = decorate(r, answer)
                set_stored_reply(world, s, r["turn"], keep(r, answer))
    return world


@pytest.mark.parametrize("decoration", sorted(DECORATIONS))
def test_a_recall_answer_stored_without_what_the_api_added_is_answered(decoration, tmp_path, redis_server):
    world = recall_world(DECORATIONS[decoration], lambda r, answer: answer)
    summary = audit(tmp_path, redis_server, world)
    assert read_findings(tmp_path / "run") == []
    assert summary["verdict"]["result"] == "pass"


@pytest.mark.parametrize("decoration", sorted(DECORATIONS))
def test_a_short_stored_text_without_the_recalled_value_is_still_unanswered(decoration, tmp_path, redis_server):
    """The buggy twin: the store keeps an acknowledgement without the value ("Let me check.")."""
    world = recall_world(DECORATIONS[decoration], lambda r, answer: "Let me check.")
    probes = {("unanswered", s, r["turn"]) for s in world.order for r in world.turns(s) if r["kind"] == "probe"}
    for s in world.order:  # the reply holds the acknowledgement too: a part of it, yet no answer
        for r in world.turns(s):
            if r["kind"] == "probe":
                r["reply"] = "Let me check. " + r["reply"]
    summary = audit(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == probes
    assert summary["verdict"]["result"] == "fail"


def test_a_generic_short_text_or_the_value_alone_is_no_answer(tmp_path, redis_server):
    """A chatter reply "Sure." with a footer stored as "Sure.", and a probe's value stored alone, stay unanswered."""
    world = world_of(sessions=1)
    (s,) = world.order
    chatter, probe = record(world, s, 1), record(world, s, 2)
    chatter["reply"] = "Sure." + FOOTER
    set_stored_reply(world, s, 1, "Sure.")
    probe["reply"] = f"Your {probe['fact']} is {probe['nonce']}." + FOOTER
    set_stored_reply(world, s, 2, probe["nonce"])
    audit(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("unanswered", s, 1), ("unanswered", s, 2)}


# ---- W8: the stored answer quotes the turn's own message ------------------------------------------------------

def think(r, reply):
    return f"<think>\nThe user wrote: {r['message']}\nI should acknowledge it.\n</think>\n\n{reply}"


def qa_json(r, reply):
    return json.dumps({"question": r["message"], "answer": reply, "sources": ["kb://faq/1", "kb://faq/7"]})


@pytest.mark.parametrize("shape", [think, qa_json])
@pytest.mark.parametrize("langchain", [False, True])
def test_an_answer_quoting_its_own_message_is_answered(shape, langchain, tmp_path, redis_server):
    """think_inline, lc_think_r1 (RunnableWithMessageHistory keeps the reasoning model's raw AIMessage), qa_json."""
    world = world_of()
    for s in world.order:
        for r in world.turns(s):
            set_stored_reply(world, s, r["turn"], shape(r, r["reply"]))
    summary = audit(tmp_path, redis_server, world, langchain=langchain)
    assert read_findings(tmp_path / "run") == []
    assert summary["verdict"]["result"] == "pass"


@pytest.mark.parametrize("shape", [think, qa_json])
def test_an_answer_quoting_another_sessions_message_is_crosstalk(shape, tmp_path, redis_server):
    """The buggy twin: the reasoning quotes another session's message (a shared prompt buffer): cross-talk, and
    that entry answers nothing; the other turns stay answered."""
    world = world_of()
    victim, source = world.order[1], world.order[2]
    theirs = record(world, source, 3)
    r = record(world, victim, 3)
    set_stored_reply(world, victim, 3, shape(theirs, r["reply"]))
    audit(tmp_path, redis_server, world)
    keys = finding_keys(tmp_path / "run")
    assert ("unanswered", victim, 3) in keys and {k[0] for k in keys} == {"unanswered", "crosstalk"}
    assert {k[1] for k in keys} == {victim}
    cross = [f for f in read_findings(tmp_path / "run") if f["class"] == "crosstalk"]
    assert {(f["evidence"]["source_session"], f["evidence"]["source_turn"]) for f in cross} == {(source, 3)}


def test_an_answer_stored_with_the_earlier_messages_of_the_prompt_is_no_answer(tmp_path, redis_server):
    """The prompt's earlier messages (their tokens) with the completion: not this turn's answer, as before."""
    world = world_of(sessions=1)
    (s,) = world.order
    r, earlier = record(world, s, 3), record(world, s, 1)
    set_stored_reply(world, s, 3, f"Human: {earlier['message']}\nHuman: {r['message']}\nAI: {r['reply']}")
    audit(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("unanswered", s, 3)}


# ---- W4: a double-send answered together, the reply stored once -----------------------------------------------

def debounce_world(burst: bool):
    """Turns 1 and 2 got one reply (answering both); the store holds both user entries, then that reply once.
    ``burst``: turn 2 was sent while turn 1 was in flight; else after turn 1 was answered."""
    world = world_of(kinds=("plant", "chatter", "chatter", "chatter", "probe"), sessions=3)
    for s in world.order:
        one, two = record(world, s, 1), record(world, s, 2)
        if burst:
            two["sent"] = one["sent"] + 0.1
            one["received"] = two["received"] = two["sent"] + 0.3
        together = f"{one['reply']} {two['reply']}"
        one["reply"] = two["reply"] = together
        history = [(t, m) for t, m in world.stored[s] if not (t in (1, 2) and m["type"] == "ai")]
        at = next(i for i, (t, m) in enumerate(history) if t == 2) + 1
        world.stored[s] = history[:at] + [(2, lc("ai", together))] + history[at:]
    return world


def test_a_burst_answered_together_and_stored_once_is_answered(tmp_path, redis_server):
    summary = audit(tmp_path, redis_server, debounce_world(burst=True))
    assert read_findings(tmp_path / "run") == []
    assert summary["verdict"]["result"] == "pass"


def test_turns_one_after_the_other_with_one_stored_reply_stay_unanswered(tmp_path, redis_server):
    """Sequential turns are answered one by one: the same text stored once answers one of them."""
    world = debounce_world(burst=False)
    audit(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("unanswered", s, 1) for s in world.order}


# ---- W2: every entry a pickle ---------------------------------------------------------------------------------

def pickled_world(amnesia: bool):
    world = world_of(sessions=4, verdict_amnesia=amnesia)
    entries = {s: [pickle.dumps(m, protocol=4) for _, m in world.stored[s]] for s in world.order}
    return world, entries


def test_a_bot_whose_every_entry_is_a_pickle_it_reads_back_is_no_verdict_naming_pickle_and_reader(
        tmp_path, redis_server):
    world, entries = pickled_world(amnesia=False)
    with pytest.raises(TemplateMismatch, match=r"(?s)is a Python pickle.*the bot read most of them back.*--reader.*pickle drift"):
        audit(tmp_path, redis_server, world, entries=entries)


def test_a_history_pickled_into_one_string_it_reads_back_is_no_verdict(tmp_path, redis_server):
    world, _ = pickled_world(amnesia=False)
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = redis_server.client()
    for s in world.order:
        client.set(f"message_store:{s}", pickle.dumps([m for _, m in world.stored[s]], protocol=4))
    with pytest.raises(TemplateMismatch, match=r"(?s)pickle.*--reader"):
        audit_run(run, StoreOptions(url=redis_server.url, format="blob"), gates=parse_gates("strict"))


def test_pickles_a_bot_cannot_read_back_stay_corrupt(tmp_path, redis_server):
    """Pickle drift: the release that cannot unpickle loads an empty history and fails its probes: FAIL corrupt."""
    world, entries = pickled_world(amnesia=True)
    summary = audit(tmp_path, redis_server, world, entries=entries)
    assert summary["verdict"]["result"] == "fail" and summary["anomalies"]["corrupt"] > 0


def test_a_few_pickles_among_readable_entries_stay_corrupt(tmp_path, redis_server):
    world = world_of(sessions=3)
    entries = {s: [json.dumps(m) for _, m in world.stored[s]] for s in world.order}
    for s in world.order:
        entries[s].insert(2, pickle.dumps({"type": "ai", "data": {"content": "x"}}, protocol=4))
    summary = audit(tmp_path, redis_server, world, entries=entries)
    assert summary["anomalies"] == {"corrupt": 3} and summary["verdict"]["result"] == "fail"


# ---- W3: replies stored under the user's role -----------------------------------------------------------------

def test_replies_stored_under_the_users_role_are_judged_not_read_as_one_entry_per_exchange(tmp_path, redis_server):
    world = world_of(sessions=3)
    for s in world.order:
        world.stored[s] = [(t, lc("human", m["data"]["content"])) for t, m in world.stored[s]]
    summary = audit(tmp_path, redis_server, world)
    assert summary["verdict"]["result"] == "fail"
    # not a second copy of each message (the reply quotes it, token included), nor cross-talk (a reply quoting
    # another session's token): the replies, under the wrong role
    assert summary["anomalies"] == {"unanswered": sum(len(world.turns(s)) for s in world.order)}
    assert all(isinstance(f["evidence"]["reply_stored_as_user_entry"], int) for f in read_findings(tmp_path / "run"))


def test_one_entry_per_exchange_with_the_reply_in_a_field_is_still_no_verdict(tmp_path, redis_server):
    world = world_of(sessions=3)
    entries = {s: [json.dumps({"type": "human", "data": {"content": r["message"]}, "response": r["reply"]})
                   for r in world.turns(s)] for s in world.order}
    with pytest.raises(TemplateMismatch, match="one entry per exchange"):
        audit(tmp_path, redis_server, world, entries=entries)


# ---- W10: the answer kept in a tool call's arguments ----------------------------------------------------------

def store_tool_calls(url, world, args_of):
    """Each AIMessage stored by LangChain's RedisChatMessageHistory with empty content and one tool call."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community.chat_message_histories import RedisChatMessageHistory
        from langchain_core.messages import AIMessage, HumanMessage
    for s in world.order:
        history = RedisChatMessageHistory(s, url=url)
        by_turn = {r["turn"]: r for r in world.turns(s)}
        for t, m in world.stored[s]:
            if m["type"] == "human":
                history.add_message(HumanMessage(content=m["data"]["content"]))
            else:
                history.add_message(AIMessage(content="", tool_calls=[
                    {"name": "Answer", "args": args_of(by_turn[t]), "id": f"call_{t}", "type": "tool_call"}]))
        history.redis_client.close()


def test_a_structured_answer_kept_in_a_tool_calls_arguments_is_answered(tmp_path, redis_server):
    world = world_of()
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_tool_calls(redis_server.url, world, lambda r: {"answer": r["reply"], "confidence": 0.9})
    summary = audit_run(run, StoreOptions(url=redis_server.url), gates=parse_gates("strict"))
    assert read_findings(run) == []
    assert summary["verdict"]["result"] == "pass"


def test_a_tool_call_that_is_not_the_answer_answers_nothing(tmp_path, redis_server):
    """An agent's tool call (a search for the user's question) stored without the final answer: unanswered."""
    world = world_of(sessions=2)
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_tool_calls(redis_server.url, world, lambda r: {"query": r["message"]})
    summary = audit_run(run, StoreOptions(url=redis_server.url), gates=parse_gates("strict"))
    assert summary["anomalies"] == {"unanswered": sum(len(world.turns(s)) for s in world.order)}


def test_user_entries_wrapped_in_tags_beside_replies_quoting_the_message_are_not_swapped_roles(tmp_path, redis_server):
    """User entries stored as <user_input>[gf..t0] ...</user_input> (prompt-injection hygiene) and replies that start by
    quoting the message: exit 2 "the roles are the other way round", and the advised swap FAILed a correct bot
    (bot hunt 11 W7). The user entries hold their tokens: PASS. Roles truly swapped are still named."""
    import time

    from oracle.keys import TemplateMismatch
    from support_oracle import TurnSpec, build_world, fill_redis, write_journal

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(4)], start=time.time() - 60, seed=23)
    by = {(r["session"], r["turn"]): r for r in world.records}
    for s, entries in world.stored.items():
        for n, (turn, m) in enumerate(entries):
            r, data = by[(s, turn)], dict(m["data"])
            if m["type"] == "human":
                data["content"] = f"<user_input>{data['content']}</user_input>"
            else:
                r["reply"] = data["content"] = f"{r['message']}\n\n{data['content']}"
            entries[n] = (turn, {**m, "data": data})
    write_journal(tmp_path, world.records)
    fill_redis(redis_server.client(), world)
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url))
    assert summary["verdict"]["result"] == "pass", summary["verdict"]["failed"]

    swapped = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                           for _ in range(4)], start=time.time() - 60, seed=29)
    for s, entries in swapped.stored.items():  # the roles the other way round: the user's messages stored as "ai"
        swapped.stored[s] = [(t, {**m, "type": "ai" if m["type"] == "human" else "human"}) for t, m in entries]
    other = tmp_path / "swapped"
    write_journal(other, swapped.records)
    fill_redis(redis_server.client(), swapped)
    with pytest.raises(TemplateMismatch, match="other way round"):
        audit_run(other, StoreOptions(url=redis_server.url))
