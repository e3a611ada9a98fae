"""Verdict hunt 14: a run that measured nothing (exit 2) was "verdict FAIL" and "RUN: FAIL, exit code 2" on the
terminal while its badge said NOTHING MEASURED: one word for it everywhere."""
from __future__ import annotations

from oracle.verdict import NO_PROBE_SENT, exit_code, headline, word


def test_a_verdict_that_measured_nothing_is_said_nothing_measured_not_fail():
    unmeasured = {"result": "fail", "rules": [], "failed": [NO_PROBE_SENT]}
    assert exit_code(unmeasured) == 2
    assert word(unmeasured) == "NOTHING MEASURED"
    assert headline(unmeasured) == f"NOTHING MEASURED — {NO_PROBE_SENT}"
    found = {"result": "fail", "rules": [], "failed": ["stored_loss: 3 acknowledged turns lost"]}
    assert exit_code(found) == 1 and word(found) == "FAIL" and headline(found).startswith("FAIL — ")
    assert word({"result": "pass", "rules": [], "failed": []}) == "PASS"


def test_the_end_of_run_line_of_a_run_that_measured_nothing_says_so(tmp_path):
    from types import SimpleNamespace

    from locustfiles.endofrun import EndOfRun, Run

    end = EndOfRun(settings=None)
    run = Run(SimpleNamespace(run_dir=str(tmp_path), store=None, no_audit=True))
    run.verdict, run.final = {"result": "fail", "rules": [], "failed": [NO_PROBE_SENT]}, 2
    end.runs.append(run)
    assert end.summary_lines()[0].startswith(f"{tmp_path}: NOTHING MEASURED, exit code 2")


def test_a_signal_during_the_load_is_recorded_in_run_json(tmp_path):
    """SIGTERM 8 s into a 40 s load (a CI job's timeout): the run was judged on what ran, PASS, exit 0, and run.json
    said nothing of it. It now records stopped_early (the signal and when); the run goes on to its verdict."""
    import json
    from types import SimpleNamespace

    import gevent
    import pytest

    from locustfiles.endofrun import EndOfRun, Run

    end = EndOfRun(settings=None)
    run = Run(SimpleNamespace(run_dir=str(tmp_path), store=None))
    end.runs.append(run)
    (tmp_path / "run.json").write_text(json.dumps({"run": "r", "end": None}))
    end.on_signal("SIGTERM")
    with pytest.raises(KeyboardInterrupt):  # Locust's own stop of the load, thrown at main's next wait
        gevent.sleep(0)
    stopped = json.loads((tmp_path / "run.json").read_text())["stopped_early"]
    assert stopped["signal"] == "SIGTERM" and isinstance(stopped["time"], float)
    assert end.stopping and end.code is None and run.interrupted is None  # not an interruption: a verdict follows
