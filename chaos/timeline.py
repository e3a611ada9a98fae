"""The chaos timeline ``results/<run>/chaos.jsonl``: one record per apply and per recover.

Format: docs/CONTRACTS.md "Chaos timeline". Extra keys (``planned``: the epoch the plan asked
for, ``via``: who recovered, ``detail``: the backend's undo/result) are additions readers ignore.
Each record is flushed as written so a killed controller loses nothing it did.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from chaos.faults import Fault
from contracts import codec
from contracts.runfolder import RunFolder

log = logging.getLogger("chaos")


class Timeline:
    def __init__(self, run_dir: str | Path, backend: str):
        self.path = RunFolder(run_dir).chaos
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self._lock = threading.Lock()
        self.unwritten: str | None = None  # the first record that could not be written, and why (a full disk)

    def record(self, event: str, fault: Fault, instance: str, outcome: str = "ok", error: str | None = None,
               planned: float | None = None, via: str | None = None, detail: dict | None = None,
               when: float | None = None) -> dict:
        rec = {"fault": fault.id, "kind": fault.kind, "target": fault.target, "instance": instance,
               "backend": self.backend, "event": event, "time": time.time() if when is None else when,
               "outcome": outcome, "error": error, "params": dict(fault.params, duration=fault.duration)}
        if planned is not None:
            rec["planned"] = planned
        if via:
            rec["via"] = via
        if detail:
            rec["detail"] = detail
        line = codec.dumps_line(rec)
        try:
            with self._lock:
                with open(self.path, "ab") as f:
                    f.write(line)
        except OSError as exc:  # the fault is healed all the same; the run's end says its timeline is incomplete
            if self.unwritten is None:
                self.unwritten = f"{self.path}: {event} of {fault.id} on {instance}: {exc.strerror or exc}"
                log.error("chaos: cannot write the timeline %s", self.unwritten)
        (log.warning if outcome != "ok" else log.info)(
            "chaos %s %s %s on %s: %s%s", event, fault.id, fault.kind, instance, outcome,
            f" ({error})" if error else "")
        return rec
