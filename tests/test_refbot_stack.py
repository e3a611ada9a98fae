"""The embedded stack through its real CLI: up, kill a replica, HAProxy routes around it,
status, restart from the state file, down, and every bad-input case."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter

import pytest

from conftest import wait_until
from targets import registry as state
from support_refbot import REPO, new_session, processes_mentioning, refbot_cli, refbot_stack  # noqa: F401


def test_killed_replica_is_routed_around_shown_down_and_restarted_on_its_port(refbot_stack):
    stack = refbot_stack(replicas=3, think_ms=0, jitter_ms=0)
    assert refbot_cli("status", "--state-dir", stack.dir).returncode == 0
    s = new_session()
    seen = Counter(stack.chat(s, "hello").headers["X-Refbot-Replica"] for _ in range(9))
    assert set(seen) == {"bot-1", "bot-2", "bot-3"}  # round-robin, no stickiness: one session, every replica

    victim = stack.member("bot-2")
    stack.kill("bot-2")
    wait_until(lambda: stack.lb_status()["bot-2"].startswith("DOWN"), timeout=10, what="HAProxy to mark bot-2 DOWN")
    after = [stack.chat(new_session(), "hello") for _ in range(12)]
    assert [r.status_code for r in after] == [200] * 12
    assert {r.headers["X-Refbot-Replica"] for r in after} == {"bot-1", "bot-3"}

    result = refbot_cli("status", "--state-dir", stack.dir)
    assert result.returncode == 1
    line = next(line for line in result.stdout.splitlines() if line.startswith("bot-2"))
    assert " down " in line and str(victim["pid"]) in line
    assert "down: bot-2" in result.stderr

    restarted = stack.restart("bot-2")
    assert restarted["port"] == victim["port"] and restarted["pid"] != victim["pid"]
    assert state.load(stack.dir)["members"]["bot-2"]["pid"] == restarted["pid"]  # recorded in the state file
    wait_until(lambda: stack.lb_status()["bot-2"].startswith("UP"), timeout=10, what="HAProxy to mark bot-2 UP")
    assert refbot_cli("status", "--state-dir", stack.dir).returncode == 0
    seen = {stack.chat(new_session(), "hello").headers["X-Refbot-Replica"] for _ in range(6)}
    assert seen == {"bot-1", "bot-2", "bot-3"}


def test_up_twice_says_so_and_touches_nothing(refbot_stack):
    stack = refbot_stack(replicas=1, think_ms=0)
    before = (stack.dir / "state.json").read_bytes()
    result = refbot_cli("up", "--state-dir", stack.dir, "--replicas", "1")
    assert result.returncode == 1
    assert "already up" in result.stderr and "refbot down" in result.stderr
    assert (stack.dir / "state.json").read_bytes() == before
    assert all(state.member_alive(m) for m in stack.state["members"].values())


def test_down_stops_exactly_what_up_started(tmp_path):
    state_dir = tmp_path / "s"
    up = refbot_cli("up", "--state-dir", state_dir, "--replicas", "2", "--think-ms", "0", "--timeout", "90")
    try:
        assert up.returncode == 0, up.stderr
        pids = [m["pid"] for m in state.load(state_dir)["members"].values()]
        assert all(state.pid_alive(p) for p in pids)
        down = refbot_cli("down", "--state-dir", state_dir)
        assert down.returncode == 0 and "stopped haproxy, bot-1, bot-2, redis" in down.stdout
        assert not any(state.pid_alive(p) for p in pids)
        assert not (state_dir / "state.json").exists()
        assert processes_mentioning(str(state_dir)) == []
    finally:
        refbot_cli("down", "--state-dir", state_dir)


def test_down_and_status_with_nothing_up(tmp_path):
    down = refbot_cli("down", "--state-dir", tmp_path / "none")
    assert down.returncode == 0 and "nothing is up" in down.stdout
    status = refbot_cli("status", "--state-dir", tmp_path / "none")
    assert status.returncode == 3 and "nothing is up" in status.stderr


def assert_nothing_started(state_dir):
    assert not (state_dir / "state.json").exists()
    assert processes_mentioning(str(state_dir)) == []


@pytest.mark.parametrize("flags, exit_code, words", [
    (["--mode", "forgetful"], 2, ["unknown memory mode 'forgetful'", "shared-instance", "window:N"]),
    (["--mode", "window:0"], 2, ["at least 1"]),
    (["--persistence", "sometimes"], 2, ["unknown --persistence", "aof-always"]),
    (["--replicas", "2", "--releases", "v1,v2,v3"], 2, ["3 releases for 2 replicas"]),
])
def test_bad_options_are_refused_before_anything_starts(tmp_path, flags, exit_code, words):
    state_dir = tmp_path / "s"
    result = refbot_cli("up", "--state-dir", state_dir, *flags)
    assert result.returncode == exit_code, result.stderr
    assert all(w in result.stderr for w in words), result.stderr
    assert_nothing_started(state_dir)


def test_port_in_use_is_refused_naming_the_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for flag in ("--port", "--redis-port"):
            result = refbot_cli("up", "--state-dir", tmp_path / "s", flag, port)
            assert result.returncode == 2  # a refused option value, as the others (was 1: hunt-input13 m14)
            assert f"{flag} {port}" in result.stderr and "already in use" in result.stderr
    assert_nothing_started(tmp_path / "s")


def test_missing_redis_server_names_the_apt_package(tmp_path):
    # A PATH without /usr/bin (where redis-server lives): a real missing binary, not a mock.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    result = refbot_cli("up", "--state-dir", tmp_path / "s", env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert "redis-server not found" in result.stderr and "apt-get install redis-server" in result.stderr
    assert_nothing_started(tmp_path / "s")


def test_missing_haproxy_names_the_apt_package(tmp_path):
    result = refbot_cli("up", "--state-dir", tmp_path / "s", env={"REFBOT_HAPROXY": str(tmp_path / "no-haproxy")})
    assert result.returncode == 1
    assert "no-haproxy not found" in result.stderr and "apt-get install haproxy" in result.stderr
    assert_nothing_started(tmp_path / "s")


def test_serve_rejects_an_unknown_mode(tmp_path):
    result = refbot_cli("serve", "--mode", "goldfish", "--port", "1")
    assert result.returncode == 2 and "unknown memory mode 'goldfish'" in result.stderr
    result = refbot_cli("serve", "--mode", "window:", "--port", "1", timeout=30)  # was served as window:3
    assert result.returncode == 2 and "--mode 'window:': nothing follows ':'" in result.stderr


def test_a_member_that_fails_to_start_leaves_nothing_running(tmp_path):
    """A replica that cannot start (its port was taken after `up` chose it) fails `up` cleanly.

    Forced here with a 0.3 s health timeout, far shorter than a replica's start-up."""
    state_dir = tmp_path / "s"
    result = refbot_cli("up", "--state-dir", state_dir, "--replicas", "2", "--timeout", "0.3")
    assert result.returncode == 1
    assert "not healthy after" in result.stderr or "exited while starting" in result.stderr
    wait_until(lambda: processes_mentioning(str(state_dir)) == [], timeout=20, what="no member left running")
    assert not (state_dir / "state.json").exists()


def test_ctrl_c_during_up_leaves_nothing_running(tmp_path):
    state_dir = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-m", "refbot", "up", "--state-dir", str(state_dir), "--replicas", "2"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (state_dir / "state.json").exists(), timeout=60, what="up to record its first member")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "interrupted" in err
    finally:
        if proc.poll() is None:
            proc.kill()
        refbot_cli("down", "--state-dir", state_dir)
    wait_until(lambda: processes_mentioning(str(state_dir)) == [], timeout=20, what="no member left running")
    assert not (state_dir / "state.json").exists()


def test_demo_plants_and_probes_through_haproxy_and_always_takes_the_stack_down(tmp_path):
    state_dir = tmp_path / "demo"
    result = refbot_cli("demo", "--state-dir", state_dir, "--replicas", "2", "--think-ms", "0", timeout=240)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("REMEMBERED") == 2 and "stack down" in result.stdout
    assert_nothing_started(state_dir)

    buggy = refbot_cli("demo", "--state-dir", state_dir, "--replicas", "2", "--think-ms", "0",
                       "--mode", "fresh-per-request", timeout=240)
    assert buggy.returncode == 0 and buggy.stdout.count("AMNESIA") == 2
    assert_nothing_started(state_dir)


def test_state_file_matches_the_contract_with_mixed_releases(refbot_stack):
    stack = refbot_stack(replicas=3, releases="v1,v1,v2", mode="window:4", persistence="aof-always", think_ms=0)
    health = {b: stack.http.get(f"{stack.base(b)}/healthz").json() for b in stack.bots}
    assert {b: h["release"] for b, h in health.items()} == {"bot-1": "v1", "bot-2": "v1", "bot-3": "v2"}
    assert all(h["mode"] == "window:4" and h["replica"] == b and h["pid"] == stack.member(b)["pid"]
               for b, h in health.items())
    status = refbot_cli("status", "--state-dir", stack.dir).stdout
    assert "v2" in next(line for line in status.splitlines() if line.startswith("bot-3"))

    st = json.loads((stack.dir / "state.json").read_text())
    assert st["version"] == 1 and st["dir"] == str(stack.dir.absolute())
    assert st["url"].startswith("http://127.0.0.1:") and st["store_url"].startswith("redis://127.0.0.1:")
    assert os.path.exists(st["haproxy_socket"])
    roles = {name: m["role"] for name, m in st["members"].items()}
    assert roles == {"redis": "redis", "bot-1": "bot", "bot-2": "bot", "bot-3": "bot", "haproxy": "lb"}
    for name, m in st["members"].items():
        assert {"pid", "port", "cmd", "env", "cwd", "log", "health"} <= set(m), name
        assert state.check_health(m), name
    assert st["members"]["redis"]["persistence"] == "aof-always"
    assert st["members"]["bot-1"]["lb_server"] == "bots/bot-1"
    assert st["members"]["bot-3"]["env"]["REFBOT_RELEASE"] == "v2"
    assert st["members"]["haproxy"]["health"] == {"tcp": ["127.0.0.1", st["members"]["haproxy"]["port"]]}
    # The runtime API is at admin level: a fault can put a server into maintenance and back.
    from targets import haproxy
    haproxy.command(st["haproxy_socket"], "set server bots/bot-1 state maint")
    assert stack.lb_status()["bot-1"] == "MAINT"
    assert {stack.chat(new_session(), "hi").headers["X-Refbot-Replica"] for _ in range(6)} == {"bot-2", "bot-3"}
    haproxy.command(st["haproxy_socket"], "set server bots/bot-1 state ready")
    wait_until(lambda: stack.lb_status()["bot-1"].startswith("UP"), timeout=10, what="bot-1 back UP")


def test_ctrl_c_landing_inside_popen_still_records_and_saves_the_child(tmp_path, monkeypatch):
    """The race behind a flaky `up` interrupt: Ctrl-C inside Popen (child forked, pid not yet
    returned) used to raise with the child unrecorded, so nothing ever stopped it. Popen is
    wrapped only to deliver a real SIGINT at that moment; the child is a real process."""
    real_popen, started = subprocess.Popen, []

    def popen_then_ctrl_c(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        signal.raise_signal(signal.SIGINT)  # handled right here, before Popen returns
        return started[-1]

    member = {"cmd": [sys.executable, "-c", "import time; time.sleep(60)"], "cwd": str(tmp_path),
              "log": str(tmp_path / "m.log"), "pid": None}
    state.save({"version": 1, "dir": str(tmp_path), "members": {"m": member}}, tmp_path)
    monkeypatch.setattr(subprocess, "Popen", popen_then_ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            with state.locked_state(tmp_path) as st:
                state.start_member(st["members"]["m"])
        recorded = state.load(tmp_path)["members"]["m"]
        assert recorded["pid"] == started[0].pid and state.member_alive(recorded)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler given back
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def test_locked_state_serialises_updates(tmp_path):
    """Two writers under locked_state never lose each other's update (plain files, no servers)."""
    state.save({"version": 1, "dir": str(tmp_path), "members": {}, "n": 0}, tmp_path)
    code = ("import sys; from targets import registry as state\n"
            "for _ in range(50):\n"
            "    with state.locked_state(sys.argv[1]) as st: st['n'] += 1\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=REPO) for _ in range(3)]
    assert [p.wait(60) for p in procs] == [0, 0, 0]
    assert state.load(tmp_path)["n"] == 150
    with pytest.raises(state.StateError, match="nothing is up"):
        with state.locked_state(tmp_path / "empty"):
            pass
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "state.json").write_text("{torn")
    with pytest.raises(state.StateError, match="not valid JSON"):
        state.load(tmp_path / "bad")


@pytest.mark.parametrize("lb_retries", [0, 2])
def test_generated_haproxy_config_is_valid_and_does_not_hide_failures_by_default(tmp_path, lb_retries):
    from refbot import haproxy
    config = haproxy.render_config(8080, {"bot-1": 8081, "bot-2": 8082}, tmp_path / "h.sock", lb_retries)
    (tmp_path / "h.cfg").write_text(config)
    check = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "h.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"retries {lb_retries}" in config
    assert ("option redispatch" in config) == bool(lb_retries)
    assert "balance roundrobin" in config and "cookie" not in config and "level admin" in config


def test_haproxy_socket_path_stays_short_enough_for_a_unix_socket(tmp_path):
    from refbot import haproxy
    assert haproxy.socket_path(tmp_path / "s") == tmp_path / "s" / "haproxy.sock"
    deep = tmp_path / ("d" * 120)
    path = haproxy.socket_path(deep)
    assert len(str(path)) < 100 and path != haproxy.socket_path(tmp_path / ("e" * 120))
