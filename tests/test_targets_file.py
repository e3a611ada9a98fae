"""Chaos against your own processes: a targets file names them, the local backend acts on them.

The target is a plain Starlette app served by uvicorn, written here (not refbot): killed, paused
and restarted by a plan, healed at the end; and healed by `python -m chaos heal` after the
controller itself is SIGKILLed. The targets file's errors name file, line and field.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from chaos.backends.local import LocalBackend, stack_options
from chaos.controller import Controller
from chaos.plan import parse_plan
from conftest import free_port, wait_until
from support_chaos import read_timeline, run_chaos
from targets import file as targets_file, registry

APP = textwrap.dedent('''
    """Somebody's own web app: it knows nothing of goldfish."""
    import os
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def healthz(request):
        return JSONResponse({"ok": True, "pid": os.getpid()})

    app = Starlette(routes=[Route("/healthz", healthz)])
''')


class App:
    """The app's folder: its code, a targets file naming it, and what chaos learned about it."""

    def __init__(self, root: Path, pid_file: bool = True):
        self.root, self.port = root, free_port()
        (root / "app.py").write_text(APP)
        self.url = f"http://127.0.0.1:{self.port}/healthz"
        self.command = [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(self.port)]
        self.targets = root / "targets.yaml"
        self.targets.write_text(textwrap.dedent(f"""\
            targets:
              web:
                command: {json.dumps(self.command)}
                {"pid_file: web.pid" if pid_file else ""}
                health: {{http: {self.url}}}
                env: {{APP_NAME: web}}
            """))

    def member(self) -> dict:
        return registry.load(self.root / ".targets.state")["members"]["web"]

    def healthy(self) -> bool:
        return requests.get(self.url, timeout=2).status_code == 200

    def stop(self) -> None:
        state = registry.load(self.root / ".targets.state")
        for m in (state or {}).get("members", {}).values():
            registry.stop_member(m, signal.SIGKILL)


@pytest.fixture
def app(tmp_path):
    app = App(tmp_path)
    yield app
    app.stop()


def proc_state(pid: int) -> str:
    """The kernel's state letter for ``pid`` (T: stopped), '' when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def events(run_dir) -> list[tuple[str, str, str]]:
    return [(r["event"], r["fault"], r["outcome"]) for r in read_timeline(run_dir)]


def test_a_plan_kills_pauses_and_restarts_a_plain_uvicorn_app_and_heals_it(app, tmp_path):
    # The user runs their app as they always do and writes its pid file.
    mine = subprocess.Popen(app.command, cwd=app.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    (app.root / "web.pid").write_text(f"{mine.pid}\n")
    try:
        wait_until(app.healthy, timeout=30, what="the user's app answering")
        plan = parse_plan(textwrap.dedent("""\
            faults:
              - {id: kill, kind: kill, target: web, at: 0s, duration: 500ms}
              - {id: pause, kind: pause, target: web, at: 6s, duration: 3s}
              - {id: restart, kind: restart, target: web, at: 12s}
            """), "hello.yaml")
        run = tmp_path / "run"
        ctl = Controller(plan, LocalBackend(targets=str(app.targets), health_timeout=30), run).start()

        wait_until(lambda: ("recover", "kill#0", "ok") in events(run), timeout=30, what="the kill recovered")
        mine.wait(5)                                      # the adopted process was the one killed
        started = app.member()["pid"]
        assert started != mine.pid and (app.root / "web.pid").read_text().strip() == str(started)

        wait_until(lambda: proc_state(started) == "T", timeout=20, what="the app stopped by the pause")
        try:
            answered = app.healthy()
        except requests.RequestException:
            answered = False
        assert not (answered and proc_state(started) == "T"), "a paused app answered"

        assert ctl.wait(90)
    finally:
        mine.kill()
        mine.wait()
    assert events(run) == [("apply", "kill#0", "ok"), ("recover", "kill#0", "ok"),
                           ("apply", "pause#0", "ok"), ("recover", "pause#0", "ok"),
                           ("apply", "restart#0", "ok"), ("recover", "restart#0", "ok")]
    timeline = read_timeline(run)
    assert timeline[0]["detail"]["pid"] == mine.pid and timeline[2]["detail"]["pid"] == started
    assert timeline[4]["detail"]["pid"] == started
    final = app.member()
    assert final["pid"] not in (mine.pid, started) and registry.member_alive(final)
    assert final["pid_start"] == registry.start_ticks(final["pid"]) and app.healthy()
    assert (app.root / "web.pid").read_text().strip() == str(final["pid"])
    assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == []


def test_heal_restarts_what_a_sigkilled_controller_left_down(tmp_path):
    app = App(tmp_path, pid_file=False)
    try:
        started = run_chaos("targets", "start", app.targets, timeout=90)
        assert started.returncode == 0 and "web (pid" in started.stdout, started.stdout + started.stderr
        first = app.member()["pid"]
        plan = tmp_path / "down.yaml"
        plan.write_text("faults:\n  - {kind: kill, target: web, at: 0s, duration: 10m}\n")
        run = tmp_path / "run"
        controller = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(plan), "--targets",
                                       str(app.targets), "--run-dir", str(run)],
                                      cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: ("apply", "f1#0", "ok") in events(run), timeout=60, what="the kill applied")
        finally:
            controller.kill()
            controller.wait()
        assert not registry.member_alive(app.member()) and proc_state(first) in ("", "Z")
        assert len(json.loads((run / "chaos" / "outstanding.json").read_text())["faults"]) == 1

        healed = run_chaos("heal", run, timeout=90)
        assert healed.returncode == 0 and "1 recovered, 0 failed" in healed.stdout, healed.stdout + healed.stderr
        member = app.member()
        assert member["pid"] != first and registry.member_alive(member) and app.healthy()
        assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == []
        assert read_timeline(run)[-1]["via"] == "heal-cli"

        stopped = run_chaos("targets", "stop", app.targets)
        assert stopped.returncode == 0 and "stopped: web" in stopped.stdout
        assert not registry.member_alive(app.member())
    finally:
        app.stop()


def test_locust_stack_state_option_takes_a_targets_file(app):
    """`--chaos-backend local --stack-state targets.yaml`: the same backend, from Locust's option."""
    from locustfiles.endofrun import load_chaos
    plan = app.root / "plan.yaml"
    plan.write_text("faults:\n  - {kind: pause, target: web, at: 1s, duration: 1s}\n")
    settings = SimpleNamespace(chaos=str(plan), chaos_backend="local", stack_state=str(app.targets))
    controller = load_chaos(settings, app.root / "run")
    assert controller.backend.config()["targets"] == str(app.targets)
    assert stack_options(".stack/state.json") == {"state_dir": ".stack"}


# ---- the file's own errors ------------------------------------------------------------------

BAD = [
    ("targets:\n  web:\n    comand: uvicorn app:app\n",
     ["t.yaml:3: comand: unknown field in web", "t.yaml:2: command: missing: give the command"]),
    ("targets:\n  web:\n    command: [uvicorn, {a: 1}]\n", ["t.yaml:3: command: must be a string"]),
    ("targets:\n  web:\n    command: !!python/object/apply:os.system [echo]\n", ["t.yaml:3: tag !!python/object/apply:os.system is not allowed (plain data only)"]),
    ("targets:\n  web:\n    command: \"unclosed 'quote\"\n", ["t.yaml:3: command: cannot split"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    health: {http: ftp://x/}\n", ["t.yaml:4: health: http: expected a http://"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    health: {tcp: localhost}\n", ["t.yaml:4: health: tcp: expected host:port"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    health: {http: 'http://[::1'}\n", ["t.yaml:4: health: http: ", "is not a URL"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    health: {redis: 'redis://127.0.0.1:x/0'}\n",
     ["t.yaml:4: health: redis: 'redis://127.0.0.1:x/0' is not a URL"]),
    ('targets:\n  web:\n    pid_file: "a\\0b"\n', ["t.yaml:3: pid_file (target web): must be a non-empty string (no NUL"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    health: {tcp: '127.0.0.1:1', http: 'http://x'}\n",
     ["t.yaml:4: health: must be one check"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    health: {grpc: x}\n", ["t.yaml:4: health: unknown check 'grpc'"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    env: {A: [1, 2]}\n", ["t.yaml:4: env: A: must be a plain value"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    env: {A: ~}\n", ["t.yaml:4: env: A: must be a plain value"]),
    ('targets:\n  web:\n    pid_file: w.pid\n    env: {A: "x\\0y"}\n', ["t.yaml:4: env: A: must be a plain value"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    env: {1-A: x}\n", ["t.yaml:4: env: '1-A' is not an environment"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    cwd: nowhere\n", ["t.yaml:4: cwd: nowhere is not a directory"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    lb_server: web-1\n", ["t.yaml:4: lb_server: must be HAProxy's backend/server"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    lb_server: api/web-1\n", ["t.yaml:4: lb_server: needs the HAProxy runtime API"]),
    ("targets:\n  web:\n    pid_file: w.pid\n    role: [a]\n", ["t.yaml:4: role (target web): must be a non-empty string"]),
    ("targets:\n  my web:\n    pid_file: w.pid\n", ["t.yaml:2: targets: name 'my web' must be letters"]),
    ("targets:\n  web: uvicorn app:app\n", ["t.yaml:2: web: must be a mapping"]),
    ("targets:\n  web: {pid_file: a}\n  web: {pid_file: b}\n", ["t.yaml:3: web: given twice (first on line 2)"]),
    ("targets:\n  ? [a, b]\n  : {pid_file: a}\n", ["t.yaml:2: a key must be a plain value, not a list"]),
    ("target:\n  web: {pid_file: a}\n", ["t.yaml:1: target: unknown field in the targets file",
                                         "t.yaml:1: targets: missing"]),
    ("targets: {}\n", ["t.yaml:1: targets: must be a non-empty mapping"]),
    ("- web\n", ["t.yaml:1: the targets file must be a mapping"]),
    ("", ["t.yaml:1: the targets file must be a mapping"]),
    ("targets:\n  web: {pid_file: a\n", ["t.yaml:3: not valid YAML"]),
    ("haproxy_socket: 5\ntargets:\n  web: {pid_file: a}\n", ["t.yaml:1: haproxy_socket: must be a non-empty string"]),
]


@pytest.mark.parametrize("text,messages", BAD)
def test_a_bad_targets_file_names_file_line_and_field(tmp_path, text, messages):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(targets_file.TargetsError) as err:
        targets_file.load(path)
    problems = str(err.value).replace(f"{tmp_path}/", "")
    for message in messages:
        assert message in problems, problems


def test_a_state_dir_that_cannot_be_made_names_the_file_and_field(tmp_path):
    (tmp_path / "blocker").write_text("a file, not a folder")
    path = tmp_path / "t.yaml"
    path.write_text("state_dir: blocker/state\ntargets:\n  web: {pid_file: w.pid}\n")
    with pytest.raises(targets_file.TargetsError) as err:
        targets_file.sync(targets_file.load(path))
    assert f"{path}: state_dir: cannot create {tmp_path / 'blocker' / 'state'}: Not a directory" in str(err.value)


def test_a_good_targets_file_becomes_registry_members(tmp_path):
    (tmp_path / "svc").mkdir()
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent("""\
        state_dir: state
        haproxy_socket: 127.0.0.1:9999
        targets:
          api:
            command: ./run.sh --port 8001 'two words'
            cwd: svc
            pid_file: api.pid
            health: {tcp: "127.0.0.1:8001"}
            env: {PORT: 8001, DEBUG: true}
            role: bot
            lb_server: api/api-1
          cache:
            pid_file: /run/cache.pid
            health: {redis: redis://127.0.0.1:6380/0}
        """))
    t = targets_file.load(path)
    assert t.state_dir == tmp_path / "state" and t.haproxy_socket == ["127.0.0.1", 9999]
    api = t.members["api"]
    assert api["cmd"] == ["./run.sh", "--port", "8001", "two words"] and api["cwd"] == str(tmp_path / "svc")
    assert api["pid_file"] == str(tmp_path / "api.pid") and api["health"] == {"tcp": ["127.0.0.1", 8001]}
    assert api["env"] == {"PORT": "8001", "DEBUG": "true"} and api["port"] == 8001
    assert (api["role"], api["lb_server"]) == ("bot", "api/api-1")
    cache = t.members["cache"]
    assert cache["cmd"] is None and cache["pid_file"] == "/run/cache.pid" and cache["port"] == 6380
    assert cache["log"] == str(tmp_path / "state" / "cache.log")


def test_a_target_in_goldfishs_own_process_group_is_refused_before_any_load(app, tmp_path):
    """A CI script's `python app.py &` then `locust ...`: the app is in the script's process group, as goldfish is,
    so every fault that signals it was refused as it applied: 30 s of load, then FAIL "start every target before the
    run" for a target that ran (LangChain hunt 16). `chaos validate`, and Locust's own check, now refuse it first."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {kind: kill, target: web, at: 1s}\n")
    same_group = subprocess.Popen(app.command, cwd=app.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        (app.root / "web.pid").write_text(f"{same_group.pid}\n")
        wait_until(app.healthy, timeout=30, what="the user's app answering")
        refused = run_chaos("validate", plan, "--targets", app.targets)  # started by this process: its group too
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "plan.yaml:2: kind: refusing to signal web" in refused.stderr and "process group" in refused.stderr
        assert "start it in a process group of its own (`setsid " in refused.stderr and "uvicorn app:app" in \
            refused.stderr, refused.stderr
    finally:
        same_group.kill()
        same_group.wait()
    apart = subprocess.Popen(app.command, cwd=app.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # `setsid python app.py &`
    try:
        (app.root / "web.pid").write_text(f"{apart.pid}\n")
        wait_until(app.healthy, timeout=30, what="the user's app answering")
        accepted = run_chaos("validate", plan, "--targets", app.targets)
        assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    finally:
        apart.kill()
        apart.wait()


def test_validate_checks_the_file_and_the_plan_against_it(app, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {kind: kill, target: web, at: 1s}\n  - {kind: lb-drop, target: web, at: 2s}\n")
    result = run_chaos("validate", plan, "--targets", app.targets)
    assert result.returncode == 2
    assert "plan.yaml:3: kind: lb-drop needs HAProxy" in result.stderr, result.stderr
    alone = run_chaos("validate", "--targets", app.targets)
    assert alone.returncode == 0 and "1 target(s): web (not running)" in alone.stdout, alone.stdout + alone.stderr
    app.targets.write_text("targets:\n  web:\n    pid_file: web.pid\n    helth: {tcp: '127.0.0.1:1'}\n")
    bad = run_chaos("validate", "--targets", app.targets)
    assert bad.returncode == 2 and f"{app.targets}:4: helth: unknown field in web" in bad.stderr, bad.stderr
    app.targets.write_text("targets:\n  web:\n    pid_file: web.pid\n")
    (tmp_path / "down.yaml").write_text("faults:\n  - {kind: kill, target: web, at: 1s}\n")
    no_command = run_chaos("validate", tmp_path / "down.yaml", "--targets", app.targets)
    assert no_command.returncode == 2 and "kill must start web again, but it has no command" in no_command.stderr
