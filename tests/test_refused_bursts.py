"""A thread API that refuses a second message while it answers the first (a 409 to a double-send's turn).

OpenAI Assistants ("thread has an active run") and LangGraph (``multitask_strategy=reject``) answer so by design. The
errors gate fails such a run, rightly (the user's message was refused), but the audit said nothing of why: every
failure was a burst's turn answered 4xx (bot hunt 9, h_conflict409). It now says so, and how to judge memory alone.
"""
from __future__ import annotations

import time

from oracle.audit import audit_run
from oracle.store import StoreOptions
from support_oracle import TurnSpec, build_world, fill_redis, write_journal

SAID = "turns of a burst"


def audited(tmp_path, redis_server, status: int) -> dict:
    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "fail"),
              TurnSpec("probe", "ok")] for _ in range(8)]
    world = build_world(specs, start=time.time() - 60, seed=3)
    refused = [r for r in world.records if r["kind"] == "burst" and r["outcome"] == "fail"]
    assert len(refused) == 8
    for r in refused:
        r["status"], r["error"] = status, f"HTTP {status}"
    write_journal(tmp_path, world.records)
    fill_redis(redis_server.client(), world)
    return audit_run(tmp_path, StoreOptions(url=redis_server.url))


def test_a_409_to_every_double_send_fails_the_errors_gate_and_says_why(tmp_path, redis_server):
    summary = audited(tmp_path, redis_server, 409)
    assert any(r["gate"] == "errors" and r["result"] == "fail" for r in summary["verdict"]["rules"])
    said = [p for p in summary["problems"] if SAID in p]
    assert len(said) == 1, summary["problems"]
    assert said[0].startswith("errors: 8 of the 8 failed requests") and "--gate errors=off" in said[0]
    assert "errors: the 8 failed request(s) no fault explains failed with: 'HTTP 409' (8)" in summary["problems"]


def test_server_errors_of_a_burst_are_not_called_refusals(tmp_path, redis_server):
    summary = audited(tmp_path, redis_server, 502)
    assert any(r["gate"] == "errors" and r["result"] == "fail" for r in summary["verdict"]["rules"])
    assert not [p for p in summary["problems"] if SAID in p]
    assert "errors: the 8 failed request(s) no fault explains failed with: 'HTTP 502' (8)" in summary["problems"]


def test_the_reasons_kept_are_bounded_and_add_up_across_processes():
    """A reason holding an id is one per turn: the first MAX_REASONS are kept, the rest counted as one."""
    from oracle.tally import MAX_REASONS, OTHER_REASONS, Tally
    a, b = Tally(5.0), Tally(5.0)
    a.add_failures([f"HTTP 500 (request {n})" for n in range(MAX_REASONS + 50)])
    b.add_failures(["HTTP 500 (request 0)", None, "fresh"])
    a.merge(b)
    assert len(a.failures) == MAX_REASONS + 1 and a.failures[OTHER_REASONS] == 50 + 2
    assert a.failures["HTTP 500 (request 0)"] == 2 and sum(a.failures.values()) == MAX_REASONS + 53
