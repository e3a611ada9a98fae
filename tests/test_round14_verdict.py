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
