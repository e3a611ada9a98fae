"""The chaos timeline and load steps: when each fault was active, and which step was running.

A fault is active from its apply to its first successful recover, or to the end of the run when
none was recorded (the heal may have been the thing that failed: a recover that errored ends
nothing). Applies that errored are dropped: nothing was injected.
"""
from __future__ import annotations

import math
import stat
from collections import Counter
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
    """TimelineError when chaos.jsonl has a line that cannot be read, a fault far outside the run's turns
    (applied at 0, recovered in the year 4000), or no record at all of a fault occurrence run.json's plan had due
    during the load (the file torn, emptied or removed): each way the faults excuse failed requests that nothing
    may have excused, or leave unexcused those a fault caused, so the errors gate would judge by a damaged file."""
    chaos = printable(RunFolder(run_dir).chaos)  # as contracts.jsonl.problem names the file
    bad = next((p for p in problems if p.startswith(chaos + ":")), None)
    if bad is not None:
        raise TimelineError(f"{bad}. The chaos timeline says which failed requests a fault excuses; repair the line "
                            f"({_without_faults(run_dir)})")
    if first_sent is None or last_done is None:
        return
    for f in faults:
        if f.start < first_sent - FAR_S or f.start > last_done + FAR_S or \
                (f.end is not None and f.end > last_done + FAR_S):
            raise TimelineError(f"{chaos}: fault {f.fault} ({f.kind}) from {at(f.start)} to "
                                f"{at(f.end) if f.end is not None else 'the end'} lies far outside the run's turns "
                                f"({at(first_sent)} to {at(last_done)}): the timeline is damaged or another "
                                f"run's; repair it ({_without_faults(run_dir)})")
    _require_recorded(run_dir, last_done)


ENDING_S = 2.0  # an occurrence due this close to the load's end may have been stopped before it applied (the
                # scheduler a little late under load, the test stopping): no record of it is no damage


def _require_recorded(run_dir: Path, end: float) -> None:
    """TimelineError when run.json's plan had fault occurrences due during the load (more than ``ENDING_S``
    before its end) and chaos.jsonl has no apply of them, neither applied, failed nor skipped: under Locust the
    controller records every occurrence it reaches, so the timeline was torn (a first line cut short, a torn last
    line that was an apply), emptied or removed. Judged without them, the failed requests the faults caused
    would fail the run on the errors gate."""
    plan = _plan(run_dir)
    if plan is None:
        return
    name, start, schedule = plan
    folder = RunFolder(run_dir)
    state = _state(folder.chaos)
    # a torn last line may be the apply of an occurrence due as the load ended: then no grace for the stop
    ending = 0.0 if state.startswith("torn") else ENDING_S
    applies = _applies(run_dir)
    t0 = _armed(schedule, applies, start)
    missing = [item for item in _unrecorded(applies, schedule) if _when(t0 + item[0], end, ending) == "during"]
    if not missing:
        return
    chaos = printable(folder.chaos)
    offset, fault, k = missing[0]
    raise TimelineError(
        f"{chaos} has no record of {len(missing)} fault occurrence(s) the plan {name} had due during the load "
        f"(first: {fault.id}#{k} ({fault.kind} on {fault.target}) due at +{offset:g}s; the load ended at "
        f"+{end - start:.1f}s): the chaos timeline is {state}, so which failed requests a fault "
        f"caused cannot be told; restore it from a whole copy of the run folder, "
        f"{_without_faults(run_dir, folder.chaos.exists())}")


def _state(path: Path) -> str:
    """What is wrong with chaos.jsonl as a whole, as far as it shows: missing, empty, its last line cut short."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # not a file to read (load_faults said so)
            return "incomplete"
        size = st.st_size
        if not size:
            return "empty"
        with open(path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                return "torn (its last line is cut short, as a crash or a partial copy leaves it)"
    except FileNotFoundError:
        return "missing (no such file)"
    except OSError:
        pass
    return "incomplete"


def _without_faults(run_dir: Path, present: bool = True) -> str:
    """The deliberate way to judge a run without faults: with no plan in run.json, no chaos.jsonl; with one, the
    plan out of run.json too (else a missing timeline is taken for a damaged one)."""
    if _plan_named(run_dir):
        return (f"or, to judge without faults, {'remove the file and ' if present else ''}set \"plan\" to null in "
                f"{printable(RunFolder(run_dir).run_json)}")
    return "or remove the file to judge without faults"


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
    """A warning when run.json names a chaos plan and no fault of it was applied, or when some of its occurrences
    were never applied (due after the load ended: ``at: 60s`` in a 12 s run): a PASS of such a run says nothing of
    surviving them, and nothing else would say so. Each is said with why, the due time compared with the load's
    end (``load_end``: when its last turn ended, the tally's)."""
    name = _plan_named(run_dir)
    if name is None:
        return None
    plan = _plan(run_dir)
    if not faults:
        why = _none_applied(run_dir, plan, load_end) if plan is not None else \
            "each was due after the load ended, or none could apply"
        return (f"chaos: the plan {name} applied no fault during the run ({why}): this verdict says nothing of "
                "surviving faults")
    return _never_applied(run_dir, plan, load_end) if plan is not None else None


LATE_SHOWN = 8  # faults of the plan named in the warning; the rest are counted


def _plan_named(run_dir: Path) -> str | None:
    """The chaos plan run.json names (its path, as given to --chaos), or None."""
    try:
        plan = codec.load_document(RunFolder(run_dir).run_json).get("plan")
    except (OSError, ValueError, AttributeError):
        return None
    return plan if plan and isinstance(plan, str) else None


def _plan(run_dir: Path) -> tuple[str, float, list] | None:
    """(the plan's name, the test's start, its schedule: (offset s, fault, k) in time order) from run.json: the copy
    of the plan it keeps (``plan_text``, read when the test started: the file may have changed since). None when
    run.json names no plan, keeps no copy, or the copy no longer parses: then nothing is said of its occurrences."""
    from chaos.plan import PlanError, parse_plan  # the plan language: chaos depends on no part of goldfish

    try:
        meta = codec.load_document(RunFolder(run_dir).run_json)
        name, text, start = meta.get("plan"), meta.get("plan_text"), meta.get("start")
    except (OSError, ValueError, AttributeError):
        return None
    if not name or not isinstance(name, str) or not isinstance(text, str) or not _number(start):
        return None
    try:
        return name, float(start), parse_plan(text, name).schedule()
    except (PlanError, ValueError, TypeError):
        return None


def _applies(run_dir: Path) -> list[dict]:
    return [r for r in _records(RunFolder(run_dir).chaos, [], chaos_event) if r.get("event") == "apply"]


def _unrecorded(applies: list[dict], schedule: list) -> list:
    """The schedule's occurrences chaos.jsonl has no apply of (neither applied, failed nor skipped)."""
    tried = {r.get("fault") for r in applies}
    return [(offset, fault, k) for offset, fault, k in schedule if f"{fault.id}#{k}" not in tried]


def _armed(schedule: list, applies: list[dict], start: float) -> float:
    """When the plan was armed (its offsets count from there): an apply's ``planned`` less its offset, else the
    test's start (run.json's, taken just before the controller is built: at most a validation earlier)."""
    offsets = {f"{fault.id}#{k}": offset for offset, fault, k in schedule}
    for r in applies:
        planned, offset = r.get("planned"), offsets.get(r.get("fault"))
        if offset is not None and _number(planned) and start - 1 <= planned - offset <= start + FAR_S:
            return float(planned) - offset
    return start


def _when(due: float, end: float | None, ending: float = ENDING_S) -> str:
    """An occurrence due at ``due`` beside the load's end: "during" it, at its "ending" (within ``ending`` s: the
    test may have stopped first), "after" it, or "unknown" (no end)."""
    if end is None:
        return "unknown"
    return "after" if due >= end else "ending" if due >= end - ending else "during"


def _ended(start: float, end: float | None) -> str:
    return (f"the load ended at +{end - start:.1f}s, at {at(end)}" if end is not None and end >= start else
            "the load ended before them" if end is not None else "the load's end is not known")


def _none_applied(run_dir: Path, plan: tuple, end: float | None) -> str:
    """Why no occurrence of the plan applied, counted by reason: skipped or failed (on the timeline), due after
    the load ended, due as it ended, or with no record though due during it."""
    _name, start, schedule = plan
    applies = _applies(run_dir)
    t0 = _armed(schedule, applies, start)
    late = Counter(_when(t0 + offset, end) for offset, _f, _k in _unrecorded(applies, schedule))
    tried = len(schedule) - sum(late.values())
    said = ([f"{tried} skipped or failed to apply, as the timeline says"] if tried else []) + [
        text.format(n=late[when]) for when, text in (
            ("after", "{n} due after the load ended"), ("ending", f"{{n}} due in its last {ENDING_S:g}s, as the test "
                                                                  "stopped"),
            ("during", "{n} due during it with no record on the timeline"), ("unknown", "{n} with no record"))
        if late[when]]
    return f"of its {len(schedule)} occurrence(s): {', '.join(said) or 'none'}; {_ended(start, end)}"


def _never_applied(run_dir: Path, plan: tuple, end: float | None) -> str | None:
    """The plan's fault occurrences that chaos.jsonl has no apply of (neither applied nor skipped), named by id with
    when each was due, beside when the load ended, and why by that: due after it, as it ended, or during it with
    no record (a torn timeline: the audit refuses such a run first, check_faults)."""
    name, start, schedule = plan
    applies = _applies(run_dir)
    unrecorded = _unrecorded(applies, schedule)
    if not unrecorded:
        return None
    t0 = _armed(schedule, applies, start)
    groups: dict[str, dict[str, list]] = {}
    for offset, fault, k in unrecorded:
        groups.setdefault(_when(t0 + offset, end), {}).setdefault(fault.id, []).append((offset, fault.kind, k))
    ended = _ended(start, end)
    reasons = {
        "after": f"after the test started at {at(start)}, but {ended}",
        "unknown": f"after the test started at {at(start)}, and {ended}",
        "ending": f"after the test started at {at(start)}, within {ENDING_S:g}s of the load's end (as the test "
                  f"stopped: {ended})",
        "during": f"after the test started at {at(start)}, before {ended}, yet the timeline has no record of "
                  "them (torn or missing)"}
    parts = []
    for when in ("after", "ending", "unknown", "during"):
        if when in groups:
            named = [_occurrences(fid, items) for fid, items in list(groups[when].items())[:LATE_SHOWN]]
            more = f" and {len(groups[when]) - LATE_SHOWN} more fault(s)" if len(groups[when]) > LATE_SHOWN else ""
            parts.append(f"{', '.join(named)}{more} {reasons[when]}")
    advice = " (a longer run, -t, or an earlier 'at' would test them)" if set(groups) - {"during"} else ""
    return (f"chaos: {len(unrecorded)} of the {len(schedule)} fault occurrence(s) of the plan {name} never applied: "
            f"{'; '.join(parts)}: this verdict says nothing of surviving them{advice}")


def _occurrences(fid: str, items: list) -> str:
    (first, kind, k0), (last, _, kn) = items[0], items[-1]
    return (f"{fid}#{k0} ({kind}) due at +{first:g}s" if len(items) == 1 else
            f"{fid}#{k0} to #{kn} ({kind}, {len(items)} occurrences) due from +{first:g}s to +{last:g}s")


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
