"""Store and process telemetry: the sampler against a real redis-server (also a stalled one), real
Locust runs (local, and a master with a worker) writing telemetry.jsonl, the report's chart of it,
and the stack's --maxmemory flags."""
from __future__ import annotations

import json
import signal
import time

from types import SimpleNamespace

import gevent
import pytest

from conftest import wait_until
from contracts.runfolder import RunFolder
from locustfiles import telemetry as sampler
from oracle import report, telemetry
from support_locust import chat_bot, locust_cmd, run_locust
from support_refbot import refbot_cli, running_stack
from support_report import T0, synthetic


@pytest.fixture
def local_runner():
    """What the sampler reads of a LocalRunner (importing locust here would monkey-patch pytest's process;
    the real runners are exercised by the Locust runs below)."""
    return SimpleNamespace(user_count=3)


def poll(condition, timeout: float = 15.0) -> bool:
    """Poll while letting greenlets run (the sampler is one; this process is not monkey-patched)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        gevent.sleep(0.02)
    return bool(condition())


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in RunFolder(run_dir).telemetry.read_text().splitlines()]


def test_sampler_writes_store_info_and_rss_on_a_grid_until_stopped(tmp_path, redis_server, local_runner):
    client = redis_server.client()
    client.set("a", "1")
    client.set("b", "2", ex=600)
    s = sampler.Sampler(tmp_path, local_runner, redis_server.url, interval=0.1)
    assert poll(lambda: s.samples >= 3), f"only {s.samples} samples"
    s.stop()
    got = records(tmp_path)
    assert len(got) == s.samples >= 3
    first = got[0]
    assert first["rss"]["local"] > 10 * 1024 * 1024  # this pytest process: real RSS, in bytes
    assert first["store_error"] is None and first["store_ms"] >= 0
    store = first["store"]
    assert store["keyspace"] == {"db0": {"keys": 2, "expires": 1}}
    assert store["maxmemory_policy"] == "noeviction" and store["used_memory"] > 0
    for field in ("evicted_keys", "expired_keys", "connected_clients", "rejected_connections",
                  "instantaneous_ops_per_sec", "aof_enabled", "aof_last_write_status"):
        assert field in store, field
    times = [r["time"] for r in got]
    assert times == sorted(times) and times[-1] - times[0] < 5
    n = s.samples
    assert not poll(lambda: s.samples > n, timeout=0.3), "sampling went on after stop()"


def test_ttls_seen_under_the_template_during_the_run_make_sessions_whose_keys_all_expired_expired(
        tmp_path, redis_server, local_runner):
    """A bot whose keys expire before the audit: with no key left the audit found no TTL to sample, and every
    session was `vanished` (a failure `--gate expired=off` does not excuse) rather than `expired`. The run's
    telemetry saw the TTLs while the keys existed; the audit takes that as its evidence."""
    from oracle.audit import audit_run
    from oracle.store import StoreOptions
    from support_oracle import build_world, simple_specs, store_with_langchain, write_journal

    world = build_world(simple_specs(4), seed=3)
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world)
    client = redis_server.client()
    client.set("unrelated:cache", "x", ex=3600)  # another app's TTLs are no evidence (the template's keys are)
    keys = [f"message_store:{s}" for s in world.order]
    s = sampler.Sampler(run, local_runner, redis_server.url, interval=60, template="message_store:{session}")
    s.stop()  # its first sample and the one at the stop
    assert {r["store"]["template_ttl_floor"] for r in records(run)} == {None}
    for key in keys:
        client.pexpire(key, 300)
    s = sampler.Sampler(run, local_runner, redis_server.url, interval=60, template="message_store:{session}")
    s.stop()
    assert records(run)[-1]["store"]["template_ttl_floor"] is not None
    wait_until(lambda: not client.exists(*keys), what="every session's key to expire")
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["anomalies"] == {"expired": len(keys)}
    RunFolder(run).telemetry.unlink()  # the store alone, as before: nothing left to show a TTL
    assert audit_run(run, StoreOptions(url=redis_server.url))["anomalies"] == {"vanished": len(keys)}


def test_keys_deleted_younger_than_the_ttl_the_telemetry_saw_are_vanished_though_none_is_left(
        tmp_path, redis_server, local_runner):
    """A sweeper that deletes every history under a 1-hour TTL, beside rate-limit keys that expire: with no key
    left at the audit, the telemetry's TTL made them 'expired' (and --gate expired=off PASSed). The TTL it saw
    (an hour) says sessions seconds old cannot have expired."""
    import time as clock

    from oracle.audit import audit_run
    from oracle.store import StoreOptions
    from support_oracle import build_world, simple_specs, store_with_langchain, write_journal

    world = build_world(simple_specs(4), start=clock.time() - 20, seed=3)
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world, ttl=3600)
    s = sampler.Sampler(run, local_runner, redis_server.url, interval=60, template="message_store:{session}")
    s.stop()
    assert 3590 < records(run)[-1]["store"]["template_ttl_floor"] <= 3600
    client = redis_server.client()
    client.set("ratelimit:u1", "1", px=1)  # the store expires keys all the same
    client.delete(*[f"message_store:{s}" for s in world.order])
    wait_until(lambda: client.get("ratelimit:u1") is None and int(client.info("stats")["expired_keys"]) > 0,
               what="the rate-limit key to expire")
    assert audit_run(run, StoreOptions(url=redis_server.url))["anomalies"] == {"vanished": 4}


def test_a_stop_that_lands_during_a_sample_still_gets_a_sample_after_it(tmp_path, redis_server):
    """The last sample is taken after the stop, so the samples span the load. A stop that lands while a
    sample is being taken (its time already read) gets one more; before, the sampler ended on the
    earlier one (seen once in CI: the last turn ended 0.4 ms after the last sample)."""
    stop_at = []

    class StopLandsMidSample:  # what the sampler reads of a runner; the second sample's read is where the stop lands
        @property
        def user_count(self):
            if s.samples == 1 and not stop_at:
                stop_at.append(time.time())
                s.stopping.set()
            return 3

    s = sampler.Sampler(tmp_path, StopLandsMidSample(), redis_server.url, interval=0.05)
    assert poll(lambda: s.greenlet.dead)
    s.stop()
    got = records(tmp_path)
    assert len(got) == 3 and got[-1]["time"] >= stop_at[0], [r["time"] - stop_at[0] for r in got]


def test_a_stalled_store_is_recorded_as_not_answering_and_sampling_goes_on(tmp_path, redis_server, local_runner):
    s = sampler.Sampler(tmp_path, local_runner, redis_server.url, interval=60)
    assert poll(lambda: s.samples >= 1)  # the first sample, at start
    redis_server.proc.send_signal(signal.SIGSTOP)  # what chaos's redis-stall does
    try:
        started = time.monotonic()
        stalled = s.sample()
        took = time.monotonic() - started
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
    assert stalled["store"] is None and "Timeout" in stalled["store_error"], stalled
    assert took < sampler.TIMEOUT + 1.5, f"a stalled store held the sampler {took:.1f}s (redis-py retries?)"
    assert stalled["rss"]["local"] > 0  # the rest of the record is still there
    assert s.sample()["store"] is not None, "the store answers again once it resumes"
    s.stop()
    assert [r["store"] is None for r in records(tmp_path)][:3] == [False, True, False]


def test_a_store_that_refuses_connections_does_not_stop_sampling(tmp_path, local_runner):
    from conftest import free_port

    s = sampler.Sampler(tmp_path, local_runner, f"redis://127.0.0.1:{free_port()}/0", interval=0.05)
    assert poll(lambda: s.samples >= 3)
    s.stop()
    got = records(tmp_path)
    assert all(r["store"] is None and "Connection" in r["store_error"] for r in got), got[0]


def test_counter_growth_survives_a_store_restart_and_skips_unanswered_samples(tmp_path):
    lines = [{"time": 1.0, "store": {"evicted_keys": 5}}, {"time": 2.0, "store": None, "store_error": "Timeout"},
             {"time": 3.0, "store": {"evicted_keys": 9}}, {"time": 4.0, "store": {"evicted_keys": 2}},  # restarted
             {"time": 5.0, "store": {"evicted_keys": 3}}]
    RunFolder(tmp_path).telemetry.write_text("".join(json.dumps(r) + "\n" for r in lines))
    frame = telemetry.load(tmp_path)
    assert list(frame["store_ok"]) == [True, False, True, True, True]
    assert telemetry.counter_growth(frame, "evicted_keys") == 4 + 2 + 1
    assert telemetry.counter_growth(frame, "evicted_keys", start=3.5) == 1
    assert telemetry.counter_growth(telemetry.load(tmp_path / "none"), "evicted_keys") == 0


def test_the_report_plots_telemetry_beside_the_faults(tmp_path):
    run = synthetic(tmp_path / "run")
    samples = []
    for i in range(61):  # every 5 s over the synthetic run's 300 s; the store stalls once, a worker joins late
        t = T0 + 5 * i
        store = None if i == 30 else {"used_memory": (2 + i / 10) * 2**20, "maxmemory": 8 * 2**20,
                                      "evicted_keys": max(0, i - 40) * 7, "expired_keys": i, "connected_clients": 9,
                                      "rejected_connections": 0, "instantaneous_ops_per_sec": 300 + i,
                                      "keyspace": {"db0": {"keys": 100 + i, "expires": 3}}}
        rss = {"master": 90 * 2**20, **({"worker-1": 120 * 2**20} if i > 2 else {})}
        samples.append({"time": t, "users": 8, "rss": rss, "store": store,
                        "store_error": "TimeoutError: Timeout reading from socket" if store is None else None})
    RunFolder(run).telemetry.write_text("".join(json.dumps(r) + "\n" for r in samples))
    report.render(run)
    html = (run / "report.html").read_text()
    assert 'id="charts-telemetry"' in html and "Store and Locust telemetry" in html
    png = run / "charts" / "telemetry.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert telemetry.counter_growth(telemetry.load(run), "evicted_keys") == 20 * 7
    # a run without telemetry has no such chart (and renders as before)
    bare = synthetic(tmp_path / "bare")
    report.render(bare)
    assert 'id="charts-telemetry"' not in (bare / "report.html").read_text()


@pytest.mark.slow
def test_a_locust_run_samples_its_store_from_start_to_stop(tmp_path):
    with running_stack(tmp_path / "stack", replicas=1, think_ms=0, jitter_ms=0) as stack:
        run = run_locust(stack.state["url"], tmp_path / "run", "--store-url", stack.state["store_url"],
                         "--telemetry-interval", "1s", "--settle", "0s", users=4, time_s="5s")
    assert run.returncode == 0, run.output[-3000:]
    got = records(run.run_dir)
    turns = run.records()
    first, last = min(t["sent"] for t in turns), max(t["received"] or t["sent"] for t in turns)
    assert got[0]["time"] <= first and got[-1]["time"] >= last, "the samples span the load: test_start to test_stop"
    assert len(got) >= int(last - first) + 2, got  # one at start, one a second, one at stop
    assert all(r["store"] is not None for r in got), [r["store_error"] for r in got]
    assert got[-1]["store"]["keyspace"]["db0"]["keys"] == len({t["session"] for t in turns})
    assert set(got[-1]["rss"]) == {"local"}
    assert (run.run_dir / "charts" / "telemetry.png").exists()


@pytest.mark.slow
def test_a_master_records_its_workers_rss_from_their_heartbeats(tmp_path):
    """Also with no store: the record says so (store null, no error) and still has the processes' RSS."""
    import subprocess
    from conftest import free_port
    from support_locust import CHATFILE, LOCUST, _kill_group

    port = free_port()
    with chat_bot("memory") as url:
        run_dir = tmp_path / "run"
        (run_dir / "locust").mkdir(parents=True)
        master = subprocess.Popen(locust_cmd(url, run_dir, "--master", "--expect-workers", "1",
                                             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                                             "--telemetry-interval", "1s", users=2, rate=2, time_s="14s"),
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)
        worker = subprocess.Popen([LOCUST, "-f", CHATFILE, "--worker", "--master-host", "127.0.0.1",
                                   "--master-port", str(port), "--loglevel", "WARNING"], cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            out, _ = master.communicate(timeout=120)
            worker.wait(30)
        finally:
            _kill_group(master)
            _kill_group(worker)
    assert master.returncode == 0, out[-3000:]
    got = records(run_dir)
    assert all(r["store"] is None and r["store_error"] is None for r in got)  # no --store-url: RSS only
    workers = {name for r in got for name in r["rss"] if name != "master"}
    assert len(workers) == 1 and all(r["rss"]["master"] > 0 for r in got), got
    # a worker measures its RSS every 5 s from its start (Locust's monitor): later samples carry it
    assert len(got[-1]["rss"]) == 2 and min(got[-1]["rss"].values()) > 10 * 2**20, got[-1]


@pytest.mark.parametrize("flags, words", [
    (["--maxmemory", "lots"], ["--maxmemory 'lots'", "8mb"]),
    (["--maxmemory", "8mb", "--maxmemory-policy", "forget-some"], ["unknown --maxmemory-policy", "allkeys-lru"]),
    (["--maxmemory-policy", "allkeys-lru"], ["needs --maxmemory"]),
])
def test_bad_maxmemory_flags_are_refused_before_anything_starts(tmp_path, flags, words):
    result = refbot_cli("up", "--state-dir", tmp_path / "s", *flags)
    assert result.returncode == 2, result.stderr
    assert all(w in result.stderr for w in words), result.stderr
    assert not (tmp_path / "s" / "state.json").exists()


@pytest.mark.slow
def test_stack_redis_runs_as_a_cache_and_keeps_it_across_a_restart(tmp_path):
    with running_stack(tmp_path, replicas=1, maxmemory="8mb", maxmemory_policy="allkeys-lru") as stack:
        config = lambda: stack.redis().config_get("maxmemory*")  # noqa: E731
        assert config()["maxmemory"] == str(8 * 2**20) and config()["maxmemory-policy"] == "allkeys-lru"
        member = stack.member("redis")
        assert (member["maxmemory"], member["maxmemory_policy"]) == ("8mb", "allkeys-lru")
        stack.kill("redis", signal.SIGKILL)
        stack.restart("redis")
        wait_until(lambda: stack.redis().ping(), what="redis back")
        assert config()["maxmemory-policy"] == "allkeys-lru", "a restarted store is the same cache"
