"""Online judgement of one reply: did a probe recall its nonce, does the reply leak another session?

Cross-talk is seen two ways: a token names its session by itself (contracts/tokens.py), and a
nonce is looked up in a bounded map of recent plants made *by this process* (nonce -> session).
So token leaks are caught across processes and machines; nonce leaks only when the planting
session ran in the same Locust process. The map is bounded (oldest plants forgotten first)
so memory stays flat on long runs.

A nonce (a fact's value) is matched in any case, in recall and in cross-talk alike: a bot may
lower-case what it says as it may lower-case what it stores (the audit's stored-plant check,
oracle/checkers.py ``check_facts``, ignores case the same way), and with any dash for its hyphen: a model
that typesets "8892–X7Q4" with an en dash recalled it. A recall also takes a space or nothing for the hyphen
("8892 X7Q4"); cross-talk looks for the value as planted (with a dash). Tokens are matched as written.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import NamedTuple

from contracts.tokens import TOKEN_RE, value_spellings

DEFAULT_CAPACITY = 200_000
# contracts.tokens.NONCE_RE in either case (a bot may answer "8892-x7q4"); the registry keys are upper case,
# as new_nonce writes them. Not re.IGNORECASE: that would also take "ſ" or the Kelvin sign for a letter.
NONCE_ANY_CASE_RE = re.compile(r"\b[0-9]{4}-[A-Za-z0-9]{4}\b")
# the dashes a model or a typesetting step may write for a nonce's hyphen (en and em dash, minus, their kin)
HYPHEN = str.maketrans(dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"))


def as_written(reply: str) -> str:
    """``reply`` with every dash a hyphen (ASCII text, the usual case, as it is)."""
    return reply if reply.isascii() else reply.translate(HYPHEN)


class PlantRegistry:
    """Recent plants of this process: nonce -> session, at most ``capacity`` of them (nonces in any case)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self._owner: OrderedDict[str, str] = OrderedDict()

    def add(self, nonce: str, session: str) -> None:
        self._owner[nonce.upper()] = session
        if len(self._owner) > self.capacity:
            self._owner.popitem(last=False)

    def owner(self, nonce: str) -> str | None:
        return self._owner.get(nonce.upper())

    def __len__(self) -> int:
        return len(self._owner)


def crosstalk(reply: str, session: str, plants: PlantRegistry) -> list[str]:
    """Other sessions whose token or recently planted nonce (in any case) appears in ``reply`` (sorted, unique)."""
    if not reply:
        return []
    reply = as_written(reply)
    others: set[str] = set()
    if "gf" in reply:  # cheap pre-check: every token starts with "gf"
        others.update(m.group(1) for m in TOKEN_RE.finditer(reply))
    if "-" in reply:
        for nonce in NONCE_ANY_CASE_RE.findall(reply):
            owner = plants.owner(nonce)
            if owner is not None:
                others.add(owner)
    others.discard(session)
    return sorted(others)


def recall(reply: str | None, nonce: str, *more: str) -> bool:
    """The reply holds ``nonce`` or one of ``more``, in any case, with any dash, a space or nothing between its two
    halves ("8892 X7Q4", "8892X7Q4": a model reformatting an identifier still recalled it; the reply is read once)."""
    if not reply:
        return False
    text = as_written(reply).lower()
    return any(value in text for n in (nonce, *more) for value in value_spellings(n.lower()))


class Fact(NamedTuple):
    """What a conversation planted of one fact so far (``facts[fact]`` in locustfiles/conversation.py)."""

    latest: str               # the value of the latest plant sent (ok or info): what the journal says a probe expects
    ok: str | None            # the value of the latest ``ok`` plant; None: no plant of it is certain yet
    maybe: tuple[str, ...]    # the values of every ``info`` plant of it, sent in order, before or after ``ok``


def planted(facts: dict[str, Fact], fact: str, nonce: str, outcome: str) -> None:
    """Book a plant of ``fact`` with value ``nonce`` by its outcome: ``ok`` replaces the certain value (an
    earlier ``ok`` value is superseded) but keeps every ``info`` value, since an indeterminate write may take
    effect at any later time, also after this one; ``info`` adds its value; ``fail`` (it never left) nothing."""
    if outcome == "fail":
        return
    known = facts.get(fact)
    ok, maybe = (known.ok, known.maybe) if known is not None else (None, ())
    facts[fact] = Fact(nonce, nonce, maybe) if outcome == "ok" else Fact(nonce, ok, maybe + (nonce,))


def probe_verdict(facts: dict[str, Fact], fact: str, reply: str | None) -> str | None:
    """The verdict of an answered probe of ``fact``: ``pass``, ``amnesia`` or None (no verdict).

    The acceptable answers are the value of the latest ``ok`` plant of the fact and the values of all
    its ``info`` plants sent before the probe (timed out, reset, ...: each may have been stored, at any
    time, also after a later ``ok`` plant; goldfish never learns that one did not), whichever came
    last. An earlier ``ok`` value (superseded), a ``fail`` plant's value (it never left the client),
    another value or no value is amnesia. The value is matched in any case (``recall``). With no
    ``ok`` plant of the fact yet, an answer without an acceptable value is no evidence of amnesia
    ("I don't know" is legal when every plant may be lost): no verdict; nor for a fact never planted."""
    known = facts.get(fact)
    if known is None:
        return None
    if known.ok is not None:
        return "pass" if recall(reply, known.ok, *known.maybe) else "amnesia"
    return "pass" if known.maybe and recall(reply, *known.maybe) else None
