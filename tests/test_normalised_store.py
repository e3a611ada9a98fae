"""A store that normalises what it keeps (NFKC, lower-cased, punctuation stripped: a bot cleaning text for its
embeddings) keeps the replies: they are not `unanswered`.

Bot hunt 6 (case ``normalise``): a correct bot storing both the user's message and its reply so cleaned FAILed with
about 3,900 `unanswered` turns of 5,400 while every probe was answered (0 amnesia). The reply check compared the
stored reply with the journaled one read alike by ``_plain`` (case, white space, Unicode forms) but with its
punctuation, while the duplicate check (``_words``) and the plant and probe checks (``value_spellings``) already read
texts without it. A reply truly missing, or one belonging to another turn or another session, is still found."""
from __future__ import annotations

import re
import unicodedata

from oracle.audit import audit_run
from oracle.store import StoreOptions
from oracle.verdict import parse_gates
from support_oracle import TurnSpec, build_world, finding_keys, lc, read_findings, store_with_langchain, write_journal


def clean(text: str) -> str:
    """What the hunted bot stored for each message and reply ([gf..t3] -> gf..t3, 8892-X7Q4 -> 8892x7q4)."""
    return re.sub(r"[^\w\s]", "", unicodedata.normalize("NFKC", text).lower())


def normalised_world(sessions: int = 3, seed: int = 11):
    """Plants, probes and chatter, every ok turn's message and reply stored cleaned (the token stays readable)."""
    kinds = ["plant", "chatter", "probe", "chatter", "plant", "probe"]
    world = build_world([[TurnSpec(kind, "ok") for kind in kinds] for _ in range(sessions)], seed=seed)
    for s in world.order:
        world.stored[s] = [(t, lc(m["type"], clean(m["data"]["content"]))) for t, m in world.stored[s]]
    return world


def audit_on_redis(tmp_path, redis_server, world, name: str = "run") -> dict:
    run = tmp_path / name
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world)
    return audit_run(run, StoreOptions(url=redis_server.url), gates=parse_gates("strict"))


def reply_of(world, session: str, turn: int) -> str:
    return next(r["reply"] for r in world.records if r["session"] == session and r["turn"] == turn)


def test_a_store_keeping_replies_normalised_passes_on_a_real_redis(tmp_path, redis_server):
    world = normalised_world()
    # the replies quote the message: punctuation inside them ('"', '[', '-', '.') is what the store dropped
    stored = world.stored[world.order[0]][1][1]["data"]["content"]
    assert stored != reply_of(world, world.order[0], 0) and "-" not in stored and "[" not in stored
    summary = audit_on_redis(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == set()
    assert summary["anomalies"] == {} and summary["verdict"]["result"] == "pass"


def test_unicode_forms_and_case_folding_read_alike_in_a_normalised_reply(tmp_path, redis_server):
    """A reply with a ligature, full-width digits and a sharp s: NFKC and lower() on one side, the reading on both."""
    world = normalised_world(sessions=1)
    s = world.order[0]
    for r in world.records:
        if r["turn"] == 1:
            r["reply"] = "Straße: the ﬁle is №１２ — okay?"
    world.stored[s] = [(t, lc("ai", clean("Straße: the ﬁle is №１２ — okay?")) if t == 1 and m["type"] == "ai" else m)
                       for t, m in world.stored[s]]
    assert audit_on_redis(tmp_path, redis_server, world)["anomalies"] == {}


def test_a_reply_truly_missing_from_a_normalised_store_is_still_unanswered(tmp_path, redis_server):
    world = normalised_world()
    s = world.order[1]
    world.stored[s] = [(t, m) for t, m in world.stored[s] if not (t == 3 and m["type"] == "ai")]
    summary = audit_on_redis(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("unanswered", s, 3)}
    assert summary["anomalies"] == {"unanswered": 1}
    assert read_findings(tmp_path / "run")[0]["evidence"]["reply"] == reply_of(world, s, 3)


def test_a_normalised_reply_of_another_turn_answers_only_that_turn(tmp_path, redis_server):
    """Turn 2's reply is missing and turn 3's (normalised) is stored after both: it is turn 3's, not turn 2's."""
    world = normalised_world()
    s = world.order[0]
    history = [(t, m) for t, m in world.stored[s] if not (t == 2 and m["type"] == "ai")]
    world.stored[s] = history
    audit_on_redis(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("unanswered", s, 2)}


def test_a_cut_or_padded_normalised_reply_is_no_copy(tmp_path, redis_server):
    """Word for word means the whole reply: its first half, or the reply with more words after it, is no answer."""
    world = normalised_world(sessions=1)
    s = world.order[0]
    cut = {1: lambda text: text[: len(text) // 3], 4: lambda text: text + " and another thing entirely"}
    world.stored[s] = [(t, lc("ai", cut[t](m["data"]["content"])) if t in cut and m["type"] == "ai" else m)
                       for t, m in world.stored[s]]
    audit_on_redis(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("unanswered", s, 1), ("unanswered", s, 4)}


def test_another_sessions_normalised_reply_in_place_of_this_ones_is_crosstalk_and_unanswered(tmp_path, redis_server):
    world = normalised_world()
    victim, source = world.order[2], world.order[1]
    theirs = next(m for t, m in world.stored[source] if t == 1 and m["type"] == "ai")
    world.stored[victim] = [(t, theirs) if t == 1 and m["type"] == "ai" else (t, m) for t, m in world.stored[victim]]
    audit_on_redis(tmp_path, redis_server, world)
    keys = finding_keys(tmp_path / "run")
    assert ("unanswered", victim, 1) in keys
    assert {k for k in keys if k[0] != "crosstalk"} == {("unanswered", victim, 1)}
    cross = [f for f in read_findings(tmp_path / "run") if f["class"] == "crosstalk"]
    assert cross and {f["session"] for f in cross} == {victim}
    assert {f["evidence"]["source_session"] for f in cross} == {source}


def test_swapped_turns_in_a_normalised_store_are_reordered_not_unanswered(tmp_path, redis_server):
    """Turn 4's exchange stored before turn 3's although turn 3 was answered before turn 4 was sent."""
    world = normalised_world(sessions=2)
    s = world.order[0]
    pairs = {t: [e for e in world.stored[s] if e[0] == t] for t in range(6)}
    world.stored[s] = [e for t in (0, 1, 2, 4, 3, 5) for e in pairs[t]]
    audit_on_redis(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("reordered", s, 4)}


def test_a_reply_stored_twice_in_a_normalising_store_is_duplicated(tmp_path, redis_server):
    """Each stored copy is the reply word for word once punctuation is dropped: two copies of one turn's reply are
    the duplicate they would be stored verbatim (only verbatim copies were counted: the bug passed)."""
    world = normalised_world()
    s = world.order[2]
    copy = next(m for t, m in world.stored[s] if t == 1 and m["type"] == "ai")
    at = next(i for i, (t, m) in enumerate(world.stored[s]) if t == 1 and m["type"] == "ai")
    world.stored[s].insert(at + 1, (1, copy))
    audit_on_redis(tmp_path, redis_server, world)
    assert finding_keys(tmp_path / "run") == {("duplicated", s, 1)}
