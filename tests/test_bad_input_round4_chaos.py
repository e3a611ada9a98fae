"""Bad input to chaos, round 4: a pid file naming another program, toxic parameters and Toxiproxy URLs, and the
command-line options of `python -m chaos` that were ignored, clashed or crashed without naming themselves.

The safety finding first: a targets file whose ``pid_file`` held the pid of another program (a redis-server, while
the target's command was ``python3 -m http.server``) was adopted, so a plan's kill or pause would have hit that
program. The processes here are real (started with subprocess, never signalled by the tests but at the end); the
Toxiproxy API is the replay of its contract in support_chaos (no Toxiproxy binary can run here). The plan
language's own cases are in test_chaos_plan.py.
"""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import free_port
from support_chaos import replay  # noqa: F401 - a fixture
from targets import registry
from test_bad_input import assert_named

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(60)]

KILL_PLAN = "faults:\n  - {id: k, kind: kill, target: app, at: 1s, duration: 1s}\n"


def chaos(capsys, *argv) -> tuple[int, str]:
    """``python -m chaos ARGV`` in-process: its exit code and everything it printed."""
    from chaos.__main__ import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:   # argparse refused an option's value
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def processes():
    """Start real processes in their own sessions (as a user's servers are); all killed at the end."""
    started = []

    def start(argv, **kw):
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                **kw)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        os.killpg(proc.pid, signal.SIGKILL)   # the group: a shell script's child too
        proc.wait()


def targets_file(tmp_path: Path, command: str, pid: int) -> Path:
    """A targets file naming ``command`` and a pid file holding ``pid``, written after that process started."""
    (tmp_path / "app.pid").write_text(f"{pid}\n")
    path = tmp_path / "targets.yaml"
    path.write_text(f"targets:\n  app:\n    command: {command}\n    pid_file: app.pid\n")
    return path


# ---- t06: a pid file that names another program is never adopted ------------------------------------------------
@pytest.mark.parametrize("stranger", [["sleep", "60"], [sys.executable, "-c", "import time; time.sleep(60)"]],
                         ids=["another-program", "another-python-program"])
def test_a_pid_file_naming_another_program_is_refused_by_file_line_and_that_program_is_never_touched(
        stranger, processes, tmp_path, capsys):
    """It was adopted: `run --dry-run` showed "app pid N running" for the stranger, and a kill would have hit it."""
    proc = processes(stranger)
    port = free_port()
    targets = targets_file(tmp_path, f"python3 -m http.server {port} --bind 127.0.0.1", proc.pid)
    (tmp_path / "plan.yaml").write_text(KILL_PLAN)
    refusal = (f"{targets}:4: pid_file: pid {proc.pid} in {tmp_path / 'app.pid'} runs '{' '.join(stranger)}', "
               f"not the command 'python3 -m http.server {port} --bind 127.0.0.1'; refusing to adopt it")
    for argv in (["validate", "--targets", targets],
                 ["run", "--dry-run", "--targets", targets, tmp_path / "plan.yaml"],
                 ["run", "--targets", targets, "--run-dir", tmp_path / "run", tmp_path / "plan.yaml"]):
        code, out = chaos(capsys, *argv)
        assert code == 2, out
        assert_named(out, refusal, "(target app)")
    assert proc.poll() is None and registry.process_state(proc.pid) != "T", "chaos touched the other program"
    assert registry.load(tmp_path / ".targets.state") is None   # nothing recorded, nothing adopted
    assert not (tmp_path / "run" / "chaos.jsonl").exists()
    # The local backend adopts at run time too (a member found down): the same refusal, nothing adopted.
    member = {"name": "app", "pid": None, "pid_file": str(tmp_path / "app.pid"),
              "cmd": ["python3", "-m", "http.server"]}
    assert "refusing to adopt it" in registry.adopt_pid_file(member) and member["pid"] is None


def shebang_script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("how", ["interpreter-path", "sh-c-exec", "console-script", "shell-script"])
def test_a_pid_file_naming_the_command_started_another_way_is_adopted(how, processes, tmp_path, capsys):
    """Tolerance of the check above: /usr/bin/python3.11 is python3, a console script is its interpreter running it,
    `sh -c 'exec CMD'` is CMD, a #!/bin/sh script is sh running it."""
    port = free_port()
    server = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    started, command = {
        "interpreter-path": (server, f"python3 -m http.server {port}"),
        "sh-c-exec": (server, f"""sh -c 'exec python3 -m http.server {port}'"""),
        "console-script": ([shebang_script(tmp_path, "serve", f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")],
                           "serve --port 8000"),
        "shell-script": ([shebang_script(tmp_path, "run.sh", "#!/bin/sh\nsleep 60\n")], "./run.sh"),
    }[how]
    proc = processes(started, cwd=tmp_path)
    targets = targets_file(tmp_path, command, proc.pid)
    code, out = chaos(capsys, "validate", "--targets", targets)
    assert code == 0 and f"app (pid {proc.pid}, healthy)" in out, out


# ---- pv_q36, q12/q13: the Toxiproxy of toxic faults --------------------------------------------------------------
TOXIC_PLAN = "faults:\n  - {id: t, kind: toxic, target: redis, at: 1s, duration: 1s, toxic: latency, latency: 100}\n"
PROXIES = {"method": "GET", "path": "/proxies", "status": 200,
           "body": {"redis": {"name": "redis", "listen": "[::]:26379", "upstream": "redis:6379", "toxics": []}}}


def test_validate_takes_the_toxiproxy_option_as_run_does(replay, tmp_path, capsys):
    """`chaos validate --toxiproxy URL` said "toxic faults need a Toxiproxy ... or pass --toxiproxy URL"."""
    srv = replay([PROXIES, PROXIES])
    (tmp_path / "plan.yaml").write_text(TOXIC_PLAN)
    code, out = chaos(capsys, "validate", "--state-dir", tmp_path / "stack", "--toxiproxy", srv.url,
                      tmp_path / "plan.yaml")
    assert code == 0 and "ok against backend local" in out, out
    assert [r["path"] for r in srv.requests] == ["/proxies", "/proxies"]


@pytest.mark.parametrize("given", ["plan", "option"])
def test_a_toxiproxy_that_does_not_answer_is_named_with_its_line_or_option(given, tmp_path, capsys):
    """It was "target: cannot resolve 'bot' on backend 'local': HTTPConnectionPool(...)" on the fault's line."""
    url = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    plan = tmp_path / "plan.yaml"
    plan.write_text((f"toxiproxy: {url}\n" if given == "plan" else "") + TOXIC_PLAN)
    option = ["--toxiproxy", url] if given == "option" else []
    commands = [["validate", "--state-dir", tmp_path / "stack"], ["run", "--dry-run", "--state-dir", tmp_path / "stack"]]
    for command in commands + ([["validate"]] if option else []):   # the option is checked without a backend too
        code, out = chaos(capsys, *command, *option, plan)
        assert code == 2, out
        where = f"{plan}:1: toxiproxy: {url} is not" if given == "plan" else f"--toxiproxy {url}: not"
        assert_named(out, where, "a Toxiproxy API that answers: nothing answers there")
        assert "cannot resolve" not in out, out


# ---- ch09/ch10, ts01-ts05, ch07: option values -------------------------------------------------------------------
@pytest.mark.parametrize("value", ["notaurl", "http://", "localhost:8474"])
def test_a_toxiproxy_option_that_is_not_an_http_url_with_a_host_is_refused(value, tmp_path, capsys):
    (tmp_path / "plan.yaml").write_text(TOXIC_PLAN)
    for command in ("validate", "run"):
        code, out = chaos(capsys, command, "--state-dir", tmp_path, "--toxiproxy", value, tmp_path / "plan.yaml")
        assert code == 2
        assert_named(out, "argument --toxiproxy: must be an http(s) URL with a host", repr(value))


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "soon"])
def test_a_targets_timeout_that_is_not_a_time_above_zero_is_refused(value, tmp_path, capsys):
    """`chaos targets --timeout -5 start` said "not healthy after -5s"; nan and inf were taken."""
    targets = tmp_path / "targets.yaml"
    targets.write_text("targets:\n  app: {command: sleep 0}\n")   # nothing left running, even where it is taken
    code, out = chaos(capsys, "targets", "--timeout", value, "start", targets)
    assert code == 2
    assert_named(out, "argument --timeout: must be a finite duration above 0", repr(value))
    assert registry.load(tmp_path / ".targets.state") is None   # refused before the file was read: nothing started


def test_a_run_dir_that_cannot_be_a_folder_is_named_as_the_option(tmp_path, capsys):
    """It was "[Errno 17] File exists: '/etc/passwd'"."""
    (tmp_path / "plan.yaml").write_text(KILL_PLAN)
    (tmp_path / "a-file").write_text("x")
    for run_dir, why in ((tmp_path / "a-file", "a file of that name is in the way"),
                         (tmp_path / "a-file" / "run", "Not a directory")):
        code, out = chaos(capsys, "run", "--state-dir", tmp_path, "--run-dir", run_dir, tmp_path / "plan.yaml")
        assert code == 2
        assert_named(out, f"--run-dir {run_dir}: cannot make the run folder", why)


# ---- ch04, ch05: two options that say one thing ------------------------------------------------------------------
CLASHES = [
    (["--state-dir", "{S}", "--targets", "{T}"], "--state-dir (a stack's state folder) and "
                                                 "--targets (your own processes"),
    (["--state-dir", "{S}", "--backend-opt", "targets={T}"], "--state-dir (a stack's state folder"),
    (["--targets", "{T}", "--backend-opt", "state_dir={S}"], "--backend-opt state_dir (a stack's state folder"),
    (["--state-dir", "{S}", "--backend-opt", "state_dir=/elsewhere"],
     "--backend-opt state_dir and --state-dir both give the state_dir: give it once"),
]


@pytest.mark.parametrize("options, message", CLASHES, ids=["state-dir+targets", "state-dir+opt-targets",
                                                           "targets+opt-state-dir", "state-dir+opt-state-dir"])
def test_options_that_name_the_processes_twice_are_refused(options, message, tmp_path, capsys):
    """--targets silently won over --state-dir, and --backend-opt state_dir over --state-dir."""
    (tmp_path / "plan.yaml").write_text(KILL_PLAN)
    (tmp_path / "t.yaml").write_text("targets:\n  app: {command: sleep 60}\n")
    options = [o.format(S=tmp_path / "stack", T=tmp_path / "t.yaml") for o in options]
    for command in (["validate"], ["run", "--dry-run"]):
        code, out = chaos(capsys, *command, *options, tmp_path / "plan.yaml")
        assert code == 2
        assert_named(out, message, "give")
    assert not (tmp_path / ".t.state").exists()   # refused before the targets file was read


# ---- tv_t01-t12: a targets file's addresses and log -------------------------------------------------------------
TARGETS = [
    ("haproxy-port-99999", 'haproxy_socket: 127.0.0.1:99999\ntargets:\n  app: {command: sleep 60, lb_server: be/a}\n',
     "t.yaml:1: haproxy_socket: port 99999 is not in 1-65535"),
    ("health-http-no-host", "targets:\n  app: {command: sleep 60, health: {http: 'http:///healthz'}}\n",
     "t.yaml:2: health: http: 'http:///healthz' names no host"),
    ("health-http-port-0", "targets:\n  app: {command: sleep 60, health: {http: 'http://127.0.0.1:0/'}}\n",
     "t.yaml:2: health: http: 'http://127.0.0.1:0/': port 0 is no port"),
    ("health-redis-db-a-word", "targets:\n  app: {command: sleep 60, health: {redis: 'redis://127.0.0.1:6390/abc'}}\n",
     "t.yaml:2: health: redis: 'redis://127.0.0.1:6390/abc': path '/abc': must be /db"),
    ("log-a-directory", "targets:\n  app: {command: sleep 60, log: logs}\n", "t.yaml:2: log: "),
]


@pytest.mark.parametrize("text, message", [t[1:] for t in TARGETS], ids=[t[0] for t in TARGETS])
def test_a_targets_file_address_or_log_chaos_cannot_use_is_named_by_its_line(text, message, tmp_path, capsys):
    """A port out of range was blamed on the generated .state/state.json; no host, a db that is a word and a log
    that is a directory validated "ok"."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "t.yaml").write_text(text)
    code, out = chaos(capsys, "validate", "--targets", tmp_path / "t.yaml")
    assert code == 2
    assert_named(out, f"{tmp_path}/{message}", "t.yaml")
    assert "state.json" not in out and len(out.strip().splitlines()) == 2, out   # one problem, not a second echo
