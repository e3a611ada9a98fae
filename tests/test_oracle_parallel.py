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


def journal_with_damage(run, rng: random.Random, shards: int) -> None:
    """A journal over ``shards`` files with garbage, blank and unknown-outcome lines anywhere,
    and on some shards a torn or a complete-but-bad last line."""
    world = damaged_world(sessions=40, seed=rng.randrange(1000))
    folder = run / "journal"
    folder.mkdir(parents=True)
    files = [[] for _ in range(shards)]
    for i, record in enumerate(world.records):
        files[rng.randrange(shards)].append(json.dumps(record) + "\n")
        if rng.random() < 0.05:
            files[rng.randrange(shards)].append(rng.choice(
                ["garbage\n", "\n", json.dumps(dict(record, outcome="maybe")) + "\n", '{"session": "x"}\n']))
    for k, lines in enumerate(files):
        if rng.random() < 0.5:  # a value msgpack cannot carry between the processes
            lines.insert(rng.randrange(len(lines) + 1), json.dumps(dict(world.records[0], status=2 ** 70)) + "\n")
        ending = rng.choice(["", '{"run": "r", "sess', "not json at all\n"])
        (folder / f"local-{k}.jsonl").write_text("".join(lines) + ending)


@pytest.mark.parametrize("seed", range(12))
def test_a_journal_loaded_by_several_processes_is_the_journal_loaded_by_one(tmp_path, monkeypatch, seed):
    from oracle import history
    rng = random.Random(seed)
    journal_with_damage(tmp_path, rng, shards=rng.randint(1, 3))
    serial = history.load_journal(tmp_path)
    assert serial.problems, "the journal should have bad lines to report"
    monkeypatch.setattr(history, "PARALLEL_MIN_BYTES", 0)  # inherited by the forked parts
    for jobs in (2, 3, 5):
        parallel = history.load_journal(tmp_path, jobs=jobs)
        assert parallel.sessions == serial.sessions
        assert (parallel.problems, parallel.lines, parallel.run) == (serial.problems, serial.lines, serial.run)


def test_journal_parts_cut_at_line_starts_cover_every_byte_once(tmp_path):
    from oracle.history import _plan
    shards = []
    for k, text in enumerate(["a\nbb\nccc\n", "", "dddd\ne", "f\n" * 9]):
        shards.append(tmp_path / f"s{k}.jsonl")
        shards[-1].write_text(text)
    sizes = [p.stat().st_size for p in shards]
    for jobs in range(1, 8):
        parts = _plan(shards, sizes, jobs)
        assert 1 <= len(parts) <= jobs
        ranges = [r for part in parts for r in part]
        for i, size in enumerate(sizes):
            mine = [(start, end) for j, start, end in ranges if j == i]
            assert [b for a, b in mine[:-1]] == [a for a, b in mine[1:]]  # contiguous, in order
            assert (mine[0][0], mine[-1][1]) == (0, size) if size else mine == []
            data = shards[i].read_bytes()
            assert all(start == 0 or data[start - 1:start] == b"\n" for start, _ in mine)
