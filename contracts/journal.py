"""The journal record: one struct per turn, encoded by the Locust writer and decoded by the oracle.

One JSON object per line (docs/CONTRACTS.md "Journal"). The writer fills every field; a reader
accepts older or hand-written lines that carry only the required ones (``session``, ``turn``,
``outcome``, ``sent``) and fills the rest as documented. A line that cannot be a turn raises
``RecordError`` naming what is wrong — never anything else, whatever the bytes.

Outcomes follow Jepsen: ``ok`` acknowledged, ``fail`` definitely not applied, ``info`` indeterminate.

The first turn of every conversation is journaled twice: once just before it is sent, in flight
(``outcome: info``, ``received: null``, ``error: IN_FLIGHT``: Jepsen's invocation), and once with
its outcome. So a process killed mid-turn still leaves the session in the journal, and what the
bot stored of that turn is an indeterminate turn of this run, not a stranger's key. Readers keep
one record per turn with ``one_per_turn``: the outcome supersedes the in-flight record.
"""
from __future__ import annotations

import math
import operator
from itertools import compress
from typing import Annotated, Literal, Optional

import msgspec

from contracts import codec
from contracts.tokens import SESSION_RE, make_token

OUTCOMES = ("ok", "fail", "info")
KINDS = ("plant", "probe", "chatter", "burst")  # a turn's kind; a line without one is chatter
VERDICTS = ("pass", "amnesia")  # or null: not a probe, not answered, or its plant indeterminate
REQUIRED = ("session", "turn", "outcome", "sent")
MAX_TURN = 999_999  # a token's turn index has at most six digits (contracts.tokens.TOKEN_RE)
MAX_STEP = 1_000_000
MAX_EPOCH = 1e11     # a wall time before the year 5000
LATENCY_RANGE = (-60.0, 86_400.0)  # received - sent of a turn: a clock stepped back a little, or a day's wait
# the error text of an invocation record: "interrupted" like a turn the test's stop cut short, since alone it
# means the process stopped with the turn in flight (no request was seen to fail: docs/oracle.md)
INTERRUPTED_PREFIX = "interrupted"  # the error text of every turn cut short (locustfiles/conversation.py)
IN_FLIGHT = "interrupted: in flight, no outcome recorded"


class RecordError(ValueError):
    """A journal line that is not a turn; the message says which field and why."""


TurnIndex = Annotated[int, msgspec.Meta(ge=0, le=MAX_TURN)]
Epoch = Annotated[float, msgspec.Meta(ge=0, le=MAX_EPOCH)]  # NaN and infinity are refused as out of range


class Turn(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """One turn. Field order is the line's key order. The typed decoder checks the types and ranges
    in C; a line it refuses goes through ``from_dict``, which says what is wrong or fills defaults.
    The required fields' defaults (``REQUIRED``) are values no line can decode to, so a line that
    lacks one is told by its value (``decode_chunk``), not read as turn 0, sent at 1970, in doubt.
    An unknown field sends the line to ``from_dict`` too (``forbid_unknown_fields``): msgspec skips an
    unknown field's bytes unchecked (a field name with the byte 0xff in it was dropped, the line a good turn,
    while the same byte in a value made it unreadable); ``codec.loads`` checks every byte. The writer never
    writes an unknown field, so the fast path costs nothing more."""
    run: Optional[str] = None
    session: Annotated[str, msgspec.Meta(min_length=1)] = "?"
    turn: TurnIndex = -1
    kind: Literal[KINDS] = "chatter"  # type: ignore[valid-type] - plant | probe | chatter | burst
    token: str = ""                   # session + "t" + turn (from_dict fills it when absent)
    message: Optional[str] = None
    fact: Optional[str] = None
    nonce: Optional[str] = None
    sent: Epoch = -1.0                # wall time (epoch s) just before sending
    received: Optional[Epoch] = None  # when the response (or error) arrived
    outcome: Literal[OUTCOMES] = ""  # type: ignore[assignment] - missing, as above
    status: Optional[Annotated[int, msgspec.Meta(ge=0, lt=1000)]] = None
    reply: Optional[str] = None
    error: Optional[str] = None
    verdict: Optional[Literal[VERDICTS]] = None  # type: ignore[valid-type] - probes: pass | amnesia | null
    crosstalk: tuple[str, ...] = ()   # sessions whose token or nonce the reply carried
    step: Optional[Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]] = None  # load step index
    user: Optional[str] = None
    replica: Optional[str] = None     # the replica that answered (--replica-header), when the bot says
    bot_session: Optional[str] = None  # the id the bot issued for this conversation (--session-from), once known

    @property
    def latency(self) -> float | None:
        return None if self.received is None else self.received - self.sent

    @property
    def interrupted(self) -> bool:
        """Cut short by the test's stop or the process's end: no request was seen to fail (no error)."""
        return isinstance(self.error, str) and self.error.startswith(INTERRUPTED_PREFIX)

    @property
    def in_flight(self) -> bool:
        """The record written before the turn was sent (superseded by its outcome, when there is one)."""
        return self.received is None and self.error == IN_FLIGHT


def planted(turn: Turn) -> bool:
    """The turn planted a fact: its message carries the value (``nonce``) the store must keep."""
    return turn.kind == "plant" and bool(turn.nonce) and turn.nonce in (turn.message or "")


def in_flight(turn: Turn) -> Turn:
    """The invocation record of ``turn`` (same fields up to ``sent``), written before it is sent."""
    return Turn(turn.run, turn.session, turn.turn, turn.kind, turn.token, turn.message, turn.fact, turn.nonce,
                turn.sent, None, "info", None, None, IN_FLIGHT, None, (), turn.step, turn.user,
                bot_session=turn.bot_session)


def one_per_turn(turns: list[Turn], conflicts: list | None = None) -> tuple[list[Turn], list[int]]:
    """One session's records in turn order, one per turn, and the turn numbers journaled twice.

    A record with an outcome supersedes the in-flight record of the same turn (not a repeat); of
    any other repeat the first is kept. ``turns`` already in order with no repeat is returned as is.

    ``conflicts``, when given, receives ``(turn, kept, other)`` for each turn with two outcome records that
    DISAGREE (outcome, verdict, reply, sent...: two different answers to one question, which no run writes:
    a damaged journal), once per turn, and such a turn is not among the repeats; an exact copy of a record (a
    worker's copy merged twice) stays a repeat, harmless. Without it, every repeat is a repeat, as before."""
    numbers = [t.turn for t in turns]
    if all(map(operator.lt, numbers, numbers[1:])):
        return turns, []
    if turns[0].in_flight and numbers[1] == numbers[0] and all(map(operator.lt, numbers[1:], numbers[2:])):
        return turns[1:], []  # the usual shape: the first turn's invocation, then each outcome in order
    kept: dict[int, Turn] = {}
    repeated = []
    conflicting: set[int] = set()
    for t in sorted(turns, key=lambda t: (t.turn, t.in_flight)):  # stable: the first outcome first
        first = kept.get(t.turn)
        if first is None:
            kept[t.turn] = t
        elif t.in_flight:
            continue  # superseded by the outcome kept (or the same invocation again)
        elif conflicts is not None and t != first:  # ``first`` is an outcome too: outcomes sort first
            if t.turn not in conflicting:
                conflicting.add(t.turn)
                conflicts.append((t.turn, first, t))
        else:
            repeated.append(t.turn)
    if conflicting:
        repeated = [n for n in repeated if n not in conflicting]
    return list(kept.values()), repeated


def differences(a: Turn, b: Turn) -> list[str]:
    """The fields in which two records of one turn differ, in the record's field order."""
    return [name for name in Turn.__struct_fields__ if getattr(a, name) != getattr(b, name)]


_encode = msgspec.json.Encoder().encode
_decode_typed = msgspec.json.Decoder(Turn).decode


def encode_line(turn: Turn) -> bytes:
    """The record as one journal line."""
    return _encode(turn) + b"\n"


def decode_chunk(lines: list[bytes]) -> list[Turn] | None:
    """Every line of a chunk decoded (and checked) in C, or None when any line needs ``decode_line``
    to say what is wrong with it or to fill a default (a blank, torn or malformed line, a missing or
    null field, an out-of-range value, no token, an unknown field, a verdict on a turn that is not a
    probe, cross-talk that is not a list of session ids)."""
    try:
        turns = list(map(_decode_typed, lines))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if "" in map(_TOKEN, turns) or "?" in map(_SESSION, turns) or -1 in map(_TURN, turns) or \
            "" in map(_OUTCOME, turns) or -1.0 in map(_SENT, turns):
        return None
    low, high = LATENCY_RANGE
    if any(r is not None and not low <= r - s <= high for r, s in zip(map(_RECEIVED, turns), map(_SENT, turns))):
        return None
    # what ``from_dict`` refuses besides: a verdict on a turn that is not a probe (the kinds of the turns with a
    # verdict, in C), cross-talk that names no session (rare: its ids are looked at only when there is some)
    if not _PROBE.issuperset(compress(map(_KIND, turns), map(_VERDICT, turns))) or \
            any(map(_CROSSTALK, turns)) and not all(map(_session_ids, map(_CROSSTALK, turns))):
        return None
    return turns


_TOKEN, _SESSION, _TURN, _OUTCOME, _SENT, _RECEIVED, _KIND, _VERDICT, _CROSSTALK = map(
    operator.attrgetter, ("token", "session", "turn", "outcome", "sent", "received", "kind", "verdict", "crosstalk"))
_PROBE = frozenset(["probe"])  # only a probe has a verdict (the writer's rule: locustfiles/conversation.py finish)


def _session_ids(values) -> bool:
    """Every value is a session id (``contracts.tokens.SESSION_RE``): what the writer puts in ``crosstalk``."""
    return all(isinstance(v, str) and SESSION_RE.match(v) for v in values)


def decode_line(raw: bytes | str) -> Turn:
    """One line as a Turn, with the documented defaults; RecordError naming the problem otherwise."""
    try:
        return from_dict(codec.loads_object(raw))
    except codec.DecodeError as exc:
        raise RecordError(str(exc)) from None


def from_dict(record: dict) -> Turn:
    get = record.get
    missing = next((name for name in REQUIRED if get(name) is None), None)
    if missing:
        raise RecordError(f"missing field {missing!r}")
    outcome = get("outcome")
    if outcome not in OUTCOMES:
        raise RecordError(f"outcome {codec.short(outcome)} is not one of ok/fail/info")
    session = get("session")
    if not isinstance(session, (str, int)) or isinstance(session, bool) or not str(session):
        raise RecordError(f"session {codec.short(session)} is not an id")
    session = str(session)
    turn = _number(get("turn"), "turn", int)
    if not 0 <= turn <= MAX_TURN:
        raise RecordError(f"turn {turn} is out of range [0, {MAX_TURN}]")
    kind = get("kind")
    if kind is not None and kind not in KINDS:  # a probe misread as chatter: its recall uncounted, as for verdict
        raise RecordError(f"kind {codec.short(kind)} is not one of {'/'.join(KINDS)}")
    verdict = get("verdict")
    if verdict is not None and verdict not in VERDICTS:  # a probe the gate would not count: a recall uncounted
        raise RecordError(f"verdict {codec.short(verdict)} is not one of pass/amnesia/null")
    if verdict is not None and kind != "probe":  # a chatter line's "amnesia" was counted as a probe that failed
        raise RecordError(f"verdict {codec.short(verdict)} on a {kind or 'chatter'} turn: only a probe has a verdict")
    received = get("received")
    crosstalk = get("crosstalk")
    if crosstalk is not None and (not isinstance(crosstalk, (list, tuple)) or not _session_ids(crosstalk)):
        # ["nonsense"] was judged as a reply carrying another session's data: cross-talk that did not happen
        raise RecordError(f"crosstalk {codec.short(crosstalk)} is not a list of session ids (gf + 16 hex digits)")
    status = get("status")
    step = get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP):
        raise RecordError(f"step {codec.short(step)} is not a load step index (a whole number >= 0)")
    sent = _number(get("sent"), "sent", float)
    got = None if received is None else _number(received, "received", float)
    if not 0 <= sent <= MAX_EPOCH or (got is not None and not 0 <= got <= MAX_EPOCH):
        raise RecordError(f"sent {codec.short(get('sent'))} or received {codec.short(received)} is not a wall time (epoch seconds)")
    if got is not None and not LATENCY_RANGE[0] <= got - sent <= LATENCY_RANGE[1]:
        raise RecordError(f"received {codec.short(received)} is {got - sent:+,.0f} s from sent {codec.short(get('sent'))}: "
                          "no turn waits so long (a wrong clock or a hand-edited line)")
    return Turn(
        run=_text(get("run")), session=session, turn=turn, kind=kind or "chatter",
        token=_text(get("token")) or make_token(session, turn), message=_text(get("message")),
        fact=_text(get("fact")), nonce=_text(get("nonce")), sent=sent,
        received=got, outcome=outcome,
        status=status if isinstance(status, int) and not isinstance(status, bool) and 0 <= status < 1000 else None,
        reply=_text(get("reply")), error=_text(get("error")), verdict=verdict,
        crosstalk=tuple(crosstalk or ()),
        step=step, user=_text(get("user")), replica=_text(get("replica")),
        bot_session=_text(get("bot_session")) or None)


def _number(value, name: str, kind):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RecordError(f"{name} {codec.short(value)} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise RecordError(f"{name} {codec.short(value)} is not a number") from None
    except OverflowError:  # an integer beyond a float
        number = math.inf
    if not math.isfinite(number):
        raise RecordError(f"{name} {codec.short(value)} is not a finite number")
    if kind is int:
        if number != int(number):
            raise RecordError(f"{name} {codec.short(value)} is not a whole number")
        return int(number)
    return number


def _text(value) -> str | None:
    return value if isinstance(value, str) else None
