"""Number formatting and the one-line verdict shared by the HTML report, the terminal and compare; and the checks
of where their pages go (``--html``, ``report.html``, ``charts/``), shared by the same."""
from __future__ import annotations

import math
import os
from pathlib import Path

from contracts.runfolder import RunFolder
from oracle.report_data import rate

# What a run recorded, by its first path component in the run folder (contracts/runfolder.py, docs/CONTRACTS.md
# "Run folder"): a page written there replaces a record or sits among them (a shard's name, audit/*, store/*).
# report.html and charts/ are the report's own outputs, written again by `oracle report`; they are not records.
RECORDS = frozenset({"run.json", "journal", "workers", "steps.jsonl", "chaos.jsonl", "chaos", "telemetry.jsonl",
                     "store", "store.reading", "store.replaced", "audit", "locust"})
HTML_STARTS = (b"<!doctype html", b"<html")


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
    none (nothing was measured), for the badge, the banner and the terminal.

    The badge follows the exit code: a verdict that measured nothing (exit 2, ``verdict.unmeasured``) is
    NOTHING MEASURED, not FAIL; a PASS whose gates were turned off is a PASS (its headline says how many were
    off), not NOTHING MEASURED beside an exit 0. Only a summary written before verdicts existed, with no
    acknowledged turn and no answered probe, is NOTHING MEASURED by its counts."""
    from oracle.verdict import FAIL, exit_code, headline, of_summary, unmeasured

    v = of_summary(summary)
    if exit_code(v) == 2:
        return "none", "NOTHING MEASURED", unmeasured(v)
    if v["result"] == FAIL:
        return "fail", "FAIL", headline(v)[len("FAIL — "):]
    if not any(r["total"] for r in v["rules"] if r["gate"] in ("probe_amnesia", "stored_loss")):
        return "none", "NOTHING MEASURED", "no answered probes, no acknowledged turns: no gate had anything to judge"
    return "ok", "PASS", headline(v)[len("PASS — "):]


def html_target_problem(target: str | Path) -> str | None:
    """Why ``--html target`` must not be written, if it must not: it is (or its link resolves to) a path among a
    run folder's records (``RUN/journal/x.jsonl``, ``RUN/audit/summary.json``, ``RUN/run.json``, ...), or an existing
    file that is not an HTML page (a page goldfish wrote starts ``<!DOCTYPE html``): ``--html`` replaced either
    whole, a run's journal or summary included. A new path elsewhere, an HTML page (``RUN/report.html`` too) and an
    empty file are written as before; a directory, FIFO or device is refused by the writer, naming it."""
    real = Path(os.path.realpath(target))
    shown = f"{target} (through a link, {real})" if real != Path(os.path.abspath(target)) else str(target)
    for folder in real.parents:
        try:
            if not RunFolder(folder).is_run():
                continue
        except OSError:  # an ancestor that cannot be looked into: the writer says what is wrong with the path
            continue
        first = real.relative_to(folder).parts[0]
        if first in RECORDS:
            return (f"{shown} is among the records of the run folder {folder} ({first}): the page would "
                    f"replace or sit among what the run recorded; write it elsewhere (e.g. {folder / 'compare.html'} "
                    "or outside the run folder)")
    if not os.path.isfile(real):  # none yet; a directory, FIFO or device, which the writer refuses, named
        return None
    try:
        with open(real, "rb") as fh:
            head = fh.read(512)
    except OSError:  # not readable: the writer says what is wrong
        return None
    start = head.removeprefix(b"\xef\xbb\xbf").lstrip().lower()
    if head and not start.startswith(HTML_STARTS):
        return (f"{shown} is an existing file that is not an HTML page: --html replaces only a page (it would lose "
                "the file); remove it or choose another path")
    return None


def output_link_problem(run_dir: str | Path, paths) -> str | None:
    """Why the report must not write into ``run_dir`` (its ``paths``: report.html, charts/, the charts, audit/):
    one of them is a symbolic link, through which the page or a chart would replace another file (another run's
    charts or tables, this run's own journal). The report writes only this run's own files, never through a link."""
    for path in paths:
        path = Path(path)
        if path.is_symlink():
            try:
                to = os.readlink(path)
            except OSError:
                to = "?"
            return (f"{path} is a symbolic link (to {to}): the report would write through it and replace what it "
                    f"points to (another run's files, or this run's own); replace the link by this run's own "
                    f"{'folder' if path.name in ('audit', 'charts') else 'file'} (or remove it) and report again")
    return None

