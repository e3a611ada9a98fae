"""Recall probes failed though every acknowledged turn is stored, once and in order: a bot that replies before its
write lands FAILed on probes alone, its report saying "No anomalies" with nothing pointing at the stale read
(LangChain hunt 16). A warning says the facts were kept but not read back."""
from __future__ import annotations

import json

from support_oracle import build_world, oracle_main, simple_specs, write_journal, write_snapshot

SAID = "recall probe(s) failed, yet every acknowledged turn is stored, once and in order"


def audited(tmp_path, capsys, world) -> dict:
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    oracle_main(capsys, "audit", tmp_path)
    return json.loads((tmp_path / "audit" / "summary.json").read_text())


def test_failed_probes_over_a_whole_store_are_said_to_be_kept_but_not_read_back(tmp_path, capsys):
    summary = audited(tmp_path, capsys, build_world(simple_specs(6)))  # probes 0 and 3 answered without the fact
    assert summary["anomalies"] == {} and summary["metrics"]["probe_amnesia"]["count"] == 2
    assert any(SAID in p and p.startswith("store: 2 ") for p in summary["problems"]), summary["problems"]


def test_not_said_when_the_store_lost_something_or_every_probe_passed(tmp_path, capsys):
    from support_oracle import TurnSpec

    whole = audited(tmp_path / "a", capsys, build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")]] * 3))
    assert whole["metrics"]["probe_amnesia"]["count"] == 0 and not any(SAID in p for p in whole["problems"])
    world = build_world(simple_specs(6))
    world.stored[world.order[1]] = world.stored[world.order[1]][2:]  # its first turn lost
    lost = audited(tmp_path / "b", capsys, world)
    assert lost["anomalies"] and not any(SAID in p for p in lost["problems"])


def test_not_said_when_histories_were_not_judged():
    """Keys that expired after their conversations were not read: whether the facts were kept is unknown (bot hunt
    17: the warning said 'every acknowledged turn is stored' with no history read)."""
    from collections import Counter

    from oracle.audit import stored_yet_forgotten

    assert stored_yet_forgotten(Counter(failed_probes=3), {}) != []
    assert stored_yet_forgotten(Counter(failed_probes=3, expired_after_end=2), {}) == []
