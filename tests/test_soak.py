"""The soak recipe (`make soak`'s script, a few seconds long) end to end, and `python -m oracle trend`
over many runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from oracle import trend
from support_refbot import processes_mentioning
from support_report import synthetic

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_soak_recipe_runs_the_soak_plan_for_its_duration_with_telemetry_in_the_report(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "TMPDIR": str(tmp_path), "VENV": str(REPO / ".venv"), "RUN_DIR": str(run),
           "DURATION": "16s", "USERS": "4", "SPAWN_RATE": "4", "THINK": "0.1-0.3", "TELEMETRY_INTERVAL": "1s"}
    proc = subprocess.Popen(["bash", "scripts/soak.sh"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the soak did not finish in 240s:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    plan = (run / "plan.yaml").read_text()
    assert [line for line in plan.splitlines() if line.startswith("duration:")] == ["duration: 16s"]
    assert "kind: rolling-restart" in plan, "the soak plan, lasting DURATION"
    meta = json.loads((run / "run.json").read_text())
    assert meta["plan"] == str(run / "plan.yaml") and meta["label"] == "soak-correct"
    samples = [json.loads(line) for line in (run / "telemetry.jsonl").read_text().splitlines()]
    assert len(samples) >= 4 and all(s["store"] and s["rss"]["master"] > 0 for s in samples), samples[:2]
    # PROCESSES=2 by default: the master's and both workers' RSS (a worker first reports it ~5-10 s in)
    assert max(len(s["rss"]) for s in samples) == 3, samples[-1]["rss"]
    assert samples[-1]["store"]["aof_enabled"] == 1  # the recipe's store persists (aof-always)
    html = (run / "report.html").read_text()
    assert 'id="charts-telemetry"' in html and (run / "charts" / "telemetry.png").stat().st_size > 20_000
    assert "soak: report" in out and "PASS" in out, out[-2000:]
    assert processes_mentioning(str(tmp_path)) == [], "the soak left processes running"


def nightly(tmp_path: Path, name: str, label: str, start: float, lost: int, probes_failed: int) -> Path:
    run = synthetic(tmp_path / name, label=label, lost=lost, probes_failed=probes_failed, seed=len(name))
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "start": start, "end": start + 300}))
    return run


def test_trend_over_results_lists_runs_by_start_and_pools_each_release(tmp_path, capsys):
    day = 86_400
    t = 1_790_000_000.0
    runs = [nightly(tmp_path, "c", "v1.5", t + 2 * day, lost=90, probes_failed=30),  # given out of order
            nightly(tmp_path, "a", "v1.4", t, lost=0, probes_failed=0),
            nightly(tmp_path, "b", "v1.4", t + day, lost=10, probes_failed=4)]
    (tmp_path / "matrix").mkdir()  # results/* holds folders that are not runs
    html = tmp_path / "trend.html"
    code = trend.main([*map(str, runs), str(tmp_path / "matrix"), str(runs[0]) + "/", "--html", str(html)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "skipped:" in err and "matrix" in err and "named twice; counted once" in err  # pooled once, not twice
    lines = out.splitlines()
    order = [line.split()[2] for line in lines[2:5]]
    assert order == ["v1.4", "v1.4", "v1.5"], out
    assert "0.00% (0/2000)" in lines[2] and "0.50% (10/2000)" in lines[3] and "4.50% (90/2000)" in lines[4]
    assert lines[2].split()[-2:] == ["pass", "-"], "the first night: strict gates held, nothing before it"
    assert lines[4].split()[-2:] == ["fail", "worse"], "v1.5's night fails and is worse than the night before"
    pooled = {line.split()[0]: line for line in lines if line.startswith("  v1.")}
    assert "0.25% (10/4000)" in pooled["v1.4"] and pooled["v1.4"].split()[1] == "2"
    assert "4.50% (90/2000)" in pooled["v1.5"]
    page = html.read_text()
    assert page.count('src="data:image/png;base64,') == 1 and "v1.5" in page and "skipped" in page


def test_trend_with_no_audited_run_is_bad_input(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert trend.main([str(tmp_path / "empty")]) == 2
    assert "none of the folders is an audited run" in capsys.readouterr().err
