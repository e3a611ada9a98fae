"""One root cause, one count: findings of different sessions that are one fault are linked, and
every finding gets what only the whole run can tell.

A turn the bot wrote under another session's key is one fault seen twice: ``lost`` (or a whole
session ``vanished``) where it belongs and ``crosstalk`` where it landed. The checkers judge a
batch of sessions at a time and cannot see that, so this pass runs over all findings once the
judging is done: it indexes where every other-session token was found, then gives each lost turn
and gone session whose turns sit under other sessions' keys the cause ``misroute``, the evidence
of where they went, and an explanation that says so. It also resolves cross-talk sources judged in
another batch (is the source this run's? when was it sent?), adds the store's evidence about
missing keys to gone sessions, explains every finding, and counts findings per window. Every
finding keeps its class and evidence; its ``cause`` is what the verdict counts (oracle/verdict.py).

Memory: the indexes hold one entry per cross-talk or loss finding, never one per turn of the run.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from contracts import codec
from oracle.checkers import pending
from oracle.explain import explain
from oracle.history import Journal

MISROUTE = "misroute"
GONE = ("vanished", "expired", "evicted")
EXAMPLES = 5  # where a vanished session's turns went: this many shown
LATE_S = 10.0  # a loss acknowledged this close to the store's read may be a write-behind bot's write not made yet
STORE_DOWN = ("redis-restart",)  # fault kinds that stop the store (a failover is not one: it may lose writes)


@dataclass
class Linked:
    causes: Counter = field(default_factory=Counter)      # findings per cause
    misrouted: int = 0                                    # acknowledged turns written under another session
    misfiled_replies: int = 0                             # replies written under another session (the turn at home)
    anomalies: Counter = field(default_factory=Counter)   # findings per window index (by evidence time)
    crosstalk: Counter = field(default_factory=Counter)   # cross-talk findings per window index
    classes: Counter = field(default_factory=Counter)     # findings per class
    confirmed: Counter = field(default_factory=Counter)   # session -> pending findings confirmed here (not yet counted)
    window: dict | None = None                            # every loss a window memory's (``window_memory``)
    shared_keys: dict = field(default_factory=dict)       # key -> the sessions it was read for, two or more
    unfinished: int = 0                                   # unanswered turns whose reply the client read unfinished
    unfinished_first: dict | None = None                  # the first of them: its reply and the stored answer
    unanswered_replies: Counter = field(default_factory=Counter)  # unanswered turns per reply the client read
    stored_instead: set = field(default_factory=set)      # a few of the assistant entries stored in their place


def link(source: Path, target: Path, journal: Journal, window_s: float, missing_keys: dict | None,
         read_at: float | None = None, outages: list = ()) -> Linked:
    """Read raw findings from ``source``; write them linked and explained to ``target``. ``read_at``: when the
    store was read (a loss acknowledged just before may be a write not made yet). ``outages``: (fault kind,
    start, end) of the faults that took the store down (``STORE_DOWN``)."""
    landed: dict[tuple[str, int], tuple[str, str, str]] = {}  # (source session, turn) -> (session, key, finding id)
    missing: set = set()  # (session, turn) of acknowledged turns its own key does not hold
    replies_landed: dict = {}  # (source session, turn) -> where an assistant entry carrying its token was found
    unanswered: set = set()  # (session, turn) of turns stored without their reply
    lost_in: set = set()  # sessions with lost turns
    held: set = set()  # the user entries their keys hold (None: a session whose losses are not its oldest turns)
    unresolved: set = set()  # cross-talk source sessions judged in another batch
    values: set = set()  # planted values found in other sessions' histories: whose? (checkers.check_stray_values)
    read_for: dict = {}  # key of a cross-talk finding -> the sessions it was read for
    for f in _findings(source):
        e = f["evidence"]
        if pending(f):
            values.add(e["source_value"])
        elif f["class"] == "crosstalk":
            read_for.setdefault(e.get("key"), set()).add(f["session"])
            landed.setdefault((e["source_session"], e["source_turn"]), (f["session"], e.get("key"), f["id"]))
            if e.get("role") == "assistant":
                replies_landed.setdefault((e["source_session"], e["source_turn"]),
                                          (f["session"], e.get("key"), f["id"]))
            if e.get("source_journaled") is None:
                unresolved.add(e["source_session"])
        elif f["class"] == "lost":
            missing.add((f["session"], f["turn"]))
            if not e.get("altered"):
                lost_in.add(f["session"])
                held.add(e["stored_user_entries"] if e.get("oldest") else None)
        elif f["class"] in GONE:
            missing.update((f["session"], turn) for turn in e.get("ok_turn_numbers") or ())
        elif f["class"] == "unanswered":
            unanswered.add((f["session"], f["turn"]))
    sent, planted = journal.look_up(unresolved, values) if unresolved or values else ({}, {})
    journaled = {session for session, _ in sent}
    out = Linked(window=window_memory(held, len(lost_in)),
                 shared_keys={key: sorted(ss) for key, ss in read_for.items() if key is not None and len(ss) > 1})
    misrouted: set = set()
    misfiled: set = set()  # (session, turn) of replies written under another session's key
    with open(target, "wb") as fh:
        for f in _findings(source):
            e = f["evidence"]
            if pending(f):
                del e["pending"]
                if not _confirm(f, planted.get(e["source_value"]), landed):
                    continue
                out.confirmed[f["session"]] += 1
            elif f["class"] == "crosstalk" and e.get("source_journaled") is None:
                e["source_journaled"] = e["source_session"] in journaled
                f["time"] = sent.get((e["source_session"], e["source_turn"]))
            if f["class"] == "crosstalk" and e.get("key") in out.shared_keys:
                e["key_read_for"] = out.shared_keys[e["key"]][:EXAMPLES]
                e["key_read_for_count"] = len(out.shared_keys[e["key"]])
            if f["class"] in GONE:
                _key_evidence(f, missing_keys)
                if e.get("found_in_shared"):  # its history is in one key with other users': cross-talk, counted
                    out.confirmed[f["session"]] += 1
            elif f["class"] == "lost" and not e.get("altered"):
                _other_key_names(f, missing_keys)
            if f["class"] in GONE or f["class"] == "lost" and not e.get("altered"):
                _acknowledged_while_down(f, outages)
            if f["class"] == "lost" and e.get("oldest") and not e.get("store_down"):
                _restarted_since(f, outages, missing_keys)
            if f["class"] == "lost" and isinstance(read_at, (int, float)) and \
                    isinstance(e.get("received"), (int, float)) and 0 <= read_at - e["received"] < LATE_S:
                e["read_after_s"] = round(read_at - e["received"], 1)
            if f["class"] == "unanswered" and (e.get("reply_unfinished") or e.get("reply_repeated")):
                out.unfinished += 1
                out.unfinished_first = out.unfinished_first or (
                    {"reply": e.get("reply"), "stored": e["reply_unfinished"]} if e.get("reply_unfinished") else
                    {"reply": e.get("reply"), "stored": e.get("stored_answer"), "repeated": e["reply_repeated"]})
            if f["class"] == "unanswered" and len(out.unanswered_replies) <= 1:  # is it one reply, read every turn?
                out.unanswered_replies[e.get("reply")] += 1
                if e.get("stored_instead") and len(out.stored_instead) < 3:
                    out.stored_instead.add(e["stored_instead"])
            f["cause"] = _misfiled_reply(f, replies_landed, unanswered, misfiled) or _cause(f, landed, missing, misrouted)
            f["explanation"] = explain(f)
            fh.write(codec.dumps_line(f))
            out.causes[f["cause"]] += 1
            out.classes[f["class"]] += 1
            if f["time"] is not None:
                window = int(f["time"] // window_s)
                out.anomalies[window] += 1
                if f["class"] == "crosstalk":
                    out.crosstalk[window] += 1
    out.misrouted, out.misfiled_replies = len(misrouted), len(misfiled)
    return out


def shared_key_warning(shared_keys: dict) -> str | None:
    """The run-level cause behind cross-talk found in keys that were each read as the history of more than one of
    the run's conversations: the bot gave those conversations one id (``--session-from``: a counter that starts
    again after a restart, or one per process), so each key holds all of their turns. None when no key was."""
    if not shared_keys:
        return None
    key, sessions = next(iter(sorted(shared_keys.items())))
    return (f"{len(shared_keys):,} key(s) of the store were each read as the history of more than one of this run's "
            f"conversations (for example {key}, for {len(sessions)}: {', '.join(sessions[:3])}): the bot gave those "
            "conversations one id (an id counter that starts again after a restart, or one per process), so each "
            "holds the others' turns; their cross-talk is that reuse")


def window_memory(held: set, sessions: int) -> dict | None:
    """{"user_entries": N, "sessions": n} when in every session with lost turns (two or more sessions) the lost
    turns are its oldest and its key holds the same N user entries (``held`` is {N}): a bot that keeps only its
    last N exchanges (LTRIM, a window memory) forgets by design, and the audit says so beside the losses."""
    if sessions < 2 or len(held) != 1 or None in held:
        return None
    return {"user_entries": next(iter(held)), "sessions": sessions}


def _misfiled_reply(f: dict, replies_landed: dict, unanswered: set, misfiled: set) -> str | None:
    """A reply written under another session's key is one fault seen twice: ``unanswered`` at home (the user entry is
    stored, its reply is not) and ``crosstalk`` where it landed (an assistant entry carrying this turn's token).
    Both get the cause ``misroute``; None for any other finding."""
    cls, e = f["class"], f["evidence"]
    if cls == "unanswered" and (f["session"], f["turn"]) in replies_landed:
        victim, key, finding = replies_landed[(f["session"], f["turn"])]
        e["reply_stored_under"] = {"session": victim, "key": key, "finding": finding}
        misfiled.add((f["session"], f["turn"]))
        return MISROUTE
    if cls == "crosstalk" and e.get("role") == "assistant" and (e["source_session"], e["source_turn"]) in unanswered:
        e["missing_from_own_session"] = True
        return MISROUTE
    return None


def _confirm(f: dict, plant: tuple | None, landed: dict) -> bool:
    """A pending finding of another session's value (checkers.check_stray_values), given the plant turn that
    planted it: cross-talk from that turn, unless no turn of the run planted the value (an LLM's "1999-2000"),
    this session did, or the plant's own user entry landed here too (its answer came with it: one fault, found
    by the token)."""
    if plant is None or plant[0] == f["session"] or landed.get(plant[:2], ("",))[0] == f["session"]:
        return False
    f["evidence"].update(source_session=plant[0], source_turn=plant[1], source_journaled=True)
    f["time"] = plant[2]
    return True


def _findings(path: Path):
    """The raw findings, numbered per class in file order (``lost-1``, ``lost-2``, ...)."""
    ids: Counter = Counter()
    with open(path, "rb") as fh:
        for line in fh:
            f = codec.loads(line)
            ids[f["class"]] += 1
            yield {"id": f"{f['class']}-{ids[f['class']]}", **f}


def _cause(f: dict, landed: dict, missing: set, misrouted: set) -> str:
    cls, session, e = f["class"], f["session"], f["evidence"]
    if cls == "lost" and (session, f["turn"]) in landed:
        victim, key, finding = landed[(session, f["turn"])]
        e["stored_under"] = {"session": victim, "key": key, "finding": finding}
        misrouted.add((session, f["turn"]))
        return MISROUTE
    if cls in GONE and e.get("found_in_shared"):  # written under one key that every session shares: the store
        misrouted.update((session, turn) for turn in e.get("ok_turn_numbers") or ())  # lost nothing
        return MISROUTE
    if cls in GONE:
        went = [(turn, landed[(session, turn)]) for turn in e.get("ok_turn_numbers") or () if (session, turn) in landed]
        if went:
            e["misrouted_turns"] = len(went)
            e["stored_under"] = [{"turn": turn, "session": victim, "key": key, "finding": finding}
                                 for turn, (victim, key, finding) in went[:EXAMPLES]]
            misrouted.update((session, turn) for turn, _ in went)
            return MISROUTE
    if cls == "crosstalk" and (e["source_session"], e["source_turn"]) in missing:
        e["missing_from_own_session"] = True
        return MISROUTE
    return cls


def _key_evidence(f: dict, missing_keys: dict | None) -> None:
    """What the store said about missing keys (oracle/keys.py), on each gone session it concerns."""
    if not missing_keys:
        return
    elsewhere = (missing_keys.get("found_elsewhere") or {}).get(f["session"])
    if elsewhere:
        f["evidence"]["found_under"] = elsewhere
    found_in_shared = missing_keys.get("found_in_shared") or {}
    shared = found_in_shared.get(f["session"])
    if shared:
        f["evidence"]["found_in_shared"] = shared
    elif found_in_shared and not elsewhere:  # only a sample was looked for: the others are most likely there too
        f["evidence"]["shared_keys"] = {"keys": sorted(set(found_in_shared.values()))[:EXAMPLES],
                                        "found": len(found_in_shared),
                                        "looked_for": missing_keys.get("looked_for") or len(found_in_shared)}
    elif not elsewhere:  # only a sample was looked for: this one is most likely where the others were found
        _other_key_names(f, missing_keys)
    if missing_keys.get("restarted_at"):  # when exactly is in summary.information (a reading of the live server)
        f["evidence"]["store_restarted"] = True
    elif missing_keys.get("bot_forgot") and not elsewhere and not found_in_shared:
        f["evidence"]["bot_forgot"] = True


def _other_key_names(f: dict, missing_keys: dict | None) -> None:
    """Gone sessions of the run found under other key names (oracle/keys.py looks for a sample of them): the bot
    files sessions under a key the template does not name, such as a prefix a release renamed. A gone session not
    looked for, and a lost turn (a history split when the name changed mid-run), get where the sample was found;
    the class stays."""
    elsewhere = (missing_keys or {}).get("found_elsewhere") or {}
    if not elsewhere:
        return
    f["evidence"]["other_key_names"] = {"keys": sorted({k for keys in elsewhere.values() for k in keys})[:EXAMPLES],
                                        "found": len(elsewhere),
                                        "looked_for": missing_keys.get("looked_for") or len(elsewhere)}


def _restarted_since(f: dict, outages: list, missing_keys: dict | None) -> None:
    """A session's oldest turns lost, acknowledged before the store restarted (a fault that took it down, or the
    server's uptime): the restart kept nothing of them and the turns after it made a new key. They were told as a race
    or a trim, though the report charged them to the restart (bot hunt 17)."""
    e, restarts = f["evidence"], [(start, kind) for kind, start, _ in outages]
    if isinstance((missing_keys or {}).get("restarted_at"), (int, float)):
        restarts.append((missing_keys["restarted_at"], None))
    if not isinstance(e.get("received"), (int, float)):
        return
    after = [(at, kind) for at, kind in restarts if at >= e["received"]]
    if after:
        at, kind = min(after, key=lambda r: r[0])
        e["store_restarted_at"] = {"at": at, **({"kind": kind} if kind else {})}


def _acknowledged_while_down(f: dict, outages: list) -> None:
    """A lost turn (or a gone session) whose acknowledged turns were all sent and answered while a fault had the
    store down: the bot answered writes it could not have made (a store error swallowed), which is not the store
    losing them (a restart without persistence)."""
    e = f["evidence"]
    first, last = (e.get("sent"), e.get("received")) if f["class"] == "lost" else (e.get("first_ok_sent"), f["time"])
    if not isinstance(first, (int, float)) or not isinstance(last, (int, float)):
        return
    for kind, start, end in outages:
        if start <= first and last <= end:
            e["store_down"] = {"kind": kind, "from": start, "to": end}
            return
