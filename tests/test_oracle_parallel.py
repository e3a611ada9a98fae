"""The audit judged by a pool of processes (``jobs``) gives exactly the audit judged in one, against
a real redis-server holding a damaged world; a judging process that dies leaves a clear error and a
snapshot marked incomplete."""
from __future__ import annotations

import json
import os
import random

import pytest
import redis

from contracts.runfolder import RunFolder
from oracle.history import Journal
from oracle import judge
from oracle.audit import WorkerError, _jobs, audit_run
from oracle.store import StoreOptions
from support_oracle import ANOMALY_KINDS, TurnSpec, build_world, fill_redis, inject, write_journal


def outputs(run) -> tuple:
    out = run / "audit"
    summary = json.loads((out / "summary.json").read_text())
    for volatile in ("timings", "jobs"):
        summary.pop(volatile, None)
    summary.get("information", {}).get("missing_keys", {}).pop("restarted_at", None)  # a reading of the live server
    return ((out / "anomalies.jsonl").read_bytes(), (out / "sessions.csv").read_bytes(),
            (out / "windows.csv").read_bytes(), summary)


def damaged_world(sessions: int = 60, seed: int = 11):
    rng = random.Random(seed)
    specs = [[TurnSpec(kind=rng.choice(["plant", "probe", "chatter"]), outcome=rng.choice(["ok", "ok", "ok", "info"]))
              for _ in range(rng.randint(1, 6))] for _ in range(sessions)]
    world = build_world(specs, seed=seed)
    for session in world.order[::3]:  # every third session damaged, every kind of damage
        inject(world, session, rng.choice(ANOMALY_KINDS), rng)
    return world


def test_parallel_audit_equals_the_serial_one_and_reaudits_from_its_snapshot(tmp_path, redis_server):
    world = damaged_world()
    fill_redis(redis.Redis.from_url(redis_server.url), world)
    results = {}
    for jobs in (1, 3):
        run = tmp_path / f"jobs-{jobs}"
        write_journal(run, world.records, shards=2)
        summary = audit_run(run, StoreOptions(url=redis_server.url, batch=7), jobs=jobs)
        assert summary["jobs"] == jobs
        results[jobs] = outputs(run)
    assert sum(summary["anomalies"].values()) > 10, "the world should be visibly damaged"
    assert results[3] == results[1]
    meta = json.loads((run / "store" / "meta.json").read_text())
    assert meta["files"] == [f"sessions.{p:02d}.jsonl" for p in range(16)] and meta["partitions"] == 16
    assert meta["complete"] and meta["sessions_read"] == len(world.order)
    assert not list((run / "audit").glob("*.tmp")), "temporary files are cleaned up"
    for jobs in (1, 2):
        audit_run(run, jobs=jobs)  # from the snapshot, no store
        assert outputs(run)[:3] == results[1][:3]


def dies(*args):
    """A judging process killed (out of memory, say): gone without a word."""
    os._exit(9)


def test_a_judging_process_that_dies_is_reported_and_the_snapshot_marked_incomplete(tmp_path, redis_server,
                                                                                     monkeypatch):
    world = damaged_world(sessions=30)
    fill_redis(redis.Redis.from_url(redis_server.url), world)
    run = tmp_path / "run"
    write_journal(run, world.records)

    monkeypatch.setattr(judge, "judge_partitions", dies)  # what the forked processes look up by name
    with pytest.raises(WorkerError, match="a judging process died"):
        audit_run(run, StoreOptions(url=redis_server.url, batch=5), jobs=2)
    meta = json.loads((run / "store" / "meta.json").read_text())
    assert meta["complete"] is False and "WorkerError" in meta["error"]
    assert not (run / "audit" / "anomalies.jsonl").exists()


def test_jobs_default_is_one_for_small_journals_hooks_and_other_readers(tmp_path):
    world = damaged_world(sessions=5)
    write_journal(tmp_path, world.records)
    journal = Journal.open(tmp_path)
    assert _jobs(None, journal, StoreOptions(url="redis://x")) == 1  # a small journal
    assert _jobs(3, journal, StoreOptions(url="redis://x")) == 3 and _jobs(99, journal, None) == 16  # partitions
    (RunFolder(tmp_path).journal / "big.jsonl").write_bytes(b"\n" * (5 << 20))
    journal = Journal.open(tmp_path)
    assert _jobs(None, journal, StoreOptions(url="redis://x")) == min(os.cpu_count() or 1, 8)
    assert _jobs(None, journal, StoreOptions(url="redis://x", on_batch=print)) == 1
    assert _jobs(None, journal, StoreOptions(http_url="http://x/{session}")) == 1


def test_judges_die_with_an_audit_killed_mid_read(tmp_path, redis_server):
    """SIGKILL to `oracle audit --jobs 2` while its judges wait on a store that stopped answering: the judges die
    with it (they were left blocked forever, holding the run's audit lock, and every later audit was refused),
    and the next audit of the run judges it."""
    import signal
    import subprocess
    import sys

    import psutil
    from conftest import wait_until
    from support_locust import REPO

    world = damaged_world(sessions=3000)
    fill_redis(redis.Redis.from_url(redis_server.url), world)
    run = tmp_path / "run"
    write_journal(run, world.records)
    server = psutil.Process(redis_server.proc.pid)
    try:
        audit = subprocess.Popen([sys.executable, "-m", "oracle", "audit", str(run), "--store-url", redis_server.url,
                                  "--jobs", "2"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        judges = wait_until(lambda: len(psutil.Process(audit.pid).children()) == 2 and
                            psutil.Process(audit.pid).children(), timeout=60, what="two judging processes")
        server.suspend()  # the judges' reads now wait (3,000 sessions: they are not done yet)
        assert audit.poll() is None, "the audit ended before its judges could be stopped"
        audit.kill()
        audit.wait(10)
        wait_until(lambda: not any(j.is_running() and j.status() != psutil.STATUS_ZOMBIE for j in judges),
                   timeout=10, what="the judges to die with the audit")
    finally:
        server.resume()
    again = subprocess.run([sys.executable, "-m", "oracle", "audit", str(run), "--store-url", redis_server.url,
                            "--jobs", "2"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "another audit" not in again.stderr, again.stderr[-2000:]
