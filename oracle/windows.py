"""The per-window table: throughput, latency, probes and losses per time slice, with active faults.

A turn counts in the window where it completed (received, or sent when it never
completed); a lost turn counts where it was acknowledged, so each window's stored loss rate is
lost/acked of the same turns; findings count where their evidence lies.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from oracle.timeline import Fault

COLUMNS = ["start", "end", "step", "acked", "throughput", "latency_p50", "latency_p95", "latency_p99", "errors",
           "probes", "probes_failed", "lost", "crosstalk", "anomalies", "faults"]


def window_edges(turns: pd.DataFrame, window_s: float) -> np.ndarray:
    t0 = math.floor(turns["sent"].min())
    t1 = max(turns["done"].max(), turns["sent"].max())
    count = max(1, int(math.ceil((t1 - t0) / window_s + 1e-9)))
    if t0 + count * window_s <= t1:
        count += 1
    return t0 + window_s * np.arange(count + 1)


def _bucket(times: pd.Series, edges: np.ndarray) -> pd.Series:
    idx = np.searchsorted(edges, times.to_numpy(dtype=float), side="right") - 1
    return pd.Series(np.clip(idx, 0, len(edges) - 2), index=times.index)


def active_kinds(faults: list[Fault], start: float, end: float, run_end: float, margin: float = 0.0) -> list[str]:
    kinds = {f.kind for f in faults if f.start < end and (f.end if f.end is not None else run_end) + margin > start}
    return sorted(kinds)


def window_table(turns: pd.DataFrame, findings: pd.DataFrame, faults: list[Fault], steps: list[dict],
                 window_s: float) -> pd.DataFrame:
    if turns.empty:
        return pd.DataFrame(columns=COLUMNS)
    edges = window_edges(turns, window_s)
    n = len(edges) - 1
    run_end = float(edges[-1])
    done = _bucket(turns["done"], edges)
    ok = turns["ok"]

    def count(mask, where):
        return np.bincount(where[mask], minlength=n)[:n]

    acked = count(ok, done)
    lat = turns.loc[ok, ["latency"]].assign(w=done[ok])
    q = lat.groupby("w")["latency"].quantile([0.5, 0.95, 0.99]).unstack() if not lat.empty else pd.DataFrame()
    table = pd.DataFrame({
        "start": edges[:-1], "end": edges[1:], "acked": acked, "throughput": acked / window_s,
        "errors": count(turns["error"], done), "probes": count(turns["answered_probe"], done),
        "probes_failed": count(turns["failed_probe"], done), "lost": count(turns["lost"] & ok, done),
        "crosstalk": count(turns["online_crosstalk"], done),
    })
    for col, qv in (("latency_p50", 0.5), ("latency_p95", 0.95), ("latency_p99", 0.99)):
        table[col] = q[qv].reindex(range(n)).to_numpy() if qv in getattr(q, "columns", []) else np.nan
    timed = findings[findings["time"].notna()] if not findings.empty else findings
    if not timed.empty:
        fw = _bucket(timed["time"].astype(float), edges)
        table["anomalies"] = np.bincount(fw, minlength=n)[:n]
        cross = timed["class"] == "crosstalk"
        table["crosstalk"] += np.bincount(fw[cross], minlength=n)[:n]
    else:
        table["anomalies"] = 0
    table["faults"] = [";".join(active_kinds(faults, s, e, run_end)) for s, e in zip(edges[:-1], edges[1:])]
    table["step"] = _steps(table, turns, done, steps)
    return table[COLUMNS]


def _steps(table: pd.DataFrame, turns: pd.DataFrame, done: pd.Series, steps: list[dict]) -> list:
    """The load step running at each window's midpoint (steps.jsonl), else the turns' most common step."""
    out = []
    known = pd.DataFrame({"w": done.to_numpy(), "step": turns["step"].to_numpy()}).dropna()
    counts = known.value_counts().reset_index(name="n")  # most turns first; ties: the lowest step
    counts = counts.sort_values(["w", "n", "step"], ascending=[True, False, True]).drop_duplicates("w")
    by_window = dict(zip(counts["w"].tolist(), counts["step"].tolist()))
    for i, (s, e) in enumerate(zip(table["start"], table["end"])):
        mid = (s + e) / 2
        hit = [st["step"] for st in steps if st.get("start", math.inf) <= mid < st.get("end", math.inf)]
        if hit:
            out.append(int(hit[-1]))
        else:
            v = by_window.get(i)
            out.append(None if v is None else int(v))
    return pd.array(out, dtype="Int64")
