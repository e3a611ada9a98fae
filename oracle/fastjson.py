"""One JSON codec for the hot paths: orjson when installed (3-4x faster), else the stdlib.

The audit decodes every stored message once; at millions of messages the codec is most of
the cost. Both paths accept str or bytes and raise ValueError on bad input.
"""
from __future__ import annotations

import json

try:  # orjson ships with langsmith (a LangChain dependency); optional here
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None


def loads(data):
    """Parse JSON; orjson first, stdlib as the tolerant second opinion (NaN, huge ints)."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(data)


def dumps_line(obj) -> bytes:
    """One compact JSON line (utf-8 bytes, newline-terminated) for the .jsonl files."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj, option=_orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            pass
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()


def _stdlib_fast_loads(data):
    if not isinstance(data, (str, bytes, bytearray)):
        raise TypeError("not JSON text")
    return json.loads(data)


# the strict, fastest parser: raises ValueError on bad JSON and TypeError on non-text input
fast_loads = _orjson.loads if _orjson is not None else _stdlib_fast_loads
