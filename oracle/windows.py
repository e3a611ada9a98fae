"""The per-window table: throughput, latency, probes and losses per time slice, with active faults.

Windows are ``window_s`` long and aligned to multiples of it since the epoch. A turn counts in the
window where it completed (received, or sent when it never completed); a lost turn counts where
it was acknowledged, so each window's stored loss rate is lost/acked of the same turns; findings
count where their evidence lies. The counts come from the audit's tally (oracle/tally.py).
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from oracle.tally import WINDOW_COUNTS, Windows, quantiles
from oracle.timeline import Fault

COLUMNS = ["start", "end", "step", "acked", "throughput", "latency_p50", "latency_p95", "latency_p99", "errors",
           "probes", "probes_failed", "lost", "crosstalk", "anomalies", "faults"]


def active_kinds(faults: list[Fault], start: float, end: float, run_end: float, margin: float = 0.0) -> list[str]:
    kinds = {f.kind for f in faults if f.start < end and (f.end if f.end is not None else run_end) + margin > start}
    return sorted(kinds)


def window_table(w: Windows, window_s: float, faults: list[Fault], steps: list[dict],
                 anomalies: Counter, crosstalk: Counter) -> pd.DataFrame:
    """One row per window from the first turn's to the last's (``anomalies``/``crosstalk``: findings
    per window index, from the findings' evidence times)."""
    if w.start is None:
        return pd.DataFrame(columns=COLUMNS)
    index = np.arange(w.start, w.start + len(w.counts))
    starts = index * window_s
    table = pd.DataFrame(w.counts, columns=list(WINDOW_COUNTS))
    table.insert(0, "start", starts)
    table.insert(1, "end", starts + window_s)
    table["throughput"] = table["acked"] / window_s
    lat = [quantiles(row) for row in w.latency]
    for i, name in enumerate(("latency_p50", "latency_p95", "latency_p99")):
        table[name] = [q[i] if q[i] is not None else np.nan for q in lat]
    table["crosstalk"] += [crosstalk.get(int(k), 0) for k in index]
    table["anomalies"] = [anomalies.get(int(k), 0) for k in index]
    run_end = float(table["end"].iloc[-1])
    table["faults"] = [";".join(active_kinds(faults, s, s + window_s, run_end)) for s in starts]
    table["step"] = _steps(index, starts + window_s / 2, steps, w.steps)
    return table[COLUMNS]


def _steps(index: np.ndarray, middles: np.ndarray, steps: list[dict], seen: Counter) -> pd.array:
    """The load step running at each window's midpoint (steps.jsonl), else the turns' most common step
    in it (the lowest on a tie)."""
    best: dict[int, tuple] = {}
    for (w, step), n in seen.items():
        if w not in best or (-n, step) < best[w]:
            best[w] = (-n, step)
    out = []
    for k, mid in zip(index.tolist(), middles.tolist()):
        hit = [st["step"] for st in steps if st.get("start", math.inf) <= mid < st.get("end", math.inf)]
        out.append(int(hit[-1]) if hit else (best[k][1] if k in best else None))
    return pd.array(out, dtype="Int64")
