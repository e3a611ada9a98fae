"""The journal's integrity against the verdict: a journal that lost lines since the run (or since its audit) is
refused, not judged as if it were the run; and a turn journaled twice with records that disagree is damage (the
``unreadable`` gate), not "kept the first", whose verdict depended on the order of the lines.

Real parts: a real redis-server holding the stored histories, a real headless Locust run for run.json.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from contracts.runfolder import RunFolder
from oracle.audit import audit_run, journal_verdict
from oracle.history import JournalError
from oracle.store import StoreOptions
from oracle.verdict import parse_gates
from support_locust import chat_bot, quick_script, run_locust
from support_oracle import build_world, fill_redis, simple_specs, write_journal

ROOT = Path(__file__).resolve().parent.parent
GATES = parse_gates("strict,errors=off")  # the worlds' refused turns are no bug here


def stored_run(tmp_path, server, sessions: int = 4, name: str = "run"):
    """A run whose bot remembered everything, stored in ``server``, journaled a minute ago (one shard)."""
    specs = [[dataclasses.replace(spec, verdict_amnesia=False) for spec in session] for session in simple_specs(sessions)]
    world = build_world(specs, start=time.time() - 60, seed=9)
    fill_redis(redis.Redis(port=server.port), world)
    run = tmp_path / name
    write_journal(run, world.records)
    return run, world


def set_run_json(run: Path, **fields) -> None:
    path = run / "run.json"
    meta = json.loads(path.read_text()) if path.exists() else {"run": "run-test", "start": time.time() - 70}
    meta.update(fields)
    path.write_text(json.dumps(meta))


def cut_half(run: Path) -> None:
    """The journal loses its second half at a line boundary (a partial copy, a bad edit)."""
    shard = next((run / "journal").glob("*.jsonl"))
    lines = shard.read_bytes().splitlines(keepends=True)
    shard.write_bytes(b"".join(lines[:len(lines) // 2]))


def audit_files(run: Path) -> dict:
    return {p.relative_to(run): p.read_bytes() for d in ("audit", "store") for p in sorted((run / d).rglob("*"))
            if p.is_file() and p.name != ".lock"}


def cli_audit(run: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oracle", "audit", str(run), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


# ---- 1. a journal cut after the run ----------------------------------------------------------------------------
def test_a_locust_run_records_the_size_of_its_whole_journal_in_run_json(tmp_path):
    """The end of the run records the journal's size (RunFolder.journal_bytes: the measure the audit records in
    its summary) once the load stopped: what a later audit is held to."""
    run_dir = tmp_path / "run"
    with chat_bot() as url:
        done = run_locust(url, run_dir, "--script", quick_script(tmp_path), users=2, rate=2, time_s="2s")
    # a 2 s run on a busy machine may see no probe answered ("nothing measured", exit 2): its size is recorded alike
    assert done.returncode == 0 or "nothing measured of memory" in done.output, done.output[-3000:]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta.get("exit_code") == done.returncode and meta["journal"] == {"bytes": RunFolder(run_dir).journal_bytes()}, meta.get("journal")
    assert meta["journal"]["bytes"] > 0


def test_an_audit_of_a_journal_cut_since_the_run_is_refused_and_replaces_nothing(tmp_path, redis_server):
    """run.json recorded the whole journal; half of it is gone. The audit judged what was left, PASS, and replaced
    the earlier summary that recorded the larger journal. Now: JournalError (exit 2 from the CLI) naming the
    journal folder, both sizes and run.json, saying to put the journal back; the earlier tables untouched."""
    run, _ = stored_run(tmp_path, redis_server)
    set_run_json(run, journal={"bytes": RunFolder(run).journal_bytes()}, end=time.time())
    store = StoreOptions(url=redis_server.url)
    assert audit_run(run, store, gates=GATES)["verdict"]["result"] == "pass"  # the whole journal: as before
    whole = RunFolder(run).journal_bytes()
    before = audit_files(run)
    cut_half(run)
    now = RunFolder(run).journal_bytes()
    with pytest.raises(JournalError) as refused:
        audit_run(run, store, gates=GATES)
    said = str(refused.value)
    assert str(run / "journal") in said and f"{now:,}" in said and f"{whole:,}" in said
    assert "run.json" in said and "Put the whole journal back" in said and "Nothing was judged or replaced" in said
    assert audit_files(run) == before
    done = cli_audit(run, "--store-url", redis_server.url, "--gate", "strict,errors=off")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "fewer than the" in done.stderr and "PASS" not in done.stdout
    assert audit_files(run) == before
    with pytest.raises(JournalError):  # from the snapshot as well
        audit_run(run, gates=GATES)


def test_without_run_json_the_earlier_audit_holds_the_journal_to_its_size(tmp_path, redis_server):
    """An older run (run.json without the size) audited once: the summary recorded the journal it judged; a
    re-audit of half of it is refused, naming audit/summary.json. The report's message says what to do (the
    journal back), no longer "audit again", which is refused."""
    from oracle import report
    from oracle.report_data import NotAudited

    run, _ = stored_run(tmp_path, redis_server)
    set_run_json(run, end=time.time())  # no journal field: an older goldfish's run
    store = StoreOptions(url=redis_server.url)
    summary = audit_run(run, store, gates=GATES)
    cut_half(run)
    with pytest.raises(NotAudited) as stale:
        report.render(run)
    assert "the journal has shrunk since this audit" in str(stale.value)
    assert "audit again" not in str(stale.value) and "Put the whole journal back" in str(stale.value)
    before = audit_files(run)
    with pytest.raises(JournalError, match=r"the earlier audit of this folder judged \(audit/summary.json\)") as e:
        audit_run(run, store, gates=GATES)
    assert f"{summary['journal']['bytes']:,}" in str(e.value)
    assert audit_files(run) == before


def test_a_journal_that_grew_or_an_older_run_without_sizes_is_audited_as_before(tmp_path, redis_server):
    """A journal larger than recorded (a worker's own copy brought in: workers/ counts in the size) is audited;
    a run with no size recorded anywhere is audited whatever its journal holds (today's behaviour)."""
    run, _ = stored_run(tmp_path, redis_server)
    shard = next((run / "journal").glob("*.jsonl"))
    set_run_json(run, journal={"bytes": RunFolder(run).journal_bytes()}, end=time.time())
    (run / "workers").mkdir()
    (run / "workers" / shard.name).write_bytes(shard.read_bytes())  # the worker's copy: same lines
    s = audit_run(run, StoreOptions(url=redis_server.url), gates=GATES)
    assert s["verdict"]["result"] == "pass" and s["journal"]["bytes"] > json.loads((run / "run.json").read_text())[
        "journal"]["bytes"]
    older, _ = stored_run(tmp_path, redis_server, name="older")
    set_run_json(older, end=time.time())
    cut_half(older)
    judged = audit_run(older, StoreOptions(url=redis_server.url), gates=GATES)  # judged, as before: no size to hold
    assert judged["journal"]["bytes"] == RunFolder(older).journal_bytes() and judged["verdict"]["result"]


# ---- 2. one turn journaled twice, records that disagree --------------------------------------------------------
def probe_record(world) -> dict:
    return next(r for r in world.records if r["kind"] == "probe" and r["verdict"] == "pass")


def _amnesia(record: dict) -> dict:
    return {**record, "verdict": "amnesia", "reply": f"I don't know your {record['fact']}."}


@pytest.mark.parametrize("where", ["adjacent", "at_the_end"])
def test_a_turn_journaled_twice_with_different_verdicts_fails_whichever_comes_first(tmp_path, redis_server, where):
    """A probe journaled as `pass` and again as `amnesia`: the audit kept the first with a warning (PASS), and the
    other order FAILed. Now each such turn is a journal line that is not a turn (the unreadable gate fails it
    under strict), whichever comes first, with a problem naming the shard, the session, the turn and what
    differs; the journal's own verdict (journal_verdict) does the same."""
    specs = [[dataclasses.replace(spec, verdict_amnesia=False) for spec in session] for session in simple_specs(8)]
    world = build_world(specs, start=time.time() - 60, seed=9)  # 8 sessions of 4 users: a user goes on
    fill_redis(redis.Redis(port=redis_server.port), world)
    store = StoreOptions(url=redis_server.url)
    for order in ("pass_first", "amnesia_first"):
        run = tmp_path / order
        good = probe_record(world)
        first, second = (good, _amnesia(good)) if order == "pass_first" else (_amnesia(good), good)
        records = [first if r is good else r for r in world.records]
        if where == "adjacent":
            records.insert(records.index(first) + 1, second)
            write_journal(run, records)
        else:  # appended to the shard, after the user started its next session (a piece of its own)
            write_journal(run, records, extra_lines={0: [json.dumps(second) + "\n"]})
        s = audit_run(run, store, gates=GATES)
        assert s["verdict"]["result"] == "fail", order
        assert s["observed"]["unreadable"]["count"] == 1, (order, s["observed"]["unreadable"])
        assert "unreadable" in " ".join(s["verdict"]["failed"])
        text = next(p for p in s["problems"] if "disagree" in p)
        assert str(run / "journal" / "local-0.jsonl") in text and good["session"] in text
        assert f"turn {good['turn']} " in text and "verdict" in text and "reply" in text
        assert not any("kept the first" in p for p in s["problems"])
        online = journal_verdict(run, GATES)
        assert online["verdict"]["result"] == "fail" and online["observed"]["unreadable"]["count"] == 1
        assert online["turns"]["total"] == len(world.records)  # the turn counted once, not once per record
        assert any("disagree" in p for p in online["problems"])


def test_an_exact_copy_of_a_turn_is_a_warning_and_an_in_flight_record_is_superseded(tmp_path, redis_server):
    """A line journaled twice byte for byte (a worker's copy merged twice) is harmless: a warning, PASS; the
    in-flight record followed by its outcome is the journal's own shape: nothing at all."""
    from contracts.journal import decode_line, in_flight, one_per_turn

    run, world = stored_run(tmp_path, redis_server)
    good = probe_record(world)
    write_journal(run, world.records, extra_lines={0: [json.dumps(good) + "\n"]})
    s = audit_run(run, StoreOptions(url=redis_server.url), gates=GATES)
    assert s["verdict"]["result"] == "pass" and s["observed"]["unreadable"]["count"] == 0
    assert any("journaled twice; kept the first" in p for p in s["problems"])
    online = journal_verdict(run, GATES)
    assert online["verdict"]["result"] == "pass" and online["observed"]["unreadable"]["count"] == 0
    assert online["turns"]["total"] == len(world.records)  # the copy is not a second turn
    turn = decode_line(json.dumps(good))
    conflicts: list = []
    assert one_per_turn([in_flight(turn), turn], conflicts) == ([turn], []) and conflicts == []
    other = decode_line(json.dumps(_amnesia(good)))
    kept, repeated = one_per_turn([in_flight(turn), turn, turn, other], conflicts)
    assert kept == [turn] and repeated == [] and [(n, a, b) for n, a, b in conflicts] == [(turn.turn, turn, other)]
