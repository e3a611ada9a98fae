"""The audit's fast paths change speed, never results — checked directly, with no switch and no patching:

- a session oracle/clean.py proves clean is one the exact checkers find nothing in, with the same row;
- the typed decoder's elements decode a session exactly as the exact per-entry loop does;
- a snapshot with its entries embedded as JSON re-audits exactly as one with them as text.
"""
from __future__ import annotations

import json
import random

from oracle.audit import audit_run
from oracle.checkers import check_session, journal_stats
from oracle.clean import prove_clean
from oracle.decode import Shape, decode_elements, decode_session
from oracle.history import read_journal
from oracle.store import RawSession, StoreOptions
from support_oracle import ANOMALY_KINDS, TurnSpec, build_world, inject, raw_entries, write_journal, write_snapshot


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


def raws_of(world, shape_options=StoreOptions()):
    return [RawSession(s, shape_options.key(s), False, None, [], "none") if s in world.gone else
            RawSession(s, shape_options.key(s), True, None, raw_entries(world, s), "list") for s in world.order]


def test_a_session_proven_clean_is_clean_to_the_exact_checkers(tmp_path):
    rng = random.Random(7)
    shape = Shape(StoreOptions())
    proven = exact_clean = 0
    for case in range(60):
        world = random_world(rng)
        write_journal(tmp_path / str(case), world.records)
        turns, _ = read_journal(tmp_path / str(case))
        raws = raws_of(world)
        proof = prove_clean(raws, turns, shape)
        for raw, clean, elements in zip(raws, proof.clean, proof.elements):
            exact = check_session(raw.session, turns[raw.session], raw, decode_session(raw, shape), turns)
            exact_clean += not exact.findings
            if clean:
                proven += 1
                assert exact.findings == [] and exact.stats == journal_stats(turns[raw.session]), (case, raw.session)
    assert proven > 20 and exact_clean >= proven, "the proof should cover most clean sessions"


def test_typed_elements_decode_as_the_exact_loop_does():
    rng = random.Random(3)
    for shape_options in (StoreOptions(), StoreOptions(role_field="role", content_field="content")):
        shape = Shape(shape_options)
        for _ in range(40):
            world = random_world(rng)
            for raw in raws_of(world):
                if shape_options.role_field == "role":  # the same messages in an OpenAI-like layout
                    raw.entries = [_openai(m) for m in raw.entries]
                elements = decode_elements(raw.entries, shape)
                if elements is not None:
                    assert decode_session(raw, shape, elements) == decode_session(raw, shape)


def _openai(entry: bytes) -> bytes:
    """A LangChain entry in the role/content layout (damaged entries stay as they are)."""
    try:
        m = json.loads(entry)
        return json.dumps({"role": m["type"], "content": m["data"]["content"]}).encode()
    except (ValueError, KeyError, TypeError):
        return entry


def test_a_snapshot_with_entries_as_json_reaudits_as_one_with_them_as_text(tmp_path):
    rng = random.Random(11)
    for case in range(25):
        world = random_world(rng)
        results = []
        for as_json in (True, False):
            run = tmp_path / f"case-{case}-{as_json}"
            write_journal(run, world.records, shards=2)
            write_snapshot(run, world, entries_as_json=as_json)
            summary = audit_run(run)
            summary.pop("timings")
            results.append(((run / "audit" / "anomalies.jsonl").read_bytes(),
                            (run / "audit" / "sessions.csv").read_bytes(), summary))
        assert results[0] == results[1], f"case {case}"
