"""Getting every worker's journal into the master's run folder.

Each worker writes its own local shard (``<run>/workers/<worker-id>.jsonl``, flushed per record)
and ships the same lines to the master in batches every ``BATCH_INTERVAL`` seconds and at
test_stop/quitting, with Locust's custom messages. The master appends them to
``<run>/journal/<worker-id>.jsonl``. Each test has its own run folder: workers take it from the master's
options at each start, and the master files a batch only under the run it names.

Completeness at the end of a run: when the master stops, it asks every worker that has not yet
sent its final batch to stop its users and flush (``goldfish_drain``) and waits for the final
batches; then, for any worker whose local shard it can read (same machine: ``--processes`` or
loopback workers), it appends whatever lines the messages did not bring. So a SIGKILLed worker
on the master's machine loses only its in-flight turns; on another machine the master's copy
lacks at most the last unsent batch (~0.5 s of that worker's turns), which stay in the worker's
local shard.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import gevent

from contracts.jsonl import complete_lines
from contracts.runfolder import RunFolder
from locustfiles.journal import JournalFile

log = logging.getLogger("goldfish")

MSG_BATCH = "goldfish_journal"
MSG_DRAIN = "goldfish_drain"
MSG_STEP = "goldfish_step"
BATCH_INTERVAL = 0.5
DRAIN_TIMEOUT = 15.0
MASTER_GONE_S = 10.0  # a worker quits after this long without a heartbeat from its master (Locust's own: 60 s)


def worker_shard_path(run_dir: str | Path, worker_id: str) -> Path:
    return RunFolder(run_dir).worker_shard(worker_id)


class WorkerShipper:
    """Batches journal lines on a worker and sends them to the master every BATCH_INTERVAL s."""

    def __init__(self, runner, shard: Path, run: str, interval: float = BATCH_INTERVAL):
        self.runner = runner
        self.shard = str(Path(shard).resolve())
        self.run = run  # the run id the master files these batches under
        self.pending: list[bytes] = []
        self.sent = 0
        self.seq = 0
        self.greenlet = gevent.spawn(self._loop, interval)

    def add(self, line: bytes) -> None:
        self.pending.append(line)

    def _loop(self, interval: float) -> None:
        while True:
            gevent.sleep(interval)
            self.flush()

    def flush(self, final: bool = False) -> None:
        if not self.pending and not final:
            return
        lines, self.pending = self.pending, []
        data = {"worker": self.runner.client_id, "run": self.run, "host": socket.gethostname(), "shard": self.shard,
                "seq": self.seq, "count": len(lines), "total": self.sent + len(lines),
                "lines": b"".join(lines), "final": final}
        try:
            self.runner.send_message(MSG_BATCH, data)
        except Exception as exc:  # noqa: BLE001 - keep the lines for the next try; the local shard has them anyway
            self.pending = lines + self.pending
            log.warning("could not send a journal batch to the master (%s); will retry", exc)
            return
        self.sent += len(lines)
        self.seq += 1

    def close(self) -> None:
        self.greenlet.kill(block=False)


class MasterWatch:
    """On a worker: stop when the master is gone (killed, its host down), within MASTER_GONE_S.

    Why: Locust's own worker waits 60 s without the master's heartbeat (answered every second)
    before it quits, sending load all the while that no master will audit. The clock starts at the
    first heartbeat, so a worker may still be started before its master."""

    def __init__(self, environment, timeout: float = MASTER_GONE_S):
        self.environment, self.timeout = environment, timeout
        self.last: float | None = None
        environment.events.heartbeat_received.add_listener(self.on_heartbeat)
        self.greenlet = gevent.spawn(self._watch)

    def on_heartbeat(self, **_kw) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        while self.last is None or time.monotonic() - self.last < self.timeout:
            gevent.sleep(min(1.0, self.timeout / 4))
        log.error("no heartbeat from the master for %.0fs: it is gone; stopping this worker (its journal shard "
                  "stays in workers/)", self.timeout)
        self.environment.runner.quit()


@dataclass
class WorkerJournal:
    path: Path
    received: int = 0
    final: bool = False
    shard: str | None = None
    _file: JournalFile | None = None

    def write(self, data: bytes) -> None:
        if self._file is None:  # opened on the first line: a worker that journaled nothing leaves no file
            self._file = JournalFile(self.path)
        self._file.write(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class MasterCollector:
    """On the master: writes each worker's batches to <run>/journal/<worker-id>.jsonl, one run at a time."""

    def __init__(self, environment):
        self.environment = environment
        self.run_dir: Path | None = None
        self.workers: dict[str, WorkerJournal] = {}
        environment.runner.register_message(MSG_BATCH, self.on_batch)
        environment.events.worker_connect.add_listener(self.on_connect)

    def start_test(self, run_dir: str | Path) -> None:
        """A new test: its workers' journals go into its own run folder. Every worker connected now takes
        part (so one SIGKILLed before its first batch is still recovered from its local shard at the end)."""
        self.close()
        self.run_dir, self.workers = Path(run_dir), {}
        for client in self.environment.runner.clients.all:
            self._worker(client.id)

    def on_connect(self, client_id: str, **_kw) -> None:
        if self.run_dir is not None:
            self._worker(client_id)

    def _worker(self, worker_id: str) -> WorkerJournal:
        if worker_id not in self.workers:
            self.workers[worker_id] = WorkerJournal(RunFolder(self.run_dir).journal_shard(worker_id))
        return self.workers[worker_id]

    def on_batch(self, environment, msg, **_kw) -> None:
        data = msg.data
        if self.run_dir is None or data.get("run", self.run_dir.name) != self.run_dir.name:
            log.warning("journal batch of %s for run %s arrived outside it: dropped here (the lines are in the "
                        "worker's own shard %s)", data["worker"], data.get("run"), data.get("shard"))
            return
        w = self._worker(data["worker"])
        w.shard = data.get("shard")
        if data["total"] - data["count"] != w.received:
            log.warning("journal batch from %s starts at line %d, expected %d",
                        data["worker"], data["total"] - data["count"], w.received)
        if data["count"]:
            w.write(data["lines"])
            w.received += data["count"]
        if data["final"]:
            w.final = True

    def drain(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """Ask live workers without a final batch to stop and flush; wait for them (bounded)."""
        runner = self.environment.runner

        def waiting() -> list[str]:
            live = {c.id for c in runner.clients.all if c.state != "missing"}
            return [wid for wid in live if not self._worker(wid).final]

        for wid in waiting():
            runner.send_message(MSG_DRAIN, None, client_id=wid)
        deadline = time.monotonic() + timeout
        while waiting() and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if left := waiting():
            log.warning("no final journal batch from %s after %.0fs", ", ".join(left), timeout)

    def recover_local_shards(self) -> int:
        """Append lines that messages did not bring, from workers' shards readable on this machine."""
        recovered = 0
        for wid, w in self.workers.items():
            candidates = [p for p in (w.shard, worker_shard_path(self.run_dir, wid)) if p]
            path = next((Path(p) for p in candidates if os.path.exists(p)), None)
            if path is None:
                continue
            lines = complete_lines(path.read_bytes())
            extra = lines[w.received:]
            if extra:
                w.write(b"".join(extra))
                w.received += len(extra)
                recovered += len(extra)
                log.warning("recovered %d journal lines of worker %s from its local shard %s",
                            len(extra), wid, path)
        return recovered

    def close(self) -> None:
        for w in self.workers.values():
            w.close()
