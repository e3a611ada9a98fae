"""The backend interface: one fault vocabulary (chaos/faults.py), several ways to carry it out.

A backend resolves logical targets (``bot``, ``redis``, ``lb``, a member name) to concrete
instances, applies a fault to one instance, and recovers it. The controller owns scheduling,
the timeline, the outstanding file and the blast-radius checks; a backend only acts.

Contract for implementers (see chaos/backends/local.py for a complete example):

- ``name``: the registry name (``local``, ``docker``, ``kubernetes``).
- ``kinds``: frozenset of fault kinds from chaos.faults this backend can do. Anything else is
  refused at plan validation time, before anything is touched.
- ``instances(target)``: concrete instance names for a logical target, sorted, [] if none.
- ``apply(fault, instance) -> dict``: do the fault; return a JSON-serialisable *undo* record
  holding everything ``recover`` needs — it is written to outstanding.json and may be handed to
  a *different process* (``python -m chaos heal``) built with ``cls(**backend.config())``.
  Raise on failure (the controller logs it; nothing is then outstanding).
- ``recover(fault, instance, undo)``: undo the fault; must be idempotent (heal may retry after
  a crash mid-recovery: recovering an already-recovered instance is a success). Raise on failure.
  It may return a JSON dict (e.g. which member is primary now): the recover record's ``detail``.
- ``describe(instance) -> str``: one line for the dry run (pid/container id, port, uptime).
- ``config() -> dict``: JSON-serialisable constructor kwargs so heal can rebuild the backend.
- ``check(fault) -> None``: optional extra validation; raise UnsupportedFault with a clear reason.

``toxic`` faults are not a backend's job: when a Toxiproxy URL is configured (plan key
``toxiproxy:`` or ``--toxiproxy``) the controller routes them to chaos.backends.toxiproxy,
whatever the main backend is. Signals: never signal a pid without ``refuse_own_process``.
"""
from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod

from chaos.faults import Fault


class UnsupportedFault(Exception):
    """The backend cannot carry out this fault (kind, parameter, or missing configuration)."""


class MissingExtra(RuntimeError):
    """A backend's client library is an optional extra that is not installed."""

    def __init__(self, backend: str, package: str, extra: str):
        super().__init__(f"the {backend} backend needs the {package!r} package, which is not installed: install "
                         f"goldfish[{extra}] (pip install -e '.[{extra}]' in the goldfish checkout)")


class Backend(ABC):
    name: str = "abstract"
    kinds: frozenset[str] = frozenset()
    stopping: threading.Event | None = None  # the controller's stop: a long apply goes no further (``pause_between``)

    def pause_between(self, seconds: float) -> bool:
        """Wait ``seconds`` between the steps of a long apply (a rolling restart's replicas); True when the run is
        stopping, so the apply ends with the steps done: one pausing 127 s outlived the load and the stop's wait,
        and rolled on after the heal (chaos hunt 18)."""
        if self.stopping is None:
            time.sleep(seconds)
            return False
        return self.stopping.wait(seconds)

    @abstractmethod
    def instances(self, target: str) -> list[str]:
        """Concrete instance names for a logical target; [] when the target has none."""

    @abstractmethod
    def apply(self, fault: Fault, instance: str) -> dict:
        """Apply the fault to one instance; return the JSON-serialisable undo record."""

    @abstractmethod
    def recover(self, fault: Fault, instance: str, undo: dict) -> dict | None:
        """Undo the fault (idempotent); optionally return a JSON dict for the timeline's ``detail``."""

    def describe(self, instance: str) -> str:
        """One line about the instance for the dry run."""
        return instance

    def not_running(self, instance: str) -> str | None:
        """Why the instance is not running now (a fault on it will not apply), or None: said before a run."""
        return None

    def config(self) -> dict:
        """Constructor kwargs (JSON) to rebuild this backend in another process."""
        return {}

    def check(self, fault: Fault) -> None:
        """Raise UnsupportedFault when this backend cannot do the fault."""
        if fault.kind not in self.kinds:
            raise UnsupportedFault(
                f"backend {self.name!r} cannot do fault kind {fault.kind!r} "
                f"(it supports: {', '.join(sorted(self.kinds)) or 'nothing'})")

    def close(self) -> None:
        """Release clients/connections."""


def own_pids() -> set[int]:
    """Pids the controller must never signal: itself, its parent (Locust), their process groups."""
    pids = {os.getpid(), os.getppid()}
    return pids


def refuse_own_process(pid: int, what: str) -> None:
    """Raise if pid is the controller itself, its parent, or in the controller's process group.

    Why: the controller runs inside Locust; a stale or wrong state file must never make it kill
    the load generator (or the test runner) it lives in.
    """
    if pid <= 1:
        raise PermissionError(f"refusing to signal {what} (pid {pid}): it is init, or no process at all")
    if pid in own_pids():
        raise PermissionError(f"refusing to signal {what} (pid {pid}): it is the controller or its parent")
    try:
        if os.getpgid(pid) in (os.getpgrp(), os.getpgid(os.getppid())):
            raise PermissionError(f"refusing to signal {what} (pid {pid}): it is in the controller's process group")
    except ProcessLookupError:
        pass
