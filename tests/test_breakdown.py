"""Amnesia broken down where it explains the bug (oracle/breakdown.py): failed probes by fact, by distance
from plant to probe (a context window of k turns is a cliff at k), by replica, by what came in between;
lost turns by kind. Journals written as ChatUser writes them; one real run against refbot's window:3."""
from __future__ import annotations

import json
import random

import pytest

from oracle import breakdown, report
from support_locust import run_locust
from support_refbot import refbot_stack  # noqa: F401 - fixture

T0 = 1_700_000_000.0


def record(session, turn, kind, t, user, **extra):
    return {"run": "r", "session": session, "turn": turn, "kind": kind, "token": f"{session}t{turn}",
            "message": "", "fact": None, "nonce": None, "sent": t, "received": t + 0.05, "outcome": "ok",
            "status": 200, "reply": "", "error": None, "verdict": None, "crosstalk": [], "step": None,
            "user": user, **extra}


def window_journal(run_dir, k: int = 3, sessions: int = 160, replicas: bool = False, seed: int = 3):
    """Each session plants a fact, chats d turns (sometimes a double-send), then probes: recalled when
    d <= k (a context window of k turns), with the replica of each turn when ``replicas``."""
    rng = random.Random(seed)
    lines = []
    for i in range(sessions):
        session, user, t = f"gf{i:016x}", f"1-u{i % 8}", T0 + i * 3
        distance = 1 + i % 8
        replica = (lambda: rng.choice(["bot-1", "bot-2"])) if replicas else (lambda: None)
        lines.append(record(session, 0, "plant", t, user, fact="order number", replica=replica()))
        turn = 1
        while turn < distance:
            kind = "burst" if i % 3 == 0 and turn == 1 else "chatter"
            lines.append(record(session, turn, kind, t + turn * 0.1, user, replica=replica()))
            turn += 1
        lines.append(record(session, distance, "probe", t + distance * 0.1, user, fact="order number",
                            verdict="pass" if distance <= k else "amnesia", replica=replica()))
    (run_dir / "journal").mkdir(parents=True, exist_ok=True)
    (run_dir / "journal" / "local-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return lines


def table(data, key):
    rows = next(t for t in data["tables"] if t["key"] == key)["rows"]
    return {row["group"]: (row["count"], row["total"]) for row in rows}


def test_a_context_window_of_k_turns_is_a_cliff_at_k(tmp_path):
    window_journal(tmp_path, k=3)
    data = breakdown.compute(tmp_path)
    assert data["cliff"] == {"k": 3, "recalled": [60, 60], "forgotten": [100, 100]}
    by_turns = table(data, "distance_turns")
    assert by_turns == {d: (0 if d <= 3 else 20, 20) for d in range(1, 9)}
    assert table(data, "fact") == {"order number": (100, 160)}
    assert not data["replicas"] and "replica" not in {t["key"] for t in data["tables"]}


def test_memory_kept_per_process_fails_exactly_when_the_probe_lands_on_another_replica(tmp_path):
    lines = window_journal(tmp_path, k=99, replicas=True)
    plants = {r["session"]: r["replica"] for r in lines if r["kind"] == "plant"}
    for r in lines:
        if r["kind"] == "probe":
            r["verdict"] = "pass" if r["replica"] == plants[r["session"]] else "amnesia"
    (tmp_path / "journal" / "local-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    data = breakdown.compute(tmp_path)
    match = table(data, "replica_match")
    assert match["the replica that took the plant"][0] == 0
    assert match["another replica"][0] == match["another replica"][1] > 0
    assert data["cliff"] is None  # distance explains nothing here
    assert set(table(data, "replica")) == {"bot-1", "bot-2"}


def test_lost_turns_by_kind_are_the_audits_counts(tmp_path, redis_server):
    """The audit counts acknowledged and lost turns by kind as it judges (summary.turns.lost_by_kind, flat
    memory however many turns were lost); the breakdown shows those counts, which agree with the lost
    findings in anomalies.jsonl."""
    from collections import Counter

    from oracle.audit import audit_run
    from oracle.store import StoreOptions
    from support_oracle import build_world, inject, simple_specs, store_with_langchain, write_journal

    world = build_world(simple_specs(8), seed=11)
    rng = random.Random(2)
    for session in world.order[:5]:
        inject(world, session, "lost", rng)
    write_journal(tmp_path, world.records)
    store_with_langchain(redis_server.url, world)
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url))
    kind_of = {(r["session"], r["turn"]): r["kind"] for r in world.records}
    findings = [json.loads(line) for line in (tmp_path / "audit" / "anomalies.jsonl").read_text().splitlines()]
    lost = Counter(kind_of[(f["session"], f["turn"])] for f in findings if f["class"] == "lost")
    acked = Counter(r["kind"] for r in world.records if r["outcome"] == "ok")
    assert sum(lost.values()) == summary["metrics"]["stored_loss"]["count"] > 0
    assert summary["turns"]["lost_by_kind"] == {k: {"lost": lost[k], "acknowledged": acked[k]} for k in acked}
    assert table(breakdown.compute(tmp_path), "lost_by_kind") == {k: (lost[k], acked[k]) for k in acked}
    (tmp_path / "audit" / "summary.json").unlink()  # not audited: no table
    assert "lost_by_kind" not in {t["key"] for t in breakdown.compute(tmp_path)["tables"]}


def test_interrupted_turns_are_left_out(tmp_path):
    window_journal(tmp_path, k=99)
    with open(tmp_path / "journal" / "local-1.jsonl", "a") as f:
        f.write(json.dumps(record("gfffff", 0, "probe", T0, "9-u0", fact="x", verdict="amnesia",
                                  error="interrupted: the test stopped with this turn in flight")) + "\n")
    assert "x" not in table(breakdown.compute(tmp_path), "fact")


def test_the_report_shows_the_breakdown_and_rewrites_it_when_the_run_is_audited_again(tmp_path):
    """A journal changed after the audit is not what the audit judged: the breakdown stays until a re-audit
    (tests/test_bad_input_outputs.py: an emptied journal no longer replaces it)."""
    import os

    from support_report import synthetic

    run = synthetic(tmp_path / "r")  # run id "r", as window_journal's: the audit of the run in the folder
    window_journal(run, k=3)
    os.utime(run / "audit" / "summary.json")  # audited after the journal was written
    html = report.render(run).read_text()
    assert "A cliff at 3 turns:" in html and 'id="breakdown-distance_turns"' in html
    window_journal(run, k=5, seed=4)
    os.utime(run / "journal" / "local-1.jsonl", (T0 * 2, T0 * 2))  # newer than breakdown.json and the audit
    html = report.render(run).read_text()
    assert "A cliff at 3 turns:" in html and "changed since the audit" in html
    os.utime(run / "audit" / "summary.json", (T0 * 2 + 1, T0 * 2 + 1))  # audited again since
    assert "A cliff at 5 turns:" in report.render(run).read_text()


@pytest.mark.slow
def test_refbot_with_a_window_of_3_turns_shows_the_cliff_at_3(tmp_path, refbot_stack):  # noqa: F811
    """The default script probes facts 2, 3, 6 and 8 turns after planting them: window:3 forgets the last two."""
    stack = refbot_stack(replicas=2, mode="window:3", think_ms=0, jitter_ms=5)
    run = run_locust(stack.url, tmp_path / "run", "--store-url", stack.state["store_url"], "--settle", "0.5",
                     "--replica-header", "X-Refbot-Replica", users=6, time_s="5s", timeout=240)
    assert run.returncode == 1, run.output[-3000:]  # probe amnesia, with a perfect store
    data = json.loads((run.run_dir / "audit" / "breakdown.json").read_text())
    assert data["cliff"] is not None and data["cliff"]["k"] == 3, data
    assert set(table(data, "replica")) == {"bot-1", "bot-2"}
    assert "A cliff at 3 turns:" in (run.run_dir / "report.html").read_text()
    assert {r["replica"] for r in run.records() if r["outcome"] == "ok"} == {"bot-1", "bot-2"}
