"""The run's store and process telemetry (``telemetry.jsonl``, docs/CONTRACTS.md "Telemetry") as a
table, the growth of a store counter, and the report's chart of it beside the faults.

Redis counters (``evicted_keys``, ``expired_keys``, ``rejected_connections``) count since the
store started, so a restart resets them: growth is the sum of the rises between samples, never a
negative difference.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from contracts.jsonl import line_chunks, printable, problem, report, torn
from contracts.runfolder import RunFolder
from contracts.timeline import INFO_REFUSED, telemetry_sample

STORE_COLUMNS = ("used_memory", "maxmemory", "evicted_keys", "expired_keys", "connected_clients",
                 "rejected_connections", "instantaneous_ops_per_sec")
MB = 1024 * 1024


def load(run_dir: str | Path, problems: list[str] | None = None, span=None) -> pd.DataFrame:
    """One row per sample: time, users, store_ok, store_error, the store columns, keys and expires
    (every db), and ``rss:<process>`` per Locust process (bytes). Empty when the run has no telemetry.
    ``span``: the run's (oracle.report_data.run_span); a sample far outside it is left out, all of them in one
    warning in ``problems`` naming the file and its lines."""
    path = RunFolder(run_dir).telemetry
    problems = [] if problems is None else problems
    rows, far, refused = [], [], []
    for number, rec in _samples(path, problems) if path.is_file() else ():
        if span is not None and span.far(float(rec["time"])):
            far.append((number, float(rec["time"])))
            continue
        store = rec.get("store") if isinstance(rec.get("store"), dict) else None
        if str(rec.get("store_error") or "").startswith(INFO_REFUSED):  # no INFO numbers: unknown, not zeros
            refused.append(number)
            store = None
        dbs = (store or {}).get("keyspace") or {}
        row = {"time": float(rec.get("time") or 0), "users": rec.get("users"), "store_ok": store is not None,
               "store_error": rec.get("store_error"),
               **{c: (store or {}).get(c) for c in STORE_COLUMNS},
               "keys": sum(int(d.get("keys") or 0) for d in dbs.values()) if store else None,
               "expires": sum(int(d.get("expires") or 0) for d in dbs.values()) if store else None}
        row.update({f"rss:{name}": value for name, value in (rec.get("rss") or {}).items()})
        rows.append(row)
    if far:
        problems.append(_far_warning(path, far, span))
    if refused:
        problems.append(f"{printable(path)}: the store refused INFO in {len(refused):,} sample"
                        f"{'s' * (len(refused) != 1)} (the --store-url user lacks +info): no store telemetry (memory, "
                        "keys, expired and evicted keys) for them; grant the user +info to have it")
    frame = pd.DataFrame(rows, columns=None if rows else ["time", "store_ok", *STORE_COLUMNS])
    return frame.sort_values("time", ignore_index=True) if rows else frame


def unanswered_outside_faults(run_dir: str | Path, faults: list, recovery_s: float = 0.0) -> str | None:
    """A warning when the store did not answer this run's telemetry while no fault of this run was in force (nor
    within ``recovery_s`` of one's end): requests that failed then are judged by the errors gate as the bot's own,
    though another run's chaos on a shared store, or an outage, may have caused them (verdict hunt 13, D1)."""
    from oracle.keys import utc

    t = load(run_dir)
    if t.empty or "store_error" not in t:
        return None
    error = t["store_error"].fillna("").astype(str)
    down = t[(error != "") & ~error.str.startswith(INFO_REFUSED)]
    spans = [(f.start, (f.end if f.end is not None else np.inf) + recovery_s) for f in faults]
    times = [at for at in down["time"] if not any(start <= at <= end for start, end in spans)]
    if not times:
        return None
    first = down.loc[down["time"] == times[0], "store_error"].iloc[0]
    return (f"{printable(RunFolder(run_dir).telemetry)}: the store did not answer {len(times):,} of this run's "
            f"telemetry sample(s) between {utc(times[0])} and {utc(times[-1])} while no fault of this run was in "
            f"force (first: {str(first)[:120]}): requests that failed then count against the bot in the errors "
            "gate, though another run's chaos on a shared store, or an outage of the store, may have caused them; "
            "the report's store panel marks them")


def _samples(path: Path, problems: list[str]):
    """(line number, sample) of telemetry.jsonl, as contracts.jsonl.read_jsonl reads it (a bad line is one
    file:line problem, a torn last line skipped), with each sample's line number for ``load``'s warning."""
    for before, lines, last in line_chunks(path):
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                yield before + i + 1, telemetry_sample(raw)
            except ValueError as exc:
                if not torn(raw, last and i == len(lines) - 1):
                    report(problems, problem(path, before + i + 1, exc, raw))


def _far_warning(path: Path, far: list[tuple[int, float]], span) -> str:
    from oracle.timeline import at

    lines = ", ".join(str(n) for n, _ in far[:5]) + (f" and {len(far) - 5:,} more" if len(far) > 5 else "")
    times = [t for _, t in far]
    when = f"at {at(times[0])}" if len(times) == 1 else f"from {at(min(times))} to {at(max(times))}"
    return (f"{printable(path)}: line{'s' if len(far) > 1 else ''} {lines}: {len(far):,} sample"
            f"{'s' if len(far) > 1 else ''} {when} far outside the run ({at(span.start)} to {at(span.end)}, give or "
            f"take {span.slack:,.0f} s): a wrong clock or a hand-edited line; left out of the telemetry chart")


def counter_growth(frame: pd.DataFrame, column: str, start: float | None = None, end: float | None = None) -> int:
    """How much a store counter rose between samples in [start, end] (a reset counts from zero)."""
    if frame.empty or column not in frame:
        return 0
    f = frame[frame["store_ok"]]
    if start is not None:
        f = f[f["time"] >= start]
    if end is not None:
        f = f[f["time"] <= end]
    values = f[column].dropna().astype(float).to_numpy()
    if len(values) < 2:
        return 0
    rises = np.diff(values)
    return int(np.where(rises >= 0, rises, values[1:]).sum())  # after a restart the counter starts at 0


def chart(data, out: Path) -> Path | None:
    """Store memory against maxmemory, keys, evicted/expired keys, clients, ops/s and the Locust processes'
    RSS on the run's time axis, with the faults shaded as on the timeline; None when the run has no telemetry."""
    from oracle import charts
    import matplotlib.pyplot as plt

    from oracle.report_data import run_span

    span = run_span(data.run, data.windows, RunFolder(data.path).run_json, [])  # its own warnings: load_run's
    t = load(data.path, data.warnings, span)  # a bad line, or samples far outside the run: warnings in the report
    if t.empty:
        return None
    x = t["time"].to_numpy(float) - data.t0
    ok = t["store_ok"].to_numpy(bool)
    rss = [c for c in t.columns if c.startswith("rss:")]
    panels = [("Redis memory (MB)", [("used_memory", "used", 1 / MB), ("maxmemory", "maxmemory", 1 / MB)]),
              ("Keys (all dbs)", [("keys", "keys", 1), ("expires", "with a TTL", 1)]),
              ("Evicted and expired keys (since the store started)",
               [("evicted_keys", "evicted", 1), ("expired_keys", "expired", 1)]),
              ("Clients", [("connected_clients", "connected", 1), ("rejected_connections", "rejected", 1)]),
              ("Store operations/s", [("instantaneous_ops_per_sec", "ops/s", 1)]),
              ("Locust processes' RSS (MB)", [(c, _process_label(c[4:], rss), 1 / MB) for c in rss])]
    colors = ["#0f766e", "#dc2626", "#2563eb", "#f59e0b", "#7c3aed", "#64748b", "#db2777", "#059669"]
    with plt.rc_context(charts.STYLE):
        fig, axes = plt.subplots(len(panels), 1, figsize=(12, 1.9 * len(panels) + 0.6), sharex=True,
                                 gridspec_kw={"hspace": 0.35})
        for ax, (title, series) in zip(axes, panels):
            ax.set_title(title, pad=4)
            drawn = 0
            for i, (column, label, scale) in enumerate(series):
                if column not in t or t[column].isna().all():
                    continue
                y = t[column].astype(float).to_numpy() * scale
                if column == "maxmemory" and not np.nanmax(y) > 0:
                    continue  # 0 = no limit
                style = {"ls": "--", "lw": 1.2} if column == "maxmemory" else {"lw": 1.6, "marker": "o", "ms": 2.5}
                ax.plot(x, y, color=colors[i % len(colors)], label=label, **style)
                drawn += 1
            if drawn:
                ax.legend(loc="lower right", bbox_to_anchor=(1, 1.0), ncol=4, fontsize=9)
                ax.set_ylim(bottom=0)
            else:
                ax.text(0.5, 0.5, "not sampled", ha="center", va="center", transform=ax.transAxes, color=charts.QUIET)
        unanswered = ~ok & t["store_error"].notna().to_numpy(bool) & \
            ~t["store_error"].fillna("").astype(str).str.startswith(INFO_REFUSED).to_numpy(bool)
        if unanswered.any():  # the store did not answer (not: refused INFO): mark it on the memory panel
            axes[0].plot(x[unanswered], np.zeros(unanswered.sum()), "x", color="#be123c", ms=7, mew=2, clip_on=False,
                         label="store did not answer")
            axes[0].legend(loc="lower right", bbox_to_anchor=(1, 1.0), ncol=4, fontsize=9)
        handles = charts.shade_faults(axes, data)
        if handles:
            fig.legend(handles=handles, loc="upper center", ncol=min(6, len(handles)), bbox_to_anchor=(0.5, 0.0),
                       title="faults (shaded)", fontsize=9)
        axes[-1].set_xlabel("seconds since run start")
        axes[-1].set_xlim(0, max(data.t_end - data.t0, float(x.max()) if len(x) else 0, 1))
        return charts._save(fig, out)


def _process_label(name: str, columns: list[str]) -> str:
    """``master``/``local`` as they are; a worker by its number (Locust's ids are 40 characters: a legend
    of them covers the panel's title)."""
    if name in ("master", "local"):
        return name
    workers = [c[4:] for c in columns if c[4:] not in ("master", "local")]
    return f"worker {workers.index(name) + 1}"
