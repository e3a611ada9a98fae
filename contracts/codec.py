"""The JSON codec for everything goldfish writes and reads: msgspec, whose decoder is as fast as any.

Decoding can fail in one way only, ``DecodeError`` (a ValueError) with the reason: malformed JSON,
bytes that are not UTF-8 inside a string, a number beyond a float, nesting too deep. The stdlib
is the second opinion for what msgspec refuses but JSON readers commonly accept (NaN, Infinity).
"""
from __future__ import annotations

import json
import re

import msgspec

from contracts.runfolder import open_regular


class DecodeError(ValueError):
    """Not JSON we can read; the message says why."""


def _plain(value):
    """What JSON has no type for: a numpy scalar as its Python value, anything else as its text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


_encode = msgspec.json.Encoder(enc_hook=_plain).encode
_decode = msgspec.json.decode


def loads(data):
    """Parse JSON text (str or bytes); raises DecodeError ("not JSON: why") and nothing else.

    Bytes must be UTF-8 (a leading UTF-8 byte order mark is skipped, as the stdlib does): UTF-16 or UTF-32 text,
    which the stdlib's ``json.loads(bytes)`` would detect and read, is not JSON here (docs/oracle.md: an entry
    that is not UTF-8 is corrupt). Text reads as its UTF-8 bytes would: a leading U+FEFF (the byte order mark,
    decoded) is skipped in a str too, so an entry reads alike as the bytes a store returned and as the text the
    snapshot keeps of them (oracle/snapshot.py; a re-audit of the snapshot gives the live read's verdict)."""
    try:
        return _decode(data)
    except msgspec.DecodeError:
        pass  # NaN / Infinity: the stdlib below
    except UnicodeDecodeError as exc:
        raise DecodeError(_reason(_in_document(data, exc))) from None
    except TypeError as exc:
        raise DecodeError(_reason(exc)) from None
    except RecursionError:
        raise DecodeError("not JSON: nested too deeply") from None
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        if raw.count(0) * 4 >= len(raw) > 0:  # UTF-16 / UTF-32 of ASCII text: NUL bytes throughout
            raise DecodeError(f"not JSON: not UTF-8 text (NUL bytes from byte {raw.index(0)} on: UTF-16 or UTF-32?)")
        try:
            data = raw.decode("utf-8-sig")  # never the stdlib's guess of UTF-16 / UTF-32
        except UnicodeDecodeError as exc:
            raise DecodeError(_reason(exc)) from None
    elif isinstance(data, str):
        data = data.removeprefix("\ufeff")  # as "utf-8-sig" above: one byte order mark, at the start only
    try:
        return json.loads(data)
    except RecursionError:
        raise DecodeError("not JSON: nested too deeply") from None
    except (ValueError, TypeError) as exc:
        raise DecodeError(_reason(exc)) from None


def dumps(value) -> bytes:
    """Compact JSON bytes (a value JSON has no type for is written as its text)."""
    try:
        return _encode(value)
    except (TypeError, msgspec.EncodeError, OverflowError):  # e.g. keys that are not strings, huge ints
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain).encode()


def dumps_line(value) -> bytes:
    """One JSON Lines record: compact JSON and a newline."""
    return dumps(value) + b"\n"


def dumps_document(value) -> str:
    """A JSON document people read too (run.json, summary.json, meta.json): indented, in key order."""
    return msgspec.json.format(dumps(value), indent=2).decode() + "\n"


def load_document(path) -> dict:
    """A JSON document (an object) from a file; DecodeError naming the file otherwise (OSError passes)."""
    with open_regular(path) as fh:
        data = fh.read()
    try:
        return loads_object(data)
    except DecodeError as exc:
        raise DecodeError(f"{path}: {exc}") from None


def loads_object(data) -> dict:
    """JSON text that must be an object (every record and document goldfish writes is one)."""
    value = loads(data)
    if not isinstance(value, dict):
        raise DecodeError(f"not a JSON object but a {type(value).__name__}")
    return value


def _in_document(data, exc: UnicodeDecodeError) -> UnicodeDecodeError:
    """The error at its place in the whole document: msgspec's names the offset inside the string token it was
    decoding (a bad byte at byte 32 was "at byte 1")."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            bytes(data).decode("utf-8")
        except UnicodeDecodeError as whole:
            return whole
    return exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):  # the byte and its offset, as the YAML reader names it (contracts.yamldoc):
        # msgspec's "invalid character (byte 0)" and Python's "invalid start byte at byte 0" both read as a NUL byte
        return f"not JSON: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    return "not JSON: " + (str(exc).split("\n", 1)[0] or type(exc).__name__)


def short(value, limit: int = 40) -> str:
    """A value for a one-line message, cut short: whatever a line or an option held, the message stays short."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit
        return "(a number that long)"
    return text if len(text) <= limit else text[:limit - 3] + "..."


_SURROGATE = re.compile("[\ud800-\udfff]")


def mend_surrogates(value, where: str = "$") -> tuple[object, list[str]]:
    """``value`` (decoded JSON) with each lone surrogate in its strings and keys replaced by U+FFFD, and the paths
    that held one (``$.label``). JSON's ``\\ud800`` escape decodes to one, which no UTF-8 page, CSV or terminal
    can encode: every command that printed or wrote it stopped with a traceback (exit 3)."""
    found: list[str] = []

    def mend(v, at: str):
        if isinstance(v, str):
            if _SURROGATE.search(v):
                found.append(at)
                return _SURROGATE.sub("\ufffd", v)
            return v
        if isinstance(v, dict):
            keys = [mend(k, f"{at} (a key)") for k in v]
            return {k: mend(item, f"{at}.{k}") for k, item in zip(keys, v.values())}
        if isinstance(v, list):
            return [mend(item, f"{at}[{i}]") for i, item in enumerate(v)]
        return v

    return mend(value, where), found
