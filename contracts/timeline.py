"""The records of ``chaos.jsonl`` (one per fault apply and recover), ``steps.jsonl`` (one per load
step) and ``telemetry.jsonl`` (one per sample), checked where they are read (docs/CONTRACTS.md
"Chaos timeline", "Load steps", "Telemetry").

``chaos_event``, ``load_step`` and ``telemetry_sample`` are ``decode`` functions for ``contracts.jsonl.read_jsonl``: a
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


INFO_REFUSED = "INFO refused: "  # a sample's store_error when the store answered INFO with a refusal (no +info)
STORE_NUMBERS = ("used_memory", "used_memory_rss", "maxmemory", "evicted_keys", "expired_keys", "connected_clients",
                 "blocked_clients", "rejected_connections", "instantaneous_ops_per_sec")


def telemetry_sample(raw: bytes | str) -> dict:
    """One telemetry.jsonl line: a finite ``time``; ``users`` a whole number or null; ``rss``
    {process: bytes}; ``store`` null or an object whose counters are numbers and whose ``keyspace`` is
    {db: {"keys", "expires"}}; ``store_error`` null or text."""
    record = _object(raw)
    _number(record, "time", required=True)
    if record.get("users") is not None and not _whole(record["users"]):
        raise RecordError(f"users {codec.short(record['users'])} is not a whole number from 0 to 2**64-1")
    rss = record.get("rss")
    if rss is not None and not (isinstance(rss, dict) and all(map(_whole, rss.values()))):
        raise RecordError(f"rss {codec.short(rss)} is not {{process: bytes}} (bytes a whole number from 0 to "
                          "2**64-1)")
    if record.get("store_error") is not None and not isinstance(record["store_error"], str):
        raise RecordError(f"store_error {codec.short(record['store_error'])} is not text")
    store = record.get("store")
    if store is None:
        return record
    if not isinstance(store, dict):
        raise RecordError(f"store {codec.short(store)} is not an object")
    for name in STORE_NUMBERS:
        value = store.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value)):
            raise RecordError(f"store.{name} {codec.short(value)} is not a finite number")
    ttls = store.get("template_ttls")
    if ttls is not None and not (isinstance(ttls, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v) and v >= 0 for v in ttls.values())):
        raise RecordError(f"store.template_ttls {codec.short(ttls)} is not {{session: seconds}} (numbers >= 0)")
    keyspace = store.get("keyspace")
    if keyspace is not None and not (isinstance(keyspace, dict) and all(
            isinstance(db, dict) and all(_whole(db.get(k, 0)) for k in ("keys", "expires")) for db in keyspace.values())):
        raise RecordError(f"store.keyspace {codec.short(keyspace)} is not {{db: {{\"keys\", \"expires\"}}}}")
    return record


WHOLE_MAX = 2 ** 64 - 1  # a 64-bit counter's largest value (Redis's, a process's RSS in bytes)


def _whole(value) -> bool:
    """A whole number >= 0 that a 64-bit counter can hold: a 400-digit ``rss`` passed, and the report's chart
    crashed converting it to a float (OverflowError, exit 3); now the line is one file:line warning."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= WHOLE_MAX


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


