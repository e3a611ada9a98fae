"""The chaos timeline and load steps: when each fault was active, and which step was running.

A fault is active from its apply to its first successful recover, or to the end of the run when
none was recorded (the heal may have been the thing that failed: a recover that errored ends
nothing). Applies that errored are dropped: nothing was injected.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from contracts import codec
from contracts.jsonl import printable, read_jsonl
from contracts.runfolder import RunFolder
from contracts.timeline import chaos_event, load_step
from oracle.history import JournalError


@dataclass(frozen=True)
class Fault:
    fault: str
    kind: str
    target: str | None
    instance: str | None
    start: float
    end: float | None  # None: never recovered
    touched: int | None = None  # what the apply hit, when the backend can tell (connections killed...)
    via: str | None = None      # how it was healed (the recover record's ``via``: its own end, the stop's heal...)

    @property
    def effective(self) -> bool:
        """False when the fault touched nothing (0 connections killed): it tested nothing."""
        return self.touched != 0


FAR_S = 3600.0  # a fault applied or recovered this long before the first turn or after the last is not this run's


class TimelineError(JournalError):
    """The chaos timeline cannot be trusted, and with it which failed requests a fault excuses."""


def check_faults(run_dir: Path, faults: list[Fault], first_sent: float | None, last_done: float | None,
                 problems: list[str]) -> None:
    """TimelineError when chaos.jsonl has a line that cannot be read, or a fault far outside the run's turns
    (applied at 0, recovered in the year 4000): either way the faults excuse failed requests that nothing may
    have excused, so the errors gate would judge by a damaged file."""
    chaos = printable(RunFolder(run_dir).chaos)  # as contracts.jsonl.problem names the file
    bad = next((p for p in problems if p.startswith(chaos + ":")), None)
    if bad is not None:
        raise TimelineError(f"{bad}. The chaos timeline says which failed requests a fault excuses; repair the line "
                            "(or remove the file to judge without faults)")
    if first_sent is None or last_done is None:
        return
    for f in faults:
        if f.start < first_sent - FAR_S or f.start > last_done + FAR_S or \
                (f.end is not None and f.end > last_done + FAR_S):
            raise TimelineError(f"{chaos}: fault {f.fault} ({f.kind}) from {at(f.start)} to "
                                f"{at(f.end) if f.end is not None else 'the end'} lies far outside the run's turns "
                                f"({at(first_sent)} to {at(last_done)}): the timeline is damaged or another "
                                "run's; repair it (or remove the file to judge without faults)")


def at(epoch: float) -> str:
    """An epoch in a message: the number and its UTC time, when it is one."""
    try:
        return f"{epoch:.0f} ({datetime.fromtimestamp(epoch, tz=timezone.utc):%Y-%m-%d %H:%M:%S} UTC)"
    except (OverflowError, OSError, ValueError):
        return f"{epoch:g}"


def _records(path: Path, problems: list[str], decode):
    return read_jsonl(path, decode, problems=problems) if path.exists() else ()


def load_faults(run_dir: Path, problems: list[str] | None = None) -> list[Fault]:
    """Every fault that was injected, in time order: each apply paired with the next recover of the same
    (fault, instance). The one pairing: the audit's windows and charges and the report's shading use it."""
    problems = problems if problems is not None else []
    records = [r for r in _records(RunFolder(run_dir).chaos, problems, chaos_event) if r.get("time") is not None]
    open_: dict[tuple, dict] = {}
    faults = []
    for r in sorted(records, key=lambda r: float(r["time"])):
        key = (r.get("fault"), r.get("instance"))
        if r.get("event") == "apply" and r.get("outcome", "ok") == "error":
            problems.append(f"chaos: fault {r.get('fault')} ({r.get('kind')} on {r.get('instance')}) failed to "
                            f"apply: {r.get('error')}")
        elif r.get("event") == "apply" and key not in open_:
            open_[key] = r
        elif r.get("event") == "recover" and key in open_ and r.get("outcome", "ok") != "error":
            faults.append(_fault(open_.pop(key), float(r["time"]), r.get("via")))  # a failed heal ends nothing
    faults += [_fault(r, None, None) for r in open_.values()]
    return sorted(faults, key=lambda f: f.start)


def unapplied(run_dir: Path) -> list[str]:
    """The fault occurrences whose apply failed (a target not running, a backend error): ``fault (kind on
    instance): why``. Not the ones the plan's own rules skipped (``skipped:``: max_concurrent, an instance still
    under another fault), which validate and the run's start predict. `chaos run` exits 1 for these."""
    return [f"{r.get('fault')} ({r.get('kind')} on {r.get('instance')}): {r.get('error')}"
            for r in _records(RunFolder(run_dir).chaos, [], chaos_event)
            if r.get("event") == "apply" and r.get("outcome") == "error"
            and not str(r.get("error") or "").startswith("skipped:")]


def idle_plan(run_dir: Path, faults: list[Fault], load_end: float | None = None) -> str | None:
    """A warning when run.json names a chaos plan and no fault of it was applied (each due after the load ended,
    or none could apply), or when some of its faults were never applied (due after the load ended: ``at: 60s`` in
    a 12 s run): a PASS of such a run says nothing of surviving them, and nothing else would say so. ``load_end``:
    when the load's last turn ended (the tally's), named beside the faults due after it."""
    try:
        meta = codec.load_document(RunFolder(run_dir).run_json)
        plan = meta.get("plan")
    except (OSError, ValueError, AttributeError):
        return None
    if not plan or not isinstance(plan, str):
        return None
    if not faults:
        return (f"chaos: the plan {plan} applied no fault during the run (each was due after the load ended, or "
                "none could apply): this verdict says nothing of surviving faults")
    return _never_applied(run_dir, meta, plan, load_end)


LATE_SHOWN = 8  # faults of the plan named in the warning; the rest are counted


def _never_applied(run_dir: Path, meta: dict, plan: str, end: float | None) -> str | None:
    """The plan's fault occurrences that chaos.jsonl has no apply of (neither applied nor skipped), named by id with
    when each was due, beside when the load ended. The plan is the copy run.json keeps (``plan_text``, read when the
    test started: the file may have changed since); a run.json without it, or one that no longer parses, says
    nothing here."""
    from chaos.plan import PlanError, parse_plan  # the plan language: chaos depends on no part of goldfish

    text, start = meta.get("plan_text"), meta.get("start")
    if not isinstance(text, str) or not _number(start):
        return None
    try:
        schedule = parse_plan(text, plan).schedule()
    except (PlanError, ValueError, TypeError):
        return None
    tried = {r.get("fault") for r in _records(RunFolder(run_dir).chaos, [], chaos_event) if r.get("event") == "apply"}
    late: dict[str, list] = {}
    for offset, fault, k in schedule:
        if f"{fault.id}#{k}" not in tried:
            late.setdefault(fault.id, []).append((offset, fault.kind, k))
    if not late:
        return None
    named = []
    for fid, items in list(late.items())[:LATE_SHOWN]:
        (first, kind, k0), (last, _, kn) = items[0], items[-1]
        named.append(f"{fid}#{k0} ({kind}) due at +{first:g}s" if len(items) == 1 else
                     f"{fid}#{k0} to #{kn} ({kind}, {len(items)} occurrences) due from +{first:g}s to +{last:g}s")
    more = f" and {len(late) - LATE_SHOWN} more fault(s)" if len(late) > LATE_SHOWN else ""
    ended = (f"the load ended at +{end - start:.1f}s, at {at(end)}" if end is not None and end >= start else
             "the load ended before them")
    count = sum(len(items) for items in late.values())
    return (f"chaos: {count} of the {len(schedule)} fault occurrence(s) of the plan {plan} never applied: "
            f"{', '.join(named)}{more} after the test started at {at(start)}, but {ended}: this verdict says "
            "nothing of surviving them (a longer run, -t, or an earlier 'at' would test them)")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fault(apply: dict, end: float | None, via: str | None) -> Fault:
    return Fault(str(apply.get("fault")), str(apply.get("kind") or "?"), apply.get("target"), apply.get("instance"),
                 float(apply["time"]), end, _touched(apply.get("detail")), via)


def _touched(detail) -> int | None:
    value = detail.get("touched") if isinstance(detail, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_steps(run_dir: Path, problems: list[str] | None = None) -> list[dict]:
    problems = problems if problems is not None else []
    steps: dict[int, dict] = {}
    for r in _records(RunFolder(run_dir).steps, problems, load_step):
        if r.get("step") is None:
            continue
        steps.setdefault(int(r["step"]), {}).update({k: v for k, v in r.items() if v is not None})
    return [steps[k] for k in sorted(steps)]
