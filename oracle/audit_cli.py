"""``python -m oracle audit RUN``: (re-)audit a run folder, print a short summary and the verdict.

Exit codes: 0 every gate held; 1 a gate failed; 2 bad input (a bad gate spec, no journal, an
unreadable store, a key template that matches none of the run's sessions).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oracle.history import JournalError
from oracle.parallel import WorkerError
from oracle.snapshot import SnapshotError
from oracle.store import StoreError, StoreOptions
from oracle.verdict import rule_line


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m oracle audit", description=__doc__.splitlines()[0])
    p.add_argument("run", help="the run folder (results/<run>)")
    s = p.add_argument_group("store (omit all three to re-audit from the run's store/ snapshot)")
    s.add_argument("--store-url", help="redis://[:password@]host:port/db to read live (and snapshot)")
    s.add_argument("--http-url", help="URL template returning a session's history, e.g. http://h/sessions/{session}/history")
    s.add_argument("--reader", help="module:function reading a batch of sessions (see docs/oracle.md)")
    d = StoreOptions()
    s.add_argument("--key-template", default=d.key_template, help="Redis key per session (default %(default)s)")
    s.add_argument("--format", default=d.format, choices=["auto", "list", "blob"],
                   help="list: one entry per message; blob: one JSON list in a string key; auto: by key type")
    s.add_argument("--direction", default=d.direction, choices=["lpush", "rpush"],
                   help="lpush: newest first (LangChain, default); rpush: oldest first")
    s.add_argument("--role-field", default=d.role_field, help="dotted path of the role (default %(default)s)")
    s.add_argument("--content-field", default=d.content_field, help="dotted path of the text (default %(default)s)")
    s.add_argument("--user-role", action="append", help="role name(s) of user entries (default human, user)")
    s.add_argument("--assistant-role", action="append", help="role name(s) of assistant entries (default ai, assistant)")
    s.add_argument("--http-messages-field", default=d.http_messages_field,
                   help="dotted path of the message list in the HTTP reply ('' = the reply itself)")
    s.add_argument("--batch", type=int, default=d.batch, help="sessions per pipeline round trip")
    s.add_argument("--no-scan", action="store_true", help="do not SCAN the namespace for foreign keys")
    s.add_argument("--jobs", type=int, help="processes decoding a journal of 64 MB or more, and reading and judging "
                   "a Redis store, in parallel (default: one per core, at most 8; the store split from 20,000 "
                   "sessions up); 1 for one process")
    p.add_argument("--window", type=float, default=5.0, help="window length in seconds (default 5)")
    p.add_argument("--recovery", type=float, default=5.0, help="recovery margin after each fault, s (default 5)")
    t = p.add_argument_group("the verdict's gates (exit 1 when one fails; docs/oracle.md \"The verdict\")")
    t.add_argument("--gate", default="strict",
                   help="strict (default: nothing allowed), lenient, a YAML gates file, and/or name=limit items, "
                        "comma-separated, later ones win: e.g. 'strict,probe_amnesia=1%%,errors=off'")
    t.add_argument("--max-probe-amnesia", type=float, help="same as --gate probe_amnesia=RATE (e.g. 0.01)")
    t.add_argument("--max-stored-loss", type=float, help="same as --gate stored_loss=RATE")
    t.add_argument("--max-crosstalk", type=int, help="same as --gate crosstalk=N (sessions)")
    return p


def store_options(args) -> StoreOptions | None:
    if not (args.store_url or args.http_url or args.reader):
        return None
    return StoreOptions(
        url=args.store_url, http_url=args.http_url, reader=args.reader, key_template=args.key_template,
        format=args.format, direction=args.direction, role_field=args.role_field,
        content_field=args.content_field,
        user_roles=tuple(args.user_role or StoreOptions.user_roles),
        assistant_roles=tuple(args.assistant_role or StoreOptions.assistant_roles),
        http_messages_field=args.http_messages_field, batch=max(1, args.batch), scan_foreign=not args.no_scan)


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
    if len(summary["problems"]) > 10:
        lines.append(f"  ... {len(summary['problems']) - 10} more warnings in audit/summary.json")
    info = (summary.get("information") or {}).get("foreign_keys") or {}
    if info.get("other_goldfish_runs") or info.get("not_goldfish"):
        lines.append(f"  information: the store also holds {info['other_goldfish_runs']} key(s) of other goldfish runs "
                     f"and {info['not_goldfish']} other key(s) under the template (not judged)")
    lines.append("  verdict rules:")
    lines += [f"    {rule['result'].upper():<13} {rule_line(rule)}" for rule in summary["verdict"]["rules"]]
    lines.append(f"  tables in {run / 'audit'}")
    return "\n".join(lines)


def gates_of(args) -> "verdict.Gates":
    """The gates from --gate and the --max-* shorthands (GateError on a bad spec)."""
    from oracle import verdict

    overrides = verdict.legacy_overrides(args.max_probe_amnesia, args.max_stored_loss, args.max_crosstalk)
    return verdict.parse_gates(args.gate).with_overrides(overrides, ",".join(
        f"{name}={limit}" for name, limit in overrides.items()))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run = Path(args.run)
    from oracle.audit import audit_run  # after argument errors, which need no pandas
    from oracle.verdict import GateError, headline

    try:
        gates = gates_of(args)
    except GateError as exc:
        print(f"oracle audit: {exc}", file=sys.stderr)
        return 2
    try:
        summary = audit_run(run, store=store_options(args), window_s=args.window, recovery_s=args.recovery,
                            gates=gates, jobs=args.jobs)
    except (JournalError, SnapshotError, StoreError, WorkerError) as exc:
        print(f"oracle audit: {exc}", file=sys.stderr)
        return 2
    print(render(summary, run))
    print(headline(summary["verdict"]))
    return 1 if summary["verdict"]["result"] == "fail" else 0
