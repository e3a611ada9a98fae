"""Per-fault-kind attribution, two ways; a fault is blamed only where its rate is above the quiet baseline's.

*During*: rates among turns sent while a kind of fault was in force (plus a recovery margin, since
a store often loses data a little after the fault heals) against the quiet baseline of turns sent
when no fault was in force or recovering — what users feel during the fault.

*Lost after*: a lost turn was acknowledged at some moment and gone at the audit, so what destroyed
it happened after its acknowledgement: the first fault in force at or after that moment is the
candidate. A kind's *exposure* is every acknowledged turn whose first fault after the ack is of
that kind; the baseline's is every acknowledged turn with no fault after it. A kind is charged with
its lost turns only when its loss rate over its exposure is above the baseline's (Fisher's exact
test, one-sided, p < ALPHA — the test ``oracle compare`` uses): a bot that loses turns at the same
rate with or without the fault (memory in a per-process dict) is not the fault's doing.

A fault that touched nothing (``touched: 0`` on the timeline: no connection to kill) is
*ineffective*: listed as such, never a fault interval, never credited with surviving anything.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from oracle.metrics import wilson
from oracle.timeline import Fault

ALPHA = 0.05
RATES = ("probe_amnesia", "stored_loss", "anomalies")


def inside(times: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    mask = np.zeros(len(times), dtype=bool)
    for start, end in intervals:
        mask |= (times >= start) & (times < end)
    return mask


def overlapping(starts: np.ndarray, ends: np.ndarray, intervals: list[tuple[float, float]]) -> np.ndarray:
    """Which [start, end] spans (a turn from its send to its answer) overlap any interval: a request
    in flight when a fault hit it is the fault's doing even though it was sent just before."""
    mask = np.zeros(len(starts), dtype=bool)
    for start, end in intervals:
        mask |= (starts < end) & (ends >= start)
    return mask


def intervals(faults: list[Fault], run_end: float, margin: float = 0.0) -> list[tuple[float, float]]:
    """(start, end + margin) of every effective fault; an unrecovered one lasts to the end of the run."""
    return [(f.start, (f.end if f.end is not None else run_end) + margin) for f in faults if f.effective]


def above_baseline(count: int, total: int, base_count: int, base_total: int) -> dict:
    """Fisher's exact test that a rate is above the baseline's: ``{"p", "above_baseline"}``."""
    if not total or not base_total:
        return {"p": None, "above_baseline": False}
    from scipy.stats import fisher_exact  # lazy, like oracle.metrics

    p = float(fisher_exact([[count, total - count], [base_count, base_total - base_count]],
                           alternative="greater").pvalue)
    return {"p": p, "above_baseline": p < ALPHA}


def rates(turns: pd.DataFrame, mask) -> dict:
    sub = turns[mask]
    ok = sub["ok"]
    return {
        "turns": int(len(sub)),
        "probe_amnesia": wilson(sub["failed_probe"].sum(), sub["answered_probe"].sum()),
        "stored_loss": wilson((sub["lost"] & ok).sum(), ok.sum()),
        "anomalies": wilson(sub["anomalous"].sum(), len(sub)),
    }


def first_fault_after(turns: pd.DataFrame, faults: list[Fault], run_end: float) -> np.ndarray:
    """The kind of the first effective fault in force at or after each acknowledged turn's ack ("" none)."""
    ok = turns["ok"].to_numpy()
    acked = turns["done"].to_numpy(dtype=float)
    kinds = np.full(len(turns), "", dtype=object)
    for fault in sorted((f for f in faults if f.effective), key=lambda f: f.start):  # earliest fault wins
        end = fault.end if fault.end is not None else run_end
        kinds[ok & (kinds == "") & (acked <= end)] = fault.kind
    return kinds


def by_fault(turns: pd.DataFrame, windows: pd.DataFrame, faults: list[Fault], run_end: float,
             recovery_s: float) -> tuple[list[dict], dict]:
    sent = turns["sent"].to_numpy(dtype=float)
    during = {kind: inside(sent, intervals([f for f in faults if f.kind == kind], run_end, recovery_s))
              for kind in sorted({f.kind for f in faults})}
    any_fault = np.zeros(len(sent), dtype=bool)
    for mask in during.values():
        any_fault |= mask
    baseline = {"windows": int((windows["faults"].fillna("") == "").sum()) if not windows.empty else 0,
                **rates(turns, ~any_fault)}
    exposure = first_fault_after(turns, faults, run_end)
    lost_ok = (turns["lost"] & turns["ok"]).to_numpy()
    ok = turns["ok"].to_numpy()
    quiet = ok & (exposure == "")
    base_lost, base_exposed = int((lost_ok & quiet).sum()), int(quiet.sum())
    baseline["lost_after"] = wilson(base_lost, base_exposed)
    out = []
    for kind, mask in during.items():
        hits = [f for f in faults if f.kind == kind]
        effective = [f for f in hits if f.effective]
        row = {"kind": kind, "windows": _windows_with(windows, kind), "occurrences": len(hits),
               "effective_occurrences": len(effective), "ineffective": not effective,
               "touched": _touched(hits), "recovery_s": recovery_s, **rates(turns, mask)}
        for name in RATES:
            b = baseline[name]
            row[name].update(above_baseline(row[name]["count"], row[name]["total"], b["count"], b["total"]))
        exposed = ok & (exposure == kind)
        lost = int((lost_ok & exposed).sum())
        row["lost_after"] = {**wilson(lost, int(exposed.sum())),
                             **above_baseline(lost, int(exposed.sum()), base_lost, base_exposed)}
        row["charged"] = lost if row["lost_after"]["above_baseline"] else 0
        out.append(row)
    baseline["uncharged"] = int(lost_ok.sum()) - sum(r["charged"] for r in out)
    return out, baseline


def _windows_with(windows: pd.DataFrame, kind: str) -> int:
    if windows.empty:
        return 0
    return int(windows["faults"].fillna("").str.split(";").apply(lambda kinds: kind in kinds).sum())


def _touched(faults: list[Fault]) -> int | None:
    known = [f.touched for f in faults if f.touched is not None]
    return sum(known) if known else None


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
