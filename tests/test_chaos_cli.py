"""`python -m chaos` against a real stack: signals heal before exit, heal after SIGKILL, dry run, refusals."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_until
from support_chaos import chaos_stack, read_timeline, run_chaos, write_plan  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[1]


def start_cli(plan, stack, run_dir):
    return subprocess.Popen([sys.executable, "-m", "chaos", "run", str(plan), "--backend", "local",
                             "--state-dir", str(stack.state_dir), "--run-dir", str(run_dir)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.fixture
def cli_procs():
    procs = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def applied(run_dir):
    return [r for r in read_timeline(run_dir) if r["event"] == "apply" and r["outcome"] == "ok"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_mid_pause_heals_before_exit(chaos_stack, tmp_path, cli_procs, sig):
    plan = write_plan(tmp_path, """
        faults:
          - {id: freeze, kind: pause, target: bot-1, at: 0.2s, duration: 60s}
    """)
    run = tmp_path / "run"
    proc = start_cli(plan, chaos_stack, run)
    cli_procs.append(proc)
    wait_until(lambda: applied(run), timeout=20, what="pause applied")
    assert chaos_stack.process_state("bot-1") == "T"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert chaos_stack.process_state("bot-1") != "T" and chaos_stack.healthy("bot-1")
    tl = read_timeline(run)
    assert [(r["event"], r["outcome"]) for r in tl] == [("apply", "ok"), ("recover", "ok")]
    assert tl[1]["via"] == signal.Signals(sig).name.lower()
    assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == []
    if sig == signal.SIGHUP:  # a closed terminal: what follows is printed to the run folder, not to it
        assert "healing" not in out
        out = (run / "hangup.log").read_text()
    assert "healing" in out and "0 fault(s) left outstanding" in out


def test_sigterm_mid_outage_starts_the_killed_replica_before_exit(chaos_stack, tmp_path, cli_procs):
    plan = write_plan(tmp_path, """
        faults:
          - {kind: kill, target: bot-2, at: 0s, duration: 5m}
          - {kind: lb-disable, target: bot-1, at: 0s, duration: 5m}
    """)
    run = tmp_path / "run"
    old = chaos_stack.pid("bot-2")
    proc = start_cli(plan, chaos_stack, run)
    cli_procs.append(proc)
    wait_until(lambda: len(applied(run)) == 2, timeout=20, what="both faults applied")
    assert not chaos_stack.healthy("bot-2")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    assert chaos_stack.healthy("bot-2") and chaos_stack.pid("bot-2") != old
    wait_until(lambda: chaos_stack.lb_status("bot-1") == "UP", timeout=10, what="bot-1 ready again")
    recovers = [r for r in read_timeline(run) if r["event"] == "recover"]
    assert sorted(r["instance"] for r in recovers) == ["bot-1", "bot-2"]
    assert all(r["outcome"] == "ok" and r["via"] == "sigterm" for r in recovers)


def test_sigkill_mid_pause_then_heal_resumes_the_process(chaos_stack, tmp_path, cli_procs):
    plan = write_plan(tmp_path, "faults: [{kind: pause, target: bot-1, at: 0s, duration: 5m}]")
    run = tmp_path / "run"
    proc = start_cli(plan, chaos_stack, run)
    cli_procs.append(proc)
    wait_until(lambda: applied(run), timeout=20, what="pause applied")
    proc.kill()
    proc.wait(10)
    assert chaos_stack.process_state("bot-1") == "T"          # left paused by the dead controller
    left = json.loads((run / "chaos" / "outstanding.json").read_text())
    assert [e["instance"] for e in left["faults"]] == ["bot-1"]
    res = run_chaos("heal", run)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 recovered, 0 failed" in res.stdout
    assert chaos_stack.process_state("bot-1") != "T" and chaos_stack.healthy("bot-1")
    assert read_timeline(run)[-1]["event"] == "recover" and read_timeline(run)[-1]["via"] == "heal-cli"
    assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == []
    again = run_chaos("heal", run)                              # nothing left: a no-op
    assert again.returncode == 0 and "0 recovered" in again.stdout


def test_sigkill_mid_outage_then_heal_starts_the_member(chaos_stack, tmp_path, cli_procs):
    plan = write_plan(tmp_path, "faults: [{kind: kill, target: bot-2, at: 0s, duration: 5m}]")
    run = tmp_path / "run"
    old = chaos_stack.pid("bot-2")
    proc = start_cli(plan, chaos_stack, run)
    cli_procs.append(proc)
    wait_until(lambda: applied(run), timeout=20, what="kill applied")
    proc.kill()
    proc.wait(10)
    assert not chaos_stack.healthy("bot-2")
    res = run_chaos("heal", run)
    assert res.returncode == 0 and "1 recovered, 0 failed" in res.stdout, res.stdout + res.stderr
    assert chaos_stack.healthy("bot-2") and chaos_stack.pid("bot-2") != old


def uptimes(stack):
    from chaos.backends.local import _uptime
    return {n: (m["pid"], _uptime(m["pid"])) for n, m in stack.state()["members"].items()}


def test_dry_run_touches_nothing(chaos_stack, tmp_path):
    plan = write_plan(tmp_path, """
        faults:
          - {kind: kill, target: bot, at: 0s, count: 1}
          - {kind: pause, target: bot, every: 1s, until: 3s, duration: 500ms, count: 50%}
          - {kind: redis-restart, target: redis, at: 0s}
          - {kind: lb-disable, target: bot-2, at: 0s, duration: 1s}
    """)
    before = uptimes(chaos_stack)
    res = run_chaos("run", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir,
                    "--run-dir", tmp_path / "run", "--dry-run")
    assert res.returncode == 0, res.stderr
    after = uptimes(chaos_stack)
    assert {n: p for n, (p, _) in after.items()} == {n: p for n, (p, _) in before.items()}
    assert all(after[n][1] >= before[n][1] for n in before)    # same processes, older: never restarted
    assert "f3#0 redis-restart on redis" in res.stdout and f"pid {before['redis'][0]} running" in res.stdout
    assert res.stdout.count("f2#") == 2                       # every: 1s until 3s -> at 1s and 2s
    assert not (tmp_path / "run" / "chaos.jsonl").exists()
    assert all(chaos_stack.process_state(n) != "T" for n in ("bot-1", "bot-2"))
    assert chaos_stack.lb_status("bot-2") == "UP"


@pytest.mark.parametrize("fault, message", [
    ("{kind: kill, target: nosuch, at: 0s}", "'nosuch' has no instances"),
    ("{kind: kill, target: bot, at: 0s, count: 3}", "count: 3 is more than the 2 instance(s)"),
    ("{kind: redis-stall, target: bot, at: 0s, duration: 1s}", "needs a redis target"),
    ("{kind: toxic, target: redis, at: 0s, duration: 1s, toxic: latency, latency: 100}", "need a Toxiproxy"),
])
def test_refused_before_anything_is_touched(chaos_stack, tmp_path, fault, message):
    plan = write_plan(tmp_path, f"faults:\n  - {{kind: pause, target: bot-1, at: 0s, duration: 1s}}\n  - {fault}\n")
    before = uptimes(chaos_stack)
    res = run_chaos("run", plan, "--state-dir", chaos_stack.state_dir, "--run-dir", tmp_path / "run")
    assert res.returncode == 2
    assert message in res.stderr and f"{plan}:3:" in res.stderr
    assert {n: p for n, (p, _) in uptimes(chaos_stack).items()} == {n: p for n, (p, _) in before.items()}
    assert not (tmp_path / "run" / "chaos.jsonl").exists()
    assert chaos_stack.process_state("bot-1") != "T"


def test_max_blast_refuses_a_plan_over_the_limit(chaos_stack, tmp_path):
    plan = write_plan(tmp_path, "max_blast: 50%\nfaults:\n  - {kind: kill, target: bot, at: 0s, count: all}\n")
    res = run_chaos("validate", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir)
    assert res.returncode == 2
    assert f"{plan}:3: count: 100% hits 2 of 2 instance(s) of 'bot', above max_blast 50%" in res.stderr


def test_controller_refuses_to_signal_its_own_process_group(chaos_stack, tmp_path):
    """A state file pointing at the controller's own pid (a stale or hostile file) is refused."""
    from targets import registry as state
    from support_chaos import controller_for
    with state.locked_state(chaos_stack.state_dir) as st:
        real = st["members"]["bot-1"]["pid"]
        st["members"]["bot-1"]["pid"] = os.getpid()
        st["members"]["bot-1"]["cmd"][0] = sys.executable
    try:
        ctl = controller_for(chaos_stack, "faults: [{kind: kill, target: bot-1, at: 0s}]", tmp_path / "run").start()
        assert ctl.wait(30)
        tl = read_timeline(tmp_path / "run")
        assert tl[0]["event"] == "apply" and tl[0]["outcome"] == "error" and "refusing" in tl[0]["error"]
    finally:
        with state.locked_state(chaos_stack.state_dir) as st:
            st["members"]["bot-1"]["pid"] = real


def test_failed_heal_is_recorded_reported_and_never_raises(chaos_stack, tmp_path):
    """HAProxy dies during an lb-disable: stop() reports the failed recovery instead of raising,
    outstanding.json keeps it, and `chaos heal` finishes the job once HAProxy is back."""
    from targets import registry as state
    from support_chaos import controller_for
    run = tmp_path / "run"
    ctl = controller_for(chaos_stack, "faults: [{kind: lb-disable, target: bot-1, at: 0s, duration: 5m}]", run).start()
    wait_until(lambda: applied(run), timeout=20, what="lb-disable applied")
    os.killpg(chaos_stack.pid("haproxy"), signal.SIGKILL)
    wait_until(lambda: not state.pid_alive(chaos_stack.pid("haproxy")), what="haproxy gone")
    failed = ctl.stop()                                   # must not raise
    assert [e["instance"] for e in failed] == ["bot-1"]
    rec = read_timeline(run)[-1]
    assert (rec["event"], rec["outcome"]) == ("recover", "error") and rec["error"]
    assert ctl.failures and ctl.failures[0]["instance"] == "bot-1"
    assert [e["instance"] for e in json.loads((run / "chaos" / "outstanding.json").read_text())["faults"]] == ["bot-1"]
    with state.locked_state(chaos_stack.state_dir) as st:   # HAProxy comes back (all servers ready)
        state.start_member(st["members"]["haproxy"])
    wait_until(lambda: chaos_stack.healthy("haproxy"), what="haproxy back")
    res = run_chaos("heal", run)
    assert res.returncode == 0 and "1 recovered, 0 failed" in res.stdout, res.stdout + res.stderr


GEVENT_STOP = """
from gevent import monkey; monkey.patch_all()
import sys, time
from chaos.backends.local import LocalBackend
from chaos.controller import Controller
from chaos.plan import parse_plan
plan = parse_plan("faults: [{kind: pause, target: bot-1, at: 0s, duration: 5m}]")
ctl = Controller(plan, LocalBackend(sys.argv[1], health_timeout=30), sys.argv[2]).start()
deadline = time.monotonic() + 20
while not ctl.outstanding.entries() or ctl.outstanding.entries()[0]["state"] != "applied":
    assert time.monotonic() < deadline
    time.sleep(0.05)
print("failed:", ctl.stop(via="test_stop"))
"""


def test_stop_under_gevent_heals_like_locust_test_stop(chaos_stack, tmp_path):
    """Inside Locust (gevent monkey-patched) stop() — what test_stop calls — heals before returning."""
    res = subprocess.run([sys.executable, "-c", GEVENT_STOP, str(chaos_stack.state_dir), str(tmp_path / "run")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "failed: []" in res.stdout, res.stderr[-3000:]
    tl = read_timeline(tmp_path / "run")
    assert [(r["event"], r["outcome"]) for r in tl] == [("apply", "ok"), ("recover", "ok")]
    assert tl[1]["via"] == "test_stop"
    assert chaos_stack.process_state("bot-1") != "T" and chaos_stack.healthy("bot-1")


def test_validate_and_dry_run_say_which_occurrences_will_be_skipped_and_the_run_skips_them(chaos_stack, tmp_path):
    """One fault per instance at a time, and max_concurrent instances under faults: a kill while a pause holds
    bot-1, and a stall while the pause holds two instances, are skipped at run time. chaos validate
    and the dry run say so before anything runs, naming the plan line and the fault in the way; the real run skips
    exactly those."""
    plan = write_plan(tmp_path, """
        max_concurrent: 2
        faults:
          - {kind: pause, target: bot, at: 0s, duration: 2s, count: all}
          - {kind: redis-stall, target: redis, at: 500ms, duration: 100ms}
          - {kind: kill, target: bot-1, at: 1s}
          - {kind: kill, target: bot-1, at: 3s}
    """)
    res = run_chaos("validate", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir)
    assert res.returncode == 0, res.stderr
    assert "ok against backend local; 2 occurrence(s) will be skipped:" in res.stdout, res.stdout
    assert f"warning: {plan}:5: f2#0 at +0.5s will be skipped: max_concurrent 2 is reached then (2 fault(s) in " \
           "force)" in res.stdout
    assert (f"warning: {plan}:6: f3#0 at +1s will be skipped: 'bot-1' of target 'bot-1' is still under f1#0 until "
            "+2s") in res.stdout
    dry = run_chaos("run", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir, "--run-dir",
                    tmp_path / "dry", "--dry-run")
    assert dry.stdout.count("will be skipped") == 2, dry.stdout
    done = run_chaos("run", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir, "--run-dir",
                     tmp_path / "run")
    assert done.returncode == 0, done.stderr
    skipped = sorted(r["fault"] for r in read_timeline(tmp_path / "run")
                     if r["event"] == "apply" and "skipped" in (r.get("error") or ""))
    assert skipped == ["f2#0", "f3#0"], read_timeline(tmp_path / "run")


def test_a_rolling_restart_holds_every_instance_of_its_target_and_the_dry_run_shows_the_free_pick(chaos_stack,
                                                                                                  tmp_path):
    """A kill of bot-2 while a rolling restart held target 'bot' ran: the rolling restart found bot-2 down and
    failed half applied, and a correct bot FAILed the chaos gate (chaos hunt 18). It is skipped now (recorded so:
    the chaos gate does not count it). And a partial count's pick while bot-1 is paused is bot-2 in the dry run as
    in the run (the dry run showed bot-1, a pick among all instances)."""
    plan = write_plan(tmp_path, """
        seed: 0
        faults:
          - {kind: rolling-restart, target: bot, at: 0s, release: v2, pause: 1}
          - {kind: kill, target: bot-2, at: 500ms, duration: 1s}
          - {kind: pause, target: bot-1, at: 6s, duration: 2s}
          - {kind: pause, target: bot, count: 1, at: 6500ms, duration: 500ms}
    """)
    dry = run_chaos("run", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir, "--run-dir",
                    tmp_path / "dry", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    shown = dry.stdout.split("f4#0 pause for 0.5s on bot:")[1].splitlines()[1]
    assert shown.strip().startswith("bot-2 "), dry.stdout
    done = run_chaos("run", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir, "--run-dir",
                     tmp_path / "run")
    assert done.returncode == 0, done.stderr + done.stdout
    tl = read_timeline(tmp_path / "run")
    applied = {(r["fault"], r["instance"]) for r in tl if r["event"] == "apply" and r["outcome"] == "ok"}
    assert ("f1#0", "bot") in applied and ("f4#0", "bot-2") in applied, tl
    assert [r["error"].split(":")[0] for r in tl if r["fault"] == "f2#0"] == ["skipped"], tl
    assert all(chaos_stack.member(b)["release"] == "v2" for b in ("bot-1", "bot-2"))
