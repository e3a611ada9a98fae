"""ChatUser against the real reference stack (`python -m refbot up`: redis-server, bot replicas, HAProxy).

Correct mode: the journal matches Locust, no failed probe or cross-talk, and the end-of-run seam runs
the oracle's audit on the real Redis. Buggy modes: the online judgement catches them live.
"""
from __future__ import annotations

import json

import pytest

from support_locust import run_locust
from support_refbot import refbot_stack  # noqa: F401 - fixture
from test_locust_runs import assert_journal_matches_locust


@pytest.mark.slow
def test_correct_stack_passes_and_the_audit_runs_at_the_end(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    run = run_locust(stack.url, tmp_path / "run", "--store-url", stack.state["store_url"], "--settle", "0.5",
                     users=10, time_s="5s", timeout=240)
    records = run.records()
    assert_journal_matches_locust(run, records)
    assert {r["verdict"] for r in records if r["kind"] == "probe" and r["outcome"] == "ok"} == {"pass"}
    assert not any(r["crosstalk"] for r in records)
    summary_file = run.run_dir / "audit" / "summary.json"
    assert summary_file.exists(), run.output
    summary = json.loads(summary_file.read_text())
    assert summary["turns"]["ok"] == sum(r["outcome"] == "ok" for r in records)
    assert summary["breaches"] == [], summary["breaches"]
    assert run.returncode == 0, run.output[-4000:]


@pytest.mark.slow
def test_process_local_memory_on_3_replicas_shows_recall_failures(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=3, mode="process-local", think_ms=0, jitter_ms=5)
    run = run_locust(stack.url, tmp_path / "run", users=6, time_s="4s")
    assert any(r["verdict"] == "amnesia" for r in run.records())
    assert run.returncode == 1, run.output


@pytest.mark.slow
def test_shared_instance_memory_under_concurrency_shows_crosstalk(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=1, mode="shared-instance", think_ms=20, jitter_ms=20)
    run = run_locust(stack.url, tmp_path / "run", users=20, rate=20, time_s="5s")
    assert any(r["crosstalk"] for r in run.records())
    assert run.returncode == 1, run.output


@pytest.mark.slow
def test_turns_after_a_paused_replica_resumes_are_accepted(tmp_path, refbot_stack):  # noqa: F811
    """Regression: a replica frozen (SIGSTOP) longer than --timeout makes in-flight turns fail with no
    HTTP response at all; every turn after SIGCONT must still be a well-formed request. (A reverted fast
    path handed one per-user headers dict to Locust's error path, whose request builder adds
    ``content-type: application/octet-stream`` to the dict it is given; from then on every turn of
    that user carried that header and FastAPI answered 422.)"""
    from targets import registry as state

    stack = refbot_stack(replicas=1, mode="correct", think_ms=0, jitter_ms=5)
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {id: freeze, kind: pause, target: bot-1, at: 1.5s, duration: 3s}\n")
    run = run_locust(stack.url, tmp_path / "run", "--chaos", plan, "--stack-state", state.state_path(stack.dir),
                     "--timeout", "1", users=4, time_s="10s", timeout=240)
    records = run.records()
    timeline = [json.loads(line) for line in (run.run_dir / "chaos.jsonl").read_text().splitlines()]
    resumed = next(e["time"] for e in timeline if e["event"] == "recover")
    errors = {r["error"] for r in records if r["status"] is None and r["outcome"] != "ok"}
    assert "timeout" in errors, f"the pause caused no turn without a response: {errors}"
    rejected = [r for r in records if r["status"] and 400 <= r["status"] < 500]
    assert not rejected, f"{len(rejected)} turns rejected by the bot, e.g. {rejected[0]}"
    after = [r for r in records if r["sent"] > resumed + 1.5]
    assert after and sum(r["outcome"] == "ok" for r in after) >= 0.9 * len(after), \
        [(r["status"], r["error"]) for r in after if r["outcome"] != "ok"][:10]
