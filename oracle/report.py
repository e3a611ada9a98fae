"""`python -m oracle report RUN`: one self-contained report.html per audited run, plus its charts as PNGs.

The page embeds its charts as data URIs and its CSS inline, so it opens from disk with no
network, months later, on another machine. Everything on it comes from the run folder's
audit tables (see oracle.report_data), so re-rendering a copied folder gives the same page.
"""
from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from contracts.runfolder import CannotWrite, RunFolder, write_text
from oracle import breakdown, charts, telemetry
from oracle.report_data import (EXAMPLES_PER_CLASS, RATE_METRICS, RATE_TITLES, RunData, RunFolderError, load_run,
                                rate)
from oracle.report_format import interval, ms, number, output_link_problem, pct, verdict
from oracle.explain import NOT_SCANNED, journal_copy_line
from oracle.verdict import of_summary, rule_line, trusted_exit_code

CHARTS = {
    "timeline": ("Timeline", charts.timeline,
                 "Throughput, latency quantiles and amnesia events per window. Each fault's interval is shaded in "
                 "its kind's colour across every panel, with one lane per kind on top; dashed lines are load-step "
                 "boundaries."),
    "amnesia_vs_throughput": ("Amnesia against throughput", charts.amnesia_vs_throughput,
                              f"Small points: consecutive windows under the same faults and load step, pooled until "
                              f"each rests on at least {charts.MIN_PROBES} answered probes (left) or "
                              f"{charts.MIN_ACKED} acknowledged turns (right); large diamonds: load steps. Whiskers "
                              "(95% Wilson intervals) are drawn where there is something to bound: on every step, and "
                              "on pooled points that saw events. Grey points were quiet; coloured ones had a fault "
                              "active. A rate that rises with throughput in quiet windows is a load bug; one that "
                              "rises only in coloured windows is a fault bug."),
    "attribution": ("Attribution by fault kind", charts.attribution,
                    "Rates during each kind of fault (including the recovery margin the audit adds) against the "
                    "quiet baseline (dashed line and grey band). Overlapping intervals mean no evidence of a "
                    "difference."),
    "telemetry": ("Store and Locust telemetry", telemetry.chart,
                  "Sampled during the load (telemetry.jsonl): Redis memory against its maxmemory, keys, evicted and "
                  "expired keys, clients, operations/s, and each Locust process's RSS, with the faults shaded. "
                  "Crosses on the memory panel mark samples the store did not answer in time. Evictions while "
                  "sessions vanish mean the store dropped them under memory pressure. Drawn only when the run "
                  "has telemetry."),
}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(pct=pct, interval=interval, ms=ms, number=number, anchor=anchor,
                       tojson_pretty=lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str),
                       compact=compact)
    return env


def compact(value) -> str:
    """Evidence values on one line: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def anchor(text: str) -> str:
    """An HTML id from an anomaly id (``lost-3`` stays ``lost-3``), safe in a URL fragment."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-") or "anomaly"


def data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def headline_rows(summary: dict) -> list[dict]:
    rows = []
    for key in RATE_METRICS:
        m = rate(summary.get("metrics", {}).get(key))
        rows.append({"key": key, "title": RATE_TITLES[key], "rate": m["rate"], "interval": interval(m),
                     "count": m["count"], "total": m["total"]})
    return rows


LOCUST_FILES = (("report.html", "Locust's report"), ("requests.csv", "requests.csv"),
                ("failures.csv", "failures.csv"), ("exceptions.csv", "exceptions.csv"))


def locust_files(run_dir: Path) -> list[dict]:
    """Locust's own files of this run (``locust/``, written at the test's stop), as relative links."""
    return [{"href": f"locust/{name}", "title": title} for name, title in LOCUST_FILES
            if (run_dir / "locust" / name).is_file()]


def render(run_dir: str | Path, data: RunData | None = None) -> Path:
    """Write ``charts/*.png`` and ``report.html`` into the run folder; return the HTML's path.
    ``data``: the run as ``load_run`` read it, when the caller has it already."""
    data = data or load_run(run_dir)
    folder = RunFolder(data.path)
    unsafe = output_link_problem(data.path, [folder.report, folder.charts, *(folder.charts / f"{name}.png" for name
                                                                             in CHARTS), folder.audit,
                                             folder.audit / "breakdown.json"])
    if unsafe:  # checked before anything is written: a chart or the page through a link replaced another run's
        raise UnsafeOutput(unsafe)
    out = folder.charts
    figures = []
    for name, (title, draw, caption) in CHARTS.items():
        png = draw(data, out / f"{name}.png")
        if png is None:  # nothing to draw (a run without telemetry)
            continue
        figures.append({"name": name, "title": title, "caption": caption, "src": data_uri(png)})
    page = _env().get_template("report.html.j2").render(**context(data), figures=figures)
    target = RunFolder(data.path).report
    write_text(target, page)  # whole or not at all: an error names report.html, not a temporary beside it
    return target


class UnsafeOutput(RunFolderError):
    """An output of the report (report.html, charts/, audit/) is a symbolic link: writing through it would replace
    what it points to. Exit 2, naming it."""


def shown_verdict(data: RunData) -> tuple[str, str, str]:
    """(level, headline, detail) of the badge and the terminal: the audit's verdict, except that a held
    verdict of a run whose Locust users raised exceptions is NOT TRUSTED (a FAIL stays a FAIL, unless it only says
    the run measured nothing: cut short, it had no chance to)."""
    level, headline, detail = verdict(data.summary)
    _, untrusted = trusted_exit_code(of_summary(data.summary), data.run)
    if untrusted:
        return "warn", "NOT TRUSTED", f"{untrusted}; the stored data alone: {headline} - {detail}"
    return level, headline, detail


def context(data: RunData) -> dict:
    s = data.summary
    level, headline, detail = shown_verdict(data)
    counts = dict(s.get("anomalies") or {})
    for cls, n in data.anomalies.counts.items():
        counts.setdefault(cls, n)
    warnings = list(data.warnings)
    amnesia_breakdown = breakdown.load(data.path, warnings)
    problems = [str(p) for p in s.get("problems") or []]
    warnings += [f"audit: {p}" for p in problems[:10]]
    total = s.get("problems_total", len(problems))
    if total > 10:
        warnings.append(f"audit: ... and {total - 10:,} more problems (audit/summary.json lists the first "
                        f"{len(problems)})")
    store = s.get("store") or {}
    if store and not store.get("complete", True):
        warnings.append("the final read of the store was incomplete: some sessions were not read back, so "
                        "losses may be under-counted")
    faults = data.faults.assign(start_s=data.faults["start"] - data.t0, end_s=data.faults["end"] - data.t0,
                                length=data.faults["end"] - data.faults["start"])
    steps = data.steps.assign(start_s=data.steps["start"] - data.t0, end_s=data.steps["end"] - data.t0)
    return {
        "locust_files": locust_files(data.path), "breakdown": amnesia_breakdown,
        "run": data.run, "label": data.label, "run_id": data.run.get("run") or data.path.name, "summary": s,
        "level": level, "headline": headline, "detail": detail, "headline_rows": headline_rows(s),
        "turns": turn_counts(s), "latency": s.get("latency") or {}, "throughput": s.get("throughput"),
        "verdict": of_summary(s), "information": information(s), "warnings": warnings,
        "fault_rows": charts.fault_rows(data), "faults": faults.to_dict("records"),
        "steps": steps.to_dict("records"), "anomaly_counts": {k: v for k, v in counts.items() if v},
        "examples": data.anomalies.examples, "examples_n": EXAMPLES_PER_CLASS,
        "options": data.run.get("options") or {}, "versions": data.run.get("versions") or {},
        "started": _utc(data.run.get("start")), "fault_color": charts.fault_color, "attributed": [
            m for m in (*charts.ATTRIBUTED, "lost_after") if any((r.get(m) or {}).get("total") for r in charts.fault_rows(data))], "duration": data.t_end - data.t0, "rate_titles": RATE_TITLES,
    }


def turn_counts(summary: dict) -> dict:
    """The summary's turn counts plus failed requests (what Locust counts as failures) split into
    refused and indeterminate; a turn interrupted by the stop is neither (no request failed)."""
    t = dict(summary.get("turns") or {})
    t.setdefault("interrupted", 0)
    t.setdefault("errors", t.get("fail", 0) + t.get("info", 0) - t["interrupted"])
    t["indeterminate"] = t.get("info", 0) - t["interrupted"]
    return t


def information(summary: dict) -> list[str]:
    """What the audit saw that is not judged (shown, never in the verdict)."""
    info = summary.get("information") or {}
    out = []
    foreign = info.get("foreign_keys") or {}
    if foreign.get("scanned") is False:
        out.append(NOT_SCANNED)
    elif foreign.get("other_goldfish_runs") or foreign.get("not_goldfish"):
        out.append(f"the store also holds {foreign['other_goldfish_runs']} key(s) of other goldfish runs and "
                   f"{foreign['not_goldfish']} other key(s) under the key template (for example "
                   f"{', '.join(foreign.get('examples') or [])})"
                   + (f"; {foreign['named_after_run']:,} of them name this run's sessions (see the warnings); none is "
                      "judged" if foreign.get("named_after_run") else "; they are not this run's and are not judged"))
    for copy in info.get("journal_copies") or []:
        out.append(journal_copy_line(copy))
    for row in summary.get("by_fault") or []:
        if row.get("ineffective"):
            out.append(f"fault {row['kind']} was ineffective: its {row['occurrences']} occurrence(s) touched nothing "
                       "(e.g. no connection to kill), so the run says nothing about surviving it")
    return out


def _utc(epoch) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(float(epoch), tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def terminal_summary(run_dir: str | Path, data: RunData | None = None) -> str:
    """A compact text table of the headline numbers, for headless runs and Locust's end-of-run hook."""
    data = data or load_run(run_dir)
    s = data.summary
    level, headline, detail = shown_verdict(data)
    lines = [f"goldfish · {data.label} · run {data.run.get('run') or data.path.name} · target {data.run.get('target')}",
             f"verdict: {headline} - {detail}", "",
             f"{'metric':<22}{'rate':>9}  {'95% interval':<20}{'count/total':>14}"]
    for row in headline_rows(s):
        lines.append(f"{row['title']:<22}{pct(row['rate']):>9}  {row['interval']:<20}"
                     f"{row['count']:>7}/{row['total']:<6}")
    lat, turns = s.get("latency") or {}, turn_counts(s)
    lines += ["", f"throughput {number(s.get('throughput'))} acked turns/s · latency p50 {ms(lat.get('p50'))}, "
                  f"p95 {ms(lat.get('p95'))}, p99 {ms(lat.get('p99'))}",
              f"turns {turns.get('total', 'n/a')}: ok {turns.get('ok', 'n/a')}, failed requests "
              f"{turns['errors']} (refused {turns.get('fail', 0)}, indeterminate {turns['indeterminate']}), "
              f"interrupted by the stop {turns['interrupted']}"]
    anomalies = {k: v for k, v in (s.get("anomalies") or {}).items() if v}
    lines.append("anomalies: " + (", ".join(f"{k} {v}" for k, v in anomalies.items()) or "none"))
    if not data.faults.empty:
        kinds = data.faults["kind"].value_counts()
        lines.append("faults: " + ", ".join(f"{k} x{n}" for k, n in kinds.items()))
    v = of_summary(s)
    lines += ["", f"verdict rules (gates {v['gates']}):"]
    lines += [f"  {rule['result'].upper():<13} {rule_line(rule)}" for rule in v["rules"]]
    for i in information(s):
        lines.append(f"information: {i}")
    for w in data.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oracle report",
                                     description="Render report.html and charts/*.png of an audited run.")
    parser.add_argument("run", help="run folder (results/<run>)")
    parser.add_argument("--audit", action="store_true",
                        help="audit the run first (from its store snapshot) when it has no audit yet")
    parser.add_argument("--quiet", action="store_true", help="do not print the terminal summary")
    args = parser.parse_args(argv)
    try:
        ensure_audited(args.run, args.audit)
        data = load_run(args.run)  # once: the page and the terminal summary show the same reading
        page = render(args.run, data)
        if not args.quiet:
            print(terminal_summary(args.run, data))
    except RunFolderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {page}")
    return 0


def ensure_audited(run_dir: str | Path, audit: bool) -> None:
    """With ``audit``, run the oracle's audit on a run folder that has none yet (lazy import: optional seam)."""
    from oracle.report_data import NotAudited, is_run_folder

    path = Path(run_dir)
    if not audit or RunFolder(path).summary.is_file() or not is_run_folder(path):
        return
    try:
        from oracle.audit import audit_run
        from oracle.snapshot import SnapshotError
        from oracle.store import StoreError
    except ImportError as exc:
        raise NotAudited(f"{path}: not audited yet and oracle.audit is unavailable ({exc})") from exc
    try:
        audit_run(path)
    except (SnapshotError, StoreError, CannotWrite, OSError, ValueError) as exc:
        raise NotAudited(f"{path}: the audit failed: {exc}") from exc


__all__ = ["render", "terminal_summary", "main"]
