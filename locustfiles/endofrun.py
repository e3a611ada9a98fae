"""The seam between the load and the rest, once per test: at each test start a new run folder, the chaos plan
armed from its beginning and a fresh journal; at each test stop heal, settle, audit, report and the verdict.
One process may hold several tests (the web UI's start, stop, start again): each gets its own run folder.

Runs on the master or the local runner only (never on workers). Chaos and the oracle are imported
lazily, inside the calls, so a run without ``--chaos`` never needs chaos. Nothing here can lose
the journal: it is on disk already, and an audit that fails or is interrupted says how to finish it.

Phases of a run: ``load`` -> ``heal`` (chaos recovers everything) -> ``settle`` -> ``audit`` -> ``report``
-> ``done``, all at its stop; the phase in progress is written to its run.json, so even a SIGKILLed run
says where it stopped. Signals (docs/locust.md "Stopping a run"):
- a Ctrl-C or SIGTERM during the load, or with no test running, is Locust's own: the load stops, the test
  is healed, audited and judged as at any stop, and Locust quits;
- any signal during a heal waits until every fault is recovered (a recovery is never cut short); if it
  was the first (a web-UI stop was healing), the test is then finished and Locust quits;
- a signal during settle, audit or report, or a second one while stopping, stops there: run.json records
  ``interrupted`` (signal, phase, the command that finishes the job) and the exit code is 130 (SIGINT)
  or 143 (SIGTERM), never 0: that of the signal that stopped the run after its load (of two during the
  load, the second as taken: Locust takes SIGTERM at the event loop's next turn, so a Ctrl-C a millisecond
  after a SIGTERM may be taken first); Locust's own quit after the load, with no signal (a master's "The last
  worker quit": workers leave a master busy in its audit), is no signal: the run finishes with its verdict;
- a SIGHUP (the terminal closed: an ssh session that dropped under a soak) is a SIGTERM, with what is printed
  from then on in the run folder's ``hangup.log``: the terminal's writes would fail, and the heal with them.
  Recorded as SIGHUP, exit code 129 where a SIGTERM's would be 143.
A stop runs in whichever greenlet stops the load: a SIGTERM's is Locust's own (its ``shutdown`` in a new
greenlet each time), and whatever escapes that greenlet gevent throws into the main one, so nothing here
raises out of it; the first shutdown ends the process, a second one waits for it (``again``).

Exit codes of one run (one table for goldfish, docs/locust.md "Exit codes"): 0 every gate held; 1 a gate
failed; 2 bad input (options, plan, script, an unreachable target, a key template that matches nothing);
3 the audit or report failed (a FAIL whose report alone failed stays 1: the finding stands), or a Locust user
raised an exception (its conversation was cut short unjudged), or a FAIL of a WebSocket bot whose replies came in
several frames (``distrust``: NOT TRUSTED);
130/143 (129: SIGHUP) interrupted. Locust's own exit code (another listener's
``process_exit_code``, ``--exit-code-on-error``) is combined, never masked: goldfish's code when it is not
0, else Locust's. The process's exit code over its runs: 130/143 when a signal stopped a run after its
load; else the first run's non-zero code, in start order (a failed run is never masked by a later pass);
else Locust's own at quitting; 0 when no test ran.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import gevent
from gevent.event import Event

from contracts import codec, redact
from contracts.runfolder import RunFolder, detach_output
from locustfiles import live, locust_output, runfolder
from locustfiles.options import default_run_dir

log = logging.getLogger("goldfish")

EXIT_OK, EXIT_GATE, EXIT_BAD, EXIT_AUDIT = 0, 1, 2, 3
EXIT_SIGNAL = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}
WARNINGS_SHOWN = 5  # the audit's warnings said at the end of a run (the rest are in audit/summary.json)
SETTLE_SAID_S = 10.0  # a settle this long is announced
IDLE, LOAD, HEAL, SETTLE, AUDIT, REPORT, DONE = "idle", "load", "heal", "settle", "audit", "report", "done"
FINISHING = (SETTLE, AUDIT, REPORT)


def say(text: str) -> None:
    """A line on stderr. One that cannot be written (its pipe closed: `2>&1 | head`, a log collector gone; a
    full disk) is dropped: raised inside Locust's event hooks, it skipped the journal or the verdict, and the
    run exited 0. The run folder keeps the record."""
    try:
        print(f"goldfish: {redact.text(text)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # ValueError: stderr closed
        pass


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


def chaos_elsewhere(settings, host: str | None) -> str | None:
    """A warning when the local stack chaos acts on (--stack-state) is not the one this run tests."""
    if not settings.chaos or settings.chaos_backend != "local":
        return None
    from chaos.backends.local import stack_elsewhere

    return stack_elsewhere(settings.stack_state, host, settings.store.url if settings.store else None)


def check_chaos(settings) -> None:
    """Validate the plan against its backend without touching any run folder (a scratch one)."""
    import tempfile

    if settings.chaos:
        with tempfile.TemporaryDirectory(prefix="goldfish-plan-") as scratch:
            load_chaos(settings, scratch)


def counters(environment) -> tuple[dict, dict]:
    """This test's failed requests and user exceptions, as Locust keeps them: the dicts themselves. A test
    started from the web UI replaces them (runner.start) before its test_start waits for this one's stop to
    finish, so the stop holds on to these, which later reports of this test's workers still fill."""
    runner = environment.runner
    return (runner.errors, runner.exceptions) if runner is not None else ({}, {})


def missing_workers(environment) -> frozenset:
    """The ids of the master's workers Locust holds as missing (none elsewhere)."""
    clients = getattr(environment.runner, "clients", None)
    return frozenset(worker.id for worker in clients.missing) if clients is not None else frozenset()


def workers_lost(environment, before: frozenset = frozenset()) -> dict | None:
    """Locust workers that went missing during this test (a master's, at its stop; ``before``: those missing at its
    start, which Locust keeps as missing: a worker lost in the web UI's first test made every later one NOT TRUSTED,
    verdict hunt 15): how many, and whether all did, which stopped the test early with its conversations cut short."""
    clients = getattr(environment.runner, "clients", None)
    if clients is None:
        return None
    lost = len(missing_workers(environment) - before)
    return {"count": lost, "all": len(clients.missing) == len(clients)} if lost else None


def user_exceptions(environment, seen: tuple[dict, dict] | None = None, reset: dict | None = None) -> dict | None:
    """Exceptions Locust's users raised in this test (on the master: its workers' too): how many, and the first.
    ``reset``: those a Reset Stats took from Locust's dict (``keep_reset_exceptions``)."""
    exceptions = [*(reset or {}).values(), *(seen or counters(environment))[1].values()]
    if not exceptions:
        return None
    return {"count": sum(e.get("count", 1) for e in exceptions), "first": str(exceptions[0].get("msg", ""))[:200]}


def keep_reset_exceptions(run, environment) -> None:
    """At the web UI's Reset Stats, which empties Locust's dict of user exceptions: keep this test's, added up. A
    test whose users raised, reset once after ramp-up as people do, PASSed with exit 0 (verdict hunt 16)."""
    runner = environment.runner
    if run is None or run.phase != LOAD or runner is None:
        return
    for key, e in runner.exceptions.items():
        kept = run.exceptions_reset.get(key)
        run.exceptions_reset[key] = {**e, "count": e.get("count", 1) + (kept.get("count", 1) if kept else 0)}


def streamed_replies(environment) -> dict | None:
    """Turns of this test after whose reply the WebSocket bot sent another frame holding a reply
    (locustfiles/socket_turns.py; on the master its workers', from their stats reports: live.py): how many, and
    the first such frame. None when none came."""
    counts = getattr(getattr(environment, "goldfish", None), "live", None)
    return counts.streamed_replies() if counts is not None else None


def distrust(run, record: dict, code: int) -> int:
    """The run's code once weighed against how the test went (``record``: run.json's fields that say so,
    oracle.verdict.untrusted): a FAIL of a bot whose replies came in several frames, or a PASS (or nothing measured)
    of a test whose Locust users raised or whose workers went missing, is NOT TRUSTED, 3, said beside the verdict
    and recorded in run.json (``untrusted``); any other code as it is. The terminal said "verdict PASS" and "exit
    code 3: Locust's own", and run.json "pass" beside exit code 3, of a test that lost its workers (verdict hunt 14)."""
    from oracle import untrusted

    why = untrusted(code, {k: v for k, v in record.items() if v is not None}, run.verdict) \
        if code in (EXIT_OK, EXIT_GATE, EXIT_BAD) else None
    if why is None:
        return code
    run.untrusted = why
    say(f"NOT TRUSTED — {why}")
    return EXIT_AUDIT


def _reserved(path: str) -> bool:
    """Create the run folder ``path`` unless it exists (atomically: two CI jobs starting the same second without
    --run-dir compute the same default name, and the second got "--run-dir ... already holds a run", exit 2, for an
    option nobody gave). False when it exists; True when it was made, or cannot be (start_run says why)."""
    try:
        Path(path).mkdir(parents=True)
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


def locust_exit_code(environment, seen: tuple[dict, dict] | None = None, reset: dict | None = None) -> tuple[int, str]:
    """What Locust itself would exit with (locust/main.py ``shutdown``) before goldfish's verdict, and why."""
    from locust import log as locust_log

    options = environment.parsed_options
    errors, exceptions = seen or counters(environment)
    if environment.process_exit_code is not None:
        return int(environment.process_exit_code), "another listener set it"
    raised = user_exceptions(environment, (errors, exceptions), reset)
    if raised:  # a bug in the users' code: conversations were cut short unjudged
        return EXIT_AUDIT, (f"{raised['count']} exception(s) in Locust users cut conversations short, so the verdict "
                            f"cannot be trusted (first: {raised['first']}; Locust's exception report has the tracebacks)")
    if len(errors) or len(exceptions):
        return int(getattr(options, "exit_code_on_error", 1)), "requests failed and --exit-code-on-error is set"
    if getattr(locust_log, "unhandled_greenlet_exception", False):
        return 2, "an unhandled greenlet exception"
    return 0, ""


def store_arguments(store) -> str:
    """The options of ``oracle audit`` that read the store this run was audited from (a Redis URL stays URL:
    it may hold a password)."""
    if store is None:
        return ""
    if store.http_url or store.reader:
        where = f" --http-url {shlex.quote(redact.url(store.http_url))}" if store.http_url else \
            f" --reader {shlex.quote(store.reader)}"
        where += "".join(f" --http-header {shlex.quote(f'{name}: {redact.MASK}')}" for name, _ in store.http_headers)
    else:
        where = " --store-url URL"
    defaults = type(store)()
    if store.given_template() != defaults.key_template:
        where += f" --key-template {shlex.quote(store.given_template())}"
    for option, field in (("--store-format", "format"), ("--direction", "direction"), ("--role-field", "role_field"),
                          ("--content-field", "content_field"), ("--messages-field", "messages_field")):
        if getattr(store, field) != getattr(defaults, field):
            where += f" {option} {shlex.quote(str(getattr(store, field)))}"
    for option, field in (("--user-role", "user_roles"), ("--assistant-role", "assistant_roles")):
        if getattr(store, field) != getattr(defaults, field):
            where += "".join(f" {option} {shlex.quote(role)}" for role in getattr(store, field))
    return where


def combine(goldfish: int, locust: int) -> int:
    """Goldfish's code when it has one, else Locust's: neither masks the other's failure. A run that measured
    nothing (2) because it was cut short (Locust's 3: users raised, every worker went missing) is 3: not trusted."""
    if goldfish == EXIT_BAD and locust == EXIT_AUDIT:
        return EXIT_AUDIT
    return goldfish if goldfish != EXIT_OK else locust


def start_follower(s) -> subprocess.Popen | None:
    """``--audit-every``: the rolling audit of this run in its own process (oracle/follow.py), never in this
    one's event loop. It needs a Redis store (the final audit re-checks its sessions by key digests)."""
    if s.audit_every <= 0 or s.store is None or s.no_audit:
        return None
    if s.store.name() != "redis":
        say("--audit-every needs a Redis store (--store-url): no rolling audit")
        return None
    from oracle import FOLLOW_ENV

    env = {**os.environ, FOLLOW_ENV: codec.dumps({k: v for k, v in s.store.__dict__.items()
                                                  if k != "on_batch"}).decode()}
    # an OSError here (follow.log a directory in a folder made beforehand, no permission): begin_run stops the test
    with open(Path(s.run_dir) / "follow.log", "ab") as log_file:
        follower = subprocess.Popen(
            [sys.executable, "-m", "oracle", "follow", str(s.run_dir), "--every", str(s.audit_every),
             "--settle", str(s.settle)], env=env, stdout=log_file, stderr=log_file, start_new_session=True)
    say(f"rolling audit: every {s.audit_every:g}s (pid {follower.pid}, progress in "
        f"{RunFolder(s.run_dir).rolling_progress})")
    return follower


FOLLOWER_STOP_S = 30.0  # how long the rolling audit may take to finish its batch in hand once told to stop


def stop_follower(run, timeout: float = FOLLOWER_STOP_S) -> None:
    """Let the rolling audit finish the batch in hand and stop, before the final audit: SIGTERM, then at most
    ``timeout`` seconds (said after a few), then SIGKILL to its process group, said with its pid.

    Why: a follower that never exits (frozen: SIGSTOP, a dead NFS mount, a debugger) held the run in settle
    without a word until a CI timeout killed it."""
    follower, run.follower = run.follower, None
    if follower is None:
        return
    if follower.poll() is not None:  # it ended before the load did: its progress stopped then (soak hunt 18)
        if follower.returncode != 0:
            how = f"signal {-follower.returncode}" if follower.returncode < 0 else f"exit {follower.returncode}"
            say(f"the rolling audit (pid {follower.pid}) ended during the run by {how} (see "
                f"{Path(run.run_dir) / 'follow.log'}): its progress stopped then; the final audit judges the "
                "conversations it had not")
        return
    follower.send_signal(signal.SIGTERM)
    started = time.monotonic()
    told = False
    while follower.poll() is None and time.monotonic() - started < timeout:
        if not told and time.monotonic() - started >= 3:
            told = True
            say(f"waiting for the rolling audit (pid {follower.pid}) to finish its batch and stop (at most "
                f"{timeout:g}s, then it is killed)")
        gevent.sleep(0.1)
    if follower.poll() is None:
        try:
            os.killpg(follower.pid, signal.SIGKILL)  # its own session: whatever it started goes too
        except OSError:
            follower.kill()
        for _ in range(50):  # reaped, so no zombie stays behind (SIGKILL ends even a stopped process)
            if follower.poll() is not None:
                break
            gevent.sleep(0.1)
        say(f"the rolling audit (pid {follower.pid}) did not stop within {timeout:g}s of SIGTERM (stopped or stuck: "
            f"see {Path(run.run_dir) / 'follow.log'}): killed; the final audit judges the conversations it had not")


def print_greenlets(_signum=None, _frame=None) -> None:
    """SIGUSR2: print every greenlet's stack to stderr, for a run that seems stuck (a thread dump or py-spy
    shows only the greenlet that happens to run). A dump that fails is said, and the run goes on: the handler runs
    inside whatever the main greenlet was doing, which an exception from it would have ended."""
    from gevent.util import print_run_info

    say("SIGUSR2: every greenlet and thread, with its stack:")
    try:
        print_run_info(file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - a diagnostic never stops the run
        say(f"SIGUSR2: the dump stopped part way: {type(exc).__name__}: {exc}")


def record(run: Run, end: bool = False, **fields) -> None:
    """Update the run's run.json; one that cannot be written (a full disk) is said once and the run goes on, so
    its end is still said with one exit code (it used to raise out of the stop: no verdict, exit code None)."""
    try:
        (runfolder.end_run if end else runfolder.update_run)(run.run_dir, **fields)
    except OSError as exc:
        if not run.unrecorded:
            run.unrecorded = True
            say(f"cannot update {RunFolder(run.run_dir).run_json}: {exc.strerror or exc}: it does not record the "
                "rest of this run (its phase, verdict and exit code are said here)")


class Stopped(Exception):
    """A signal interrupted this run after its load (recorded in run.json); its remaining phases are skipped."""


class Run:
    """One test: its settings (its own run folder), its chaos controller, the phase it is in, its verdict."""

    def __init__(self, settings, controller=None, bad: str | None = None):
        self.settings = settings
        self.controller = controller
        self.bad = bad  # bad input found at its start (the load is stopped at once)
        self.phase = LOAD
        self.started, self.ended = time.time(), None
        self.verdict: dict | None = None  # the verdict (result, gates, rules, ...) once judged
        self.code: int | None = None      # goldfish's exit code
        self.final: int | None = None     # combined with Locust's own for this run
        self.interrupted: str | None = None  # the signal that stopped it after its load
        self.report: Path | None = None
        self.follower: subprocess.Popen | None = None  # the rolling audit (--audit-every)
        self.warnings: list[str] = []  # said at its start, and again with its verdict
        self.journal_error: str | None = None  # a journal line could not be written during the load: stopped
        self.unrecorded = False  # run.json could not be updated (said once)
        self.untrusted: str | None = None  # why its verdict is NOT TRUSTED (``distrust``)
        self.report_failed: str | None = None  # why report.html could not be written (the store was judged)
        self.audited: dict | None = None  # the audit's verdict, once it finished (the report is drawn after it)
        self.verdict_kept = False  # a signal came once the audit had finished: run.json records its verdict
        self.workers_missing_before: frozenset = frozenset()  # a master's workers already missing at its start
        self.exceptions_reset: dict = {}  # its users' exceptions that the web UI's Reset Stats took from Locust's dict
        self.holding = None  # the lock that says it goes on (RunFolder.hold_running), let go at its end
        self.load: dict | None = None  # the load Locust was asked for (run.json's), with later user counts

    @property
    def run_dir(self) -> str:
        return self.settings.run_dir

    @property
    def result(self) -> str | None:
        return self.verdict["result"] if self.verdict else None


class EndOfRun:
    """The master's (or local runner's) runs, one per test, and what a signal means at each moment."""

    def __init__(self, settings, run_dir_option: str = ""):
        self.settings = settings  # the options the next test starts with (the web UI may edit them)
        self.run_dir_option = run_dir_option  # --run-dir as given: the first test's folder
        self.runs: list[Run] = []
        self.quitting = False   # Locust's shutdown has begun
        self.stopping = False   # a signal asked Locust to stop the load
        self.pending: tuple[str, str] | None = None  # (signal, phase): stop there once the heal is done
        self.quit_after: str | None = None  # a first signal during a heal: finish the run, then quit
        self.code: int | None = None  # 130/143 once a signal stopped a run after its load
        self.final_code: int | None = None  # the process's, once Locust quits
        self.heal_event = Event()  # clear while a heal runs
        self.heal_event.set()
        self.idle = Event()  # clear from a test's start until its stop has finished
        self.idle.set()
        self.main = gevent.get_hub().parent  # the greenlet Locust's Ctrl-C lands in
        self._previous_sigint = None
        self.hung_up = False  # a SIGHUP came: the SIGTERM that follows is recorded as it
        self.sigterm_seen = False  # a SIGTERM came (seen before Locust's own handler takes it: guard_signals)
        self.early_for = None  # the run whose stopped_early is recorded
        self.stdin_was_terminal = False
        self.stand_in: int | None = None  # the pseudo-terminal that replaced a closed one on fd 0 (kept open)
        self.told = False  # the closing summary lines were printed
        self.after_heal = lambda: None  # hooks.py: what ends with the heal (the store telemetry)

    @property
    def run(self) -> Run | None:
        return self.runs[-1] if self.runs else None

    @property
    def phase(self) -> str:
        run = self.run
        return IDLE if run is None or run.phase == DONE else run.phase

    # ---- signals ----------------------------------------------------------------------------
    def guard_signals(self) -> None:
        """Take SIGINT (master / local runner, main thread): Ctrl-C reaches Locust's main greenlet
        as before, but never lands inside a chaos recovery greenlet, and means "stop here" after the load."""
        try:
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
            signal.signal(signal.SIGUSR2, print_greenlets)
            signal.signal(signal.SIGHUP, self._on_sighup)
            # beside Locust's own SIGTERM handler (installed after this, at its start, and so run after it): a master's
            # quit stops the load and finishes the run inside Locust's shutdown, before goldfish's quit is called
            gevent.signal_handler(signal.SIGTERM, self._saw_sigterm)
            self.stdin_was_terminal = os.isatty(0)
        except ValueError:  # not the main thread (a library user): leave signals alone
            self._previous_sigint = None

    def release_signals(self) -> None:
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None

    def _saw_sigterm(self) -> None:
        self.sigterm_seen = True

    def _on_sigint(self, _signum, _frame) -> None:
        self.on_signal("SIGINT")

    def _on_sighup(self, _signum, _frame) -> None:
        """The terminal closed: the output goes to the run folder's hangup.log, then the process stops as on a
        SIGTERM (Locust's own handler: the load stops, the test is healed and finished)."""
        run = self.run
        detach_output(RunFolder(run.settings.run_dir).hangup_log if run is not None else os.devnull)
        # a line Locust's stats printer wrote between the hang-up and this handler failed with EIO, and logging
        # printed that as a "Logging error" traceback into hangup.log once it ran: that line is lost, nothing more
        logging.raiseExceptions = False
        if self.stdin_was_terminal and self.stand_in is None:
            # Locust's keyboard listener puts the terminal's settings back on fd 0 as it stops; with the terminal
            # gone that fails (EIO) and Locust exits 2 over it: fd 0 becomes a pseudo-terminal of our own
            self.stand_in, ours = os.openpty()
            os.dup2(ours, 0)
            os.close(ours)
        if not self.hung_up:
            self.hung_up = True
            say("SIGHUP: the terminal closed; stopping as on SIGTERM")
        os.kill(os.getpid(), signal.SIGTERM)

    def on_signal(self, name: str) -> None:
        """A signal: stop the load (as Locust would), wait for the heal, or stop the run here."""
        phase = self.phase
        if phase == HEAL or ((self.quitting or self.stopping) and phase == LOAD):
            if self.pending:
                return
            if self.quitting or self.stopping or self.quit_after or phase == LOAD:
                self.pending = (name, HEAL)  # a second signal: stop once the heal is done
            else:
                self.quit_after = name  # the first, during a web-UI stop's heal: finish the test, then quit
            say(f"{name}: waiting until every chaos fault is recovered (a recovery is never cut short)")
        elif phase in FINISHING:
            self._throw_at_switch(SystemExit(self.interrupt(name)))
        elif not self.quitting:
            self.stopping = phase == LOAD
            if phase == LOAD:
                self.stopped_early(name)
            self._throw_at_switch(KeyboardInterrupt())  # Locust's own Ctrl-C: stop the load, finish the run, quit

    def stopped_early(self, name: str) -> None:
        """The run is judged on what ran: run.json says it was cut short, and by what (a CI job's timeout PASSed a
        run of 8 s of its 40 with nothing recorded: verdict hunt 14; by SIGTERM or SIGHUP still so: hunt 15)."""
        if self.early_for is self.run:  # said once: on_signal or quit, then the end of the run it stops
            return
        self.early_for = self.run
        name = self.signal_name(name)
        record(self.run, stopped_early={"signal": name, "time": time.time()})
        say(f"{name} during the load: the load stops here; the run is healed, audited and judged on what ran "
            "(run.json's stopped_early)")

    def signal_name(self, name: str) -> str:
        """The signal as run.json records it: the SIGTERM ``_on_sighup`` sends is the SIGHUP that came."""
        return "SIGHUP" if name == "SIGTERM" and self.hung_up else name

    def _throw_at_switch(self, exc: BaseException) -> None:
        """From a signal handler: throw into Locust's main greenlet where it next waits, never where the handler
        runs. A handler runs at any bytecode of whichever greenlet is current, a finaliser's included, and an
        exception raised inside a ``__del__`` is printed and dropped: the stop was lost and the run went on."""
        gevent.get_hub().loop.run_callback(self.main.throw, exc)

    def _throw(self, exc: BaseException) -> None:
        if gevent.getcurrent() is self.main:
            raise exc
        self._throw_at_switch(exc)

    def interrupt(self, name: str, phase: str | None = None) -> int:
        """Record that ``name`` stopped the current run in ``phase`` (default: its current one); the exit code."""
        if self.code is not None:
            return self.code
        name = self.signal_name(name)
        self.code = EXIT_SIGNAL.get(name, 143)
        run = self.run
        if run is not None and run.phase != DONE:
            run.interrupted = name
            s, phase = run.settings, phase or run.phase
            if phase in (AUDIT, REPORT) and run.audited is not None:
                return self._interrupted_report(run, name, phase)
            resume = f"python -m oracle audit {s.run_dir}" + store_arguments(s.store)
            record(run, end=True, exit_code=self.code, phase=phase, interrupted={
                "signal": name, "phase": phase, "time": time.time(),
                "finish_with": f"{resume} (it reads the store again: run it while the store still holds this run)"})
            say(f"{name} during {phase}: stopped with exit code {self.code}, no verdict. The journal is intact; "
                f"finish the audit with `{resume}`")
        return self.code

    def _interrupted_report(self, run: Run, name: str, phase: str = REPORT) -> int:
        """A signal once the audit had finished (while it said its figures, or the report was drawn): its verdict
        stands and run.json records it beside the signal. It said "no verdict" while summary.json and the badge said
        PASS, and `oracle trend` pooled the night as a pass (verdict hunts 13 and 14): one answer now, the audit's."""
        from oracle import headline

        draw = f"python -m oracle report {run.run_dir}"
        run.verdict_kept = True
        record(run, end=True, exit_code=self.code, phase=phase, verdict=run.audited["result"], interrupted={
            "signal": name, "phase": phase, "time": time.time(), "finish_with": f"{draw} (the audit had finished)"})
        say(f"{name} during {phase}: stopped with exit code {self.code}; the audit had finished: "
            f"{headline(run.audited)} (audit/summary.json); draw its report with `{draw}`")
        return self.code

    # ---- a test starts ----------------------------------------------------------------------
    def next_run_dir(self, settings) -> str:
        """The first test's folder is --run-dir as given; a later one gets <run-dir>-2, -3...; without
        --run-dir each test gets results/<UTC time of its start>-<label>. Never a folder an earlier test of
        this process used, nor (after the first) one that exists."""
        if self.run_dir_option and not self.runs:
            return self.run_dir_option
        base = self.run_dir_option or default_run_dir(settings.label)
        used = {run.run_dir for run in self.runs}
        candidate, n = base, 1
        while candidate in used or not _reserved(candidate):
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    def begin_run(self, settings, script, target: str | None, load: dict | None = None) -> Run:
        """At test_start: wait for the previous test's stop to finish, then open this test's run folder
        (``load``: the load Locust was asked for, runfolder.load_of) and arm its chaos plan from the beginning.
        Returns the run (its settings name its folder)."""
        self.idle.wait()
        settings = dataclasses.replace(settings, run_dir=self.next_run_dir(settings))
        self.settings = settings
        controller, bad = None, None
        try:
            runfolder.start_run(settings, script, target, load)
            runfolder.update_run(settings.run_dir, phase=LOAD)
        except OSError as exc:  # a full disk, a folder removed since init: this test cannot be recorded
            bad = f"--run-dir {settings.run_dir}: cannot write the run folder: {exc.strerror or exc}"
            say(f"error: {bad}; this test is stopped at once")
        if settings.chaos and not bad:
            try:
                controller = load_chaos(settings, settings.run_dir)
            except Exception as exc:  # noqa: BLE001 - the backend changed since the plan was checked
                bad = f"chaos plan {settings.chaos}: {exc}"
                say(f"error: {bad}; this test is stopped at once, with no fault applied")
        run = Run(settings, controller, bad)
        run.load = load
        run.holding = None if bad else RunFolder(settings.run_dir).hold_running()
        run.warnings += filter(None, [chaos_elsewhere(settings, target)])
        for warning in run.warnings:
            say(f"warning: {warning}")
        self.runs.append(run)
        self.idle.clear()
        if controller is not None:
            controller.start()
            say(f"chaos: armed {settings.chaos} on backend {settings.chaos_backend} from its beginning")
        if not bad:  # a journal line that cannot be written stops this test (locustfiles/live.py)
            live.journal_failed = lambda path, exc, run=run: self.journal_failed(run, path, exc)
            try:
                run.follower = start_follower(settings)
            except OSError as exc:  # an IsADirectoryError traceback, then the load ran with no verdict at its end
                run.bad = (f"--run-dir {settings.run_dir}: cannot write the rolling audit's log "
                           f"{exc.filename or Path(settings.run_dir) / 'follow.log'}: {exc.strerror or exc}")
                say(f"error: {run.bad}; this test is stopped at once")
        say(f"run folder {settings.run_dir} (script {script.name}, {script.turns} turns)")
        return run

    def users_changed(self, count) -> None:
        """At spawning_complete: a running test whose user count the web UI changed records each new count in
        run.json's ``load.users_changed``; its load still said the first count, which compare's like-for-like
        check reads (verdict hunt 16). A LoadTestShape changes the count by design: not recorded."""
        run = self.run
        if run is None or run.phase != LOAD or not isinstance(run.load, dict) or run.load.get("shape") \
                or run.load.get("users") is None or not isinstance(count, int):
            return
        changes = run.load.setdefault("users_changed", [])
        if count != (changes[-1] if changes else run.load["users"]):
            changes.append(count)
            record(run, load=run.load)

    def journal_failed(self, run: Run, path, exc: OSError) -> None:
        """A journal line of ``run`` could not be written (no space left on the device): say what and where once,
        and stop the load as a Ctrl-C does (the run is then healed and ended, with exit code 3, and Locust
        quits): turns that cannot be journaled cannot be judged, and the load would go on sending them."""
        if run is not self.run or run.journal_error:
            return
        run.journal_error = f"cannot write the journal {path}: {exc.strerror or exc}"
        say(f"error: {run.journal_error}; this test is stopped at once (a turn that cannot be journaled cannot be "
            "judged)")
        if run.phase == LOAD and not (self.quitting or self.stopping):
            self.stopping = True
            self._throw_at_switch(KeyboardInterrupt())  # as Locust's own Ctrl-C: stop the load, end the run, quit

    # ---- a test stops -----------------------------------------------------------------------
    def end_run(self, environment) -> int | None:
        """At test_stop: heal, write Locust's files, settle, audit, report, the verdict. Returns the run's
        code combined with Locust's own (None when no run was under load)."""
        run = self.run
        if run is None or run.phase != LOAD:
            return None
        if self.sigterm_seen and not self.stopping:  # a master (or --processes) quit by SIGTERM: Locust's own quit
            self.stopped_early("SIGTERM")  # stopped the load and runs this before goldfish's (verdict hunt 17)
        seen = counters(environment)  # this test's, whatever a start from the web UI does meanwhile
        lost = workers_lost(environment, run.workers_missing_before)
        streamed = streamed_replies(environment)
        try:
            self.heal(run)
            self.after_heal()
            self._enter(run, SETTLE)  # from here a signal stops the run where it is (no gap after the heal)
            if self.pending:  # a second signal came while stopping: stop here. Just return: Locust's shutdown
                # is under way (the quit() that called us) or asked for (on_signal, quit_after below), and it
                # exits with self.code. Never raise: in Locust's SIGTERM greenlet gevent throws whatever escapes
                # into the main greenlet (a GreenletExit there was a traceback and exit code 1)
                return self.interrupt(*self.pending)
            if not (run.bad or run.journal_error):  # a folder that could not be written has no room for Locust's
                # files either
                locust_output.write(environment, run.run_dir)
            raised = user_exceptions(environment, seen, run.exceptions_reset)
            if raised:  # before the report, which warns of it
                record(run, user_exceptions=raised)
            if streamed:  # before the report, whose badge says NOT TRUSTED for a FAIL of it
                record(run, streamed_replies=streamed)
            if lost:
                record(run, workers_lost=lost)
                say(f"{lost['count']} Locust worker(s) went missing during the test"
                    + (": all of them, so the test stopped early" if lost["all"] else ""))
            try:
                run.code = distrust(run, {"streamed_replies": streamed, "workers_lost": lost,
                                          "user_exceptions": raised}, self._finish(run))
            except Stopped:
                return self.code
            if run.interrupted:  # a signal during the last phase, whose throw lands at the next wait: stop here
                return self.code
            locust_code, why = locust_exit_code(environment, seen, run.exceptions_reset)
            run.final = combine(run.code, locust_code)
            if run.final != run.code:
                say(f"exit code {run.final}: Locust's own ({why})")
            run.phase, run.ended = DONE, time.time()
            record(run, end=True, exit_code=run.final, phase=DONE, verdict=run.result,
                   **({"untrusted": run.untrusted} if run.untrusted else {}))
            return run.final
        finally:
            stop_follower(run)
            if run.holding is not None:
                run.holding.close()
            self.idle.set()
            if self.quit_after and not self.quitting:
                self.quit_after = None
                self._throw(KeyboardInterrupt())  # the signal that came during the heal: quit as Locust would

    def heal(self, run: Run) -> None:
        """Heal everything; signals that arrive meanwhile wait for it (``on_signal``)."""
        run.phase = HEAL
        record(run, phase=HEAL)
        if run.controller is None:
            return
        self.heal_event.clear()
        try:
            left = run.controller.stop(via="test_stop")
        finally:
            self.heal_event.set()
        if left:
            say(f"chaos: {len(left)} fault(s) NOT healed — run `python -m chaos heal {run.run_dir}`")
        else:
            say("chaos: stopped, everything healed")
        for what in run.controller.unwritten:
            say(f"chaos: could not write {what}: the run folder's record of the faults is incomplete (a full disk?)")

    # ---- Locust quits -----------------------------------------------------------------------
    def quit(self, environment) -> int:
        """At Locust's quitting (the first time): a test still under load is stopped (and so finished);
        one finishing in another greenlet is waited for (during its heal) or stopped here (after it).
        Returns the process's exit code."""
        if self.quitting:
            return self.again(environment)
        if self.stopping and gevent.getcurrent() is not self.main:  # a SIGTERM ahead of the Ctrl-C's own quit:
            self.on_signal("SIGTERM")  # still the second signal (it stops the run once the heal is done)
        self.quitting = True
        run, runner = self.run, environment.runner
        if run is not None and run.phase == LOAD:
            if gevent.getcurrent() is not self.main and not self.stopping:  # Locust's SIGTERM greenlet: a CI job's
                # timeout, or a closed terminal (_on_sighup), during the load (a Ctrl-C was recorded in on_signal)
                self.stopped_early("SIGTERM")
            if runner.state not in ("stopped", "ready"):  # Ctrl-C / SIGTERM while running: stop users first
                runner.stop()  # fires test_stop: the run is finished there
            if run.phase == LOAD:
                self.end_run(environment)
            self.idle.wait()  # finished here, or by a stop already under way in another greenlet
        elif run is not None and run.phase == HEAL:  # a web-UI stop is healing: let it finish the test
            self.idle.wait()
        elif run is not None and run.phase in FINISHING:
            if gevent.getcurrent() is self.main and not self.stopping:
                # no signal: Locust's main greenlet, whose wait for the runner ended because the runner quit on its
                # own after the load, the master's "The last worker quit" (workers leave a master busy in its
                # audit: no heartbeat for MASTER_GONE_S). Their journals were drained before the settle: the run
                # finishes with its verdict, as after a heal. A signal meanwhile still stops it (on_signal)
                self.idle.wait()
                if run.final is None and not run.interrupted:  # its end was cut short (killed): no verdict, never 0
                    run.final = EXIT_AUDIT
                    say(f"{run.run_dir}: its end was cut short in phase {run.phase}: no verdict, exit code 3; finish "
                        f"the audit with `python -m oracle audit {run.run_dir}{store_arguments(run.settings.store)}`")
            else:  # a SIGTERM (Locust's shutdown, in its own greenlet) after the load: stop here
                self.interrupt("SIGTERM")
        self.release_signals()
        return self.exit_code(environment)

    def again(self, environment) -> int:
        """Locust's shutdown while its first one is under way: a second SIGTERM (Locust runs each in a new
        greenlet), or Locust's main greenlet whose wait the first one's ``runner.quit()`` ended. A SIGTERM is a
        signal like Ctrl-C (``on_signal``: during the stop or the heal it stops the run once the heal is done).
        Then this greenlet waits for the first shutdown to end the process: it is the one that finishes the
        run, and two shutdowns would each throw their SystemExit into the main greenlet, the second while the
        interpreter exits (a traceback)."""
        if gevent.getcurrent() is not self.main:  # the main greenlet's call is no new signal
            self.on_signal("SIGTERM")
        Event().wait()  # never set: the first shutdown's SystemExit ends the process
        return self.exit_code(environment)

    def exit_code(self, environment) -> int:
        """130/143 after a signal stopped a run; else the first failed run's code; else Locust's own.
        Worked out (and said) once: Locust may call its shutdown twice."""
        if self.code is not None:
            return self.code
        if self.final_code is None:
            failing = [run for run in self.runs if run.final]
            if failing:
                failed = failing[0]
                self.final_code = failed.final
                if len(self.runs) > 1:
                    shown = "not trusted" if failed.untrusted else failed.result or "no verdict"  # a pass by its gates
                    say(f"exit code {failed.final}: run {failed.run_dir} ({shown}, exit code "
                        f"{failed.final}), the first of the {len(failing)} of {len(self.runs)} runs that did not pass")
            else:
                self.final_code, why = locust_exit_code(environment)
                if self.final_code:
                    say(f"exit code {self.final_code}: Locust's own ({why})")
        return self.final_code

    def summary_lines(self) -> list[str]:
        """One line per run, for the end of the output (below Locust's final table); once."""
        from oracle import verdict_word

        if self.told:
            return []
        self.told, lines = True, []
        for run in self.runs:
            audited = (run.audited or {}).get("result") if run.verdict_kept else None  # stopped once it was audited
            verdict = "NOT TRUSTED" if run.untrusted else \
                f"{audited.upper()} (the audit's; {run.interrupted} during the {run.phase})" if audited else \
                (verdict_word(run.verdict) if run.verdict else
                 "interrupted" if run.interrupted else "no verdict").upper()
            where = f"report {run.report}" if run.report else "no report.html (" + (
                "see the error above" if run.bad or run.journal_error else
                "no audit: --no-audit" if run.settings.no_audit else
                "no audit: --store-url" if run.settings.store is None else
                "the report could not be written: see above" if run.report_failed else
                f"draw it: python -m oracle report {run.run_dir}" if audited else  # judged, stopped (verdict hunt 17)
                "the store was not judged: see above") + ")"
            lines.append(f"{run.run_dir}: {verdict}, exit code {run.final if run.final is not None else self.code}"
                         f" — {where}")
        return lines

    # ---- the end of one run -----------------------------------------------------------------
    def _enter(self, run: Run, phase: str) -> None:
        if run.interrupted:
            raise Stopped()
        run.phase = phase
        record(run, phase=phase)

    def _finish(self, run: Run) -> int:
        s = run.settings
        from oracle import JournalError, NoJournalRecords, TimelineError, journal_verdict, verdict_exit_code

        # the store settles (phase settle since the heal) while the journal is read
        if run.bad:
            say(f"error: {run.bad}")
            return EXIT_BAD
        if run.journal_error:  # the journal stops at the error: a verdict of part of the run is not the run's
            say(f"no verdict: the journal stops at the error above ({run.journal_error}): it holds the turns "
                "before it, not the whole run's; free the space and run the test again")
            return EXIT_AUDIT
        started = time.monotonic()
        try:  # the journal is whole now (the load stopped, workers' batches in): its size, so that an audit of a
            # journal that lost lines since is refused (oracle.audit.require_whole_journal), not a verdict of part
            record(run, journal={"bytes": RunFolder(s.run_dir).journal_bytes()})
        except OSError as exc:  # a shard that cannot be stat'ed: journal_verdict below says what is wrong
            log.warning("cannot measure the journal of %s: %s", s.run_dir, exc)
        try:
            online = journal_verdict(s.run_dir, s.gates)
        except TimelineError as exc:  # it would excuse failed requests that nothing may have excused
            say(f"error: {exc}")
            return EXIT_BAD
        except NoJournalRecords:
            say(f"no turn was journaled in {s.run_dir}: nothing to judge")
            return EXIT_BAD
        except JournalError as exc:  # lines of another run in the journal, say
            say(f"error: {exc}")
            return EXIT_BAD
        t = online["turns"]
        say(f"journal: {t['total']} turns (ok {t['ok']}, refused {t['fail']}, indeterminate {t['info']}), probes "
            f"answered {t['probes_answered']}, amnesia {t['probes_failed']}, cross-talk replies {t['crosstalk_replies']}"
            f" — run folder {s.run_dir}")
        for warning in run.warnings:  # what the verdict below does not cover
            say(f"warning: {warning}")
        if t["ok"] == 0:
            say("no turn was acknowledged by the target (every turn failed: refused, unreachable, timed out, or answered "
                "without a reply the options read; the errors below say which)")
            if s.store is None or s.no_audit:
                return EXIT_BAD  # with a store, the audit still looks: refused turns stored anyway are a finding
        if s.store is None or s.no_audit:
            for problem in online["problems"][:WARNINGS_SHOWN]:  # a turn journaled twice that disagrees...: why
                say(f"warning: {problem}")  # the unreadable gate fails (the audit says them in its own output)
            self._say_verdict(online["verdict"], "online, from the journal: the store was not audited")
            run.verdict = online["verdict"]
            return verdict_exit_code(online["verdict"])  # 2 for a run that measured nothing (no probe sent)
        wait = s.settle - (time.monotonic() - started)
        if wait >= SETTLE_SAID_S:  # a long wait without a word looked like a hung run
            say(f"settle: the audit reads the store in {wait:,.0f} s (--settle), at "
                f"{time.strftime('%H:%M:%S', time.localtime(time.time() + wait))}")
        gevent.sleep(max(0.0, wait))
        stop_follower(run)
        self._enter(run, AUDIT)
        code, summary = self.audit(run)
        if summary is not None and run.interrupted and not run.verdict_kept:  # the signal came while the audit
            # ran, which finished all the same (no wait for its throw to land in): summary.json holds its verdict
            self._interrupted_report(run, run.interrupted, AUDIT)
            raise Stopped()
        if summary is None:  # the store unjudged (options it cannot be read with, or it failed: a Redis that died
            if online["verdict"]["result"] == "fail":  # in the settle); the clients saw a bug all the same: FAIL
                self._say_verdict(online["verdict"], "online, from the journal: the store could not be judged (above)")
                run.verdict = online["verdict"]
                return verdict_exit_code(online["verdict"])
            return code
        return self._report(run, code, summary)

    def _report(self, run: Run, code: int, summary: dict) -> int:
        """The report, then the verdict said; the run's code."""
        from oracle import headline, render_report, verdict_exit_code

        run.audited = summary["verdict"]
        self._enter(run, REPORT)
        try:
            run.report = render_report(run.settings.run_dir)
            say(f"report: {run.report}")
        except Exception as exc:  # noqa: BLE001
            log.exception("report failed")
            say(f"report FAILED: {type(exc).__name__}: {exc} (re-run `python -m oracle report {run.settings.run_dir}`)")
            run.report_failed = f"{type(exc).__name__}: {exc}"
            code = EXIT_AUDIT
        if run.interrupted:  # a Ctrl-C while the report rendered (it never waits) said "no verdict": none follows
            raise Stopped()
        self._say_verdict(summary["verdict"], f"gates {summary['verdict']['gates']}")
        run.verdict = summary["verdict"]
        say(headline(summary["verdict"]))
        if run.result == "fail":  # nothing acknowledged, nothing else failed: 2; a finding (1) stands even when
            found = verdict_exit_code(summary["verdict"])  # its report could not be written, as in `oracle audit`
            code = found if code == EXIT_OK or found == EXIT_GATE else code
        return code

    @staticmethod
    def audit(run: Run) -> tuple[int, dict | None]:
        """Audit the run's store; (its code, the summary or None). ``run.audited`` is set as soon as summary.json
        is written: a signal from then on finds the audit's verdict, not "no verdict" (EndOfRun.interrupt)."""
        from oracle import TemplateMismatch, audit_run

        s = run.settings
        try:
            # one process: this one is gevent-patched; `python -m oracle audit RUN --jobs N` re-audits in parallel
            summary = audit_run(s.run_dir, store=s.store, gates=s.gates, jobs=1)
            run.audited = summary["verdict"]
        except TemplateMismatch as exc:
            say(f"error: {exc}")
            return EXIT_BAD, None
        except Exception as exc:  # noqa: BLE001 - the journal is safe; say how to retry
            if not isinstance(exc, _known_store_errors()):  # a bug: its traceback; a store's failure says enough
                log.exception("audit failed")
            say(f"audit FAILED: {type(exc).__name__}: {exc}. The journal is intact in {s.run_dir}/journal; "
                f"re-run with `python -m oracle audit {s.run_dir} --store-url ...`")
            return EXIT_AUDIT, None
        m = summary.get("metrics") or {}
        rate = lambda k: f"{(m.get(k) or {}).get('rate') or 0:.3%}"  # noqa: E731
        anomalies = ", ".join(f"{k} {v}" for k, v in (summary.get("anomalies") or {}).items()) or "none"
        say(f"audit: {summary.get('sessions')} sessions, probe amnesia {rate('probe_amnesia')}, stored loss "
            f"{rate('stored_loss')}, session amnesia {rate('session_amnesia')}; anomalies: {anomalies}")
        problems = summary.get("problems") or []  # a fault that never applied, one no conversation spanned...:
        for problem in problems[:WARNINGS_SHOWN]:  # what a PASS does not cover, in the log a CI job keeps
            say(f"warning: {problem}")
        total = summary.get("problems_total", len(problems))
        if total > WARNINGS_SHOWN:
            say(f"... {total - WARNINGS_SHOWN:,} more warnings in {s.run_dir}/audit/summary.json")
        return EXIT_OK, summary

    @staticmethod
    def _say_verdict(v: dict, where: str) -> None:
        from oracle import rule_line, verdict_word

        say(f"verdict {verdict_word(v)} ({where}):")
        lines = [rule_line(rule) for rule in v["rules"]]
        for line in v["failed"]:
            if line not in lines:  # what no gate could measure (oracle.verdict.require_measured)
                say(f"  FAIL  {line}")
        for rule, line in zip(v["rules"], lines):
            if rule["result"] in ("pass", "fail"):
                say(f"  {rule['result'].upper():<5} {line}")


def _known_store_errors() -> tuple:
    """The failures of a store, its snapshot or the run folder whose message is the whole story (``audit FAILED:
    StoreError ...``): a store that stopped answering at the audit printed 60 lines of traceback before it, and a
    full disk the same (input hunt 17)."""
    import redis
    import requests

    from contracts.runfolder import CannotWrite
    from oracle import SnapshotError, StoreError

    # and a run folder that cannot be written (a full disk: "cannot write the run folder: No space left ...")
    return StoreError, SnapshotError, CannotWrite, redis.RedisError, requests.RequestException
