"""``python -m oracle audit RUN``: (re-)audit a run folder, print a short summary and the verdict.

Exit codes: 0 every gate held; 1 a gate failed; 2 bad input (a bad gate spec, no journal, an
unreadable store, a key template that matches none of the run's sessions, unless what the clients
saw fails a gate all the same: then 1); 3 every gate held but the
run's Locust users raised exceptions (run.json), so conversations were cut short, unjudged.
"""
from __future__ import annotations

import argparse
import errno
import os
import shlex
import signal
import sys
from pathlib import Path

from oracle.explain import NOT_SCANNED, journal_copy_line
from contracts import codec, redact
from contracts.console import Terminated, deferred_interrupts, interrupt, interrupted_exit_code
from contracts.runfolder import LOCAL_WRITE_ERRNOS, AuditBusy, CannotList, RunFolder, detach_output
from contracts.durations import DurationError, parse_duration
from oracle.history import JournalError
from oracle.keys import TemplateMismatch
from oracle.snapshot import SnapshotError
from oracle.options import (Once, OptionError, add_gate_options, add_store_options, gates, read_options_given,
                            shape_options, store_options)
from oracle.store import StoreError
from oracle.verdict import rule_line, trusted_exit_code


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oracle audit", description=__doc__.splitlines()[0])
    p.add_argument("run", help="the run folder (results/<run>)")
    add_store_options(p.add_argument_group(
        "store (omit --store-url, --http-url and --reader to re-audit from the run's store/ snapshot)"))
    p.add_argument("--jobs", type=_at_least_one, help="processes reading and judging a Redis store in parallel (default: one "
                   "per core, at most 8, from 20,000 sessions up); 1 for one process")
    # each once: `--window 5s --window 1s` used the last without a word (--recovery decides which errors a fault excuses)
    p.add_argument("--window", type=_seconds(1.0), default=5.0, action=Once,
                   help="window length, at least 1s: a row of windows.csv and a bar of the charts (default 5s)")
    p.add_argument("--recovery", type=_seconds(0.0), default=5.0, action=Once,
                   help="recovery margin after each fault (default 5s)")
    add_gate_options(p.add_argument_group("the verdict's gates (exit 1 when one fails; default: the run's own, "
                                          "run.json's options.gates, else strict)"))
    p.set_defaults(gate=None)  # not given: the run's own gates (runs_own_gates)
    return p


def _at_least_one(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{codec.short(text)} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _seconds(least: float):
    """An argparse type: a duration in the plans' grammar (``5``, ``500ms``, ``1m30s``), at least ``least``."""
    def parse(text: str) -> float:
        try:
            seconds = parse_duration(text)  # argparse names the option
        except DurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if seconds < least:
            raise argparse.ArgumentTypeError(f"{codec.short(text)} is shorter than {least:g}s")
        return seconds
    return parse


def _pct(m: dict) -> str:
    if m.get("rate") is None:
        return f"{'n/a':>9}  ({m['count']}/{m['total']})"
    return f"{m['rate']:>8.3%}  ({m['count']}/{m['total']}, 95% CI {m['low']:.3%}-{m['high']:.3%})"


def charge_lines(summary: dict) -> list[str]:
    """Which fault kinds lost acknowledged turns above the quiet baseline's rate (oracle/attribution.py)."""
    out = []
    base = summary["baseline"].get("lost_after") or {}
    for row in summary["by_fault"]:
        m = row.get("lost_after") or {}
        if not m.get("count"):
            continue
        versus = f"{m['rate']:.2%} of the {m['total']} turns acknowledged before it, vs {_rate(base)} with no fault after"
        p = "" if m.get("p") is None else f", p={m['p']:.2g}"
        if row.get("charged"):
            out.append(f"{row['kind']}: {row['charged']} lost turns charged ({versus}{p})")
        else:
            out.append(f"{row['kind']}: not charged: its loss rate is not above the quiet baseline ({versus}{p})")
    if summary["baseline"].get("uncharged"):
        out.append(f"{summary['baseline']['uncharged']} lost turns charged to no fault (the bot or the store loses "
                   "them without one)")
    return out


def _rate(m: dict) -> str:
    return "n/a (no such turns)" if m.get("rate") is None else f"{m['rate']:.2%} of {m['total']}"


def render(summary: dict, run: Path) -> str:
    m, t = summary["metrics"], summary["turns"]
    lines = [f"audit of {run} ({summary['store']['source']} read via {summary['store']['reader']})",
             f"  sessions {summary['sessions']}  turns {t['total']} (ok {t['ok']}, fail {t['fail']}, "
             f"info {t['info']}, info stored {t['info_stored']})",
             f"  throughput {summary['throughput']:.1f} acked turns/s",
             f"  probe amnesia   {_pct(m['probe_amnesia'])}",
             f"  stored loss     {_pct(m['stored_loss'])}",
             f"  session amnesia {_pct(m['session_amnesia'])}",
             f"  cross-talk      {_pct(m['crosstalk'])}",
             "  anomalies       " + (", ".join(f"{k} {v}" for k, v in summary["anomalies"].items()) or "none")]
    for row in summary["by_fault"]:
        if row.get("ineffective"):
            lines.append(f"  {row['kind']:<21} INEFFECTIVE: touched nothing in {row['occurrences']} occurrence(s)")
            continue
        lines.append(f"  during {row['kind']:<14} probe amnesia {_pct(row['probe_amnesia'])}; "
                     f"stored loss {_pct(row['stored_loss'])}")
    if summary["by_fault"]:
        b = summary["baseline"]
        lines.append(f"  quiet baseline      probe amnesia {_pct(b['probe_amnesia'])}; stored loss {_pct(b['stored_loss'])}")
        lines += [f"  {line}" for line in charge_lines(summary)]
    for problem in summary["problems"][:10]:
        lines.append(f"  warning: {problem}")
    total = summary.get("problems_total", len(summary["problems"]))
    if total > 10:
        lines.append(f"  ... {total - 10:,} more warnings (summary.json lists the first {len(summary['problems'])})")
    info = (summary.get("information") or {}).get("foreign_keys") or {}
    if info.get("scanned") is False:
        lines.append(f"  information: {NOT_SCANNED}")
    elif info.get("other_goldfish_runs") or info.get("not_goldfish"):
        lines.append(f"  information: the store also holds {info['other_goldfish_runs']} key(s) of other goldfish runs "
                     f"and {info['not_goldfish']} other key(s) under the template (not judged)")
    for copy in (summary.get("information") or {}).get("journal_copies") or []:
        lines.append(f"  information: {journal_copy_line(copy)}")
    lines.append("  verdict rules:")
    lines += [f"    {rule['result'].upper():<13} {rule_line(rule)}" for rule in summary["verdict"]["rules"]]
    lines.append(f"  tables in {run / 'audit'}")
    return "\n".join(lines)


def _faults_left(run) -> str:
    """The faults the run's chaos left in force (chaos/outstanding.json: its Locust process killed mid-fault), said
    beside a store that cannot be read: a Redis it left paused answered "Timeout reading from socket", and nothing
    pointed at `chaos heal` (chaos hunt 18). '' when it lists none or cannot be read."""
    try:
        faults = codec.load_document(RunFolder(run).outstanding).get("faults")
    except (OSError, codec.DecodeError, AttributeError):
        return ""
    if not isinstance(faults, list) or not faults:
        return ""
    first = faults[0] if isinstance(faults[0], dict) else {}
    fault = first.get("fault") if isinstance(first.get("fault"), dict) else {}
    return (f"; {RunFolder(run).outstanding} lists {len(faults)} fault(s) this run's chaos left in force (first: "
            f"{fault.get('id')} {fault.get('kind')} on {first.get('instance')}), which may hold the store: run "
            f"`python -m chaos heal {run}` first")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    keep_on_after_hangup(RunFolder(args.run).hangup_log)
    before = _written(Path(args.run))
    try:
        return _audit(args)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM, often while a slow store is read: say what was written
        print(f"oracle audit: interrupted: {_what_was_written(args, before)}", file=sys.stderr)
        return interrupted_exit_code(exc)


def _written(run: Path) -> tuple:
    """What says which outputs an audit replaced: summary.json's, the snapshot's meta.json's and report.html's file
    identity (each is replaced by a rename, the snapshot as a whole folder), None when there is none."""
    folder = RunFolder(run)

    def identity(path: Path):
        try:
            st = path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    return identity(folder.summary), identity(folder.store / "meta.json"), identity(folder.report)


def _what_was_written(args, before: tuple) -> str:
    """The interrupted audit's outputs as they are: which of the tables and the snapshot it replaced, and the
    command that finishes the job. It said "did not finish ... the tables of an earlier audit are kept" after it had
    replaced them, beside a report.html still showing the earlier verdict (hunt 11 D1)."""
    run = Path(args.run)
    folder = RunFolder(run)
    tables, snapshot, page_drawn = (now != then for now, then in zip(_written(run), before))
    report = shlex.quote(str(run))
    if tables:  # audit_run had replaced the tables: the audit is done; only the page may be the earlier one
        page = "" if not folder.report.exists() else f"; {folder.report} is drawn again" if page_drawn else (
            f"; {folder.report} still shows the earlier audit: draw it again with `python -m oracle report {report}`")
        return (f"the audit of {args.run} finished: its tables and verdict are written in {folder.audit} (see "
                f"summary.json){page}")
    if snapshot and _complete(folder):  # read whole, judged in part: the tables are the earlier read's
        return (f"the audit of {args.run} did not finish: the store was read whole and its new snapshot replaced "
                f"the earlier one in {folder.store}, but the tables in {folder.audit} (and report.html) are still "
                f"the earlier audit's, of the earlier read; finish it from the new snapshot (no store read) with "
                f"`python -m oracle audit {report}`, adding any --gate options given")
    again = " ".join(["python -m oracle audit", shlex.quote(args.run)] +
                     [f"--{name.replace('_', '-')} ..." for name in ("store_url", "http_url", "reader")
                      if getattr(args, name, "")])
    return (f"the audit of {args.run} did not finish (the journal and any tables of an earlier audit are kept); "
            f"finish it with `{again}`")


def _complete(folder: RunFolder) -> bool:
    try:
        return codec.load_document(folder.store / "meta.json").get("complete") is True
    except (OSError, codec.DecodeError, AttributeError):
        return False


def keep_on_after_hangup(log: Path) -> None:
    """A closed terminal (an ssh session that drops under a soak's long audit) killed the audit, and with it minutes
    of reading: it now goes on to its verdict and exit code, printing to the run folder's hangup.log."""
    def hung_up(_signum, _frame):
        detach_output(log)
        print("oracle audit: SIGHUP: the terminal closed; the audit goes on, its output here", file=sys.stderr)

    try:
        signal.signal(signal.SIGHUP, hung_up)
    except (ValueError, AttributeError):  # not the main thread (a library caller), or no SIGHUP (Windows)
        pass


def _audit(args) -> int:
    run = Path(args.run)
    from oracle.audit import WorkerError, audit_run  # after argument errors, which need no pandas
    from oracle.verdict import exit_code as verdict_exit_code, headline

    try:
        store, limits = store_options(args), gates(args)
        limits = limits if gates_given(args) else runs_own_gates(run, limits)
        unused = read_options_given(args) if store is None else []
        if unused:
            raise OptionError(f"{', '.join(unused)}: how to read the store, but none is read: the audit re-judges the "
                              f"snapshot in {RunFolder(run).store} as it was read; pass --store-url (or --http-url / "
                              "--reader) with them to read the store again")
    except OptionError as exc:
        print(f"oracle audit: {redact.text(exc)}{_faults_left(run)}", file=sys.stderr)
        return 2
    untellable = untellable_re_audit(run)
    if untellable:
        print(untellable)
        return 2
    try:
        shape = shape_options(args) if store is None else None  # live: already in the store's options
        if shape:
            print(f"re-audit from the snapshot with {', '.join(f'{k}={v!r}' for k, v in shape.items())} in place of "
                  "the shape it was read with")
        summary = audit_run(run, store=store, window_s=args.window, recovery_s=args.recovery,
                            gates=limits, jobs=args.jobs, shape=shape)
    except TemplateMismatch as exc:
        print(f"oracle audit: {redact.text(exc)}", file=sys.stderr)
        return _online(run, limits, args.recovery)
    except (JournalError, SnapshotError, StoreError, WorkerError, AuditBusy) as exc:
        print(f"oracle audit: {redact.text(exc)}{_faults_left(run) if isinstance(exc, StoreError) else ''}",
              file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.filename is None:
            raise
        print(f"oracle audit: {_cannot(exc)}", file=sys.stderr)
        return 2
    # the tables are replaced: printing the verdict and drawing report.html again are not cut by a first Ctrl-C
    # or SIGTERM (a PASS page beside a FAIL summary.json, hunt 11 D1); it is said after, with its exit code
    with deferred_interrupts() as taken:
        code, drawn = _verdict(run, summary, verdict_exit_code, headline)
    if taken:
        stop = interrupt(taken[0])
        page = f" and {RunFolder(run).report} drawn again" if drawn else ""
        name = "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"
        print(f"oracle audit: interrupted ({name}) after the audit of {args.run} finished: its tables and verdict "
              f"(above) are written{page}; exit {interrupted_exit_code(stop)}, not the verdict's {code}", file=sys.stderr)
        return interrupted_exit_code(stop)
    return code


def _cannot(exc: OSError) -> str:
    """What the audit could not do to the file ``exc`` names: list it (CannotList), write it or read it. A write
    refused for permission says so no more than a read does ("cannot read RUN/audit/parts" was a folder it could
    not make): a path that is not there, or that can be opened for reading now, was being written."""
    if isinstance(exc, CannotList):
        return str(exc)
    writing = exc.errno in LOCAL_WRITE_ERRNOS - {errno.EIO}  # only a write fails so (EIO: a read may too)
    if exc.errno in (errno.EACCES, errno.EPERM):
        try:  # non-blocking: a FIFO opened to read waits for a writer otherwise
            os.close(os.open(exc.filename, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            writing = True
        except FileNotFoundError:
            writing = True
        except OSError:
            pass
    return f"cannot {'write' if writing else 'read'} {exc.filename}: {exc.strerror or exc}"


def _verdict(run: Path, summary: dict, verdict_exit_code, headline) -> tuple[int, bool]:
    """The summary, report.html drawn again, and the verdict line; its exit code, and whether a report.html was
    drawn again."""
    print(render(summary, run))
    drawn = redraw_report(run)
    return _verdict_line(run, summary, verdict_exit_code, headline), drawn


def _verdict_line(run: Path, summary: dict, verdict_exit_code, headline) -> int:
    try:  # a PASS, or nothing measured, of a run cut short is not trusted; nor a FAIL of misread replies
        code, untrusted = trusted_exit_code(summary["verdict"], recorded_run(run) or summary.get("run_record") or {})
    except (OSError, codec.DecodeError) as exc:  # a damaged run.json may have said the run was cut short
        if verdict_exit_code(summary["verdict"]) == 1:  # a finding stands whatever run.json says
            print(headline(summary["verdict"]))
            return 1
        print(f"NO VERDICT — {RunFolder(run).run_json} cannot be read ({exc}), so whether Locust's users raised "
              "exceptions (which cut conversations short) cannot be told: repair it (a copy of it)")
        return 2
    if untrusted:  # as at the end of the Locust run
        print(f"NOT TRUSTED — {untrusted}; the stored data alone: {headline(summary['verdict'])}")
    else:
        print(headline(summary["verdict"]))
    return code


def redraw_report(run: Path) -> bool:
    """The run's report.html, when it has one, drawn again from the tables just written: a re-audit that changed
    the verdict (other gates, the store read again) left the page's badge saying the earlier one beside a new
    summary.json (verdict hunt 10). One that cannot be drawn is said; the verdict and exit code stand. True when a
    page was drawn."""
    page = RunFolder(run).report
    if not page.exists():
        return False
    try:
        from oracle.report import render as render_report

        render_report(run)
        print(f"report: {page} (drawn again for this audit)")
        return True
    except Exception as exc:  # noqa: BLE001 - the audit's verdict stands; the page is said to be the earlier one
        print(f"warning: {page} could not be drawn again ({type(exc).__name__}: {exc}): it shows the earlier audit; "
              f"draw it with `python -m oracle report {shlex.quote(str(run))}`", file=sys.stderr)
        return False


def _online(run: Path, limits, recovery_s: float) -> int:
    """The store could not be judged (its keys are not where the template says): 1 when what the clients saw
    fails a gate all the same (failed recall probes, cross-talk in replies: a bug found fails), else 2."""
    from oracle.audit import journal_verdict
    from oracle.verdict import headline

    try:
        v = journal_verdict(run, limits, recovery_s)["verdict"]
    except JournalError as exc:  # a damaged chaos timeline (the journal was read by the audit already)
        print(f"oracle audit: {redact.text(exc)}", file=sys.stderr)
        return 2
    if v["result"] != "fail":
        return 2
    print(f"verdict from the journal alone (the store was not judged): {headline(v)}")
    print("\n".join(f"  {rule['result'].upper():<13} {rule_line(rule)}" for rule in v["rules"]
                    if rule["result"] == "fail"))
    return 1


def untellable_re_audit(run: Path) -> str | None:
    """A run.json that cannot be read makes a PASS untellable (it may have said the run was cut short): a re-audit
    then replaced the earlier audit, whose summary kept what run.json said, with one that knew nothing of it, and
    exited 2 (input hunt 15). With an earlier audit there, nothing is replaced: why, or None."""
    if not RunFolder(run).summary.exists():
        return None
    try:
        recorded_run(run)
    except (OSError, codec.DecodeError) as exc:
        return (f"NO VERDICT — {RunFolder(run).run_json} cannot be read ({exc}), so whether the run was cut short "
                f"cannot be told: repair it (a copy of it); the earlier audit in {RunFolder(run).audit} is kept")
    return None


def gates_given(args) -> bool:
    return args.gate is not None or any(getattr(args, name) not in (None, "") for name in
                                        ("max_probe_amnesia", "max_stored_loss", "max_crosstalk"))


def runs_own_gates(run: Path, default):
    """Without --gate: the gates the run was started with (run.json ``options.gates``), as compare judges with the
    audited ones. A run that PASSed under `--gate stored_loss=1%` re-audited, or finished after a signal with the
    command run.json names, was judged strict: FAIL (verdict hunt 15). A spec that no longer parses (its gates
    file gone) is an OptionError naming --gate."""
    from oracle.verdict import GateError, Gates, parse_gates

    try:
        options = recorded_run(run).get("options") or {}
        spec, written = options.get("gates"), options.get("gate_limits")
    except (OSError, codec.DecodeError, AttributeError):  # a damaged run.json is said where it is read for trust
        return default
    if not isinstance(spec, str) or not spec.strip() or spec.strip() == default.spec:
        return default
    # the limits as the run had them, so that a gates file edited or removed since changes nothing (an older
    # run.json has only the spec as given)
    field = "gate_limits" if isinstance(written, str) and written.strip() else "gates"
    try:
        limits = parse_gates(written if field == "gate_limits" else spec,
                             where=f"the run's gates ({RunFolder(run).run_json} options.{field})")
    except GateError as exc:
        raise OptionError(f"{exc}; give --gate to judge with other gates") from None
    print(f"gates: the run's own, {codec.short(spec)} (run.json); --gate judges with others")
    return Gates(limits.limits, spec)


def recorded_run(run: Path) -> dict:
    """The run's run.json ({} when it has none: a journal written by hand); OSError or DecodeError when it is
    damaged, or not a regular file (a FIFO would never end)."""
    path = RunFolder(run).run_json
    return codec.load_document(path) if path.exists() or path.is_symlink() else {}
