"""Locust event wiring: which node does what, when. The work itself lives in sibling modules.

- every node: parse and check the options and the script at init (bad input exits 2 before load);
- local runner: writes ``journal/local-<pid>.jsonl``;
- worker: writes ``workers/<worker-id>.jsonl`` and ships batches to the master (distributed.py);
- master / local runner: run folder and run.json, chaos start at test_start, the journal drain
  at test_stop, and the end-of-run seam (endofrun.py) once, at quitting.
"""
from __future__ import annotations

import logging
import os

from locust import events
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from locustfiles import endofrun, options, runfolder, telemetry
from locustfiles.distributed import MSG_DRAIN, MSG_STEP, MasterCollector, MasterWatch, WorkerShipper, worker_shard_path
from contracts.runfolder import RunFolder
from locustfiles.journal import Journal
from locustfiles.runtime import Runtime
from locustfiles.script import ScriptError
from oracle import AuditOptionError, reach_store

log = logging.getLogger("goldfish")


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


def _start_run(settings, script, host) -> None:
    """The run folder and run.json; a folder that cannot be written is bad input (exit 2), not a traceback."""
    try:
        runfolder.start_run(settings, script, host)
    except OSError as exc:
        endofrun.say(f"error: --run-dir {settings.run_dir}: cannot write the run folder: {exc.strerror or exc}")
        raise SystemExit(endofrun.EXIT_BAD) from None


@events.init.add_listener
def _on_init(environment, runner, **_kw):
    if environment.parsed_options is None or not hasattr(environment.parsed_options, "chat_path"):
        return  # an Environment built by hand (tests, library use) without our options
    rt = environment.goldfish = _runtime(environment.parsed_options)
    rt.runner_kind = type(runner).__name__
    if not rt.settings.steps_enabled:
        environment.shape_class = None  # the step shape is opt-in
    if isinstance(runner, WorkerRunner):
        runner.register_message(MSG_DRAIN, _on_drain)
        runner.register_message(MSG_STEP, _on_step)
        rt.watch = MasterWatch(environment)
        return
    _reach_store(rt.settings)
    if isinstance(runner, LocalRunner):
        runner.register_message(MSG_STEP, _on_step)
    # master or local: pin the run folder for everyone (workers get parsed_options at spawn)
    environment.parsed_options.run_dir = rt.settings.run_dir
    rt.end = endofrun.EndOfRun(rt.settings)
    rt.end.guard_signals()
    try:
        rt.end.prepare_chaos()
    except Exception as exc:  # noqa: BLE001 - PlanError, state errors: bad input, before any load
        endofrun.say(f"error: chaos plan {rt.settings.chaos}: {exc}")
        raise SystemExit(endofrun.EXIT_BAD) from None
    _start_run(rt.settings, rt.script, environment.host)
    if isinstance(runner, MasterRunner):
        rt.collector = MasterCollector(environment, rt.settings.run_dir)
    endofrun.say(f"run folder {rt.settings.run_dir} (script {rt.script.name}, {rt.script.turns} turns)")


@events.test_start.add_listener
def _on_test_start(environment, **_kw):
    rt = getattr(environment, "goldfish", None)
    if rt is None:
        return
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        # the master's options arrived with the spawn message: use its run folder, script, contract
        fresh = _runtime(environment.parsed_options)
        rt.settings, rt.script, rt.contract = fresh.settings, fresh.script, fresh.contract
        path = worker_shard_path(rt.settings.run_dir, runner.client_id)
        if rt.journal is None or rt.journal.path != path:
            rt.shipper = WorkerShipper(runner, path)
            rt.journal = Journal(path, forward=rt.shipper.add)
        return
    _refresh_from_web_ui(environment, rt)
    if rt.journal is None and isinstance(runner, LocalRunner):
        rt.journal = Journal(RunFolder(rt.settings.run_dir).journal_shard(f"local-{os.getpid()}"))
    if isinstance(runner, MasterRunner):
        rt.collector.start_test()
    rt.end.start_chaos()
    rt.end.start_follower()
    telemetry.start(environment)


def _refresh_from_web_ui(environment, rt) -> None:
    """The web UI may have edited options (think, label, contract...) before this start."""
    try:
        fresh = Runtime.from_settings(options.Settings.from_options(environment.parsed_options))
    except (options.OptionError, ScriptError) as exc:
        log.error("goldfish: keeping the previous settings: %s", exc)
        return
    if fresh.settings == rt.settings:
        return
    rt.settings, rt.script, rt.contract = fresh.settings, fresh.script, fresh.contract
    rt.end.settings = fresh.settings
    runfolder.start_run(rt.settings, rt.script, environment.host)


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw):
    rt = getattr(environment, "goldfish", None)
    if rt is None:
        return
    if isinstance(environment.runner, WorkerRunner):
        if getattr(rt, "shipper", None):
            rt.shipper.flush(final=True)
        return
    if isinstance(environment.runner, MasterRunner):
        rt.collector.drain()
    shape = environment.shape_class
    if shape is not None and hasattr(shape, "finish"):
        shape.finish()
    rt.end.stop_chaos()
    telemetry.stop(environment)  # after the heal: the store's recovery is on the timeline too


@events.quitting.add_listener
def _on_quitting(environment, **_kw):
    rt = getattr(environment, "goldfish", None)
    if rt is None:
        return
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        if getattr(rt, "shipper", None):
            rt.shipper.flush(final=True)
            rt.shipper.close()
        return
    if not rt.end.begin():  # Locust's shutdown again: a second SIGTERM (record it, exit) or the final call
        environment.process_exit_code = rt.end.again()
        return
    if runner.state not in ("stopped", "ready"):  # Ctrl-C / SIGTERM while running: stop users first
        runner.stop()
    if isinstance(runner, MasterRunner):
        rt.collector.recover_local_shards()
    locust_code, why = endofrun.locust_exit_code(environment)  # Locust's own, before ours is set
    code = rt.end.final = endofrun.combine(rt.end.finish(), locust_code)
    if code != rt.end.code:
        endofrun.say(f"exit code {code}: Locust's own ({why})")
    runfolder.end_run(rt.settings.run_dir, exit_code=code, phase=endofrun.DONE, verdict=rt.end.verdict)
    environment.process_exit_code = code


def _on_drain(environment, msg, **_kw):
    """Worker: the master is stopping; stop our users (each journals itself), then send the last
    stats and the final journal batch (same channel, in order) before the master quits."""
    environment.runner.stop()
    environment.runner._send_stats()  # private (Locust has no public call): the pinned range; see docs/locust.md
    rt = environment.goldfish
    if getattr(rt, "shipper", None):
        rt.shipper.flush(final=True)


def _on_step(environment, msg, **_kw):
    environment.goldfish.step = msg.data["step"]
