"""The report's charts, drawn with matplotlib (Agg) from a loaded run folder.

Every chart that has a time axis shades each fault's interval in the colour of its kind, and
that colour is the same in every chart and every run (see ``fault_color``), so a reader learns
"orange = kill" once. Each function writes one PNG and returns its path.
"""
from __future__ import annotations

import zlib
from itertools import groupby
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from contracts.runfolder import write_file  # noqa: E402
from oracle.metrics import wilson  # noqa: E402
from oracle.report_data import RATE_TITLES, RunData  # noqa: E402

QUIET = "#8a94a6"
INK = "#1f2933"
SERIES = {"p50": "#2563eb", "p95": "#7c3aed", "p99": "#db2777", "throughput": "#0f766e",
          "probes_failed": "#dc2626", "lost": "#1e3a8a", "crosstalk": "#f59e0b",
          "other": "#64748b"}
_KNOWN_FAULTS = {"kill": "#f97316", "restart": "#ef4444", "pause": "#a855f7", "redis-restart": "#be123c",
                 "redis-client-kill": "#ec4899", "redis-stall": "#6366f1", "lb-drop": "#eab308",
                 "lb-disable": "#0ea5e9", "rolling-restart": "#92400e", "toxic": "#14b8a6"}  # chaos/faults.py kinds
_PALETTE = ["#f97316", "#a855f7", "#0ea5e9", "#eab308", "#14b8a6", "#e11d48", "#84cc16", "#b45309",
            "#6366f1", "#ec4899"]
RUN_COLORS = ["#2563eb", "#dc2626", "#059669", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04"]

STYLE = {
    "font.family": "DejaVu Sans", "font.size": 10, "axes.titlesize": 11, "axes.titleweight": "bold",
    "axes.titlelocation": "left", "axes.edgecolor": "#cbd2d9", "axes.labelcolor": INK,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e4e7eb",
    "grid.linewidth": 0.8, "axes.axisbelow": True, "xtick.color": "#52606d", "ytick.color": "#52606d", "legend.frameon": False,
    "figure.facecolor": "white", "savefig.facecolor": "white",
}


def fault_color(kind: str) -> str:
    """A stable colour per fault kind: fixed for the common kinds, a hash of the name otherwise."""
    return _KNOWN_FAULTS.get(kind) or _PALETTE[zlib.crc32(kind.encode()) % len(_PALETTE)]


def window_faults(windows: pd.DataFrame) -> list[list[str]]:
    return [[k for k in str(v).split(";") if k] if pd.notna(v) else [] for v in windows["faults"]]


def by_step(windows: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Window counts summed per load step; throughput is acked turns over the step's covered seconds."""
    w = windows.dropna(subset=["step"])
    if w.empty:
        return pd.DataFrame(columns=["step", "users", "throughput", "acked", "lost", "probes", "probes_failed"])
    w = w.assign(seconds=(w["end"] - w["start"]).astype(float))
    g = w.groupby("step").agg(acked=("acked", "sum"), lost=("lost", "sum"), probes=("probes", "sum"),
                              probes_failed=("probes_failed", "sum"), seconds=("seconds", "sum")).reset_index()
    g["throughput"] = g["acked"] / g["seconds"].where(g["seconds"] > 0)
    users = {} if steps is None or steps.empty else dict(zip(steps["step"], steps["users"]))
    g["users"] = g["step"].map(users)
    return g


def throughput_bins(windows: pd.DataFrame, bins: int = 5) -> pd.DataFrame:
    """Windows grouped into throughput quantile bins: the curve for a run without load steps."""
    w = windows[windows["acked"].fillna(0) > 0]
    if w.empty:
        return pd.DataFrame(columns=["throughput", "acked", "lost", "probes", "probes_failed"])
    q = min(bins, w["throughput"].nunique())
    labels = pd.qcut(w["throughput"], q=q, duplicates="drop") if q > 1 else pd.Series(0, index=w.index)
    return (w.groupby(labels, observed=True)
            .agg(throughput=("throughput", "mean"), acked=("acked", "sum"), lost=("lost", "sum"),
                 probes=("probes", "sum"), probes_failed=("probes_failed", "sum")).reset_index(drop=True))


def _rates(frame: pd.DataFrame, count: str, total: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    values = [wilson(min(c, n), n) for c, n in zip(frame[count].fillna(0), frame[total].fillna(0))]
    r, lo, hi = (np.array([np.nan if v[key] is None else v[key] for v in values], dtype=float)
                 for key in ("rate", "low", "high"))
    return r * 100, (r - lo) * 100, (hi - r) * 100


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=QUIET, fontsize=12)
    ax.set_xticks([])
    ax.set_yticks([])


def _save(fig, out: Path) -> Path:
    """The figure as ``out``, whole or not at all (contracts.runfolder.write_file): a full device leaves the earlier
    chart as it was, and a FIFO or directory in its place is refused, naming it."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_file(out, lambda fh: fig.savefig(fh, format="png", dpi=110, bbox_inches="tight"))
    finally:
        plt.close(fig)
    return out


TIMELINE_BINS = 1_500  # at most this many points per series on the timeline (~one per pixel of its width)


def timeline_bins(windows: pd.DataFrame, most: int = TIMELINE_BINS) -> tuple[pd.DataFrame, int]:
    """windows.csv's rows as the timeline draws them, and how many consecutive windows each row merges: as they
    are up to ``most`` rows, else merged ``per`` at a time into at most ``most``: counts summed, throughput over
    the merged seconds, each latency quantile the highest of the merged windows' (a spike stays visible).

    Why: one bar per window for each event series; a run whose turns span 20 days (one turn from a worker
    with a wrong clock) has 345,605 windows, and drawing them ran for over 14 minutes, past 7 GB."""
    w = windows.sort_values("start", ignore_index=True)
    if len(w) <= most:
        return w, 1
    per = -(-len(w) // most)
    group = np.arange(len(w)) // per
    seconds = (w["end"] - w["start"]).astype(float)
    sums = w[["acked", "probes_failed", "lost", "crosstalk"]].apply(pd.to_numeric, errors="coerce").fillna(0)
    merged = sums.assign(seconds=seconds).groupby(group).sum()
    merged.insert(0, "start", w["start"].groupby(group).first().to_numpy(float))
    merged.insert(1, "end", w["end"].groupby(group).last().to_numpy(float))
    merged["throughput"] = merged["acked"] / merged["seconds"].where(merged["seconds"] > 0)
    for q in ("latency_p50", "latency_p95", "latency_p99"):
        merged[q] = pd.to_numeric(w[q], errors="coerce").groupby(group).max().to_numpy(float)
    return merged.reset_index(drop=True), per


def timeline(data: RunData, out: Path) -> Path:
    """Jepsen-style: one lane per fault kind on top, then throughput, latency and amnesia events below."""
    t0 = data.t0
    kinds = list(dict.fromkeys(data.faults["kind"])) if not data.faults.empty else []
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(4, 1, figsize=(12, 2.0 + 0.35 * max(1, len(kinds)) + 6.6), sharex=True,
                                 gridspec_kw={"height_ratios": [max(0.6, 0.35 * len(kinds)), 2.2, 2.2, 2.2],
                                              "hspace": 0.18})
        lanes, tput, lat, events = axes
        w, per = timeline_bins(data.windows)
        x_end = data.t_end - t0
        if w.empty:
            for ax in (tput, lat, events):
                _empty(ax, "no windows in audit/windows.csv")
        else:
            x = np.append(w["start"].to_numpy(float) - t0, w["end"].to_numpy(float)[-1] - t0)
            tput.step(x, np.append(w["throughput"].to_numpy(float), w["throughput"].iloc[-1]), where="post",
                      color=SERIES["throughput"], lw=1.8)
            tput.fill_between(x, np.append(w["throughput"].to_numpy(float), w["throughput"].iloc[-1]),
                              step="post", color=SERIES["throughput"], alpha=0.12)
            tput.set_ylabel("acked turns/s")
            tput.set_title("Throughput" + (f" (mean of every {per:,} windows)" if per > 1 else ""), pad=4)
            mid = ((w["start"] + w["end"]) / 2).to_numpy(float) - t0
            for q in ("p50", "p95", "p99"):
                lat.plot(mid, w[f"latency_{q}"].astype(float) * 1000, color=SERIES[q], lw=1.5, label=q,
                         marker="o", ms=2.5)
            lat.set_ylabel("latency (ms)")
            lat.set_title("Latency quantiles" + (f" (the highest window's of every {per:,})" if per > 1 else ""),
                          pad=4)
            lat.legend(loc="lower right", bbox_to_anchor=(1, 1.0), ncol=3, fontsize=9)
            width = (w["end"] - w["start"]).to_numpy(float) * 0.8
            bottom = np.zeros(len(w))
            edges = np.append(w["start"].to_numpy(float), w["end"].to_numpy(float)[-1])
            other = np.histogram(data.anomalies.other_times, bins=edges)[0].astype(float) if len(edges) > 1 else np.zeros(len(w))
            series = [("probes_failed", "failed probes", w["probes_failed"]), ("lost", "lost turns", w["lost"]),
                      ("crosstalk", "cross-talk", w["crosstalk"])]
            if other.any():
                series.append(("other", "other anomalies", other))
            handles = []
            for column, name, raw in series:
                values = pd.Series(raw).fillna(0).to_numpy(float)
                some = values != 0  # a bar of height 0 draws nothing: only the windows with events get a patch
                events.bar(mid[some], values[some], width=width[some], bottom=bottom[some], color=SERIES[column],
                           zorder=3)
                handles.append(Patch(color=SERIES[column], label=name))
                bottom = bottom + values
            events.set_ylabel("events per window" if per == 1 else f"events per {per:,} windows")
            events.yaxis.set_major_locator(MaxNLocator(integer=True))
            events.set_title("Amnesia events", pad=4)
            events.legend(handles=handles, loc="lower right", bbox_to_anchor=(1, 1.0), ncol=4, fontsize=9)
            events.set_ylim(0, max(1.0, float(bottom.max()) * 1.1))
            if bottom.max() == 0:
                events.text(0.5, 0.5, "none", ha="center", va="center", transform=events.transAxes, color=QUIET)
        # fault lanes and shading
        lanes.set_title("Faults (one lane per kind)", pad=4)
        if not kinds:
            lanes.text(0.5, 0.5, "no chaos in this run", ha="center", va="center", transform=lanes.transAxes,
                       color=QUIET)
            lanes.set_yticks([])
        spans_of = fault_spans(data)
        for lane, kind in enumerate(kinds):
            rows = data.faults[data.faults["kind"] == kind]
            spans = spans_of.get(kind, [])
            lanes.broken_barh(spans, (lane - 0.38, 0.76), color=fault_color(kind),
                              hatch=None, edgecolor="white")
            for (start, length), instance, open_ended in zip(spans, rows["instance"], rows["open"]):
                label = f"{instance or ''}{' (not recovered)' if open_ended else ''}"
                if label and length > max(x_end, 1) * 0.04:
                    lanes.text(start + length / 2, lane, label, ha="center", va="center", fontsize=8,
                               color="white", clip_on=True)
        shade_faults((tput, lat, events), data)
        if kinds:
            lanes.set_yticks(range(len(kinds)), kinds)
            lanes.set_ylim(len(kinds) - 0.5, -0.5)
            lanes.grid(False, axis="y")
        # load-step boundaries
        if not data.steps.empty:
            for _, step in data.steps.iterrows():
                if pd.isna(step["start"]):
                    continue
                s = float(step["start"]) - t0
                for ax in axes:
                    ax.axvline(s, color="#52606d", lw=0.9, ls="--", alpha=0.7)
                users = "" if pd.isna(step.get("users")) else f" · {int(step['users'])} users"
                tput.annotate(f"step {int(step['step'])}{users}", (s, 1), xycoords=("data", "axes fraction"),
                              xytext=(3, -2), textcoords="offset points", va="top", fontsize=8, color="#52606d")
        events.set_xlabel("seconds since run start")
        events.set_xlim(0, max(x_end, 1))
        return _save(fig, out)


MIN_PROBES, MIN_ACKED = 20, 200  # what one pooled point of the amnesia-vs-throughput chart rests on at least


def pool_windows(windows: pd.DataFrame, total: str, minimum: int) -> pd.DataFrame:
    """Consecutive windows under the same faults and in the same load step, merged until each merged point
    has at least ``minimum`` of ``total`` (the last few of a run of windows join the point before them).
    A single 5 s window holds a handful of probes, so its interval spans most of the axis; pooled, a point
    says something. A run of windows that never reaches ``minimum`` (a short fault) stays one point."""
    columns = ["start", "end", "step", "faults", "acked", "probes", "probes_failed", "lost", "seconds", "windows"]
    if windows.empty:
        return pd.DataFrame(columns=[*columns, "throughput"])
    rows = [{"start": r.start, "end": r.end, "step": None if pd.isna(r.step) else r.step, "faults": str(r.faults or ""),
             "acked": r.acked, "probes": r.probes, "probes_failed": r.probes_failed, "lost": r.lost,
             "seconds": float(r.end - r.start), "windows": 1}
            for r in windows.sort_values("start").itertuples(index=False)]
    points: list[dict] = []
    for _key, run in groupby(rows, key=lambda r: (r["step"], r["faults"])):
        pooled, current = [], None
        for row in run:
            if current is None:
                current = {**row, "acked": 0, "probes": 0, "probes_failed": 0, "lost": 0, "seconds": 0.0, "windows": 0}
            _merge(current, row)
            if current[total] >= minimum:
                pooled.append(current)
                current = None
        if current is not None:  # the remainder joins the run's last point, or is the run's only one
            _merge(pooled[-1], current) if pooled else pooled.append(current)
        points += pooled
    frame = pd.DataFrame(points, columns=columns)
    frame["throughput"] = frame["acked"] / frame["seconds"].where(frame["seconds"] > 0)
    return frame


def _merge(into: dict, more: dict) -> None:
    into["end"] = more["end"]
    for column in ("acked", "probes", "probes_failed", "lost", "seconds", "windows"):
        into[column] += 0 if pd.isna(more[column]) else more[column]


def amnesia_vs_throughput(data: RunData, out: Path) -> Path:
    """Pooled windows (small points) and load steps (large diamonds), coloured by fault; intervals where they
    bound something (every step; a pooled point with events)."""
    w = data.windows
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        kinds_seen: dict[str, str] = {}
        for ax, (count, total, title, events, minimum) in zip(axes, (
                ("probes_failed", "probes", "Probe amnesia rate", "failed probes", MIN_PROBES),
                ("lost", "acked", "Stored loss rate", "lost turns", MIN_ACKED))):
            ax.set_title(f"{title} against throughput", pad=6)
            ax.set_xlabel("throughput (acked turns/s)")
            ax.set_ylabel("rate (%) with 95% Wilson interval")
            points = pool_windows(w, total, minimum)
            measured = points[points[total].fillna(0) > 0]
            if measured.empty:
                _empty(ax, f"nothing measured (no {total})")
                continue
            r, lo, hi = _rates(measured, count, total)
            faults = window_faults(measured)
            colors = [fault_color(f[0]) if f else QUIET for f in faults]
            for f in faults:
                if f:
                    kinds_seen[f[0]] = fault_color(f[0])
            seen = measured[count].fillna(0).to_numpy(float) > 0
            if seen.any():
                ax.errorbar(measured["throughput"][seen], r[seen], yerr=[lo[seen], hi[seen]], fmt="none",
                            ecolor="#cbd2d9", lw=0.9, capsize=2, zorder=1)
            small = (measured[total] < minimum).to_numpy()
            ax.scatter(measured["throughput"][~small], r[~small], c=[c for c, s in zip(colors, small) if not s],
                       s=26, zorder=2, edgecolors="white", linewidths=0.4)
            if small.any():  # a short fault's few windows: shown, hollow, as too small to read alone
                ax.scatter(measured["throughput"][small], r[small], s=26, zorder=2, facecolors="none",
                           edgecolors=[c for c, s in zip(colors, small) if s], linewidths=1.2)
            top = float(np.nanmax(np.where(seen, r + hi, r))) if np.isfinite(r).any() else 0.0
            seen_any = bool(seen.any())
            steps = by_step(w, data.steps)
            steps = steps[steps[total] > 0]
            if not steps.empty:
                sr, slo, shi = _rates(steps, count, total)
                ax.errorbar(steps["throughput"], sr, yerr=[slo, shi], fmt="D-", color=INK, ms=8, lw=1.2,
                            capsize=4, zorder=3, mfc="white", mew=1.8, label="per load step")
                top = max(top, float(np.nanmax(sr + shi)))
                seen_any = seen_any or bool(np.nanmax(sr) > 0)
                for (_, s), y in zip(steps.iterrows(), sr):
                    text = f"step {int(s['step'])}" if pd.isna(s.get("users")) else f"{int(s['users'])} users"
                    ax.annotate(text, (s["throughput"], y), xytext=(6, 6),
                                textcoords="offset points", fontsize=8, color=INK)
            ymax = max(top * 1.15, 1.0)
            ax.set_ylim(-0.03 * ymax, ymax)  # points at zero sit just above the axis, not on it
            if not seen_any:
                ax.text(0.5, 0.6, f"no {events} in any window", ha="center", transform=ax.transAxes,
                        color=QUIET, fontsize=11, bbox={"facecolor": "white", "edgecolor": "none"})
        handles = [Patch(color=QUIET, label="quiet windows")]
        handles += [Patch(color=c, label=f"windows during {k}") for k, c in kinds_seen.items()]
        if not by_step(w, data.steps).empty:
            handles.append(plt.Line2D([], [], marker="D", color=INK, mfc="white", ls="-", label="load step"))
        fig.tight_layout()
        fig.legend(handles=handles, loc="upper center", ncol=min(5, len(handles)), bbox_to_anchor=(0.5, 0.0))
        return _save(fig, out)


ATTRIBUTED = ("probe_amnesia", "stored_loss", "anomalies")


def attribution(data: RunData, out: Path) -> Path:
    """Each fault kind's rates (incl. its recovery margin, as the audit counts it) against quiet windows."""
    rows = fault_rows(data)
    metrics = [m for m in ATTRIBUTED
               if any((r.get(m) or {}).get("total") for r in rows)]
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(12, 1.4 + 0.55 * max(2, len(rows))),
                                 squeeze=False)
        axes = axes[0]
        if not metrics:
            _empty(axes[0], "no rates to attribute (no probes and no acknowledged turns)")
            return _save(fig, out)
        names = [r["name"] for r in rows]
        for ax, metric in zip(axes, metrics):
            ax.set_title(RATE_TITLES[metric], pad=6)
            for y, row in enumerate(rows):
                m = row.get(metric) or {}
                if not m.get("total"):
                    ax.text(0, y, "  n=0", va="center", fontsize=8, color=QUIET)
                    continue
                r, lo, hi = (m["rate"] * 100, m["low"] * 100, m["high"] * 100)
                color = QUIET if row["kind"] is None else fault_color(row["kind"])
                if row["kind"] is None:
                    ax.axvspan(lo, hi, color=QUIET, alpha=0.15, lw=0)
                    ax.axvline(r, color=QUIET, ls="--", lw=1)
                ax.errorbar([r], [y], xerr=[[r - lo], [hi - r]], fmt="o", color=color, ms=8, capsize=4, lw=2)
                ax.annotate(f"{m['count']}/{m['total']}", (hi, y), xytext=(5, 0), textcoords="offset points",
                            va="center", fontsize=8, color="#52606d")
            ax.set_yticks(range(len(rows)), names if ax is axes[0] else [""] * len(rows))
            ax.set_ylim(len(rows) - 0.5, -0.5)
            ax.set_xlabel("rate (%)")
            highs = [(r.get(metric) or {}).get("high") for r in rows]
            ax.set_xlim(0, max([h * 100 for h in highs if h is not None] + [1.0]) * 1.18)
        fig.tight_layout()
        return _save(fig, out)


def fault_rows(data: RunData) -> list[dict]:
    """Baseline first, then each fault kind; from summary.json, else recomputed from windows.csv."""
    from oracle.report_data import ATTRIBUTED_RATES, rate

    s = data.summary
    rows = []
    if s.get("baseline") is not None or s.get("by_fault"):
        baseline = s.get("baseline") or {}
        rows.append({"name": "quiet baseline", "kind": None, "windows": baseline.get("windows"),
                     **{k: rate(baseline[k]) for k in ATTRIBUTED_RATES if baseline.get(k) is not None}})
        for f in s.get("by_fault") or []:
            name = f"during {f.get('kind')}" + (" (ineffective: touched nothing)" if f.get("ineffective") else "")
            rows.append({"name": name, "kind": str(f.get("kind")), "windows": f.get("windows"),
                         "charged": f.get("charged"), "ineffective": bool(f.get("ineffective")),
                         **{k: rate(f[k]) for k in ATTRIBUTED_RATES if f.get(k) is not None}})
        return rows
    w = data.windows
    if w.empty:
        return rows
    faults = window_faults(w)
    groups = {"quiet baseline": (None, [not f for f in faults])}
    for kind in dict.fromkeys(k for f in faults for k in f):
        groups[f"during {kind}"] = (kind, [kind in f for f in faults])
    for name, (kind, mask) in groups.items():
        sub = w[mask]
        rows.append({"name": name, "kind": kind, "windows": int(len(sub)),
                     "probe_amnesia": rate({"count": sub["probes_failed"].sum(), "total": sub["probes"].sum()}),
                     "stored_loss": rate({"count": sub["lost"].sum(), "total": sub["acked"].sum()})})
    return rows


def compare_curves(runs: list[RunData], out: Path) -> Path:
    """The runs' amnesia-vs-throughput curves overlaid: per load step when there are steps, else per throughput bin."""
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
        for ax, (count, total, title) in zip(axes, (("probes_failed", "probes", "Probe amnesia rate"),
                                                   ("lost", "acked", "Stored loss rate"))):
            ax.set_title(f"{title} against throughput", pad=6)
            ax.set_xlabel("throughput (acked turns/s)")
            ax.set_ylabel("rate (%) with 95% Wilson interval")
            drawn = False
            for i, run in enumerate(runs):
                points = by_step(run.windows, run.steps) if not run.windows.empty else run.windows
                if points.empty:
                    points = throughput_bins(run.windows) if not run.windows.empty else points
                points = points[points[total] > 0] if not points.empty else points
                if points.empty:
                    continue
                points = points.sort_values("throughput")
                r, lo, hi = _rates(points, count, total)
                color = RUN_COLORS[i % len(RUN_COLORS)]
                ax.errorbar(points["throughput"], r, yerr=[lo, hi], fmt="o-", color=color, capsize=3, ms=6,
                            lw=1.6, label=run.label, alpha=0.9)
                drawn = True
            if drawn:
                ax.set_ylim(bottom=0)
                ax.legend(fontsize=9)
            else:
                _empty(ax, f"nothing measured (no {total})")
        fig.tight_layout()
        return _save(fig, out)


def trend(runs: list[RunData], out: Path) -> Path:
    """Headline rates (with intervals) and throughput per run, in release order."""
    from oracle.report_data import rate

    labels = [r.label for r in runs]
    x = np.arange(len(runs))
    with plt.rc_context(STYLE):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [2, 1]})
        ax.set_title("Rates by release", pad=6)
        for j, (metric, color) in enumerate((("probe_amnesia", "#dc2626"), ("stored_loss", INK),
                                             ("session_amnesia", "#7c3aed"))):
            ms = [rate(r.summary.get("metrics", {}).get(metric)) for r in runs]
            y = np.array([m["rate"] * 100 if m["rate"] is not None else np.nan for m in ms])
            lo = np.array([(m["rate"] - m["low"]) * 100 if m["rate"] is not None else 0 for m in ms])
            hi = np.array([(m["high"] - m["rate"]) * 100 if m["rate"] is not None else 0 for m in ms])
            ax.errorbar(x + (j - 1) * 0.06, y, yerr=[lo, hi], fmt="o-", color=color, capsize=3,
                        label=RATE_TITLES[metric])
        ax.set_xticks(x, labels)
        ax.set_ylabel("rate (%)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=9)
        ax2.set_title("Throughput by release", pad=6)
        ax2.bar(x, [float(r.summary.get("throughput") or 0) for r in runs], color=SERIES["throughput"], alpha=0.8)
        ax2.set_xticks(x, labels)
        ax2.set_ylabel("acked turns/s")
        fig.tight_layout()
        return _save(fig, out)


def fault_spans(data: RunData) -> dict[str, list[tuple[float, float]]]:
    """Each fault kind's intervals as (start, length) in seconds since the run start, as the timeline
    shades them: an instant fault (lb-drop, redis-client-kill) gets a sliver wide enough to see."""
    x_end = max(data.t_end - data.t0, 1)
    low, high = -0.05 * x_end, 1.05 * x_end  # a time far from the run (a damaged timeline says 0) is drawn at its edge
    spans: dict[str, list[tuple[float, float]]] = {}
    for kind, start, end in zip(data.faults.get("kind", []), data.faults.get("start", []), data.faults.get("end", [])):
        start, end = (min(max(t - data.t0, low), high) for t in (start, end))
        spans.setdefault(kind, []).append((start, max(end - start, x_end * 0.004)))
    return spans


def shade_faults(axes, data: RunData) -> list[Patch]:
    """Shade every fault interval on each of ``axes`` in its kind's colour; legend handles, one per kind."""
    spans_of = fault_spans(data)
    for kind, spans in spans_of.items():
        for ax in axes:
            for start, length in spans:
                ax.axvspan(start, start + length, color=fault_color(kind), alpha=0.14, lw=0, zorder=0)
    return [Patch(color=fault_color(k), alpha=0.4, label=k) for k in spans_of]
