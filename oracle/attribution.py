"""Per-fault-kind attribution, two ways.

*During*: rates among turns sent while a kind of fault was active (plus a recovery margin,
since a store often loses data a little after the fault heals) against the quiet baseline of
turns sent when no fault was active or recovering — what users feel during the fault.

*Lost after*: a lost turn was acknowledged at some moment and gone at the audit, so what
destroyed it happened after its acknowledgement. Each lost acknowledged turn is charged to the
first fault in force at or after that moment (a Redis crash wipes turns acknowledged long
before it; a killed replica loses the turns it had acknowledged but not yet written); losses
with no fault after them are charged to no fault (a bug that loses data by itself).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from oracle.metrics import wilson
from oracle.timeline import Fault


def inside(times: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    mask = np.zeros(len(times), dtype=bool)
    for start, end in intervals:
        mask |= (times >= start) & (times < end)
    return mask


def rates(turns: pd.DataFrame, mask) -> dict:
    sub = turns[mask]
    ok = sub["ok"]
    return {
        "turns": int(len(sub)),
        "probe_amnesia": wilson(sub["failed_probe"].sum(), sub["answered_probe"].sum()),
        "stored_loss": wilson((sub["lost"] & ok).sum(), ok.sum()),
        "anomalies": wilson(sub["anomalous"].sum(), len(sub)),
    }


def loss_causes(turns: pd.DataFrame, faults: list[Fault], run_end: float) -> pd.Series:
    """Fault kind charged with each lost acknowledged turn ("" when no fault came after it)."""
    lost = turns[turns["lost"] & turns["ok"]]
    acked = lost["done"].to_numpy(dtype=float)
    causes = np.full(len(acked), "", dtype=object)
    for fault in sorted(faults, key=lambda f: f.start):  # earliest first: the first fault after the ack wins
        end = fault.end if fault.end is not None else run_end
        causes[(causes == "") & (acked <= end)] = fault.kind
    return pd.Series(causes, index=lost.index, dtype=object)


def by_fault(turns: pd.DataFrame, windows: pd.DataFrame, faults: list[Fault], run_end: float,
             recovery_s: float) -> tuple[list[dict], dict]:
    causes = loss_causes(turns, faults, run_end)
    total_lost = len(causes)
    sent = turns["sent"].to_numpy(dtype=float)
    any_fault = np.zeros(len(sent), dtype=bool)
    out = []
    for kind in sorted({f.kind for f in faults}):
        intervals = [(f.start, (f.end if f.end is not None else run_end) + recovery_s) for f in faults if f.kind == kind]
        mask = inside(sent, intervals)
        any_fault |= mask
        n_windows = int(windows["faults"].fillna("").str.split(";").apply(lambda ks: kind in ks).sum()) \
            if not windows.empty else 0
        out.append({"kind": kind, "windows": n_windows, "occurrences": len(intervals),
                    "recovery_s": recovery_s, **rates(turns, mask),
                    "lost_after": wilson(int((causes == kind).sum()), total_lost)})
    baseline = {"windows": int((windows["faults"].fillna("") == "").sum()) if not windows.empty else 0,
                **rates(turns, ~any_fault), "lost_after": wilson(int((causes == "").sum()), total_lost)}
    return out, baseline


def by_step(turns: pd.DataFrame, steps: list[dict]) -> list[dict]:
    """Rates per load step (from the turns' ``step``), with the users count from steps.jsonl."""
    known = {int(s["step"]): s for s in steps}
    out = []
    for step, sub in turns[turns["step"].notna()].groupby("step"):
        info = known.get(int(step), {})
        start = info.get("start", sub["sent"].min())
        end = info.get("end", sub["done"].max())
        ok = sub["ok"]
        span = max(float(end) - float(start), 1e-9)
        out.append({"step": int(step), "users": info.get("users"), "start": float(start), "end": float(end),
                    "acked": int(ok.sum()), "throughput": float(ok.sum()) / span,
                    "latency_p50": float(sub.loc[ok, "latency"].median()) if ok.any() else None,
                    "probe_amnesia": wilson(sub["failed_probe"].sum(), sub["answered_probe"].sum()),
                    "stored_loss": wilson((sub["lost"] & ok).sum(), ok.sum())})
    return out
