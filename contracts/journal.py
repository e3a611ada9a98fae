"""The journal record: one struct per turn, encoded by the Locust writer and decoded by the oracle.

One JSON object per line (docs/CONTRACTS.md "Journal"). The writer fills every field; a reader
accepts older or hand-written lines that carry only the required ones (``session``, ``turn``,
``outcome``, ``sent``) and fills the rest as documented. A line that cannot be a turn raises
``RecordError`` naming what is wrong — never anything else, whatever the bytes.

Outcomes follow Jepsen: ``ok`` acknowledged, ``fail`` definitely not applied, ``info`` indeterminate.
"""
from __future__ import annotations

import math
import operator
from typing import Annotated, Any, Literal, Optional

import msgspec

from contracts import codec
from contracts.tokens import make_token

OUTCOMES = ("ok", "fail", "info")
REQUIRED = ("session", "turn", "outcome", "sent")
MAX_TURN = 999_999  # a token's turn index has at most six digits (contracts.tokens.TOKEN_RE)
MAX_EPOCH = 1e11     # a wall time before the year 5000


class RecordError(ValueError):
    """A journal line that is not a turn; the message says which field and why."""


TurnIndex = Annotated[int, msgspec.Meta(ge=0, le=MAX_TURN)]
Epoch = Annotated[float, msgspec.Meta(ge=0, le=MAX_EPOCH)]  # NaN and infinity are refused as out of range


class Turn(msgspec.Struct, gc=False):
    """One turn. Field order is the line's key order. The typed decoder checks the types and ranges
    in C; a line it refuses goes through ``from_dict``, which says what is wrong or fills defaults."""
    run: Optional[str] = None
    session: Annotated[str, msgspec.Meta(min_length=1)] = "?"
    turn: TurnIndex = 0
    kind: str = "chatter"             # plant | probe | chatter | burst
    token: str = ""                   # session + "t" + turn (from_dict fills it when absent)
    message: Optional[str] = None
    fact: Optional[str] = None
    nonce: Optional[str] = None
    sent: Epoch = 0.0                 # wall time (epoch s) just before sending
    received: Optional[Epoch] = None  # when the response (or error) arrived
    outcome: Literal[OUTCOMES] = "info"
    status: Optional[int] = None
    reply: Any = None
    error: Any = None
    verdict: Any = None               # probes: pass | amnesia | null
    crosstalk: tuple = ()             # sessions whose token or nonce the reply carried
    step: Any = None
    user: Optional[str] = None

    @property
    def latency(self) -> float | None:
        return None if self.received is None else self.received - self.sent


_encode = msgspec.json.Encoder().encode
_decode_typed = msgspec.json.Decoder(Turn).decode


def encode_line(turn: Turn) -> bytes:
    """The record as one journal line."""
    return _encode(turn) + b"\n"


def decode_chunk(lines: list[bytes]) -> list[Turn] | None:
    """Every line of a chunk decoded (and checked) in C, or None when any line needs ``decode_line``
    to say what is wrong with it or to fill a default (a blank, torn or malformed line, a missing or
    null field, an out-of-range value, no token)."""
    try:
        turns = list(map(_decode_typed, lines))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if "" in map(_TOKEN, turns) or "?" in map(_SESSION, turns):
        return None
    return turns


_TOKEN, _SESSION = operator.attrgetter("token"), operator.attrgetter("session")


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
        raise RecordError(f"outcome {outcome!r} is not one of ok/fail/info")
    session = get("session")
    if not isinstance(session, (str, int)) or isinstance(session, bool) or not str(session):
        raise RecordError(f"session {session!r} is not an id")
    session = str(session)
    turn = _number(get("turn"), "turn", int)
    if not 0 <= turn <= MAX_TURN:
        raise RecordError(f"turn {turn} is out of range [0, {MAX_TURN}]")
    received = get("received")
    crosstalk = get("crosstalk")
    status = get("status")
    sent = _number(get("sent"), "sent", float)
    if not 0 <= sent <= MAX_EPOCH or (received is not None and not 0 <= _number(received, "received", float) <= MAX_EPOCH):
        raise RecordError(f"sent {get('sent')!r} or received {received!r} is not a wall time (epoch seconds)")
    return Turn(
        run=_text(get("run")), session=session, turn=turn, kind=_text(get("kind")) or "chatter",
        token=_text(get("token")) or make_token(session, turn), message=_text(get("message")),
        fact=_text(get("fact")), nonce=_text(get("nonce")), sent=sent,
        received=None if received is None else _number(received, "received", float), outcome=outcome,
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        reply=get("reply"), error=get("error"), verdict=get("verdict"),
        crosstalk=tuple(crosstalk) if isinstance(crosstalk, (list, tuple)) else (), step=get("step"),
        user=_text(get("user")))


def _number(value, name: str, kind):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise RecordError(f"{name} {value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise RecordError(f"{name} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise RecordError(f"{name} {value!r} is not a finite number")
    if kind is int:
        if number != int(number):
            raise RecordError(f"{name} {value!r} is not a whole number")
        return int(number)
    return number


def _text(value) -> str | None:
    return value if isinstance(value, str) else None
