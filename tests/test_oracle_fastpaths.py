"""The audit's fast paths (the batch proof of clean sessions, bulk decode, chunked journal reading,
entries embedded as JSON in the snapshot) change speed, never results: on random damaged worlds the audit tables are identical with them switched off."""
from __future__ import annotations

import json
import random

from oracle import audit, decode, history
from oracle.audit import audit_run
from oracle.clean import BatchProof
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


def reference_audit(run, monkeypatch) -> None:
    with monkeypatch.context() as m:
        m.setattr(audit, "prove_clean", lambda batch, *a: BatchProof([False] * len(batch), [None] * len(batch)))
        m.setattr(decode, "_decode_clean_list", lambda *a: False)
        m.setattr(decode, "decode_elements", lambda *a: None)
        m.setattr(history, "decode_chunk", lambda lines: None)
        audit_run(run)


def test_fast_paths_give_the_same_audit(tmp_path, monkeypatch):
    rng = random.Random(7)
    proven = 0
    original = audit.prove_clean
    for case in range(40):
        world = random_world(rng)
        results = []
        for as_json in (True, False):
            run = tmp_path / f"case-{case}-{'json' if as_json else 'text'}"
            run.mkdir()
            write_journal(run, world.records, shards=2)
            write_snapshot(run, world, entries_as_json=as_json)
            with monkeypatch.context() as m:
                proofs = []
                m.setattr(audit, "prove_clean", lambda *a: proofs.append(original(*a)) or proofs[-1])
                audit_run(run)
                proven += sum(sum(p.clean) for p in proofs)
            results.append(outputs(run))
            reference_audit(run, monkeypatch)
            results.append(outputs(run))
        assert results[1] == results[0], f"case {case}: fast paths changed the audit"
        assert results[2:] == results[:2], f"case {case}: the snapshot's JSON entries changed the audit"
    assert proven > 0, "the batch proof of clean sessions was never exercised"
