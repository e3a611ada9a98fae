"""The plan language: a YAML list of faults on a schedule, validated with file:line:field messages.

We compose the YAML (node tree with marks) instead of loading it, so every error can name the
line of the offending field. See docs/chaos.md for the language.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from chaos.faults import KINDS, WHOLE_TARGET_KINDS, Fault
from contracts import yamldoc
from contracts.durations import not_ascii_number, parse_duration
from contracts.yamldoc import show

COMMON_KEYS = {"id", "kind", "target", "at", "every", "start", "until", "duration", "count"}
PLAN_KEYS = {"name", "description", "faults", "max_concurrent", "max_blast", "seed", "duration", "toxiproxy"}
MAX_OCCURRENCES = 100_000  # a day-long soak with a fault every second is 86,400
SECONDS_PARAMS = ("grace", "pause", "lag")            # a number of seconds, or a time such as 5s
MS_PARAMS = ("latency", "jitter", "timeout")          # a number of ms, or a time such as 250ms
_PCT_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$", re.ASCII)


class PlanError(ValueError):
    """A plan that cannot run; ``problems`` holds one ``file:line: field: message`` string each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid chaos plan:\n  " + "\n  ".join(problems))


def parse_time(value: Any) -> float:
    """Seconds from ``20s``, ``500ms``, ``1m30s`` or a plain number (contracts.durations); ValueError otherwise."""
    return parse_duration(value)


@dataclass(frozen=True)
class Count:
    """How many instances one occurrence hits: an absolute number, a percentage, or all."""
    n: int | None = 1
    percent: float | None = None

    @classmethod
    def parse(cls, value: Any) -> "Count":
        if value == "all":
            return cls(None, 100.0)
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ValueError(f"count must be >= 1, got {value}")
            return cls(value)
        if isinstance(value, str) and (odd := not_ascii_number(value)):  # '٥٠%' and '５０%' are no 50%
            raise ValueError(f"{show(value)} is not a count: it holds {odd!r} (U+{ord(odd):04X}); a count or a "
                             "percentage is ASCII digits 0-9 (no '_'), e.g. 2 or 50%")
        m = _PCT_RE.match(str(value)) if isinstance(value, str) else None
        if m and 0 < float(m.group(1)) <= 100:
            return cls(None, float(m.group(1)))
        raise ValueError(f"count must be a whole number >= 1, a percentage like 50% (0-100], or 'all', got {show(value)}")

    def of(self, available: int) -> int:
        """Instances hit out of ``available`` (percentages round up, so 1% of anything is one)."""
        if self.percent is not None:
            return min(available, math.ceil(available * self.percent / 100))
        return self.n

    def __str__(self) -> str:
        return f"{self.n}" if self.percent is None else f"{self.percent:g}%"


@dataclass
class PlanFault:
    id: str
    kind: str
    target: str
    at: float | None = None
    every: float | None = None
    start: float | None = None
    until: float | None = None
    duration: float | None = None
    count: Count = field(default_factory=Count)
    params: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)   # field -> 1-based line in the plan file

    def times(self, horizon: float | None) -> list[float]:
        """Occurrence offsets (s from plan start). ``every`` without ``until`` stops at horizon."""
        if self.at is not None:
            return [self.at]
        start = self.every if self.start is None else self.start
        end = self.until if self.until is not None else horizon
        if end is None:
            raise ValueError(f"fault {self.id}: 'every' without 'until' needs a plan duration")
        out, k = [], 0
        while start + k * self.every < end - 1e-9:
            out.append(start + k * self.every)
            k += 1
        return out

    def count_times(self, horizon: float | None) -> int:
        """How many offsets ``times`` gives, without building them (0 when it needs a horizon it lacks)."""
        if self.at is not None:
            return 1
        start = self.every if self.start is None else self.start
        end = self.until if self.until is not None else horizon
        if end is None or not math.isfinite(end) or end - 1e-9 <= start:
            return 0
        return math.ceil((end - 1e-9 - start) / self.every)

    def occurrence(self, k: int) -> Fault:
        return Fault(f"{self.id}#{k}", self.kind, self.target, self.duration, dict(self.params))

    def choose(self, instances: list[str], k: int, seed: int) -> list[str]:
        """Deterministic choice of instances for occurrence k (so the dry run shows the real pick)."""
        if self.kind in WHOLE_TARGET_KINDS:
            return [self.target]
        n = self.count.of(len(instances))
        return sorted(random.Random(f"{seed}:{self.id}#{k}").sample(instances, min(n, len(instances))))


@dataclass
class Plan:
    faults: list[PlanFault]
    path: str = "<plan>"
    name: str = ""
    max_concurrent: int | None = None
    max_blast: Count | None = None
    seed: int = 0
    duration: float | None = None
    toxiproxy: str | None = None
    text: str = ""
    lines: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # faults that will never happen (chaos validate says them)

    @property
    def horizon(self) -> float | None:
        """When the plan ends (s): the end of its last fault, or its duration if that is later; None when it
        repeats forever (an 'every' fault with neither 'until' nor a plan duration). A fault that starts or
        lasts past the duration still runs: the duration bounds only the repeats of an 'every' fault."""
        if self.duration is None and any(f.at is None and f.until is None for f in self.faults):
            return None
        return max([self.duration or 0.0, *(t + (f.duration or 0) for t, f, _ in self.schedule())])

    def schedule(self) -> list[tuple[float, PlanFault, int]]:
        """Every occurrence (offset s, fault, occurrence index) in time order; an 'every' fault without 'until'
        repeats until the plan's duration."""
        items = [(t, f, k) for f in self.faults for k, t in enumerate(f.times(self.duration))]
        return sorted(items, key=lambda x: (x[0], x[1].id, x[2]))

    def where(self, fault: PlanFault | None, key: str) -> str:
        line = (fault.lines if fault else self.lines).get(key)
        return f"{self.path}:{line}" if line else self.path


def load_plan(path: str | Path) -> Plan:
    try:
        text, root = yamldoc.load(path, "plan")
    except yamldoc.YamlError as exc:
        raise PlanError([str(exc)]) from None
    return _parse_root(root, text, str(path))


_value = yamldoc.value
_line = yamldoc.line


def parse_plan(text: str, path: str = "<plan>") -> Plan:
    """Parse and validate a plan (everything that needs no backend); PlanError lists all problems."""
    try:
        root = yamldoc.parse(text, path)
    except yamldoc.YamlError as exc:
        raise PlanError([str(exc)]) from None
    return _parse_root(root, text, path)


def _parse_root(root: yaml.Node | None, text: str, path: str) -> Plan:
    problems: list[str] = []
    if root is None:
        raise PlanError([f"{path}: the plan is empty (expected a mapping with a 'faults' list)"])
    if isinstance(root, yaml.SequenceNode):   # a bare list of faults is allowed
        top, fault_nodes = {}, root
        lines = {}
    elif isinstance(root, yaml.MappingNode):
        top, lines = {}, {}
        for k, v in root.value:
            key = k.value  # keys are scalars (contracts.yamldoc): their text
            top[key], lines[key] = v, _line(k)
            if key not in PLAN_KEYS:
                problems.append(f"{path}:{_line(k)}: {_name(key)}: unknown plan key (known: {', '.join(sorted(PLAN_KEYS))})")
        fault_nodes = top.get("faults")
        if fault_nodes is None:
            raise PlanError(problems + [f"{path}:{_line(root)}: faults: missing (a list of faults is required)"])
        if not isinstance(fault_nodes, yaml.SequenceNode):
            raise PlanError(problems + [f"{path}:{_line(fault_nodes)}: faults: must be a list of faults"])
    else:
        raise PlanError([f"{path}:{_line(root)}: the plan must be a mapping with a 'faults' list"])

    plan = Plan(faults=[], path=path, text=text, lines=lines)

    def top_value(key, conv):
        if key in top:
            try:
                raw = _value(top[key], path)
            except yamldoc.YamlError as exc:
                problems.append(str(exc))
                return None
            try:
                return conv(raw)
            except (ValueError, TypeError) as exc:
                problems.append(f"{path}:{_line(top[key])}: {key}: {exc}{_as_written(top[key])}")
        return None

    plan.name = str(top_value("name", _plan_name) or Path(path).stem)
    plan.max_concurrent = top_value("max_concurrent", _positive_int)
    plan.max_blast = top_value("max_blast", Count.parse)
    plan.seed = top_value("seed", _seed) or 0
    plan.duration = top_value("duration", parse_time)
    plan.toxiproxy = top_value("toxiproxy", toxiproxy_url)

    if not fault_nodes.value:
        problems.append(f"{path}:{_line(fault_nodes)}: faults: the list is empty")
    seen: dict[str, int] = {}
    for i, node in enumerate(fault_nodes.value):
        f = _parse_fault(node, i, path, problems)
        if f is None:
            continue
        if f.id in seen:
            problems.append(f"{path}:{f.lines.get('id', _line(node))}: id: duplicate fault id {f.id!r} "
                            f"(first at line {seen[f.id]})")
        seen.setdefault(f.id, _line(node))
        plan.faults.append(f)
    for f in plan.faults:
        if f.every is not None and f.until is None and plan.duration is None:
            problems.append(f"{plan.where(f, 'every')}: every: repeats forever — give 'until' or a plan-level 'duration'")
            f.until = float("inf")
        if f.until is not None and plan.duration is not None and f.until > plan.duration and f.until != float("inf"):
            problems.append(f"{plan.where(f, 'until')}: until: {f.until:g}s is after the plan duration {plan.duration:g}s")
        elif f.every is not None and f.until != float("inf") and f.count_times(plan.duration) == 0:
            plan.warnings.append(_never(plan, f))  # a warning: the soak recipe runs its plan cut short on purpose
    _check_occurrences(plan, problems)
    if problems:
        raise PlanError(problems)
    _check_concurrency(plan, problems)
    if problems:
        raise PlanError(problems)
    return plan


def _name(key: str) -> str:
    """A field name as written, unless it is too long for a message."""
    return key if len(key) <= 40 else show(key)


def _plan_name(raw):
    """A plan's name: text (``name: [a]`` was the name "['a']")."""
    if raw is not None and not isinstance(raw, str):
        kind = "a list" if isinstance(raw, list) else "a mapping" if isinstance(raw, dict) else \
            "true/false" if isinstance(raw, bool) else "a number (quote it)"
        raise ValueError(f"must be text, not {kind}")
    if raw is not None and "\0" in raw:
        raise ValueError("holds a NUL character")
    return raw


def _positive_int(v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"must be a whole number >= 1, got {show(v)}")
    return v


def _seed(v):
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2 ** 63:
        raise ValueError(f"must be a whole number in [0, 2^63), got {show(v)}")
    return v


def toxiproxy_url(v):
    """A Toxiproxy API URL (the plan's ``toxiproxy``, ``--toxiproxy``); ValueError unless http(s) with a host."""
    if not isinstance(v, str) or not re.match(r"^https?://", v) or not urlsplit(v).hostname:
        raise ValueError(f"must be an http(s) URL with a host, e.g. http://127.0.0.1:8474, got {show(v)}")
    return v.rstrip("/")


def _parse_fault(node, index: int, path: str, problems: list[str]) -> PlanFault | None:
    where = f"{path}:{_line(node)}"
    if not isinstance(node, yaml.MappingNode):
        problems.append(f"{where}: faults[{index}]: each fault must be a mapping (kind, target, at/every, ...)")
        return None
    fields, lines, nodes, refused = {}, {}, {}, set()
    for k, v in node.value:
        key = k.value  # keys are scalars, each given once (contracts.yamldoc): their text
        try:
            fields[key] = _value(v, path)
        except yamldoc.YamlError as exc:
            problems.append(str(exc))
            refused.add(key)  # said once: not "missing" as well
            continue
        lines[key], nodes[key] = _line(k), v
    raw_id = fields.get("id", f"f{index + 1}")
    typed_id = isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool)  # not null, true or .nan
    fid = str(raw_id) if typed_id else f"f{index + 1}"
    label = f"fault {fid if re.fullmatch(r'[A-Za-z0-9_.-]{1,40}', fid) else show(fid)}"
    before = len(problems)

    def bad(key, msg):
        if key not in refused:
            problems.append(f"{path}:{lines.get(key, _line(node))}: {_name(key)}: {msg} ({label})")

    def bad_value(key, msg):   # a message that shows the value: say what YAML made of it
        bad(key, msg + _as_written(nodes.get(key)))

    kind = fields.get("kind")
    spec = KINDS.get(kind) if isinstance(kind, str) else None
    if kind is None:
        bad("kind", f"missing (one of: {', '.join(sorted(KINDS))})")
    elif isinstance(kind, bool) and _as_written(nodes.get("kind")):  # `kind: on`: YAML 1.1 made it True
        written = nodes["kind"].value
        bad("kind", f"unknown fault kind {written!r} (YAML 1.1 reads an unquoted {written} as the boolean {kind}: "
                    f"quote a text value, kind: \"...\"; one of: {', '.join(sorted(KINDS))})")
    elif spec is None:
        bad("kind", f"unknown fault kind {show(kind)} (one of: {', '.join(sorted(KINDS))})")
    target = fields.get("target")
    if target is None:
        bad("target", "missing (a logical name: bot, redis, lb, or a member name such as bot-2)")
    elif not isinstance(target, str) or not target.strip():
        bad("target", f"must be a non-empty name, got {show(target)}")
    if not typed_id or not re.fullmatch(r"[A-Za-z0-9_.-]+", fid):
        bad_value("id", f"must be letters, digits, '_', '.', '-' only, got {show(raw_id)}")

    times = {}
    for key in ("at", "every", "start", "until", "duration"):
        if key in fields:
            try:
                times[key] = parse_time(fields[key])
            except ValueError as exc:
                bad_value(key, str(exc))
    if "at" in fields and "every" in fields:
        bad("every", "give either 'at' (once) or 'every' (repeating), not both")
    elif "at" not in fields and "every" not in fields and not refused & {"at", "every"}:
        bad("at", "missing: give 'at: 20s' (once) or 'every: 30s' (repeating)")
    if "at" in fields:
        for key in ("start", "until"):
            if key in fields:
                bad(key, "only goes with 'every'")
    if times.get("every") == 0:
        bad("every", "must be > 0")
    if "until" in times and times.get("start", times.get("every", 0)) >= times["until"]:
        bad("until", "must be after start (start defaults to one period)")
    if spec is not None:
        if spec.duration == "required" and "duration" not in fields:
            bad("duration", f"missing: a {kind} fault must say how long it lasts")
        if spec.duration == "none" and "duration" in fields:
            bad("duration", f"a {kind} fault is instant; remove 'duration'")
        if spec.duration == "required" and times.get("duration") == 0:
            bad("duration", f"must be > 0: a {kind} of 0s does nothing")
        if spec.max_duration is not None and times.get("duration", 0) > spec.max_duration:
            bad("duration", f"{times['duration']:g}s is longer than a {kind} may last ({spec.max_duration:g}s: "
                            "nothing can end it early)")
        if "every" in times and "duration" in times and times["every"] and times["duration"] >= times["every"]:
            bad("duration", f"{times['duration']:g}s is not shorter than every {times['every']:g}s "
                            f"(occurrences would overlap)")

    count = Count()
    if "count" in fields:
        try:
            count = Count.parse(fields["count"])
        except ValueError as exc:
            bad_value("count", str(exc))
        if spec is not None and kind in WHOLE_TARGET_KINDS:
            bad("count", f"a {kind} goes through every instance of the target; remove 'count'")

    params = {}
    if spec is None:   # which fields the kind allows is not known; a key no kind has is named all the same (`Kind:`)
        known = COMMON_KEYS.union(*(k.params for k in KINDS.values()))
        for key in [k for k in fields if k not in known]:
            hint = f" (did you mean {key.lower()!r}?)" if key.lower() in known else ""
            bad(key, f"unknown field{hint or ' for any kind'}")
    if spec is not None:
        for key, value in fields.items():
            if key in COMMON_KEYS:
                continue
            p = spec.params.get(key)
            if p is None:
                allowed = sorted(COMMON_KEYS | set(spec.params))
                bad(key, f"unknown field for kind {kind} (allowed: {', '.join(allowed)})")
                continue
            try:
                params[key] = _param(p, key, value)
            except ValueError as exc:
                bad_value(key, str(exc))
        for key, p in spec.params.items():
            if key not in params:
                if p.required and key not in fields:
                    bad(key, f"missing: required for kind {kind}")
                elif p.default is not None:
                    params[key] = p.default
        for key in sorted(params.keys() & fields.keys()):
            if why := _not_taken(spec, key, params):
                bad(key, why)
    if len(problems) > before or refused:
        return None
    return PlanFault(id=fid, kind=kind, target=target, at=times.get("at"), every=times.get("every"),
                     start=times.get("start"), until=times.get("until"), duration=times.get("duration"),
                     count=count, params=params, lines=lines)


def _param(p, key: str, value):
    """A kind-specific parameter checked against its type, choices and range; ValueError saying why."""
    if p.type in (int, float) and isinstance(value, str):
        value = _number(key, value)
        if p.type is int and isinstance(value, float) and math.isfinite(value):
            value = int(round(value))
    if p.type is float and isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2 ** 53:
        value = float(value)
    if not isinstance(value, p.type) or isinstance(value, bool):
        unit = " (seconds, or a time such as 5s)" if key in SECONDS_PARAMS else ""
        raise ValueError(f"must be {p.type.__name__}{unit}, got {show(value)}")
    if p.type is str and not value.strip():
        raise ValueError(f"must not be blank, got {show(value)}")
    if p.choices and value not in p.choices:
        raise ValueError(f"must be one of {', '.join(p.choices)}, got {show(value)}")
    if p.low is not None and not p.low <= value <= p.high:  # NaN is in no range
        raise ValueError(f"must be in [{p.low:g}, {p.high:g}], got {show(value)}")
    if p.type is dict and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"must map names to text (quote numbers), got {show(value)}")
    if p.type is dict and (name := next((k for k in value if not k or "=" in k or "\0" in k), None)) is not None:
        raise ValueError(f"{show(name)} is not an environment variable name (empty, or holds '=' or a NUL)")
    texts = [value] if isinstance(value, str) else list(value.values()) if isinstance(value, dict) else []
    if any("\0" in t for t in texts):  # no process can be given it: the fault would fail mid-run
        raise ValueError(f"holds a NUL character, got {show(value)}")
    return value


def _number(key: str, text: str):
    """A number parameter written as text: YAML 1.1 reads 1e3 (no dot) as text, and a time may carry its unit
    (grace: 5s, latency: 250ms). Other text is returned as it is, for the type check to refuse, but for a time
    in ms, which says why it is no time ('slow' is not a duration). float() also reads any script's digits and '_'
    ('٣' and '３' are 3, '1_0' is 10): refused, as in times, scripts and gates."""
    if odd := not_ascii_number(text):
        raise ValueError(f"{show(text)} is not a number: it holds {odd!r} (U+{ord(odd):04X}); a number is ASCII "
                         "digits 0-9 (no '_')" + (", or a time such as 5s" if key in SECONDS_PARAMS else
                                                   ", or a time such as 250ms" if key in MS_PARAMS else ""))
    try:
        return float(text)
    except ValueError:
        pass
    if key in MS_PARAMS:
        return parse_time(text) * 1000
    if key in SECONDS_PARAMS:
        try:
            return parse_time(text)
        except ValueError:
            pass
    return text


def _not_taken(spec, key: str, params: dict) -> str | None:
    """Why a parameter the fault gives is one its other parameters leave unused (latency on a reset_peer toxic,
    lag on a sentinel failover: it would be dropped without a word), or None."""
    if spec.params[key].only_with is None:
        return None
    other, allowed = spec.params[key].only_with
    if other not in params or params[other] in allowed:
        return None
    takes = sorted(k for k, q in spec.params.items() if q.only_with is None or params[other] in q.only_with[1])
    return f"a {spec.name} with {other}: {params[other]} does not take it (it takes: {', '.join(takes)})"


def _as_written(node) -> str:
    """A note for a value YAML 1.1 read as a boolean (yes, no, on, off): the message shows True, the file yes."""
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:bool":
        return f" (YAML reads the file's {node.value} as a boolean)"
    return ""


def _check_occurrences(plan: Plan, problems: list[str]) -> None:
    """Refuse a schedule of more than MAX_OCCURRENCES, counted without building it."""
    total = 0
    for f in plan.faults:
        n = f.count_times(plan.duration)
        total += n
        if n > MAX_OCCURRENCES:
            problems.append(f"{plan.where(f, 'every')}: every: {f.every:g}s makes {n} occurrences; a plan may have "
                            f"at most {MAX_OCCURRENCES} (a longer period or a shorter plan) (fault {f.id})")
            return
    if total > MAX_OCCURRENCES:
        problems.append(f"{plan.path}: the faults make {total} occurrences together; a plan may have at most "
                        f"{MAX_OCCURRENCES}")


def _never(plan: Plan, f: PlanFault) -> str:
    """The problem of an 'every' fault whose first occurrence is not before its end: it would never happen."""
    key = "start" if f.start is not None else "every"
    first = f.every if f.start is None else f.start
    end = f"its until {f.until:g}s" if f.until is not None else f"the plan duration {plan.duration:g}s"
    return (f"{plan.where(f, key)}: {key}: the first occurrence, at {first:g}s, is not before {end}: "
            f"the fault would never happen (fault {f.id})")


def _check_concurrency(plan: Plan, problems: list[str]) -> None:
    """Refuse a plan whose own schedule would hold more than max_concurrent faults at once.

    Counts occurrences (not instances) whose [start, start+duration) intervals overlap; instant
    faults last no time. The controller also enforces it at run time (slow recoveries)."""
    if plan.max_concurrent is None or plan.horizon is None:
        return
    events = []
    for t, f, _k in plan.schedule():
        if f.duration:
            events += [(t, 1, f), (t + f.duration, -1, f)]
    active = 0
    for t, delta, f in sorted(events, key=lambda e: (e[0], e[1])):
        active += delta
        if active > plan.max_concurrent:
            problems.append(f"{plan.where(f, 'at' if f.at is not None else 'every')}: max_concurrent: "
                            f"{active} faults would be active at {t:g}s, above max_concurrent "
                            f"{plan.max_concurrent} (fault {f.id})")
            return
