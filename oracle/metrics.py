"""Rates with 95% Wilson intervals.

Wilson rather than the normal approximation because amnesia rates sit near 0 and windows are
small; scipy computes it (``binomtest(k, n).proportion_ci(method="wilson")``).
"""
from __future__ import annotations


def wilson(count: int, total: int) -> dict:
    """``{"count", "total", "rate", "low", "high"}``; rate and bounds are null when total is 0."""
    count, total = int(count), int(total)
    if total <= 0:
        return {"count": count, "total": total, "rate": None, "low": None, "high": None}
    from scipy.stats import binomtest  # lazy: scipy.stats takes seconds to import

    ci = binomtest(min(count, total), total).proportion_ci(confidence_level=0.95, method="wilson")
    return {"count": count, "total": total, "rate": count / total, "low": float(ci.low), "high": float(ci.high)}
