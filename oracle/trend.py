"""`python -m oracle trend results/*`: amnesia and loss over many runs — per run (a nightly soak's
night) in start order, and pooled per release.

Folders that are not audited runs (``results/matrix``, a run still going) are skipped with a note,
so a shell glob over results/ just works. Each run is compared with the one before it by compare's
rules (Fisher's exact test, ``--margin``); the exit code is 0 unless nothing could be read (2):
a trend informs, ``oracle compare`` gates.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from contracts.runfolder import write_text
from oracle import charts
from oracle.compare import bad_statistics, compare_pair, trend_rows
from oracle.report_data import RATE_METRICS as POOLED, RunData, RunFolderError, load_run, rate
from oracle.report_format import interval, ms, number, pct
from oracle.verdict import cut_short, of_summary


def night(run: RunData) -> str:
    """The UTC date the run started (a nightly soak's night)."""
    start = run.run.get("start")
    return datetime.fromtimestamp(float(start), tz=timezone.utc).strftime("%Y-%m-%d %H:%M") if start else "?"


def load_runs(paths: list[str], audit: bool = False) -> tuple[list[RunData], list[str]]:
    """The audited runs among ``paths`` in start order, and a note for each folder skipped."""
    from oracle.report import ensure_audited

    runs, skipped, seen = [], [], set()
    for path in paths:
        same = Path(path).resolve()
        if same in seen:  # `trend R R/` or a glob that names a run twice: pooled once
            skipped.append(f"{path}: named twice; counted once")
            continue
        seen.add(same)
        try:
            ensure_audited(path, audit)
            runs.append(load_run(path))
        except RunFolderError as exc:
            skipped.append(str(exc))
    runs.sort(key=lambda r: (float(r.run.get("start") or 0), r.path.name))
    return runs, skipped


def per_run(runs: list[RunData], alpha: float, margin: float) -> list[dict]:
    """compare's trend rows, each run judged against the previous one, plus its night and verdict."""
    results = {r.path.as_posix(): compare_pair(prev, r, alpha, margin) for prev, r in zip(runs, runs[1:])}
    rows = trend_rows(runs, results)
    for row, r in zip(rows, runs):
        result = of_summary(r.summary)["result"]
        row.update(night=night(r), result="untrusted" if result == "pass" and cut_short(r.run) else result,
                   vs_previous="-" if row["verdict"] == "base" else row["verdict"])
    return rows


def per_release(runs: list[RunData]) -> list[dict]:
    """Counts pooled over each release's runs (in order of first appearance), with Wilson intervals."""
    pooled: dict[str, dict] = {}
    for r in runs:
        entry = pooled.setdefault(r.label, {"label": r.label, "runs": 0, **{m: [0, 0] for m in POOLED}})
        entry["runs"] += 1
        for m in POOLED:
            got = rate(r.summary.get("metrics", {}).get(m))
            entry[m][0] += got["count"]
            entry[m][1] += got["total"]
    return [{**e, **{m: rate({"count": e[m][0], "total": e[m][1]}) for m in POOLED}} for e in pooled.values()]


def format_text(rows: list[dict], releases: list[dict]) -> str:
    def cell(m: dict) -> str:
        return f"{pct(m['rate'])} ({m['count']}/{m['total']})"

    lines = [f"per run, in start order ({len(rows)} runs)",
             f"  {'started (UTC)':<17} {'label':<14}{'probe amnesia':>22}{'stored loss':>24}{'session amn.':>13}"
             f"{'turns/s':>9}{'p95':>9}  {'verdict':<8}vs previous"]
    for r in rows:
        lines.append(f"  {r['night']:<17} {r['label'][:14]:<14}{cell(r['probe_amnesia']):>22}{cell(r['stored_loss']):>24}"
                     f"{pct(r['session_amnesia']['rate']):>13}{number(r['throughput'], 1):>9}{ms(r['p95']):>9}  "
                     f"{r['result']:<8}{r['vs_previous']}")
    lines += ["", "per release, pooled over its runs",
              f"  {'label':<14}{'runs':>5}{'probe amnesia':>22}  {'95% interval':<18}{'stored loss':>24}  95% interval"]
    for e in releases:
        lines.append(f"  {e['label'][:14]:<14}{e['runs']:>5}{cell(e['probe_amnesia']):>22}  "
                     f"{interval(e['probe_amnesia']):<18}{cell(e['stored_loss']):>24}  {interval(e['stored_loss'])}")
    return "\n".join(lines)


def write_html(out: Path, runs: list[RunData], rows: list[dict], releases: list[dict], skipped: list[str]) -> Path:
    from oracle.report import _env, data_uri

    dated = [dataclasses.replace(r, run={**r.run, "label": f"{r.label}\n{night(r)[:10]}"}) for r in runs]
    with tempfile.TemporaryDirectory() as tmp:
        chart = data_uri(charts.trend(dated, Path(tmp) / "trend.png"))
    page = _env().get_template("trend.html.j2").render(rows=rows, releases=releases, skipped=skipped, chart=chart)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, page)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oracle trend",
                                     description="Amnesia and loss over many runs: per run in start order, and per "
                                                 "release. Folders that are not audited runs are skipped.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders, e.g. results/*")
    parser.add_argument("--html", type=Path, help="also write an HTML page with the trend chart here")
    parser.add_argument("--margin", type=float, default=0.01, help="as in compare (default 0.01 = 1 point)")
    parser.add_argument("--alpha", type=float, default=0.05, help="as in compare (default 0.05)")
    parser.add_argument("--audit", action="store_true", help="audit runs that have no audit yet (from their snapshot)")
    args = parser.parse_args(argv)
    wrong = bad_statistics(args.alpha, args.margin)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    runs, skipped = load_runs(args.runs, args.audit)
    for note in skipped:
        print(f"skipped: {note}", file=sys.stderr)
    if not runs:
        print("error: none of the folders is an audited run", file=sys.stderr)
        return 2
    rows, releases = per_run(runs, args.alpha, args.margin), per_release(runs)
    print(format_text(rows, releases))
    if args.html:
        print(f"html: {write_html(args.html, runs, rows, releases, skipped)}")
    return 0
