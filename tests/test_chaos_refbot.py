"""The whole fault vocabulary against the real embedded stack (`python -m refbot up`), via the CLI."""
from __future__ import annotations

import pytest

from support_chaos import read_timeline, run_chaos, write_plan
from conftest import wait_until
from support_refbot import new_session, refbot_stack  # noqa: F401 - fixture

PLAN = """
max_concurrent: 1
faults:
  - {id: kill,    kind: kill,              target: bot,   at: 0.5s, duration: 1s, count: 1}
  - {id: pause,   kind: pause,             target: bot-1, at: 7s,   duration: 1s}
  - {id: clients, kind: redis-client-kill, target: redis, at: 9s}
  - {id: stall,   kind: redis-stall,       target: redis, at: 10s,  duration: 1s}
  - {id: cut,     kind: lb-drop,           target: bot,   at: 12s,  count: 1}
  - {id: drain,   kind: lb-disable,        target: bot-2, at: 13s,  duration: 1s}
  - {id: redis,   kind: redis-restart,     target: redis, at: 15s,  duration: 500ms}
  - {id: release, kind: rolling-restart,   target: bot,   at: 18s,  release: v2}
"""


@pytest.mark.slow
def test_every_local_kind_on_the_refbot_stack_and_the_memory_survives(refbot_stack, tmp_path):
    stack = refbot_stack(replicas=2, persistence="aof-always", think_ms=0, jitter_ms=0)
    session = new_session()
    stack.reply(session, f"[{session}t0] My order number is 8892-X7Q4.")
    plan = write_plan(tmp_path, PLAN)
    res = run_chaos("run", plan, "--backend", "local", "--state-dir", stack.dir, "--run-dir", tmp_path / "run",
                    timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    tl = read_timeline(tmp_path / "run")
    assert [(r["fault"], r["event"], r["outcome"]) for r in tl if r["outcome"] != "ok"] == []
    assert sorted({r["fault"] for r in tl}) == sorted(f"{f}#0" for f in
                                                      ["kill", "pause", "clients", "stall", "cut", "drain", "redis", "release"])
    assert len(tl) == 16
    assert all(stack.member(b)["release"] == "v2" for b in stack.bots)
    # HAProxy needs a couple of health checks (rise) to call the last restarted replica UP again
    wait_until(lambda: set(stack.lb_status().values()) == {"UP"}, timeout=30,
               what=f"HAProxy to see every replica UP again (now {stack.lb_status()})")
    # Redis restarted with aof-always: the planted fact is still remembered through HAProxy.
    assert "8892-X7Q4" in stack.reply(session, f"[{session}t1] What is my order number?")
