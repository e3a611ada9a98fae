"""Release comparison: significance, verdicts, exit codes, like-for-like warnings, HTML."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path


from oracle import compare
from oracle.report_data import load_run
from support_report import synthetic

REPO = Path(__file__).resolve().parents[1]


def rows_by_metric(base: Path, cand: Path, margin: float = 0.01) -> dict[str, compare.Row]:
    return {r.metric: r for r in compare.compare_pair(load_run(base), load_run(cand), 0.05, margin)}


def test_clearly_worse_candidate_is_worse_with_tiny_p_and_exits_1(tmp_path, capsys):
    base = synthetic(tmp_path / "base", label="v1", lost=0, seed=1)
    cand = synthetic(tmp_path / "cand", label="v2", lost=60, seed=2)
    rows = rows_by_metric(base, cand)
    assert rows["stored_loss"].verdict == "worse"
    assert rows["stored_loss"].p < 1e-12
    assert rows["stored_loss"].base == "0.00% (0/2000)" and rows["stored_loss"].candidate == "3.00% (60/2000)"
    assert compare.main([str(base), str(cand)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"stored loss rate\s+0\.00% \(0/2000\)\s+3\.00% \(60/2000\)\s+\+3\.00 pp\s+\S+\s+WORSE", out)
    assert "verdict: v2 against v1: WORSE" in out and "-> exit 1" in out


def test_similar_runs_show_no_significant_change_and_exit_0(tmp_path, capsys):
    base = synthetic(tmp_path / "a", label="v1", lost=1, probes_failed=1, seed=1)
    cand = synthetic(tmp_path / "b", label="v1-again", lost=2, probes_failed=0, seed=2)
    rows = rows_by_metric(base, cand)
    assert {r.verdict for r in rows.values()} == {"no significant change"}
    assert compare.main([str(base), str(cand)]) == 1  # not worse, but 2 lost turns fail its own strict gates
    assert "v1-again on its own (gates strict): FAIL" in capsys.readouterr().out
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 0  # only "is it worse than the base?"
    out = capsys.readouterr().out
    assert "no significant change" in out and "WARNING: not like for like" not in out


def test_significant_but_within_margin_does_not_gate(tmp_path):
    base = synthetic(tmp_path / "a", ok_turns=20000, lost=0, seed=1)
    cand = synthetic(tmp_path / "b", ok_turns=20000, lost=50, seed=2)
    row = rows_by_metric(base, cand)["stored_loss"]
    assert row.p < 1e-10 and row.verdict == "no significant change"  # +0.25 points < 1 point margin
    assert rows_by_metric(base, cand, margin=0.001)["stored_loss"].verdict == "worse"
    assert compare.main([str(base), str(cand), "--margin", "0.001"]) == 1


def test_better_candidate_exits_0(tmp_path, capsys):
    base = synthetic(tmp_path / "a", lost=60, seed=1)
    cand = synthetic(tmp_path / "b", lost=0, seed=2)
    assert rows_by_metric(base, cand)["stored_loss"].verdict == "better"
    assert compare.main([str(base), str(cand)]) == 0


def test_zero_probes_are_not_measured_not_a_verdict(tmp_path):
    base = synthetic(tmp_path / "a", probes=0, seed=1)
    cand = synthetic(tmp_path / "b", probes=0, seed=2)
    row = rows_by_metric(base, cand)["probe_amnesia"]
    assert row.verdict == "not measured" and row.p is None
    assert compare.main([str(base), str(cand)]) == 0


def test_different_scripts_and_plans_warn_but_do_not_fail(tmp_path, capsys):
    base = synthetic(tmp_path / "a", label="v1", script="support-chat", seed=1)
    cand = synthetic(tmp_path / "b", label="v2", script="burst-heavy", script_sha="0badf00d", chaos=False, seed=2)
    assert compare.main([str(base), str(cand)]) == 0
    out = capsys.readouterr().out
    assert "WARNING: not like for like: the runs used different scripts (v1: support-chat, v2: burst-heavy)" in out
    assert "different chaos plans" in out


def _with_load(run_dir: Path, load: dict | None) -> Path:
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**meta, "load": load}))
    return run_dir


def test_runs_under_different_loads_warn(tmp_path, capsys):
    """A release run with 50 users compared with a base run of 10 (different concurrency: races show or do not,
    throughput is not comparable) was compared as like for like, with no word."""
    base = _with_load(synthetic(tmp_path / "a", label="v1", seed=1),
                      {"users": 10, "spawn_rate": 5, "run_time": 60, "shape": None})
    cand = _with_load(synthetic(tmp_path / "b", label="v2", seed=2),
                      {"users": 50, "spawn_rate": 5, "run_time": 60, "shape": None})
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 0
    out = capsys.readouterr().out
    assert "WARNING: not like for like: the runs had different loads (v1: 10 users at 5/s for 60s, v2: 50 users " \
           "at 5/s for 60s)" in out, out
    _with_load(cand, {"users": 10, "spawn_rate": 5, "run_time": 60, "shape": None})
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 0
    assert "different loads" not in capsys.readouterr().out
    _with_load(cand, None)  # a run from before run.json said its load: nothing to compare, no warning
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 0
    assert "different loads" not in capsys.readouterr().out
    _with_load(cand, {"users": 10, "spawn_rate": 5, "run_time": 60, "shape": None, "users_changed": [40]})
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 0  # the web UI's edit of the running test
    assert "v2: 10, then 40 users at 5/s for 60s)" in capsys.readouterr().out
    _with_load(cand, {"users": 10, "spawn_rate": 5, "run_time": 60, "shape": None})
    run = json.loads((cand / "run.json").read_text())
    (cand / "run.json").write_text(json.dumps({**run, "start": 1000.0, "stopped_early": {"signal": "SIGTERM",
                                                                                      "time": 1005.2}}))
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 0  # a nightly a CI time-out cut short
    assert "v2: 10 users at 5/s for 60s, stopped early by SIGTERM after 5s)" in capsys.readouterr().out


def test_a_base_that_was_cut_short_makes_a_passing_comparison_not_trusted(tmp_path, capsys):
    """A base killed during its load (phase load, no end: part of a run) compared as if whole: exit 0, "no
    significant change", not a word about the base (verdict hunt 12 M2). A candidate's own failed gate stands."""
    base = synthetic(tmp_path / "a", label="v1", seed=1)
    meta = json.loads((base / "run.json").read_text())
    (base / "run.json").write_text(json.dumps({**meta, "phase": "load", "end": None}))
    cand = synthetic(tmp_path / "b", label="v2", seed=2)
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 3
    out = capsys.readouterr().out
    assert "NOT TRUSTED: the base v1 is not trusted (" in out and "-> exit 3" in out, out
    failing = synthetic(tmp_path / "c", label="v3", lost=5, seed=3)
    assert compare.main([str(base), str(failing)]) == 1  # v3 fails its own stored_loss gate: a FAIL
    assert "NOT TRUSTED" not in capsys.readouterr().out


def test_several_runs_show_a_trend_and_gate_on_the_last(tmp_path, capsys):
    runs = [synthetic(tmp_path / f"r{i}", label=f"v1.{i}", lost=lost, seed=i) for i, lost in
            enumerate([0, 1, 60])]
    html = tmp_path / "out" / "compare.html"
    assert compare.main([str(r) for r in runs] + ["--html", str(html)]) == 1
    out = capsys.readouterr().out
    assert "trend (release order)" in out
    trend = out.split("trend (release order)")[1].split("\n\n")[0]
    assert re.search(r"v1\.0 .* base", trend) and re.search(r"v1\.2 .*3\.00%.* worse", trend)
    page = html.read_text()
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 2  # overlaid curves + trend
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "v1.2: worse" in page
    # the middle run is no worse than base, so with it last (and its one lost turn allowed) the gate passes
    assert compare.main([str(runs[0]), str(runs[1]), "--gate", "lost=1"]) == 0


def test_bad_input_exits_2_with_a_clear_message(tmp_path, capsys):
    run = synthetic(tmp_path / "ok", seed=1)
    raw = synthetic(tmp_path / "raw", audited=False, seed=2)
    (tmp_path / "empty").mkdir()
    assert compare.main([str(run), str(tmp_path / "empty")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert compare.main([str(run), str(raw)]) == 2
    assert f"run `python -m oracle audit {raw}` first" in capsys.readouterr().err
    assert compare.main([str(run)]) == 2
    assert "at least two runs" in capsys.readouterr().err


def test_the_candidate_is_judged_by_the_audits_rules(tmp_path, capsys):
    base = synthetic(tmp_path / "a", seed=1)
    cand = synthetic(tmp_path / "b", crosstalk=3, seed=2)
    assert compare.main([str(base), str(cand)]) == 1  # strict: no cross-talk allowed
    assert "gate failed: crosstalk: 3 sessions holding another session's data" in capsys.readouterr().out
    assert compare.main([str(base), str(cand), "--max-crosstalk", "5"]) == 0
    assert compare.main([str(base), str(cand), "--gate", "crosstalk=5"]) == 0
    assert compare.main([str(base), str(cand), "--gate", "crosstalk=1%"]) == 1  # 3 of 200 sessions is 1.5%
    assert compare.main([str(base), str(cand), "--gate", "nonsense=1"]) == 2
    assert "unknown gate 'nonsense'" in capsys.readouterr().err


def test_cli_dispatch(tmp_path):
    base = synthetic(tmp_path / "a", seed=1)
    cand = synthetic(tmp_path / "b", lost=60, seed=2)
    done = subprocess.run([sys.executable, "-m", "oracle", "compare", str(base), str(cand)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "WORSE" in done.stdout


def test_statistics_options_out_of_range_are_bad_input_in_compare_and_trend(tmp_path, capsys):
    from oracle import trend

    base = synthetic(tmp_path / "base", label="v1", lost=0, seed=1)
    cand = synthetic(tmp_path / "cand", label="v2", lost=0, seed=2)
    for extra, fragment in ((["--alpha", "2"], "--alpha 2.0 is not"), (["--alpha", "nan"], "--alpha nan is not"),
                            (["--margin", "nan"], "--margin nan"), (["--margin", "inf"], "--margin inf"),
                            (["--margin", "-1"], "--margin -1.0"), (["--max-probe-amnesia", "5"], "is not a rate"),
                            (["--max-crosstalk", "-1"], "is not a count"),
                            (["--gate", "lenient,"], "'lenient,': an empty item (an unset variable?)")):
        assert compare.main([str(base), str(cand), *extra]) == 2, extra
        assert fragment in capsys.readouterr().err, extra
        if "--max" not in extra[0] and extra[0] != "--gate":  # trend has no gates of its own
            assert trend.main([str(base), str(cand), *extra]) == 2, extra
            assert fragment in capsys.readouterr().err, extra


def test_a_crash_is_exit_3_never_1_which_means_a_failed_gate(tmp_path, monkeypatch, capsys):
    """Whatever a check missed (or a bug) ends in one line and exit 3, not 1."""
    from oracle import report
    from oracle.__main__ import main

    run = synthetic(tmp_path / "run", label="v1", lost=0, seed=1)

    def crash(*_):
        raise ValueError("a damaged file no check caught")

    monkeypatch.setattr(report, "load_run", crash)
    assert main(["report", str(run)]) == 3
    assert "oracle report: FAILED: ValueError: a damaged file no check caught" in capsys.readouterr().err


def test_a_run_whose_locust_users_raised_exceptions_is_not_trusted(tmp_path, capsys):
    """run.json's user_exceptions (written at the end of the Locust run): its conversations were cut short,
    unjudged, so compare exits 3 for it and its report's badge says NOT TRUSTED, not PASS; a FAIL stays a FAIL
    (exit 1, badge FAIL): a bug found must fail the run."""
    import json

    from oracle import report

    base = synthetic(tmp_path / "a", label="v1", seed=1)
    cand = synthetic(tmp_path / "b", label="v2", seed=2)
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 0
    assert report.shown_verdict(load_run(cand))[:2] == ("ok", "PASS")
    meta = json.loads((cand / "run.json").read_text())
    (cand / "run.json").write_text(json.dumps({**meta, "user_exceptions": {"count": 4, "first": "KeyError: 'x'"}}))
    capsys.readouterr()
    assert compare.main([str(base), str(cand), "--gate", "off"]) == 3
    out = capsys.readouterr().out
    assert "NOT TRUSTED: Locust users raised 4 exception(s) (first: \"KeyError: 'x'\")" in out and "-> exit 3" in out
    level, headline, detail = report.shown_verdict(load_run(cand))
    assert (level, headline) == ("warn", "NOT TRUSTED") and "the stored data alone: PASS" in detail
    assert "verdict: NOT TRUSTED - Locust users raised 4" in report.terminal_summary(cand)
    page = report.context(load_run(cand))
    assert page["headline"] == "NOT TRUSTED" and page["warnings"][0].startswith("Locust users raised 4")
    from oracle import trend
    rows = trend.per_run([load_run(base), load_run(cand)], 0.05, 0.01)
    assert [r["result"] for r in rows] == ["pass", "untrusted"]

    failing = synthetic(tmp_path / "c", label="v3", lost=60, seed=3)
    meta = json.loads((failing / "run.json").read_text())
    (failing / "run.json").write_text(json.dumps({**meta, "user_exceptions": {"count": 1, "first": "boom"}}))
    assert compare.main([str(base), str(failing)]) == 1
    assert "-> exit 1" in capsys.readouterr().out
    assert report.shown_verdict(load_run(failing))[:2] == ("fail", "FAIL")
    # but a FAIL of a WebSocket bot whose replies came in several frames may be goldfish's misreading: 3, as its audit
    (failing / "run.json").write_text(json.dumps({**meta, "streamed_replies": {"count": 9, "first": '{"t": "to"}'}}))
    assert compare.main([str(base), str(failing)]) == 3
    assert "NOT TRUSTED: --websocket: after 9 turn(s)' reply" in capsys.readouterr().out
    assert report.shown_verdict(load_run(failing))[:2] == ("warn", "NOT TRUSTED")


def test_an_output_path_that_cannot_be_written_is_bad_input_naming_it(tmp_path, capsys):
    """report.html that is a folder, compare --html into a folder or onto a full device: exit 2 naming the path
    (was a traceback and exit 3, after compare had printed its own exit 0)."""
    import os

    from oracle.__main__ import main

    base = synthetic(tmp_path / "a", label="v1", seed=1)
    cand = synthetic(tmp_path / "b", label="v2", seed=2)
    (cand / "report.html").mkdir()
    assert main(["report", str(cand), "--quiet"]) == 2
    assert "report.html" in capsys.readouterr().err
    for target in (tmp_path, Path("/dev/full")):
        if target == Path("/dev/full") and not os.path.exists(target):
            continue
        assert main(["compare", str(base), str(cand), "--gate", "off", "--html", str(target)]) == 2
        assert str(target) in capsys.readouterr().err


def test_trend_lists_a_run_that_measured_nothing_as_unmeasured_not_as_a_failure(tmp_path):
    """A run that sent no recall probe exits 2 (it measured nothing), and its audit says so; the trend listed it
    as "fail", beside the nights whose bot forgot."""
    import json

    from oracle import trend
    from oracle.verdict import NO_PROBE_SENT, of_summary

    base = synthetic(tmp_path / "a", label="v1", seed=1)
    quiet = synthetic(tmp_path / "b", label="v2", seed=2, probes=0)
    summary = json.loads((quiet / "audit" / "summary.json").read_text())
    summary["verdict"] = {**of_summary(summary), "result": "fail", "failed": [NO_PROBE_SENT]}  # as the audit writes
    (quiet / "audit" / "summary.json").write_text(json.dumps(summary))
    rows = trend.per_run([load_run(base), load_run(quiet)], 0.05, 0.01)
    assert [r["result"] for r in rows] == ["pass", "unmeasured"]


def test_a_summary_without_verdict_and_observations_keeps_the_failed_rules_its_metrics_cannot_judge(tmp_path, capsys):
    """Its verdict was worked out from the three headline metrics alone: a FAIL on one corrupt entry, still in its
    breaches, compared as PASS, exit 0, and drawn with a PASS badge (input hunt 16). Those rules stand."""
    from oracle.verdict import FAIL, exit_code, of_summary, parse_gates

    base = synthetic(tmp_path / "a", label="v1", seed=1)
    cand = synthetic(tmp_path / "b", label="v2", seed=2)
    path = cand / "audit" / "summary.json"
    summary = json.loads(path.read_text())
    summary.pop("verdict", None)
    summary.pop("observed", None)
    breach = "corrupt: 1 stored entries that do not decode of 174 stored entries (0.57%) > allowed 0"
    path.write_text(json.dumps({**summary, "anomalies": {"corrupt": 1}, "breaches": [breach]}))
    v = of_summary(load_run(cand).summary)
    assert v["result"] == FAIL and breach in v["failed"] and exit_code(v) == 1
    assert compare.main([str(base), str(cand)]) == 1
    assert of_summary(load_run(cand).summary, parse_gates("corrupt=off"))["result"] != FAIL or \
        breach not in of_summary(load_run(cand).summary, parse_gates("corrupt=off"))["failed"]


def test_trend_marks_a_night_not_like_for_like_with_the_one_before(tmp_path, capsys):
    """compare warned of two runs under different loads; trend showed the same pair 'better' or 'worse' with no
    word (soak hunt 18): the row is marked, and a note says why, in the text and the HTML page."""
    from oracle import trend

    runs = [_with_load(synthetic(tmp_path / name, label=name, seed=seed), {"users": users, "spawn_rate": 5,
                                                                            "run_time": 60, "shape": None})
            for name, seed, users in (("n1", 1, 10), ("n2", 2, 10), ("n3", 3, 50))]
    assert trend.main([str(r) for r in runs] + ["--html", str(tmp_path / "trend.html")]) == 0
    out = capsys.readouterr().out
    marked = [line for line in out.splitlines() if line.rstrip().endswith(" *")]
    assert len(marked) == 1 and " n3 " in marked[0], out
    assert "* not like for like with the run before it" in out, out
    assert "the runs had different loads (n2: 10 users at 5/s for 60s, n3: 50 users at 5/s for 60s)" in out, out
    assert "not like for like: the runs had different loads" in (tmp_path / "trend.html").read_text()
