"""A chaos timeline (chaos.jsonl) torn, emptied or removed, while run.json's plan had faults due during the load.

Before: the audit read such a timeline as "the plan applied no fault", so the failed requests the faults caused
were excused by nothing and the bot FAILed on the errors gate (exit 1), with the warning "(each was due after the
load ended, or none could apply)", false for faults due at +3 s of a 10 s load. A timeline cut inside a later line
said "drop#0 due at +7s ... but the load ended at +10.0s", a reason that contradicts itself. Now an occurrence the
plan had due during the load with no record at all on the timeline is bad input, exit 2, naming chaos.jsonl and
the occurrences, as a garbled line is; the deliberate way to judge without faults is said with it (the plan out of
run.json). Occurrences skipped by the plan's own rules (recorded), due after the load ended, or due as it ended
(the test stopping first) are no damage; a fault that failed to apply still FAILs the run.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from support_oracle import TurnSpec, build_world, fill_redis, write_journal, write_snapshot

pytestmark = [pytest.mark.timeout(120)]

FAILED = range(12, 15)  # the sessions whose second turn fails: 503s under the kill


def _run(tmp_path: Path, late: bool = False, drop_at: float | None = None) -> dict:
    """A run folder as Locust leaves it: a journal whose failed requests all fall under a kill of the bot, a store
    snapshot, run.json with the plan (a kill due before the failures, a redis-client-kill later in the load, and
    with ``late`` a pause due long after the load ended) and the whole timeline. Returns what the tests need."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "fail" if i in FAILED else "ok"), TurnSpec("probe", "ok")]
             for i in range(40)]
    world = build_world(specs, seed=5)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    first = min(r["sent"] for r in world.records)
    end = max(r["received"] or r["sent"] for r in world.records)
    fails = [r["sent"] for r in world.records if r["outcome"] == "fail"]
    start = first - 0.5
    kill_at = math.floor((min(fails) - start - 0.5) * 4) / 4  # a quarter second, before the first failure
    duration = math.ceil(max(fails) - min(fails)) + 1
    drop_at = drop_at if drop_at is not None else kill_at + duration + 1
    assert 1 < kill_at and kill_at + duration + 1 < end - start - 2.5, (kill_at, duration, end - start)
    plan = (f"faults:\n  - {{id: k, kind: kill, target: bot, at: {kill_at}s, duration: {duration}s}}\n"
            f"  - {{id: drop, kind: redis-client-kill, target: redis, at: {drop_at}s}}\n"
            + ("  - {id: late, kind: pause, target: bot, at: 600s, duration: 5s}\n" if late else ""))
    run = {"run": world.records[0]["run"], "plan": "plans/p.yaml", "plan_text": plan, "start": start,
           "end": end + 3, "phase": "done"}
    (tmp_path / "run.json").write_text(json.dumps(run))
    t0 = start + 0.004  # the controller is armed just after run.json is written
    base = {"backend": "local", "outcome": "ok", "error": None}
    lines = [{**base, "fault": "k#0", "kind": "kill", "target": "bot", "instance": "bot-1", "event": "apply",
              "time": t0 + kill_at + 0.001, "planned": t0 + kill_at, "params": {"duration": duration}},
             {**base, "fault": "k#0", "kind": "kill", "target": "bot", "instance": "bot-1", "event": "recover",
              "time": t0 + kill_at + duration + 0.4, "via": "schedule"},
             {**base, "fault": "drop#0", "kind": "redis-client-kill", "target": "redis", "instance": "redis",
              "event": "apply", "time": t0 + drop_at + 0.001, "planned": t0 + drop_at, "detail": {"touched": 3}},
             {**base, "fault": "drop#0", "kind": "redis-client-kill", "target": "redis", "instance": "redis",
              "event": "recover", "time": t0 + drop_at + 0.01, "via": "schedule"}]
    write_timeline(tmp_path, lines)
    return {"world": world, "lines": lines, "start": start, "end": end, "kill_at": kill_at, "drop_at": drop_at}


def write_timeline(run_dir: Path, lines: list[dict]) -> Path:
    path = run_dir / "chaos.jsonl"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
    return path


def audit(capsys, run_dir: Path, *args) -> tuple[int, str, str]:
    from oracle import audit_cli

    code = audit_cli.main([str(run_dir), "--jobs", "1", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_whole_timeline_passes_and_without_it_the_failures_fail(tmp_path, capsys):
    """The fixture itself: with the timeline the kill excuses the 503s (PASS); judged deliberately without faults
    (no chaos.jsonl, no plan in run.json) they fail the errors gate."""
    _run(tmp_path)
    code, out, err = audit(capsys, tmp_path)
    assert code == 0 and "PASS" in out, out + err
    assert "never applied" not in out and "applied no fault" not in out, out
    (tmp_path / "chaos.jsonl").unlink()
    run = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps({**run, "plan": None}))
    code, out, err = audit(capsys, tmp_path)
    assert code == 1 and "errors: 3 failed requests no fault was in force to explain" in out, out + err


@pytest.mark.parametrize("damage", ["first-line-torn", "emptied", "removed"])
def test_a_timeline_torn_emptied_or_removed_is_bad_input_not_a_fail(damage, tmp_path, capsys):
    """The hunt's repro (D5): exit 1, FAIL on errors, and "each was due after the load ended". Now exit 2 naming
    the file, how many occurrences it lacks, the first, and what to do."""
    made = _run(tmp_path)
    path = tmp_path / "chaos.jsonl"
    if damage == "first-line-torn":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "emptied":
        path.write_bytes(b"")
    else:
        path.unlink()
    code, out, err = audit(capsys, tmp_path)
    assert code == 2, out + err
    assert "FAIL" not in out and "errors:" not in out, out
    said = f"{path} has no record of 2 fault occurrence(s) the plan plans/p.yaml had due during the load (first: " \
           f"k#0 (kill on bot) due at +{made['kill_at']:g}s; the load ended at +"
    assert said in err, err
    state = {"first-line-torn": "the chaos timeline is torn (its last line is cut short",
             "emptied": "the chaos timeline is empty", "removed": "the chaos timeline is missing (no such file)"}
    assert state[damage] in err, err
    assert "which failed requests a fault caused cannot be told" in err, err
    assert f'set "plan" to null in {tmp_path / "run.json"}' in err, err
    assert ("remove the file and set" in err) == (damage != "removed"), err
    assert not (tmp_path / "audit" / "summary.json").exists()


def test_a_live_audit_of_a_removed_timeline_is_refused_before_a_verdict(tmp_path, capsys, redis_server):
    """The same from the store itself (``--store-url``) as from its snapshot."""
    made = _run(tmp_path)
    fill_redis(redis_server.client(), made["world"])
    (tmp_path / "chaos.jsonl").unlink()
    code, out, err = audit(capsys, tmp_path, "--store-url", redis_server.url)
    assert code == 2, out + err
    assert f"{tmp_path / 'chaos.jsonl'} has no record of 2 fault occurrence(s)" in err, err
    assert "FAIL" not in out, out


def test_the_verdict_from_the_journal_alone_refuses_it_too(tmp_path):
    """The end of a Locust run without a store audit (--no-audit) judges from the journal: the same rule."""
    from oracle import TimelineError, journal_verdict

    _run(tmp_path)
    (tmp_path / "chaos.jsonl").write_bytes(b"")
    with pytest.raises(TimelineError, match=r"chaos\.jsonl has no record of 2 fault occurrence\(s\)"):
        journal_verdict(tmp_path)


def test_a_torn_last_line_that_was_an_apply_leaves_its_occurrence_missing(tmp_path, capsys):
    """The controller killed while writing drop#0's apply: the torn last line is skipped, as everywhere, and
    drop#0 has no record: before, PASS with "drop#0 due at +Ns ... but the load ended at +Ms" (N < M)."""
    made = _run(tmp_path)
    raw = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in made["lines"][:2]) + \
        json.dumps(made["lines"][2], separators=(",", ":"))[:60]
    (tmp_path / "chaos.jsonl").write_text(raw)
    code, out, err = audit(capsys, tmp_path)
    assert code == 2, out + err
    assert f"has no record of 1 fault occurrence(s) the plan plans/p.yaml had due during the load (first: drop#0 " \
           f"(redis-client-kill on redis) due at +{made['drop_at']:g}s" in err, err
    assert "its last line is cut short" in err, err


def test_a_torn_apply_due_as_the_load_ended_is_missing_too(tmp_path, capsys):
    """An occurrence due in the load's last seconds may legitimately have no record (the test stopped first), but
    not when the timeline's last line is torn: that line may be its apply."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "run").mkdir()
    probe = _run(tmp_path / "probe")
    drop_at = round(probe["end"] - probe["start"] - 1.0, 2)  # within ENDING_S of the load's end
    lines = _run(tmp_path / "run", drop_at=drop_at)["lines"]
    write_timeline(tmp_path / "run", lines[:2])  # no record of drop#0, the file whole: the test stopped first
    code, out, err = audit(capsys, tmp_path / "run")
    assert code == 0, out + err
    assert f"drop#0 (redis-client-kill) due at +{drop_at:g}s after the test started at " in out, out
    assert "within 2s of the load's end (as the test stopped: the load ended at +" in out, out
    raw = (tmp_path / "run" / "chaos.jsonl").read_text() + json.dumps(lines[2], separators=(",", ":"))[:60]
    (tmp_path / "run" / "chaos.jsonl").write_text(raw)
    code, out, err = audit(capsys, tmp_path / "run")
    assert code == 2 and "no record of 1 fault occurrence(s)" in err and "drop#0" in err, out + err


def test_an_occurrence_the_plan_skipped_is_no_damage(tmp_path, capsys):
    """drop#0 skipped by the plan's own rules (max_concurrent): recorded as an apply with outcome error "skipped:",
    no recover. That is a record: no exit 2, no failure, no "never applied"."""
    made = _run(tmp_path)
    skipped = {**made["lines"][2], "outcome": "error", "error": "skipped: max_concurrent 1 reached (1 outstanding)"}
    skipped.pop("detail")
    write_timeline(tmp_path, made["lines"][:2] + [skipped])
    code, out, err = audit(capsys, tmp_path)
    assert code == 0 and "PASS" in out, out + err
    assert "never applied" not in out and "did not apply" not in out, out


def test_a_fault_that_failed_to_apply_still_fails_the_run(tmp_path, capsys):
    """oracle.timeline.unapplied is kept: drop#0's apply failed (the target not running): FAIL, exit 1."""
    made = _run(tmp_path)
    failed = {**made["lines"][2], "outcome": "error", "error": "NotApplied: redis is not running (no process)"}
    write_timeline(tmp_path, made["lines"][:2] + [failed])
    code, out, err = audit(capsys, tmp_path)
    assert code == 1, out + err
    assert "chaos: 1 fault occurrence(s) of the plan did not apply (first: drop#0 (redis-client-kill on redis)" \
        in out, out


def test_an_occurrence_due_after_the_load_is_said_as_such(tmp_path, capsys):
    """late#0 due at +600 s of a run whose load ended before +20 s: no record, rightly: no exit 2, and the
    warning says it was due after the load ended."""
    made = _run(tmp_path, late=True)
    code, out, err = audit(capsys, tmp_path)
    assert code == 0 and "PASS" in out, out + err
    ended = made["end"] - made["start"]
    said = "chaos: 1 of the 3 fault occurrence(s) of the plan plans/p.yaml never applied: late#0 (pause) due at " \
           "+600s after the test started at "
    assert said in out and f"but the load ended at +{ended:.1f}s" in out, out
    assert "no record of them" not in out, out


def test_a_plan_that_applied_nothing_says_why_by_the_due_times(tmp_path, capsys):
    """No fault applied: the warning counts the occurrences by why, their due times against the load's end,
    instead of "(each was due after the load ended, or none could apply)" whatever the times were."""
    made = _run(tmp_path, late=True)
    skipped = [{**r, "outcome": "error", "error": "skipped: every instance of the target is already under a fault"}
               for r in made["lines"] if r["event"] == "apply"]
    write_timeline(tmp_path, skipped)
    code, out, err = audit(capsys, tmp_path)
    assert code == 1, out + err  # the 503s are excused by nothing: no fault was in force
    ended = made["end"] - made["start"]
    assert "chaos: the plan plans/p.yaml applied no fault during the run (of its 3 occurrence(s): 2 skipped or " \
           f"failed to apply, as the timeline says, 1 due after the load ended; the load ended at +{ended:.1f}s" \
           in out, out


def test_an_unrecorded_occurrence_during_the_load_is_not_said_to_be_late(tmp_path):
    """idle_plan on its own (the audit refuses such a timeline first): an occurrence due at +Ns of a load that
    ended at +Ms, M > N, was "due at +Ns ... but the load ended at +Ms". Now: before the load ended, with no
    record of it."""
    from oracle.timeline import idle_plan, load_faults

    made = _run(tmp_path)
    write_timeline(tmp_path, made["lines"][:2])
    said = idle_plan(tmp_path, load_faults(tmp_path), made["end"])
    ended = made["end"] - made["start"]
    assert said.startswith("chaos: 1 of the 2 fault occurrence(s) of the plan plans/p.yaml never applied: drop#0 "
                           f"(redis-client-kill) due at +{made['drop_at']:g}s after the test started at "), said
    assert f"before the load ended at +{ended:.1f}s" in said and "yet the timeline has no record of them" in said, said
    assert "but the load ended" not in said, said


def test_a_run_without_a_plan_needs_no_timeline(tmp_path, capsys):
    """No chaos plan in run.json, no chaos.jsonl: judged without faults as before (the 503s fail it), never exit 2."""
    _run(tmp_path)
    (tmp_path / "chaos.jsonl").unlink()
    run = json.loads((tmp_path / "run.json").read_text())
    del run["plan"], run["plan_text"]
    (tmp_path / "run.json").write_text(json.dumps(run))
    code, out, err = audit(capsys, tmp_path)
    assert code == 1 and "errors:" in out, out + err
    assert "chaos" not in out + err, out + err
