"""Headline rates with 95% Wilson intervals, and the turn table the windows are cut from.

Wilson rather than the normal approximation because amnesia rates sit near 0 and windows
are small; scipy computes it (``binomtest(k, n).proportion_ci(method="wilson")``).
"""
from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd

from contracts.journal import OUTCOMES  # the journal admits no other outcome

INTERRUPTED = "interrupted"  # the error text of a turn still in flight when the test stopped: no request failed


def wilson(count: int, total: int) -> dict:
    """``{"count", "total", "rate", "low", "high"}``; rate and bounds are null when total is 0."""
    count, total = int(count), int(total)
    if total <= 0:
        return {"count": count, "total": total, "rate": None, "low": None, "high": None}
    from scipy.stats import binomtest  # lazy: scipy.stats takes seconds to import

    ci = binomtest(count, total).proportion_ci(confidence_level=0.95, method="wilson")
    return {"count": count, "total": total, "rate": count / total, "low": float(ci.low), "high": float(ci.high)}


def quantiles(values) -> dict:
    values = np.asarray(values, dtype=float)  # None -> NaN
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.quantile(values, [0.5, 0.95, 0.99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def turn_table(journal, lost: set, anomalous: set) -> pd.DataFrame:
    """One row per journaled turn, sessions in journal order, with the audit's per-turn verdicts.

    ``error``: a request that failed (what Locust counts as a failure); a turn the test interrupted
    in flight is neither ok nor an error.

    ``sidx`` numbers each row's session in journal order (for the per-session sums). Outcomes
    and kinds become boolean columns (``ok``, ``fail``, ``info``, ``probe``) here, once, so the
    tables compare no strings; each column is one pass over the turns (a million of them).
    """
    turns = list(chain.from_iterable(journal.sessions.values()))
    n = len(turns)
    outcome = np.fromiter(map(OUTCOMES.index, [t.outcome for t in turns]), np.int8, n)
    ok, fail, info = (outcome == code for code in range(len(OUTCOMES)))
    probe = np.fromiter([t.kind == "probe" for t in turns], bool, n)
    sent = np.fromiter([t.sent for t in turns], float, n)
    received = _floats([t.received for t in turns])
    answered = np.zeros(n, bool)
    failed = np.zeros(n, bool)
    for i in np.flatnonzero(probe & ok).tolist():  # a verdict only matters for an answered probe
        verdict = turns[i].verdict
        answered[i] = verdict == "pass" or verdict == "amnesia"
        failed[i] = verdict == "amnesia"
    interrupted = np.fromiter([not o and isinstance(t.error, str) and t.error.startswith(INTERRUPTED)
                               for o, t in zip(ok.tolist(), turns)], bool, n)
    return pd.DataFrame({
        "ok": ok, "fail": fail, "info": info, "probe": probe, "error": ~ok & ~interrupted,
        "sent": sent, "received": received, "latency": received - sent,
        "done": np.where(np.isnan(received), sent, received),
        "step": _floats([t.step for t in turns]),
        "online_crosstalk": ~np.fromiter([not t.crosstalk for t in turns], bool, n),
        "answered_probe": answered, "failed_probe": failed,
        "lost": _member(turns, lost), "anomalous": _member(turns, anomalous),
        "sidx": np.repeat(np.arange(len(journal.sessions)), [len(ts) for ts in journal.sessions.values()]),
    })


def _floats(values: list) -> np.ndarray:
    """Floats with NaN for None (and for anything else that is not a number: a step is a label)."""
    types = set(map(type, values))
    if types <= {float, int}:
        return np.fromiter(values, float, len(values))
    if types == {type(None)}:
        return np.full(len(values), np.nan)
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _member(turns: list, pairs: set) -> np.ndarray:
    if not pairs:
        return np.zeros(len(turns), bool)
    return np.fromiter(((t.session, t.turn) in pairs for t in turns), bool, len(turns))
