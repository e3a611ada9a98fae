"""Input hunt 14, the journal: lines of another run inside a shard, damaged lines judged as turns of the wrong class,
the name of a byte that is not UTF-8, and such a byte in a field name.

Each was judged or said wrong before: another run's lines FAILed this run ("sessions whose whole history is gone")
and replaced its PASS; ``"crosstalk": ["nonsense"]`` was cross-talk and ``"verdict": "amnesia"`` on a chatter line a
probe that failed (not lines that are not a turn); a line starting with 0xff was "invalid character (byte 0)"; and a
field name holding 0xff was dropped silently (the line a good turn) while the same byte in a value made it unreadable.
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
import redis

from contracts import codec
from contracts.journal import RecordError, decode_chunk, decode_line
from oracle import audit_cli
from oracle.audit import audit_run
from oracle.store import StoreOptions
from oracle.verdict import parse_gates
from support_oracle import RUN, build_world, fill_redis, session_id, simple_specs, write_journal, write_snapshot

GATES = "strict,errors=off"  # the worlds' refused turns are no bug here


def shard_of(run: Path) -> Path:
    return next((run / "journal").glob("*.jsonl"))


def audit_files(run: Path) -> dict:
    """Every file the audit writes (its tables, the snapshot), as bytes: what must stay as it was."""
    return {p.relative_to(run): p.read_bytes() for d in ("audit", "store") for p in sorted((run / d).rglob("*"))
            if p.is_file() and p.name != ".lock"}


def remembered(sessions: int) -> list:
    """``simple_specs`` with every probe answered right."""
    return [[dataclasses.replace(spec, verdict_amnesia=False) for spec in session] for session in simple_specs(sessions)]


def snapshot_run(run: Path, seed: int = 5):
    """A run of a bot that remembered everything: its journal (run ``RUN``) and a complete snapshot of its store."""
    world = build_world(remembered(4), seed=seed)
    write_journal(run, world.records)
    write_snapshot(run, world)
    return world


def other_run_lines(start: float, seed: int = 6, run: str = "runB") -> str:
    """Journal lines of another run at the same time, with sessions of its own."""
    return "".join(json.dumps({**r, "run": run}) + "\n"
                   for r in build_world(simple_specs(2), start=start, seed=seed).records)


# ---- 1. lines of another run inside a shard ----------------------------------------------------------------------

def test_lines_of_another_run_appended_to_a_shard_are_refused_live_and_nothing_is_replaced(tmp_path, redis_server,
                                                                                           capsys):
    """Was: exit 1, "sessions whose whole history is gone", and the earlier PASS summary and snapshot replaced
    (only each shard's first turn was compared). Now exit 2 naming the file:line and both runs; nothing replaced."""
    start = time.time() - 60
    world = build_world(remembered(4), start=start, seed=9)
    fill_redis(redis.Redis(port=redis_server.port), world)
    run = tmp_path / "run"
    write_journal(run, world.records)
    assert audit_run(run, StoreOptions(url=redis_server.url), gates=parse_gates(GATES))["verdict"]["result"] == "pass"
    before = audit_files(run)
    shard = shard_of(run)
    first_other = len(shard.read_text().splitlines()) + 1
    with open(shard, "a") as fh:
        fh.write(other_run_lines(start))
    for jobs in ("1", "2"):
        code = audit_cli.main([str(run), "--store-url", redis_server.url, "--gate", GATES, "--jobs", jobs])
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"{shard}:{first_other}: the journal holds lines of another run" in err, err
        assert "'runB'" in err and f"'{RUN}'" in err
        assert audit_files(run) == before


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_one_line_of_another_run_mid_shard_is_refused_in_a_re_audit_from_the_snapshot(tmp_path, capsys, jobs):
    """Was (offline, hunt case j-other-run): a line of run 'other' of a session this run has, FAIL ("acknowledged
    turns the store lost"). Now exit 2 naming that line, not the snapshot's "line(s) no journaled session asked
    for" (the sessions left unjudged when the read stops), and the earlier tables kept."""
    world = snapshot_run(tmp_path)
    assert audit_cli.main([str(tmp_path), "--gate", GATES, "--jobs", jobs]) == 0
    before = audit_files(tmp_path)
    capsys.readouterr()
    shard = shard_of(tmp_path)
    lines = shard.read_text().splitlines(keepends=True)
    stranger = {**next(r for r in world.records if r["outcome"] == "ok"), "run": "other", "turn": 777}
    shard.write_text("".join(lines[:10]) + json.dumps(stranger) + "\n" + "".join(lines[10:]))
    assert audit_cli.main([str(tmp_path), "--gate", GATES, "--jobs", jobs]) == 2
    err = capsys.readouterr().err
    assert f"{shard}:11: the journal holds lines of another run: this line is run 'other'" in err, err
    assert f"'{RUN}'" in err and "asked for" not in err
    assert audit_files(tmp_path) == before


def test_lines_without_a_run_are_anyones_as_before(tmp_path):
    """Older or hand-written journals: lines with no ``run`` (absent or null) among this run's are judged as before."""
    world = snapshot_run(tmp_path)
    records = [dict(r) for r in world.records]
    for i, r in enumerate(records):
        if i % 2:
            del r["run"]
        elif i % 3 == 0:
            r["run"] = None
    write_journal(tmp_path, records)  # in place of the journal snapshot_run wrote
    summary = audit_run(tmp_path, gates=parse_gates(GATES), jobs=1)
    assert summary["verdict"]["result"] == "pass" and summary["run"] == RUN


# ---- 2. damaged lines are not turns of another class ---------------------------------------------------------------

CHATTER = {"run": RUN, "session": session_id(1), "turn": 2, "kind": "chatter", "token": session_id(1) + "t2",
           "message": "hi", "sent": 1_700_000_000.0, "received": 1_700_000_000.5, "outcome": "ok", "status": 200,
           "reply": "Noted.", "verdict": None, "crosstalk": []}


@pytest.mark.parametrize("change, reason", [
    ({"crosstalk": ["nonsense"]}, "crosstalk ['nonsense'] is not a list of session ids"),
    ({"crosstalk": [session_id(2), "gf12"]}, "is not a list of session ids"),
    ({"verdict": "amnesia"}, "verdict 'amnesia' on a chatter turn: only a probe has a verdict"),
    ({"verdict": "pass", "kind": "plant"}, "verdict 'pass' on a plant turn: only a probe has a verdict"),
    ({"verdict": "pass", "kind": None}, "verdict 'pass' on a chatter turn"),
])
def test_a_line_of_the_wrong_class_is_not_a_turn_on_both_paths(change, reason):
    """The C fast path (``decode_chunk``) gives the line up, and ``decode_line`` says why."""
    good = json.dumps(CHATTER).encode()
    bad = json.dumps({**CHATTER, **change}).encode()
    assert decode_chunk([good, good]) is not None
    assert decode_chunk([good, bad]) is None
    with pytest.raises(RecordError, match=re.escape(reason)):
        decode_line(bad)


def test_cross_talk_of_session_ids_and_a_probe_verdict_still_read_on_both_paths():
    other = session_id(7)
    for line in ({**CHATTER, "crosstalk": [other]}, {**CHATTER, "kind": "probe", "verdict": "amnesia"},
                 {**CHATTER, "kind": "probe", "verdict": None}):
        raw = json.dumps(line).encode()
        fast, slow = decode_chunk([raw]), decode_line(raw)
        assert fast is not None and fast[0] == slow
    assert decode_line(json.dumps({**CHATTER, "crosstalk": [other]})).crosstalk == (other,)


@pytest.mark.parametrize("change, named", [
    ('"crosstalk": ["nonsense"]', "not a list of session ids"),
    ('"verdict": "amnesia"', "only a probe has a verdict"),
])
def test_the_audit_counts_a_line_of_the_wrong_class_as_not_a_turn(tmp_path, change, named):
    """Was: FAIL on cross-talk (a) or amnesia (c) that did not happen, also with ``unreadable=1`` allowed. Now one
    journal line that is not a turn, with its file:line; the unreadable gate allowing it, the run PASSes."""
    snapshot_run(tmp_path)
    shard = shard_of(tmp_path)
    lines = shard.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"kind": "chatter"' in line and '"outcome": "ok"' in line)
    key = change.split(":")[0]
    lines[at] = lines[at].replace(f'{key}: {"[]" if "crosstalk" in key else "null"}', change)
    assert change in lines[at]
    shard.write_text("".join(lines))
    summary = audit_run(tmp_path, gates=parse_gates(GATES + ",unreadable=1"), jobs=1)
    assert summary["observed"]["unreadable"]["count"] == 1
    assert summary["verdict"]["result"] == "pass", summary["verdict"]
    assert summary["observed"]["crosstalk"]["count"] == 0 and summary["observed"]["probe_amnesia"]["count"] == 0
    assert any(p.startswith(f"{shard}:{at + 1}: ") and named in p for p in summary["problems"]), summary["problems"]


def test_of_duplicate_keys_the_last_wins_on_both_paths():
    """Not detected (docs/CONTRACTS.md: it would cost the fast path); the fast and the exact path agree."""
    raw = json.dumps(CHATTER).replace('"outcome": "ok"', '"outcome": "ok", "outcome": "fail"').encode()
    assert decode_chunk([raw])[0].outcome == decode_line(raw).outcome == "fail"


# ---- 3. the name of a byte that is not UTF-8 -----------------------------------------------------------------------

def test_a_byte_that_is_not_utf8_is_named_with_its_offset():
    """Was: "invalid start byte at byte 0" (and msgspec's "invalid character (byte 0)"): read as a NUL byte."""
    with pytest.raises(codec.DecodeError, match=r"^not JSON: not UTF-8 text \(byte 0xff at offset 0\)$"):
        codec.loads(b"\xff\xfe{}")
    with pytest.raises(codec.DecodeError, match=r"not UTF-8 text \(byte 0xe9 at offset 14\)"):
        codec.loads(b'{"label": "caf\xe9"}')


def test_a_journal_line_starting_with_0xff_names_the_byte(tmp_path):
    snapshot_run(tmp_path)
    shard = shard_of(tmp_path)
    with open(shard, "ab") as fh:
        fh.write(b"\xff\xfe{}\n")
    number = len(shard.read_bytes().splitlines())
    summary = audit_run(tmp_path, gates=parse_gates(GATES + ",unreadable=1"), jobs=1)
    assert summary["observed"]["unreadable"]["count"] == 1
    assert any(p.startswith(f"{shard}:{number}: not JSON: not UTF-8 text (byte 0xff at offset 0)")
               for p in summary["problems"]), summary["problems"]


# ---- 4. a byte that is not UTF-8 in a field name ------------------------------------------------------------------

def test_a_field_name_that_is_not_utf8_makes_the_line_not_a_turn_as_in_a_value():
    good = json.dumps(CHATTER).encode()
    in_name = good.replace(b'"message":', b'"mess\xffage":')
    in_value = good.replace(b'"message": "', b'"message": "\xff')
    assert decode_chunk([good, in_name]) is None
    for raw in (in_name, in_value):
        with pytest.raises(RecordError, match=r"not UTF-8 text \(byte 0xff at offset \d+\)"):
            decode_line(raw)
    extra = json.dumps({**CHATTER, "note": "an unknown field"}).encode()  # still a turn, read by the exact path
    assert decode_line(extra) == decode_chunk([good])[0] and decode_chunk([extra]) is None


def test_the_audit_counts_a_line_with_a_field_name_not_utf8_as_not_a_turn(tmp_path):
    """Was: exit 0, PASS, the field dropped without a word."""
    snapshot_run(tmp_path)
    shard = shard_of(tmp_path)
    lines = shard.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b'"message":', b'"mess\xffage":')
    shard.write_bytes(b"".join(lines))
    summary = audit_run(tmp_path, gates=parse_gates(GATES), jobs=1)
    assert summary["observed"]["unreadable"]["count"] == 1 and summary["verdict"]["result"] == "fail"
    assert any(p.startswith(f"{shard}:5: not JSON: not UTF-8 text (byte 0xff at offset") for p in summary["problems"])


def test_a_snapshot_line_starting_with_a_byte_that_is_not_utf8_names_the_byte(tmp_path):
    """Input hunt 14: `store/sessions.NN.jsonl` with a line starting 0xff said "not JSON (invalid character (byte
    0))", read as a NUL byte; it now names the byte and its offset, as the journal and the YAML reader do."""
    import json as _json

    import pytest as _pytest

    from oracle.audit import audit_run
    from oracle.snapshot import SnapshotError
    from support_oracle import TurnSpec, build_world, write_journal, write_snapshot

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(4)], seed=29)
    write_journal(tmp_path, world.records)
    (tmp_path / "run.json").write_text(_json.dumps({"run": world.records[0]["run"], "start": 1.0, "end": 2e9}))
    write_snapshot(tmp_path, world)
    shard = next(p for p in sorted((tmp_path / "store").glob("sessions.*.jsonl")) if p.stat().st_size)
    shard.write_bytes(b"\xff" + shard.read_bytes())
    with _pytest.raises(SnapshotError, match=r"sessions\.\d\d\.jsonl:1: not JSON: not UTF-8 text \(byte 0xff at "
                                             r"offset 0\)"):
        audit_run(tmp_path, jobs=1)
