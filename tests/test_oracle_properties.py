"""Property-based: random journals, the store a correct system would hold, known damage -> exactly that damage.

No Redis here: the world is written as a run folder with a store/ snapshot, and the whole
audit (decode, checkers, tables) runs on it, so this also pins the snapshot round trip.
"""
from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from oracle.audit import audit_run
from support_oracle import ANOMALY_KINDS, TurnSpec, build_world, finding_keys, inject, write_journal, write_snapshot

turn_specs = st.builds(
    TurnSpec,
    kind=st.sampled_from(["plant", "probe", "chatter"]),
    outcome=st.sampled_from(["ok", "ok", "ok", "info", "fail"]),
    burst=st.sampled_from([1, 1, 1, 2, 3]),
    info_store=st.sampled_from(["both", "user", "none"]),
    verdict_amnesia=st.booleans(),
)
sessions = st.lists(st.lists(turn_specs, min_size=1, max_size=8), min_size=1, max_size=6)
damage = st.sampled_from(ANOMALY_KINDS + (None, None))


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=sessions, plan=st.lists(damage, min_size=6, max_size=6), seed=st.integers(0, 10_000),
       ttl=st.booleans(), foreign=st.booleans())
@example(  # two sessions whose only stored pairs were bursts, stored newest first: 'the wrong --direction', exit 2
    specs=[[TurnSpec("plant", "info", 1, "none", False), TurnSpec("plant", "ok", 2, "both", False),
            TurnSpec("plant", "ok", 1, "both", False)],
           [TurnSpec("plant", "info", 3, "none", False), TurnSpec("plant", "ok", 1, "both", False),
            TurnSpec("plant", "ok", 1, "both", False)]],
    plan=["unanswered", "unanswered", "lost", "lost", "lost", "lost"], seed=52, ttl=False, foreign=False)
def test_reports_exactly_the_injected_anomalies(specs, plan, seed, ttl, foreign):
    world = build_world(specs, seed=seed)
    rng = random.Random(seed)
    expected = set()
    for session, kind in zip(world.order, plan):
        if kind:
            expected |= inject(world, session, kind, rng)
    if ttl:  # a store with key expiry: a gone session is reported as expired
        for session in world.order:
            if session not in world.gone:
                world.ttl[session] = 3600
        if any(s not in world.gone for s in world.order):
            expected = {("expired" if c == "vanished" else c, s, t) for c, s, t in expected}
    if foreign:  # others' keys in a shared store: information, never a finding
        world.foreign.append({"key": "message_store:someone-else", "type": "list", "length": 4})
        world.foreign.append({"key": "message_store:gf00000000000000aa", "type": "list", "length": 2})
    # a correct store may leave out indeterminate turns, or hold them: never an anomaly
    run = Path(tempfile.mkdtemp(prefix="oracle-prop-"))
    try:
        write_journal(run, world.records, shards=2)
        write_snapshot(run, world)
        summary = audit_run(run)
        assert finding_keys(run) == expected
        info = [r for r in world.records if r["outcome"] == "info"]
        assert summary["turns"]["info"] == len(info)
        stored_info = {(s, t) for s in world.order if s not in world.gone for t, m in world.stored[s]
                       if isinstance(m, dict) and m["type"] == "human"}
        assert summary["turns"]["info_stored"] == sum((r["session"], r["turn"]) in stored_info for r in info)
        probes = [r for r in world.records if r["kind"] == "probe" and r["outcome"] == "ok"]
        assert summary["metrics"]["probe_amnesia"]["total"] == len(probes)
        assert summary["metrics"]["probe_amnesia"]["count"] == sum(r["verdict"] == "amnesia" for r in probes)
        foreign_keys = summary["information"]["foreign_keys"]
        assert (foreign_keys["not_goldfish"], foreign_keys["other_goldfish_runs"]) == ((1, 1) if foreign else (0, 0))
        # strict by default: the run fails exactly when something was found (a failed request is
        # one too: no fault was in force to explain it)
        found = bool(expected) or summary["metrics"]["probe_amnesia"]["count"] > 0 or \
            any(r["outcome"] != "ok" for r in world.records)
        assert summary["verdict"]["result"] == ("fail" if found else "pass"), summary["verdict"]["failed"]
    finally:
        shutil.rmtree(run, ignore_errors=True)


@settings(max_examples=30, deadline=None)
@given(specs=sessions, seed=st.integers(0, 10_000))
def test_a_correct_store_has_no_anomalies(specs, seed):
    world = build_world(specs, seed=seed)
    run = Path(tempfile.mkdtemp(prefix="oracle-clean-"))
    try:
        write_journal(run, world.records)
        write_snapshot(run, world)
        summary = audit_run(run)
        assert finding_keys(run) == set()
        assert summary["metrics"]["stored_loss"]["count"] == 0
    finally:
        shutil.rmtree(run, ignore_errors=True)
