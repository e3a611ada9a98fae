"""Input hunt 11: verdicts that blamed the bot for the test's own end, or trusted a damaged run.json.

- D9 probe_cut_by_stop_fail: a bot answering in 2.5 s run with -t 4s had its one probe cut by the stop, and the run
  FAILed "none was answered ... a bot that hangs on them", exit 1. Every probe cut short by the test's end and none
  timed out or failed is a test too short: nothing measured, exit 2, as a run that sent none.
- D4 runjson_damaged_trust_pass: a run cut short (phase load, no end) or whose workers all went missing re-audited
  NOT TRUSTED; with those fields damaged (`phase: "Load"`, `end: ""`, `start` gone, `workers_lost: true`) a plain
  PASS, exit 0. A damaged field that says whether the run can be trusted is NOT TRUSTED, as user_exceptions was.
Real audits of journaled runs with a store snapshot (support_oracle), the verdict's own functions.
"""
from __future__ import annotations

import json

import pytest

from oracle.audit import audit_run
from oracle.store import StoreOptions
from oracle.verdict import NO_PROBE_FINISHED, exit_code, trusted_exit_code
from support_oracle import TurnSpec, build_world, write_journal, write_snapshot

INTERRUPTED = "interrupted: the test stopped with this turn in flight"


def audited_with_probes(run, cut: int, timed_out: int = 0) -> dict:
    """Six conversations that planted a fact and sent a probe that never came back: ``cut`` cut short by the test's
    end, ``timed_out`` past --timeout."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "info")] for _ in range(6)], seed=7)
    probes = [r for r in world.records if r["kind"] == "probe"]
    for n, r in enumerate(probes):
        r["received"], r["status"] = None, None
        r["error"] = INTERRUPTED if n < cut else "no complete reply within --timeout 30s" if n < cut + timed_out \
            else r["error"]
    world.stored = {s: [e for e in entries if e[0] == 0] for s, entries in world.stored.items()}
    write_journal(run, world.records)
    write_snapshot(run, world)
    (run / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": 1, "end": 2e9}))
    return audit_run(run, jobs=1)


def test_probes_all_cut_short_by_the_tests_end_measured_nothing(tmp_path):
    summary = audited_with_probes(tmp_path, cut=6)
    assert NO_PROBE_FINISHED in summary["verdict"]["failed"]
    assert exit_code(summary["verdict"]) == 2


@pytest.mark.parametrize("cut, timed_out", [(5, 1), (0, 6)])
def test_a_probe_that_timed_out_is_a_bot_that_hangs(tmp_path, cut, timed_out):
    summary = audited_with_probes(tmp_path, cut=cut, timed_out=timed_out)
    assert any(line.startswith("nothing measured of memory: 6 recall probe(s) were sent and none was answered")
               for line in summary["verdict"]["failed"]), summary["verdict"]["failed"]
    assert exit_code(summary["verdict"]) == 1


PASSED = {"result": "pass", "rules": [], "failed": []}


@pytest.mark.parametrize("run", [
    {"start": 1.7e9, "end": None, "phase": "Load"},   # the phase damaged
    {"start": 1.7e9, "end": None, "phase": ["load"]},
    {"start": 1.7e9, "end": "", "phase": "load"},     # the end damaged: no end
    {"start": 1.7e9, "end": False, "phase": "load"},
    {"end": None, "phase": "load"},                   # the start gone
    {"start": None, "end": None, "phase": "heal"},
    {"start": 1.7e9, "end": None},                    # the phase gone: started, never ended
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": True},
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": "all"},
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": [1, 2]},
    # objects no run writes (input hunt 12): "-3 Locust worker(s) went missing" was printed beside a PASS
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": {"all": False, "count": -3}},
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": {}},
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": {"count": 1}},
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": {"count": True, "all": False}},
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "user_exceptions": {"count": "2", "first": "KeyError"}},
    {"start": 1.7e9, "end": 1.8e9, "phase": "done", "user_exceptions": {}},
])
def test_a_damaged_field_that_says_whether_the_run_was_cut_short_is_not_trusted(run):
    code, why = trusted_exit_code(PASSED, run)
    assert code == 3 and why, run


@pytest.mark.parametrize("run", [
    {"start": 1.7e9, "end": 1.8e9, "phase": "done"},  # a run that ended
    {"start": 1.7e9, "end": 1.8e9},                   # a run.json written by hand: no phase, an end
    {"run": "r1"},
])
def test_a_run_that_ended_whole_is_trusted(run):
    assert trusted_exit_code(PASSED, run) == (0, None)


def test_a_run_that_lost_one_worker_of_several_is_not_trusted():
    """kill -9 of one of two workers: a PASS of the rest was PASS, exit 0 (verdict hunt 14), while the same loss of
    journal lines in a local run killed mid-load is NOT TRUSTED. A FAIL stays a FAIL."""
    run = {"start": 1.7e9, "end": 1.8e9, "phase": "done", "workers_lost": {"count": 1, "all": False}}
    code, why = trusted_exit_code(PASSED, run)
    assert code == 3 and why.startswith("1 Locust worker(s) went missing during the test: the turns they had in "
                                        "flight and the journal lines they had not yet sent the master are not judged")
    assert trusted_exit_code({"result": "fail", "rules": [], "failed": ["x"]}, run) == (1, None)


# ---- verdict hunt 11: a shared staging Redis -----------------------------------------------------------

def test_another_apps_keys_with_a_ttl_under_the_prefix_are_not_this_bots_ttl(tmp_path, redis_server):
    """Another application's chat histories under `message_store:` with a 5 s TTL, this bot's with none: its TTLs
    made a FLUSHDB of the run's keys read as "expired after the conversation", and the run PASSed (the store judged
    not at all). Only keys under the template named by a goldfish id count; with ids the bot issues, any key."""
    import time

    from oracle.keys import ttl_floor
    from support_oracle import fill_redis

    client = redis_server.client()
    client.rpush("message_store:otherapp-1", "hello")
    client.expire("message_store:otherapp-1", 5)
    assert ttl_floor(client, "message_store:{session}") == (None, 0)
    assert ttl_floor(client, "message_store:{session}", any_id=True)[0] is not None  # --session-from: the bot's ids

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(4)], start=time.time() - 120, seed=13)
    write_journal(tmp_path, world.records)
    fill_redis(client, world)
    client.delete(f"message_store:{world.order[0]}")  # flushed by someone else: the bot set no TTL
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url))
    assert summary["anomalies"].get("vanished") == 1 and exit_code(summary["verdict"]) == 1
    assert summary["turns"]["total"] == 12 and not [p for p in summary["problems"] if "expired after" in p]


def test_a_run_whose_store_was_flushed_after_its_own_audit_is_not_judged_from_the_empty_store(tmp_path, redis_server):
    """A soak (rolling audit) PASSed; its Redis was flushed after the run. A live re-audit said "FAIL: 12 sessions
    whose whole history is gone" and replaced the PASSed run's snapshot. The run's own complete read of this store
    (its snapshot) found every session: lost since, exit 2, snapshot kept. Keys the rolling audit read and lost
    before the run's own audit stay a loss (tests/test_oracle_rolling.py)."""
    import time

    from oracle import audit_cli
    from oracle.keys import TemplateMismatch
    from support_oracle import fill_redis

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(12)],
                        start=time.time() + 2, seed=17)
    write_journal(tmp_path, world.records)
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": time.time()}))
    fill_redis(redis_server.client(), world)
    store = StoreOptions(url=redis_server.url)
    assert exit_code(audit_run(tmp_path, store)["verdict"]) == 0
    snapshot = (tmp_path / "store" / "meta.json").read_text()
    redis_server.client().flushall()
    with pytest.raises(TemplateMismatch, match="complete read for the run .* found every one of them"):
        audit_run(tmp_path, store)
    assert (tmp_path / "store" / "meta.json").read_text() == snapshot
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 0  # its own reading still PASSes



def test_a_worker_lost_mid_run_is_said_in_the_audit_not_only_on_the_terminal(tmp_path):
    """kill -9 of one of two workers: the run PASSed on the rest, and summary.json and report.html said nothing of
    the lost worker's unjudged turns (only run.json and one terminal line did). The audit's verdict of such a run is
    NOT TRUSTED, and its summary keeps run.json's workers_lost (run_record) for the readers."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(4)], seed=19)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    meta = {"run": world.records[0]["run"], "start": 1.0, "end": 2e9, "workers_lost": {"count": 1, "all": False}}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    summary = audit_run(tmp_path, jobs=1)
    assert exit_code(summary["verdict"]) == 0 and summary["run_record"]["workers_lost"] == meta["workers_lost"]
    code, why = trusted_exit_code(summary["verdict"], summary["run_record"])
    assert code == 3 and "1 Locust worker(s) went missing" in why