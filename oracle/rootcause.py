"""One root cause, one count: findings of different sessions that are one fault are linked.

A turn the bot wrote under another session's key is one fault seen twice: ``lost`` (or a whole
session ``vanished``) where it belongs and ``crosstalk`` where it landed. The checkers judge one
session at a time and cannot see that, so this pass runs over all findings once the judging is
done: it indexes where every other-session token was found, then gives each lost turn and
vanished session whose turns sit under other sessions' keys the cause ``misroute``, the evidence
of where they went, and an explanation that says so. Every finding keeps its class and evidence;
its ``cause`` is what the verdict counts (oracle/verdict.py).

Memory: the index holds one entry per cross-talk finding, never one per turn of the run.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from contracts import codec
from oracle.explain import explain

MISROUTE = "misroute"
EXAMPLES = 5  # where a vanished session's turns went: this many shown


def link(source: Path, target: Path) -> tuple[list[tuple], Counter, set]:
    """Read raw findings from ``source``, write them linked and explained to ``target``.

    Returns (compact rows (class, cause, session, turn, time), counts per cause, the (session,
    turn) pairs found under another session's key)."""
    landed: dict[tuple[str, int], tuple[str, str, str]] = {}  # (source session, turn) -> (session, key, finding id)
    missing: set = set()  # (session, turn) of acknowledged turns its own key does not hold
    with open(source, "rb") as fh:
        for line in fh:
            f = codec.loads(line)
            e = f["evidence"]
            if f["class"] == "crosstalk":
                landed.setdefault((e["source_session"], e["source_turn"]), (f["session"], e.get("key"), f["id"]))
            elif f["class"] == "lost":
                missing.add((f["session"], f["turn"]))
            elif f["class"] in ("vanished", "expired"):
                missing.update((f["session"], turn) for turn in e.get("ok_turn_numbers") or ())
    compact: list[tuple] = []
    causes: Counter = Counter()
    misrouted: set = set()
    with open(source, "rb") as fh, open(target, "wb") as out:
        for line in fh:
            f = codec.loads(line)
            f["cause"] = _cause(f, landed, missing, misrouted)
            f["explanation"] = explain(f)
            out.write(codec.dumps_line(f))
            compact.append((f["class"], f["cause"], f["session"], f["turn"], f["time"]))
            causes[f["cause"]] += 1
    return compact, causes, misrouted


def _cause(f: dict, landed: dict, missing: set, misrouted: set) -> str:
    cls, session, e = f["class"], f["session"], f["evidence"]
    if cls == "lost" and (session, f["turn"]) in landed:
        victim, key, finding = landed[(session, f["turn"])]
        e["stored_under"] = {"session": victim, "key": key, "finding": finding}
        misrouted.add((session, f["turn"]))
        return MISROUTE
    if cls in ("vanished", "expired"):
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
