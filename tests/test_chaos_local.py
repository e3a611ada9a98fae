"""Each fault kind applied and recovered for real on a small embedded stack (local backend)."""
from __future__ import annotations

import socket
import threading
import time

import redis
import requests

from conftest import wait_until
from support_chaos import chaos_stack, controller_for, read_timeline  # noqa: F401 - fixture

def run_plan(stack, tmp_path, text, during=None, timeout=60):
    """Start the plan, call ``during(ctl)`` while it runs, wait for its end; return the timeline."""
    ctl = controller_for(stack, text, tmp_path / "run").start()
    try:
        if during:
            during(ctl)
        assert ctl.wait(timeout), "plan did not finish"
    finally:
        ctl.stop()
    return read_timeline(tmp_path / "run")


def events(timeline, event, outcome="ok"):
    return [r for r in timeline if r["event"] == event and r["outcome"] == outcome]


def test_kill_then_back_healthy_with_new_pid(chaos_stack, tmp_path):
    old = chaos_stack.pid("bot-1")
    seen_down = []

    def during(ctl):
        wait_until(lambda: events(read_timeline(tmp_path / "run"), "apply"), timeout=10, what="kill applied")
        seen_down.append(not chaos_stack.healthy("bot-1"))

    tl = run_plan(chaos_stack, tmp_path, """
        faults:
          - {kind: kill, target: bot-1, at: 0.1s, duration: 2s}
    """, during)
    assert seen_down == [True]
    assert [r["event"] for r in tl] == ["apply", "recover"] and all(r["outcome"] == "ok" for r in tl)
    assert chaos_stack.pid("bot-1") != old and chaos_stack.healthy("bot-1")
    assert tl[1]["time"] - tl[0]["time"] >= 2.0


def test_restart_is_graceful_and_comes_back(chaos_stack, tmp_path):
    old = chaos_stack.pid("bot-2")
    tl = run_plan(chaos_stack, tmp_path, "faults: [{kind: restart, target: bot-2, at: 0s}]")
    assert [(r["event"], r["outcome"]) for r in tl] == [("apply", "ok"), ("recover", "ok")]
    assert chaos_stack.pid("bot-2") != old and chaos_stack.healthy("bot-2")


def test_pause_freezes_then_answers_again(chaos_stack, tmp_path):
    port = chaos_stack.member("bot-1")["port"]
    frozen = []

    def during(ctl):
        wait_until(lambda: chaos_stack.process_state("bot-1") == "T", timeout=10, what="bot-1 stopped (T)")
        try:
            requests.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)
            frozen.append(False)
        except requests.Timeout:
            frozen.append(True)

    pid = chaos_stack.pid("bot-1")
    run_plan(chaos_stack, tmp_path, "faults: [{kind: pause, target: bot-1, at: 0s, duration: 2s}]", during)
    assert frozen == [True]
    assert chaos_stack.pid("bot-1") == pid and chaos_stack.process_state("bot-1") != "T"
    assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200


def test_redis_restart_keeps_data_with_aof_always(chaos_stack, tmp_path):
    r = redis.Redis.from_url(chaos_stack.store_url)
    r.set("survivor", "yes")
    old = chaos_stack.pid("redis")
    tl = run_plan(chaos_stack, tmp_path, "faults: [{kind: redis-restart, target: redis, at: 0s, duration: 1s}]")
    assert [r_["outcome"] for r_ in tl] == ["ok", "ok"]
    assert chaos_stack.pid("redis") != old
    assert redis.Redis.from_url(chaos_stack.store_url).get("survivor") == b"yes"


def test_redis_restart_loses_data_without_persistence(tmp_path):
    from support_chaos import ChaosStack
    stack = ChaosStack(tmp_path, bots=1, persistence="none").start()
    try:
        redis.Redis.from_url(stack.store_url).set("survivor", "yes")
        run_plan(stack, tmp_path, "faults: [{kind: redis-restart, target: redis, at: 0s}]")
        assert redis.Redis.from_url(stack.store_url).get("survivor") is None
    finally:
        stack.stop()


def bot_clients(url):
    return sorted(c["name"] for c in redis.Redis.from_url(url).client_list() if c["name"].startswith("bot-"))


def test_client_kill_really_drops_the_bots_connections(chaos_stack, tmp_path):
    for _ in range(4):
        chaos_stack.get("/count")
    wait_until(lambda: bot_clients(chaos_stack.store_url) == ["bot-1", "bot-2"], what="both bots connected")
    from locustfiles.telemetry import store_client
    sampler = store_client(chaos_stack.store_url)  # goldfish's own telemetry connection: killed, not the bot's
    sampler.ping()
    before = redis.Redis.from_url(chaos_stack.store_url).info("clients")["connected_clients"]
    tl = run_plan(chaos_stack, tmp_path, "faults: [{kind: redis-client-kill, target: redis, at: 0s}]")
    info = redis.Redis.from_url(chaos_stack.store_url).info("clients")
    assert bot_clients(chaos_stack.store_url) == []
    assert info["connected_clients"] < before
    assert tl[0]["detail"]["killed"] >= 3
    assert tl[0]["detail"]["touched"] == tl[0]["detail"]["killed"] - 1  # a kill that hit only goldfish is ineffective
    assert chaos_stack.get("/count").status_code == 200      # the bots reconnect


def test_redis_stall_all_blocks_every_command_for_its_duration(chaos_stack, tmp_path):
    blocked = []

    def during(ctl):
        wait_until(lambda: events(read_timeline(tmp_path / "run"), "apply"), timeout=10, what="stall applied")
        r = redis.Redis.from_url(chaos_stack.store_url, socket_timeout=0.5)
        for command in (lambda: r.set("k", "v"), lambda: r.get("k")):
            try:
                command()
                blocked.append(False)
            except redis.TimeoutError:
                blocked.append(True)

    tl = run_plan(chaos_stack, tmp_path, "faults: [{kind: redis-stall, target: redis, at: 0s, duration: 3s}]", during)
    assert blocked == [True, True]
    assert [r["outcome"] for r in tl] == ["ok", "ok"] and tl[0]["detail"] == {"pause_ms": 3000, "mode": "ALL"}
    assert 2.9 <= tl[1]["time"] - tl[0]["time"] < 4.5
    assert redis.Redis.from_url(chaos_stack.store_url, socket_timeout=2).set("k", "v")


def test_redis_stall_write_blocks_writes_and_unpause_ends_it(chaos_stack, tmp_path):
    seen = {}

    def during(ctl):
        wait_until(lambda: events(read_timeline(tmp_path / "run"), "apply"), timeout=10, what="stall applied")
        r = redis.Redis.from_url(chaos_stack.store_url, socket_timeout=0.5)
        seen["get"] = r.get("k")
        try:
            r.set("k", "v")
            seen["set"] = "done"
        except redis.TimeoutError:
            seen["set"] = "blocked"

    tl = run_plan(chaos_stack, tmp_path,
                  "faults: [{kind: redis-stall, target: redis, at: 0s, duration: 2s, mode: write}]", during)
    assert seen == {"get": None, "set": "blocked"}
    assert tl[0]["detail"]["pause_ms"] == 4000          # 2 s of slack in Redis itself...
    t = time.monotonic()
    redis.Redis.from_url(chaos_stack.store_url, socket_timeout=3).set("k2", "v")
    assert time.monotonic() - t < 1.0                   # ...but UNPAUSE ended it on time


def test_lb_drop_cuts_a_live_session(chaos_stack, tmp_path):
    # Take bot-2 out so the streaming session surely lands on bot-1.
    chaos_stack.haproxy("set server bots/bot-2 state maint")
    port = chaos_stack.member("haproxy")["port"]
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"200" in s.recv(4096)
    closed = threading.Event()

    def reader():
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        closed.set()

    threading.Thread(target=reader, daemon=True).start()
    assert not closed.wait(0.5)            # the stream is alive before the fault
    tl = run_plan(chaos_stack, tmp_path, "faults: [{kind: lb-drop, target: bot-1, at: 0s}]")
    assert closed.wait(10), "the live session survived lb-drop"
    s.close()
    assert [(r["event"], r["outcome"]) for r in tl] == [("apply", "ok"), ("recover", "ok")]


def test_lb_disable_takes_server_out_of_rotation(chaos_stack, tmp_path):
    names = []

    def during(ctl):
        wait_until(lambda: chaos_stack.lb_status("bot-1").startswith("MAINT"), timeout=10, what="bot-1 in maint")
        names.extend(chaos_stack.get("/healthz").json()["name"] for _ in range(6))

    run_plan(chaos_stack, tmp_path, "faults: [{kind: lb-disable, target: bot-1, at: 0s, duration: 2s}]", during)
    assert set(names) == {"bot-2"}
    wait_until(lambda: chaos_stack.lb_status("bot-1") == "UP", timeout=10, what="bot-1 back UP")
    assert {chaos_stack.get("/healthz").json()["name"] for _ in range(6)} == {"bot-1", "bot-2"}


def test_rolling_restart_moves_every_replica_to_v2(chaos_stack, tmp_path):
    old = {b: chaos_stack.pid(b) for b in ("bot-1", "bot-2")}
    tl = run_plan(chaos_stack, tmp_path, "faults: [{kind: rolling-restart, target: bot, at: 0s, release: v2}]")
    assert [r["outcome"] for r in tl] == ["ok", "ok"]
    assert tl[0]["detail"]["members"] == ["bot-1", "bot-2"]
    for b in old:
        m = chaos_stack.member(b)
        assert m["pid"] != old[b] and m["release"] == "v2" and m["env"]["REFBOT_RELEASE"] == "v2"
        assert requests.get(m["health"]["http"], timeout=5).json()["release"] == "v2"
    wait_until(lambda: all(chaos_stack.lb_status(b) == "UP" for b in old), timeout=10, what="both UP")


def test_a_rolling_restart_pausing_between_replicas_ends_at_the_stop(chaos_stack, tmp_path):
    """A rolling restart pausing 127 s between replicas outlived the load and the stop's 120 s wait, then rolled on
    after the heal, the stack left half rolled (chaos hunt 18). It ends at the stop, with the replicas it did."""
    ctl = controller_for(chaos_stack, "faults: [{kind: rolling-restart, target: bot, at: 0s, release: v2, pause: 600}]",
                         tmp_path / "run")
    ctl.start()
    wait_until(lambda: chaos_stack.member("bot-1")["release"] == "v2", timeout=30, what="bot-1 on v2")
    assert ctl.stop() == []
    tl = read_timeline(tmp_path / "run")
    assert [(r["event"], r["outcome"]) for r in tl] == [("apply", "ok"), ("recover", "ok")], tl
    assert tl[0]["detail"]["members"] == ["bot-1"], tl
    assert chaos_stack.member("bot-2")["release"] != "v2"


def test_a_rolling_restart_still_applying_at_the_stop_is_recorded_applied_in_part(chaos_stack, tmp_path):
    """An apply that outlives the stop's wait (a restart in a long grace, an apply that does not hear the stop): the
    heal recovered it, but the timeline had a recover with no apply, and the audit called the file damaged, NO
    VERDICT (chaos hunt 18). It is recorded as applied from its start, in part, and once only."""
    import threading

    from oracle.timeline import load_faults

    ctl = controller_for(chaos_stack, "faults: [{kind: rolling-restart, target: bot, at: 0s, release: v2, pause: 3}]",
                         tmp_path / "run")
    ctl.backend.stopping = threading.Event()  # an apply deaf to the stop
    ctl.stop_timeout = 0.5
    ctl.start()
    wait_until(lambda: chaos_stack.member("bot-1")["release"] == "v2", timeout=30, what="bot-1 on v2")
    assert ctl.stop() == []
    wait_until(lambda: chaos_stack.member("bot-2")["release"] == "v2" and chaos_stack.healthy("bot-2"), timeout=60,
               what="the deaf apply done")
    for th in ctl._threads:
        th.join(30)
    tl = read_timeline(tmp_path / "run")
    applies = [r for r in tl if r["event"] == "apply"]
    assert len(applies) == 1 and applies[0]["outcome"] == "ok" and "unfinished" in applies[0]["detail"], tl
    assert [r["event"] for r in tl] == ["apply", "recover"] and tl[0]["time"] <= tl[1]["time"], tl
    faults = load_faults(tmp_path / "run")
    assert len(faults) == 1 and faults[0].end is not None, faults
