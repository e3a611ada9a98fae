"""The one duration grammar: options (``--settle``), chaos plans (``at``, ``every``, ``duration``)
and scripts (``think``) all read times with ``parse_duration``.

Locust's own ``-t`` grammar (``20``, ``90s``, ``1h30m``, ``3h30m10s``) is a subset of this one;
``locust.util.timespan.parse_timespan`` is not used because it takes neither fractions
(``0.5s``) nor milliseconds (``500ms``), which think times and short faults need.

A number alone is seconds. Units: ``h``, ``m``, ``s``, ``ms``, combinable in that order
(``1m30s``, ``2.5s``, ``1h5m``). NaN, infinity and negative values are refused, and so is
anything above ``limit`` (default 30 days: no run, plan or pause a person means is longer).
"""
from __future__ import annotations

import math
import re

from contracts import codec

DAY = 86_400.0
DEFAULT_LIMIT = 30 * DAY
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)")  # not \d: it matches any script's digits (٥, ５)
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_ORDER = ("h", "m", "s", "ms")
EXAMPLES = "e.g. 2, 0.5s, 500ms, 1m30s, 2h"


class DurationError(ValueError):
    """Not a duration; the message names ``what`` and shows valid examples."""


def parse_duration(value, what: str = "", limit: float = DEFAULT_LIMIT) -> float:
    """Seconds from ``value`` (a number, or text in the grammar above); DurationError otherwise,
    its message starting with ``what: `` when given (an option's name, a plan's field)."""
    what = f"{what}: " if what else ""
    if isinstance(value, bool):
        raise DurationError(f"{what}{codec.short(value)} is not a duration ({EXAMPLES})")
    if isinstance(value, (int, float)):
        seconds = float(value) if abs(value) < 1e300 or isinstance(value, float) else math.inf
    else:
        seconds = _parse_text(str(value).strip(), value, what)
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise DurationError(f"{what}{codec.short(value)} must be a finite duration >= 0 ({EXAMPLES})")
    if seconds > limit:
        raise DurationError(f"{what}{codec.short(value)} is longer than the longest duration allowed ({_show(limit)})")
    return seconds


def not_ascii_number(text: str) -> str | None:
    """The first character of ``text`` that int() and float() read as part of a number but no number of ours
    holds: '_' (``1_0`` is 10) and any other script's digit (``٥``, ``５`` are 5), as anything else not ASCII; None
    when there is none. Durations, gates and scripts' counts are ASCII digits 0-9, without '_'."""
    return next((c for c in text if not c.isascii() or c == "_"), None)


def _parse_text(text: str, value, what: str) -> float:
    if bad := not_ascii_number(text):
        raise DurationError(f"{what}{codec.short(value)} is not a duration: it holds {bad!r} (U+{ord(bad):04X}); "
                            f"a duration is ASCII digits 0-9 (no '_') and the units h, m, s, ms ({EXAMPLES})")
    try:
        return float(text)  # NaN and infinity are refused by the caller
    except ValueError:
        pass
    parts = _PART.findall(text.replace(" ", ""))
    units = [unit for _, unit in parts]
    if not parts or "".join(a + b for a, b in parts) != text.replace(" ", "") or \
            units != sorted(set(units), key=_ORDER.index):
        raise DurationError(f"{what}{codec.short(value)} is not a duration ({EXAMPLES})")
    return sum(float(amount) * _UNIT[unit] for amount, unit in parts)


def _show(seconds: float) -> str:
    return f"{seconds / DAY:g} days" if seconds >= DAY else f"{seconds:g}s"
