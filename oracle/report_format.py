"""Number formatting and the one-line verdict shared by the HTML report, the terminal and compare."""
from __future__ import annotations

import math

from oracle.report_data import rate


def pct(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value * 100:.{digits}f}%"


def interval(metric: dict) -> str:
    m = rate(metric)
    return "n/a" if m["rate"] is None else f"[{pct(m['low'])}, {pct(m['high'])}]"


def ms(seconds) -> str:
    """Latencies in the audit tables are seconds (like every time in the contracts); people read ms."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "n/a"
    return f"{float(seconds) * 1000:.0f} ms"


def number(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{float(value):,.{digits}f}"


def verdict(summary: dict) -> tuple[str, str, str]:
    """(level, headline, detail) from the summary's verdict (oracle/verdict.py): level is fail / ok /
    none (nothing was measured), for the badge, the banner and the terminal."""
    from oracle.verdict import FAIL, PASS, headline, of_summary

    v = of_summary(summary)
    if v["result"] == FAIL:
        return "fail", "FAIL", headline(v)[len("FAIL — "):]
    measured = {r["gate"]: r["total"] for r in v["rules"] if r["result"] in (PASS, FAIL)}
    if not measured.get("probe_amnesia") and not measured.get("stored_loss"):
        return "none", "NOTHING MEASURED", "no answered probes, no acknowledged turns: no gate had anything to judge"
    return "ok", "PASS", headline(v)[len("PASS — "):]
