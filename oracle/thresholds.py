"""Release gates: which headline rates crossed the limits the user set (one line each)."""
from __future__ import annotations


def _check(summary: dict, metric: str, limit, what: str) -> list[str]:
    if limit is None:
        return []
    m = (summary.get("metrics") or {}).get(metric) or {}
    if metric == "crosstalk":  # a count limit: how many sessions saw another's data
        count = m.get("count") or 0
        return [f"crosstalk: {count} session(s) with cross-talk > max {limit}"] if count > limit else []
    rate = m.get("rate")
    if rate is None or rate <= limit:
        return []
    return [f"{what}: {rate:.4%} ({m['count']}/{m['total']}, 95% CI {m['low']:.4%}-{m['high']:.4%}) "
            f"> max {limit:.4%}"]


def breaches(summary: dict, max_probe_amnesia: float | None = None, max_stored_loss: float | None = None,
             max_crosstalk: int | None = 0) -> list[str]:
    """One line per breached threshold; empty when the run passes. ``None`` disables a gate."""
    return (_check(summary, "probe_amnesia", max_probe_amnesia, "probe amnesia")
            + _check(summary, "stored_loss", max_stored_loss, "stored loss")
            + _check(summary, "crosstalk", max_crosstalk, "crosstalk"))
