"""Rates with 95% Wilson intervals.

Wilson rather than the normal approximation because amnesia rates sit near 0 and windows are
small. The score interval is a closed form (Newcombe 1998, as scipy's
``binomtest(k, n).proportion_ci(method="wilson")`` computes it, edge rules included:
tests/test_oracle_units.py compares the two), so an audit or a report does not import
scipy.stats (most of a second) to compute it.
"""
from __future__ import annotations

from math import sqrt
from statistics import NormalDist

Z = NormalDist().inv_cdf(0.975)  # two-sided 95%


def wilson(count: int, total: int) -> dict:
    """``{"count", "total", "rate", "low", "high"}``; rate and bounds are null when total is 0."""
    count, total = int(count), int(total)
    if total <= 0:
        return {"count": count, "total": total, "rate": None, "low": None, "high": None}
    k = min(count, total)
    p = k / total
    denom = 2 * (total + Z * Z)
    center = (2 * total * p + Z * Z) / denom
    delta = Z / denom * sqrt(4 * total * p * (1 - p) + Z * Z)
    low = 0.0 if k == 0 else center - delta
    high = 1.0 if k == total else center + delta
    return {"count": count, "total": total, "rate": count / total, "low": low, "high": high}
