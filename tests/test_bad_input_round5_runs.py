"""Bad input found by the fifth hunt (/tmp/hunt-input4): empty store options, a stale summary whose journal size
is unknown or changed, the rolling audit's process that never stops, a follow.log that is a directory, and a run
folder whose device fills during the load."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parent.parent
WORLDS: dict = {}


def _oracle(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oracle", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def _audited_run(tmp_path: Path, name: str) -> Path:
    from oracle.audit import audit_run
    from oracle.verdict import parse_gates
    from support_oracle import build_world, simple_specs, write_journal, write_snapshot

    world = build_world(simple_specs(4), seed=3)
    run = tmp_path / name
    write_journal(run, world.records)
    write_snapshot(run, world)
    audit_run(run, gates=parse_gates("lenient,errors=off"))
    WORLDS[run] = world
    return run


# ---- 1. an empty store option (an unset shell variable) is refused, naming it --------------------------------
@pytest.mark.parametrize("option", ["--store-url", "--http-url", "--reader"])
def test_an_empty_store_option_of_oracle_audit_is_refused_not_a_reaudit_of_the_old_snapshot(tmp_path, option):
    """`oracle audit RUN --store-url ''` (an unset $STORE_URL) silently re-judged the old snapshot: PASS, exit 0."""
    run = _audited_run(tmp_path, "run")
    for value in ("", "  "):
        done = _oracle("audit", run, option, value, "--gate", "lenient,errors=off")
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        assert option in done.stderr and "empty (an unset variable?)" in done.stderr, done.stderr
        assert "PASS" not in done.stdout
    assert _oracle("audit", run, "--gate", "lenient,errors=off").returncode in (0, 1)  # left out: the snapshot


def test_an_empty_store_url_of_a_locust_run_is_refused_on_the_command_line_and_in_a_config_file(tmp_path):
    """`locust ... --store-url ''`, or `store-url =` in a config file, never audited the store: PASS, exit 0
    (while `--gate ''` was refused). Now it stops before any load, exit 2, naming the option."""
    from support_locust import CHATFILE, LOCUST

    conf = tmp_path / "bot.conf"
    conf.write_text("store-url =\n")
    for extra in (["--store-url", ""], ["--http-url", " "], ["--reader", ""], ["--config", str(conf)]):
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        done = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "-u", "1", "-t", "2s", "--host",
                               "http://127.0.0.1:9", "--run-dir", str(run), *extra], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 2, (extra, said[-3000:])
        assert "empty (an unset variable?)" in said and ("--store-url" in said or extra[0] in said), said[-2000:]
        assert not run.exists()


# ---- 6. a summary whose journal size is unknown, or differs from the journal's -----------------------------
def _edit_summary(run: Path, change) -> None:
    path = run / "audit" / "summary.json"
    summary = json.loads(path.read_text())
    change(summary)
    path.write_text(json.dumps(summary))


def _append_failed_turn(run: Path) -> None:
    with open(next((run / "journal").glob("*.jsonl")), "a") as shard:
        shard.write(json.dumps({**WORLDS[run].records[0], "turn": 99}) + "\n")


def test_a_summary_audited_before_its_journal_shrank_or_with_a_damaged_size_is_no_verdict(tmp_path, capsys):
    """journal.bytes as a string skipped the "grown since" check (report and compare kept the stale PASS), and a
    journal that shrank since its audit was accepted."""
    from oracle import compare, report

    base = _audited_run(tmp_path, "base")
    text = _audited_run(tmp_path, "text")
    _edit_summary(text, lambda s: s["journal"].__setitem__("bytes", str(s["journal"]["bytes"])))
    _append_failed_turn(text)
    shrunk = _audited_run(tmp_path, "shrunk")
    shard = next((shrunk / "journal").glob("*.jsonl"))
    shard.write_bytes(b"".join(shard.read_bytes().splitlines(keepends=True)[:-3]))  # lines lost since the audit
    capsys.readouterr()
    assert report.main([str(text), "--quiet"]) == 2
    assert compare.main([str(base), str(text)]) == 2
    said = capsys.readouterr()
    assert "$.journal.bytes" in said.err + said.out and "not a whole number" in said.err + said.out
    assert report.main([str(shrunk), "--quiet"]) == 2
    assert compare.main([str(base), str(shrunk)]) == 2
    said = capsys.readouterr()
    assert "the journal has shrunk since this audit" in said.err + said.out
    assert "Put the whole journal back" in said.err + said.out
    other = _audited_run(tmp_path, "other")
    assert compare.main([str(other), str(base)]) in (0, 1)  # an unchanged journal: its verdict


def test_a_summary_that_does_not_record_its_journal_size_is_warned_about(tmp_path, capsys):
    """A summary of an older goldfish (no journal.bytes): whether its journal changed since cannot be told; it
    was silently taken as the run's verdict. Now the report and the comparison say so."""
    from oracle import compare, report

    base = _audited_run(tmp_path, "base")
    old = _audited_run(tmp_path, "old")
    _edit_summary(old, lambda s: s.pop("journal"))
    _append_failed_turn(old)
    capsys.readouterr()
    assert report.main([str(old)]) == 0
    said = capsys.readouterr()
    assert "does not record the size of the journal it judged" in said.out + said.err
    compare.main([str(base), str(old)])
    said = capsys.readouterr()
    assert "does not record the size of the journal it judged" in said.out + said.err


# ---- 5. the rolling audit's process that never stops; a follow.log that is a directory ------------------------
def _start_locust(tmp_path: Path, host: str, run: Path, *extra, time_s: str = "4s", **popen):
    from support_locust import locust_cmd

    (run / "locust").mkdir(parents=True, exist_ok=True)
    out = open(tmp_path / f"{run.name}.out", "w+")
    proc = subprocess.Popen(locust_cmd(host, run, *extra, users=2, rate=2, time_s=time_s), cwd=tmp_path,
                            stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True, **popen)
    return proc, out


def _finish(proc, out, timeout: float) -> str:
    from support_locust import finish

    try:
        finish(proc, timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out.seek(0)
    return out.read()


def _start_with_follower(tmp_path, url, run, redis_server):
    """A 5 s Locust run with a rolling audit every second: (its process, its output, the rolling audit's pid)."""
    import re

    from support_locust import quick_script

    started = time.monotonic()
    proc, out = _start_locust(tmp_path, url, run, "--script", quick_script(tmp_path), "--think", "0.05",
                              "--store-url", redis_server.url, "--audit-every", "1s", "--settle", "0", time_s="5s")
    pid = None
    while pid is None and time.monotonic() - started < 30 and proc.poll() is None:
        out.seek(0)
        found = re.search(r"rolling audit: every 1s \(pid (\d+)", out.read())
        pid = int(found.group(1)) if found else None
        time.sleep(0.1)
    assert pid is not None, out.read()
    return proc, out, pid


def test_a_rolling_audit_that_never_stops_is_killed_after_a_bounded_wait_and_said(tmp_path, redis_server):
    """The follower frozen (SIGSTOP) during the load: the run sat in settle, without a word, until a CI timeout
    killed it. Now it waits a bounded time, kills the follower, says so with its pid, and the run ends."""
    from locustfiles.endofrun import FOLLOWER_STOP_S
    from support_locust import chat_bot

    run = tmp_path / "run"
    with chat_bot("memory") as url:
        started = time.monotonic()
        proc, out, pid = _start_with_follower(tmp_path, url, run, redis_server)
        os.kill(pid, signal.SIGSTOP)
        try:
            said = _finish(proc, out, timeout=FOLLOWER_STOP_S + 60)
        finally:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert f"the rolling audit (pid {pid}) did not stop within" in said, said[-3000:]
    assert "killed" in said
    record = json.loads((run / "run.json").read_text())
    assert record["phase"] == "done" and record["exit_code"] == proc.returncode, record
    assert time.monotonic() - started < FOLLOWER_STOP_S + 50


def test_a_rolling_audit_that_died_during_the_load_is_said(tmp_path, redis_server):
    """The follower killed during the load (a traceback, an OOM kill): nothing said it, and the run's progress
    stopped there without a word (soak hunt 18). The end of the run says it, and the run ends as without it."""
    from support_locust import chat_bot

    run = tmp_path / "run"
    with chat_bot("memory") as url:
        proc, out, pid = _start_with_follower(tmp_path, url, run, redis_server)
        os.kill(pid, signal.SIGKILL)
        said = _finish(proc, out, timeout=120)
    assert f"the rolling audit (pid {pid}) ended during the run by signal 9" in said, said[-3000:]
    record = json.loads((run / "run.json").read_text())  # the run ended all the same (this bot keeps no store)
    assert record["phase"] == "done" and record["exit_code"] == proc.returncode, record


def test_a_follow_log_that_is_a_directory_stops_the_test_at_once_with_a_message(tmp_path, redis_server):
    """A run folder made beforehand whose follow.log is a directory: an IsADirectoryError traceback, the load ran
    all the same, then "NO VERDICT, exit code 2". Now one message names the file and the test stops at once."""
    from support_locust import chat_bot, quick_script

    run = tmp_path / "run"
    (run / "follow.log").mkdir(parents=True)
    with chat_bot("memory") as url:
        proc, out = _start_locust(tmp_path, url, run, "--script", quick_script(tmp_path), "--store-url",
                                  redis_server.url, "--audit-every", "1s", "--settle", "0", time_s="30s")
        said = _finish(proc, out, timeout=60)
    assert proc.returncode == 2, said[-3000:]
    assert "Traceback" not in said and "IsADirectoryError" not in said, said[-3000:]
    assert f"cannot write the rolling audit's log {run / 'follow.log'}: Is a directory" in said, said[-3000:]
    assert "this test is stopped at once" in said
    assert json.loads((run / "run.json").read_text())["exit_code"] == 2


# ---- 4. the run folder's device fills during the load -------------------------------------------------------
def _check_stopped_cleanly(said: str, code: int, run: Path, recorded: bool) -> None:
    assert code == 3, said[-4000:]
    assert said.count("Traceback") == 0, said[-4000:]
    assert said.count("error: cannot write the journal ") == 1, said[-4000:]  # once, naming the shard
    assert "this test is stopped at once" in said
    assert f"{run}: NO VERDICT, exit code 3" in said, said[-3000:]
    assert "exit code None" not in said and "Locust's own" not in said
    if recorded:
        record = json.loads((run / "run.json").read_text())
        assert record["phase"] == "done" and record["exit_code"] == 3, record


def test_a_journal_that_cannot_be_written_during_the_load_stops_the_test_once_with_exit_code_3(tmp_path):
    """A file-size limit reached by the journal (EFBIG, as a full disk's ENOSPC): every user raised the error at
    every turn, the load went on, and the run ended with two contradicting exit codes, run.json in phase load."""
    import resource

    from support_locust import chat_bot, quick_script

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))  # the journal outgrows it; run.json does not

    run = tmp_path / "run"
    with chat_bot("memory") as url:
        started = time.monotonic()
        proc, out = _start_locust(tmp_path, url, run, "--script", quick_script(tmp_path), "--think", "0",
                                  "--telemetry-interval", "0", time_s="60s", preexec_fn=limit)
        said = _finish(proc, out, timeout=90)
    assert time.monotonic() - started < 50, said[-2000:]  # stopped at the error, not at -t 60s
    _check_stopped_cleanly(said, proc.returncode, run, recorded=True)
    assert "File too large" in said


def test_a_full_disk_during_the_load_stops_the_test_once(tmp_path):
    """The hunt's case f04: the run folder on a small tmpfs that fills during the load (needs root to mount)."""
    from support_locust import chat_bot, quick_script

    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mount)], capture_output=True,
                      timeout=30).returncode != 0:
        pytest.skip("cannot mount a tmpfs (not root?)")
    try:
        run = mount / "run"
        with chat_bot("memory") as url:
            started = time.monotonic()
            proc, out = _start_locust(tmp_path, url, run, "--script", quick_script(tmp_path), "--think", "0",
                                      "--telemetry-interval", "0", "--json-file", tmp_path / "stats",
                                      time_s="60s")  # Locust's own stats file off the full device
            said = _finish(proc, out, timeout=90)
        assert time.monotonic() - started < 50, said[-2000:]
        _check_stopped_cleanly(said, proc.returncode, run, recorded=False)
        assert "No space left on device" in said
        assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]  # no write left its temporary behind
        if "cannot update" not in said:  # room left for run.json: it records the end
            record = json.loads((run / "run.json").read_text())
            assert record["phase"] == "done" and record["exit_code"] == 3, record
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


# ---- 3. a key given twice in a Locust config file ----------------------------------------------------------
def test_a_config_file_giving_an_option_twice_is_refused_naming_both_lines(tmp_path):
    """`store-url` twice in a config file: Locust silently used the last one (g10)."""
    from support_locust import CHATFILE, LOCUST

    conf = tmp_path / "bot.conf"
    conf.write_text("# the store\nstore-url = redis://127.0.0.1:1/0\nlabel = v1\nstore-url = redis://127.0.0.1:2/0\n")
    run = tmp_path / "run"
    done = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "-u", "1", "-t", "2s", "--host", "http://127.0.0.1:9",
                           "--run-dir", str(run), "--config", str(conf)], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert f"{conf}: store-url is given twice (lines 2 and 4)" in said, said[-3000:]
    assert not run.exists()


# ---- 2. an empty item in --gate ----------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [",", "lenient,", ",lenient", "lenient,,errors=5", "lenient, "])
def test_an_empty_item_in_gate_is_refused_as_an_empty_gate_is(tmp_path, spec):
    """`--gate ','` and `--gate 'lenient,'` were taken (the empty item dropped) while `--gate ''` was refused."""
    from types import SimpleNamespace

    from oracle.options import OptionError, gates

    with pytest.raises(OptionError, match="an empty item"):
        gates(SimpleNamespace(gate=spec))
    assert gates(SimpleNamespace(gate="lenient,errors=5")).spec  # items all given: taken
    run = _audited_run(tmp_path, "run")
    done = _oracle("audit", run, "--gate", spec)
    assert done.returncode == 2 and "--gate" in done.stderr and "an empty item" in done.stderr, done.stderr
