"""The audit's fast paths (bulk decode, the clean-session shortcut, chunked journal reading) change
speed, never results: on random damaged worlds the audit tables are identical with them switched off."""
from __future__ import annotations

import json
import random

from oracle import checkers, decode, history
from oracle.audit import audit_run
from support_oracle import ANOMALY_KINDS, TurnSpec, build_world, inject, write_journal, write_snapshot


def outputs(run):
    audit = run / "audit"
    summary = json.loads((audit / "summary.json").read_text())
    summary.pop("timings", None)
    summary["store"].pop("audit_seconds", None)
    return ((audit / "anomalies.jsonl").read_bytes(), (audit / "sessions.csv").read_bytes(),
            (audit / "windows.csv").read_bytes(), summary)


def random_world(rng: random.Random):
    specs = [[TurnSpec(kind=rng.choice(["plant", "probe", "chatter"]),
                       outcome=rng.choice(["ok", "ok", "ok", "info", "fail"]), burst=rng.choice([1, 1, 1, 2, 3]),
                       info_store=rng.choice(["both", "user", "none"]), verdict_amnesia=rng.random() < 0.3)
              for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 6))]
    seed = rng.randint(0, 10000)
    world, damage = build_world(specs, seed=seed), random.Random(seed)
    for session in world.order:
        kind = rng.choice(ANOMALY_KINDS + (None, None, None, None))
        if kind:
            inject(world, session, kind, damage)
    return world


def test_fast_paths_give_the_same_audit(tmp_path, monkeypatch):
    rng = random.Random(7)
    shortcut_taken = 0
    original = checkers._clean_session
    for case in range(40):
        run = tmp_path / f"case-{case}"
        run.mkdir()
        world = random_world(rng)
        write_journal(run, world.records, shards=2)
        write_snapshot(run, world)
        with monkeypatch.context() as m:
            calls = []
            m.setattr(checkers, "_clean_session", lambda *a: calls.append(original(*a)) or calls[-1])
            audit_run(run)
            shortcut_taken += sum(calls)
        fast = outputs(run)
        with monkeypatch.context() as m:
            m.setattr(decode, "_decode_clean_list", lambda *a: False)
            m.setattr(checkers, "_clean_session", lambda *a: False)
            m.setattr(history, "_typed_chunk", lambda lines: None)
            m.setattr(history, "_typed_turn", lambda record: None)
            audit_run(run)
        assert outputs(run) == fast, f"case {case}: fast paths changed the audit"
    assert shortcut_taken > 0, "the clean-session shortcut was never exercised"
