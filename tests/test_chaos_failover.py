"""redis-failover and redis-bgsave on the real embedded stack (`refbot up --redis sentinel`): real
sentinels promote, writes are really lost or kept, the controller is really SIGKILLed and
`python -m chaos heal` really brings the replicated store back."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from chaos.backends.local_failover import BALLAST_KEY, BEHIND
from chaos.plan import PlanError, parse_plan
from conftest import wait_until
from contracts.redis_url import redis_client
from targets import registry as state, sentinel
from support_chaos import read_timeline, run_chaos, write_plan
from support_refbot import refbot_stack  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[1]
SMALL = {"replicas": 1, "think_ms": 0, "jitter_ms": 0}


def run_plan(stack, tmp_path, text) -> list[dict]:
    plan = write_plan(tmp_path, text)
    result = run_chaos("run", plan, "--state-dir", stack.dir, "--run-dir", tmp_path / "run", timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    return read_timeline(tmp_path / "run")


def assert_healthy(stack) -> str:
    """One live primary the sentinels agree on, the other data member its synced replica, nothing
    stopped, and the state file saying the same; returns the primary."""
    st = stack.state
    primary = sentinel.live_primary(st)
    assert primary and sentinel.synced(st, primary) == [] and sentinel.disagreement(st, primary) == []
    for name in sentinel.data_members(st) + sentinel.sentinel_members(st):
        assert state.member_alive(st["members"][name]) and process_state(st["members"][name]["pid"]) != "T", name
    assert {n: st["members"][n]["replication"] for n in sentinel.data_members(st)} == \
        {n: "primary" if n == primary else "replica" for n in sentinel.data_members(st)}
    return primary


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class Writer:
    """Appends numbered entries through the Sentinel client (as a bot would), noting when each was
    acknowledged; bounded in time and count."""

    def __init__(self, url: str, seconds: float = 60, limit: int = 500_000):
        self.client = redis_client(url, socket_timeout=2)
        self.acked: list[tuple[int, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(time.monotonic() + seconds, limit), daemon=True)

    def run(self, deadline, limit):
        for i in range(limit):
            if self.stop.is_set() or time.monotonic() > deadline:
                return
            try:
                self.client.rpush("writes", i)
                self.acked.append((i, time.time()))
            except Exception:  # noqa: BLE001 - refused during the failover: not acknowledged
                time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        wait_until(lambda: len(self.acked) > 100, timeout=10, what="writes acknowledged")
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)

    def lost(self) -> list[tuple[int, float]]:
        stored = {int(x) for x in self.client.lrange("writes", 0, -1)}
        return [(i, t) for i, t in self.acked if i not in stored]


def test_failover_parameters_are_checked_like_every_other_field():
    plan = parse_plan("faults: [{kind: redis-failover, target: redis, at: 1s, mode: lossy, lag: 1500ms}]")
    assert plan.faults[0].params == {"mode": "lossy", "lag": 1.5}
    with pytest.raises(PlanError) as caught:
        parse_plan("faults:\n  - {kind: redis-failover, target: redis, at: 1s, mode: partition, count: 2}\n", "p.yaml")
    assert any(p.startswith("p.yaml:2: mode: must be one of sentinel, lossy") for p in caught.value.problems)
    assert any(p.startswith("p.yaml:2: count: a redis-failover goes through every instance") for p in caught.value.problems)


def test_validate_refuses_a_failover_plan_against_a_single_redis(refbot_stack, tmp_path):
    stack = refbot_stack(**SMALL)
    plan = write_plan(tmp_path, """
        faults:
          - id: promote
            kind: redis-failover
            target: redis
            at: 5s
    """)
    result = run_chaos("validate", plan, "--backend", "local", "--state-dir", stack.dir)
    assert result.returncode == 2
    assert f"{plan}:4: kind: redis-failover needs Redis with a replica behind Sentinel" in result.stderr
    assert "--redis sentinel" in result.stderr and "(fault promote)" in result.stderr


def test_sentinel_failover_promotes_the_replica_records_it_and_heals(refbot_stack, tmp_path):
    stack = refbot_stack(redis="sentinel", **SMALL)
    store = redis_client(stack.state["store_url"])
    store.rpush("kept", *range(100))
    timeline = run_plan(stack, tmp_path, "faults: [{id: switch, kind: redis-failover, target: redis, at: 0s}]")
    apply, recover = timeline
    assert (apply["event"], apply["outcome"], recover["event"], recover["outcome"]) == ("apply", "ok", "recover", "ok")
    assert apply["detail"]["primary"] == "redis-1" and apply["detail"]["promoted"] == "redis-2"
    assert recover["detail"] == {"primary": "redis-2", "replicas": ["redis-1"]}
    assert assert_healthy(stack) == "redis-2"
    assert stack.member("redis-1")["cmd"][-3:] == ["--replicaof", "127.0.0.1", str(stack.member("redis-2")["port"])]
    assert store.lrange("kept", 0, -1) == [str(i).encode() for i in range(100)]  # nothing was in flight


def test_lossy_failover_loses_only_writes_acknowledged_after_it_began(refbot_stack, tmp_path):
    stack = refbot_stack(redis="sentinel", **SMALL)
    with Writer(stack.state["store_url"]) as writer:
        timeline = run_plan(stack, tmp_path, """
            faults:
              - {id: lossy, kind: redis-failover, target: redis, at: 0.5s, mode: lossy, lag: 1s}
        """)
        wait_until(lambda: writer.acked[-1][1] > timeline[-1]["time"] + 0.5, timeout=10, what="writes after the heal")
    apply, recover = timeline
    detail = apply["detail"]
    assert apply["outcome"] == "ok" and (detail["mode"], detail["primary"], detail["replica"], detail["promoted"]) == \
        ("lossy", "redis-1", "redis-2", "redis-2")
    assert detail["replica_behind_bytes"] >= BEHIND
    lost = writer.lost()
    assert len(lost) > 100, f"the failover lost only {len(lost)} acknowledged writes: {detail}"
    assert min(t for _i, t in lost) > apply["time"]            # nothing acknowledged before the fault
    assert max(t for _i, t in lost) < recover["time"]          # nor after the heal
    assert assert_healthy(stack) == "redis-2"
    assert not redis_client(stack.state["store_url"]).exists(BALLAST_KEY)


@pytest.mark.parametrize("when", ["replica stopped", "primary killed"])
def test_heal_finishes_a_failover_after_the_controller_is_sigkilled(refbot_stack, tmp_path, when):
    stack = refbot_stack(redis="sentinel", **SMALL)
    replica = stack.member("redis-2")
    plan = write_plan(tmp_path, """
        faults:
          - {id: lossy, kind: redis-failover, target: redis, at: 0.2s, duration: 60s, mode: lossy, lag: 30s}
    """ if when == "replica stopped" else """
        faults:
          - {id: lossy, kind: redis-failover, target: redis, at: 0.2s, duration: 60s, mode: lossy, lag: 0.5s}
    """)
    run = tmp_path / "run"
    controller = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(plan), "--state-dir", str(stack.dir),
                                   "--run-dir", str(run)], cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        if when == "replica stopped":
            wait_until(lambda: process_state(replica["pid"]) == "T", timeout=30, what="the replica stopped")
        else:
            wait_until(lambda: [r for r in read_timeline(run) if r["event"] == "apply"], timeout=60,
                       what="the failover applied")
    finally:
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(10)
    outstanding = json.loads((run / "chaos" / "outstanding.json").read_text())["faults"]
    assert [e["fault"]["kind"] for e in outstanding] == ["redis-failover"]

    healed = run_chaos("heal", run, timeout=240)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert "1 recovered, 0 failed" in healed.stdout
    primary = assert_healthy(stack)
    assert primary == ("redis-1" if when == "replica stopped" else "redis-2")
    last = read_timeline(run)[-1]
    assert (last["event"], last["outcome"], last["via"], last["detail"]["primary"]) == ("recover", "ok", "heal-cli", primary)
    assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == []


def test_restore_never_commands_another_programs_redis_on_a_dead_members_port(refbot_stack, tmp_path):
    """On a shared machine a dead member's port can be taken meanwhile: the heal must not send REPLICAOF
    to whatever answers there (it would wipe someone else's data), and brings the replica back elsewhere."""
    stack = refbot_stack(redis="sentinel", **SMALL)
    with state.locked_state(stack.dir) as st:
        old_port = st["members"]["redis-2"]["port"]
        state.stop_member(st["members"]["redis-2"], signal.SIGKILL)
    foreign = subprocess.Popen(["redis-server", "--port", str(old_port), "--bind", "127.0.0.1", "--save", "",
                                "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        theirs = redis.Redis(port=old_port, socket_timeout=2)
        wait_until(lambda: theirs.set("their", "data"), timeout=10, what="the other program's redis-server")
        healed = sentinel.restore(stack.dir)
        assert healed == {"primary": "redis-1", "replicas": ["redis-2"]}
        assert stack.member("redis-2")["port"] != old_port
        assert theirs.execute_command("ROLE")[0] == b"master" and theirs.get("their") == b"data"
        assert assert_healthy(stack) == "redis-1"
    finally:
        foreign.kill()
        foreign.wait(10)


def test_bgsave_then_crash_loses_exactly_the_writes_since_the_snapshot(refbot_stack, tmp_path):
    stack = refbot_stack(persistence="rdb", save="3600 1", **SMALL)
    store = redis_client(stack.state["store_url"], socket_timeout=2)
    store.rpush("writes", *range(50))
    plan = write_plan(tmp_path, """
        faults:
          - {id: snapshot, kind: redis-bgsave, target: redis, at: 0s}
          - {id: crash, kind: redis-restart, target: redis, at: 3s, duration: 0.5s, mode: crash}
    """)
    run = tmp_path / "run"
    controller = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(plan), "--state-dir", str(stack.dir),
                                   "--run-dir", str(run)], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    wait_until(lambda: [r for r in read_timeline(run) if r["kind"] == "redis-bgsave" and r["event"] == "recover"],
               timeout=20, what="the snapshot on disk")
    after = []
    for i in range(50, 100):
        try:
            store.rpush("writes", i)
            after.append(i)
        except Exception:  # noqa: BLE001 - the crash came first: not acknowledged
            break
    out, _ = controller.communicate(timeout=60)
    assert controller.returncode == 0, out
    snapshot = next(r for r in read_timeline(run) if r["kind"] == "redis-bgsave" and r["event"] == "apply")
    assert snapshot["detail"]["keys"] == 1
    assert after, "no write acknowledged between the snapshot and the crash"
    assert [int(x) for x in store.lrange("writes", 0, -1)] == list(range(50))
