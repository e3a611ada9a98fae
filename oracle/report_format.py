"""Number formatting and the one-line verdict shared by the HTML report, the terminal and compare."""
from __future__ import annotations

import math

from oracle.report_data import RATE_METRICS, rate


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
    """(level, headline, detail): level is fail / warn / ok / none, for the banner colour and exit codes."""
    metrics = {k: rate(summary.get("metrics", {}).get(k)) for k in RATE_METRICS}
    anomalies = {k: int(v) for k, v in (summary.get("anomalies") or {}).items() if v}
    findings = [f"{metrics['probe_amnesia']['count']} failed probes"] if metrics["probe_amnesia"]["count"] else []
    findings += [f"{v} {k}" for k, v in anomalies.items()]
    if summary.get("breaches"):
        return "fail", "Thresholds breached", "; ".join(summary["breaches"])
    if findings:
        return "warn", "Amnesia found", ", ".join(findings)
    if not metrics["probe_amnesia"]["total"] and not metrics["stored_loss"]["total"]:
        return "none", "Nothing measured", "no answered probes and no acknowledged turns"
    return "ok", "No amnesia found", (f"{metrics['probe_amnesia']['total']} probes answered, "
                                      f"{metrics['stored_loss']['total']} acknowledged turns all stored")
