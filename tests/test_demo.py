"""`make demo`'s script as a new user runs it: a summary and a report at the end, and nothing left
running afterwards — also when it is interrupted with Ctrl-C (SIGINT to its process group)."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import wait_until
from support_refbot import processes_mentioning

REPO = Path(__file__).resolve().parent.parent


def start_demo(tmp_path: Path, **env) -> subprocess.Popen:
    """scripts/demo.sh with its state dir under tmp_path (TMPDIR), so its processes can be found."""
    settings = {"TMPDIR": str(tmp_path), "VENV": str(REPO / ".venv"), "RUN_DIR": str(tmp_path / "run"),
                "STEPS": "2", "STEP_USERS": "4", "STEP_DURATION": "8s", **env}
    return subprocess.Popen(["bash", "scripts/demo.sh"], cwd=REPO, env={**os.environ, **settings},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 240) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"demo did not finish in {timeout}s:\n{out[-3000:]}")
    return out


@pytest.mark.slow
def test_demo_ends_with_a_summary_and_a_report(tmp_path):
    out = finish(start_demo(tmp_path))
    run = tmp_path / "run"
    assert (run / "report.html").exists(), out[-3000:]
    assert "probe amnesia" in out and "report.html" in out, out[-3000:]
    assert (run / "chaos.jsonl").exists(), "the demo runs with chaos on"
    assert len((run / "steps.jsonl").read_text().splitlines()) >= 2, "the step shape ran its steps"
    assert processes_mentioning(str(tmp_path)) == [], "the demo left processes running"


@pytest.mark.slow
def test_ctrl_c_mid_run_leaves_nothing_running(tmp_path):
    proc = start_demo(tmp_path, STEP_DURATION="60s")
    journal = tmp_path / "run" / "journal"
    wait_until(lambda: journal.exists() and any(p.stat().st_size > 0 for p in journal.glob("*.jsonl")),
               timeout=120, what="the demo's first journaled turns")
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    out = finish(proc, timeout=120)
    assert proc.returncode != 0, out[-2000:]
    wait_until(lambda: processes_mentioning(str(tmp_path)) == [], timeout=30,
               what="every process of the interrupted demo to be gone")
    records = [line for p in journal.glob("*.jsonl") for line in p.read_text().splitlines() if line.strip()]
    assert records, "the journal recorded before the interrupt is kept"
