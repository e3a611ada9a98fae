"""Ctrl-C and SIGTERM to `python -m oracle audit` at the moments hunt 11 found (D1, D2, m5): after the audit replaced
its tables (the message said they were kept, report.html kept the earlier PASS beside a FAIL summary.json), after the
new snapshot was written but before the tables, inside a finalizer (the SIGTERM swallowed with a traceback, the audit
going on to exit 0), and during the subcommand's imports (a traceback). Real audits of a real redis-server, real
signals; each lands where the test puts it: the process sends it to itself at a chosen point (a wrapper around the
function that runs then), or the test sends it once the process says it has reached that point."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_until
from test_bad_input_round3 import REPO, cli, journaled

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

CODE = {signal.SIGINT: 130, signal.SIGTERM: 143}
SIGNALS = [pytest.param(signal.SIGINT, id="sigint"), pytest.param(signal.SIGTERM, id="sigterm")]

# `python -c WRAPPER SIGNUM RUN ARGS...`: the oracle's command line with one function wrapped so that the process
# sends itself SIGNUM at the point under test (PATCH below); then main() as `python -m oracle` runs it.
WRAPPER = """
import os, signal, sys
SIG = int(sys.argv[1])
def kill_self():
    os.kill(os.getpid(), SIG)
    for _ in range(1000):  # the handler runs here at the latest (a backward jump checks for signals)
        pass
{patch}
from contracts.console import escape_unencodable, tolerate_closed_output
from oracle.__main__ import main
escape_unencodable()
tolerate_closed_output()
sys.exit(main(["audit", *sys.argv[2:]]))
"""

# the report is being drawn again after the tables were replaced
DURING_REDRAW = """
import oracle.report
_render = oracle.report.render
def render(*a, **k):
    kill_self()
    return _render(*a, **k)
oracle.report.render = render
"""

# the new snapshot replaced store/, the tables are not judged yet
AFTER_SNAPSHOT = """
from oracle.snapshot import SnapshotWriter
_close = SnapshotWriter.close
def close(self, complete, *a, **k):
    _close(self, complete, *a, **k)
    if complete:
        kill_self()
SnapshotWriter.close = close
"""

# audit_run has replaced the tables and is returning (before the command prints anything)
AS_AUDIT_RUN_RETURNS = """
import oracle.audit
_audit_run = oracle.audit.audit_run
def audit_run(*a, **k):
    summary = _audit_run(*a, **k)
    kill_self()
    return summary
oracle.audit.audit_run = audit_run
"""

# inside a finalizer: the redis client's connection pool collected (D2: Python swallows what a handler raises there)
IN_A_FINALIZER = """
import redis.connection
_del = redis.connection.ConnectionPool.__del__
sent = []
def __del__(self):
    if not sent:
        sent.append(1)
        sys.stderr.write("test: signal sent inside ConnectionPool.__del__\\n")
        kill_self()
    _del(self)
redis.connection.ConnectionPool.__del__ = __del__
"""


def audit_with(patch: str, sig: int, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", WRAPPER.replace("{patch}", patch), str(int(sig)), *map(str, argv)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=env)


def verdict(run: Path) -> str:
    return json.loads((run / "audit" / "summary.json").read_text())["verdict"]["result"]


def badge(run: Path) -> str:
    return re.search(r'class="badge[^"]*">([A-Z ]+)', (run / "report.html").read_text())[1]


@pytest.fixture
def passed_then_lost(tmp_path, redis_server):
    """A run audited live (PASS) with its report.html drawn; an entry of the store was then damaged, so a live
    re-audit FAILs. Returns (run folder, store URL)."""
    run = tmp_path / "run"
    world = journaled(run, sessions=6)
    client = redis_server.client()
    from support_oracle import fill_redis

    fill_redis(client, world)
    done = cli("oracle", "audit", run, "--store-url", redis_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert cli("oracle", "report", run).returncode == 0
    assert (verdict(run), badge(run)) == ("pass", "PASS")
    # an entry damaged in place: as many entries as the run's own read found (a key gone or a list shorter since
    # then refuses a live re-audit: oracle.keys.lost_since_the_read)
    client.lset(f"message_store:{world.order[0]}", 0, b"\xff not an entry")
    client.close()
    return run, redis_server.url


def assert_clean(err: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err


@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_while_the_report_is_drawn_again_lets_it_finish_then_says_so(passed_then_lost, sig):
    """D1: it said "did not finish (... any tables of an earlier audit are kept)" after the tables had been replaced
    (a FAIL), and report.html kept the PASS badge. Now the verdict is printed and the page drawn again, then the
    command exits with the signal's code, saying it was interrupted after the audit finished."""
    run, url = passed_then_lost
    done = audit_with(DURING_REDRAW, sig, run, "--store-url", url)
    assert done.returncode == CODE[sig], done.stdout + done.stderr
    assert_clean(done.stderr)
    assert "FAIL —" in done.stdout and f"report: {run / 'report.html'} (drawn again" in done.stdout, done.stdout
    assert f"after the audit of {run} finished: its tables and verdict (above) are written and " \
           f"{run / 'report.html'} drawn again; exit {CODE[sig]}, not the verdict's 1" in done.stderr, done.stderr
    assert "did not finish" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (verdict(run), badge(run)) == ("fail", "FAIL")


@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_as_the_tables_are_replaced_says_they_are_and_that_the_page_is_stale(passed_then_lost, sig):
    """D1: interrupted after audit_run replaced the tables but before the command drew the page again: the message
    says the tables are written and report.html is the earlier audit's, with the command that draws it."""
    run, url = passed_then_lost
    done = audit_with(AS_AUDIT_RUN_RETURNS, sig, run, "--store-url", url)
    assert done.returncode == CODE[sig], done.stdout + done.stderr
    assert_clean(done.stderr)
    assert f"the audit of {run} finished: its tables and verdict are written in {run / 'audit'}" in done.stderr
    assert f"{run / 'report.html'} still shows the earlier audit: draw it again with `python -m oracle report " \
           f"{run}`" in done.stderr, done.stderr
    assert "did not finish" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (verdict(run), badge(run)) == ("fail", "PASS")
    assert cli("oracle", "report", run).returncode == 0  # the command it gives
    assert badge(run) == "FAIL"


def test_a_signal_after_the_new_snapshot_says_the_snapshot_is_new_and_the_tables_are_not(passed_then_lost):
    """D1 (PHASE=snapshot): it said "the journal and any tables of an earlier audit are kept" while store/ was
    already the new read: summary.json (PASS) no longer matched the snapshot (FAIL offline). Now it says so, and how
    to finish from the new snapshot without reading the store again; that command then makes the set agree."""
    run, url = passed_then_lost
    done = audit_with(AFTER_SNAPSHOT, signal.SIGINT, run, "--store-url", url)
    assert done.returncode == 130, done.stdout + done.stderr
    assert_clean(done.stderr)
    assert f"its new snapshot replaced the earlier one in {run / 'store'}, but the tables in {run / 'audit'} (and " \
           f"report.html) are still the earlier audit's" in done.stderr, done.stderr
    assert f"finish it from the new snapshot (no store read) with `python -m oracle audit {run}`" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (verdict(run), badge(run)) == ("pass", "PASS")
    again = cli("oracle", "audit", run)  # the command it gives: the new read judged, the page drawn again
    assert again.returncode == 1, again.stdout + again.stderr
    assert (verdict(run), badge(run)) == ("fail", "FAIL")


def test_sigterm_inside_a_finalizer_is_not_lost_nor_a_traceback(passed_then_lost):
    """D2: SIGTERM that landed in redis-py's ConnectionPool.__del__ printed "Exception ignored in ... Terminated"
    and the audit went on to its verdict and exit 0."""
    run, url = passed_then_lost
    done = audit_with(IN_A_FINALIZER, signal.SIGTERM, run, "--store-url", url)
    assert "test: signal sent inside ConnectionPool.__del__" in done.stderr, done.stderr  # it did land there
    assert done.returncode == 143, done.stdout + done.stderr
    assert_clean(done.stderr)
    assert "oracle audit: interrupted" in done.stderr, done.stderr


# a body that lets a finalizer swallow the signal, then runs on (or ends at once): `python -c CONSOLE SIGNUM HOW`
CONSOLE = """
import os, sys, time
from contracts.console import interrupted_exit_code, sigterm_as_interrupt
SIG, HOW = int(sys.argv[1]), sys.argv[2]
class Finalized:
    def __del__(self):
        os.kill(os.getpid(), SIG)
        for _ in range(1000):
            pass
try:
    with sigterm_as_interrupt():
        Finalized()  # collected at once: the handler runs inside __del__
        if HOW == "runs-on":
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                time.sleep(0.01)
        print("body done")
except KeyboardInterrupt as exc:
    print(f"interrupted {type(exc).__name__}")
    sys.exit(interrupted_exit_code(exc))
print("not interrupted")
"""


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("how", ["runs-on", "ends-at-once"])
def test_a_signal_a_finalizer_swallowed_is_taken_after_it(sig, how):
    """contracts/console.py: what the handler raises inside a finalizer is swallowed by Python; the stop is taken
    again once the finalizer is done (the body runs on: within a second, not at its end), or as the block ends."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", CONSOLE, str(int(sig)), how], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == CODE[sig], done.stdout + done.stderr
    assert_clean(done.stderr)
    assert done.stderr == "", done.stderr
    name = "Terminated" if sig == signal.SIGTERM else "KeyboardInterrupt"
    assert done.stdout.endswith(f"interrupted {name}\n"), done.stdout  # (it may cut the body's last print)
    if how == "runs-on":
        assert "body done" not in done.stdout, done.stdout


# sitecustomize: the import of oracle.audit_cli (pandas and the rest: ~0.3 s) says it started, then waits
SLOW_IMPORT = """
import importlib.abc, os, sys, time

class Slow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "oracle.audit_cli":
            open(os.environ["IMPORT_STARTED"], "w").close()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
        return None

sys.meta_path.insert(0, Slow())
"""


@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_during_the_subcommands_imports_is_one_line_not_a_traceback(tmp_path, sig):
    """m5: Ctrl-C in the first ~0.3 s of `python -m oracle audit` (importing the subcommand) was a KeyboardInterrupt
    traceback; SIGTERM then killed it without a word."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_IMPORT)
    started = tmp_path / "import-started"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}", "IMPORT_STARTED": str(started)}
    proc = subprocess.Popen([sys.executable, "-m", "oracle", "audit", str(tmp_path / "run")], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: started.exists() or proc.poll() is not None, timeout=60, what="the subcommand's import")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == CODE[sig], out + err
    assert err == "oracle audit: interrupted\n", err
