"""`python -m oracle trend results/*`: amnesia and loss over many runs — per run (a nightly soak's
night) in start order, and pooled per release.

Folders that are not runs (``results/matrix``: no journal) and runs still going (run.json has no
``end`` yet, and the Locust process holds the run: ``RunFolder.running``) are skipped with a note, so a
shell glob over results/ just works. A run that ended
without a usable verdict (its audit failed or was interrupted: no valid audit/summary.json) is a
night with no verdict: listed, with the reason, and the exit code is 2 (cannot judge, as everywhere
in goldfish; never 1, a failed gate) unless ``--allow-no-verdict``. So is a night whose own audit exits 3 (cut
short: untrusted) or 2 (measured nothing: unmeasured): listed with its rates, not pooled into its release's. Each run is compared with the
audited one before it by compare's rules (Fisher's exact test, ``--margin``); otherwise the exit
code is 0 unless nothing could be read (2): a trend informs, ``oracle compare`` gates. A run given twice (the
same folder, or a copy: the same run id and start in run.json) is counted once, with a note naming both.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from contracts import codec, redact
from contracts.journal import MAX_EPOCH
from contracts.runfolder import RunFolder, write_text
from oracle import charts
from oracle.compare import bad_statistics, compare_pair, like_for_like, printable, run_identity, same_run, \
    trend_rows, with_printable_label
from oracle.history import JournalError
from oracle.report_data import (RATE_METRICS as POOLED, NotAudited, RunData, RunFolderError, load_run,
                                rate)
from oracle.report_format import html_target_problem, interval, ms, number, pct
from oracle.snapshot import SnapshotError, read_meta
from oracle.verdict import of_summary, trusted_exit_code, unmeasured


NO_VERDICT = "no-verdict"  # the verdict column of a run that ended without one (one word: columns split on blanks)


@dataclasses.dataclass
class Unjudged:
    """A run (it has a journal) that ended without a usable verdict: the audit failed (the store unreachable
    or dead mid-read, no snapshot, a journal it cannot use), was interrupted, or never ran. Never skipped:
    a nightly gate that dropped it would hide a night that gave no verdict."""
    path: Path
    run: dict
    reason: str

    @property
    def label(self) -> str:
        return printable(self.run.get("label") or self.path.name)


def run_meta(folder: RunFolder) -> dict | None:
    """run.json as written by the Locust run ({} when there is none: a journal written by hand); None when it
    cannot be read. ``start`` is kept only as a valid epoch (it orders the nights)."""
    if not (folder.run_json.exists() or folder.run_json.is_symlink()):
        return {}
    try:
        meta = redact.deep(codec.mend_surrogates(codec.load_document(folder.run_json))[0])  # printable, as load_run's
    except (OSError, codec.DecodeError):
        return None
    start = meta.get("start")
    ok = isinstance(start, (int, float)) and not isinstance(start, bool) and 0 <= start <= MAX_EPOCH
    return {**meta, "start": float(start) if ok else None}


def still_going(meta: dict | None) -> bool:
    """run.json has no ``end`` and no ``exit_code`` yet: the Locust run writes both as it ends
    (locustfiles/runfolder.py), so it is still going (or was killed before its end: nothing says which)."""
    return bool(meta) and meta.get("end") is None and meta.get("exit_code") is None


def unjudged(path: Path, meta: dict | None, why: str) -> Unjudged:
    """``why`` (the summary missing or unusable) with what the run left about its end: exit code, phase,
    interruption, the journal's own verdict, an incomplete snapshot (the store died mid-read)."""
    folder, parts = RunFolder(path), [why]
    if meta is None:
        parts.append(f"{folder.run_json} cannot be read")
    meta = meta or {}
    stopped = meta.get("interrupted")
    if isinstance(stopped, dict):
        parts.append(f"interrupted by {stopped.get('signal')} during its {stopped.get('phase')} phase")
    if meta.get("exit_code") is not None:
        parts.append(f"the run ended with exit code {meta['exit_code']} (phase {meta.get('phase')})")
    elif still_going(meta):  # and its process let go of the run (RunFolder.running): it ended, unrecorded
        parts.append(f"its Locust process ended during its {meta.get('phase') or 'first'} phase without recording "
                     "its end (killed, or the run folder's disk full: its log says which)")
    if meta.get("verdict") == "fail":
        parts.append("the journal alone failed a gate (the store was not judged)")
    try:
        snapshot = read_meta(folder.path)
        if snapshot.get("complete") is False:
            parts.append(f"its store snapshot is incomplete ({snapshot.get('error')})")
    except (OSError, SnapshotError):  # none, or damaged: the reason above says enough
        pass
    return Unjudged(path, meta, printable(redact.text("; ".join(parts))))


def night(run: RunData | Unjudged) -> str:
    """The UTC date the run started (a nightly soak's night)."""
    start = run.run.get("start")
    return datetime.fromtimestamp(float(start), tz=timezone.utc).strftime("%Y-%m-%d %H:%M") if start else "?"


def load_runs(paths: list[str], audit: bool = False) -> tuple[list[RunData], list[Unjudged], list[str]]:
    """The audited runs among ``paths`` in start order, the runs that ended with no verdict, and a note for
    each folder skipped (not a run, a run still going, or a run given twice)."""
    from oracle.report import ensure_audited

    runs, failed, skipped, folders, ids = [], [], [], {}, {}
    for path in paths:
        # `trend R R/`, a glob that names a run twice, a copy or a backup of an audited run beside it (the same run
        # id and start in run.json): pooled once, or its counts would be there twice and its interval too narrow
        where, key = run_identity(path)
        if where in folders:
            skipped.append(f"{path}: the same run as {folders[where]} ({same_run(folders[where], path)}): named "
                           "twice; counted once")
            continue
        folders[where] = path
        try:
            ensure_audited(path, audit)
            run = with_printable_label(load_run(path))
            if key in ids:  # a copy with no usable verdict is still listed, as a night with none
                skipped.append(f"{path}: the same run as {ids[key]} ({same_run(ids[key], path)}); counted once")
                continue
            if key:
                ids[key] = path
            runs.append(run)
        except (NotAudited, JournalError) as exc:  # JournalError: --audit of a run whose journal is unusable
            why = str(exc) if isinstance(exc, NotAudited) else f"{path}: the audit failed: {exc}"
            folder = RunFolder(path)
            meta = run_meta(folder)
            if not folder.journal.is_dir() and not folder.summary.exists():  # run.json alone: no goldfish run to judge
                skipped.append(why)  # (an audited run whose journal went since is a night with no verdict: input hunt 16)
            elif still_going(meta) and folder.running() is not False:
                skipped.append(f"{why} (still going, or killed before its end: run.json has no end yet)")
            else:
                failed.append(unjudged(folder.path, meta, why))
        except RunFolderError as exc:
            skipped.append(str(exc))
    runs.sort(key=lambda r: (float(r.run.get("start") or 0), r.path.name))
    return runs, failed, skipped


def unknown_starts(runs: list[RunData]) -> list[str]:
    """A note for each run listed with start ``?`` (first, as if oldest): its run.json is missing, unreadable or
    has no valid start, which the trend would otherwise order silently."""
    notes = []
    for r in runs:
        if r.run.get("start") is None:
            file = f"{RunFolder(r.path).run_json}: "
            about = [w.replace(file, "run.json: ", 1) for w in r.warnings if w.startswith(file)
                     and any(word in w for word in (": start ", "unreadable", "missing"))]
            why = "; ".join(about) or "run.json has no start"
            notes.append(f"{r.path}: its start is unknown ({why}); listed first, started ?")
    return notes


RESULT_OF_EXIT = {0: "pass", 1: "fail", 2: "unmeasured", 3: "untrusted"}  # a run that measured nothing is no fail
UNVOUCHED = ("unmeasured", "untrusted")  # audited, but no verdict to vouch for: not pooled, exit 2 as no-verdict


def own_result(r: RunData) -> tuple[str, str | None]:
    """The run's result as its own audit exits (RESULT_OF_EXIT), and why the trend cannot vouch for it (None when
    it can): its run was cut short (exit 3) or it measured nothing (exit 2). Such a night was listed, its counts
    pooled into its release's rates and the trend exited 0, as if it were a night that held."""
    v = of_summary(r.summary)
    code, untrusted = trusted_exit_code(v, r.run)
    why = untrusted or (unmeasured(v) if code == 2 else None)
    return RESULT_OF_EXIT[code], printable(redact.text(why)) if why else None


def per_run(runs: list[RunData], alpha: float, margin: float, failed: list[Unjudged] = ()) -> list[dict]:
    """compare's trend rows, each run judged against the previous audited one, plus its night and verdict;
    with a row for each run in ``failed`` (no rates, verdict ``no-verdict`` and its reason), all in start order."""
    results = {r.path.as_posix(): compare_pair(prev, r, alpha, margin) for prev, r in zip(runs, runs[1:])}
    rows = trend_rows(runs, results)
    for row, prev, r in zip(rows, [None, *runs], runs):
        result, why = own_result(r)  # as its own audit exits
        row.update(night=night(r), result=result, reason=why,
                   vs_previous="-" if row["verdict"] == "base" else row["verdict"], start=r.run.get("start"),
                   unlike=like_for_like([prev, r]) if prev is not None else [])  # as compare warns of the pair
    rows += [{"label": u.label, "run": printable(u.path.name), "verdict": "-", "throughput": None, "p95": None,
              **{m: rate(None) for m in POOLED}, "night": night(u), "result": NO_VERDICT, "vs_previous": "-",
              "start": u.run.get("start"), "reason": u.reason} for u in failed]
    return sorted(rows, key=lambda row: (float(row["start"] or 0), row["run"]))


def per_release(runs: list[RunData]) -> list[dict]:
    """Counts pooled over each release's runs (in order of first appearance), with Wilson intervals; a run the
    trend cannot vouch for (``own_result``: cut short, or measured nothing) is left out."""
    pooled: dict[str, dict] = {}
    for r in runs:
        if own_result(r)[1]:
            continue
        entry = pooled.setdefault(r.label, {"label": r.label, "runs": 0, **{m: [0, 0] for m in POOLED}})
        entry["runs"] += 1
        for m in POOLED:
            got = rate(r.summary.get("metrics", {}).get(m))
            entry[m][0] += got["count"]
            entry[m][1] += got["total"]
    return [{**e, **{m: rate({"count": e[m][0], "total": e[m][1]}) for m in POOLED}} for e in pooled.values()]


LABEL_WIDTH = (14, 40)  # the label column: at least, at most (a longer label is cut in its middle)


def shown_label(label: str, width: int = LABEL_WIDTH[1]) -> str:
    """A label as the text tables show it: quoted when it has blanks at its ends (``'v1 '`` and ``v1`` are two
    releases), and cut in its middle when longer than ``width``, keeping its start and its end, where releases
    differ (``release-2026-11-a`` and ``-b`` were both shown ``release-2026-1``)."""
    if label != label.strip():
        label = repr(label)
    if len(label) <= width:
        return label
    head = (width - 1) // 3
    return f"{label[:head]}…{label[len(label) - (width - 1 - head):]}"


def format_text(rows: list[dict], releases: list[dict]) -> str:
    def cell(m: dict) -> str:
        return f"{pct(m['rate'])} ({m['count']}/{m['total']})"

    width = max([LABEL_WIDTH[0]] + [len(shown_label(r["label"])) + 1 for r in [*rows, *releases]])
    lines = [f"per run, in start order ({len(rows)} runs)",
             f"  {'started (UTC)':<17} {'label':<{width}}{'probe amnesia':>22}{'stored loss':>24}"
             f"{'session amn.':>13}{'turns/s':>9}{'p95':>9}  {'verdict':<8}vs previous"]
    for r in rows:
        c = ("-",) * 5 if r["result"] == NO_VERDICT else (cell(r["probe_amnesia"]), cell(r["stored_loss"]),
                                                          pct(r["session_amnesia"]["rate"]), number(r["throughput"], 1),
                                                          ms(r["p95"]))
        lines.append(f"  {r['night']:<17} {shown_label(r['label']):<{width}}{c[0]:>22}{c[1]:>24}{c[2]:>13}{c[3]:>9}"
                     f"{c[4]:>9}  {r['result']:<7} {r['vs_previous']}" + (" *" if r.get("unlike") else ""))
    unlike = [r for r in rows if r.get("unlike")]
    if unlike:  # a nightly whose load or plan changed reads as "better" or "worse" for that alone (soak hunt 18)
        lines += ["", "* not like for like with the run before it, so its 'vs previous' says little:"]
        lines += [f"  {r['night']:<17} {r['run']}: " + "; ".join(w.removeprefix("not like for like: ")
                                                                 for w in r["unlike"]) for r in unlike]
    lines += ["", "per release, pooled over its runs",
              f"  {'label':<{width}}{'runs':>5}{'probe amnesia':>22}  {'95% interval':<18}{'stored loss':>24}"
              "  95% interval"]
    for e in releases:
        lines.append(f"  {shown_label(e['label']):<{width}}{e['runs']:>5}{cell(e['probe_amnesia']):>22}  "
                     f"{interval(e['probe_amnesia']):<18}{cell(e['stored_loss']):>24}  {interval(e['stored_loss'])}")
    failed = [r for r in rows if r["result"] == NO_VERDICT]
    if failed:  # last, so the two tables above keep their shape
        lines += ["", f"no verdict ({len(failed)} run(s) ended without a usable audit/summary.json)"]
        lines += [f"  {r['night']:<17} {r['run']}: {r['reason']}" for r in failed]
    unvouched = [r for r in rows if r["result"] in UNVOUCHED]
    if unvouched:
        lines += ["", f"not pooled ({len(unvouched)} run(s) whose own audit does not vouch for a verdict)"]
        lines += [f"  {r['night']:<17} {r['run']}: {r['result']}: {r['reason']}" for r in unvouched]
    return "\n".join(lines)


def write_html(out: Path, runs: list[RunData], rows: list[dict], releases: list[dict], skipped: list[str]) -> Path:
    from oracle.report import _env, data_uri

    dated = [dataclasses.replace(r, run={**r.run, "label": f"{r.label}\n{night(r)[:10]}"}) for r in runs]
    with tempfile.TemporaryDirectory() as tmp:  # no chart when every run gave no verdict
        chart = data_uri(charts.trend(dated, Path(tmp) / "trend.png")) if runs else None
    page = _env().get_template("trend.html.j2").render(rows=rows, releases=releases, skipped=skipped, chart=chart)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, page)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oracle trend",
                                     description="Amnesia and loss over many runs: per run in start order, and per "
                                                 "release. Folders that are not runs, and runs still going, are "
                                                 "skipped. A run that ended without a usable verdict (its audit "
                                                 "failed or was interrupted) is listed as no-verdict, with the "
                                                 "reason, and makes the exit code 2 (cannot judge); so does a run "
                                                 "whose own audit is untrusted (cut short) or unmeasured, which is "
                                                 "listed but not pooled into its release's rates.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders, e.g. results/*")
    parser.add_argument("--html", type=Path, help="also write an HTML page with the trend chart here")
    parser.add_argument("--margin", type=float, default=0.01, help="as in compare (default 0.01 = 1 point)")
    parser.add_argument("--alpha", type=float, default=0.05, help="as in compare (default 0.05)")
    parser.add_argument("--audit", action="store_true", help="audit runs that have no audit yet (from their snapshot)")
    parser.add_argument("--allow-no-verdict", action="store_true",
                        help="runs that ended without a usable verdict (or an untrusted or unmeasured one) are "
                             "still listed, but exit 0 for them (default: exit 2, cannot judge)")
    args = parser.parse_args(argv)
    wrong = bad_statistics(args.alpha, args.margin)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    unsafe = html_target_problem(args.html) if args.html else None
    if unsafe:  # refused before anything is read or audited: the page would replace a run's record
        print(f"error: --html {unsafe}", file=sys.stderr)
        return 2
    runs, failed, skipped = load_runs(args.runs, args.audit)
    skipped = [printable(note) for note in skipped]  # they quote folder names: shown escaped, as labels are
    for note in skipped:
        print(f"skipped: {note}", file=sys.stderr)
    for note in unknown_starts(runs):
        print(f"warning: {printable(note)}", file=sys.stderr)
    if not runs and not failed:
        print("error: none of the folders is an audited run", file=sys.stderr)
        return 2
    rows, releases = per_run(runs, args.alpha, args.margin, failed), per_release(runs)
    print(format_text(rows, releases))
    if args.html:
        print(f"html: {write_html(args.html, runs, rows, releases, skipped)}")
    unvouched = [r for r in rows if r["result"] in UNVOUCHED]
    if (failed or unvouched) and not args.allow_no_verdict:
        if failed:
            print(f"error: {len(failed)} run(s) ended without a verdict (listed under \"no verdict\"): exit 2, "
                  "cannot judge; --allow-no-verdict to list them and exit 0", file=sys.stderr)
        if unvouched:
            named = ", ".join(f"{r['run']} ({r['night']}): {r['result']}" for r in unvouched)
            print(f"error: {len(unvouched)} run(s) whose own audit does not vouch for a verdict ({named}; why: under "
                  "\"not pooled\"), "
                  "left out of the release rates: exit 2, cannot judge; --allow-no-verdict to list them and exit 0",
                  file=sys.stderr)
        return 2
    return 0
