"""``python -m chaos run|validate|heal|targets`` — the standalone entry points.

Exit codes: 0 ok; 1 a recovery failed (run/heal: see the timeline and outstanding.json), or a
target is down (targets start/status); 2 bad plan, targets file or arguments (nothing touched).
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

import requests

from chaos.backends import REGISTRY, make_backend
from chaos.controller import Controller, heal_run, shown
from chaos.faults import TOXIC
from chaos.plan import PlanError, load_plan, toxiproxy_url
from chaos.toxiproxy import Toxiproxy, ToxiproxyError
from contracts import codec, redact
from contracts.console import control_character, not_empty, printable
from contracts.durations import parse_duration
from contracts.runfolder import RunFolder, detach_output
from targets import file as targets_file, registry

UNAPPLIED_SHOWN = 10  # occurrences that did not apply, named at the end of a run (the line above counts them all)
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # a closed terminal too: faults are never left applied


class Interrupted(Exception):
    """SIGINT/SIGTERM/SIGHUP: stop scheduling and heal before exiting."""


def _backend_kwargs(args) -> dict:
    """The backend's options from the flags and --backend-opt; ValueError when two of them give one thing (one
    would be ignored without a word)."""
    kw = {}
    if args.backend == "local" and args.state_dir:
        kw["state_dir"] = args.state_dir
    if args.targets:
        kw["targets"] = args.targets
    flags = {key: f"--{key.replace('_', '-')}" for key in kw}
    for item in args.backend_opt or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--backend-opt {redact.header_line(item)!r}: expected KEY=VALUE (e.g. namespace=chat)")
        try:
            value = codec.loads(value) if value[:1] in "[{0123456789" or value in ("true", "false") else value
        except codec.DecodeError as exc:
            raise ValueError(f"--backend-opt {key}: the value is not valid JSON ({exc})") from None
        if key in flags and isinstance(value, str):   # a value of the wrong type: make_backend names it
            raise ValueError(f"--backend-opt {key} and {flags[key]} both give the {key}: give it once")
        kw[key] = value
    if "state_dir" in kw and "targets" in kw:
        name = {key: flags.get(key, f"--backend-opt {key}") for key in ("state_dir", "targets")}
        raise ValueError(f"{name['state_dir']} (a stack's state folder) and "
                         f"{name['targets']} (your own processes, whose state goes to the targets file's state_dir) "
                         f"both say which processes chaos acts on: give one")
    return kw


def _one_line_dir(left_out: str):
    """argparse type of --run-dir: not empty, and one line of printable text, as Locust's --run-dir must be (its
    name is printed in the timeline line and the heal hint: a line break in it forged "chaos: done" lines)."""
    def check(text: str) -> str:
        why = control_character(not_empty(left_out)(text))
        if why is not None:
            raise argparse.ArgumentTypeError(f"--run-dir: {redact.text(text)[:80]!r} {why}")
        return text
    return check


def _new_dirs(path: str) -> list[Path]:
    """The folders making ``path`` would create, deepest first."""
    new, here = [], Path(path).absolute()
    while not here.exists() and here != here.parent:
        new.append(here)
        here = here.parent
    return new


def _remove_empty(dirs: list[Path]) -> None:
    """Remove the folders this command made (deepest first) while they are empty: a dry run, a validation or a
    run refused before it started left an empty results/chaos-<time>/ each time. A folder holding anything
    stays."""
    for folder in dirs:
        try:
            folder.rmdir()
        except OSError:
            return


def cmd_validate(args) -> int:
    if args.targets or args.state_dir:  # where the local backend's targets are (without --backend a state dir
        args.backend = args.backend or "local"  # was ignored: "ok")
    options = _backend_kwargs(args) if args.backend else {}   # clashing options refused before anything is read
    if args.targets:
        rows = _target_rows(targets_file.open_registry(args.targets))
        print(f"{printable(args.targets)}: ok — {len(rows)} target(s): " + ", ".join(line for line, _ in rows))
    if not args.plan:
        return 0
    plan = load_plan(args.plan)
    if args.backend or args.toxiproxy:   # a Toxiproxy named on the command line is checked, with or without a backend
        _check_toxiproxy(plan, args.toxiproxy)
    if args.backend:   # checked before any "ok" is printed: no ok line for a plan then refused
        new = _new_dirs(args.run_dir or "/tmp")
        try:
            controller = Controller(plan, make_backend(args.backend, **options),
                                    _run_folder(args.run_dir or "/tmp"), toxiproxy=args.toxiproxy)
            skips = controller.predicted_skips(controller.validate())
            down = controller.not_running()
        finally:
            _remove_empty(new)  # validating writes nothing there
    print(f"{printable(args.plan)}: ok — {len(plan.faults)} fault(s), {len(plan.schedule())} occurrence(s), "
          f"ends at {plan.horizon:g}s" if plan.horizon is not None else f"{printable(args.plan)}: ok (runs until stopped)")
    for warning in plan.warnings:
        print(f"warning: {warning}")
    if args.backend:
        print(f"{printable(args.plan)}: ok against backend {args.backend}"
              + (f"; {len(skips)} occurrence(s) will be skipped:" if skips else ""))
        for skip in shown(skips) + down:
            print(f"warning: {printable(skip)}")
    return 0


def cmd_run(args) -> int:
    options = _backend_kwargs(args)
    plan = load_plan(args.plan)
    if plan.horizon is None:
        raise PlanError([f"{args.plan}: the plan repeats forever; give it a 'duration' to run it standalone"])
    _check_toxiproxy(plan, args.toxiproxy)
    backend = make_backend(args.backend, **options)
    path = args.run_dir or f"results/chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    new = _new_dirs(path)
    try:
        run_dir = _run_folder(path)
        ctl = Controller(plan, backend, run_dir, toxiproxy=args.toxiproxy)
        if args.dry_run:
            print(f"dry run of {printable(args.plan)} on backend {backend.name} (nothing is touched):")
            print("\n".join(ctl.dry_run()))
            return 0
        return _run(args, plan, backend, ctl, run_dir)
    finally:  # a dry run, or a run refused before its start (a plan the backend refuses), recorded nothing there
        _remove_empty(new)


def _run(args, plan, backend, ctl, run_dir) -> int:
    def interrupt(signum, _frame):
        if signum == signal.SIGHUP:  # the terminal closed: heal all the same, printing to the run folder
            detach_output(RunFolder(run_dir).hangup_log)
        raise Interrupted(signal.Signals(signum).name)

    given = {sig: signal.getsignal(sig) for sig in STOPPING}
    for sig in STOPPING:
        signal.signal(sig, interrupt)
    via = "end"
    try:
        ctl.start()
        print(f"chaos: running {printable(args.plan)} ({plan.horizon:g}s) on {backend.name}; timeline {ctl.timeline.path}",
              flush=True)
        while not ctl.wait(0.2):
            pass
    except Interrupted as exc:
        via = exc.args[0].lower()
        # Heal to the end even if the user presses Ctrl-C again (SIGKILL still works; then `heal`).
        for sig in STOPPING:
            signal.signal(sig, signal.SIG_IGN)
        print(f"chaos: {exc.args[0]}: stopping and healing everything outstanding...", flush=True)
        ctl.stop(via=via)
    finally:  # given back: in-process callers (tests) must not keep a handler that raises Interrupted
        for sig, handler in given.items():
            signal.signal(sig, handler)
    failed = ctl.outstanding.entries()
    print(f"chaos: done ({via}); {len(failed)} fault(s) left outstanding", flush=True)
    for e in failed:
        print(f"  NOT healed: {e['key']} — run `python -m chaos heal {run_dir}`", flush=True)
    if ctl.unapplied:  # a CI job reads exit 0 as "the faults happened"
        print(f"chaos: {len(ctl.unapplied)} fault occurrence(s) did not apply, so this run tested less than its plan "
              "(each is on the timeline):", flush=True)
        for why in ctl.unapplied[:UNAPPLIED_SHOWN]:
            print(f"  NOT applied: {printable(why)}", flush=True)
    unwritten = ctl.unwritten
    for what in unwritten:  # the faults were healed; what the run folder says of them is not whole
        print(f"chaos: could not write {printable(what)}: the run folder's record of the faults is incomplete "
              "(a full disk?), so an audit cannot tell when each was in force", flush=True)
    return 1 if failed or unwritten or ctl.unapplied else 0


def _check_toxiproxy(plan, flag: str | None) -> None:
    """The Toxiproxy the plan's toxic faults go through answers; else the error names its URL and where it was
    given (the plan's line, or --toxiproxy), not the faults' targets that cannot be resolved without it."""
    url = flag or plan.toxiproxy
    if not url or not any(f.kind == TOXIC for f in plan.faults):
        return
    try:
        Toxiproxy(url).proxies()
    except (requests.RequestException, ToxiproxyError, ValueError) as exc:
        why = "nothing answers there" if isinstance(exc, requests.ConnectionError) else str(exc)[:200]
        if flag:
            raise ValueError(f"--toxiproxy {url}: not a Toxiproxy API that answers: {why}") from None
        raise PlanError([f"{plan.where(None, 'toxiproxy')}: toxiproxy: {url} is not a Toxiproxy API that answers: "
                         f"{why}"]) from None


def _run_folder(path: str) -> Path:
    """The run folder, made now: a path that cannot be one is named as --run-dir's, not as an errno. Never inside a
    run folder (OLD/store: a live re-audit of OLD replaces its store/, and the timeline with it), as Locust's."""
    if (outer := RunFolder(path).enclosing_run()) is not None:
        raise ValueError(f"--run-dir {printable(path)} lies inside the run folder {printable(outer)} (it holds run.json, "
                         "journal/ or an audit): a later audit of that run would delete or misread this one; name a "
                         "folder outside it, or that run folder itself")
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = "a file of that name is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise ValueError(f"--run-dir {path}: cannot make the run folder: {why}") from None
    return Path(path)


def _timeout(text: str) -> float:
    """--timeout: a duration above 0 (60, 90s, 2m): NaN, infinity and -5 waited no time or for ever."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite duration above 0 (e.g. 60, 90s, 2m), got {text!r}")
    return seconds


def _toxiproxy_option(text: str) -> str:
    """--toxiproxy: an http(s) URL with a host."""
    try:
        return toxiproxy_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _target_rows(state_dir) -> list[tuple[str, bool]]:
    """(one line, healthy) per target in the registry."""
    rows = []
    for name, m in registry.load(state_dir)["members"].items():
        running = registry.member_alive(m)
        healthy = running and registry.check_health(m)
        rows.append((f"{name} (pid {m['pid']}, {'healthy' if healthy else 'NOT healthy'})" if running
                     else f"{name} (not running)", healthy))
    return rows


def cmd_targets(args) -> int:
    """Start what a targets file names (unless running), stop it, or show it."""
    state_dir = targets_file.open_registry(args.file)
    if args.action == "start":
        with registry.locked_state(state_dir) as st:
            for name, m in st["members"].items():
                if not registry.member_alive(m):
                    if not m.get("cmd"):
                        raise RuntimeError(f"{name} is not running and has no command to start it ({args.file})")
                    registry.start_member(m)
        for m in registry.load(state_dir)["members"].values():
            registry.wait_healthy(m, timeout=args.timeout)
    elif args.action == "stop":
        with registry.locked_state(state_dir) as st:
            stopped = [name for name, m in st["members"].items() if registry.stop_member(m)]
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    rows = _target_rows(state_dir)
    print("\n".join(line for line, _ in rows))
    return 0 if all(healthy for _, healthy in rows) else 1


def cmd_heal(args) -> int:
    if not args.run.strip():  # an empty name said "error: : not a run folder" (input hunt 17)
        raise ValueError(f"{args.run!r} is no run folder: name the run folder to heal")
    folder = RunFolder(args.run)
    if not (folder.is_run() or folder.chaos.is_file() or folder.outstanding.exists()):
        raise ValueError(f"{args.run}: not a run folder (no run.json, journal/, chaos.jsonl or chaos/outstanding.json)")
    recovered, failed = heal_run(args.run)
    print(f"chaos heal {args.run}: {recovered} recovered, {len(failed)} failed")
    for e in failed:
        print(f"  still outstanding: {e['key']}")
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "validate"):
        s = sub.add_parser(name)
        s.add_argument("plan", nargs=None if name == "run" else "?")
        s.add_argument("--backend", choices=sorted(REGISTRY), default="local" if name == "run" else None)
        s.add_argument("--state-dir", type=not_empty("$REFBOT_STATE_DIR or .stack"),
                       help="local backend: the stack's state dir (default $REFBOT_STATE_DIR or .stack)")
        s.add_argument("--targets", metavar="FILE", type=not_empty("the stack's state dir"),
                       help="local backend: your own processes, named in a targets file")
        s.add_argument("--backend-opt", action="append", metavar="KEY=VALUE",
                       help="backend constructor option (e.g. namespace=chat for kubernetes)")
        s.add_argument("--run-dir", type=_one_line_dir("results/chaos-<time>" if name == "run"
                                                    else "/tmp: validating writes nothing"),
                       help="where chaos.jsonl and chaos/outstanding.json go")
        s.add_argument("--toxiproxy", type=_toxiproxy_option, help="Toxiproxy API URL for toxic faults")
        if name == "run":
            s.add_argument("--dry-run", action="store_true", help="print what would be touched; touch nothing")
    h = sub.add_parser("heal", help="recover what a killed controller left outstanding")
    h.add_argument("run", help="the run folder (results/<run>)")
    t = sub.add_parser("targets", help="start, stop or show the processes a targets file names")
    t.add_argument("action", choices=("start", "stop", "status"))
    t.add_argument("file", help="the targets file (docs/chaos.md)")
    t.add_argument("--timeout", type=_timeout, default=60.0, help="start: seconds for each to become healthy")
    args = p.parse_args(argv)
    if args.cmd == "validate" and not (args.plan or args.targets):
        p.error("validate needs a plan, a targets file (--targets FILE), or both")
    if args.cmd in ("run", "validate") and args.targets and args.backend not in (None, "local"):
        p.error("--targets goes with the local backend")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    try:
        return {"run": cmd_run, "validate": cmd_validate, "heal": cmd_heal, "targets": cmd_targets}[args.cmd](args)
    except PlanError as exc:  # each problem names the plan's file: one line each, however the file is named
        print("error: invalid chaos plan:\n  " + "\n  ".join(printable(redact.text(p)) for p in exc.problems),
              file=sys.stderr)
        return 2
    except registry.MemberUnhealthy as exc:
        print(f"error: {redact.text(exc)}", file=sys.stderr)
        return 1
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {redact.text(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from contracts.console import escape_unencodable

    escape_unencodable()  # an ASCII terminal or log: a dash or a path's é escaped, no crash
    sys.exit(main())
