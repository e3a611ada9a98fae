"""Outstanding faults: applied (or being applied) and not yet recovered, in memory and on disk.

The file ``results/<run>/chaos/outstanding.json`` is rewritten atomically (temp file + rename)
on every change, so a SIGKILLed controller always leaves a readable list for
``python -m chaos heal``. An entry is written *before* the fault is applied (state
``applying``), so even a kill between the signal and the bookkeeping leaves a trace.
"""
from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from contracts import codec
from contracts.runfolder import RunFolder


class Outstanding:
    def __init__(self, run_dir: str | Path, backend: str = "", backend_config: dict | None = None):
        self.path = RunFolder(run_dir).outstanding
        self.backend = backend
        self.backend_config = backend_config or {}
        self._entries: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.unwritten: str | None = None  # why the file could not be written last (a full disk), once

    @staticmethod
    def key(fault_id: str, instance: str) -> str:
        return f"{fault_id}@{instance}"

    @classmethod
    def load(cls, run_dir: str | Path) -> "Outstanding":
        """Read what a previous controller left (empty when there is no file)."""
        self = cls(run_dir)
        if self.path.exists():
            try:
                data = codec.load_document(self.path)  # DecodeError naming the file
            except OSError as exc:  # a directory, no permission: said as the file's other damage is, not a raw errno
                what = "not a regular file but a directory" if self.path.is_dir() else \
                    f"cannot be read ({exc.strerror or exc})"
                raise OutstandingError(f"{self.path}: {what}: the list of faults still in force cannot be read, so "
                                       "none can be called healed (the file is written by chaos; see docs/chaos.md "
                                       "'Heal semantics')") from None
            self.backend, self.backend_config, faults = _checked(data, self.path)
            self._entries = {e["key"]: e for e in faults}
        return self

    def add(self, entry: dict) -> None:
        """entry: key, fault (Fault.to_dict()), instance, target, state, undo, applied."""
        with self._lock:
            self._entries[entry["key"]] = entry
            self._write()

    def update(self, key: str, **changes) -> None:
        with self._lock:
            if key in self._entries:
                self._entries[key].update(changes)
                self._write()

    def remove(self, key: str) -> None:
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._write()

    def entries(self) -> list[dict]:
        with self._lock:
            return [dict(e) for e in self._entries.values()]

    def instances(self) -> set[str]:
        with self._lock:
            return {i for e in self._entries.values() for i in (e["instance"], *e.get("members", ()))}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _write(self) -> None:
        data = {"backend": self.backend, "backend_config": self.backend_config,
                "faults": list(self._entries.values())}
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".outstanding.", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(codec.dumps_document(data))
                f.flush()   # no fsync: rename is atomic against a killed process, which is the risk here
            os.replace(tmp, self.path)
        except OSError as exc:  # a full disk: the faults are healed all the same; the file keeps its last state
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            if self.unwritten is None:
                self.unwritten = f"{self.path}: {exc.strerror or exc}"


# An entry's undo as the backends write it and their recover reads it (a process id, the HAProxy server, ...)
UNDO_FIELDS = {"pid": int, "pid_start": int, "serving_before": int, "server": str, "container": str, "uid": str,
               "selector": str, "proxy": str, "toxic": str}


class OutstandingError(ValueError):
    """An outstanding.json that cannot say what to heal; the message names the file and the field."""


def _checked(data: dict, path: Path) -> tuple[str, dict, list[dict]]:
    """(backend, its config, the fault entries) of a decoded outstanding.json, or OutstandingError.

    Why: heal runs after a crash, on a file that may be cut short or edited by hand; a wrong shape
    must say where it is wrong, not fail inside a backend."""
    def bad(where: str, what: str):
        raise OutstandingError(f"{path}: {where}: {what} (the file is written by chaos; see docs/chaos.md "
                               "'Heal semantics')")

    if "faults" not in data:   # chaos always writes it ([] when all is healed): without it, nothing says what is
        bad("faults", "missing: the list of faults still in force cannot be read, so none can be called healed")
    backend, config, faults = data.get("backend", ""), data.get("backend_config") or {}, data["faults"]
    if not isinstance(backend, str):
        bad("backend", f"must be a backend name, not {type(backend).__name__}")
    if not isinstance(config, dict):
        bad("backend_config", f"must be an object, not {type(config).__name__}")
    if not isinstance(faults, list):
        bad("faults", f"must be a list, not {type(faults).__name__}")
    for i, entry in enumerate(faults):
        if not isinstance(entry, dict):
            bad(f"faults[{i}]", f"must be an object, not {type(entry).__name__}")
        for name in ("key", "instance"):
            if not isinstance(entry.get(name), str):
                bad(f"faults[{i}].{name}", "missing or not text")
        members = entry.get("members", [])
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            bad(f"faults[{i}].members", "must be a list of instance names")
        fault = entry.get("fault")
        if not isinstance(fault, dict):
            bad(f"faults[{i}].fault", "missing or not an object")
        for name in ("id", "kind", "target"):
            if not isinstance(fault.get(name), str):
                bad(f"faults[{i}].fault.{name}", "missing or not text")
        if not isinstance(entry.get("undo") or {}, dict) or not isinstance(fault.get("params") or {}, dict):
            bad(f"faults[{i}]", "undo and fault.params must be objects")
        for name, value in (entry.get("undo") or {}).items():   # what the backends' recover reads, typed
            want = UNDO_FIELDS.get(name)
            if value is not None and want and (isinstance(value, bool) or not isinstance(value, want)):
                bad(f"faults[{i}].undo.{name}", f"must be {'a whole number' if want is int else 'text'}, not "
                    f"{type(value).__name__} {value!r:.40} (fault {fault['id']} on {entry['instance']})")
        duration = fault.get("duration")
        if duration is not None and (isinstance(duration, bool) or not isinstance(duration, (int, float))):
            bad(f"faults[{i}].fault.duration", "must be a number of seconds or null")
    return backend, config, faults
