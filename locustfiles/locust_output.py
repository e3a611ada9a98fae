"""Locust's own CSV and HTML report of one test, written into its run folder (``locust/``) when it stops.

Locust writes ``--csv``/``--html`` once, when the process ends, to one fixed place; a web-UI session holds
several tests, and Locust clears its statistics at each start. So at each stop, while the statistics are
still that test's, goldfish writes them with Locust's own writers (``StatsCSV``, ``get_html_report``);
report.html links to them.
"""
from __future__ import annotations

import csv
import logging
from pathlib import Path

log = logging.getLogger("goldfish")
FILES = ("report.html", "requests.csv", "failures.csv", "exceptions.csv")


def write(environment, run_dir: str | Path) -> list[Path]:
    """Write ``locust/{report.html,requests.csv,failures.csv,exceptions.csv}``; never raises (logged)."""
    from locust.html import get_html_report
    from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

    out = Path(run_dir) / "locust"
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        stats = StatsCSV(environment, PERCENTILES_TO_REPORT)
        for name, table in (("requests.csv", stats.requests_csv), ("failures.csv", stats.failures_csv),
                            ("exceptions.csv", stats.exceptions_csv)):
            with open(out / name, "w", newline="", encoding="utf-8") as f:
                table(csv.writer(f))
            written.append(out / name)
        (out / "report.html").write_text(get_html_report(environment, show_download_link=False), encoding="utf-8")
        written.append(out / "report.html")
    except Exception:  # noqa: BLE001 - Locust's files are a convenience; the journal and the audit matter more
        log.exception("could not write Locust's report into %s", out)
    return written
