"""The oracle: reads stored histories back and judges them against the journal (Jepsen's checker).

The public entry other parts call (the Locust end-of-run seam, scripts); ``python -m oracle``
is the command line. Names load lazily, so importing the package costs nothing until used:

    audit_run(run_dir, store, gates=...)   audit a run folder -> summary (with its verdict)
    journal_verdict(run_dir, gates)        the verdict from the journal alone (no store read)
    render_report(run_dir) -> Path         report.html and its charts
    add_store_options / add_gate_options   the audit's options, for any parser (Locust's too)
    NotEmpty                               an argparse action refusing an empty value (an unset variable)
    store_options(values) / gates(values)  those options parsed
    reach_store(options)                   reach the store they name now (before a run's load)
    headline, rule_line, verdict_word      the verdict in words (verdict_word: PASS, FAIL or NOTHING MEASURED)
    load_faults(run_dir, problems)         chaos.jsonl paired into faults, as the audit pairs them
    ttl_floor(client, template, cursor)    a lower bound of the TTL keys under the template get (the telemetry looks)
    template_ttls(...), floor_of(bounds)   those bounds by the id in each key's name, and their floor
    info_refused(exc), info_refused_text   the store refused INFO (an ACL user without +info), and that in words
    NOTHING_ACKNOWLEDGED                   the failed rule of a run the target acknowledged nothing of
    verdict_exit_code(verdict)             0 pass, 1 a gate failed, 2 nothing to judge (README "Exit codes")
    misread_replies(run)                   why a FAIL is NOT TRUSTED: WebSocket replies that came in several frames
    untrusted(code, run, v)                why a verdict's exit code is NOT TRUSTED (misread replies, a run cut short)
    audit_option_names()                   the audit's options' attribute names
    AuditOptionError, JournalError, NoJournalRecords, TimelineError, TemplateMismatch, StoreOptions, Gates,
    StoreError, SnapshotError
    FOLLOW_ENV                             how `python -m oracle follow` (the rolling audit) gets its store
"""
from __future__ import annotations

import importlib

_WHERE = {
    "audit_run": ("oracle.audit", "audit_run"), "journal_verdict": ("oracle.audit", "journal_verdict"),
    "render_report": ("oracle.report", "render"),
    "add_store_options": ("oracle.options", "add_store_options"),
    "add_gate_options": ("oracle.options", "add_gate_options"),
    "store_options": ("oracle.options", "store_options"), "gates": ("oracle.options", "gates"),
    "reach_store": ("oracle.options", "reach_store"),
    "audit_option_names": ("oracle.options", "option_names"),
    "AuditOptionError": ("oracle.options", "OptionError"), "NotEmpty": ("oracle.options", "NotEmpty"),
    "headline": ("oracle.verdict", "headline"), "verdict_word": ("oracle.verdict", "word"), "rule_line": ("oracle.verdict", "rule_line"),
    "NOTHING_ACKNOWLEDGED": ("oracle.verdict", "NOTHING_ACKNOWLEDGED"),
    "verdict_exit_code": ("oracle.verdict", "exit_code"), "misread_replies": ("oracle.verdict", "misread_replies"),
    "untrusted": ("oracle.verdict", "untrusted"),
    "JournalError": ("oracle.history", "JournalError"),
    "NoJournalRecords": ("oracle.history", "NoRecords"), "TimelineError": ("oracle.timeline", "TimelineError"),
    "TemplateMismatch": ("oracle.keys", "TemplateMismatch"), "ttl_floor": ("oracle.keys", "ttl_floor"),
    "template_ttls": ("oracle.keys", "template_ttls"), "floor_of": ("oracle.keys", "floor_of"),
    "info_refused": ("oracle.keys", "info_refused"), "info_refused_text": ("oracle.keys", "info_refused_text"),
    "StoreOptions": ("oracle.store", "StoreOptions"), "Gates": ("oracle.verdict", "Gates"),
    "StoreError": ("oracle.store", "StoreError"), "SnapshotError": ("oracle.snapshot", "SnapshotError"),
    "FOLLOW_ENV": ("oracle.follow", "ENV"), "load_faults": ("oracle.timeline", "load_faults"),
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'oracle' has no attribute {name!r}")
    module, attr = _WHERE[name]
    return getattr(importlib.import_module(module), attr)
