"""The records of ``chaos.jsonl`` (one per fault apply and recover) and ``steps.jsonl`` (one per load
step), checked where they are read (docs/CONTRACTS.md "Chaos timeline", "Load steps").

``chaos_event`` and ``load_step`` are ``decode`` functions for ``contracts.jsonl.read_jsonl``: a
record whose fields have the wrong type (``"time": "noon"``, ``"step": "first"``) raises
``RecordError`` (a ValueError), so the reader reports it as one ``file:line`` problem and goes on,
instead of the audit or the report failing on it later. They return the record as a dict, extra
keys included (``planned``, ``via``, ``detail``, ``params``).
"""
from __future__ import annotations

import math

from contracts import codec

EVENTS = ("apply", "recover")


class RecordError(ValueError):
    """A timeline or step record with a field of the wrong type; the message names the field."""


def chaos_event(raw: bytes | str) -> dict:
    """One chaos.jsonl line: ``event`` apply|recover and a finite ``time`` are required."""
    record = _object(raw)
    if record.get("event") not in EVENTS:
        raise RecordError(f"event {record.get('event')!r} is not apply or recover")
    _number(record, "time", required=True)
    _number(record, "planned")
    for name in ("fault", "kind", "target", "instance", "backend", "outcome", "error", "via"):
        if record.get(name) is not None and not isinstance(record[name], str):
            raise RecordError(f"{name} {codec.short(record[name])} is not text")
    if record.get("outcome", "ok") not in ("ok", "error"):
        raise RecordError(f"outcome {record.get('outcome')!r} is not ok or error")
    for name in ("detail", "params"):
        if record.get(name) is not None and not isinstance(record[name], dict):
            raise RecordError(f"{name} {codec.short(record[name])} is not an object")
    return record


def load_step(raw: bytes | str) -> dict:
    """One steps.jsonl line: ``step`` and ``users`` whole numbers >= 0, ``start``/``end`` finite or null."""
    record = _object(raw)
    for name in ("step", "users"):
        value = record.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RecordError(f"{name} {codec.short(value)} is not a whole number >= 0")
    _number(record, "start")
    _number(record, "end")
    return record


def _object(raw) -> dict:
    try:
        return codec.loads_object(raw)
    except codec.DecodeError as exc:
        raise RecordError(str(exc)) from None


def _number(record: dict, name: str, required: bool = False) -> None:
    value = record.get(name)
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
        raise RecordError(f"{name} {codec.short(value)} is not a finite number" + (" (required)" if value is None else ""))


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a float
        return False


