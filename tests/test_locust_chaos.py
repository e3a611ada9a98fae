"""The end-of-run seam with real chaos: faults start with the test and are healed when it ends,
also when Locust is stopped by SIGTERM in the middle of a fault; a bad plan stops before load."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import wait_until
from targets import registry as state
from support_locust import _kill_group, chat_bot, finish, locust_cmd, run_locust
from support_refbot import refbot_stack  # noqa: F401 - fixture


def timeline(run_dir):
    return [json.loads(line) for line in (run_dir / "chaos.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_chaos_runs_with_the_load_and_heals_at_the_end(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {id: k, kind: kill, target: bot-1, at: 1s, duration: 1s}\n"
                    "  - {id: late, kind: pause, target: bot-1, at: 1.5s, duration: 1s}\n")  # bot-1 is down then
    run = run_locust(stack.url, tmp_path / "run", "--chaos", plan, "--stack-state", state.state_path(stack.dir),
                     "--store-url", stack.state["store_url"], "--settle", "0.5", users=6, time_s="5s",
                     timeout=240)
    events = [(e["event"], e["outcome"], e["fault"]) for e in timeline(run.run_dir)]
    assert events == [("apply", "ok", "k#0"), ("apply", "error", "late#0"), ("recover", "ok", "k#0")], events
    # a fault that never applied is said at the end, where a CI job's log has it, not only in summary.json
    assert "warning: chaos: fault late#0 (pause on bot-1) failed to apply: skipped" in run.output, run.output[-3000:]
    assert state.member_alive(stack.member("bot-1"))
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["plan"] == str(plan) and "kill" in meta["plan_text"]
    assert (run.run_dir / "audit" / "summary.json").exists(), run.output
    assert "amnesia" not in {r["verdict"] for r in run.records()}, run.output


@pytest.mark.slow
def test_a_bot_whose_restart_wipes_its_memory_fails_at_think_0(tmp_path, refbot_stack):  # noqa: F811
    """LangChain's quick-start `store = {}` on one replica, restarted mid-run: at --think 0 every conversation in
    flight burned its turns against the bot that was down, none asked after the restart for what it said before,
    and the run PASSed. A conversation now waits after a failed turn, outlives the restart, and its probes fail."""
    stack = refbot_stack(replicas=1, mode="process-local", think_ms=0, jitter_ms=5)
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {id: r, kind: kill, target: bot-1, at: 2s, duration: 1s}\n")
    run = run_locust(stack.url, tmp_path / "run", "--chaos", plan, "--stack-state", state.state_path(stack.dir),
                     users=4, time_s="9s", timeout=240)
    assert run.returncode == 1, run.output[-3000:]
    assert "FAIL  probe_amnesia" in run.output, run.output[-3000:]


@pytest.mark.slow
def test_sigterm_in_the_middle_of_a_fault_still_heals_and_keeps_the_journal(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {id: k, kind: kill, target: bot-2, at: 0.5s, duration: 60s}\n")
    run_dir = tmp_path / "run"
    (run_dir / "locust").mkdir(parents=True)
    cmd = locust_cmd(stack.url, run_dir, "--chaos", plan, "--stack-state", state.state_path(stack.dir),
                     "--think", "0.05", users=4, time_s="60s")
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_until(lambda: (run_dir / "chaos.jsonl").exists() and timeline(run_dir), timeout=60,
                   what="the fault to be applied")
        wait_until(lambda: sum(1 for _ in (run_dir / "journal").glob("*.jsonl")) and
                   next((run_dir / "journal").glob("*.jsonl")).stat().st_size > 2000, timeout=60,
                   what="turns in the journal")
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = finish(proc, 120)
    finally:
        _kill_group(proc)
    assert [e["event"] for e in timeline(run_dir)] == ["apply", "recover"], err
    assert state.member_alive(stack.member("bot-2"))
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["end"] is not None and "exit_code" in meta
    assert meta["stopped_early"]["signal"] == "SIGTERM", meta   # Locust's own SIGTERM path (verdict hunt 15)
    assert "chaos: stopped, everything healed" in err


def test_bad_chaos_plan_stops_before_any_load(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {kind: explode, target: bot, at: 1s}\n")
    with chat_bot("memory", log=tmp_path / "bot.log") as url:
        run = run_locust(url, tmp_path / "run", "--chaos", plan, time_s="2s")
    assert run.returncode == 2, run.output
    assert str(plan) in run.output and "explode" in run.output
    assert not (tmp_path / "bot.log").exists() or (tmp_path / "bot.log").read_text() == ""
