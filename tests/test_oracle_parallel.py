"""The audit split across forked processes (``jobs``) gives exactly the serial audit, against a
real redis-server holding a damaged world; a crashing part leaves a clear error and a snapshot
marked incomplete."""
from __future__ import annotations

import json
import os
import random

import pytest
import redis

from oracle import audit
from oracle.audit import audit_run
from oracle.parallel import WorkerError, split
from oracle.store import StoreOptions
from support_oracle import ANOMALY_KINDS, TurnSpec, build_world, fill_redis, inject, write_journal


def outputs(run) -> tuple:
    out = run / "audit"
    summary = json.loads((out / "summary.json").read_text())
    for volatile in ("timings", "jobs"):
        summary.pop(volatile, None)
    summary["store"].pop("audit_seconds", None)
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


def test_parallel_audit_equals_the_serial_one_and_reaudits_from_its_parts(tmp_path, redis_server):
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
    assert meta["files"] == ["sessions.jsonl", "sessions.1.jsonl", "sessions.2.jsonl"]
    assert meta["complete"] and meta["sessions_read"] == len(world.order)
    assert not list((run / "audit").glob("*.tmp")), "part files are cleaned up"
    audit_run(run)  # from the three-part snapshot, no store
    assert outputs(run)[:3] == results[1][:3]


def test_a_crashing_part_is_reported_and_the_snapshot_marked_incomplete(tmp_path, redis_server, monkeypatch):
    world = damaged_world(sessions=30)
    fill_redis(redis.Redis.from_url(redis_server.url), world)
    run = tmp_path / "run"
    write_journal(run, world.records)

    parent = os.getpid()

    def broken(batch, *args):
        if os.getpid() != parent:  # part 0 runs in this process; the others crash in theirs
            raise RuntimeError("judge bug in a worker")
        return real(batch, *args)

    real = audit.prove_clean

    monkeypatch.setattr(audit, "prove_clean", broken)  # inherited by the forked workers
    with pytest.raises(WorkerError, match="judge bug in a worker"):
        audit_run(run, StoreOptions(url=redis_server.url, batch=5), jobs=2)
    meta = json.loads((run / "store" / "meta.json").read_text())
    assert meta["complete"] is False and "WorkerError" in meta["error"]
    assert not (run / "audit" / "anomalies.jsonl").exists()


def test_jobs_default_is_one_for_small_runs_hooks_and_other_readers():
    assert audit._jobs(None, StoreOptions(url="redis://x"), 100) == 1
    assert audit._jobs(None, StoreOptions(url="redis://x", on_batch=print), 10**6) == 1
    assert audit._jobs(4, StoreOptions(http_url="http://x/{session}"), 10**6) == 1
    assert audit._jobs(8, StoreOptions(url="redis://x", batch=1000), 2500) == 3  # never more parts than batches


def test_split_keeps_order_and_sizes():
    parts = split(list(range(10)), 3)
    assert parts == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert split([], 2) == [[], []]
