"""Bad input, round 12, the oracle (hunt-input12 D1, D2, m2, m4).

- D1: a stored entry that is JSON with a UTF-8 byte order mark in front PASSed the live audit (bytes: the BOM is
  skipped) and FAILed the offline re-audit of the snapshot that very audit wrote ("1 stored entries that do not
  decode"): the snapshot keeps such an entry as text, and text with a leading U+FEFF did not decode. Now text and
  bytes decode alike; every odd entry (invalid UTF-8, a lone surrogate, NUL, CR...) gives the same verdict both ways.
- D2: an offline re-audit never checked that run.json is this run's: a cut-short run whose run.json was replaced by
  another run's re-audited as PASS with the other run's label. Refused now, exit 2, as the live audit refuses it.
- m2: a redis+sentinel:// URL that failed printed about 1.5 KB of redis-py's object dump.
- m4: a journal line with a lone surrogate escape was skipped as "no session id"; a BOM before a shard's first line
  (an editor's save) made that record unreadable, though every other .jsonl reader skips a BOM.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import free_port, wait_until
from support_oracle import (RUN, TurnSpec, build_world, fill_redis, oracle_main, raw_entries, write_journal,
                            write_snapshot)

BOM = b"\xef\xbb\xbf"


def clean_specs(sessions: int = 3) -> list[list[TurnSpec]]:
    """Sessions every turn of which went well: the run PASSes when the store kept them."""
    return [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
             TurnSpec("probe", "ok")] for _ in range(sessions)]


def _summary(run: Path) -> dict:
    return json.loads((run / "audit" / "summary.json").read_text())


def _verdict(run: Path) -> tuple:
    s = _summary(run)
    classes = sorted(json.loads(line)["class"] for line in (run / "audit" / "anomalies.jsonl").read_text().splitlines()
                     if line.strip())
    return s["verdict"]["result"], classes


# ---- D1: the snapshot re-audits to the live read's verdict ------------------------------------------------------
ODD_ENTRIES = {
    "bom": lambda e: BOM + e,                                        # json.loads(bytes) reads it: PASS
    "bom-twice": lambda e: BOM + BOM + e,                            # one BOM is skipped, not two: corrupt
    "invalid-utf8": lambda e: e.replace(b"My ", b"My \xff"),
    "surrogate-bytes": lambda e: e.replace(b"My ", b"My \xed\xa0\x80"),   # a surrogate as UTF-8: not UTF-8
    "surrogate-escape": lambda e: e.replace(b"My ", b"My \\ud800"),
    "nul": lambda e: e.replace(b"My ", b"My \x00"),
    "nul-after": lambda e: e + b"\x00",
    "cr": lambda e: e.replace(b", ", b",\r "),
    "crlf-after": lambda e: e + b"\r\n",
    "utf16": lambda e: e.decode().encode("utf-16-le"),
}


@pytest.mark.parametrize("damage", list(ODD_ENTRIES), ids=list(ODD_ENTRIES))
def test_an_odd_stored_entry_re_audits_from_the_snapshot_as_it_was_judged_live(damage, tmp_path, capsys,
                                                                             redis_server):
    world = build_world(clean_specs(3), seed=12)
    write_journal(tmp_path, world.records)
    client = redis_server.client()
    fill_redis(client, world)
    key = f"message_store:{world.order[0]}"
    first = client.lindex(key, -1)   # the oldest entry: the user's plant, turn 0
    assert first == raw_entries(world, world.order[0])[0]
    client.lset(key, -1, ODD_ENTRIES[damage](first))

    live, out, err = oracle_main(capsys, "audit", tmp_path, "--store-url", redis_server.url, "--jobs", "1")
    judged_live = _verdict(tmp_path)
    if damage == "bom":
        assert live == 0 and judged_live == ("pass", []), out + err
    redis_server.stop()   # the re-audit reads the snapshot alone
    offline, out, err = oracle_main(capsys, "audit", tmp_path, "--jobs", "1")
    assert (offline, _verdict(tmp_path)) == (live, judged_live), out + err


def test_a_bom_is_skipped_in_text_as_in_bytes_once_and_at_the_start_only():
    from contracts import codec

    for data in (b'\xef\xbb\xbf{"a": 1}', '\ufeff{"a": 1}'):
        assert codec.loads(data) == {"a": 1}
    for data in (b'\xef\xbb\xbf\xef\xbb\xbf{"a": 1}', '\ufeff\ufeff{"a": 1}', '{"a": 1}\ufeff', ' \ufeff{"a": 1}'):
        with pytest.raises(codec.DecodeError):
            codec.loads(data)


# ---- D2: run.json of another run, offline -------------------------------------------------------------------------
def _folder(tmp_path: Path) -> Path:
    world = build_world(clean_specs(3), seed=7)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    return tmp_path


def test_an_offline_re_audit_refuses_another_runs_run_json(tmp_path, capsys):
    """A cut-short run (phase load, no end: NOT TRUSTED) with another, finished run's run.json PASSed, exit 0,
    taking that run's label. Exit 2 naming both runs, nothing written."""
    run = _folder(tmp_path)
    (run / "run.json").write_text(json.dumps({"run": "other-run", "label": "other", "start": 1.0, "end": 2.0,
                                              "phase": "done", "exit_code": 0}))
    code, out, err = oracle_main(capsys, "audit", run, "--jobs", "1")
    assert code == 2, out + err
    assert f"is run {RUN!r}, but {run / 'run.json'} is run 'other-run'" in err, err
    assert not (run / "audit" / "summary.json").exists()


@pytest.mark.parametrize("run_json", [None, {"label": "by hand"}, {"run": None}, "not json"],
                         ids=["no-run-json", "no-run-field", "run-null", "unreadable"])
def test_an_offline_re_audit_of_a_folder_with_no_recorded_run_id_is_not_refused_for_it(run_json, tmp_path, capsys):
    """A folder built by hand (no run.json, or one without "run") records no run to compare: no check, as live."""
    run = _folder(tmp_path)
    if run_json is not None:
        (run / "run.json").write_text(run_json if isinstance(run_json, str) else json.dumps(run_json))
    code, out, err = oracle_main(capsys, "audit", run, "--jobs", "1")
    assert "is run" not in out + err, out + err
    assert code != 2 or run_json == "not json", out + err   # an unreadable run.json: NO VERDICT, as before
    assert _summary(run)["run"] == RUN


# ---- m4: journal lines the key reader refused -------------------------------------------------------------------
def test_a_lone_surrogate_in_a_journal_line_is_named_not_called_no_session_id(tmp_path, capsys):
    run = _folder(tmp_path)
    shard = run / "journal" / "local-0.jsonl"
    lines = shard.read_text().splitlines(keepends=True)
    record = json.loads(lines[2])
    record["reply"] = "cut inside an emoji \ud83d"
    lines[2] = json.dumps(record) + "\n"   # ASCII: "\ud83d" as an escape
    shard.write_text("".join(lines))
    code, out, err = oracle_main(capsys, "audit", run, "--jobs", "1")
    problems = _summary(run)["problems"]
    said = [p for p in problems if p.startswith(f"{shard}:3: ")]
    assert said and "$.reply holds a lone surrogate escape (\\ud83d)" in said[0], problems
    assert not any("no session id" in p for p in problems), problems
    assert code == 1, out + err   # an unreadable line FAILs the run, by design


def test_a_bom_before_a_shards_first_line_is_read_as_the_record_it_is(tmp_path, capsys):
    """contracts.jsonl (chaos.jsonl, steps...), run.json and the plan skip a byte order mark; the journal's key
    reader did not, so an editor's save of a shard FAILed the run on one "unreadable" line."""
    run = _folder(tmp_path)
    shard = run / "journal" / "local-0.jsonl"
    shard.write_bytes(BOM + shard.read_bytes())
    code, out, err = oracle_main(capsys, "audit", run, "--jobs", "1")
    summary = _summary(run)
    assert not any("no session id" in p for p in summary["problems"]), summary["problems"]
    assert code == 0 and summary["verdict"]["result"] == "pass", out + err


def test_a_bom_before_a_snapshot_files_first_line_is_skipped_too(tmp_path, capsys):
    """Every reader of a run folder's .jsonl skips a byte order mark; the snapshot's said "not JSON ... byte 0", exit 2
    (input hunt 16)."""
    run = _folder(tmp_path)
    part = next(p for p in sorted((run / "store").glob("sessions.*.jsonl")) if p.stat().st_size)
    part.write_bytes(BOM + part.read_bytes())
    code, out, err = oracle_main(capsys, "audit", run, "--jobs", "1")
    assert code == 0 and _summary(run)["verdict"]["result"] == "pass", out + err


def test_a_snapshot_whose_roles_are_damaged_names_meta_json_not_an_option(tmp_path, capsys):
    """meta.json's shape.user_roles emptied: the audit blamed --user-role, an option nobody gave (input hunt 16)."""
    run = _folder(tmp_path)
    meta = json.loads((run / "store" / "meta.json").read_text())
    meta["shape"]["user_roles"] = []
    (run / "store" / "meta.json").write_text(json.dumps(meta))
    code, out, err = oracle_main(capsys, "audit", run)
    assert code == 2 and "meta.json: its roles are damaged" in err and "no option was given" in err, out + err


def test_a_snapshot_file_that_is_a_symlink_loop_is_named_as_unreadable(tmp_path, capsys):
    """A symlink loop in place of a snapshot file was taken for no file: "lacks 4 session(s) the journal has ... damaged or
    from another run", which hid that the file cannot be opened at all (input hunt 16)."""
    run = _folder(tmp_path)
    part = next(p for p in sorted((run / "store").glob("sessions.*.jsonl")) if p.stat().st_size)
    part.unlink()
    part.symlink_to(part.name)
    code, out, err = oracle_main(capsys, "audit", run, "--jobs", "1")
    assert code == 2, out + err
    assert part.name in err and "symbolic links" in err and "lacks" not in err, err


def test_the_key_reader_and_the_line_decoder_agree_on_a_bom(tmp_path):
    from contracts.journal import decode_line
    from oracle.history import Journal

    world = build_world(clean_specs(2), seed=5)
    write_journal(tmp_path, world.records)
    shard = tmp_path / "journal" / "local-0.jsonl"
    raw = shard.read_bytes()
    lines = raw.splitlines(keepends=True)
    shard.write_bytes(lines[0] + BOM + lines[1] + b"".join(lines[2:]))   # mid-file too, as contracts.jsonl reads it
    assert decode_line(BOM + lines[1]).session == json.loads(lines[1])["session"]
    journal = Journal.open(tmp_path)
    sessions = {entry.session: len(entry.lines) for _, entry in journal.completed()}
    assert journal.unreadable == 0 and sum(sessions.values()) == len(lines), journal.problems


# ---- m2: a Sentinel URL that fails says why, briefly -------------------------------------------------------------
def _audit_sentinel(capsys, tmp_path, url: str) -> str:
    run = _folder(tmp_path / "run")
    code, out, err = oracle_main(capsys, "audit", run, "--store-url", url, "--jobs", "1")
    assert code == 2, out + err
    assert "ConnectionPool" not in err and "<redis." not in err and len(err) < 600, err
    assert "s3cret" not in err and ":***@" in err, err
    return err


def test_a_sentinel_url_where_no_sentinel_listens_says_so_briefly(tmp_path, capsys):
    port = free_port()
    err = _audit_sentinel(capsys, tmp_path, f"redis+sentinel://:s3cret@127.0.0.1:{port}/mymaster/0")
    assert f"at redis+sentinel://:***@127.0.0.1:{port}/mymaster/0: no Sentinel answered with a master for " \
           f"'mymaster' (127.0.0.1:{port}: ConnectionError" in err, err


def test_a_sentinel_url_at_a_redis_server_says_it_is_no_sentinel(tmp_path, capsys, redis_server):
    err = _audit_sentinel(capsys, tmp_path, f"redis+sentinel://:s3cret@127.0.0.1:{redis_server.port}/mymaster/0")
    assert "answered but is no Sentinel (it does not know the SENTINEL command)" in err, err


@pytest.fixture
def sentinel_server(tmp_path):
    """A real redis-server in Sentinel mode, monitoring nothing."""
    import redis

    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n")
    proc = subprocess.Popen(["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        client = redis.Redis(port=port)
        wait_until(lambda: client.ping(), what=f"redis sentinel on port {port}")
        yield port
    finally:
        proc.kill()
        proc.wait(10)


def test_a_sentinel_url_naming_a_service_the_sentinels_do_not_monitor_says_so(tmp_path, capsys, sentinel_server):
    err = _audit_sentinel(capsys, tmp_path, f"redis+sentinel://:s3cret@127.0.0.1:{sentinel_server}/mymaster/0")
    assert "the Sentinels answered but know no healthy master for 'mymaster'" in err, err
