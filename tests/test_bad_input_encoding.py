"""Bad input, continued (#16): an ASCII terminal, Ctrl-C in an audit, bytes that are not UTF-8 in a path.

- `python -m oracle audit|report|compare|trend` with an ASCII stdout (PYTHONIOENCODING=ascii, LANG=C on an
  older Python) died on the '—' of a verdict or the '·' of a summary, after its work was done: exit 3, "the
  audit failed". Now the text is written escaped and the exit code is the one a UTF-8 terminal gets; the same
  for `python -m chaos` (exit 2, "bad plan", for a good one) and `python -m refbot` (a traceback);
- Ctrl-C in `python -m oracle audit` (a slow store) was a bare KeyboardInterrupt traceback: now one line
  naming the run and how to finish, exit 130;
- a --run-dir, --label, --script or --chaos holding a byte that is not UTF-8 crashed test_start writing
  run.json, while the users ran unjournaled: now refused before any load, exit 2, naming the option.

Every command runs for real, in its own process.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import wait_until
from support_locust import CHATFILE, LOCUST, REPO, chat_bot, finish, quick_script
from support_oracle import TurnSpec, build_world, write_journal, write_snapshot
from test_bad_input import assert_named

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def run(*argv, ascii_out: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m ...`` with a UTF-8 or an ASCII stdout and stderr; the output as bytes, decoded leniently."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii" if ascii_out else "utf-8"}
    done = subprocess.run([sys.executable, "-m", *map(str, argv)], cwd=REPO, env=env, capture_output=True,
                          timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode("utf-8", "replace"),
                                       done.stderr.decode("utf-8", "replace"))


# ---- an ASCII terminal --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def audited_runs(tmp_path_factory):
    """Two small journaled runs with their store snapshots (label 'v1-café'), each audited once."""
    root = tmp_path_factory.mktemp("ascii")
    runs = []
    for name, seed in (("a", 0), ("b", 1)):
        folder = root / name
        world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]] * 3,
                            seed=seed)
        write_journal(folder, world.records)
        write_snapshot(folder, world)
        (folder / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "label": "v1-café",
                                                     "start": 1_700_000_000.0 + seed, "end": 1_700_000_100.0 + seed}))
        assert run("oracle", "audit", folder).returncode == 0
        runs.append(folder)
    return runs


ORACLE = [["audit", "A"], ["report", "A"], ["compare", "A", "B"], ["trend", "A", "B"]]


@pytest.mark.parametrize("argv", ORACLE, ids=[a[0] for a in ORACLE])
def test_an_ascii_terminal_gets_the_oracles_output_escaped_and_the_same_exit_code(argv, audited_runs):
    """It was exit 3 ("the audit failed") on the first '\u2014', '\xb7' or 'é' written."""
    argv = [{"A": audited_runs[0], "B": audited_runs[1]}.get(a, a) for a in argv]
    utf8, ascii_ = run("oracle", *argv), run("oracle", *argv, ascii_out=True)
    assert not (utf8.stdout + utf8.stderr).isascii(), "nothing for an ASCII terminal to choke on"
    assert ascii_.returncode == utf8.returncode, ascii_.stderr[-2000:]
    assert "Traceback" not in ascii_.stdout + ascii_.stderr
    assert (ascii_.stdout + ascii_.stderr).isascii()
    assert "\\u2014" in ascii_.stdout or "\\xe9" in ascii_.stdout or "\\xb7" in ascii_.stdout, ascii_.stdout


def test_an_ascii_terminal_gets_chaos_validates_output_escaped():
    """`validate` of a good plan printed "error: 'ascii' codec can't encode..." and exit 2, "bad plan"."""
    plan = REPO / "chaos" / "plans" / "gentle.yaml"
    result = run("chaos", "validate", plan, ascii_out=True)
    assert result.returncode == 0, result.stderr
    assert f"{plan}: ok \\u2014 7 fault(s)" in result.stdout


def test_an_ascii_terminal_gets_refbots_output_escaped(tmp_path):
    """`down` with nothing up in a folder named with an 'é' was a traceback, exit 1."""
    state_dir = tmp_path / "café"
    state_dir.mkdir()
    result = run("refbot", "down", "--state-dir", state_dir, ascii_out=True)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "caf\\xe9 (no state file); nothing to stop" in result.stdout


# ---- Ctrl-C in an audit ---------------------------------------------------------------------------
@pytest.fixture
def silent_store():
    """A TCP server on loopback that accepts connections and never answers (a store stuck mid-read): its URL
    and the connections it accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def accept():
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0", accepted
    server.close()
    for conn in accepted:
        conn.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_in_an_audit_says_how_to_finish_it(silent_store, audited_runs, tmp_path, sig, code):
    """Ctrl-C was a bare KeyboardInterrupt traceback (exit 130 already); SIGTERM (a CI job's time-out) ended the
    audit silently. The earlier audit's tables stay."""
    url, accepted = silent_store
    folder = tmp_path / "run"
    shutil.copytree(audited_runs[0], folder)
    before = {p: p.read_bytes() for p in [*folder.glob("journal/*"), *folder.glob("audit/*")]}
    proc = subprocess.Popen([sys.executable, "-m", "oracle", "audit", str(folder), "--store-url", url, "--jobs", "1"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: accepted or proc.poll() is not None, timeout=60, what="the audit to reach the store")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == code, out + err
    assert_named(err, f"the audit of {folder} did not finish", f"python -m oracle audit {folder} --store-url ...")
    assert len(err.strip().splitlines()) == 1, err
    assert {p: p.read_bytes() for p in before} == before


# Every partition's judging blocks (a slow store, in effect) once it has said where it runs.
_STUCK_JUDGES = """
import os, sys, time
from pathlib import Path
from oracle import __main__ as cli, judge

def judge_partitions(context, partitions):
    (Path(sys.argv[1]) / f"judge.{os.getpid()}").touch()
    time.sleep(60)

judge.judge_partitions = judge_partitions
sys.exit(cli.main(["audit", sys.argv[2], "--jobs", "2"]))
"""


@pytest.mark.timeout(120)
def test_sigterm_to_an_audit_stops_its_judging_processes_too(audited_runs, tmp_path):
    """A SIGTERM to the audit's own process (not its group: a supervisor's kill) left it waiting for its judging
    processes to finish their partitions, or, before SIGTERM was handled, left them judging after it had gone."""
    import psutil

    folder = tmp_path / "run"
    shutil.copytree(audited_runs[0], folder)
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_JUDGES, str(tmp_path), str(folder)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(list(tmp_path.glob("judge.*"))) == 2 or proc.poll() is not None, timeout=60,
                   what="two judging processes")
        assert proc.poll() is None, proc.communicate()
        judges = [psutil.Process(int(p.suffix[1:])) for p in tmp_path.glob("judge.*")]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 143, out + err
    assert_named(err, f"the audit of {folder} did not finish", "finish it with")
    assert not [p for p in judges if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


# ---- bytes that are not UTF-8 in Locust's options -------------------------------------------------
def _sleeper_targets(directory: Path) -> tuple[subprocess.Popen, Path]:
    """A process a plan may pause (at 60 s: never, in a run of seconds), named in a targets file."""
    sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)
    (directory / "sleeper.pid").write_text(str(sleeper.pid))
    (directory / "targets.yaml").write_text("targets:\n  sleeper: {pid_file: sleeper.pid}\n")
    return sleeper, directory / "targets.yaml"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("option", ["--run-dir", "--label", "--script", "--chaos"])
def test_a_value_that_is_not_utf8_stops_locust_before_any_load(option, tmp_path):
    """It was a UnicodeEncodeError traceback writing run.json at test_start (a 0-byte run.json.*.tmp left),
    the users sending turns all the same, nothing journaled, exit 2 as "an unhandled greenlet exception"."""
    base = os.fsencode(tmp_path)
    run_dir, bot_log = tmp_path / "run", tmp_path / "bot.log"
    sleeper, targets = _sleeper_targets(tmp_path)
    bad = {"--run-dir": base + b"/bad\xffname", "--label": b"v1\xff"}.get(option)
    if option == "--script":
        bad = base + b"/script\xff.yaml"
        shutil.copy(quick_script(tmp_path), bad)
    if option == "--chaos":
        bad = base + b"/plan\xff.yaml"
        Path(os.fsdecode(bad)).write_text("faults:\n  - {kind: pause, target: sleeper, at: 60s, duration: 1s}\n")
    extra = ["--chaos-backend", "local", "--stack-state", str(targets)] if option == "--chaos" else []
    try:
        with chat_bot("memory", log=bot_log) as url:
            cmd = [LOCUST, "-f", CHATFILE, "--headless", "-u", "4", "-r", "4", "-t", "3s", "--host", url,
                   "--run-dir", str(run_dir), "--loglevel", "WARNING", *extra]
            proc = subprocess.Popen([os.fsencode(a) for a in cmd] + [os.fsencode(option), bad], cwd=tmp_path,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            out, err = finish(proc, 120)
    finally:
        sleeper.kill()
        sleeper.wait(10)
    output = (out + err).decode("utf-8", "replace")
    assert proc.returncode == 2, output[-3000:]
    assert_named(output, f"{option}: ", "must be valid UTF-8 (it holds byte 0xff)")
    assert not bot_log.exists() or bot_log.read_text() == ""  # no turn was sent
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".jsonl") or ".run.json." in p.name]
