"""A member is its pid *and* its start time: a recorded pid that another process took is never signalled.

The bug (issue #16, item 6): the guard only checked that the member's program name ("python") was in
the command line, so chaos SIGKILLed an unrelated ``python3 -c sleep`` that had taken a recorded pid.
The kernel's choice of pid cannot be forced without privileges, so the tests hand the dead member's
record the pid of a live stranger: exactly what the state file says after the pid is reused.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from chaos.backends.local import LocalBackend
from chaos.controller import Controller
from chaos.plan import parse_plan
from conftest import free_port
from support_chaos import read_timeline
from targets import registry


@pytest.fixture
def app_member(tmp_path):
    """A real member (python's http.server) started through the registry, stopped at the end."""
    port = free_port()
    member = {"name": "app", "role": "app", "pid": None,
              "cmd": [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
              "env": {}, "cwd": str(tmp_path), "log": str(tmp_path / "app.log"),
              "health": {"http": f"http://127.0.0.1:{port}/"}}
    registry.save({"version": 1, "dir": str(tmp_path), "members": {"app": member}}, tmp_path)
    with registry.locked_state(tmp_path) as st:
        registry.start_member(st["members"]["app"])
    registry.wait_healthy(registry.load(tmp_path)["members"]["app"], timeout=30)
    yield tmp_path
    registry.stop_member(registry.load(tmp_path)["members"]["app"], signal.SIGKILL)


@pytest.fixture
def stranger():
    """An unrelated python process, in its own session like a member (so a group kill would reach it)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def reuse_pid(state_dir, name: str, pid: int) -> None:
    """The member dies and the kernel hands its pid to ``pid``: kill it, then point its record there."""
    with registry.locked_state(state_dir) as st:
        member = st["members"][name]
        registry.stop_member(member, signal.SIGKILL)
        member["pid"] = pid


def test_start_records_the_pid_and_its_start_time(app_member):
    member = registry.load(app_member)["members"]["app"]
    assert member["pid_start"] == registry.start_ticks(member["pid"]) > 0
    assert registry.member_alive(member)


def test_chaos_refuses_a_recorded_pid_that_another_process_took(app_member, stranger, tmp_path):
    reuse_pid(app_member, "app", stranger.pid)
    plan = parse_plan(textwrap.dedent("faults:\n  - {kind: kill, target: app, at: 0s}\n"), "kill.yaml")
    ctl = Controller(plan, LocalBackend(str(app_member), health_timeout=30), tmp_path / "run").start()
    assert ctl.wait(60)
    assert stranger.poll() is None, "chaos signalled a process that is not the member"
    (apply,) = read_timeline(tmp_path / "run")
    assert apply["outcome"] == "error"
    assert f"pid {stranger.pid} is no longer app" in apply["error"] and "refusing to signal" in apply["error"]
    # The member itself was gone before the kill: the fault did nothing, so nothing is recovered, and chaos starts
    # no process it did not stop (chaos.backends.NotApplied)
    assert apply["error"].startswith("NotApplied:") and ctl.outstanding.entries() == []
    assert not registry.member_alive(registry.load(app_member)["members"]["app"])


def test_stop_and_describe_never_take_a_stranger_for_the_member(app_member, stranger):
    reuse_pid(app_member, "app", stranger.pid)
    member = registry.load(app_member)["members"]["app"]
    assert not registry.member_alive(member)
    assert "is no longer app" in registry.pid_reused(member)
    assert registry.stop_member(member, signal.SIGKILL) is False
    assert "NOT running" in LocalBackend(str(app_member)).describe("app")
    assert stranger.poll() is None


def test_a_pid_file_older_than_its_process_is_stale_and_not_adopted(tmp_path, stranger):
    """A pid file outlives its process; the pid it names may belong to a newer one by now."""
    pid_file = tmp_path / "app.pid"
    pid_file.write_text(f"{stranger.pid}\n")
    an_hour_ago = time.time() - 3600
    os.utime(pid_file, (an_hour_ago, an_hour_ago))
    member = {"name": "app", "pid": None, "pid_file": str(pid_file)}
    assert "is stale" in registry.adopt_pid_file(member) and member["pid"] is None
    os.utime(pid_file)   # written after the process started: it is that process
    assert registry.adopt_pid_file(member) is None and member["pid"] == stranger.pid
    assert registry.member_alive(member) and member["pid_start"] == registry.start_ticks(stranger.pid)


@pytest.mark.parametrize("content, fragment", [
    (b"1\n", "pid 1 is init"), (b"0", "pid 0 is init"), ("١".encode(), "expected a pid"), ("²".encode(), "expected a pid"),
    (b"9" * 5000, "expected a pid"), (b"\xff\xfe", "expected a pid"), (b"", "expected a pid"), (b"-5", "expected a pid")])
def test_a_pid_file_that_names_no_usable_process_is_refused_by_name(tmp_path, content, fragment):
    from targets.registry import adopt_pid_file

    path = tmp_path / "web.pid"
    path.write_bytes(content)
    member = {"pid_file": str(path)}
    why = adopt_pid_file(member)
    assert why is not None and why.startswith(f"pid file {path}: ") and fragment in why, why
    assert "pid" not in {k for k in member if k != "pid_file"}  # nothing adopted
    assert adopt_pid_file({"pid_file": str(tmp_path)}).endswith("Is a directory")


def test_the_controller_never_signals_init():
    from chaos.backend import refuse_own_process

    with pytest.raises(PermissionError, match="pid 1.*init"):
        refuse_own_process(1, "web")


def test_starting_a_member_keeps_a_handler_python_cannot_see(tmp_path):
    """Locust takes SIGTERM through gevent's event loop, a handler Python reads as SIG_DFL. Holding signals during a
    member's start "restored" SIG_DFL over it: after any chaos restart, a SIGTERM killed Locust outright (exit -15,
    no heal, no run.json). A real gevent-patched process: the SIGTERM after a start still reaches its handler."""
    script = """
import os, signal, sys
from gevent import monkey; monkey.patch_all()
import gevent
from targets import registry
hit = []
gevent.signal_handler(signal.SIGTERM, lambda: hit.append(1))
registry.start_member({"cmd": [sys.executable, "-c", "pass"], "cwd": sys.argv[1], "log": sys.argv[1] + "/log"})
os.kill(os.getpid(), signal.SIGTERM)
for _ in range(500):
    if hit:
        break
    gevent.sleep(0.01)
print("handled" if hit else "not handled")
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert (done.returncode, done.stdout.strip()) == (0, "handled"), (done.returncode, done.stderr[-2000:])
