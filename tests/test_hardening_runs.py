"""#16 end to end, with real Locust runs: what only a real run can show (the rest is in test_bad_input.py).

- a store that cannot be reached stops the run at init, exit 2, before any user spawns;
- no credential given to goldfish reaches anything it writes or prints; a master binds loopback;
- workers stop when their master is gone (within distributed.MASTER_GONE_S);
- a process killed mid-first-turn leaves its session in the journal: the stored turn is `info`.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest

from oracle.verdict import NOTHING_ACKNOWLEDGED
from conftest import free_port, wait_until
from support_locust import (CHATFILE, LOCUST, LocustRun, _kill_group, chat_bot, locust_cmd, quick_script,
                            run_locust)


def test_an_unreachable_store_exits_2_before_any_user_spawns(tmp_path):
    bot_log = tmp_path / "bot.log"
    with chat_bot("memory", log=bot_log) as url:
        run = run_locust(url, tmp_path / "run", "--store-url", f"redis://:s3cr3t@127.0.0.1:{free_port()}/0",
                         time_s="3s")
    assert run.returncode == 2, run.output[-2000:]
    assert "--store-url 'redis://:***@127.0.0.1:" in run.output and "cannot reach the store" in run.output
    assert "s3cr3t" not in run.output
    assert not bot_log.exists() or bot_log.read_text() == ""  # no turn was sent
    assert not list((tmp_path / "run").glob("journal/*.jsonl"))


def test_a_run_folder_that_cannot_be_written_exits_2_naming_the_option(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with chat_bot("memory") as url:
        done = subprocess.run(locust_cmd(url, tmp_path / "file" / "run", time_s="2s"), cwd=tmp_path, text=True,
                              capture_output=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-2000:]
    assert f"--run-dir {tmp_path / 'file' / 'run'}: cannot write the run folder" in output
    assert "Traceback" not in output


def test_a_run_folder_that_holds_a_run_is_refused_never_mixed_with_the_next(tmp_path):
    """A CI script with a fixed --run-dir: the second run would add its journal to the first's and be judged
    with it (a dead bot could PASS on the first run's turns). It is refused at init, and the first run's
    folder is left as it was."""
    with chat_bot("memory") as url:
        first = run_locust(url, tmp_path / "run", time_s="2s")
        assert first.returncode == 0, first.output[-2000:]
        before = sorted(p.name for p in (tmp_path / "run" / "journal").iterdir())
        run_json = (tmp_path / "run" / "run.json").read_bytes()
        second = run_locust(url, tmp_path / "run", time_s="2s")
    assert second.returncode == 2, second.output[-2000:]
    assert f"--run-dir {tmp_path / 'run'} already holds a run" in second.output
    assert sorted(p.name for p in (tmp_path / "run" / "journal").iterdir()) == before
    assert (tmp_path / "run" / "run.json").read_bytes() == run_json
    left = tmp_path / "left" / "audit"  # only an audit left behind (run.json and journal removed): taken for the
    left.mkdir(parents=True)            # verdict of whatever ran there next, a dead bot's run included
    (left / "summary.json").write_text('{"verdict": {"result": "pass"}}')
    with chat_bot("memory") as url:
        third = run_locust(url, tmp_path / "left", time_s="2s")
    assert third.returncode == 2 and f"--run-dir {tmp_path / 'left'} already holds a run" in third.output


def test_a_run_folder_that_cannot_be_created_stops_the_load_at_once(tmp_path):
    """/proc refuses a folder even to root (the init check, by permissions, cannot see it): the test stops
    at once, no turn is sent, one line names the option, exit 2, no traceback."""
    bot_log = tmp_path / "bot.log"
    with chat_bot("memory", log=bot_log) as url:
        cmd = [LOCUST, "-f", CHATFILE, "--headless", "-u", "4", "-r", "4", "-t", "3s", "--host", url,
               "--run-dir", "/proc/goldfish-cannot-be-here", "--loglevel", "WARNING"]
        done = subprocess.run(cmd, cwd=tmp_path, text=True, capture_output=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-2000:]
    assert "--run-dir /proc/goldfish-cannot-be-here: cannot write the run folder" in output
    assert "Traceback" not in output and "see the error above" in output
    assert not bot_log.exists() or bot_log.read_text() == ""  # no turn was sent


def listening_addresses(port: int) -> set[str]:
    """Local addresses of TCP sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:
                found.add(address)
    return found


@pytest.mark.slow
def test_no_credential_reaches_what_goldfish_writes_or_prints_and_the_master_binds_loopback(tmp_path):
    """--host with userinfo, a history URL with a password holding '@' and a password-like query parameter,
    a header value: none of them in run.json, audit/summary.json, store/meta.json, report.html or the output."""
    port = free_port()
    run_dir = tmp_path / "run"
    (run_dir / "locust").mkdir(parents=True)
    with chat_bot("memory") as url:
        host = url.replace("http://", "http://alice:h0st-s3cr3t@")
        history = url.replace("http://", "http://bob:p@ss-s3cr3t@") + "/history/{session}?api_key=q-s3cr3t&v=1"
        cmd = locust_cmd(host, run_dir, "--processes", "1", "--master-bind-port", port, "--master-port", port,
                         "--script", quick_script(tmp_path), "--http-url", history, "--role-field", "role",
                         "--content-field", "content", "--header", "Authorization: Bearer hdr-s3cr3t", "--settle", "0",
                         users=2, time_s="4s")
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            addresses = wait_until(lambda: listening_addresses(port), timeout=30, what="the master listening")
            out, err = proc.communicate(timeout=120)
        finally:
            _kill_group(proc)
    assert addresses == {"0100007F"}, addresses  # 127.0.0.1 only, not every interface
    assert proc.returncode == 0, (out + err)[-3000:]
    written = {p: p.read_text(errors="replace") for p in [run_dir / "run.json", run_dir / "audit" / "summary.json",
                                                         run_dir / "store" / "meta.json", run_dir / "report.html"]}
    for text in [*written.values(), out + err]:
        for secret in ("h0st-s3cr3t", "ss-s3cr3t", "q-s3cr3t", "hdr-s3cr3t"):
            assert secret not in text
    meta = json.loads(written[run_dir / "run.json"])
    assert meta["target"].startswith("http://alice:***@127.0.0.1:")
    assert meta["options"]["store"]["http_url"].startswith("http://bob:***@127.0.0.1:")
    assert meta["options"]["store"]["http_url"].endswith("/history/{session}?api_key=***&v=1")
    assert meta["options"]["headers"] == {"Authorization": "***"}
    assert json.loads(written[run_dir / "store" / "meta.json"])["url"] == meta["options"]["store"]["http_url"]


@pytest.mark.slow
def test_a_worker_stops_when_its_master_is_killed(tmp_path):
    from locustfiles.distributed import MASTER_GONE_S

    port = free_port()
    run_dir = tmp_path / "run"
    (run_dir / "locust").mkdir(parents=True)
    with chat_bot("memory") as url:
        master = subprocess.Popen(
            locust_cmd(url, run_dir, "--master", "--expect-workers", "1", "--master-bind-port", port, "--think", "0.1",
                       users=4, time_s="120s"), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        (tmp_path / "w").mkdir()
        worker = subprocess.Popen([LOCUST, "-f", CHATFILE, "--worker", "--master-port", str(port), "--loglevel", "INFO"],
                                  cwd=tmp_path / "w", stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "w" / "worker.log", "wb"), start_new_session=True)
        try:
            shard = lambda: next((run_dir / "workers").glob("*.jsonl"), None)  # noqa: E731
            wait_until(lambda: shard() and shard().stat().st_size > 2000, timeout=60, what="the worker journaling")
            os.killpg(master.pid, signal.SIGKILL)
            master.wait(10)
            killed = time.monotonic()
            worker.wait(MASTER_GONE_S + 20)
            gone_after = time.monotonic() - killed
            size = shard().stat().st_size
            time.sleep(1)
            assert shard().stat().st_size == size  # it sends nothing more
        finally:
            _kill_group(master)
            _kill_group(worker)
    log = (tmp_path / "w" / "worker.log").read_text()
    assert MASTER_GONE_S - 2 <= gone_after <= MASTER_GONE_S + 15, (gone_after, log[-2000:])
    assert "no heartbeat from the master" in log, log[-2000:]


@pytest.mark.slow
def test_a_first_turn_in_flight_when_locust_is_killed_is_journaled_and_audited_as_info(tmp_path):
    """The bot receives every user's first turn, Locust is SIGKILLed before any answer, the bot stores the
    turns afterwards: every session is in the journal, and the stored turns are indeterminate (info)."""
    from oracle.audit_cli import main as audit

    run_dir = tmp_path / "run"
    bot_log = tmp_path / "bot.log"
    users = 3
    with chat_bot("slow", delay=3.0, log=bot_log) as url:
        (run_dir / "locust").mkdir(parents=True)
        proc = subprocess.Popen(locust_cmd(url, run_dir, "--script", quick_script(tmp_path), users=users, rate=users,
                                           time_s="60s"), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_until(lambda: bot_log.exists() and len(bot_log.read_text().splitlines()) == users, timeout=60,
                       what="every user's first turn at the bot")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            received = {line.split("]")[0].lstrip("[") for line in bot_log.read_text().splitlines()}
            run = LocustRun(subprocess.CompletedProcess([], -9, "", ""), run_dir, run_dir / "none")
            assert {r["token"] for r in run.raw_records()} == received  # each one journaled before it left
            assert {r["outcome"] for r in run.records()} == {"info"}

            def stored(session: str) -> int:  # the bot stores each turn once its delay is over
                with urllib.request.urlopen(f"{url}/history/{session}", timeout=5) as response:
                    return len(json.loads(response.read())["messages"])
            wait_until(lambda: all(stored(r["session"]) == 2 for r in run.raw_records()), timeout=30,
                       what="the bot storing every first turn")
            # nothing was acknowledged: nothing measured, and the run was killed in its load (run.json has no end):
            # not trusted (3), as for any run cut short that measured nothing; never a PASS
            assert audit([str(run_dir), "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                          "--content-field", "content", "--jobs", "1"]) == 3
        finally:
            _kill_group(proc)
    summary = json.loads((run_dir / "audit" / "summary.json").read_text())
    assert summary["sessions"] == users and summary["turns"]["info"] == users
    assert summary["turns"]["info_stored"] == users and summary["anomalies"] == {}
    assert summary["verdict"]["failed"] == [NOTHING_ACKNOWLEDGED]


@pytest.mark.parametrize("host, fragment", [
    (None, "no target: give --host URL"),
    ("http://127.0.0.1:99999", "is not a URL: Port out of range"),
    ("127.0.0.1:8000", "is not an http:// or https:// URL with a host name"),
    ("ftp://127.0.0.1:8000", "is not an http:// or https:// URL with a host name"),
    ("http://127.0.0.1:8000?key=1", "holds a query or a fragment"),  # every turn went to /?key=1/chat: 404
    ("http://127.0.0.1:8000/#top", "holds a query or a fragment"),
])
def test_a_target_no_turn_can_reach_stops_the_run_at_init(host, fragment, tmp_path):
    """Found only after the load before: a traceback from Locust per user, thousands of exceptions in the users,
    or a whole run of refused turns. Now one line naming --host and exit 2, before any run folder."""
    cmd = [LOCUST, "-f", CHATFILE, "--headless", "-u", "2", "-r", "2", "-t", "2s", "--run-dir", str(tmp_path / "run"),
           "--loglevel", "WARNING"] + (["--host", host] if host else [])
    done = subprocess.run(cmd, cwd=tmp_path, text=True, capture_output=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-2000:]
    assert fragment in output and "Traceback" not in output
    assert not (tmp_path / "run").exists()


SAME_SECOND = """
from gevent import monkey; monkey.patch_all()
import sys, types
from pathlib import Path
from locustfiles import endofrun, hooks
taken = Path(sys.argv[1])
settings = types.SimpleNamespace(run_dir=str(taken), label="dev")
hooks._check_run_dir(settings, given=False)  # not a folder the user named: no SystemExit
try:
    hooks._check_run_dir(settings, given=True)
    sys.exit("a --run-dir that holds a run was not refused")
except SystemExit as exc:
    assert exc.code == 2, exc.code
endofrun.default_run_dir = lambda label: str(taken)
end = endofrun.EndOfRun.__new__(endofrun.EndOfRun)
end.run_dir_option, end.runs = "", []
print(end.next_run_dir(settings), end.next_run_dir(settings))
"""


def test_two_jobs_started_the_same_second_without_run_dir_get_two_folders(tmp_path):
    """Both computed results/<second>-dev; the second was refused "--run-dir ... already holds a run" (exit 2) for an
    option nobody gave (verdict hunt 11). The default name of a folder that holds a run is passed over at the test's
    start, and the folder a test takes is made at once, so another job cannot take it too."""
    taken = tmp_path / "results" / "20261127T101259Z-dev"
    (taken / "journal").mkdir(parents=True)
    (taken / "run.json").write_text("{}")
    done = subprocess.run([os.sys.executable, "-c", SAME_SECOND, str(taken)], capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split()[-2:] == [f"{taken}-2", f"{taken}-3"], done.stdout
    assert (tmp_path / "results" / f"{taken.name}-2").is_dir()
