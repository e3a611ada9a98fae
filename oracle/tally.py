"""What the audit counts, as sums that add up across batches of sessions: memory set by the run's
duration (one row per window) and its faults and steps, never by how many turns it had.

Each batch of judged sessions is tallied where it was judged (``Tally.add``); the audit adds the
tallies (``Tally.merge``) and turns the total into windows.csv and the summary's counts. Latency
quantiles come from a log-spaced histogram (bins 5% apart), the price of not keeping every
turn's latency (a day at 5 s windows is 27 MB of histograms).

Windows are aligned to multiples of ``window_s`` since the epoch; a turn counts where it
completed (``done``: received, or sent when nothing came back). Fault rates count turns *sent*
while a kind of fault was in force (plus the recovery margin); the loss of an acknowledged turn
is charged to the first fault in force at or after its acknowledgement (oracle/attribution.py
turns these counts into rates and tests).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

LATENCY_MIN, LATENCY_RATIO, LATENCY_BINS = 1e-4, 1.05, 400  # 0.1 ms .. ~8 hours, bins 5% apart
MAX_REASONS = 100  # distinct reasons of failed requests kept (Tally.add_failures)
OTHER_REASONS = "(other reasons)"
FAR_S = 3600.0  # turns this far (or the bulk's own length, when longer) from the bulk of the run are warned of
MAX_WINDOWS = 800_000  # ~1.3 GB of rows: 46 days of 5-s windows
# per-window columns, in this order
WINDOW_COUNTS = ("acked", "errors", "probes", "probes_failed", "lost", "crosstalk")
# per fault kind (and the quiet baseline): turns sent while it was in force
DURING = ("turns", "ok", "answered", "failed", "lost", "anomalous")


def latency_bins(latency: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        bins = np.floor(np.log(np.maximum(latency, LATENCY_MIN) / LATENCY_MIN) / math.log(LATENCY_RATIO))
    return np.clip(np.nan_to_num(bins), 0, LATENCY_BINS - 1).astype(np.int64)


def quantiles(hist: np.ndarray, qs=(0.5, 0.95, 0.99)) -> list[float | None]:
    """Quantiles of a latency histogram (the bin's geometric middle), None when it is empty."""
    total = hist.sum()
    if total == 0:
        return [None] * len(qs)
    cumulative = np.cumsum(hist)
    out = []
    for q in qs:
        b = int(np.searchsorted(cumulative, q * total, side="left"))
        out.append(float(LATENCY_MIN * LATENCY_RATIO ** (b + 0.5)))
    return out


class Windows:
    """Dense per-window rows: counts and a latency histogram for the windows ``start`` to ``end``.
    The buffers grow by doubling: a day of 5-s windows is 17,280 rows, and growing them exactly,
    a batch at a time, copied the whole table for every batch."""

    def __init__(self):
        self.start: int | None = None  # the first window in use
        self.end: int | None = None    # the last
        self._base = 0                 # the window of the buffers' first row
        self._counts = np.zeros((0, len(WINDOW_COUNTS) + 1), np.int64)  # and last, every turn (``turns``)
        self._latency = np.zeros((0, LATENCY_BINS), np.int32)
        self.steps: Counter = Counter()  # (window, step) -> turns

    @property
    def counts(self) -> np.ndarray:
        """(windows, WINDOW_COUNTS): a view of the rows in use."""
        return self._counts[self._rows(), :len(WINDOW_COUNTS)]

    @property
    def turns(self) -> np.ndarray:
        """(windows,): every turn that completed in each window, ok or not (``far_turns``)."""
        return self._counts[self._rows(), -1]

    @property
    def latency(self) -> np.ndarray:
        """(windows, LATENCY_BINS): a view of the rows in use."""
        return self._latency[self._rows()]

    def _rows(self) -> slice:
        return slice(0, 0) if self.start is None else slice(self.start - self._base, self.end - self._base + 1)

    def _cover(self, lo: int, hi: int) -> None:
        first = lo if self.start is None else min(lo, self.start)
        last = hi if self.end is None else max(hi, self.end)
        if last - first >= MAX_WINDOWS:  # one turn dated decades away would allocate tens of gigabytes
            from oracle.history import JournalError

            raise JournalError(f"the journal's turns span {last - first + 1:,} windows ({first:,} to {last:,}; at most "
                               f"{MAX_WINDOWS:,}): some turn's sent or received time lies far from the others (a "
                               "wrong clock or a hand-edited line: look for a time years away), or the run is longer "
                               "than the windows allow: pass a longer --window")
        used = self._rows()
        self.start = lo if self.start is None else min(self.start, lo)
        self.end = hi if self.end is None else max(self.end, hi)
        size = len(self._counts)
        if self._base <= self.start and self.end < self._base + size:
            return
        span = self.end - self.start + 1
        grown = min(max(2 * size, span), MAX_WINDOWS)
        base = self.start - (grown - span) // 2  # the slack split between both ends: batches come in any order
        counts = np.zeros((grown, self._counts.shape[1]), np.int64)
        latency = np.zeros((grown, LATENCY_BINS), np.int32)
        if used.stop > used.start:
            at = self._base + used.start - base
            counts[at:at + used.stop - used.start] = self._counts[used]
            latency[at:at + used.stop - used.start] = self._latency[used]
        self._base, self._counts, self._latency = base, counts, latency

    def add(self, index: np.ndarray, columns: list[np.ndarray], latency_index: np.ndarray,
            latency_bin: np.ndarray, steps: np.ndarray) -> None:
        if len(index) == 0:
            return
        self._cover(int(index.min()), int(index.max()))
        rows = index - self.start
        n = len(self.counts)
        for c, values in enumerate(columns):
            self.counts[:, c] += np.bincount(rows, weights=values, minlength=n).astype(np.int64)[:n]
        self.turns[:] += np.bincount(rows, minlength=n)[:n]
        if len(latency_index):
            np.add.at(self.latency, (latency_index - self.start, latency_bin), 1)
        known = ~np.isnan(steps)
        self.steps.update(zip(index[known].tolist(), steps[known].astype(int).tolist()))

    def merge(self, other: "Windows") -> None:
        if other.start is None:
            return
        self._cover(other.start, other.end)
        at = other.start - self.start
        self._counts[self._rows()][at:at + len(other.counts)] += other._counts[other._rows()]
        self.latency[at:at + len(other.latency)] += other.latency
        self.steps.update(other.steps)


@dataclass
class Tally:
    """Everything the audit sums over turns and sessions (see the module docstring)."""
    window_s: float
    kinds: tuple = ()              # fault kinds, in the order of the ``during`` and ``exposure`` rows
    totals: Counter = field(default_factory=Counter)
    windows: Windows = field(default_factory=Windows)
    latency: np.ndarray = field(default_factory=lambda: np.zeros(LATENCY_BINS, np.int64))
    during: np.ndarray | None = None     # (kinds + baseline, DURING)
    exposure: np.ndarray | None = None   # (kinds + quiet, [ok acknowledged before it, of them lost])
    spanned: np.ndarray | None = None    # (kinds,): sessions acknowledged before a fault began, probed after (add_spans)
    steps: dict = field(default_factory=dict)  # step -> {"counts": Counter, "latency": hist, "start", "end"}
    acked_by_kind: Counter = field(default_factory=Counter)  # turn kind -> acknowledged turns (the breakdown's)
    lost_by_kind: Counter = field(default_factory=Counter)   # turn kind -> of them lost
    failures: Counter = field(default_factory=Counter)  # why requests failed that no fault explains -> how many
    first_sent: float | None = None
    last_done: float | None = None
    first_ack: float | None = None

    def __post_init__(self):
        k = len(self.kinds) + 1
        if self.during is None:
            self.during = np.zeros((k, len(DURING)), np.int64)
        if self.exposure is None:
            self.exposure = np.zeros((k, 2), np.int64)
        if self.spanned is None:
            self.spanned = np.zeros(k - 1, np.int64)

    def add_spans(self, first_ack: np.ndarray, last_probe: np.ndarray, faults: list) -> None:
        """Per session, its first acknowledged turn and its last answered probe's send: a session with one before a
        fault began and the other after tested memory across it. At --think 0 a conversation burns its turns
        while the bot is down, and a bot whose memory a restart wipes PASSed with no probe across any restart."""
        for f in faults:
            self.spanned[f.kind] += int(((first_ack < f.start) & (last_probe >= f.start)).sum())

    def add_turns(self, t: dict, during: np.ndarray, exposure: np.ndarray, quiet: np.ndarray) -> None:
        """One batch's turns as parallel arrays (``t``: sent, done, ok, error, answered, failed,
        online, lost, anomalous, step, latency), with which fault kinds each was sent under
        (``during``: bool (turns, kinds)), the kind of the first fault after each ack
        (``exposure``: index, len(kinds) for none) and whether no fault overlapped it (``quiet``); ``t["kind"]``
        is each turn's kind (plant, probe, chatter, burst), ``t["refused_burst"]`` whether it is a burst's turn the bot
        answered 4xx."""
        ok, lost = t["ok"], t["lost"] & t["ok"]
        n = len(ok)
        if n == 0:
            return
        self.first_sent = _min(self.first_sent, float(t["sent"].min()))
        self.last_done = _max(self.last_done, float(t["done"].max()))
        if ok.any():
            self.first_ack = _min(self.first_ack, float(t["done"][ok].min()))
        w = np.floor(t["done"] / self.window_s).astype(np.int64)
        columns = [ok, t["error"], t["answered"], t["failed"], lost, t["online"]]
        lat = latency_bins(t["latency"][ok])
        self.windows.add(w, [c.astype(np.float64) for c in columns], w[ok], lat, t["step"])
        np.add.at(self.latency, lat, 1)
        values = np.stack([np.ones(n, bool), ok, t["answered"], t["failed"], lost, t["anomalous"]], axis=1)
        for k in range(len(self.kinds)):
            self.during[k] += values[during[:, k]].sum(axis=0)
        self.during[-1] += values[~during.any(axis=1)].sum(axis=0)
        self.exposure[:, 0] += np.bincount(exposure[ok], minlength=len(self.kinds) + 1)
        self.exposure[:, 1] += np.bincount(exposure[lost], minlength=len(self.kinds) + 1)
        self.totals.update({"errors_quiet": int((t["error"] & quiet).sum()), "turns_quiet": int(quiet.sum()),
                            "errors_quiet_refused_burst": int((t["refused_burst"] & quiet).sum())})
        self.acked_by_kind.update(t["kind"][ok].tolist())
        self.lost_by_kind.update(t["kind"][lost].tolist())
        for step in np.unique(t["step"][~np.isnan(t["step"])]).tolist():
            mask = t["step"] == step
            s = self.steps.setdefault(int(step), {"counts": Counter(), "latency": np.zeros(LATENCY_BINS, np.int64),
                                                  "start": None, "end": None})
            s["counts"].update({"acked": int(ok[mask].sum()), "answered": int(t["answered"][mask].sum()),
                                "failed": int(t["failed"][mask].sum()), "lost": int(lost[mask].sum())})
            np.add.at(s["latency"], latency_bins(t["latency"][mask & ok]), 1)
            s["start"] = _min(s["start"], float(t["sent"][mask].min()))
            s["end"] = _max(s["end"], float(t["done"][mask].max()))

    def add_failures(self, reasons) -> None:
        """Count the failed requests no fault explains by their journaled ``error``, the first MAX_REASONS reasons
        kept (one holding an id or a time is a reason per turn), the rest counted as one: the verdict that FAILs the
        errors gate, or says nothing was acknowledged, names the commonest (a bot answering with its JSON encoded
        twice: every turn a 200 with no reply field, and the line said only "refused, unreachable or always
        failing")."""
        for reason in reasons:
            self._add_failure(reason if isinstance(reason, str) and reason else "no reason journaled", 1)

    def _add_failure(self, text: str, count: int) -> None:
        self.failures[text if text in self.failures or len(self.failures) < MAX_REASONS else OTHER_REASONS] += count

    def merge(self, other: "Tally") -> None:
        for text, count in other.failures.items():
            self._add_failure(text, count)
        self.totals.update(other.totals)
        self.acked_by_kind.update(other.acked_by_kind)
        self.lost_by_kind.update(other.lost_by_kind)
        self.windows.merge(other.windows)
        self.latency += other.latency
        self.during += other.during
        self.exposure += other.exposure
        self.spanned += other.spanned
        for step, s in other.steps.items():
            mine = self.steps.setdefault(step, {"counts": Counter(), "latency": np.zeros(LATENCY_BINS, np.int64),
                                                "start": None, "end": None})
            mine["counts"].update(s["counts"])
            mine["latency"] += s["latency"]
            mine["start"], mine["end"] = _min(mine["start"], s["start"]), _max(mine["end"], s["end"])
        self.first_sent = _min(self.first_sent, other.first_sent)
        self.last_done = _max(self.last_done, other.last_done)
        self.first_ack = _min(self.first_ack, other.first_ack)


    def far_turns(self, sessions: Path | None = None) -> list[str]:
        """A warning per group of turns far from the bulk of the run (``far_groups``), naming when they completed,
        how far off, and (from ``sessions``, the audit's sessions.csv) their sessions; a warning too when the first
        turn was sent far before the bulk (its reply came back with it). They are judged and counted as the
        others (nothing recorded is dropped), but the run's span runs to them: its throughput (acknowledged turns
        over first to last turn) comes out near 0 and windows.csv has a row per window of the empty gap between.

        Why: one turn from a worker whose clock was 20 days ahead PASSed with "throughput 0.0 acked turns/s" and
        345,605 windows, with no word of it."""
        w, groups = self.windows, self.far_groups()
        if w.start is None:
            return []
        found = []
        bulk = next((g for g in groups if g["bulk"]), None)
        for g in groups:
            if g["bulk"]:
                continue
            off = bulk["start"] - g["end"] if g["end"] <= bulk["start"] else g["start"] - bulk["end"]
            side = "before" if g["end"] <= bulk["start"] else "after"
            named = _sessions_between(sessions, g["start"], g["end"]) if sessions is not None else []
            who = (f" (session{'s' if len(named) > 1 else ''} {', '.join(named[:3])}"
                   f"{f' and {len(named) - 3:,} more' if len(named) > 3 else ''})") if named else ""
            one = g["turns"] == 1
            found.append(f"journal: {g['turns']:,} turn{'' if one else 's'}{who} completed between "
                         f"{_at(g['start'])} and {_at(g['end'])}, {_duration(off)} {side} the other "
                         f"{bulk['turns']:,} turns ({_at(bulk['start'])} to {_at(bulk['end'])}): a worker's clock "
                         f"off, or a hand-edited line. {'It is' if one else 'They are'} judged with the rest, but the "
                         f"run's span is stretched "
                         f"to {_duration(self.last_done - self.first_sent)}: the throughput is over all of it and "
                         f"windows.csv has {len(w.counts):,} rows. Fix the clock (or the line) and audit again")
        if bulk is not None and self.first_sent is not None and \
                self.first_sent < groups[0]["start"] - max(FAR_S, bulk["end"] - bulk["start"]):
            named = _sessions_between(sessions, self.first_sent, self.first_sent, "first_sent") \
                if sessions is not None else []
            who = f" (session {named[0]})" if named else ""
            found.append(f"journal: a turn{who} was sent at {_at(self.first_sent)}, "
                         f"{_duration(groups[0]['start'] - self.first_sent)} before the run's turns completed "
                         f"(from {_at(groups[0]['start'])}): a worker's clock off, or a hand-edited line; the run's "
                         f"span and its throughput run from it. Fix the clock (or the line) and audit again")
        return found

    def far_groups(self) -> list[dict]:
        """The turns by completion time in groups apart by more than FAR_S of windows without a turn, in time
        order, each {"start", "end" (epochs of its first and last window), "turns", "bulk"}. The group with the
        most turns is the bulk, and takes in every group it is no farther from than FAR_S or its own length
        (a long run may pause for longer than an hour); the groups left are far from the run."""
        w = self.windows
        if w.start is None:
            return []
        turns = w.turns
        used = np.flatnonzero(turns)
        if len(used) == 0:
            return []
        apart = np.diff(used) * self.window_s  # from a used window's start to the next one's
        cuts = np.flatnonzero(apart > FAR_S) + 1
        firsts, lasts = np.r_[0, cuts], np.r_[cuts - 1, len(used) - 1]
        sizes = np.add.reduceat(turns[used], firsts)
        start = (w.start + used[firsts]) * self.window_s
        end = (w.start + used[lasts] + 1) * self.window_s
        lo = hi = int(np.argmax(sizes))
        while True:
            reach = max(FAR_S, end[hi] - start[lo])
            if lo > 0 and start[lo] - end[lo - 1] <= reach:
                lo -= 1
            elif hi < len(sizes) - 1 and start[hi + 1] - end[hi] <= reach:
                hi += 1
            else:
                break
        groups = [{"start": float(start[k]), "end": float(end[k]), "turns": int(sizes[k]), "bulk": False}
                  for k in range(len(sizes)) if not lo <= k <= hi]
        groups.append({"start": float(start[lo]), "end": float(end[hi]), "turns": int(sizes[lo:hi + 1].sum()),
                       "bulk": True})
        return sorted(groups, key=lambda g: g["start"])


def _sessions_between(sessions: Path, start: float, end: float, column: str | None = None) -> list[str]:
    """The sessions of sessions.csv whose first turn was sent, or last reply received, in [start, end] (one
    ``column`` when given); [] when the file cannot be read (the warning then names no session)."""
    import pandas as pd

    found: list[str] = []
    columns = [column] if column else ["first_sent", "last_received"]
    try:
        for chunk in pd.read_csv(sessions, usecols=["session", *columns], dtype={"session": str},
                                 keep_default_na=False, chunksize=100_000):
            times = chunk[columns].apply(pd.to_numeric, errors="coerce")
            hit = ((times >= start) & (times <= end)).any(axis=1)
            found += chunk["session"][hit].tolist()
    except (OSError, ValueError):
        return []
    return found


def _at(epoch: float) -> str:
    from oracle.timeline import at

    return at(epoch)


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.0f} s"


def _min(a, b):
    return b if a is None else a if b is None else min(a, b)


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)
