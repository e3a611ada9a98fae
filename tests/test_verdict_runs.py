"""The verdict of real runs: exit codes a CI gate can trust, signals after the load, a shared store,
a wrong key template and a store that really lost everything.

Real parts: the reference stack (redis-server, refbot replicas, HAProxy) or a real redis-server,
real `locust` processes, real signals.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import time

import pytest
import redis

from conftest import wait_until
from oracle.audit import audit_run
from oracle.keys import TemplateMismatch
from oracle.store import StoreOptions
from contracts.runfolder import RunFolder
from oracle.verdict import parse_gates
from targets import registry as state
from support_locust import _kill_group, chat_bot, finish, locust_cmd, quick_script, run_locust
from support_oracle import RUN, build_world, fill_redis, read_findings, simple_specs, write_journal
from support_refbot import refbot_stack  # noqa: F401 - fixture


def run_json(run_dir) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def summary(run_dir) -> dict:
    return json.loads((run_dir / "audit" / "summary.json").read_text())


# ---- exit codes --------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_bot_that_loses_turns_fails_the_run_and_a_correct_one_passes(tmp_path, refbot_stack):  # noqa: F811
    racy = refbot_stack(replicas=2, mode="read-modify-write", think_ms=30, jitter_ms=30)
    bursty = quick_script(tmp_path)
    run = run_locust(racy.url, tmp_path / "racy", "--store-url", racy.state["store_url"], "--script", bursty,
                     "--settle", "0.5", users=8, time_s="6s", timeout=180)
    assert run.returncode == 1, run.output[-3000:]
    lost = next(r for r in summary(run.run_dir)["verdict"]["rules"] if r["gate"] == "stored_loss")
    assert lost["result"] == "fail" and lost["count"] > 0
    assert "verdict FAIL (gates strict)" in run.output and "FAIL  stored_loss:" in run.output
    meta = run_json(run.run_dir)
    assert (meta["exit_code"], meta["verdict"], meta["phase"]) == (1, "fail", "done")
    html = (run.run_dir / "report.html").read_text()
    assert '<div class="badge fail">FAIL</div>' in html and "<code>stored_loss</code>" in html

    good = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    run = run_locust(good.url, tmp_path / "good", "--store-url", good.state["store_url"], "--script", bursty,
                     "--settle", "0.5", users=6, time_s="4s", timeout=180)
    assert run.returncode == 0, run.output[-3000:]
    assert summary(run.run_dir)["verdict"]["result"] == "pass" and run_json(run.run_dir)["verdict"] == "pass"
    assert '<div class="badge ok">PASS</div>' in (run.run_dir / "report.html").read_text()


def test_locusts_own_exit_code_on_error_still_applies(tmp_path):
    """Failed requests with --exit-code-on-error 5 exit 5, as plain Locust would; without it the errors gate
    fails the run (no fault was in force to excuse them). The flaky bot answers two requests in three with a
    reply goldfish cannot read, so in lockstep every probe could be one of those (0 of 15 answered, once in CI):
    the probe gate is off too, so the verdict holds and Locust's code is the one under test."""
    with chat_bot("flaky") as url:
        run = run_locust(url, tmp_path / "run", "--exit-code-on-error", "5", "--gate", "errors=off,probe_amnesia=off",
                         "--script", quick_script(tmp_path), time_s="3s")
        assert run.returncode == 5, run.output[-3000:]
        assert "exit code 5: Locust's own (requests failed and --exit-code-on-error is set)" in run.output
        run = run_locust(url, tmp_path / "gated", "--script", quick_script(tmp_path), time_s="3s")
        assert run.returncode == 1, run.output[-3000:]
        assert "FAIL  errors:" in run.output


def test_a_run_that_sent_none_of_its_scripts_probes_measured_nothing_of_memory(tmp_path):
    """The load ended before any conversation reached its probe (a 2-second run, the probe after a long pause): a
    bot that never reads its memory PASSed, "0 failed recall probes of 0" (verdict hunt: short_run_no_probe_pass).
    Now it is no PASS, exit 2 as for a test that measured nothing, unless the probe gate is off."""
    script = tmp_path / "late.yaml"
    script.write_text("name: late\nsteps:\n  - plant: order number\n  - think: 30\n  - probe: order number\n")
    with chat_bot("memory") as url:
        run = run_locust(url, tmp_path / "run", "--script", script, "--think", "0", users=2, time_s="2s")
        assert run.returncode == 2, run.output[-3000:]
        assert "nothing measured of memory: no recall probe was sent" in run.output, run.output[-3000:]
        assert run_json(run.run_dir)["script_probes"] == 1 and run_json(run.run_dir)["exit_code"] == 2
        run = run_locust(url, tmp_path / "off", "--script", script, "--think", "0", "--gate", "strict,probe_amnesia=off",
                         users=2, time_s="2s")
        assert run.returncode == 0, run.output[-3000:]
        script.write_text("name: chat\nsteps:\n  - chatter\n  - chatter\n")  # no probe by design: not required
        run = run_locust(url, tmp_path / "chat", "--script", script, "--think", "0", users=2, time_s="2s")
        assert run.returncode == 0, run.output[-3000:]


# ---- signals after the load ------------------------------------------------------------------------

def start_locust(host, run_dir, *extra, **kw) -> subprocess.Popen:
    (run_dir / "locust").mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(locust_cmd(host, run_dir, *extra, **kw), cwd=run_dir.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def phase(run_dir) -> str | None:
    try:
        return run_json(run_dir).get("phase")
    except (OSError, ValueError):
        return None


def test_a_store_that_dies_before_the_audit_does_not_hide_what_the_clients_saw(tmp_path, redis_server):
    """Every probe failed as the clients saw it, and the Redis died in the settle: "audit FAILED ... NO VERDICT, exit
    code 3", the journal's FAIL neither said nor used (input hunt 9: store_dies_before_audit_hides_fail). A bug found
    fails the run: the journal's verdict, exit 1, as for a store the options cannot read."""
    run_dir = tmp_path / "run"
    with chat_bot("forget") as url:
        proc = start_locust(url, run_dir, "--store-url", redis_server.url, "--settle", "3s", "--think", "0",
                            "--script", quick_script(tmp_path), users=4, time_s="2s")
        try:
            wait_until(lambda: phase(run_dir) == "settle", timeout=60, what="the settle phase")
            assert RunFolder(run_dir).running() is True  # what tells trend a run with no end yet still goes on
            redis_server.stop(signal.SIGKILL)
            out, err = finish(proc, 90)
            assert RunFolder(run_dir).running() is False
        finally:
            _kill_group(proc)
    assert "audit FAILED" in err and "verdict FAIL (online, from the journal: the store could not be judged" in err, \
        err[-3000:]
    assert proc.returncode == 1 and run_json(run_dir)["exit_code"] == 1, err[-3000:]


@pytest.mark.slow
def test_sigterm_during_the_audit_exits_143_and_says_how_to_finish(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=1, mode="correct", think_ms=0, jitter_ms=5)
    redis_pid = stack.member("redis")["pid"]
    run_dir = tmp_path / "run"
    proc = start_locust(stack.url, run_dir, "--store-url", stack.state["store_url"], "--settle", "3s",
                        "--script", quick_script(tmp_path), users=4, time_s="2s")
    try:
        wait_until(lambda: phase(run_dir) == "settle", timeout=60, what="the settle phase")
        os.kill(redis_pid, signal.SIGSTOP)  # the audit will hang on the store...
        try:
            wait_until(lambda: phase(run_dir) == "audit", timeout=30, what="the audit phase")
            proc.send_signal(signal.SIGTERM)  # ...and a CI timeout ends it
            out, err = finish(proc, 60)
        finally:
            os.kill(redis_pid, signal.SIGCONT)
    finally:
        _kill_group(proc)
    assert proc.returncode == 143, err[-3000:]
    meta = run_json(run_dir)
    assert meta["exit_code"] == 143 and meta["end"] is not None
    assert meta["interrupted"]["signal"] == "SIGTERM" and meta["interrupted"]["phase"] == "audit"
    assert meta["interrupted"]["finish_with"].startswith(f"python -m oracle audit {run_dir} --store-url")
    assert "SIGTERM during audit: stopped with exit code 143" in err
    assert not (run_dir / "audit" / "summary.json").exists()



def start_with_a_kill_fault(tmp_path, stack) -> subprocess.Popen:
    """Locust on ``stack`` (run folder tmp_path/run) with bot-2 killed from 0.5 s for 60 s, once the fault is in."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {id: k, kind: kill, target: bot-2, at: 0.5s, duration: 60s}\n")
    proc = start_locust(stack.url, tmp_path / "run", "--chaos", plan, "--stack-state", state.state_path(stack.dir),
                        "--store-url", stack.state["store_url"], "--think", "0.05", users=4, time_s="60s")
    chaos = tmp_path / "run" / "chaos.jsonl"
    try:
        wait_until(lambda: chaos.exists() and '"apply"' in chaos.read_text(), timeout=60, what="the fault")
    except BaseException:
        _kill_group(proc)
        raise
    return proc

@pytest.mark.slow
@pytest.mark.parametrize("gap", [0.05, 0.6])
def test_a_double_ctrl_c_never_passes_and_never_cuts_a_recovery_short(tmp_path, refbot_stack, gap):  # noqa: F811
    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    run_dir, chaos = tmp_path / "run", tmp_path / "run" / "chaos.jsonl"
    proc = start_with_a_kill_fault(tmp_path, stack)
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(gap)  # the second Ctrl-C at a chosen moment after the first (what is under test)
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc, 120)
    finally:
        _kill_group(proc)
    assert proc.returncode == 130, err[-3000:]
    events = [json.loads(line)["event"] for line in chaos.read_text().splitlines()]
    assert events == ["apply", "recover"], err[-3000:]
    assert json.loads((run_dir / "chaos" / "outstanding.json").read_text())["faults"] == []
    assert state.member_alive(stack.member("bot-2"))
    meta = run_json(run_dir)
    assert meta["exit_code"] == 130 and meta["interrupted"]["signal"] == "SIGINT"
    assert meta["interrupted"]["phase"] in ("heal", "settle", "audit", "report")



def _process_state(pid: int) -> str:
    """R, S, T (stopped: paused by SIGSTOP)... from /proc/<pid>/stat."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


@pytest.mark.slow
def test_a_closed_terminal_stops_the_run_as_sigterm_does_heals_it_and_keeps_its_output(tmp_path, refbot_stack):  # noqa: F811
    """An ssh session that drops under a soak: Locust in a terminal of its own (a pty it controls), bot-2 paused,
    then the terminal closes. The kernel's SIGHUP killed Locust at once, bot-2 stayed paused and nothing was
    judged; it is now a SIGTERM: healed, audited, and what it printed since is in the run folder's hangup.log."""
    import fcntl
    import termios
    import threading

    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    run_dir, chaos = tmp_path / "run", tmp_path / "run" / "chaos.jsonl"
    (run_dir / "locust").mkdir(parents=True)
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {id: p, kind: pause, target: bot-2, at: 0.5s, duration: 60s}\n")
    cmd = locust_cmd(stack.url, run_dir, "--chaos", plan, "--stack-state", state.state_path(stack.dir),
                     "--store-url", stack.state["store_url"], "--think", "0.05", "--settle", "0.5", users=4,
                     time_s="60s")
    terminal, its_end = os.openpty()
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdin=its_end, stdout=its_end, stderr=its_end, start_new_session=True,
                            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(its_end)
    shown = []
    reader = threading.Thread(target=lambda: shown.append(_drain(terminal)), daemon=True)
    reader.start()
    try:
        wait_until(lambda: chaos.exists() and '"apply"' in chaos.read_text(), timeout=60, what="the pause")
        assert _process_state(stack.member("bot-2")["pid"]) == "T"
        os.close(terminal)  # the terminal is gone: the kernel sends its session's leader SIGHUP
        proc.wait(120)
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, proc.returncode  # the verdict PASS: neither a death by signal (-1) nor 2 (EIO)
    events = [json.loads(line)["event"] for line in chaos.read_text().splitlines()]
    assert events == ["apply", "recover"]
    assert _process_state(stack.member("bot-2")["pid"]) != "T"
    log = (run_dir / "hangup.log").read_text()
    assert "goldfish: SIGHUP: the terminal closed; stopping as on SIGTERM\n" in log and "Traceback" not in log
    assert "chaos: stopped, everything healed" in log and "verdict " in log
    meta = run_json(run_dir)
    assert meta["phase"] == "done" and meta["exit_code"] == proc.returncode
    assert meta["stopped_early"]["signal"] == "SIGHUP", meta   # judged on what ran, and said so (verdict hunt 15)
    assert (run_dir / "audit" / "summary.json").exists()


def test_a_closed_terminal_lets_a_running_audit_finish_with_its_output_in_hangup_log(tmp_path, redis_server):
    """`python -m oracle audit` of a soak takes minutes; an ssh session that dropped under it killed it (SIGHUP).
    The audit, in a terminal of its own, waits on a frozen Redis; the terminal closes; Redis thaws: the audit goes on
    to its verdict, exit 0, its output in the run folder's hangup.log."""
    import fcntl
    import sys
    import termios

    import psutil

    run, _ = world_run(tmp_path, redis_server)
    terminal, its_end = os.openpty()
    redis_pid = redis_server.proc.pid
    os.kill(redis_pid, signal.SIGSTOP)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "oracle", "audit", str(run), "--store-url", redis_server.url,
                                 "--jobs", "2"], cwd=tmp_path, stdin=its_end, stdout=its_end, stderr=its_end,
                                start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        os.close(its_end)  # no reader of the terminal: one blocked in read() kept it open after os.close
        try:  # connected to the store: its SIGHUP handler is in (set before the store is read)
            wait_until(lambda: any(c.raddr and c.raddr.port == redis_server.port
                                   for c in psutil.Process(proc.pid).net_connections()), timeout=60,
                       what="the audit connecting to the frozen store")
            os.close(terminal)  # the terminal is gone: the kernel sends its session SIGHUP
            wait_until(lambda: (run / "hangup.log").exists(), timeout=30, what="hangup.log")
        finally:
            os.kill(redis_pid, signal.SIGCONT)
        proc.wait(120)
    finally:
        os.kill(redis_pid, signal.SIGCONT)
        _kill_group(proc)
    log = (run / "hangup.log").read_text()
    summary = json.loads((run / "audit" / "summary.json").read_text())
    assert proc.returncode == 1 and summary["verdict"]["result"] == "fail", log[-3000:]  # the world's failed requests
    assert "SIGHUP: the terminal closed; the audit goes on" in log and "Traceback" not in log
    assert "\nFAIL — errors: 8 failed requests" in log and "tables in" in log, log[-3000:]


def _drain(fd: int) -> bytes:
    """Read a pty's output until it closes (so the program never blocks writing to a full terminal)."""
    out = b""
    while True:
        try:
            block = os.read(fd, 65536)
        except OSError:  # closed (by the test) or hung up
            return out
        if not block:
            return out
        out += block


def test_sigusr2_prints_every_greenlets_stack_and_the_run_goes_on(tmp_path):
    """What a run that seems stuck is asked for (a test's timeout does it too: support_locust.finish)."""
    run_dir = tmp_path / "run"
    (run_dir / "locust").mkdir(parents=True)
    err_path = tmp_path / "stderr"
    with chat_bot("memory") as url, open(err_path, "w") as err_file:
        proc = subprocess.Popen(locust_cmd(url, run_dir, "--script", quick_script(tmp_path), users=2, time_s="10s"),
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err_file, start_new_session=True)
        try:
            wait_until(lambda: any(p.stat().st_size for p in (run_dir / "journal").glob("*.jsonl")), timeout=60,
                       what="turns in the journal")
            proc.send_signal(signal.SIGUSR2)
            try:
                wait_until(lambda: "Greenlets" in err_path.read_text() or proc.poll() is not None, timeout=30,
                           what="the greenlet dump")
            except AssertionError as exc:  # what the run said, to tell a slow dump from a lost signal
                raise AssertionError(f"{exc}; the run's stderr ends: {err_path.read_text()[-2000:]}") from None
            proc.wait(120)
        finally:
            _kill_group(proc)
    err = err_path.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "goldfish: SIGUSR2: every greenlet and thread, with its stack:" in err
    assert "conversation.py" in err  # the users' greenlets, where they were


# ---- shared staging --------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_store_holding_other_runs_and_other_apps_keys_passes(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    client = stack.redis()
    for i in range(40):  # an earlier goldfish run: its sessions, in LangChain's layout
        client.lpush(f"message_store:gf{random.getrandbits(64):016x}", json.dumps(
            {"type": "human", "data": {"content": f"[gf{i:016x}t0] hello"}}))
    client.lpush("message_store:user-42", "x")            # another app's chat history
    client.hset("message_store:settings", "a", "b")       # not a history at all
    client.set("session:abc", "other data")
    run = run_locust(stack.url, tmp_path / "run", "--store-url", stack.state["store_url"],
                     "--script", quick_script(tmp_path), "--settle", "0.5", users=4, time_s="3s", timeout=180)
    assert run.returncode == 0, run.output[-3000:]
    s = summary(run.run_dir)
    assert s["information"]["foreign_keys"]["other_goldfish_runs"] == 40
    assert s["information"]["foreign_keys"]["not_goldfish"] == 2
    assert s["anomalies"] == {} and s["verdict"]["result"] == "pass"
    assert "other goldfish runs" in (run.run_dir / "report.html").read_text()


@pytest.mark.slow
def test_a_wrong_key_template_stops_with_exit_2_naming_the_template_and_the_keys(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=1, mode="correct", think_ms=0, jitter_ms=5)
    run = run_locust(stack.url, tmp_path / "run", "--store-url", stack.state["store_url"],
                     "--key-template", "chat:{session}:history", "--script", quick_script(tmp_path),
                     "--settle", "0.5", users=3, time_s="4s", timeout=180)
    assert run.returncode == 2, run.output[-3000:]
    assert "'chat:{session}:history'" in run.output and "message_store:gf" in run.output
    assert "try --key-template 'message_store:{session}'" in run.output
    assert not (run.run_dir / "audit" / "summary.json").exists()


# ---- a real total loss is loss, a wrong place is a mismatch (oracle, real redis-server) ------------

def world_run(tmp_path, server, key_template="message_store:{session}", db=0, ago: float = 60, sessions: int = 4):
    """A world stored in ``server``, journaled as if acknowledged ``ago`` seconds ago."""
    specs = [[dataclasses.replace(spec, verdict_amnesia=False) for spec in session]
             for session in simple_specs(sessions)]
    world = build_world(specs, start=time.time() - ago, seed=9)  # a bot that remembered every fact
    client = redis.Redis(port=server.port, db=db)
    fill_redis(client, world, key_template)
    run = tmp_path / "run"
    write_journal(run, world.records)
    return run, world


@pytest.mark.parametrize("ttl", [None, 3600])
def test_a_redis_restart_without_persistence_is_reported_as_loss(tmp_path, redis_server, ttl):
    """With a 1-hour TTL on the bot's keys (the sessions written after the restart carry it) the lost sessions were
    'expired', and `--gate expired=off`, meant for a TTL by design, passed a crash that lost them (a LangChain app
    with RedisChatMessageHistory(ttl=3600)): the restarted server had expired no key."""
    run, world = world_run(tmp_path, redis_server)
    now = time.time()
    redis_server.stop()
    time.sleep(1.1)  # the restart must be visibly later than the acknowledgements (uptime counts seconds)
    redis_server.start()
    if ttl:
        redis_server.client().rpush("message_store:written-after-the-restart", "{}")
        redis_server.client().expire("message_store:written-after-the-restart", ttl)
    s = audit_run(run, StoreOptions(url=redis_server.url), gates=parse_gates("strict,expired=off"))
    gone = [f for f in read_findings(run) if f["class"] == "vanished"]
    assert len(gone) == len(world.order) and s["verdict"]["result"] == "fail"
    assert all(f["evidence"]["store_restarted"] for f in gone)
    assert s["information"]["missing_keys"]["restarted_at"] > now - 60
    assert "The Redis server restarted after this session's turns" in gone[0]["explanation"]


def test_a_session_acknowledged_while_redis_was_down_is_explained_as_writes_never_made(tmp_path, redis_server):
    """A bot that swallows store errors answers while Redis is down: the sessions it held then vanish with the
    restart. They were explained as "a restart without (enough) persistence", blaming the store, which never had
    them (a Redis with appendfsync always lost nothing). A session acknowledged before the fault keeps that
    explanation."""
    run, world = world_run(tmp_path, redis_server)
    spans = {}
    for r in world.records:
        first, last = spans.get(r["session"], (float("inf"), float("-inf")))
        spans[r["session"]] = (min(first, r["sent"]), max(last, r["received"] or r["sent"]))
    down, (start, end) = max(spans.items(), key=lambda item: item[1][0])  # the session that began last
    before = [s for s, (first, last) in spans.items() if first < start - 0.01]
    assert before, "every session of the world overlaps the first one: no session to compare with"
    with open(run / "chaos.jsonl", "w") as fh:
        for event, at in (("apply", start - 0.01), ("recover", end + 0.01)):
            fh.write(json.dumps({"fault": "crash#0", "kind": "redis-restart", "target": "redis", "instance": "redis",
                                 "backend": "local", "event": event, "time": at, "outcome": "ok", "error": None,
                                 "params": {"mode": "crash"}}) + "\n")
    redis_server.stop()
    time.sleep(1.1)  # the restart must be visibly later than the acknowledgements (uptime counts seconds)
    redis_server.start()
    audit_run(run, StoreOptions(url=redis_server.url))
    gone = {f["session"]: f for f in read_findings(run) if f["class"] == "vanished"}
    assert gone[down]["evidence"]["store_down"]["kind"] == "redis-restart"
    assert "while the store was down (a redis-restart fault" in gone[down]["explanation"]
    assert "never had it" in gone[down]["explanation"]
    for session in before:
        assert "store_down" not in gone[session]["evidence"]
        assert "The Redis server restarted after this session's turns" in gone[session]["explanation"]



def test_an_unreachable_target_is_exit_2_with_a_store_under_strict_gates(tmp_path, redis_server):
    """Every turn refused: nothing to judge, exit 2 (README). With --store-url the audit ran, and under strict the
    errors gate failed beside 'nothing measured', so the run exited 1, 'a gate failed'."""
    from conftest import free_port

    run = run_locust(f"http://127.0.0.1:{free_port()}", tmp_path / "run", "--store-url", redis_server.url,
                     "--script", quick_script(tmp_path), "--settle", "0", users=2, time_s="2s")
    assert run.returncode == 2, run.output[-3000:]
    assert "nothing measured: no turn was acknowledged by the target" in run.output
    assert run_json(run.run_dir)["exit_code"] == 2

def test_sessions_under_another_template_or_database_are_a_mismatch(tmp_path, redis_server):
    run, world = world_run(tmp_path, redis_server, key_template="bot:{session}:msgs")
    with pytest.raises(TemplateMismatch, match=r"try --key-template 'bot:\{session\}:msgs'"):
        audit_run(run, StoreOptions(url=redis_server.url))
    meta = json.loads((run / "store" / "meta.json").read_text())
    assert not meta["complete"] and "TemplateMismatch" in meta["error"]
    redis_server.client().flushall()
    run, world = world_run(tmp_path, redis_server, db=3)
    with pytest.raises(TemplateMismatch, match="database 3 in --store-url"):
        audit_run(run, StoreOptions(url=redis_server.url))


def test_nothing_anywhere_and_no_restart_is_a_mismatch_not_a_loss(tmp_path, redis_server):
    run, world = world_run(tmp_path, redis_server, ago=-2)  # acknowledged after the server started
    redis_server.client().flushall()  # the store has been up all along and holds none of it
    with pytest.raises(TemplateMismatch, match="nothing explains a loss.*the bot remembered"):
        audit_run(run, StoreOptions(url=f"{redis_server.url}"))
    # the same empty store behind a bot that forgot every fact: it keeps no memory here, a loss
    for r in world.records:
        if r["verdict"] == "pass":
            r["verdict"] = "amnesia"
    write_journal(run, world.records)
    s = audit_run(run, StoreOptions(url=redis_server.url))
    gone = [f for f in read_findings(run) if f["class"] == "vanished"]
    assert len(gone) == len(world.order) and s["verdict"]["result"] == "fail"
    assert "does not keep the conversation in this store" in gone[0]["explanation"]


def test_nothing_anywhere_and_every_failed_probe_after_a_chaos_restart_names_memory_in_the_process(tmp_path,
                                                                                                  redis_server):
    """One replica keeping its memory in its process, killed by chaos: nothing in the store, most probes passed, the
    failed ones all after the kill. The message sent the user to fix the template or --store-url only (LangChain hunt
    16 #5); it names the restart and memory in the process first. A failed probe before the kill keeps the old story."""
    run, world = world_run(tmp_path, redis_server, ago=-2, sessions=24)
    redis_server.client().flushall()
    probes = sorted((r for r in world.records if r["kind"] == "probe" and r["outcome"] == "ok"), key=lambda r: r["sent"])
    late = probes[-2:]
    for r in late:
        r["verdict"] = "amnesia"
    kill = late[0]["sent"] - 0.01
    (run / "chaos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"event": "apply", "time": kill, "fault": "kill-bot", "kind": "kill", "target": "bot", "outcome": "ok"},
        {"event": "recover", "time": kill + 1, "fault": "kill-bot", "kind": "kill", "target": "bot", "outcome": "ok"})))
    write_journal(run, world.records)
    with pytest.raises(TemplateMismatch, match=r"But every failed probe came after chaos's first kill of bot \(at .*none "
                                               r"before it.*memory in its own process.*a bug of the bot\. Nothing was judged"):
        audit_run(run, StoreOptions(url=redis_server.url))

    early = probes[0]
    assert early["received"] // 5 < kill // 5, "the early probe must end in a window before the kill's"
    early["verdict"] = "amnesia"
    write_journal(run, world.records)
    with pytest.raises(TemplateMismatch) as caught:
        audit_run(run, StoreOptions(url=redis_server.url))
    assert "nothing explains a loss" in str(caught.value) and "own process" not in str(caught.value)


def test_nothing_anywhere_and_probes_failing_only_on_another_replica_names_memory_per_process(tmp_path, redis_server):
    """uvicorn --workers 2 with the quick-start `store = {}` behind keep-alive: nothing in the store, few probes failed
    (under the quarter that says 'forgot'), each answered by another replica than its plant's (--replica-header). It
    was told as a wrong template or --store-url only (LangChain hunt 17 #2)."""
    run, world = world_run(tmp_path, redis_server, ago=-2, sessions=24)
    redis_server.client().flushall()
    planted = {r["session"]: r["fact"] for r in world.records if r["kind"] == "plant"}
    for r in world.records:
        r["replica"] = "worker-1"
        if r["kind"] == "probe":  # each probe asks for its session's plant
            r["fact"] = planted[r["session"]]
    probes = [r for r in world.records if r["kind"] == "probe" and r["outcome"] == "ok"]
    for r in probes[:2]:  # these two landed on the other worker, which never saw their plants
        r["replica"], r["verdict"] = "worker-2", "amnesia"
    write_journal(run, world.records)
    with pytest.raises(TemplateMismatch, match=r"But each failed probe was answered by another replica than the one "
                                               r"that took its plant \(2 of those 2 probes failed, none of the "
                                               rf"{len(probes) - 2} answered by the plant's own replica\).*its own process"):
        audit_run(run, StoreOptions(url=redis_server.url))


def test_a_shared_store_s_expiries_before_the_run_explain_no_missing_session(tmp_path, redis_server):
    """A staging Redis that has expired thousands of cache keys in its life: its lifetime expired_keys exceeded the
    missing sessions, so a --store-url pointing at the wrong server judged every session "gone" (FAIL) instead of
    saying where to look (exit 2). What counts is what it expired since the run began (its first telemetry sample)."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    pipe = client.pipeline(transaction=False)
    for i in range(50):
        pipe.set(f"cache:{i}", "v", px=1)
    pipe.execute()
    while int(client.info("stats")["expired_keys"]) < 50:  # reading an expired key expires it
        client.mget([f"cache:{i}" for i in range(50)])
    stats = client.info("stats")
    assert int(stats["expired_keys"]) >= 50 > len(world.order)
    start = min(r["sent"] for r in world.records) - 1
    (run / "telemetry.jsonl").write_text(json.dumps({"time": start, "store": {
        "expired_keys": int(stats["expired_keys"]), "evicted_keys": int(stats["evicted_keys"])}}) + "\n")
    with pytest.raises(TemplateMismatch, match=r"since the run began explains fewer than the missing sessions "
                                              r"\(expired 0\b.*; evicted 0\)"):
        audit_run(run, StoreOptions(url=redis_server.url))


def test_another_apps_keys_expiring_during_the_run_explain_no_missing_session(tmp_path, redis_server):
    """A cache sharing the staging Redis expires keys all through the run (SET ... EX 1), and --store-url points at
    it, not where the bot writes (verdict hunt: wrong_store_shared_expiring_false_fail): the server's expired_keys
    counter rose past the missing sessions, so every session was judged gone, FAIL blaming a bot that remembered
    every fact. No key under the template was seen with a TTL, so its expiries explain none of them: exit 2."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    start = min(r["sent"] for r in world.records) - 1
    (run / "telemetry.jsonl").write_text(json.dumps({"time": start, "store": {"expired_keys": 0, "evicted_keys": 0}})
                                         + "\n")
    for i in range(50):  # during the run (after the first sample): another application's cache
        client.set(f"cache:{i}", "v", px=1)
    while int(client.info("stats")["expired_keys"]) < 50:  # reading an expired key expires it
        client.mget([f"cache:{i}" for i in range(50)])
    assert int(client.info("stats")["expired_keys"]) >= 50 > len(world.order)
    with pytest.raises(TemplateMismatch, match=r"expired \d+, none of them under the template, where no key was "
                                              r"seen with a TTL; evicted 0\).*the bot remembered"):
        audit_run(run, StoreOptions(url=redis_server.url))


def test_a_failed_re_read_keeps_the_earlier_complete_snapshot(tmp_path, redis_server):
    """A nightly run audited (PASS, its store read into store/), then re-audited with --store-url after the store was
    flushed: the re-read found nothing (exit 2) and had already replaced the snapshot with 'exists: false' lines
    marked incomplete, so the run could never be re-audited again and its evidence was gone. A read now replaces
    the snapshot only once complete."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    first = audit_run(run, StoreOptions(url=redis_server.url))
    assert first["anomalies"] == {}
    kept = {p.name: p.read_bytes() for p in (run / "store").iterdir()}
    redis_server.client().flushall()
    with pytest.raises(TemplateMismatch):
        audit_run(run, StoreOptions(url=redis_server.url))
    assert {p.name: p.read_bytes() for p in (run / "store").iterdir()} == kept
    assert not (run / "store.reading").exists()
    assert audit_run(run)["metrics"] == first["metrics"]  # from the snapshot, as before


def test_a_store_read_in_the_wrong_direction_is_a_mismatch_naming_the_right_one(tmp_path, redis_server):
    """A bot that RPUSHes (oldest first) audited with the default --direction lpush: every session exactly reversed,
    a FAIL of 100% 'reordered' with no hint. Every list in exactly the reverse order is the wrong --direction:
    exit 2, naming the one that reads it."""
    run, world = world_run(tmp_path, redis_server, key_template="chat:{session}")
    client = redis_server.client()
    client.flushall()
    for s in world.order:
        world.stored[s] = world.stored[s][::-1]  # LPUSH of the reversed history is an RPUSH of it
    fill_redis(client, world, "chat:{session}")
    with pytest.raises(TemplateMismatch, match="the reverse order of --direction lpush .*pass --direction rpush"):
        audit_run(run, StoreOptions(url=redis_server.url, key_template="chat:{session}"))
    right = audit_run(run, StoreOptions(url=redis_server.url, key_template="chat:{session}", direction="rpush"))
    assert right["anomalies"] == {}


@pytest.mark.parametrize("template, shared", [("message_store:{session}", "message_store:default"),
                                              ("message_store:alice:{session}", "message_store:alice")])
def test_a_bot_that_files_every_conversation_under_one_key_fails_naming_it(tmp_path, redis_server, template, shared):
    """A LangChain app whose session key ignores the conversation (every user in message_store:default): no key of
    the run's sessions, a bot that remembered (it reads everyone's history), so the store 'did not point where the
    bot writes' (exit 2, no verdict) or every session 'vanished'. Their messages are in a key of many sessions:
    judged (FAIL), each gone session naming that key. A per-user factory that drops the conversation id writes
    message_store:alice, the template's prefix alone, which no scan under the template matched (LangChain hunt 17)."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    pipe = client.pipeline(transaction=False)
    for s in world.order:
        for _, message in world.stored[s]:
            pipe.rpush(shared, json.dumps(message))
    pipe.execute()
    summary = audit_run(run, StoreOptions(url=redis_server.url, key_template=template))
    assert summary["verdict"]["result"] == "fail" and summary["anomalies"] == {"vanished": len(world.order)}
    gone = read_findings(run)
    assert {f["evidence"].get("found_in_shared") for f in gone} == {shared}
    assert "one shared key" in gone[0]["explanation"]
    # every user's memory is that key: cross-talk (the gate counted 0: a dashboard on it missed the classic bug),
    # one root cause, and the store lost nothing
    assert {f["cause"] for f in gone} == {"misroute"}
    assert summary["metrics"]["crosstalk"]["count"] == len(world.order)
    rules = {r["gate"]: r for r in summary["verdict"]["rules"]}
    assert rules["crosstalk"]["result"] == "fail" and rules["stored_loss"]["count"] == 0


REFUSALS_ALLOWED = parse_gates("strict,errors=off")  # the worlds' refused turns are no bug here


def _store(client, world, key, entry=json.dumps) -> None:
    """Each session's history (RPUSH, oldest first) under ``key(session)``, each message made by ``entry``."""
    pipe = client.pipeline(transaction=False)
    for s in world.order:
        for _, message in world.stored[s]:
            pipe.rpush(key(s), entry(message))
    pipe.execute()


def test_a_shared_key_is_found_where_the_first_sessions_are_and_names_every_gone_session(tmp_path, redis_server):
    """A one-user smoke run of the shared-key bug: the sessions looked for are the run's first, at the oldest end
    of the shared list, and only its newest 200 entries were read, so nothing was found and a bot that remembered
    got exit 2 ("the template does not point where the bot writes"). Both ends are read now; and every gone
    session names the shared key, not only the sample looked for (the others said "no key holds this run's
    sessions")."""
    run, world = world_run(tmp_path, redis_server, ago=-2, sessions=40)
    client = redis_server.client()
    client.flushall()
    _store(client, world, lambda s: "message_store:default")
    for n in range(300):  # the newest entries: a later conversation's
        client.rpush("message_store:default", json.dumps({"type": "human", "data": {"content": f"[gf{n:016x}t0] hi"}}))
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["verdict"]["result"] == "fail" and summary["anomalies"] == {"vanished": len(world.order)}
    gone = read_findings(run)
    named = [f for f in gone if f["evidence"].get("found_in_shared") == "message_store:default"]
    rest = [f for f in gone if "found_in_shared" not in f["evidence"]]
    assert named and rest and len(named) + len(rest) == len(gone)
    assert all(f["evidence"]["shared_keys"]["keys"] == ["message_store:default"] for f in rest)
    assert all("most likely there too" in f["explanation"] and "memory in a process" not in f["explanation"]
               for f in rest)


def test_keys_named_by_a_hash_of_the_session_id_are_no_verdict_not_a_total_loss(tmp_path, redis_server):
    """A correct LangChain app keying each conversation by uuid5(session id): no key under the template is named
    by a session id, yet each holds one session's history. "A key under the template holding other sessions'
    messages" (shared) made it FAIL with 100% stored_loss. One session's own history under a name no template
    can give is a mismatch: exit 2, naming a key and what to do."""
    import uuid

    run, world = world_run(tmp_path, redis_server, ago=-2, sessions=6)
    client = redis_server.client()
    client.flushall()
    _store(client, world, lambda s: f"message_store:{uuid.uuid5(uuid.NAMESPACE_URL, 'chat/' + s)}")
    with pytest.raises(TemplateMismatch, match="in keys under it named otherwise: session gf.* no template can give"):
        audit_run(run, StoreOptions(url=redis_server.url))


def test_keys_named_by_the_payload_of_a_signed_cookie_are_found_under_the_ids_the_bot_issued(tmp_path, redis_server):
    """--session-from a signed cookie (itsdangerous: payload.signature) and the bot keys by the payload: the store was
    read under the whole cookie, and the keys under the template holding each session's messages were never found,
    as the gone sessions were named by the bot's ids and the messages carry the journal's (LangChain hunt 17 #4)."""
    import uuid

    run, world = world_run(tmp_path, redis_server, ago=-2, sessions=6)
    payload = {s: str(uuid.uuid5(uuid.NAMESPACE_URL, s)) for s in world.order}
    for r in world.records:
        r["bot_session"] = f"{payload[r['session']]}.c2lnbmF0dXJl"  # the cookie: the payload and a signature
    write_journal(run, world.records)
    client = redis_server.client()
    client.flushall()
    _store(client, world, lambda s: f"message_store:{payload[s]}")
    with pytest.raises(TemplateMismatch, match=r"in keys under it named otherwise: session gf.*The id the bot issued "
                                               r"for it \(--session-from\) is '[0-9a-f-]+\.c2lnbmF0dXJl'"):
        audit_run(run, StoreOptions(url=redis_server.url))


def test_langchain_chat_messages_are_read_by_their_role(tmp_path, redis_server):
    """LangChain's ChatMessage(role="user") is stored as {"type": "chat", "data": {"role": "user", ...}}: every user
    entry was of role "chat", and a correct app FAILed with 100% stored_loss."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()

    def chat_message(message: dict) -> str:
        role = {"human": "user", "ai": "assistant"}[message["type"]]
        return json.dumps({"type": "chat", "data": {**message["data"], "type": "chat", "role": role}})

    _store(client, world, lambda s: f"message_store:{s}", chat_message)
    summary = audit_run(run, StoreOptions(url=redis_server.url, direction="rpush"), gates=REFUSALS_ALLOWED)
    assert summary["anomalies"] == {} and summary["verdict"]["result"] == "pass", summary["verdict"]["failed"]


def test_messages_stored_under_their_langchain_class_names_are_read_by_default(tmp_path, redis_server):
    """A hand-written history that stores ``type(message).__name__`` ("HumanMessage", "AIMessage") as the role:
    LangChain's own names for its messages, read as the user's and the assistant's without --user-role (the audit
    stopped, naming the roles, or judged every turn lost)."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    classes = {"human": "HumanMessage", "ai": "AIMessage"}
    _store(client, world, lambda s: f"message_store:{s}", lambda m: json.dumps({**m, "type": classes[m["type"]]}))
    summary = audit_run(run, StoreOptions(url=redis_server.url, direction="rpush"), gates=REFUSALS_ALLOWED)
    assert summary["anomalies"] == {} and summary["verdict"]["result"] == "pass", summary["verdict"]["failed"]


def test_user_messages_stored_under_a_role_the_options_do_not_name_are_no_verdict(tmp_path, redis_server):
    """A bot storing its users' messages with role "customer": no user entry anywhere, every turn "lost" (a correct
    bot FAILed). Every session's tokens sit in entries of a role that is neither user nor assistant: exit 2 naming
    the role and the option; with --user-role customer the same store PASSes."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    customer = lambda m: json.dumps({**m, "type": "customer"} if m["type"] == "human" else m)  # noqa: E731
    _store(client, world, lambda s: f"message_store:{s}", customer)
    with pytest.raises(TemplateMismatch, match="in entries of role 'customer'.*--user-role"):
        audit_run(run, StoreOptions(url=redis_server.url, direction="rpush"))
    fixed = audit_run(run, StoreOptions(url=redis_server.url, direction="rpush", user_roles=("customer",)),
                      gates=REFUSALS_ALLOWED)
    assert fixed["anomalies"] == {} and fixed["verdict"]["result"] == "pass", fixed["verdict"]["failed"]


def test_ids_the_bot_issued_are_found_under_another_key_name(tmp_path, redis_server):
    """With --session-from the store keys hold the bot's own ids ("c3"), which the search for misplaced keys never
    looked for (it matched goldfish ids only): 'looked at 0 keys', and no --key-template to try."""
    import shutil

    run, world = world_run(tmp_path, redis_server)
    issued = {s: f"c{i}" for i, s in enumerate(world.order, 1)}
    for r in world.records:
        r["bot_session"] = issued[r["session"]]
    shutil.rmtree(run / "journal")
    write_journal(run, world.records)
    client = redis_server.client()
    client.flushall()
    fill_redis(client, world, "alias:{session}")
    for s, c in issued.items():
        client.rename(f"alias:{s}", f"alias:{c}")
    client.set("alias:c12", "another conversation, not this run's c1")
    with pytest.raises(TemplateMismatch, match="try --key-template 'alias:\\{session\\}'"):
        audit_run(run, StoreOptions(url=redis_server.url), gates=REFUSALS_ALLOWED)


def test_sessions_sharded_over_databases_are_exit_2_not_vanished(tmp_path, redis_server):
    """A bot sharding its sessions over databases 0 and 1 (crc32 of the id), each under the same template: the
    audit of database 0 FAILed every session of database 1 as vanished, a correct bot blamed on the store."""
    run, world = world_run(tmp_path, redis_server, sessions=6)
    client = redis_server.client()
    for s in world.order[::2]:
        assert client.move(f"message_store:{s}", 1)
    with pytest.raises(TemplateMismatch, match="3 acknowledged session\\(s\\) have no key .* every one of the 3 "
                       "looked for is under that same template in database 1: the bot splits its sessions over "
                       "databases"):
        audit_run(run, StoreOptions(url=redis_server.url), gates=REFUSALS_ALLOWED)


def test_role_options_the_other_way_round_are_exit_2_saying_so(tmp_path, redis_server):
    """--user-role ai --assistant-role human on a LangChain store whose replies quote the message: every turn was
    judged 'stored without its reply' or lost, a FAIL blaming the bot for the options."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    said = [""]

    def quoting(m: dict) -> str:  # refbot's reply: "You said: [gf...] ..."
        if m["type"] == "human":
            said[0] = m["data"]["content"]
            return json.dumps(m)
        return json.dumps({**m, "data": {**m["data"], "content": "You said: " + said[0]}})

    _store(client, world, lambda s: f"message_store:{s}", quoting)
    swapped = StoreOptions(url=redis_server.url, direction="rpush", user_roles=("ai",), assistant_roles=("human",))
    with pytest.raises(TemplateMismatch, match="the roles read as the user's \\(ai\\) and the assistant's \\(human\\) "
                       "are the other way round.*swap --user-role and --assistant-role"):
        audit_run(run, swapped)


def _tokenless(message: dict) -> str:
    text = message["data"]["content"]
    return json.dumps({**message, "data": {**message["data"], "content": text.split("] ", 1)[-1]}})


def _msgpack_like(message: dict) -> bytes:
    return b"\x82\xa4type" + message["type"].encode() + b"\xa7content\xc4" + message["data"]["content"].encode()


def _forgetting(run, world) -> None:
    """The journal of a bot that could not read its pickles back (pickle drift: a new release loads an empty
    history): every answered probe failed. A bot that read them back (its probes pass) is exit 2, --reader."""
    import shutil

    for r in world.records:
        if r["kind"] == "probe" and r["outcome"] == "ok":
            r["verdict"] = "amnesia"
    shutil.rmtree(run / "journal")
    write_journal(run, world.records)


def _pickled(message: dict) -> bytes:
    import pickle

    return pickle.dumps(message, protocol=4)


def test_a_history_pickled_into_one_string_is_corrupt_not_lost(tmp_path, redis_server):
    """A bot that pickles its whole history into one Redis string (which loads as empty after a deploy): one
    corrupt entry holding every turn, tied to them by the tokens inside its bytes. It FAILed as every turn lost
    plus a corrupt entry, so the stored_loss gate and the explanation blamed the store for a format bug."""
    import pickle

    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    for s in world.order:
        client.set(f"message_store:{s}", pickle.dumps([message for _, message in world.stored[s]], protocol=4))
    _forgetting(run, world)
    summary = audit_run(run, StoreOptions(url=redis_server.url, format="blob"), gates=REFUSALS_ALLOWED)
    assert summary["verdict"]["result"] == "fail" and summary["anomalies"] == {"corrupt": len(world.order)}
    corrupt = [f for f in read_findings(run) if f["class"] == "corrupt"]
    assert all("pickle" in f["evidence"]["reason"] and "the tokens of " in f["evidence"]["tied_by"] for f in corrupt)
    assert summary["metrics"]["stored_loss"]["count"] == 0


@pytest.mark.parametrize("store, match", [
    ("tokenless", "none of the 4 sessions with user entries holds one that carries a token"),
    ("msgpack", "not one entry of the 4 sessions with stored entries decodes as JSON"),
    ("blob newest first", "JSON blobs with two or more stored turns lists them newest first")])
def test_a_store_the_audit_cannot_read_is_no_verdict_not_a_total_loss(store, match, tmp_path, redis_server):
    """Correct bots that FAILed with 100% lost, corrupt or reordered: one strips the [gf...tN] tag before storing,
    one stores msgpack, one keeps a JSON blob newest first (--direction is a list's). Every session so: the
    audit cannot read this store (exit 2, saying why), which is no bug found in the bot."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    if store == "blob newest first":
        for s in world.order:
            client.set(f"message_store:{s}", json.dumps([m for _, m in world.stored[s]][::-1]))
    else:
        _store(client, world, lambda s: f"message_store:{s}", {"tokenless": _tokenless, "msgpack": _msgpack_like}[store])
    with pytest.raises(TemplateMismatch, match=match):
        audit_run(run, StoreOptions(url=redis_server.url, direction="rpush"))


def test_pickled_histories_stay_corrupt_findings(tmp_path, redis_server):
    """Pickled histories (that load as empty after a deploy) are a bug goldfish catches, not another format."""
    run, world = world_run(tmp_path, redis_server, ago=-2)
    client = redis_server.client()
    client.flushall()
    _store(client, world, lambda s: f"message_store:{s}", _pickled)
    _forgetting(run, world)
    summary = audit_run(run, StoreOptions(url=redis_server.url, direction="rpush"), gates=REFUSALS_ALLOWED)
    assert summary["verdict"]["result"] == "fail" and summary["anomalies"]["corrupt"] > 0


@pytest.mark.parametrize("ago, late", [(8, True), (120, False)])  # its last turn: 3.6 s or 2 min before
def test_a_loss_acknowledged_just_before_the_read_says_it_may_be_a_write_not_made_yet(ago, late, tmp_path,
                                                                                        redis_server):
    """A write-behind bot writes a turn seconds after it replies: read too soon, the turn is "lost", explained as
    "the store lost an acknowledged write". A loss acknowledged within seconds of the read says it may be a
    write not made yet, and that a longer --settle tells the two apart; an old loss does not."""
    run, world = world_run(tmp_path, redis_server, ago=ago)
    client = redis_server.client()
    session = world.order[0]
    client.lpop(f"message_store:{session}")  # its newest entry: its last turn's reply
    client.lpop(f"message_store:{session}")  # and the user entry of that turn
    audit_run(run, StoreOptions(url=redis_server.url), gates=REFUSALS_ALLOWED)
    (lost,) = [f for f in read_findings(run) if f["class"] == "lost"]
    assert ("read_after_s" in lost["evidence"]) == late
    assert ("a longer --settle tells the two apart" in lost["explanation"]) == late, lost["explanation"]


def test_a_mismatch_still_fails_on_what_the_clients_saw(tmp_path, redis_server, capsys):
    """Memory kept in the bot's processes, behind keep-alive connections that stick each user to one of them:
    the store holds nothing, and only some recall probes failed (under the quarter that says "forgot"), so the
    store cannot be judged (a mismatch, exit 2). The failed probes are a bug found all the same: oracle audit
    exits 1 on the journal's verdict. The mismatch counts every missing session, not the sample it looked at."""
    from oracle.audit_cli import main

    run, world = world_run(tmp_path, redis_server, ago=-2, sessions=24)
    redis_server.client().flushall()
    url, lenient = ["--store-url", redis_server.url], ["--gate", "errors=off"]  # its refused turns are no bug here
    assert main([str(run), *url, *lenient]) == 2
    assert "none of the 24 acknowledged sessions" in capsys.readouterr().err
    probe = next(r for r in world.records if r["kind"] == "probe" and r["outcome"] == "ok")
    probe["verdict"] = "amnesia"  # 1 of 24 probes: the bot remembered most, so the mismatch still stands
    write_journal(run, world.records)
    assert main([str(run), *url, *lenient]) == 1
    captured = capsys.readouterr()
    assert "none of the 24 acknowledged sessions" in captured.err
    assert "verdict from the journal alone (the store was not judged): FAIL" in captured.out
    assert "probe_amnesia" in captured.out


def test_a_bot_whose_memory_is_not_in_the_store_and_forgets_some_fails_the_run(tmp_path, redis_server):
    """The field's first failure, behind keep-alive connections: memory in the bot's process, and only some
    conversations forgotten. The store holds nothing of the run and most probes passed, so the store is not
    judged (a wrong place, exit 2 before); the failed probes still fail the run: exit 1, the journal's verdict."""
    redis_server.client().flushall()
    with chat_bot("lapse") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--store-url", redis_server.url,
                         "--settle", "0", "--gate", "errors=off", time_s="3s")
    probes = [r for r in run.records() if r["kind"] == "probe" and r["outcome"] == "ok"]
    failed = sum(r["verdict"] == "amnesia" for r in probes)
    assert 0 < failed < len(probes) / 4, (failed, len(probes))  # a bot that mostly remembered
    assert run.returncode == 1, run.output[-3000:]
    assert "nothing explains a loss" in run.output
    assert "verdict FAIL (online, from the journal: the store could not be judged" in run.output
    assert "the store was not judged: see above" in run.output


def test_oracle_audit_of_a_run_whose_users_raised_exceptions_is_not_trusted(tmp_path, redis_server, capsys):
    """run.json's user_exceptions: exit 3 when every gate holds. A run.json that cannot be read (damaged, a
    FIFO) cannot tell whether they did: exit 2 naming it, never a plain PASS (and never a hang)."""
    from oracle.audit_cli import main

    run, world = world_run(tmp_path, redis_server)
    args = [str(run), "--store-url", redis_server.url, "--gate", "errors=off"]  # its refused turns are no bug
    assert main(args) == 0
    (run / "run.json").write_text(json.dumps({"run": RUN, "user_exceptions": {"count": 2, "first": "KeyError"}}))
    capsys.readouterr()
    assert main(args) == 3
    assert "NOT TRUSTED — Locust users raised 2 exception(s)" in capsys.readouterr().out
    for damage in (b'{"run": RUN, "user_exceptions": {"count": 2', b'{"user_exceptions": [3]}'):
        (run / "run.json").write_bytes(damage)
        assert main(args) in (2, 3), damage
        captured = capsys.readouterr()
        last = captured.out.splitlines()[-1]
        assert "run.json" in last and last.startswith(("NO VERDICT", "NOT TRUSTED")), last
    (run / "run.json").unlink()
    os.mkfifo(run / "run.json")
    assert main(args) == 2
    assert "not a regular file but a FIFO" in capsys.readouterr().out


def test_oracle_audit_of_a_run_that_never_ended_before_its_journal_was_whole_is_not_trusted(tmp_path, redis_server,
                                                                                              capsys):
    """A run whose journal hit a full disk said NO VERDICT and could not record its end (run.json: phase load, no
    end); once the space was freed, an audit PASSed the part of the journal written. A run that stopped in its load
    or heal phase (killed, or a full disk) is not trusted: exit 3, and the report says so; one that ended is."""
    from oracle.audit_cli import main
    from oracle.report import main as report

    run, world = world_run(tmp_path, redis_server)
    args = [str(run), "--store-url", redis_server.url, "--gate", "errors=off"]
    for phase, code in (("load", 3), ("heal", 3), ("audit", 0)):
        (run / "run.json").write_text(json.dumps({"run": RUN, "start": 1.7e9, "phase": phase}))
        capsys.readouterr()
        assert main(args) == code, phase
        out = capsys.readouterr().out
        assert ("NOT TRUSTED — run.json records no end" in out) == (code == 3), out[-600:]
    (run / "run.json").write_text(json.dumps({"run": RUN, "start": 1.7e9, "phase": "load"}))
    assert report([str(run)]) == 0  # the report renders; its badge says it
    assert "run.json records no end" in capsys.readouterr().out
    assert "NOT TRUSTED" in (run / "report.html").read_text()
    (run / "run.json").write_text(json.dumps({"run": RUN, "start": 1.7e9, "end": 1.7e9 + 60, "phase": "load",
                                              "exit_code": 130}))  # a Ctrl-C in the load records its end
    assert main(args) == 0


def test_a_bot_that_hangs_on_every_probe_never_passes(tmp_path):
    """Every probe's reply dribbles a byte at a time and never ends, so the socket's timeout never fires: no
    probe is answered, and the stop cut them short. Nothing was measured of memory: FAIL, exit 1 (it passed:
    "0 failed recall probes of 0 answered"). A turn in flight past --timeout when the test stops is a hang,
    counted as a failed request, not a turn the stop interrupted."""
    with chat_bot("hangprobe") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--timeout", "1",
                         "--settle", "0", "--gate", "errors=off", time_s="4s")  # the probe rule alone fails it
    assert run.returncode == 1, run.output[-3000:]
    assert "recall probe(s) were sent and none was answered" in run.output
    probes = [r for r in run.records() if r["kind"] == "probe"]
    assert probes and not any(r["outcome"] == "ok" for r in probes)
    hung = [r for r in probes if (r["error"] or "").startswith("no complete reply within --timeout 1s")]
    assert hung, [r["error"] for r in probes]


def test_a_redirect_that_cannot_be_followed_is_a_failed_turn_not_an_exception(tmp_path):
    """Probes answered with 307 to 'http://[bad/x': Locust's session raises that ValueError into the user (exit 3,
    a traceback per probe, the turns never journaled). It is the bot's bug: a failed request, exit 1."""
    with chat_bot("badredirect") as url:
        run = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--settle", "0", time_s="3s")
    assert run.returncode == 1, run.output[-3000:]
    assert "Traceback" not in run.output
    probes = [r for r in run.records() if r["kind"] == "probe" and not r["error"].startswith("interrupted")]
    assert probes and all(r["error"].startswith("a redirect that cannot be followed") for r in probes), probes[:2]



def test_keys_named_by_goldfish_s_own_conversation_id_beside_an_issued_login_token(tmp_path, redis_server, capsys):
    """A bot that issues a login token (--session-from reply:access_token) but keys each history by the
    conversation id goldfish sends in the body ({conversation}) could not be audited: --key-template
    'chat:{conversation}' was refused and the default looked for the tokens' keys (API hunt 18). The template
    now names goldfish's own ids, live, offline from the snapshot and in the re-audit command of the meta."""
    import shutil

    from support_oracle import oracle_main

    run, world = world_run(tmp_path, redis_server, key_template="chat:{session}")
    for r in world.records:
        r["bot_session"] = f"tok-{r['session'][-6:]}"  # the login token the bot issued
    shutil.rmtree(run / "journal")
    write_journal(run, world.records)
    with pytest.raises(TemplateMismatch, match="under goldfish's own ids of the conversations: .* pass "
                       "--key-template 'chat:\\{conversation\\}'"):
        audit_run(run, StoreOptions(url=redis_server.url, key_template="chat:{session}"), gates=REFUSALS_ALLOWED)
    code, out, err = oracle_main(capsys, "audit", run, "--store-url", redis_server.url, "--key-template",
                                 "chat:{conversation}", "--gate", "strict,errors=off")
    assert code == 0 and "PASS" in out, out + err
    meta = json.loads((run / "store" / "meta.json").read_text())
    assert meta["key_template"] == "chat:{conversation}", meta
    code, out, err = oracle_main(capsys, "audit", run, "--gate", "strict,errors=off")  # offline, from the snapshot
    assert code == 0 and "PASS" in out, out + err
    code, _, err = oracle_main(capsys, "audit", run, "--store-url", redis_server.url, "--key-template", "chat:{id}")
    assert code == 2 and "must contain {session} (or {conversation}" in err, err
