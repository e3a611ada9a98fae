"""Per-fault-kind attribution, two ways; a fault is blamed only where its rate is above the quiet baseline's.

*During*: rates among turns sent while a kind of fault was in force (plus a recovery margin, since
a store often loses data a little after the fault heals) against the quiet baseline of turns sent
when no fault was in force or recovering — what users feel during the fault.

*Lost after*: a lost turn was acknowledged at some moment and gone at the audit, so what destroyed
it happened after its acknowledgement: the first fault in force at or after that moment is the
candidate. A store's restart or failover (``LASTING``) destroys a write made any time before it, and is the
candidate for every turn acknowledged before it; any other fault (a bot killed or paused, connections
dropped) can only cut a write still in flight, and is the candidate only for turns acknowledged at most the
recovery margin before it began, or while it was in force, with no store restart or failover after them: a
Redis crash's losses were charged to every bot fault between the acks and the crash (chaos hunt 18). The
price: a write-behind bot's losses to a kill, followed by a store restart that lost nothing, are charged to
the restart. A kind's *exposure* is every acknowledged turn whose candidate is of that kind; the
baseline's is every acknowledged turn with no candidate. A kind is charged with
its lost turns only when its loss rate over its exposure is above the baseline's (Fisher's exact
test, one-sided, p < ALPHA — the test ``oracle compare`` uses): a bot that loses turns at the same
rate with or without the fault (memory in a per-process dict) is not the fault's doing.

A fault that touched nothing (``touched: 0`` on the timeline: no connection to kill) is
*ineffective*: listed as such, never a fault interval, never credited with surviving anything.

The counts come from the audit's tally (oracle/tally.py); here they become rates and tests.
"""
from __future__ import annotations

import numpy as np

from oracle.metrics import wilson
from oracle.timeline import Fault as TimelineFault

ALPHA = 0.05
LASTING = frozenset({"redis-restart", "redis-failover"})  # fault kinds that can destroy writes made long before
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


def first_fault_after(ok: np.ndarray, done: np.ndarray, faults: list, quiet: int, reach_s: float) -> np.ndarray:
    """Per turn, the kind index of the fault that can have destroyed it (``quiet`` for none, and for turns not
    acknowledged): the first ``lasting`` one (``LASTING``) in force at or after its ack, else the first other one
    in force at or after its ack, acked at most ``reach_s`` before it began; ``faults`` have ``kind``, ``start``,
    ``end``, ``lasting``."""
    kinds = np.full(len(done), quiet, dtype=np.int64)
    for lasting in (True, False):
        for fault in sorted((f for f in faults if f.lasting == lasting), key=lambda f: f.start):  # the earliest wins
            reached = done <= fault.end
            if not lasting:
                reached &= done >= fault.start - reach_s
            kinds[ok & (kinds == quiet) & reached] = fault.kind
    return kinds


def intervals(faults: list[TimelineFault], run_end: float, margin: float = 0.0) -> list[tuple[float, float]]:
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


def _rates(row: np.ndarray) -> dict:
    turns, ok, answered, failed, lost, anomalous = (int(v) for v in row)
    return {"turns": turns, "probe_amnesia": wilson(failed, answered), "stored_loss": wilson(lost, ok),
            "anomalies": wilson(anomalous, turns)}


def by_fault(tally, faults: list[TimelineFault], windows_with: dict[str, int], recovery_s: float) -> tuple[list, dict]:
    """The summary's ``by_fault`` rows and ``baseline`` from the tally's counts."""
    baseline = {"windows": windows_with.get("", 0), **_rates(tally.during[-1])}
    base_exposed, base_lost = (int(v) for v in tally.exposure[-1])
    baseline["lost_after"] = wilson(base_lost, base_exposed)
    out = []
    for k, kind in enumerate(tally.kinds):
        hits = [f for f in faults if f.kind == kind]
        effective = [f for f in hits if f.effective]
        touched = [f.touched for f in hits if f.touched is not None]
        row = {"kind": kind, "windows": windows_with.get(kind, 0), "occurrences": len(hits),
               "effective_occurrences": len(effective), "ineffective": not effective,
               "touched": sum(touched) if touched else None, "recovery_s": recovery_s, **_rates(tally.during[k])}
        for name in RATES:
            b = baseline[name]
            row[name].update(above_baseline(row[name]["count"], row[name]["total"], b["count"], b["total"]))
        exposed, lost = (int(v) for v in tally.exposure[k])
        row["lost_after"] = {**wilson(lost, exposed), **above_baseline(lost, exposed, base_lost, base_exposed)}
        row["charged"] = lost if row["lost_after"]["above_baseline"] else 0
        out.append(row)
    baseline["uncharged"] = int(tally.exposure[:, 1].sum()) - sum(r["charged"] for r in out)
    return out, baseline


def by_step(tally) -> list[dict]:
    """Rates per load step, with the users count the step shape recorded (steps.jsonl)."""
    from oracle.tally import quantiles

    out = []
    for step in sorted(tally.steps):
        s = tally.steps[step]
        c = s["counts"]
        span = max(float(s["end"]) - float(s["start"]), 1e-9)
        out.append({"step": step, "users": s.get("users"), "start": s["start"], "end": s["end"],
                    "acked": c["acked"], "throughput": c["acked"] / span,
                    "latency_p50": quantiles(s["latency"], (0.5,))[0],
                    "probe_amnesia": wilson(c["failed"], c["answered"]),
                    "stored_loss": wilson(c["lost"], c["acked"])})
    return out
