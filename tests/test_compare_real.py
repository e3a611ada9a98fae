"""`python -m oracle compare` on real runs against the embedded stack, as a release pipeline uses it:
a correct release against a read-modify-write release is "worse" and fails the gate; two runs of
the same correct release show no significant change and pass."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support_locust import run_locust
from support_refbot import running_stack

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "locustfiles" / "scripts" / "bursty.yaml"


def real_run(stack, run_dir: Path, label: str) -> Path:
    st = stack.state
    run = run_locust(st["url"], run_dir, "--store-url", st["store_url"], "--script", SCRIPT, "--label", label,
                     "--settle", "1s", users=6, rate=6, time_s="10s", timeout=150)
    assert (run_dir / "audit" / "summary.json").exists(), run.output[-3000:]
    return run_dir


def compare(*runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oracle", "compare", *map(str, runs)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_compare_gates_a_worse_release_and_passes_the_same_one(tmp_path):
    fast = {"think_ms": 40, "jitter_ms": 40}
    with running_stack(tmp_path, mode="correct", **fast) as stack:
        base = real_run(stack, tmp_path / "base", "v1")
        again = real_run(stack, tmp_path / "again", "v1")
    with running_stack(tmp_path, mode="read-modify-write", **fast) as stack:
        racy = real_run(stack, tmp_path / "racy", "v2-rmw")

    worse = compare(base, racy)
    assert worse.returncode == 1, worse.stdout + worse.stderr
    loss_row = next(line for line in worse.stdout.splitlines() if line.strip().startswith("stored loss rate"))
    assert loss_row.rstrip().endswith("WORSE"), worse.stdout
    assert float(loss_row.split()[-2]) < 1e-6, f"the p-value should be tiny: {loss_row}"

    same = compare(base, again)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no significant change" in same.stdout and "WORSE" not in same.stdout, same.stdout
