"""Read an audited run folder into one object the report and the comparison both draw from.

Only the files pinned in docs/CONTRACTS.md are read (run.json, steps.jsonl, chaos.jsonl and
audit/*), so a run folder copied anywhere re-renders with no Redis and no journal parsing.
Optional pieces (no chaos, no steps, an empty window table) load as empty frames.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Optional

import msgspec
import numpy as np
import pandas as pd

from contracts import codec, redact
from contracts.journal import MAX_EPOCH, Epoch
from contracts.jsonl import read_jsonl, record
from contracts.timeline import load_step
from contracts.runfolder import RunFolder, open_regular, special_kind
from oracle.history import Journal, JournalError, first_turn
from oracle.metrics import wilson
from oracle.timeline import Fault, at as _at, load_faults
from oracle.verdict import UNREADABLE, GATES, cut_short, trust_record

RATE_METRICS = ("probe_amnesia", "stored_loss", "session_amnesia", "crosstalk")
RATE_TITLES = {
    "probe_amnesia": "probe amnesia rate",
    "stored_loss": "stored loss rate",
    "session_amnesia": "session amnesia rate",
    "crosstalk": "cross-talk rate",
    "anomalies": "anomalous turn rate",
    "lost_after": "loss of turns acked before it (charged when above the baseline)",
}
WINDOW_COLUMNS = ["start", "end", "step", "acked", "throughput", "latency_p50", "latency_p95",
                  "latency_p99", "errors", "probes", "probes_failed", "lost", "crosstalk",
                  "anomalies", "faults"]
WINDOW_COUNTS = ["step", "acked", "errors", "probes", "probes_failed", "lost", "crosstalk", "anomalies"]
WINDOW_AMOUNTS = ["throughput", "latency_p50", "latency_p95", "latency_p99"]


RUN_FIELDS = {"run": str, "label": str, "target": str, "plan": str, "plan_text": str, "script": str, "script_sha": str,
              "options": dict, "versions": dict}  # what the report and the comparison read of run.json


HUGE = 10**15  # beyond any real count; far below where a chart's or a statistical test's arithmetic overflows
Count = Annotated[int, msgspec.Meta(ge=0, le=HUGE)]
Amount = Annotated[float, msgspec.Meta(ge=0, le=HUGE)]  # finite: NaN and infinity are out of range
Share = Optional[Annotated[float, msgspec.Meta(ge=0, le=1)]]
ATTRIBUTED_RATES = ("probe_amnesia", "stored_loss", "anomalies", "lost_after")  # of the baseline and by_fault rows


def _check_rate(count, total, rate, low, high) -> None:
    """A rate as oracle.metrics.wilson writes it: count <= total, and rate, low and high null together or
    numbers with low <= rate <= high."""
    if count is not None and total is not None and count > total:
        raise ValueError(f"count {count} is more than total {total}")
    if (rate, low, high).count(None) not in (0, 3):
        raise ValueError("rate, low and high are not all numbers or all null")
    if rate is not None and not low <= rate <= high:
        raise ValueError(f"rate {rate} is not within its interval [{low}, {high}]")


class Rate(msgspec.Struct):
    """A rate with its 95% interval, as summary.json and breakdown.json hold it (oracle.metrics.wilson)."""
    count: Optional[Count] = None
    total: Optional[Count] = None
    rate: Share = None
    low: Share = None
    high: Share = None

    def __post_init__(self):
        if (self.count is None) != (self.total is None):  # oracle.metrics.wilson writes both, always
            raise ValueError("count and total are not both numbers or both null")
        if self.rate is not None and self.total is None:
            raise ValueError(f"rate {self.rate} without the count and total it is of")
        _check_rate(self.count, self.total, self.rate, self.low, self.high)


class _SummaryRate(Rate, kw_only=True):
    """A rate of summary.json's metrics: its count and total are what a comparison tests (a missing count was
    read as 0 of the total: a candidate with half its probes failed compared as no change)."""
    count: Count
    total: Count


class _Observed(msgspec.Struct):
    count: Count
    total: Count

    def __post_init__(self):
        _check_rate(self.count, self.total, None, None, None)


class _Rule(msgspec.Struct):
    """One rule of the verdict (oracle.verdict.evaluate); rule_line and the template read every key."""
    gate: str
    counts: str
    over: str
    limit: str
    count: Optional[Count]
    total: Optional[Count]
    rate: Share
    low: Share
    high: Share
    result: str

    def __post_init__(self):
        if (self.count is None) != (self.total is None):
            raise ValueError("count and total are not both numbers or both null")
        _check_rate(self.count, self.total, self.rate, self.low, self.high)


class _Cause(msgspec.Struct):
    count: Count
    text: str


class _Verdict(msgspec.Struct):
    result: Literal["pass", "fail"]
    gates: str
    rules: list[_Rule]
    failed: list[str]
    root_causes: list[_Cause] = []


class _Attributed(msgspec.Struct, kw_only=True):
    """The baseline, and a by_fault row: what charts.fault_rows and the attribution table read."""
    windows: Optional[Count] = None
    charged: Optional[Count] = None
    probe_amnesia: Optional[Rate] = None
    stored_loss: Optional[Rate] = None
    anomalies: Optional[Rate] = None
    lost_after: Optional[Rate] = None


class _FaultRow(_Attributed, kw_only=True):
    kind: str
    occurrences: Count
    ineffective: bool = False


class _Foreign(msgspec.Struct):
    other_goldfish_runs: Count
    not_goldfish: Count
    examples: list[str] = []
    scanned: bool = True


class _JournalCopy(msgspec.Struct):
    shard: str
    read: str
    master: Optional[str]
    lines_added: Count


class _Information(msgspec.Struct):
    foreign_keys: Optional[_Foreign] = None
    journal_copies: list[_JournalCopy] = []


class _Turns(msgspec.Struct):
    total: Count = 0
    ok: Count = 0
    fail: Count = 0
    info: Count = 0
    interrupted: Count = 0
    errors: Count = 0
    info_stored: Optional[Count] = None


# by name, so that a message names the one that is damaged (``$.metrics.stored_loss.total``, not ``$.metrics[...]``)
_Metrics = msgspec.defstruct("_Metrics", [(name, Optional[_SummaryRate], None) for name in RATE_METRICS])
_ObservedGates = msgspec.defstruct("_ObservedGates", [(gate.name, Optional[_Observed], None) for gate in GATES])
_Latency = msgspec.defstruct("_Latency", [(q, Optional[Amount], None) for q in ("p50", "p95", "p99")])


class _Summary(msgspec.Struct):
    """summary.json's parts as the report, the comparison and the trend read them, key by key (an older
    summary lacks some); the raw dict is what they read, so a key they index is required here."""
    metrics: _Metrics
    turns: _Turns
    observed: Optional[_ObservedGates] = None
    anomalies: dict[str, Count] = {}
    verdict: Optional[_Verdict] = None
    throughput: Optional[Amount] = None
    latency: Optional[_Latency] = None
    by_fault: list[_FaultRow] = []
    baseline: Optional[_Attributed] = None
    store: dict = {}
    information: Optional[_Information] = None
    problems: list[str] = []
    problems_total: Count = 0


class RunFolderError(Exception):
    """A folder the report cannot use; the message says what is wrong and where."""


class NotARun(RunFolderError):
    pass


class NotAudited(RunFolderError):
    pass


@dataclass
class RunData:
    path: Path
    run: dict
    summary: dict
    windows: pd.DataFrame
    anomalies: "Anomalies"
    steps: pd.DataFrame
    faults: pd.DataFrame  # one row per applied fault instance: fault, kind, instance, start, end, open, outcome
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return str(self.run.get("label") or self.summary.get("label") or self.path.name)

    @property
    def t0(self) -> float:
        """Origin of every time axis: the run's start, else its first window, else its first fault."""
        if self.run.get("start") is not None:
            return float(self.run["start"])
        if not self.windows.empty:
            return float(self.windows["start"].min())
        return float(self.faults["start"].min()) if not self.faults.empty else 0.0

    @property
    def t_end(self) -> float:
        candidates = [self.run.get("end")]
        if not self.windows.empty:
            candidates.append(self.windows["end"].max())
        if not self.steps.empty:
            candidates.append(self.steps["end"].max())
        values = [float(v) for v in candidates if v is not None and pd.notna(v)]
        return max(values) if values else float(self.t0)


SUMMARY_PARTS = ("metrics", "turns")  # what a report and a comparison need (an older audit has no verdict yet)


def is_run_folder(path: Path) -> bool:
    return RunFolder(path).is_run()


def rate(metric: dict | None) -> dict:
    """A rate the audit wrote, with every key present; only an older summary without its interval (or a
    rate pooled over runs or windows) gets one computed here, by the audit's own ``wilson``."""
    metric = dict(metric or {})
    count, total = int(metric.get("count") or 0), int(metric.get("total") or 0)
    if metric.get("low") is None and total > 0:
        metric.update(wilson(count, total))
    metric.setdefault("rate", None), metric.setdefault("low", None), metric.setdefault("high", None)
    metric.update(count=count, total=total)
    return metric


def _verdict_disagrees(v) -> str | None:
    """How a summary's verdict contradicts itself (its result against its rules and failed lines), if it does."""
    if not isinstance(v, dict):
        return None
    rules = [r for r in v.get("rules") or [] if isinstance(r, dict)]
    if not rules:  # goldfish writes one rule per gate: a verdict of none said "PASS — 0 gate(s) held"
        return "$.verdict.rules is empty: a verdict of no gate (goldfish writes one rule per gate), so it says nothing"
    failing = [r.get("gate") for r in rules if r.get("result") == "fail"]
    if v.get("result") == "pass" and (failing or v.get("failed")):
        return (f"$.verdict.result is 'pass' but its rules fail ({', '.join(map(str, failing)) or 'failed lines'}): "
                "the verdict disagrees with itself")
    if v.get("result") == "fail" and not v.get("failed"):
        return "$.verdict.result is 'fail' but $.verdict.failed names no failed rule: the verdict disagrees with itself"
    return None


def _anomalies_disagree(summary: dict) -> str | None:
    """Findings in ``anomalies`` that no count of ``observed`` holds. Every finding the audit writes is counted by some
    gate (a lost turn by stored_loss, or by crosstalk when it was misrouted; a vanished session by vanished, ...), so
    anomalies beside an all-zero ``observed`` are an edited summary: a PASS showing ``anomalies: lost 5``. Class by
    class the counts need not match (a class's finding may be counted under another gate: its cause decides), nor
    do they when a gate allows some (``--gate lost=5``): only this contradiction is sound. A summary with no
    ``observed`` (an older goldfish's) is not checked."""
    anomalies, observed = summary.get("anomalies"), summary.get("observed")
    if not isinstance(anomalies, dict) or not isinstance(observed, dict):
        return None
    found = {c: n for c, n in anomalies.items() if isinstance(n, int) and n > 0}
    if not found or any(isinstance(o, dict) and o.get("count") for o in observed.values()):
        return None
    listed = ", ".join(f"{c} {n}" for c, n in found.items())
    return (f"$.anomalies holds findings ({listed}) but every count of $.observed is 0, so its verdict judged none "
            "of them: the summary disagrees with itself")


def _of_another_journal(summary: dict, folder: RunFolder, warnings: list[str] | None = None) -> str | None:
    """Why a summary is not the verdict of the run in its folder: the journal's size differs from the one it
    judged. Grown: ``oracle audit`` ran while the load went on, which then stopped with no verdict of its own, or
    lines were appended since: audit again. Shrunk: lines lost or a shard replaced since the audit: the audit
    refuses it too (``oracle.audit.require_whole_journal``), so the message says to put the journal back. A size that is not a whole number (a damaged
    summary) is refused too; a summary that does not record it (an older goldfish) is warned about in
    ``warnings``: whether its journal changed since cannot be told.

    Why: a summary without ``journal.bytes``, or with it as a string, used to skip the check silently, and a
    journal that shrank was accepted: report and compare kept a stale PASS."""
    journal = summary.get("journal")
    recorded = journal.get("bytes") if isinstance(journal, dict) else None
    try:
        now = folder.journal_bytes()
    except OSError as exc:  # journal/ that cannot be listed (contracts.runfolder.CannotList): no run to judge by
        raise NotAudited(f"{folder.path}: {exc}") from None
    if recorded is None:
        if warnings is not None:
            warnings.append("audit/summary.json does not record the size of the journal it judged (an audit by an "
                            "older goldfish, or an edited summary): whether the journal changed since cannot be "
                            "told; audit the run again (`python -m oracle audit RUN`) to be sure")
        return None
    if isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 0:
        return (f"$.journal.bytes {codec.short(recorded)} is not a whole number of bytes, so the size of the journal "
                "this audit judged is unknown (a damaged summary)")
    if now > recorded:
        return (f"the journal has grown since this audit ({recorded:,} bytes judged, {now:,} now): it was audited "
                "before its journal changed (while the run was still going, or lines were added since): audit again")
    if now < recorded:  # the audit refuses this journal too (oracle.audit.require_whole_journal): no "audit again"
        return (f"the journal has shrunk since this audit ({recorded:,} bytes judged, {now:,} now): it lost lines "
                "since (a partial copy, a cut or edited shard), so this verdict is not of the journal in the folder, "
                "and an audit of what is left is refused. Put the whole journal back (from a backup, or the "
                f"workers' own copies in {folder.workers}); the report then renders this audit as it is")
    return None


def _journal_run(folder: RunFolder) -> str | None:
    """The run id of the journal's first turn (``oracle.history.first_turn``); None when it names none (a journal
    written by hand) or the journal cannot be read (the size check, and the audit, say why)."""
    try:
        for shard in Journal.open(folder.path).shards:
            turn, _ = first_turn(shard)
            if turn is not None:
                return turn.run
    except (JournalError, OSError):
        pass
    return None


def _of_another_run(summary: dict, run: dict, folder: RunFolder) -> str | None:
    """Why a summary is not the audit of the run in its folder: the run it judged (its ``run``, the journal's run
    id) is not the journal's, or not run.json's. Another run's audit/ (a copy, a restore from the wrong backup)
    gave its PASS to a run whose own audit FAILs, and another run's run.json its trust fields (a cut-short run's
    NOT TRUSTED a PASS) and label; the journal's size is no guard (two runs of one script, or an older summary that
    does not record it). A summary or run.json with no run id (an older goldfish, a folder built by hand) is
    no check."""
    audited, journal, recorded = summary.get("run"), _journal_run(folder), run.get("run")
    again = f"audit the folder again (`python -m oracle audit {folder.path}`)"
    if "run" in summary and not isinstance(audited, str):  # null or NaN was taken as no check, and its PASS (fuzz 18)
        return (f"this audit's run is {audited!r}, not a run id: {folder.audit / 'summary.json'} is damaged, so whose "
                f"audit it is cannot be told; {again}")
    if not isinstance(audited, str):
        return None
    if isinstance(journal, str) and journal != audited:
        return (f"this audit is of run {audited!r}, but the journal in {folder.journal} is run {journal!r}: another "
                f"run's audit/ is in this folder (copied, or restored from another run's backup); {again}")
    if isinstance(recorded, str) and recorded != audited:
        if journal:  # the audit refuses this run.json too (oracle.history.Journal.require_own_run)
            return (f"this audit and the journal in {folder.journal} are of run {audited!r}, but {folder.run_json} "
                    f"is run {recorded!r}: another run's run.json is in this folder, whose end, phase and label would "
                    "be taken for this run's (a run cut short shown as a PASS); put this run's own run.json back "
                    "(`python -m oracle audit` refuses this one too)")
        return (f"this audit is of run {audited!r}, but {folder.run_json} is run {recorded!r}: one of them is another "
                f"run's; put this run's own run.json back, or {again}")
    return None


def _not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is there but is not a regular file ("a directory", "a character device", "a
    symbolic link to nothing"); None when it is a regular file or is not there."""
    if path.is_file() or not (path.exists() or path.is_symlink()):
        return None
    if path.is_dir():
        return "a directory"
    try:
        return special_kind(path) or "not a regular file"
    except FileNotFoundError:
        return "a symbolic link to nothing"


def load_run(path: str | Path) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise NotARun(f"{path}: " + ("not a folder" if path.exists() else "a symbolic link that leads nowhere (a "
                                     "loop, or to nothing)" if path.is_symlink() else "no such folder"))
    if not is_run_folder(path):
        raise NotARun(f"{path}: not a run folder (it has neither run.json nor journal/)")
    folder = RunFolder(path)
    summary_file = folder.summary
    other_kind = _not_a_file(summary_file)
    if other_kind:  # a link to /dev/zero, a FIFO, a folder: named, not "not audited yet"
        raise NotAudited(f"{summary_file}: not a regular file but {other_kind} - remove it and re-run "
                         f"`python -m oracle audit {path}`")
    if not summary_file.is_file():
        raise NotAudited(f"{path}: not audited yet (no audit/summary.json) - run "
                         f"`python -m oracle audit {path}` first, or pass --audit")
    warnings: list[str] = []
    there = folder.run_json.exists() or folder.run_json.is_symlink()  # a folder, a device, a FIFO: unreadable
    run = _read_json(folder.run_json, warnings, default=None) if there else {}
    if not isinstance(run, dict):  # it may have said the users raised exceptions: the verdict cannot be trusted
        if run is not None:  # (verdict.cut_short), as `oracle audit` refuses it
            warnings.append(f"{folder.run_json}: unreadable (not a JSON object but a {type(run).__name__})")
        run = {UNREADABLE: warnings[-1]}
    run, found = codec.mend_surrogates(run)
    if found:  # a damaged field of run.json is warned about and the report goes on, as for the others below
        warnings.append(f"{folder.run_json}: {', '.join(found[:3])}{' ...' if len(found) > 3 else ''}: a lone "
                        "surrogate escape (\\ud800-\\udfff), which is not text; replaced with U+FFFD")
    run = redact.deep(run) if isinstance(run, dict) else {}  # also a run.json written before redaction was
    for name in ("start", "end"):  # wall times: finite epochs, or the field is left out
        try:
            run[name] = msgspec.convert(run.get(name), Optional[Epoch])
        except msgspec.ValidationError as exc:
            warnings.append(f"{folder.run_json}: {name} {codec.short(run[name])}: {exc}; left out")
            run[name] = None
    for name, kind in RUN_FIELDS.items():  # a hand-edited run.json: a field of the wrong type is left out
        if run.get(name) is not None and not isinstance(run[name], kind):
            warnings.append(f"{folder.run_json}: {name} {codec.short(run.pop(name))} is not "
                            f"{'an object' if kind is dict else 'text'}; left out")
    if all(value is None for value in run.values()):
        warnings.append(f"{path / 'run.json'}: missing or empty; label and options unknown")
    untrusted = cut_short(run)
    if untrusted:  # written by the Locust run's end (locustfiles/endofrun.py)
        warnings.insert(0, f"{untrusted}; the run exits 3")
    try:  # the reason kept (nested too deeply, an integer past the digit limit), as run.json's warning keeps it
        summary = codec.loads(summary_file.read_bytes())  # DecodeError (a ValueError) whatever the bytes
    except (OSError, ValueError) as exc:
        raise NotAudited(f"{summary_file}: unreadable ({exc}) - re-run `python -m oracle audit {path}`") from None
    if not isinstance(summary, dict):
        raise NotAudited(f"{summary_file}: not a JSON object but a {type(summary).__name__} - re-run "
                         f"`python -m oracle audit {path}`")
    recorded = trust_record(summary.get("run_record"))
    if not there and recorded:  # run.json gone since the audit (a partial copy): a cut-short run's PASS was a PASS
        run.update(recorded)
        warnings.append(f"{folder.run_json}: missing; whether the run can be trusted is read from the copy the "
                        "audit kept (audit/summary.json run_record)")
        untrusted = cut_short(run)
        if untrusted:
            warnings.insert(0, f"{untrusted}; the run exits 3")
    wrong = [key for key in SUMMARY_PARTS if not isinstance(summary.get(key), dict)] + \
        [key for key in ("observed", "verdict") if key in summary and not isinstance(summary[key], dict)]
    if wrong:  # a hand-edited or truncated summary: no report that looks like a verdict
        raise NotAudited(f"{summary_file}: not an audit summary ({', '.join(wrong)}: missing or not an object) - "
                         f"re-run `python -m oracle audit {path}`")
    try:  # the parts every rate, headline and table is made of, by type
        msgspec.convert(summary, _Summary)
    except msgspec.ValidationError as exc:
        raise NotAudited(f"{summary_file}: {exc} - re-run `python -m oracle audit {path}`") from None
    found = codec.mend_surrogates(summary)[1]
    if found:  # the audit never writes one (its encoder refuses them): damaged, as any other field of it
        raise NotAudited(f"{summary_file}: {found[0]}: a lone surrogate escape (\\ud800-\\udfff), which is not "
                         f"text - re-run `python -m oracle audit {path}`")
    disagree = _verdict_disagrees(summary.get("verdict")) or _anomalies_disagree(summary)
    if disagree:  # an edited summary: its badge would say what its own rules do not
        raise NotAudited(f"{summary_file}: {disagree} - re-run `python -m oracle audit {path}`")
    other = _of_another_run(summary, run, folder)
    if other:  # before the journal's size: a size that differs says "audit again" of another run's audit
        raise NotAudited(f"{summary_file}: {other}")
    other = _of_another_journal(summary, folder, warnings)
    if other and other.startswith("the journal has shrunk"):  # auditing again is refused: say what helps
        raise NotAudited(f"{summary_file}: {other}")
    if other:  # a PASS of half a run, or of another run, is no verdict of this one
        raise NotAudited(f"{summary_file}: {other} - re-run `python -m oracle audit {path}` (with --store-url "
                         "while the store still holds the run)")
    windows = read_windows(folder.windows_csv, warnings)
    span = run_span(run, windows, folder.run_json, warnings)
    try:
        anomalies = read_anomalies(folder.anomalies, warnings)
    except OSError as exc:  # a directory, no permission...: contracts.runfolder names it
        warnings.append(f"{folder.anomalies}: unreadable ({exc}); no anomalies shown")
        anomalies = Anomalies()
    steps = pd.DataFrame(_read_jsonl(folder.steps, warnings, _step_within(span)),
                         columns=["step", "users", "start", "end"])
    try:
        timeline = load_faults(path, warnings)
    except OSError as exc:
        warnings.append(f"{folder.chaos}: unreadable ({exc}); no faults shown")
        timeline = []
    faults = _faults_within(fault_intervals(timeline, run.get("end"), windows), span, folder.chaos, warnings)
    return RunData(path, run, summary, windows, anomalies, steps, faults, warnings)


SLACK_S = 60.0  # how far outside the run a time may lie (a heal just after its end) when the run is shorter


@dataclass(frozen=True)
class Span:
    """The run's start and end (run.json's, else the audit's windows'; infinite when unknown) and how far outside
    them a time may still lie: the run's length, or SLACK_S. A step or fault farther out is a damaged line: on a
    chart it would stretch the time axis back to 1970."""
    start: float
    end: float
    slack: float

    def far(self, t) -> bool:
        return t < self.start - self.slack or t > self.end + self.slack


def run_span(run: dict, windows: pd.DataFrame, file: Path, warnings: list[str]) -> Span:
    """The run's span: run.json's start and end, or the audit's windows' where those are far from the windows
    (hand-edited); run.json's own values stay, for the run's label and order."""
    first, last = (float(windows["start"].min()), float(windows["end"].max())) if not windows.empty else (None, None)
    given = {"start": run.get("start"), "end": run.get("end")}
    for name, near in (("start", first), ("end", last)):
        if near is not None and given[name] is not None and abs(given[name] - near) > max(SLACK_S, last - first):
            warnings.append(f"{file}: {name} {_at(given[name])} is far from the audit's windows ({_at(first)} to "
                            f"{_at(last)}); the charts use the windows' span")
            given[name] = None
    start = given["start"] if given["start"] is not None else first
    end = given["end"] if given["end"] is not None else last
    slack = max(SLACK_S, end - start) if start is not None and end is not None else SLACK_S
    return Span(-np.inf if start is None else start, np.inf if end is None else end, slack)


def _step_within(span: Span):
    """steps.jsonl's decode: contracts.timeline.load_step, and a start and end within the run's span."""
    def decode(raw: bytes) -> dict:
        step = load_step(raw)
        for name in ("start", "end"):
            if step.get(name) is not None and span.far(step[name]):
                raise ValueError(f"{name} {_at(step[name])} is far outside the run; the step is left out")
        return step
    return decode


def _faults_within(faults: pd.DataFrame, span: Span, file: Path, warnings: list[str]) -> pd.DataFrame:
    """The faults within the run's span: one wholly far outside it is left out, one partly is cut at the run's
    start and end."""
    far_start, far_end = faults["start"].map(span.far).astype(bool), faults["end"].map(span.far).astype(bool)
    outside = (far_start & (faults["start"] > span.end)) | (far_end & (faults["end"] < span.start))
    partly = (far_start | far_end) & ~outside
    for row, whole in [(r, True) for r in faults[outside].itertuples()] + \
            [(r, False) for r in faults[partly].itertuples()]:
        warnings.append(f"{file}: fault {row.fault} ({row.kind}) from {_at(row.start)} to {_at(row.end)} is "
                        + ("far outside the run; left out" if whole else "partly far outside the run; cut at its edge"))
    cut = faults.assign(start=faults["start"].where(~partly, faults["start"].clip(span.start, span.end)),
                        end=faults["end"].where(~partly, faults["end"].clip(span.start, span.end)))
    return cut[~outside].reset_index(drop=True)


def fault_intervals(faults: list[Fault], run_end, windows: pd.DataFrame) -> pd.DataFrame:
    """The audit's faults (oracle/timeline.py) as a frame for the charts; one never recovered lasts to the
    end of the run (the heal may be what failed) and is marked ``open``."""
    columns = ["fault", "kind", "target", "instance", "start", "end", "open", "touched"]
    ends = [f.end if f.end is not None else f.start for f in faults]
    ends += [float(run_end)] if run_end is not None else []
    ends += [float(windows["end"].max())] if not windows.empty else []
    end_of_run = max(ends) if ends else None
    rows = [{"fault": f.fault, "kind": f.kind, "target": f.target, "instance": f.instance, "start": f.start,
             "end": f.end if f.end is not None else max(end_of_run, f.start), "open": f.end is None,
             "touched": f.touched} for f in faults]
    return pd.DataFrame(rows, columns=columns)


def _read_json(file: Path, warnings: list[str], default):
    try:  # open_regular: a link to /dev/zero never ends, a FIFO never opens; named instead
        with open_regular(file) as fh:
            return codec.loads(fh.read())  # DecodeError (a ValueError) whatever the bytes
    except (OSError, ValueError) as exc:
        warnings.append(f"{file}: unreadable ({exc})")
        return default


def _read_jsonl(file: Path, warnings: list[str], decode=record) -> list[dict]:
    """The records of a JSON Lines file (contracts.jsonl: a torn last line skipped, others reported)."""
    try:
        return list(read_jsonl(file, decode, problems=warnings)) if file.is_file() else []
    except OSError as exc:
        warnings.append(f"{file}: unreadable ({exc}); left out")
        return []


class _Anomaly(msgspec.Struct):
    """The fields of an anomaly record the report reads (docs/CONTRACTS.md "Anomalies")."""
    class_: str = msgspec.field(name="class")
    id: Optional[str] = None
    session: Optional[str] = None
    turn: Optional[Annotated[int, msgspec.Meta(ge=0)]] = None
    time: Optional[Epoch] = None
    explanation: Optional[str] = None
    evidence: Optional[dict] = None


def anomaly_record(raw: bytes) -> dict:
    """One anomalies.jsonl line, its fields checked (a ValueError naming the field, ``$.time``, otherwise)."""
    record = codec.loads_object(raw)
    msgspec.convert(record, _Anomaly)
    return record


EXAMPLES_PER_CLASS = 10        # anomalies the report shows of each class, the earliest
WINDOW_CLASSES = ("lost", "crosstalk")  # the classes windows.csv counts per window; the charts count the others here


@dataclass
class Anomalies:
    """What the report draws from audit/anomalies.jsonl, read in one pass: a soak whose store lost everything
    writes millions of records, and the report keeps a few of each class, not all of them."""
    examples: dict[str, list[dict]] = field(default_factory=dict)  # class -> its earliest records, by time
    counts: Counter = field(default_factory=Counter)                # class -> records in the file
    other_times: list = field(default_factory=list)  # times of the records of classes windows.csv does not count


def read_anomalies(file: Path, warnings: list[str]) -> Anomalies:
    out = Anomalies()
    if not file.is_file():
        return out
    for found in read_jsonl(file, anomaly_record, problems=warnings):
        cls = found["class"]
        out.counts[cls] += 1
        if cls not in WINDOW_CLASSES and cls != "foreign" and found.get("time") is not None:
            out.other_times.append(float(found["time"]))
        kept = out.examples.setdefault(cls, [])
        kept.append(found)
        if len(kept) >= 4 * EXAMPLES_PER_CLASS:  # keep the earliest: sorted by time, stable for ties
            kept[:] = sorted(kept, key=_when)[:EXAMPLES_PER_CLASS]
    for cls, kept in out.examples.items():
        kept[:] = sorted(kept, key=_when)[:EXAMPLES_PER_CLASS]
    return out


def _when(record: dict) -> float:
    return record.get("time") or 0.0


def read_windows(file: Path, warnings: list[str]) -> pd.DataFrame:
    """audit/windows.csv, every value checked: a row with a value that is not a number, or a window that is not
    a time span after the one before it, is left out with a warning naming the file's line."""
    frame = pd.DataFrame(columns=WINDOW_COLUMNS)
    if file.is_file():
        try:
            frame = pd.read_csv(file, dtype=str, keep_default_na=False, index_col=False, skip_blank_lines=False)
        except pd.errors.EmptyDataError:
            pass
        except (OSError, ValueError) as exc:  # a ragged line, bytes that are not text...: the file:line is in exc
            warnings.append(f"{file}: unreadable ({exc}); the window charts are left out")
    missing = [c for c in WINDOW_COLUMNS if c not in frame.columns]
    if missing and len(frame):
        warnings.append(f"{file}: no column {', '.join(missing)}; the window charts are left out")
    if missing or frame.empty:
        return pd.DataFrame(columns=WINDOW_COLUMNS)
    text = frame[WINDOW_COLUMNS].copy()
    numbers = text.drop(columns="faults").replace({"": None}).apply(pd.to_numeric, errors="coerce")
    wrong = numbers.isna() & (text.drop(columns="faults") != "")
    wrong[["start", "end"]] |= numbers[["start", "end"]].isna()
    sizes = numbers[WINDOW_COUNTS + WINDOW_AMOUNTS]  # counts whole, both finite and >= 0 (NaN: not measured)
    in_range = sizes.apply(lambda column: column.between(0, HUGE))
    in_range[WINDOW_COUNTS] &= sizes[WINDOW_COUNTS] % 1 == 0
    out_of_range = sizes.notna() & ~in_range
    bad = wrong.any(axis=1) | out_of_range.any(axis=1) | ~(
        numbers["start"].between(0, MAX_EPOCH) & numbers["end"].between(0, MAX_EPOCH) & (numbers["end"] > numbers["start"]))
    ends_before = numbers["end"].where(~bad).shift().cummax().fillna(0)  # of the good windows before each
    bad |= numbers["start"] < ends_before
    for i in np.flatnonzero(bad.to_numpy())[:5]:
        columns = [c for c in wrong.columns if wrong.iat[i, wrong.columns.get_loc(c)]]
        ranged = [c for c in out_of_range.columns if out_of_range.iat[i, out_of_range.columns.get_loc(c)]]
        why = (f"{columns[0]} {text.at[i, columns[0]]!r} is not a number" if columns else
               f"{ranged[0]} {text.at[i, ranged[0]]!r} is not a {'whole ' if ranged[0] in WINDOW_COUNTS else ''}"
               f"number from 0 to {HUGE:.0e}" if ranged else "not a time span after the window before it")
        warnings.append(f"{file}:{i + 2}: {why}; the window is left out")
    if bad.sum() > 5:
        warnings.append(f"{file}: {int(bad.sum()) - 5} more windows left out")
    windows = numbers[~bad].reset_index(drop=True)
    windows["faults"] = text["faults"][~bad].reset_index(drop=True)
    return windows[WINDOW_COLUMNS]
