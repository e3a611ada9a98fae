"""Verdict hunt 12: exit codes a CI could not trust, in real Locust runs.

- distributed_master_busy_in_audit_143 / distributed_slow_audit_143: a master busy in its settle/audit answered no
  heartbeat, its workers left (goldfish's MasterWatch, 10 s), Locust said "The last worker quit", quit the runner,
  and goldfish took that quit for a SIGTERM: 143 "SIGTERM during settle", no verdict, with no signal sent. Workers
  leaving after the load (their journals drained before the settle) must not stop the run; a real SIGTERM still does.
- report_write_fails_fail_becomes_3: a FAIL whose report.html could not be written exited 3 (`oracle audit` of the
  same folder: 1); a finding stands. M1: the end line said "the store was not judged" of a judged run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import free_port, wait_until
from support_locust import _kill_group, chat_bot, finish, locust_cmd
from test_locust_distributed import start_workers


def http_store(url):
    return ("--http-url", f"{url}/history/{{session}}", "--role-field", "role", "--content-field", "content")


def run_json(run_dir):
    try:
        return json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def start_master(url, run_dir, port, *extra, users=4, time_s="6s"):
    """A headless master on loopback, expecting 2 workers, its output in files (INFO: Locust's own lines too)."""
    (run_dir / "locust").mkdir(parents=True, exist_ok=True)
    cmd = locust_cmd(url, run_dir, "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                     "--master-bind-port", str(port), "--think", "0.05", *http_store(url), *extra, "--loglevel",
                     "INFO", users=users, rate=users, time_s=time_s)
    out, err = open(run_dir.parent / "master.out", "w"), open(run_dir.parent / "master.err", "w")
    return subprocess.Popen(cmd, cwd=run_dir.parent, stdout=out, stderr=err, text=True, start_new_session=True)


def master_output(run_dir):
    return (run_dir.parent / "master.out").read_text() + (run_dir.parent / "master.err").read_text()


def wait_master(master, run_dir, timeout=120):
    try:
        master.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill_group(master)
        raise AssertionError(f"the master did not finish in {timeout}s:\n{master_output(run_dir)[-4000:]}")
    return master.returncode, master_output(run_dir)


def in_settle(run_dir):
    return run_json(run_dir).get("phase") == "settle"


def wait_gone(procs, timeout, what):
    wait_until(lambda: all(p.poll() is not None for p in procs), timeout=timeout, what=what)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["workers-stopped", "master-frozen", "step-shape"])
def test_workers_leaving_after_the_load_do_not_take_the_verdict(tmp_path, how):
    """``workers-stopped``: both workers SIGTERMed in the master's settle (a CI tearing them down once the load is
    over) with a bot that forgets: FAIL 1. ``master-frozen``: the master's event loop does not run for as long as its
    workers wait for a heartbeat (SIGSTOP in its settle, standing in for a CPU-bound audit on a busy box, until both
    workers have quit on their own), then runs again: PASS 0. Both ended 143 "SIGTERM during settle", no verdict.
    ``step-shape``: the workers stopped so in a run of goldfish's step shape, whose greenlet stops the test, and so
    ends the run, in the runner's group that Locust's quit kills: PASS 0."""
    port, run_dir = free_port(), tmp_path / "run"
    mode, settle, expected = {"workers-stopped": ("forget", "8s", 1), "master-frozen": ("memory", "25s", 0),
                              "step-shape": ("memory", "8s", 0)}[how]
    steps = ("--step-users", "2", "--steps", "2", "--step-duration", "3s") if how == "step-shape" else ()
    with chat_bot(mode) as url:
        master = start_master(url, run_dir, port, "--settle", settle, *steps, time_s="60s" if steps else "6s")
        workers = start_workers(2, port, tmp_path)
        try:
            wait_until(lambda: in_settle(run_dir), timeout=60, interval=0.05, what="the master's settle")
            if how in ("workers-stopped", "step-shape"):
                for w in workers:
                    os.killpg(w.pid, signal.SIGTERM)
                wait_gone(workers, 30, "the workers to quit")
            else:
                os.killpg(master.pid, signal.SIGSTOP)
                try:
                    wait_gone(workers, 40, "the workers to quit on their own (no heartbeat from the master)")
                finally:
                    os.killpg(master.pid, signal.SIGCONT)
            code, output = wait_master(master, run_dir)
        finally:
            for p in [master, *workers]:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGCONT)
                _kill_group(p)
    assert "The last worker quit" in output, output[-3000:]
    assert "SIGTERM during" not in output and code == expected, output[-3000:]
    meta = run_json(run_dir)
    assert "interrupted" not in meta and meta["exit_code"] == expected and meta["phase"] == "done", meta
    verdict = json.loads((run_dir / "audit" / "summary.json").read_text())["verdict"]["result"]
    assert verdict == ("pass" if expected == 0 else "fail")
    assert f"goldfish: {verdict.upper()}" in output or f"{verdict.upper()} —" in output, output[-3000:]
    journal = sorted((run_dir / "journal").glob("*.jsonl"))  # both workers' journals were drained before the settle
    assert len(journal) == 2 and all(s.read_bytes() == (run_dir / "workers" / s.name).read_bytes() for s in journal)


@pytest.mark.slow
def test_a_sigterm_after_the_workers_left_still_stops_the_run(tmp_path):
    """The workers leave in the settle (not a signal: the master waits for its verdict), then a real SIGTERM comes:
    it stops the run there, 143, recorded with the time it was sent (it was recorded when the workers left)."""
    port, run_dir = free_port(), tmp_path / "run"
    with chat_bot("memory") as url:
        master = start_master(url, run_dir, port, "--settle", "20s")
        workers = start_workers(2, port, tmp_path)
        try:
            wait_until(lambda: in_settle(run_dir), timeout=60, interval=0.05, what="the master's settle")
            for w in workers:
                os.killpg(w.pid, signal.SIGTERM)
            wait_gone(workers, 30, "the workers to quit")
            wait_until(lambda: "The last worker quit" in master_output(run_dir), timeout=10, what="the master told")
            with pytest.raises(AssertionError):  # the interruption Locust's quit used to record (0.5 s after)
                wait_until(lambda: "interrupted" in run_json(run_dir), timeout=3, what="no interruption")
            assert master.poll() is None and in_settle(run_dir), master_output(run_dir)[-3000:]
            sent = time.time()
            os.kill(master.pid, signal.SIGTERM)
            code, output = wait_master(master, run_dir, timeout=60)
        finally:
            for p in [master, *workers]:
                _kill_group(p)
    assert code == 143 and "SIGTERM during settle" in output, output[-3000:]
    interrupted = run_json(run_dir)["interrupted"]
    assert interrupted["signal"] == "SIGTERM" and interrupted["phase"] == "settle" and interrupted["time"] >= sent


@pytest.mark.slow
@pytest.mark.parametrize("mode,verdict,expected", [("forget", "FAIL", 1), ("memory", "PASS", 3)])
def test_a_report_that_cannot_be_written_leaves_the_finding_its_exit_code(tmp_path, mode, verdict, expected):
    """report.html cannot be written (here a folder in its place; a full disk in the hunt): a FAIL stays 1, as
    `oracle audit` of the folder says ("the verdict and exit code stand"); a PASS is 3, the report failed (documented).
    The end line says the report failed, not that the store was not judged (it was: summary.json has the verdict)."""
    run_dir = tmp_path / "run"
    (run_dir / "locust").mkdir(parents=True)
    with chat_bot(mode) as url:
        cmd = locust_cmd(url, run_dir, "--think", "0.05", "--settle", "1s", *http_store(url), users=4, rate=4,
                         time_s="4s")
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            wait_until(lambda: run_json(run_dir).get("phase") == "load", timeout=60, what="the load")
            (run_dir / "report.html").mkdir()  # what render_report writes cannot replace it
            out, err = finish(proc, 120)
        finally:
            _kill_group(proc)
    output = out + err
    assert "report FAILED" in output, output[-3000:]
    assert proc.returncode == expected, output[-3000:]
    assert json.loads((run_dir / "audit" / "summary.json").read_text())["verdict"]["result"] == verdict.lower()
    end = [line for line in output.splitlines() if line.startswith(f"goldfish: {run_dir}:")]
    assert end and end[-1].startswith(f"goldfish: {run_dir}: {verdict}, exit code {expected} — no report.html"), end
    assert "the report could not be written" in end[-1] and "not judged" not in end[-1], end
    assert run_json(run_dir)["exit_code"] == expected
