"""The seam between the load and the rest: chaos at the start, heal/settle/audit/exit code at the end.

Runs on the master or the local runner only (never on workers), and ``finish`` runs once.
Chaos and the oracle are imported lazily, inside the calls, so a run without ``--chaos`` or
``--store-url`` never needs them. Nothing here can lose the journal: it is on disk already,
and an audit that fails prints why and how to re-run it.

Exit codes: 0 pass; 1 a threshold breached; 2 bad input, or the target acknowledged no turn
(e.g. refused every connection); 3 the audit or report failed (journal kept; re-run
``python -m oracle audit RUN``).
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from locustfiles.journal import read_records, shards

log = logging.getLogger("goldfish")

EXIT_OK, EXIT_BREACH, EXIT_BAD, EXIT_AUDIT = 0, 1, 2, 3


def say(text: str) -> None:
    print(f"goldfish: {text}", file=sys.stderr, flush=True)


def load_chaos(settings, run_dir: str | Path):
    """Build (and validate against the backend) the chaos controller; PlanError etc. on bad input."""
    from chaos.backends import make_backend
    from chaos.controller import Controller
    from chaos.plan import load_plan

    kwargs = {}
    if settings.chaos_backend == "local":
        kwargs["state_dir"] = str(Path(settings.stack_state).parent)
    controller = Controller(load_plan(settings.chaos), make_backend(settings.chaos_backend, **kwargs), run_dir)
    controller.validate()
    return controller


class EndOfRun:
    def __init__(self, settings):
        self.settings = settings
        self.controller = None
        self.chaos_started = False
        self.chaos_stopped = False
        self.finished = False

    # ---- chaos ----------------------------------------------------------------------------
    def prepare_chaos(self) -> None:
        """At init: load and validate the plan so a bad plan stops the run before any load."""
        if self.settings.chaos:
            self.controller = load_chaos(self.settings, self.settings.run_dir)

    def start_chaos(self) -> None:
        if self.controller is not None and not self.chaos_started:
            self.chaos_started = True
            self.controller.start()
            say(f"chaos: started {self.settings.chaos} on backend {self.settings.chaos_backend}")

    def stop_chaos(self) -> None:
        if self.controller is not None and self.chaos_started and not self.chaos_stopped:
            self.chaos_stopped = True
            left = self.controller.stop(via="test_stop")
            if left:
                say(f"chaos: {len(left)} fault(s) NOT healed — run `python -m chaos heal {self.settings.run_dir}`")
            else:
                say("chaos: stopped, everything healed")

    # ---- the end --------------------------------------------------------------------------
    def finish(self) -> int:
        """Heal, settle, audit (when asked), report, and return the exit code. Once."""
        if self.finished:
            return EXIT_OK
        self.finished = True
        s = self.settings
        self.stop_chaos()
        online = online_summary(s.run_dir)
        say(f"journal: {online['turns']} turns (ok {online['ok']}, fail {online['fail']}, info {online['info']}), "
            f"probes answered {online['probes_answered']}, amnesia {online['probes_failed']}, "
            f"cross-talk replies {online['crosstalk']} — run folder {s.run_dir}")
        code = EXIT_OK
        if s.store_url and not s.no_audit:
            if s.settle > 0:
                time.sleep(s.settle)
            found, code = self.audit()
        else:
            found = online_breaches(online, s)
        for line in found:
            say(f"threshold breached: {line}")
        if found:
            code = max(code, EXIT_BREACH)
        if online["ok"] == 0:
            say("no turn was acknowledged by the target (refused, unreachable or always failing)")
            code = max(code, EXIT_BAD)
        return code

    def audit(self) -> tuple[list[str], int]:
        s = self.settings
        thresholds = {"max_probe_amnesia": s.max_probe_amnesia, "max_stored_loss": s.max_stored_loss,
                      "max_crosstalk": s.max_crosstalk}
        try:
            from oracle.audit import audit_run
            from oracle.store import StoreOptions

            store = StoreOptions(url=s.store_url, key_template=s.key_template, format=s.store_format)
            # one process: this one is gevent-patched; `python -m oracle audit RUN --jobs N` re-audits in parallel
            summary = audit_run(s.run_dir, store=store, thresholds=thresholds, jobs=1)
        except Exception as exc:  # noqa: BLE001 - the journal is safe; say how to retry
            log.exception("audit failed")
            say(f"audit FAILED: {type(exc).__name__}: {exc}. The journal is intact in {s.run_dir}/journal; "
                f"re-run with `python -m oracle audit {s.run_dir} --store-url ...`")
            return [], EXIT_AUDIT
        m = summary.get("metrics") or {}
        rate = lambda k: f"{(m.get(k) or {}).get('rate') or 0:.3%}"  # noqa: E731
        anomalies = ", ".join(f"{k} {v}" for k, v in (summary.get("anomalies") or {}).items()) or "none"
        say(f"audit: {summary.get('sessions')} sessions, probe amnesia {rate('probe_amnesia')}, stored loss "
            f"{rate('stored_loss')}, session amnesia {rate('session_amnesia')}; anomalies: {anomalies}")
        code = EXIT_OK
        try:
            from oracle.report import render

            say(f"report: {render(s.run_dir)}")
        except Exception as exc:  # noqa: BLE001
            log.exception("report failed")
            say(f"report FAILED: {type(exc).__name__}: {exc} (re-run `python -m oracle report {s.run_dir}`)")
            code = EXIT_AUDIT
        return list(summary.get("breaches") or []), code


def online_summary(run_dir: str | Path) -> dict:
    """Counts from the journal itself (complete on the master/local runner by now)."""
    c = {"turns": 0, "ok": 0, "fail": 0, "info": 0, "probes_answered": 0, "probes_failed": 0, "crosstalk": 0,
         "crosstalk_sessions": 0}
    sessions: set[str] = set()
    for shard in shards(run_dir):
        for r in read_records(shard):
            c["turns"] += 1
            c[r.get("outcome", "info")] = c.get(r.get("outcome", "info"), 0) + 1
            if r.get("verdict") is not None:
                c["probes_answered"] += 1
                c["probes_failed"] += r["verdict"] == "amnesia"
            if r.get("crosstalk"):
                c["crosstalk"] += 1
                sessions.add(r["session"])
    c["crosstalk_sessions"] = len(sessions)
    return c


def online_breaches(c: dict, settings) -> list[str]:
    """Thresholds on the online judgement when no audit ran: any amnesia or cross-talk breaches
    the defaults (probe amnesia 0 unless --max-probe-amnesia, cross-talk 0 unless --max-crosstalk)."""
    found = []
    limit = settings.max_probe_amnesia if settings.max_probe_amnesia is not None else 0.0
    if c["probes_answered"]:
        rate = c["probes_failed"] / c["probes_answered"]
        if rate > limit:
            found.append(f"probe amnesia (online): {rate:.4%} ({c['probes_failed']}/{c['probes_answered']}) "
                         f"> max {limit:.4%}")
    if c["crosstalk_sessions"] > settings.max_crosstalk:
        found.append(f"crosstalk (online): {c['crosstalk_sessions']} session(s) with cross-talk "
                     f"> max {settings.max_crosstalk:g}")
    return found
