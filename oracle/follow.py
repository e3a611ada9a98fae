"""The rolling audit: while a long run goes on, judge the conversations that completed more than
``settle`` ago, every ``every`` seconds. A soak shows its results as it goes (audit/rolling/progress.json,
the goldfish web UI tab), and the final audit re-checks these sessions cheaply — the digest of each
key: type, length, oldest and newest entry — instead of reading them again; a key that changed
since (a Redis crash late in the soak) is read and judged again, so its losses still show.

It runs as its own process, ``python -m oracle follow RUN``, which the Locust master starts with
``--audit-every`` (locustfiles/endofrun.py), so the judging never competes with the load's event
loop. It stops on SIGTERM or SIGINT (after the batch in hand), or when its parent is gone.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from collections import Counter, deque
from pathlib import Path
from typing import Annotated, get_type_hints

import msgspec
import redis

from contracts import codec
from contracts.durations import DurationError, parse_duration
from contracts.runfolder import RunFolder
from oracle.history import PARTITIONS, JournalError, Tail
from oracle.judge import Context, Evidence, Judging, rare_full_collections
from oracle.keys import store_evidence
from oracle.options import OptionError, check_store
from oracle.store import StoreError, StoreOptions, make_reader

STORE_DOWN = (redis.ConnectionError, redis.TimeoutError, StoreError)  # a pass's store trouble: not the end of it
ENV = "GOLDFISH_FOLLOW"  # the store options, as JSON: not on the command line, where `ps` shows passwords
_TYPES = {"user_roles": tuple[str, ...], "assistant_roles": tuple[str, ...],  # a string is not its characters
          "timeout_s": Annotated[float, msgspec.Meta(gt=0, le=3600)]}  # NaN, 0 or -5 was a traceback
# what $GOLDFISH_FOLLOW may hold, field by field: StoreOptions' fields (but a test's hook, on_batch) of their types
_EnvOptions = msgspec.defstruct("_EnvOptions", [
    (f.name, _TYPES.get(f.name, get_type_hints(StoreOptions)[f.name]), f.default)
    for f in dataclasses.fields(StoreOptions) if f.name != "on_batch"], forbid_unknown_fields=True)


def follow(run_dir: Path, store: StoreOptions, every: float, settle: float, stopping) -> dict:
    """Judge completed sessions pass after pass until ``stopping()``; returns the last progress."""
    folder = RunFolder(run_dir)
    reader = make_reader(store)
    reader.check()
    progress = {"sessions": 0, "findings": {}, "passes": 0, "started": time.time()}
    classes: Counter = Counter()
    waiting: deque = deque()  # (noticed complete at, partition, session lines)
    tail = None
    parent = os.getppid()
    orphaned = lambda: os.getppid() != parent  # noqa: E731 - the Locust master is gone
    while not stopping() and not orphaned():
        if tail is None and folder.shards():
            tail = Tail(folder.path)
        if tail is not None:
            waiting.extend((time.time(), p, entry) for p, entry in tail.poll())
            if waiting:  # those that completed just now settle first (a pass every few minutes judges them all)
                _sleep(max(0.0, waiting[-1][0] + settle - time.time()), lambda: stopping() or orphaned())
            now = time.time()
            ready = []
            while waiting and waiting[0][0] <= now - settle:
                ready.append(waiting.popleft())
            if ready:
                try:
                    judged = _judge_pass(folder, store, reader, ready)
                except STORE_DOWN as exc:  # restarting, paused, dropped: judged again next pass (soak hunt 18)
                    waiting.extendleft(reversed(ready))
                    progress["store_errors"] = progress.get("store_errors", 0) + 1
                    progress["store_error"] = f"{time.strftime('%H:%M:%S')}: {exc}"
                    print(f"oracle follow: pass {progress['passes'] + 1}: the store did not answer ({exc}); its "
                          f"{len(ready)} session(s) are judged at the next pass", file=sys.stderr)
                else:
                    for part in judged:
                        progress["sessions"] += part.result.sessions
                        classes.update(part.result.classes)
            progress.update(findings=dict(classes), passes=progress["passes"] + 1, updated=time.time(),
                            waiting=len(waiting))
            _write(folder, progress)
        _sleep(every, lambda: stopping() or orphaned())
    return progress


def _judge_pass(folder: RunFolder, store: StoreOptions, reader, ready: list) -> list:
    """Judge the sessions ``ready`` in a pass; their partitions (their counts in ``result``). A store that stops
    answering midway raises (STORE_DOWN), the files closed: a session judged before it is judged again next pass,
    and the final audit takes a session's last judgement."""
    evidence = store_evidence(reader, folder, store)  # what the store says now: TTLs, evictions so far
    judging = Judging(Context(folder.path, store, True, Evidence.of(evidence), (), [], 5.0, 5.0, rolling=True),
                      list(range(PARTITIONS)))
    try:
        with rare_full_collections():
            for _, p, entry in ready:
                judging.add(p, entry)
            judging.close()
    except STORE_DOWN:
        for part in judging.parts.values():
            part.close()
        raise
    return list(judging.parts.values())


def _write(folder: RunFolder, progress: dict) -> None:
    path = folder.rolling_progress
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(codec.dumps_document(progress))
    tmp.replace(path)


def _sleep(seconds: float, stopping) -> None:
    deadline = time.monotonic() + seconds
    while not stopping() and time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m oracle follow", description=__doc__.splitlines()[0])
    p.add_argument("run", help="the run folder being written")
    p.add_argument("--every", default="5m", help="seconds between passes (default 5m)")
    p.add_argument("--settle", default="2s", help="how long a conversation must be complete before it is judged")
    args = p.parse_args(argv)
    try:
        every, settle = parse_duration(args.every, "--every"), parse_duration(args.settle, "--settle")
        if every < 1:
            raise OptionError(f"--every {args.every}: a pass at least every second, not a busy loop")
        if not RunFolder(args.run).path.is_dir():
            raise OptionError(f"{args.run} is not a folder (the run folder being written)")
        if ENV not in os.environ:
            raise OptionError(f"${ENV} is not set: `--audit-every` starts this command with it")
        try:
            text = os.environ[ENV].encode()  # a byte that is not UTF-8 comes as a lone surrogate
        except UnicodeEncodeError as exc:
            raise OptionError(f"${ENV} is not UTF-8 (byte {ord(exc.object[exc.start]) - 0xdc00:#04x} at "
                              f"{exc.start})") from None
        given = msgspec.convert(codec.loads_object(text), _EnvOptions)
        store = StoreOptions(**msgspec.structs.asdict(given))
        check_store(store)
    except (DurationError, OptionError, TypeError, AttributeError, msgspec.ValidationError, codec.DecodeError) as exc:
        print(f"oracle follow: {exc} (the store options come in ${ENV}, as JSON)", file=sys.stderr)
        return 2
    stop = []
    before = {sig: signal.signal(sig, lambda *_: stop.append(True)) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        progress = follow(Path(args.run), store, every, settle, lambda: bool(stop))
    except (StoreError, JournalError) as exc:  # unreachable at the start, or lines of another run in the journal:
        print(f"oracle follow: {exc}", file=sys.stderr)  # the rolling audit stops; the final audit says it again
        return 2
    finally:  # given back (a caller in the same process keeps its Ctrl-C)
        for sig, handler in before.items():
            signal.signal(sig, handler)
    print(f"oracle follow: {progress['sessions']} sessions judged in {progress['passes']} passes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
