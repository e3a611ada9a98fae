"""What a lost turn's explanation tells apart (bot hunt 17): a session's oldest turns acknowledged before the store
restarted (kept nothing, the turns after it made a new key) were "a race ... a summary or a trim", though the report
charged them to the restart; and a turn no other turn of its session overlapped cannot have lost a race between its
requests (a write after the reply that failed said the same "race" as a real read-modify-write race).

Real parts: the audit over a snapshot and a chaos timeline written as a Locust run writes them
(tests/support_oracle.py); the checker on hand-made turns."""
from __future__ import annotations

import json

from contracts.journal import Turn
from oracle.checkers import check_lost
from oracle.decode import Shape, decode_session
from oracle.explain import explain
from oracle.store import RawSession, StoreOptions
from support_oracle import build_world, lc, oracle_main, read_findings, simple_specs, write_journal, write_snapshot

S = "gf00000000000000aa"


def _turn(n: int, sent: float, received: float) -> Turn:
    token = f"{S}t{n}"
    return Turn(session=S, turn=n, token=token, message=f"[{token}] hi {n}", sent=sent, received=received,
                outcome="ok", reply=f"ok {n}")


def _lost(turns: list[Turn], kept: list[int]) -> list[dict]:
    entries = [json.dumps(e) for t in turns if t.turn in kept for e in (lc("human", t.message), lc("ai", t.reply))]
    raw = RawSession(S, f"message_store:{S}", True, None, entries)
    return [f for f in check_lost(S, turns, raw, _view(raw, turns)) if f["class"] == "lost"]


def _view(raw, turns):
    from oracle.checkers import view
    return view(S, decode_session(raw, Shape(StoreOptions())), raw, {t.turn: t for t in turns})


def test_a_lost_turn_no_other_turn_overlapped_is_no_race_between_its_requests():
    one_by_one = [_turn(n, 100.0 + n, 100.5 + n) for n in range(3)]
    found = _lost(one_by_one, kept=[0, 2])
    assert [f["turn"] for f in found] == [1] and found[0]["evidence"]["alone"] is True
    found[0]["cause"] = "lost"
    said = explain(found[0])
    assert "no race between its requests" in said and "one made after the reply that failed" in said, said

    double_sent = [_turn(0, 100.0, 100.5), _turn(1, 101.0, 102.0), _turn(2, 101.2, 101.8)]  # 1 and 2 in flight at once
    found = _lost(double_sent, kept=[0, 2])
    assert [f["turn"] for f in found] == [1] and "alone" not in found[0]["evidence"]
    found[0]["cause"] = "lost"
    assert "a race between concurrent turns" in explain(found[0])


def test_oldest_turns_acknowledged_before_a_store_restart_name_the_restart(tmp_path, capsys):
    world = build_world(simple_specs(2), seed=4)
    session = world.order[0]
    ok = [r for r in world.turns(session) if r["outcome"] == "ok"]
    restart = max(r["received"] for r in ok[:2]) + 0.001  # once its first two acknowledged turns were answered
    before = {r["turn"] for r in ok[:2]}
    world.stored[session] = [(turn, m) for turn, m in world.stored[session] if turn not in before]
    run = tmp_path / "run"
    write_journal(run, world.records)
    write_snapshot(run, world)
    (run / "chaos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"event": "apply", "time": restart, "fault": "crash", "kind": "redis-restart", "target": "redis"},
        {"event": "recover", "time": restart + 0.01, "fault": "crash", "kind": "redis-restart", "target": "redis"})))
    code, out, err = oracle_main(capsys, "audit", run, "--gate", "strict,errors=off")
    assert code == 1, out + err
    lost = [f for f in read_findings(run) if f["class"] == "lost" and f["session"] == session]
    assert sorted(f["turn"] for f in lost) == sorted(before), lost
    for f in lost:
        assert f["evidence"]["store_restarted_at"] == {"at": restart, "kind": "redis-restart"}
        assert "before the store restarted" in f["explanation"] and "race" not in f["explanation"], f["explanation"]


def test_a_double_send_stored_out_of_order_still_leaves_the_losses_the_oldest():
    """A window memory keeping the last 2 exchanges, its bot storing a double-send's second message first: it keeps
    turn 3 and loses turn 4, which was in flight with it. The losses were not 'the oldest', and the window warning
    went for every session (bot hunt 14 #8). Turns 3 and 4 one after the other are ordered: not the oldest."""
    burst = [_turn(0, 100.0, 100.5), _turn(1, 101.0, 101.5), _turn(2, 102.0, 102.5), _turn(3, 103.0, 104.0),
             _turn(4, 103.1, 103.6), _turn(5, 105.0, 105.5)]
    found = _lost(burst, kept=[3, 5])
    assert [f["turn"] for f in found] == [0, 1, 2, 4] and all(f["evidence"].get("oldest") for f in found)
    ordered = burst[:4] + [_turn(4, 104.5, 104.8), burst[5]]
    assert not any(f["evidence"].get("oldest") for f in _lost(ordered, kept=[3, 5]))
