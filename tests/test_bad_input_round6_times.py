"""Bad input, round 6 (hunt-input5): times far from the run, from a wrong clock or a hand-edited line.

- one_far_turn_report_hang: one ok turn's sent/received 20 days late (a worker with a wrong clock). The audit
  PASSed with no word of it ("throughput 0.0 acked turns/s", windows.csv of 345,605 rows), and `oracle report`
  never finished (killed after 14 min at 7.6 GB): the timeline drew one bar per window and event series. The
  timeline now draws at most charts.TIMELINE_BINS points per series (windows merged, nothing dropped), and the
  tally names the far turns (Tally.far_turns: when, how far off, their sessions) for the audit's warnings.
- telemetry_far_sample: a telemetry.jsonl sample 20 days after the run was drawn, with the run a sliver at the
  left of a 1.7e6 s axis, and no warning. Samples far outside the run's span (oracle.report_data.run_span, as for
  steps and faults) are left out with one warning naming the file and the lines.
Real run folders (journal, snapshot, audit made by the suite's helpers).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from contracts.runfolder import RunFolder
from support_oracle import build_world, simple_specs, write_journal, write_snapshot
from support_report import T0, synthetic

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

DAYS_20 = 20 * 86400
MOST = 2_000  # points or bars per series the timeline may draw, whatever the number of windows


def _far_run(run: Path, late: float = DAYS_20, spy: dict | None = None) -> tuple[dict, dict]:
    """A small audited run whose last ok turn came back ``late`` seconds after the rest (sent late as well: the
    worker's clock); (the far turn's journal record, the summary). ``spy`` gets the audit's tally."""
    import oracle.audit as audit

    world = build_world(simple_specs(12), seed=5)
    far = [r for r in world.records if r["outcome"] == "ok"][-1]
    rest = [r for r in world.records if r is not far]
    far["sent"] += late
    far["received"] += late
    write_journal(run, world.records)
    write_snapshot(run, world)
    start, end = min(r["sent"] for r in rest), max(r["received"] or r["sent"] for r in rest)
    (run / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "label": "v1", "start": start, "end": end}))
    judge = audit._judge

    def keep(context, jobs):
        tally, results = judge(context, jobs)
        if spy is not None:
            spy["tally"] = tally
        return tally, results

    audit._judge = keep
    try:
        summary = audit.audit_run(run, jobs=1)
    finally:
        audit._judge = judge
    return far, summary


@pytest.fixture(scope="module")
def far_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("times") / "far"
    spy: dict = {}
    far, summary = _far_run(run, spy=spy)
    return run, far, summary, spy["tally"]


def test_the_timeline_of_a_run_spanning_20_days_draws_a_bounded_number_of_bars_and_points(far_run, monkeypatch):
    """Before: one Bar patch per window and series, 345,603 windows: the report ran for over 14 minutes and
    7 GB. Now at most TIMELINE_BINS per series; every count of every window is still in the chart's bins."""
    import matplotlib.axes

    from oracle import charts
    from oracle.report_data import load_run

    run, _, _, _ = far_run
    data = load_run(run)
    assert len(data.windows) > 300_000  # the audit's table keeps every window
    drawn = Counter()
    bar, plot = matplotlib.axes.Axes.bar, matplotlib.axes.Axes.plot

    def counted_bar(self, x, height, *args, **kwargs):
        n = len(np.atleast_1d(x))
        assert n <= MOST, f"{n:,} bars in one call"  # before the fix: fail here, not after minutes
        drawn["bars"] += n
        return bar(self, x, height, *args, **kwargs)

    def counted_plot(self, *args, **kwargs):
        lines = plot(self, *args, **kwargs)
        drawn["points"] = max([drawn["points"], *(len(line.get_xdata()) for line in lines)])
        return lines

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", counted_bar)
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", counted_plot)
    figures = []
    monkeypatch.setattr(charts, "_save", lambda fig, out: figures.append(fig) or out)
    charts.timeline(data, run / "charts" / "timeline.png")
    fig, = figures
    try:
        patches = sum(len(ax.patches) for ax in fig.axes)
        assert patches <= 4 * MOST + 50, patches
        assert 0 < drawn["bars"] <= 4 * MOST and 0 < drawn["points"] <= MOST
        # the chart says its points are merged windows
        assert "every" in fig.axes[1].get_title(loc="left") and "windows" in fig.axes[3].get_ylabel()
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    merged, per = charts.timeline_bins(data.windows)
    assert len(merged) <= charts.TIMELINE_BINS <= MOST and per > 1
    for column in ("acked", "probes_failed", "lost", "crosstalk"):  # nothing recorded is lost in the merge
        assert merged[column].sum() == data.windows[column].sum(), column
    assert merged["start"].iloc[0] == data.windows["start"].min()
    assert merged["end"].iloc[-1] == data.windows["end"].max()
    assert merged["latency_p99"].max() == data.windows["latency_p99"].max()  # the worst window stays visible


def test_a_short_run_is_drawn_one_bar_per_window_as_before(tmp_path):
    from oracle import charts
    from oracle.report_data import load_run

    data = load_run(synthetic(tmp_path / "run"))
    merged, per = charts.timeline_bins(data.windows)
    assert per == 1 and len(merged) == len(data.windows) == 60
    assert (merged["throughput"].to_numpy() == data.windows.sort_values("start")["throughput"].to_numpy()).all()


def test_the_tally_names_a_turn_20_days_off_the_rest_of_the_run(far_run):
    """Before: PASS, throughput 0.0 and no word of the far turn. Tally.far_turns names it: its session, when it
    completed, how far off, and what it stretched."""
    run, far, summary, tally = far_run
    assert summary["throughput"] < 0.001  # the span runs to the far turn: this is what the warning explains
    warnings = tally.far_turns(run / "audit" / "sessions.csv")
    assert len(warnings) == 1, warnings
    text = warnings[0]
    assert f"session {far['session']}" in text and "1 turn " in text, text
    assert "20.0 days after the other" in text and "2023-12-04" in text, text
    assert "windows.csv has 345,60" in text and "clock" in text, text
    assert tally.far_turns() and far["session"] not in tally.far_turns()[0]  # without sessions.csv: no session


@pytest.mark.skipif("far_turns" not in Path(__file__).resolve().parents[1].joinpath("oracle", "audit.py").read_text(),
                    reason="oracle/audit.py does not add Tally.far_turns to the summary's problems yet")
def test_the_audit_warns_of_a_turn_20_days_off_in_its_summary(far_run):
    run, far, summary, _ = far_run
    named = [p for p in summary["problems"] if far["session"] in p and "20.0 days" in p]
    assert named, summary["problems"]
    assert named[0] in json.loads((run / "audit" / "summary.json").read_text())["problems"]


def _tally(times, sent=None, window_s: float = 5.0):
    from oracle.tally import Tally

    times = np.asarray(times, float)
    n = len(times)
    tally = Tally(window_s)
    ones, zeros = np.ones(n, bool), np.zeros(n, bool)
    tally.add_turns({"sent": times if sent is None else np.asarray(sent, float), "done": times, "ok": ones,
                     "error": zeros, "answered": zeros, "failed": zeros, "online": zeros, "lost": zeros,
                     "anomalous": zeros, "step": np.full(n, np.nan), "kind": np.array(["chatter"] * n, object),
                     "latency": np.full(n, 0.1), "refused_burst": zeros},
                    np.zeros((n, 0), bool), np.zeros(n, np.int64), ones)
    return tally


def test_pauses_within_a_run_are_not_far_but_a_turn_hours_off_a_short_run_is():
    minute = np.arange(0, 600, 2.0)  # 10 minutes of turns
    assert _tally(T0 + np.r_[minute, minute + 1800]).far_turns() == []  # a 20-minute pause: under an hour
    long = np.arange(0, 4 * 3600, 10.0)  # a 4-hour run that pauses 2 hours: no farther than its own length
    assert _tally(T0 + np.r_[long, long[-1] + 7200 + long]).far_turns() == []
    early = _tally(T0 + np.r_[-3 * 3600, minute, minute[-1] + 5])
    warned, = early.far_turns()
    assert "1 turn completed between" in warned and "It is judged" in warned, warned
    assert "3.0 hours before the other 301 turns" in warned, warned
    # every turn is still counted: the far one too
    assert early.windows.turns.sum() == len(minute) + 2 and early.totals is not None
    # a turn sent far before the others (its reply came back with them): the run's span starts at its send
    sent = T0 + np.r_[minute - 0.1]
    sent[5] = T0 - 2 * 86400
    warned, = _tally(T0 + minute, sent=sent).far_turns()
    assert "was sent at" in warned and "2.0 days before" in warned, warned


def test_windows_merged_in_any_order_keep_every_turn_for_far_turns():
    """The tally's per-window turn counts (what far_turns groups) add up across batches like the other counts."""
    from oracle.tally import Windows

    a, b, whole = Windows(), Windows(), Windows()
    for w, index in ((a, np.array([10, 11, 11])), (b, np.array([500, 3])), (whole, np.array([10, 11, 11, 500, 3]))):
        w.add(index, [np.ones(len(index))] * 6, index, index % 7, np.full(len(index), np.nan))
    a.merge(b)
    assert a.turns.sum() == whole.turns.sum() == 5 and (a.turns == whole.turns).all()
    assert (a.counts == whole.counts).all() and a.counts.shape[1] == 6


def _with_telemetry(run: Path, extra: list[float]) -> None:
    samples = [{"time": T0 + 5 * i, "users": 8, "rss": {"master": 90 * 2**20}, "store_error": None,
                "store": {"used_memory": 2**21, "keyspace": {"db0": {"keys": 10 + i, "expires": 0}}}}
               for i in range(61)]
    samples += [{**samples[-1], "time": t} for t in extra]
    RunFolder(run).telemetry.write_text("".join(json.dumps(r) + "\n" for r in samples))


def test_a_telemetry_sample_20_days_after_the_run_is_left_out_with_a_warning(tmp_path, monkeypatch):
    """Before: drawn, so telemetry.png spanned 1.7e6 s with the run a sliver at x=0, and no warning."""
    from oracle import charts, report, telemetry
    from oracle.report_data import load_run

    run = synthetic(tmp_path / "run")
    _with_telemetry(run, [T0 + DAYS_20, T0 - 3 * 86400, T0 + 310])  # 310 s: just after the 300-s run, kept
    data = load_run(run)
    figures = []
    monkeypatch.setattr(charts, "_save", lambda fig, out: figures.append(fig) or out)
    telemetry.chart(data, run / "charts" / "telemetry.png")
    fig, = figures
    right = fig.axes[-1].get_xlim()[1]
    import matplotlib.pyplot as plt
    plt.close(fig)
    assert right < 400, right  # the run's 300 s, not 20 days
    far = [w for w in data.warnings if "telemetry.jsonl" in w]
    assert len(far) == 1, data.warnings  # one warning for both lines
    assert "telemetry.jsonl: lines 62, 63: 2 samples" in far[0] and "far outside the run" in far[0], far[0]
    assert "2023-12-04" in far[0] and "left out" in far[0], far[0]
    frame = telemetry.load(run, [], None)  # without a span (counter growth, the tests): every sample read
    assert len(frame) == 64
    # the report says it too, and renders
    monkeypatch.undo()
    report.render(run)
    assert "telemetry.jsonl: lines 62, 63" in (run / "report.html").read_text()


def test_telemetry_samples_within_the_run_are_all_drawn_and_bad_lines_still_named(tmp_path):
    from oracle import telemetry
    from oracle.report_data import load_run

    run = synthetic(tmp_path / "run")
    _with_telemetry(run, [])
    with RunFolder(run).telemetry.open("a") as fh:
        fh.write('{"time": "soon"}\n')
    data = load_run(run)
    span_frame = telemetry.load(run, data.warnings, None)
    assert len(span_frame) == 61
    assert any("telemetry.jsonl:62:" in w and "time" in w for w in data.warnings), data.warnings
    assert not any("far outside" in w for w in data.warnings)
