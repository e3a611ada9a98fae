"""`python -m oracle compare BASE CANDIDATE [MORE...]`: did this release get worse at remembering?

Rates are compared with Fisher's exact test on the 2x2 counts (scipy), throughput and p95
latency with a Mann-Whitney U test on the per-window values. A rate is **worse** only when the
difference is significant (p < --alpha) AND larger than --margin (absolute), so a pipeline can
gate on it without failing on noise. Every candidate is compared with BASE; the exit code
follows the last candidate: 1 when it is worse on any rate or fails a gate of its verdict (the same
rules as the audit, oracle/verdict.py), 3 when it holds them but its Locust users raised exceptions
(conversations cut short, unjudged), 0 otherwise, 2 for input that cannot be compared.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from scipy.stats import fisher_exact, mannwhitneyu

from contracts import codec
from contracts.console import printable
from contracts.runfolder import write_text
from oracle import charts
from oracle.report_data import RATE_METRICS, RATE_TITLES, RunData, RunFolderError, load_run, rate
from oracle.report_format import html_target_problem, ms, number, pct

WORSE, BETTER, SAME, UNMEASURED = "worse", "better", "no significant change", "not measured"
PERF_MARGIN = 0.10  # relative change below which throughput/latency differences are not called


def with_printable_label(run: RunData) -> RunData:
    """``run`` with its label (run.json's, else the summary's, else the folder's name) made printable."""
    return dataclasses.replace(run, run={**run.run, "label": printable(run.label)})


def run_identity(path) -> tuple[Path, tuple | None]:
    """What makes two folders one run: the same folder (its resolved path), or the same run id and start in its
    run.json (a copy, a backup: the Locust run writes both once). The second is None when run.json is missing,
    unreadable or has no run id or valid start: then only the folder says which run it is."""
    try:
        where = Path(path).resolve()
    except (OSError, RuntimeError):  # a loop of links: the path as given
        where = Path(path).absolute()
    try:
        meta = codec.load_document(Path(path) / "run.json")
    except (OSError, ValueError):  # codec.DecodeError is a ValueError
        return where, None
    rid, start = meta.get("run"), meta.get("start")
    if not isinstance(rid, str) or not rid or isinstance(start, bool) or not isinstance(start, (int, float)) \
            or not math.isfinite(start):
        return where, None
    return where, (rid, float(start))


def same_run(first, second) -> str | None:
    """How folder ``second`` holds the same run as ``first`` (for a message: "the same folder", "the same run id and
    start..."), or None when they are two runs."""
    (where_a, key_a), (where_b, key_b) = run_identity(first), run_identity(second)
    if where_a == where_b:
        return "the same folder" + ("" if Path(first) == Path(second) else f", {printable(where_a)}")
    if key_a is not None and key_a == key_b:
        try:
            started = datetime.fromtimestamp(key_a[1], tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        except (OverflowError, OSError, ValueError):
            started = f"{key_a[1]:g}"
        return f"the same run id {printable(repr(key_a[0]))} and start {started} in run.json: a copy or a backup"
    return None


@dataclass
class Row:
    metric: str
    title: str
    base: str
    candidate: str
    delta: str
    p: float | None
    verdict: str
    gates: bool  # rates gate the pipeline; throughput and latency are shown for context


def compare_rate(metric: str, base: RunData, cand: RunData, alpha: float, margin: float) -> Row:
    b, c = rate(base.summary.get("metrics", {}).get(metric)), rate(cand.summary.get("metrics", {}).get(metric))
    shown = (f"{pct(b['rate'])} ({b['count']}/{b['total']})", f"{pct(c['rate'])} ({c['count']}/{c['total']})")
    if not b["total"] or not c["total"]:
        return Row(metric, RATE_TITLES[metric], *shown, "n/a", None, UNMEASURED, True)
    p = float(fisher_exact([[b["count"], b["total"] - b["count"]], [c["count"], c["total"] - c["count"]]]).pvalue)
    delta = c["rate"] - b["rate"]
    verdict = SAME
    if p < alpha and abs(delta) > margin:
        verdict = WORSE if delta > 0 else BETTER
    return Row(metric, RATE_TITLES[metric], *shown, f"{delta * 100:+.2f} pp", p, verdict, True)


def compare_windows(column: str, title: str, higher_is_better: bool, base: RunData, cand: RunData,
                    alpha: float, show) -> Row:
    """Per-window values of the two runs, Mann-Whitney U; called only beyond a 10% relative change."""
    xb = base.windows[column].dropna().astype(float) if column in base.windows else []
    xc = cand.windows[column].dropna().astype(float) if column in cand.windows else []
    if column == "throughput":
        vb, vc = base.summary.get("throughput"), cand.summary.get("throughput")
    else:
        vb, vc = [(r.summary.get("latency") or {}).get("p95") for r in (base, cand)]
    if len(xb) < 2 or len(xc) < 2 or vb in (None, 0) or vc is None:
        return Row(column, title, show(vb), show(vc), "n/a", None, UNMEASURED, False)
    p = float(mannwhitneyu(xb, xc, alternative="two-sided").pvalue)
    change = (float(vc) - float(vb)) / float(vb)
    verdict = SAME
    if p < alpha and abs(change) > PERF_MARGIN:
        verdict = BETTER if (change > 0) == higher_is_better else WORSE
    return Row(column, title, show(vb), show(vc), f"{change * 100:+.1f}%", p, verdict, False)


def compare_pair(base: RunData, cand: RunData, alpha: float, margin: float) -> list[Row]:
    rows = [compare_rate(m, base, cand, alpha, margin) for m in RATE_METRICS]
    rows.append(compare_windows("throughput", "throughput (turns/s)", True, base, cand, alpha,
                                lambda v: number(v)))
    rows.append(compare_windows("latency_p95", "latency p95", False, base, cand, alpha, ms))
    return rows


def like_for_like(runs: list[RunData]) -> list[str]:
    """Warnings when runs used different conversation scripts or chaos plans: the numbers are not comparable."""
    warnings = []
    for field, what in (("script", "scripts"), ("script_sha", "script versions (script_sha)")):
        values = {r.run.get(field) for r in runs}
        if len(values) > 1:
            listed = ", ".join(f"{r.label}: {_known(r.run.get(field))[:12]}" for r in runs)
            warnings.append(f"not like for like: the runs used different {what} ({listed})")
    loads = [_load_text(r.run) for r in runs]
    if None not in loads and len(set(loads)) > 1:
        listed = ", ".join(f"{r.label}: {load}" for r, load in zip(runs, loads))
        warnings.append(f"not like for like: the runs had different loads ({listed}); throughput, latency and "
                        "races that need concurrent users depend on it")
    plans = {(r.run.get("plan_text") or "").strip() or r.run.get("plan") for r in runs}
    if len(plans) > 1:
        listed = ", ".join(f"{r.label}: {(r.run.get('plan') or 'no plan') if 'plan' in r.run else 'unknown'}"
                           for r in runs)  # the Locust run writes plan null for none: absent is not said
        warnings.append(f"not like for like: the runs used different chaos plans ({listed})")
    return warnings


def _known(value) -> str:
    """A run.json field in a warning: "unknown" when run.json does not say (unreadable, missing, older): None
    read as the script "None"."""
    return "unknown" if value is None else str(value)


def _load_text(run: dict) -> str | None:
    """run.json's ``load`` in words: "10 users at 5/s for 60s", or the shape that drove it (goldfish's step load
    with its steps); None for a run.json that does not say (written before it did)."""
    load, options = run.get("load"), run.get("options")
    if not isinstance(load, dict):
        return None
    if load.get("shape"):
        steps = options if isinstance(options, dict) and options.get("step_users") else None
        return f"shape {printable(str(load['shape']))}" + (
            f" ({steps.get('steps')} steps of +{steps.get('step_users')} users, {steps.get('step_duration')}s each)"
            if steps else "")
    users, rate, time = load.get("users"), load.get("spawn_rate"), load.get("run_time")
    changed = load.get("users_changed")  # the web UI's edit of a running test's user count
    if isinstance(changed, list) and changed:
        users = f"{users}, then {', then '.join(printable(str(c)) for c in changed[:5])}"
    return (f"{users} users" if users is not None else "users not said") + (f" at {rate:g}/s" if isinstance(
        rate, (int, float)) else "") + (f" for {printable(str(time))}{'s' if isinstance(time, int) else ''}"
                                        if time not in (None, 0, "") else " until stopped") + _stopped_early(run)


def _stopped_early(run: dict) -> str:
    """", stopped early by SIGTERM after 5s": a run cut short by a signal (run.json's ``stopped_early``) was compared
    like for like with a full one, its load said as planned (verdict hunt 17)."""
    early = run.get("stopped_early")
    if not isinstance(early, dict):
        return ""
    at, start = early.get("time"), run.get("start")
    after = f" after {at - start:.0f}s" if all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                for v in (at, start)) and at >= start else ""
    return f", stopped early by {printable(str(early.get('signal') or 'a signal'))}{after}"


def candidate_verdict(summary: dict, args) -> dict:
    """The last candidate's verdict under the same rules as the audit (oracle/verdict.py): the gates
    given here, else the ones it was audited with."""
    from oracle import verdict

    overrides = verdict.legacy_overrides(args.max_probe_amnesia, args.max_stored_loss, args.max_crosstalk)
    if args.gate is None and not overrides:
        return verdict.of_summary(summary)
    gates = verdict.parse_gates(args.gate, shorthands=overrides)  # a gate set by both is refused there
    v = verdict.of_summary(summary, gates)
    v["root_causes"] = (summary.get("verdict") or {}).get("root_causes") or []
    return v


def format_table(base: RunData, cand: RunData, rows: list[Row]) -> str:
    lines = [f"{cand.label} ({printable(cand.path.name)}) against base {base.label} ({printable(base.path.name)})",
             f"  {'metric':<22}{'base':>20}{'candidate':>20}{'delta':>11}{'p-value':>10}  verdict"]
    for r in rows:
        p = "n/a" if r.p is None else f"{r.p:.2g}"
        verdict = r.verdict.upper() if r.verdict in (WORSE, BETTER) else r.verdict
        lines.append(f"  {r.title:<22}{r.base:>20}{r.candidate:>20}{r.delta:>11}{p:>10}  {verdict}")
    return "\n".join(lines)


def trend_rows(runs: list[RunData], results: dict[str, list[Row]]) -> list[dict]:
    rows = []
    for i, r in enumerate(runs):
        m = {k: rate(r.summary.get("metrics", {}).get(k)) for k in RATE_METRICS}
        worst = "base" if i == 0 else overall(results[r.path.as_posix()])
        rows.append({"label": printable(r.label), "run": printable(r.path.name), "verdict": worst,
                     "throughput": r.summary.get("throughput"),
                     "p95": (r.summary.get("latency") or {}).get("p95"), **m})
    return rows


def format_trend(rows: list[dict]) -> str:
    lines = ["trend (release order)",
             f"  {'label':<16}{'probe amn.':>11}{'stored loss':>12}{'session amn.':>13}{'x-talk':>9}"
             f"{'turns/s':>9}{'p95':>9}  vs base"]
    for r in rows:
        lines.append(f"  {r['label']:<16}{pct(r['probe_amnesia']['rate']):>11}{pct(r['stored_loss']['rate']):>12}"
                     f"{pct(r['session_amnesia']['rate']):>13}{pct(r['crosstalk']['rate']):>9}"
                     f"{number(r['throughput'], 1):>9}{ms(r['p95']):>9}  {r['verdict']}")
    return "\n".join(lines)


def overall(rows: list[Row]) -> str:
    gated = [r.verdict for r in rows if r.gates]
    return WORSE if WORSE in gated else (BETTER if BETTER in gated else SAME)


def write_html(out: Path, runs: list[RunData], results: dict, warnings: list[str], breaches: list[str],
               trend: list[dict], gate: str, args, untrusted: str | None = None) -> Path:
    """The comparison page. ``untrusted``: why the last candidate's verdict is NOT TRUSTED (``cut_short``), which
    makes the command exit 3: without it the page said "A pipeline gating on this exits 0" beside the exit 3."""
    from oracle.report import _env, data_uri

    with tempfile.TemporaryDirectory() as tmp:
        figures = [{"title": "Amnesia against throughput, runs overlaid", "src": data_uri(
            charts.compare_curves(runs, Path(tmp) / "curves.png")),
            "caption": "Each run's rates per load step (or per throughput band when the run had no steps), with "
                       "95% Wilson intervals. A release that forgets more under load sits higher on the right."}]
        if len(runs) > 2:
            figures.append({"title": "Trend", "src": data_uri(charts.trend(runs, Path(tmp) / "trend.png")),
                            "caption": "Headline rates and throughput per run, in the order given."})
        page = _env().get_template("compare.html.j2").render(
            runs=runs, base=runs[0], pairs=[(r, results[r.path.as_posix()]) for r in runs[1:]],
            warnings=warnings, breaches=breaches, trend=trend, gate=gate, figures=figures,
            alpha=args.alpha, margin=args.margin, WORSE=WORSE, BETTER=BETTER, untrusted=untrusted)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, page)
    return out


def bad_statistics(alpha: float, margin: float) -> str | None:
    """What is wrong with --alpha (a level in (0, 1)) and --margin (a rate difference in [0, 1]), if anything."""
    if not 0 < alpha < 1:  # NaN fails every comparison
        return f"--alpha {alpha!r} is not a significance level in (0, 1)"
    if not 0 <= margin <= 1:
        return f"--margin {margin!r} is not a rate difference in [0, 1]"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m oracle compare",
        description="Compare audited runs, in release order: BASE CANDIDATE [MORE...]. Exit 1 when the last "
                    "candidate is worse than BASE on any rate or fails a gate of the verdict, 3 when its Locust users "
                    "raised exceptions (conversations cut short), 0 otherwise, 2 on bad input.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders, base first")
    from oracle.options import Once  # each verdict-changing option at most once: argparse kept the last of two
    # silently (`--margin 0.5 --margin 0.001` judged with the last, without a word)
    parser.add_argument("--margin", type=float, default=0.01, action=Once,
                        help="smallest absolute rate increase that counts as worse (default 0.01 = 1 point)")
    parser.add_argument("--alpha", type=float, default=0.05, action=Once, help="significance level (default 0.05)")
    parser.add_argument("--html", type=Path, help="also write an HTML comparison here")

    parser.add_argument("--gate", default=None, action=Once,
                        help="judge the last candidate with these gates (the audit's grammar: strict, lenient, a "
                             "file, name=limit; default: the gates it was audited with)")
    parser.add_argument("--max-probe-amnesia", type=float, default=None, action=Once, help="same as --gate probe_amnesia=RATE")
    parser.add_argument("--max-stored-loss", type=float, default=None, action=Once, help="same as --gate stored_loss=RATE")
    parser.add_argument("--max-crosstalk", type=int, default=None, action=Once, help="same as --gate crosstalk=N")
    parser.add_argument("--audit", action="store_true", help="audit runs that have no audit yet")
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        print("error: compare needs at least two runs: BASE CANDIDATE [MORE...]", file=sys.stderr)
        return 2
    wrong = bad_statistics(args.alpha, args.margin)  # the --max-* shorthands: verdict.legacy_overrides checks them
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    unsafe = html_target_problem(args.html) if args.html else None
    if unsafe:  # refused before anything is read or audited: the page would replace a run's record
        print(f"error: --html {unsafe}", file=sys.stderr)
        return 2
    try:
        from oracle.report import ensure_audited

        for path in args.runs:
            ensure_audited(path, args.audit)
        runs = [with_printable_label(load_run(path)) for path in args.runs]
    except RunFolderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base, last = runs[0], runs[-1]
    results = {r.path.as_posix(): compare_pair(base, r, args.alpha, args.margin) for r in runs[1:]}
    warnings = [printable(w) for w in like_for_like(runs) + [w for r in runs for w in r.warnings]]
    from oracle.verdict import GateError, cut_short, headline
    from oracle.verdict import untrusted as distrusted

    try:
        judged = candidate_verdict(last.summary, args)
    except GateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for at, path in enumerate(args.runs[1:], 1):  # after the runs are read (a damaged one is named for what is wrong
        for earlier in args.runs[:at]:  # with it), before any verdict or page: a gate comparing a run with itself
            same = same_run(earlier, path)  # proves nothing, and a candidate given twice is one run in the trend
            if same:
                what = "the base" if earlier == args.runs[0] else "the candidate"
                print(f"error: the candidate {printable(path)} and {what} {printable(earlier)} are the same run "
                      f"({same}): a run compared with itself proves nothing; give different runs", file=sys.stderr)
                return 2
    from oracle.verdict import exit_code, of_summary, unmeasured

    for path, r in zip(args.runs, runs):  # a run that measured nothing (its audit's exit 2: no turn acknowledged, no
        own = judged if r is last else of_summary(r.summary)  # probe sent): its rates are 0/0, and "no significant
        if isinstance(own, dict) and exit_code(own) == 2:  # change ... exit 1" read as a regression
            what = "the base" if r is base else "the candidate"
            print(f"error: {what} {printable(path)}: {unmeasured(own)} (its audit exits 2 too): it cannot be "
                  "compared; run it again so that it measures", file=sys.stderr)
            return 2
    breaches = [printable(b) for b in judged["failed"]]
    gate = overall(results[last.path.as_posix()])
    trend = trend_rows(runs, results)
    out = []
    for w in warnings:
        out.append(f"WARNING: {w}")
    if len(runs) > 2:
        out += [format_trend(trend), ""]
    for r in runs[1:]:
        out += [format_table(base, r, results[r.path.as_posix()]), ""]
    out.append(f"{last.label} on its own (gates {printable(judged['gates'])}): {printable(headline(judged))}")
    out += [f"  gate failed: {b}" for b in breaches]
    failed = gate == WORSE or bool(breaches)
    untrusted = distrusted(1 if failed else 0, last.run)  # verdict.trusted_exit_code's rule
    base_cut = cut_short(base.run)  # a base of part of a run: "no significant change" (or "worse") against it says
    if base_cut and not breaches and not untrusted:  # nothing; the candidate's own failed gates stand without it
        untrusted = f"the base {base.label} is not trusted ({base_cut}), so the comparison with it proves nothing"
    out.append(f"verdict: {last.label} against {base.label}: {gate.upper() if gate != SAME else gate} "
               f"(alpha {args.alpha}, margin {args.margin * 100:g} points)"
               + (f"; {len(breaches)} gate(s) failed" if breaches else "")
               + (f"; NOT TRUSTED: {untrusted} -> exit 3" if untrusted else f" -> exit {int(failed)}"))
    if args.html:  # written before the verdict line: a page that cannot be written is exit 2, never after "exit 0"
        try:
            why = printable(untrusted) if untrusted else None  # the page says NOT TRUSTED, exit 3, as the terminal
            out.append(f"html: {write_html(args.html, runs, results, warnings, breaches, trend, gate, args, why)}")
        except OSError as exc:
            print(f"error: --html {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print("\n".join(out))
    return 3 if untrusted else 1 if failed else 0
