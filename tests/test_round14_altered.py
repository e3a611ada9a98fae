"""A user entry stored with its token but another text than the user sent is `lost` (altered); what a correct bot
does to a message it keeps (wraps it, prefixes a context, normalises case, white space or Unicode, merges a
double-send into one entry) is not.

Bot hunt 14 (/tmp/hunt-bots14/NOTES.md findings 1 and 3): a bot that kept each message's token but stored
"[token] Thanks, that helps." in place of what the user wrote PASSed (anomalies: none), and one that stored a plant
"My order number is X." as "My [redacted] is X." FAILed only on the model's recall, the store audit saying
"anomalies: none": a user entry was identified by its token alone, and only a plant's value was compared with the
stored text. The stored context said things the user never said.
"""
from __future__ import annotations

import json
import unicodedata

import pytest

from contracts.journal import Turn
from contracts.tokens import make_token
from oracle.audit import audit_run
from oracle.checkers import check_session
from oracle.decode import Shape, decode_session
from oracle.explain import explain
from oracle.store import RawSession, StoreOptions
from oracle.verdict import FAIL, PASS, parse_gates
from support_oracle import TurnSpec, build_world, finding_keys, lc, read_findings, write_journal, write_snapshot

S = "gf00000000000000ab"


# ---- the checker on one session -------------------------------------------------------------------------------

def turn(n: int, text: str, kind: str = "chatter", outcome: str = "ok", fact: str | None = None,
         nonce: str | None = None, sent: float | None = None, received: float | None = None) -> Turn:
    token = make_token(S, n)
    sent = 100.0 + 2 * n if sent is None else sent
    return Turn(session=S, turn=n, kind=kind, token=token, message=f"[{token}] {text}", fact=fact, nonce=nonce,
                sent=sent, received=(sent + 0.5 if received is None else received) if outcome != "fail" else None,
                outcome=outcome, status=200 if outcome == "ok" else None,
                reply=f"Noted {n}." if outcome == "ok" else None)


def judge(turns: list[Turn], stored: list[tuple[str, object]]) -> list[dict]:
    """check_session over a history given as [("human" | "ai", content)], oldest first (content as stored: a text,
    or a multimodal list of parts)."""
    entries = [json.dumps(lc(role, content)) for role, content in stored]
    raw = RawSession(S, f"message_store:{S}", True, None, entries)
    return check_session(S, turns, raw, decode_session(raw, Shape(StoreOptions())), {S: turns}).findings


def exchange(turns: list[Turn], user_text=lambda t: t.message) -> list[tuple[str, object]]:
    """Each turn's user entry (as ``user_text`` stores it) and its reply, if it has one."""
    return [e for t in turns for e in (("human", user_text(t)), ("ai", t.reply)) if e[1] is not None]


def keys(findings: list[dict]) -> list[tuple]:
    return sorted((f["class"], f["turn"]) for f in findings)


CHATTER = ["Hi, I need some help with a delivery.", "It was supposed to arrive yesterday.",
           "Can you check the status for me?"]


def test_a_chatter_message_stored_as_other_text_under_its_token_is_lost_altered():
    turns = [turn(n, text) for n, text in enumerate(CHATTER)]
    stored = exchange(turns, lambda t: t.message if t.turn != 1 else f"[{t.token}] Thanks, that helps.")
    found = judge(turns, stored)
    assert keys(found) == [("lost", 1)]
    e = found[0]["evidence"]
    assert e["altered"] is True and e["token"] == turns[1].token
    assert e["message"] == turns[1].message and e["stored"] == f"[{turns[1].token}] Thanks, that helps."
    assert "fact" not in e and e["sent"] == turns[1].sent and e["received"] == turns[1].received
    words = explain(found[0])
    assert "other text than the user sent" in words and "never said" in words and "Thanks, that helps." in words


def test_a_long_altered_message_is_shortened_in_the_evidence():
    long = "I would like to tell you about my delivery " * 10
    turns = [turn(0, long)]
    found = judge(turns, exchange(turns, lambda t: f"[{t.token}] Thanks, that helps."))
    assert keys(found) == [("lost", 0)]
    assert len(found[0]["evidence"]["message"]) <= 160 and found[0]["evidence"]["message"].endswith("...")


def test_a_plant_stored_with_its_fact_name_rewritten_is_lost_altered_though_its_value_survives():
    turns = [turn(0, "My order number is 6276-WUSG.", kind="plant", fact="order number", nonce="6276-WUSG"),
             turn(1, CHATTER[0])]
    found = judge(turns, exchange(turns, lambda t: t.message.replace("order number", "[redacted]")))
    assert keys(found) == [("lost", 0)]
    e = found[0]["evidence"]
    assert e["altered"] is True and e["fact"] == "order number"
    assert e["message"] == turns[0].message and e["stored"] == f"[{turns[0].token}] My [redacted] is 6276-WUSG."
    assert "never said" in explain(found[0]) and "order number" in explain(found[0])


def test_a_plant_stored_without_its_value_is_still_one_finding_naming_the_value():
    turns = [turn(0, "My order number is 6276-WUSG.", kind="plant", fact="order number", nonce="6276-WUSG")]
    found = judge(turns, exchange(turns, lambda t: t.message.replace("6276-WUSG", "[redacted]")))
    assert keys(found) == [("lost", 0)]
    e = found[0]["evidence"]
    assert e["altered"] is True and e["value"] == "6276-WUSG" and "message" not in e


def test_an_altered_message_merged_with_another_is_lost_and_the_intact_one_is_not():
    a, b = turn(0, CHATTER[0], sent=100.0, received=101.0), turn(1, CHATTER[1], sent=100.1, received=101.1)
    stored = [("human", f"{a.message}\n[{b.token}] Thanks, that helps."), ("ai", a.reply), ("ai", b.reply)]
    assert keys(judge([a, b], stored)) == [("lost", 1)]


def test_an_indeterminate_or_failed_turn_stored_as_other_text_is_not_judged_altered():
    turns = [turn(0, CHATTER[0]), turn(1, CHATTER[1], outcome="info"), turn(2, CHATTER[2])]
    stored = exchange(turns, lambda t: t.message if t.turn != 1 else f"[{t.token}] Thanks, that helps.")
    assert judge(turns, stored) == []
    failed = [turn(0, CHATTER[0]), turn(1, CHATTER[1], outcome="fail"), turn(2, CHATTER[2])]
    stored = exchange(failed, lambda t: t.message if t.turn != 1 else f"[{t.token}] Something else.")
    assert keys(judge(failed, stored)) == [("aborted", 1)]  # stored at all: aborted, and only that


NFKC_TEXT = "The ﬁle №５ says ＡＢＣ at ½ past."  # ligature, numero sign, full-width letters and digit, vulgar fraction


@pytest.mark.parametrize("store", [
    pytest.param(lambda t: f"<user_input>{t.message}</user_input>", id="tags"),
    pytest.param(lambda t: f"Context: the user is a customer of ACME.\n\n{t.message}", id="context-prefix"),
    pytest.param(lambda t: f"{t.message}\n\n(sent from the mobile app)", id="suffix"),
    pytest.param(lambda t: f"[2026-11-28 01:02:03] {t.message}", id="timestamp"),
    pytest.param(lambda t: "  " + t.message.replace(" ", "\n   ") + "\n", id="whitespace"),
    pytest.param(lambda t: f"[{t.token}] " + t.message.split("] ", 1)[1].upper(), id="upper-cased"),
    pytest.param(lambda t: t.message.lower(), id="lower-cased"),
    pytest.param(lambda t: f"[{t.token}] " + t.message.split("] ", 1)[1].replace(",", "").replace(".", ""),
                 id="punctuation-stripped"),
    pytest.param(lambda t: t.message.replace("'", "&#x27;").replace("?", "&#63;"), id="html-escaped"),
    pytest.param(lambda t: [{"type": "text", "text": f"[{t.token}]"}, {"type": "text", "text": t.message.split("] ", 1)[1]},
                            {"type": "image_url", "image_url": {"url": "data:,"}}], id="multimodal-parts"),
    pytest.param(lambda t: t.message.split("] ", 1)[1] + f" ({t.token})", id="token-moved"),
])
def test_a_correct_bot_storing_the_message_otherwise_is_not_altered(store):
    turns = [turn(n, text) for n, text in enumerate(CHATTER + ["What's my order number?"])]
    assert judge(turns, exchange(turns, store)) == []


def test_white_space_collapsed_and_nfkc_normalised_messages_are_not_altered():
    spaced = turn(0, "Hi,  I need\n\nsome help   with\ta delivery. ")
    assert judge([spaced], exchange([spaced], lambda t: " ".join(t.message.split()))) == []
    wide = turn(0, NFKC_TEXT)
    normalised = unicodedata.normalize("NFKC", wide.message)
    assert normalised != wide.message
    assert judge([wide], exchange([wide], lambda t: normalised)) == []
    assert judge([wide], exchange([wide], lambda t: normalised.casefold())) == []


def test_two_ok_messages_of_a_double_send_merged_into_one_entry_are_not_altered():
    a, b = turn(0, CHATTER[0], sent=100.0, received=101.0), turn(1, CHATTER[1], sent=100.1, received=101.1)
    for text in (f"{a.message}\n{b.message}", f"{b.message}\n\n{a.message}", f"<msg>{a.message}</msg><msg>{b.message}</msg>"):
        assert judge([a, b], [("human", text), ("ai", a.reply), ("ai", b.reply)]) == [], text


# ---- a whole run ----------------------------------------------------------------------------------------------

def _world(sessions: int = 3, seed: int = 14):
    return build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("chatter", "ok"),
                         TurnSpec("probe", "ok")] for _ in range(sessions)], seed=seed)


def _restore(world, session: str, how) -> None:
    """Store every user entry of ``session`` as ``how(turn, message)`` says."""
    world.stored[session] = [(t, lc("human", how(t, m["data"]["content"])) if m["type"] == "human" else m)
                             for t, m in world.stored[session]]


def _audit(run, world) -> dict:
    write_journal(run, world.records)
    write_snapshot(run, world)
    return audit_run(run, gates=parse_gates("strict"))


def test_a_run_whose_bot_stores_other_text_than_was_sent_fails_on_stored_loss(tmp_path):
    world = _world()
    chatty, planting, clean = world.order
    _restore(world, chatty, lambda t, m: m.split("]")[0] + "] Thanks, that helps." if t in (1, 2) else m)
    fact = next(r["fact"] for r in world.records if r["session"] == planting and r["turn"] == 0)
    _restore(world, planting, lambda t, m: m.replace(fact, "[redacted]") if t == 0 else m)
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("lost", chatty, 1), ("lost", chatty, 2), ("lost", planting, 0)}
    for f in read_findings(tmp_path):
        assert f["evidence"]["altered"] is True and "message" in f["evidence"]
        assert "never said" in f["explanation"]
    assert summary["anomalies"] == {"lost": 3}
    assert summary["metrics"]["stored_loss"]["count"] == 3
    assert summary["verdict"]["result"] == FAIL


@pytest.mark.parametrize("how", [
    pytest.param(lambda t, m: f"<user_input>{m}</user_input>", id="tags"),
    pytest.param(lambda t, m: f"Context: earlier you asked about deliveries.\n\n{m}", id="context-prefix"),
    pytest.param(lambda t, m: " ".join(m.replace(" ", "  \n").split()), id="whitespace-collapsed"),
    pytest.param(lambda t, m: m.split("] ", 1)[0] + "] " + m.split("] ", 1)[1].upper(), id="upper-cased"),
])
def test_a_run_whose_correct_bot_stores_messages_otherwise_passes(tmp_path, how):
    world = _world()
    for s in world.order:
        _restore(world, s, how)
    summary = _audit(tmp_path, world)
    assert read_findings(tmp_path) == []
    assert summary["anomalies"] == {} and summary["verdict"]["result"] == PASS


def test_a_run_whose_bot_merges_double_sent_messages_into_one_entry_passes(tmp_path):
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
                          TurnSpec("probe", "ok")] for _ in range(3)], seed=4)
    for s in world.order:
        stored = world.stored[s]
        users = {t: i for i, (t, m) in enumerate(stored) if m["type"] == "human" and t in (1, 2)}
        first, second = sorted(users, key=users.get)
        text = stored[users[first]][1]["data"]["content"] + "\n" + stored[users[second]][1]["data"]["content"]
        stored[users[first]] = (first, lc("human", text))
        del stored[users[second]]
    summary = _audit(tmp_path, world)
    assert read_findings(tmp_path) == []
    assert summary["anomalies"] == {} and summary["verdict"]["result"] == PASS
