"""The seam between the load and the rest: chaos at the start; heal, settle, audit, report and the
verdict's exit code at the end.

Runs on the master or the local runner only (never on workers). Chaos and the oracle are imported
lazily, inside the calls, so a run without ``--chaos`` never needs chaos. Nothing here can lose
the journal: it is on disk already, and an audit that fails or is interrupted says how to finish it.

Phases: ``load`` -> ``heal`` (chaos recovers everything; at test_stop or at the end) -> ``settle``
-> ``audit`` -> ``report`` -> ``done``; the phase in progress is written to run.json, so even a
SIGKILLed run says where it stopped. Signals (docs/locust.md "Stopping a run"):
- the first Ctrl-C or SIGTERM during the load stops it as Locust does, and the run is audited;
- any signal during the heal waits until every fault is recovered (a recovery is never cut short);
- a signal during settle, audit or report stops there: run.json records ``interrupted`` (signal,
  phase, the command that finishes the job) and the exit code is 130 (SIGINT) or 143 (SIGTERM),
  never 0.

Exit codes (one table for goldfish, docs/locust.md "Exit codes"): 0 every gate held; 1 a gate
failed; 2 bad input (options, plan, script, an unreachable target, a key template that matches
nothing); 3 the audit or report failed; 130/143 interrupted. Locust's own exit code (another
listener's ``process_exit_code``, ``--exit-code-on-error``) is combined, never masked: goldfish's
code when it is not 0, else Locust's.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gevent
from gevent.event import Event

from contracts import codec, redact
from locustfiles import runfolder

log = logging.getLogger("goldfish")

EXIT_OK, EXIT_GATE, EXIT_BAD, EXIT_AUDIT = 0, 1, 2, 3
EXIT_SIGNAL = {"SIGINT": 130, "SIGTERM": 143}
LOAD, HEAL, SETTLE, AUDIT, REPORT, DONE = "load", "heal", "settle", "audit", "report", "done"


def say(text: str) -> None:
    print(f"goldfish: {redact.text(text)}", file=sys.stderr, flush=True)


def load_chaos(settings, run_dir: str | Path):
    """Build (and validate against the backend) the chaos controller; PlanError etc. on bad input."""
    from chaos.backends import make_backend
    from chaos.backends.local import stack_options
    from chaos.controller import Controller
    from chaos.plan import load_plan

    kwargs = {}
    if settings.chaos_backend == "local":   # --stack-state: a stack's state.json or a targets file
        kwargs = stack_options(settings.stack_state)
    controller = Controller(load_plan(settings.chaos), make_backend(settings.chaos_backend, **kwargs), run_dir)
    controller.validate()
    return controller


def locust_exit_code(environment) -> tuple[int, str]:
    """What Locust itself would exit with (locust/main.py ``shutdown``) before goldfish's verdict, and why."""
    from locust import log as locust_log

    runner, options = environment.runner, environment.parsed_options
    if environment.process_exit_code is not None:
        return int(environment.process_exit_code), "another listener set it"
    if runner is not None and (len(runner.errors) or len(runner.exceptions)):
        return int(getattr(options, "exit_code_on_error", 1)), "requests failed and --exit-code-on-error is set"
    if getattr(locust_log, "unhandled_greenlet_exception", False):
        return 2, "an unhandled greenlet exception"
    return 0, ""


def combine(goldfish: int, locust: int) -> int:
    """Goldfish's code when it has one, else Locust's: neither masks the other's failure."""
    return goldfish if goldfish != EXIT_OK else locust


class EndOfRun:
    def __init__(self, settings):
        self.settings = settings
        self.controller = None
        self.chaos_started = False
        self.chaos_stopped = False
        self.phase = LOAD
        self.quitting = False   # Locust's shutdown has begun
        self.heal_done = False  # chaos is healed (or there was none) at the end of the run
        self.verdict: str | None = None  # "pass" / "fail" once judged
        self.code: int | None = None  # goldfish's, once finished (or interrupted)
        self.final: int | None = None  # combined with Locust's (locustfiles/hooks.py)
        self.pending: tuple[str, str] | None = None  # (signal, phase) that arrived before the heal was done
        self.heal_event = Event()  # clear while a heal runs
        self.heal_event.set()
        self.main = gevent.get_hub().parent  # the greenlet Locust's Ctrl-C lands in
        self._previous_sigint = None
        self.follower: subprocess.Popen | None = None  # the rolling audit (--audit-every)

    # ---- signals ----------------------------------------------------------------------------
    def guard_signals(self) -> None:
        """Take SIGINT (master / local runner, main thread): Ctrl-C reaches Locust's main greenlet
        as before, but never lands inside a chaos recovery greenlet, and means "stop here" after the load."""
        try:
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:  # not the main thread (a library user): leave signals alone
            self._previous_sigint = None

    def _on_sigint(self, _signum, _frame) -> None:
        self.on_signal("SIGINT")

    def on_signal(self, name: str) -> None:
        """A signal: stop the load (as Locust would), wait for the heal, or stop the audit here."""
        if self.phase == HEAL or (self.quitting and not self.heal_done):
            if not self.pending:
                self.pending = (name, self.phase if self.phase != LOAD else HEAL)
                say(f"{name}: waiting until every chaos fault is recovered (a recovery is never cut short)")
        elif self.quitting or self.phase in (SETTLE, AUDIT, REPORT):
            self._throw(SystemExit(self.interrupt(name)))
        elif self.phase == LOAD:
            self._throw(KeyboardInterrupt())  # Locust's own Ctrl-C: stop the load, then finish

    def _throw(self, exc: BaseException) -> None:
        if gevent.getcurrent() is self.main:
            raise exc
        gevent.get_hub().loop.run_callback(self.main.throw, exc)

    def interrupt(self, name: str, phase: str | None = None) -> int:
        """Record that ``name`` stopped the run in ``phase`` (default: the current one); the exit code."""
        if self.phase == DONE and self.code is not None:
            return self.code
        if self.code is None or self.code < 128:
            s = self.settings
            phase = phase or self.phase
            resume = f"python -m oracle audit {s.run_dir}" + (" --store-url URL" if s.store else "")
            self.code = EXIT_SIGNAL.get(name, 143)
            runfolder.end_run(s.run_dir, exit_code=self.code, phase=phase, interrupted={
                "signal": name, "phase": phase, "time": time.time(),
                "finish_with": f"{resume} (it reads the store again: run it while the store still holds this run)"})
            say(f"{name} during {phase}: stopped with exit code {self.code}, no verdict. The journal is intact; "
                f"finish the audit with `{resume}`")
        return self.code

    def again(self) -> int:
        """Locust's shutdown called a second time: by a second SIGTERM while finishing (wait for the heal,
        then stop there: 143), or by Locust itself once everything is done (the final code)."""
        self.heal_event.wait()
        if self.phase == DONE:
            return self.final if self.final is not None else self.code
        return self.interrupt("SIGTERM")

    # ---- chaos ------------------------------------------------------------------------------
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
        """Heal everything; signals that arrive meanwhile wait for it (``on_signal``)."""
        if self.controller is None or not self.chaos_started or self.chaos_stopped:
            return
        self.chaos_stopped = True
        before, self.phase = self.phase, HEAL
        self.heal_event.clear()
        try:
            left = self.controller.stop(via="test_stop")
        finally:
            self.phase = before
            self.heal_event.set()
        if left:
            say(f"chaos: {len(left)} fault(s) NOT healed — run `python -m chaos heal {self.settings.run_dir}`")
        else:
            say("chaos: stopped, everything healed")
        if self.pending and not self.quitting:  # a Ctrl-C during a heal at test_stop: stop as Locust would
            name, self.pending = self.pending[0], None
            self.on_signal(name)

    # ---- the rolling audit ------------------------------------------------------------------
    def start_follower(self) -> None:
        """``--audit-every``: the rolling audit in its own process (oracle/follow.py), never in this one's
        event loop. It needs a Redis store (the final audit re-checks its sessions by key digests)."""
        s = self.settings
        if s.audit_every <= 0 or self.follower is not None or s.store is None or s.no_audit:
            return
        if s.store.name() != "redis":
            say("--audit-every needs a Redis store (--store-url): no rolling audit")
            return
        from oracle import FOLLOW_ENV

        log_file = open(Path(s.run_dir) / "follow.log", "ab")
        env = {**os.environ, FOLLOW_ENV: codec.dumps({k: v for k, v in s.store.__dict__.items()
                                                      if k != "on_batch"}).decode()}
        self.follower = subprocess.Popen(
            [sys.executable, "-m", "oracle", "follow", str(s.run_dir), "--every", str(s.audit_every),
             "--settle", str(s.settle)], env=env, stdout=log_file, stderr=log_file, start_new_session=True)
        say(f"rolling audit: every {s.audit_every:g}s (pid {self.follower.pid}, progress in "
            f"{Path(s.run_dir) / 'audit' / 'rolling' / 'progress.json'})")

    def stop_follower(self, timeout: float = 120.0) -> None:
        """Let the rolling audit finish the batch in hand and stop (bounded), before the final audit."""
        if self.follower is None:
            return
        follower, self.follower = self.follower, None
        if follower.poll() is None:
            follower.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while follower.poll() is None and time.monotonic() < deadline:
            gevent.sleep(0.1)
        if follower.poll() is None:
            follower.kill()
            say("rolling audit did not stop in time: killed; the final audit judges what it had not")

    # ---- the end ----------------------------------------------------------------------------
    def begin(self) -> bool:
        """Locust is quitting (at its shutdown): True the first time, False when it calls again."""
        if self.quitting:
            return False
        self.quitting = True
        return True

    def finish(self) -> int:
        """Heal, settle, audit (when a store is given), report; returns goldfish's exit code."""
        self.heal_event.wait()  # a heal that test_stop started ends first
        self.stop_chaos()
        self.heal_done = True
        self.heal_event.set()
        if self.pending:  # a signal came while healing: now stop here
            name, phase = self.pending
            raise SystemExit(self.interrupt(name, phase))
        self.code = self._finish()
        self._enter(DONE)
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
        return self.code

    def _enter(self, phase: str) -> None:
        self.phase = phase
        if phase != DONE:
            runfolder.update_run(self.settings.run_dir, phase=phase)

    def _finish(self) -> int:
        s = self.settings
        from oracle import JournalError, headline, journal_verdict

        self._enter(SETTLE)  # the store settles while the journal is read
        started = time.monotonic()
        try:
            online = journal_verdict(s.run_dir, s.gates)
        except JournalError:
            say(f"no turn was journaled in {s.run_dir}: nothing to judge")
            return EXIT_BAD
        t = online["turns"]
        say(f"journal: {t['total']} turns (ok {t['ok']}, refused {t['fail']}, indeterminate {t['info']}), probes "
            f"answered {t['probes_answered']}, amnesia {t['probes_failed']}, cross-talk replies {t['crosstalk_replies']}"
            f" — run folder {s.run_dir}")
        if t["ok"] == 0:
            say("no turn was acknowledged by the target (refused, unreachable or always failing)")
            return EXIT_BAD
        if s.store is None or s.no_audit:
            self._say_verdict(online["verdict"], "online, from the journal: the store was not audited")
            self.verdict = online["verdict"]["result"]
            return EXIT_GATE if self.verdict == "fail" else EXIT_OK
        gevent.sleep(max(0.0, s.settle - (time.monotonic() - started)))
        self.stop_follower()
        self._enter(AUDIT)
        code, summary = self.audit()
        if summary is None:
            return code
        self._enter(REPORT)
        try:
            from oracle import render_report

            say(f"report: {render_report(s.run_dir)}")
        except Exception as exc:  # noqa: BLE001
            log.exception("report failed")
            say(f"report FAILED: {type(exc).__name__}: {exc} (re-run `python -m oracle report {s.run_dir}`)")
            code = EXIT_AUDIT
        self._say_verdict(summary["verdict"], f"gates {summary['verdict']['gates']}")
        self.verdict = summary["verdict"]["result"]
        say(headline(summary["verdict"]))
        if code == EXIT_OK and summary["verdict"]["result"] == "fail":
            code = EXIT_GATE
        return code

    def audit(self) -> tuple[int, dict | None]:
        s = self.settings
        from oracle import TemplateMismatch, audit_run

        try:
            # one process: this one is gevent-patched; `python -m oracle audit RUN --jobs N` re-audits in parallel
            summary = audit_run(s.run_dir, store=s.store, gates=s.gates, jobs=1)
        except TemplateMismatch as exc:
            say(f"error: {exc}")
            return EXIT_BAD, None
        except Exception as exc:  # noqa: BLE001 - the journal is safe; say how to retry
            log.exception("audit failed")
            say(f"audit FAILED: {type(exc).__name__}: {exc}. The journal is intact in {s.run_dir}/journal; "
                f"re-run with `python -m oracle audit {s.run_dir} --store-url ...`")
            return EXIT_AUDIT, None
        m = summary.get("metrics") or {}
        rate = lambda k: f"{(m.get(k) or {}).get('rate') or 0:.3%}"  # noqa: E731
        anomalies = ", ".join(f"{k} {v}" for k, v in (summary.get("anomalies") or {}).items()) or "none"
        say(f"audit: {summary.get('sessions')} sessions, probe amnesia {rate('probe_amnesia')}, stored loss "
            f"{rate('stored_loss')}, session amnesia {rate('session_amnesia')}; anomalies: {anomalies}")
        return EXIT_OK, summary

    @staticmethod
    def _say_verdict(v: dict, where: str) -> None:
        from oracle import rule_line

        say(f"verdict {v['result'].upper()} ({where}):")
        for rule in v["rules"]:
            if rule["result"] in ("pass", "fail"):
                say(f"  {rule['result'].upper():<5} {rule_line(rule)}")
