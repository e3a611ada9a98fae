"""Locust event wiring: which node does what, when. The work itself lives in sibling modules.

- every node: parse and check the options and the script at init (bad input exits 2 before load);
- local runner: writes ``<run>/journal/local-<pid>.jsonl``;
- worker: writes ``<run>/workers/<worker-id>.jsonl`` and ships batches to the master (distributed.py), the
  run folder taken from the master's options at each test start;
- master / local runner: at each test_start a new run folder, run.json and chaos armed (endofrun.py); at
  each test_stop the journal drain, then heal, audit, report and the verdict; at quitting the exit code
  over every run; the goldfish tab in the web UI (webui.py).
"""
from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import gevent
from locust import events
from locust.runners import STATE_RUNNING, STATE_SPAWNING, LocalRunner, MasterRunner, WorkerRunner

from contracts.runfolder import RunFolder, detach_output
from locustfiles import endofrun, live, options, runfolder, telemetry
from locustfiles.distributed import MSG_DRAIN, MSG_STEP, MasterCollector, MasterWatch, WorkerShipper, worker_shard_path
from locustfiles.journal import Journal
from locustfiles.judge import PlantRegistry
from locustfiles.replica import ReplicaTag
from locustfiles.runtime import Runtime
from locustfiles.script import ScriptError
from oracle import AuditOptionError, reach_store

log = logging.getLogger("goldfish")
NO_TAGS = ("-T/--tags and -E/--exclude-tags choose Locust tasks, but a goldfish user has one task (a whole "
           "conversation); choose the steps it takes with --script (docs/locust.md \"Conversation scripts\")")


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw):
    options.add_arguments(parser)


def _runtime(parsed) -> Runtime:
    try:
        return Runtime.from_settings(options.Settings.from_options(parsed))
    except (options.OptionError, ScriptError) as exc:
        endofrun.say(f"error: {exc}")
        raise SystemExit(endofrun.EXIT_BAD) from None


def _reach_store(settings) -> None:
    """Reach the store now (master / local runner): a refused store or a wrong password exits 2 before any
    user spawns, not as a failed audit after the whole load."""
    if settings.store is not None and not settings.no_audit:
        try:
            reach_store(settings.store)
        except AuditOptionError as exc:
            endofrun.say(f"error: {exc}")
            raise SystemExit(endofrun.EXIT_BAD) from None


def _check_run_dir(settings, given: bool = True) -> None:
    """A run folder that cannot be created, or that holds a run already (``given``: --run-dir names it; the default
    name of a run started the same second by another job is passed over at the test's start,
    EndOfRun.next_run_dir), is bad input (exit 2) before any load, not a traceback at the first test's start: the
    nearest existing folder above it must be a writable directory."""
    if given and RunFolder(settings.run_dir).is_run():  # its journal would be judged with this run's: a dead bot could pass
        endofrun.say(f"error: --run-dir {settings.run_dir} already holds a run (run.json, journal/ or an audit): goldfish "
                     "never adds a run to another's folder; name a new folder, or remove that one")
        raise SystemExit(endofrun.EXIT_BAD)
    where = Path(settings.run_dir).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir() or not os.access(where, os.W_OK | os.X_OK):
        why = _unwritable(where)
        endofrun.say(f"error: --run-dir {settings.run_dir}: cannot write the run folder: {where} is {why}")
        raise SystemExit(endofrun.EXIT_BAD)


def _unwritable(where: Path) -> str:
    """Why a folder goldfish cannot write in is so: access() says only no (for root too, on a read-only mount,
    where "permission denied" misled: no chmod helps there)."""
    if not where.is_dir():
        return "not a directory"
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:   # EROFS: the mount, not the folder's mode
            return "on a read-only file system"
    except OSError:
        pass
    return "permission denied"


def _check_host(environment) -> None:
    """A target no turn can reach is bad input before any load (exit 2), not thousands of exceptions in the
    users, or a whole run of refused turns, first: http(s), a host name, a port that can be."""
    from urllib.parse import urlsplit

    host = environment.host or next((u.host for u in environment.user_classes if getattr(u, "host", None)), None)
    if not host:
        _bad("no target: give --host URL (for example --host http://127.0.0.1:8000)")
    try:
        url = urlsplit(host)
        url.port  # noqa: B018 - a port out of range, or not a number, raises ValueError
    except ValueError as exc:
        _bad(f"--host {host!r} is not a URL: {exc}")
    if url.scheme not in ("http", "https") or not url.hostname:
        _bad(f"--host {host!r} is not an http:// or https:// URL with a host name")
    if url.query or url.fragment or host.rstrip().endswith(("?", "#")):  # the chat path goes after it: every turn 404
        _bad(f"--host {host!r} holds a query or a fragment ('?...', '#...'): each turn's path is added after it, so "
             "no turn would reach the bot; give scheme://host[:port][/prefix], and constant fields in --body")


def _bad(why: str) -> None:
    endofrun.say(f"error: {why}")
    raise SystemExit(endofrun.EXIT_BAD)


def _outlive_the_terminal() -> None:
    """A worker whose terminal closed (SIGHUP) goes on, printing nowhere: its master stops it, and a write to
    the dead terminal would fail with EIO in the middle of a turn."""
    try:
        signal.signal(signal.SIGHUP, lambda *_: detach_output(os.devnull))
    except ValueError:  # not the main thread (a library user): leave signals alone
        pass


@events.init.add_listener
def _on_init(environment, runner, web_ui=None, **_kw):
    parsed = environment.parsed_options
    if parsed is None or not hasattr(parsed, "chat_path"):
        return  # an Environment built by hand (tests, library use) without our options
    tags = getattr(parsed, "tags", None) or getattr(parsed, "exclude_tags", None)
    if tags and not isinstance(runner, WorkerRunner):
        endofrun.say(f"error: {NO_TAGS}")
        raise SystemExit(endofrun.EXIT_BAD)
    rt = environment.goldfish = _runtime(parsed)
    rt.runner_kind = type(runner).__name__
    if not rt.settings.steps_enabled:
        environment.shape_class = None  # the step shape is opt-in
    rt.replicas = ReplicaTag(rt.settings.replica_header)  # the header may change per test (form, master's options)
    environment.events.request.add_listener(rt.replicas.on_request)
    if isinstance(runner, WorkerRunner):
        runner.register_message(MSG_DRAIN, _on_drain)
        runner.register_message(MSG_STEP, _on_step)
        rt.watch = MasterWatch(environment)
        _outlive_the_terminal()
        environment.events.report_to_master.add_listener(
            lambda client_id, data, **_: live.report_to_master(rt.journal and rt.journal.tally, data))
        # a worker that joins a running test can get its spawn, and test_start, before this init: without a journal
        # opened now, its users talked to the bot, journaled nothing, and a PASS left their conversations unjudged
        if getattr(runner, "worker_state", runner.state) in (STATE_SPAWNING, STATE_RUNNING):  # a worker's own state:
            _on_test_start(environment)  # SPAWNING from the spawn message on (runner.state only once users run)
        return
    _reach_store(rt.settings)
    if isinstance(runner, LocalRunner):
        runner.register_message(MSG_STEP, _on_step)
    try:
        endofrun.check_chaos(rt.settings)  # bad input stops here, before any load (and leaves no folder)
    except Exception as exc:  # noqa: BLE001 - PlanError, state errors
        endofrun.say(f"error: chaos plan {rt.settings.chaos}: {exc}")
        raise SystemExit(endofrun.EXIT_BAD) from None
    _check_run_dir(rt.settings, given=bool(parsed.run_dir))
    if web_ui is None:  # the web UI's form may still set it
        _check_host(environment)
    rt.end = endofrun.EndOfRun(rt.settings, run_dir_option=str(parsed.run_dir or ""))
    rt.end.guard_signals()
    rt.end.after_heal = lambda: telemetry.stop(environment)  # the store's recovery is on the timeline too
    rt.live = live.Live()

    def tell(**_kw):  # after Locust's final table (the quit event): where each run's verdict and report are
        for line in rt.end.summary_lines():
            endofrun.say(line)

    environment.events.quit.add_listener(tell)
    environment.events.reset_stats.add_listener(lambda **_: endofrun.keep_reset_exceptions(rt.end.run, environment))
    environment.events.spawning_complete.add_listener(lambda user_count, **_: rt.end.users_changed(user_count))
    if isinstance(runner, MasterRunner):
        rt.collector = MasterCollector(environment)
        environment.events.worker_report.add_listener(rt.live.on_worker_report)
    if web_ui is not None:
        from locustfiles import webui

        webui.install(environment, rt)


@events.test_start.add_listener
def _on_test_start(environment, **_kw):
    rt = getattr(environment, "goldfish", None)
    if rt is None:
        return
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        # the master's options arrived with the spawn message: its run folder, script, contract
        fresh = _runtime(environment.parsed_options)
        _fresh_test(rt, fresh.settings, fresh.script, fresh.contract)
        path = worker_shard_path(rt.settings.run_dir, runner.client_id)
        if rt.shipper is not None:
            rt.shipper.close()
        rt.shipper = WorkerShipper(runner, path, rt.settings.run_id)
        _open_journal(rt, Journal(path, forward=rt.shipper.add))
        return
    settings, script, contract = _settings_for_this_test(environment, rt)
    run = rt.end.begin_run(settings, script, environment.host,
                           runfolder.load_of(environment.parsed_options, getattr(environment, "shape_class", None)))
    _fresh_test(rt, run.settings, script, contract)
    environment.parsed_options.run_dir = run.run_dir  # workers take their run folder from the spawn message
    if run.bad:  # nothing of this test can be recorded (the error is said): no journal, and the load stops at once
        if rt.journal is not None:
            rt.journal.close()
            rt.journal = None
        gevent.spawn(runner.stop)
        return
    if isinstance(runner, MasterRunner):
        run.workers_missing_before = endofrun.missing_workers(environment)
        rt.collector.start_test(run.run_dir)
        rt.live.start(run.settings.run_id)
    else:
        _open_journal(rt, Journal(RunFolder(run.run_dir).journal_shard(f"local-{os.getpid()}")))
        rt.live.start(run.settings.run_id, rt.journal.tally)
    telemetry.start(environment)


def _settings_for_this_test(environment, rt):
    """The options as they are now (the web UI may have edited them since the last test)."""
    try:
        fresh = Runtime.from_settings(options.Settings.from_options(environment.parsed_options))
        return fresh.settings, fresh.script, fresh.contract
    except (options.OptionError, ScriptError) as exc:  # webui.py refuses such a start; this is a safety net
        log.error("goldfish: keeping the previous settings: %s", exc)
        return rt.end.settings, rt.script, rt.contract


def _fresh_test(rt, settings, script, contract) -> None:
    rt.settings, rt.script, rt.contract = settings, script, contract
    rt.plants = PlantRegistry(rt.plants.capacity)  # nonces of an earlier test are not this one's
    rt.replicas.header = settings.replica_header
    rt.crosstalk_logged = 0  # (rt.step stays: the step shape's first tick sets it just before the test starts)


def _open_journal(rt, journal: Journal) -> None:
    if rt.journal is not None:
        rt.journal.close()
    rt.journal = live.TalliedJournal(journal, live.Tally(rt.settings.run_id), rt.replicas)


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw):
    rt = getattr(environment, "goldfish", None)
    if rt is None:
        return
    if isinstance(environment.runner, WorkerRunner):
        # the users are stopped: send the last stats, then the final journal batch (same channel, in order),
        # so once the master has the final batch its request totals are complete too
        environment.runner._send_stats()  # private, but it is what the worker's own "quit" handler calls
        if rt.shipper is not None:
            rt.shipper.flush(final=True)
        return
    if rt.end.phase != endofrun.LOAD:
        return  # no test of ours is under load (a stop before any start, or a second stop)
    if isinstance(environment.runner, MasterRunner):
        rt.collector.drain()
        rt.collector.recover_local_shards()
    shape = environment.shape_class
    if shape is not None and hasattr(shape, "finish"):
        shape.finish()
    if gevent.getcurrent() in environment.runner.greenlet:  # the step shape's greenlet stopped the test: Locust's
        # quit kills that group (a master's, when its last worker leaves during the audit), and the run with it
        gevent.spawn(rt.end.end_run, environment).get()
    else:
        rt.end.end_run(environment)  # the store telemetry stops with the heal (rt.end.after_heal)


@events.quitting.add_listener
def _on_quitting(environment, **_kw):
    rt = getattr(environment, "goldfish", None)
    if rt is None:
        return
    if isinstance(environment.runner, WorkerRunner):
        if rt.shipper is not None:
            rt.shipper.flush(final=True)
            rt.shipper.close()
        return
    environment.process_exit_code = rt.end.quit(environment)


def _on_drain(environment, msg, **_kw):
    """Worker: the master is stopping; stop our users (each journals itself), then send the last
    stats and the final journal batch (same channel, in order) before the master quits."""
    environment.runner.stop()
    environment.runner._send_stats()  # private (Locust has no public call): the pinned range; see docs/locust.md
    rt = environment.goldfish
    if rt.shipper is not None:
        rt.shipper.flush(final=True)


def _on_step(environment, msg, **_kw):
    environment.goldfish.step = msg.data["step"]
