"""Read an audited run folder into one object the report and the comparison both draw from.

Only the files pinned in docs/CONTRACTS.md are read (run.json, steps.jsonl, chaos.jsonl and
audit/*), so a run folder copied anywhere re-renders with no Redis and no journal parsing.
Optional pieces (no chaos, no steps, an empty window table) load as empty frames.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from scipy.stats import binomtest

from contracts import codec, redact
from contracts.jsonl import read_jsonl, record
from contracts.timeline import chaos_event, load_step
from contracts.runfolder import RunFolder

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
    sessions: pd.DataFrame
    anomalies: list[dict]
    steps: pd.DataFrame
    faults: pd.DataFrame  # one row per applied fault instance: fault, kind, instance, start, end, open, outcome
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return str(self.run.get("label") or self.summary.get("label") or self.path.name)

    @property
    def t0(self) -> float:
        """Origin of every time axis: the run's start, else the first thing that happened."""
        if self.run.get("start") is not None:
            return float(self.run["start"])
        values = []
        if not self.windows.empty:
            values.append(float(self.windows["start"].min()))
        if not self.faults.empty:
            values.append(float(self.faults["start"].min()))
        return min(values) if values else 0.0

    @property
    def t_end(self) -> float:
        candidates = [self.run.get("end")]
        if not self.windows.empty:
            candidates.append(self.windows["end"].max())
        if not self.steps.empty:
            candidates.append(self.steps["end"].max())
        values = [float(v) for v in candidates if v is not None and pd.notna(v)]
        return max(values) if values else float(self.t0)


def is_run_folder(path: Path) -> bool:
    return RunFolder(path).is_run()


def wilson(count: int, total: int) -> tuple[float | None, float | None, float | None]:
    """(rate, low, high) with a 95% Wilson interval; all None when nothing was measured."""
    count, total = int(count), int(total)
    if total <= 0:
        return None, None, None
    ci = binomtest(count, total).proportion_ci(confidence_level=0.95, method="wilson")
    return count / total, float(ci.low), float(ci.high)


def rate(metric: dict | None) -> dict:
    """A summary rate with every key present (n=0 rates have rate None)."""
    metric = dict(metric or {})
    count, total = int(metric.get("count") or 0), int(metric.get("total") or 0)
    if metric.get("rate") is None or metric.get("low") is None:
        r, low, high = wilson(count, total)
        metric.update(rate=r, low=low, high=high)
    metric.update(count=count, total=total)
    return metric


def load_run(path: str | Path) -> RunData:
    path = Path(path)
    if not path.is_dir():
        raise NotARun(f"{path}: no such folder")
    if not is_run_folder(path):
        raise NotARun(f"{path}: not a run folder (it has neither run.json nor journal/)")
    folder = RunFolder(path)
    summary_file = folder.summary
    if not summary_file.is_file():
        raise NotAudited(f"{path}: not audited yet (no audit/summary.json) - run "
                         f"`python -m oracle audit {path}` first, or pass --audit")
    warnings: list[str] = []
    run = _read_json(folder.run_json, warnings, default={}) if folder.run_json.is_file() else {}
    run = redact.deep(run) if isinstance(run, dict) else {}  # also a run.json written before redaction was
    run.update(start=_time(run.get("start")), end=_time(run.get("end")))
    if not run:
        warnings.append(f"{path / 'run.json'}: missing or empty; label and options unknown")
    summary = _read_json(summary_file, warnings, default=None)
    if not isinstance(summary, dict):
        raise NotAudited(f"{summary_file}: not a JSON object - re-run `python -m oracle audit {path}`")
    windows = _read_csv(folder.windows_csv, WINDOW_COLUMNS, warnings)
    windows["faults"] = [str(v) if pd.notna(v) else "" for v in windows["faults"]]
    sessions = _read_csv(folder.sessions_csv, ["session"], warnings)
    anomalies = _read_jsonl(folder.anomalies, warnings)
    steps = pd.DataFrame(_read_jsonl(folder.steps, warnings, load_step), columns=["step", "users", "start", "end"])
    faults = fault_intervals(_read_jsonl(folder.chaos, warnings, chaos_event), run.get("end"), windows, warnings)
    return RunData(path, run, summary, windows, sessions, anomalies, steps, faults, warnings)


def fault_intervals(records: list[dict], run_end, windows: pd.DataFrame,
                    warnings: list[str] | None = None) -> pd.DataFrame:
    """Pair each apply with its recover by (fault, instance); an unrecovered fault lasts to the run's end.

    An apply that failed (outcome ``error``) injected nothing, so it is not shaded; it is reported.
    """
    columns = ["fault", "kind", "target", "instance", "start", "end", "open", "outcome", "error"]
    applies: dict[tuple, dict] = {}
    rows = []
    ends = [float(run_end)] if run_end is not None else []
    if not windows.empty:
        ends.append(float(windows["end"].max()))
    for rec in sorted(records, key=lambda r: float(r.get("time") or 0)):
        if "time" in rec:
            ends.append(float(rec["time"]))
        key = (rec.get("fault"), rec.get("instance"))
        if rec.get("event") == "apply" and rec.get("outcome", "ok") == "error":
            if warnings is not None:
                warnings.append(f"chaos: fault {rec.get('fault')} ({rec.get('kind')} on {rec.get('instance')}) "
                                f"failed to apply: {rec.get('error')}")
        elif rec.get("event") == "apply":
            applies[key] = rec
        elif rec.get("event") == "recover" and key in applies:
            a = applies.pop(key)
            rows.append(_interval(a, float(rec["time"]), False))
    end_of_run = max(ends) if ends else None
    for a in applies.values():
        rows.append(_interval(a, end_of_run if end_of_run is not None else float(a["time"]), True))
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values("start", ignore_index=True) if not frame.empty else frame


def _interval(apply: dict, end: float, open_ended: bool) -> dict:
    return {"fault": apply.get("fault"), "kind": str(apply.get("kind") or "?"), "target": apply.get("target"),
            "instance": apply.get("instance"), "start": float(apply["time"]), "end": max(end, float(apply["time"])),
            "open": open_ended, "outcome": apply.get("outcome", "ok"), "error": apply.get("error")}


def _read_json(file: Path, warnings: list[str], default):
    try:
        return codec.loads(file.read_bytes())  # DecodeError (a ValueError) whatever the bytes
    except (OSError, ValueError) as exc:
        warnings.append(f"{file}: unreadable ({exc})")
        return default


def _read_jsonl(file: Path, warnings: list[str], decode=record) -> list[dict]:
    """The records of a JSON Lines file (contracts.jsonl: a torn last line skipped, others reported)."""
    return list(read_jsonl(file, decode, problems=warnings)) if file.is_file() else []


def _time(value) -> float | None:
    """run.json's ``end`` when it is a finite epoch (a hand-edited run.json may hold anything)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e12
    return float(value) if ok else None


def _read_csv(file: Path, columns: list[str], warnings: list[str]) -> pd.DataFrame:
    if not file.is_file():
        return pd.DataFrame(columns=columns)
    try:
        frame = pd.read_csv(file)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=columns)
    except (OSError, ValueError) as exc:
        warnings.append(f"{file}: unreadable ({exc})")
        return pd.DataFrame(columns=columns)
    for column in columns:
        if column not in frame.columns:
            frame[column] = pd.NA
    return frame
