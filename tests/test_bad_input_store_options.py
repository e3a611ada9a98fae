"""The bad-input corpus (#16), the store options and the journal reader: a store URL whose options change what
Redis replies are or whose path is not a database, a $GOLDFISH_FOLLOW that is not UTF-8, an empty role or an
empty value taken as the default, a --batch checked only with a store, a journal line of hundreds of MB and a
journal whose line ends are CR only. Each was a traceback (exit 3), a wrong verdict, a silent default, memory
growing with a line or an unexplained "no valid journal records"; each is now exit 2 naming what and where
(the long line: one unreadable line named by file:line, read in bounded memory).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_bad_input import assert_named, init_exit, locust_parser  # noqa: F401 - a fixture
from test_bad_input_oracle import audit_copy, snapshot_run  # noqa: F401 - a fixture

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def stored_run(tmp_path, redis_server):
    """A journaled run whose histories are in a real Redis, one of its entries bytes that are not UTF-8."""
    from support_oracle import build_world, fill_redis, simple_specs, write_journal

    world = build_world(simple_specs(3), seed=5)
    write_journal(tmp_path / "run", world.records)
    client = redis_server.client()
    fill_redis(client, world)
    client.lpush(f"message_store:{world.order[0]}", b"\xff\xfe\x80garbage")
    client.config_set("requirepass", "s3cr3t")
    return tmp_path / "run", f"redis://:s3cr3t@127.0.0.1:{redis_server.port}"


def audit(run: Path, capsys, *argv) -> tuple[int, str]:
    from oracle.audit_cli import main

    code = main([str(run), "--jobs", "1", *argv])
    captured = capsys.readouterr()
    return code, captured.err


# ---- T1: URL options that change what replies are ----------------------------------------------
@pytest.mark.parametrize("query", ["decode_responses=true", "decode_responses=false", "encoding=latin-1",
                                   "encoding_errors=ignore"])
def test_a_store_url_option_that_changes_replies_is_exit_2_naming_it(query, stored_run, capsys):
    """decode_responses=true with an entry that is not UTF-8 was a traceback (UnicodeDecodeError, exit 3); the
    audit reads bytes as they are, where that entry is a `corrupt` finding."""
    run, base = stored_run
    name = query.partition("=")[0]
    code, err = audit(run, capsys, "--store-url", f"{base}/0?{query}", "--gate", "off")
    assert code == 2
    assert_named(err, "--store-url", f"URL option {name}:")
    assert "s3cr3t" not in err
    assert audit(run, capsys, "--store-url", f"{base}/0", "--gate", "off")[0] == 0
    assert "corrupt" in (run / "audit" / "anomalies.jsonl").read_text()  # the entry, read as bytes


def test_a_sentinel_url_option_that_changes_replies_is_refused():
    from contracts.redis_url import redis_client

    with pytest.raises(ValueError, match="URL option decode_responses"):
        redis_client("redis+sentinel://127.0.0.1:1/mymaster/0?decode_responses=true")


# ---- Q2: a store URL path that is not a database number -----------------------------------------
@pytest.mark.parametrize("path", ["/abc", "/0/extra", "/1/2"])
def test_a_store_url_path_that_is_not_a_database_is_exit_2_naming_it(path, stored_run, capsys):
    """redis-py read /abc and /0/extra as database 0 and /1/2 as database 12: the audit passed on a database
    nobody named."""
    run, base = stored_run
    code, err = audit(run, capsys, "--store-url", f"{base}{path}", "--gate", "off")
    assert code == 2
    assert_named(err, "--store-url", f"path {path!r}: must be /db, a database number")


@pytest.mark.parametrize("url, fragment", [
    ("redis://127.0.0.1:1/abc", "path '/abc'"),
    ("redis://127.0.0.1:1/0?decode_responses=1", "URL option decode_responses"),
])
def test_a_bad_store_url_stops_a_locust_run_before_any_load(url, fragment, locust_parser, capsys):
    code, out = init_exit(locust_parser, ["--store-url", url], capsys)
    assert code == 2
    assert_named(out, "--store-url", fragment)


# ---- T2: $GOLDFISH_FOLLOW that is not UTF-8 -----------------------------------------------------
def test_a_follow_environment_that_is_not_utf8_is_exit_2_naming_it(tmp_path, monkeypatch, capsys):
    """The byte \\xff (os.environ holds it as a lone surrogate) was a UnicodeEncodeError traceback (exit 3)."""
    from oracle import follow

    (tmp_path / "run").mkdir()
    monkeypatch.setenv(follow.ENV, '{"url": "redis://127.0.0.1:1/0\udcff"}')
    assert follow.main([str(tmp_path / "run")]) == 2
    assert_named(capsys.readouterr().err, "$GOLDFISH_FOLLOW", "is not UTF-8 (byte 0xff at 30)")


def test_a_follow_environment_that_is_not_utf8_in_a_process(tmp_path):
    """As the Locust master starts it: the variable's bytes as they are."""
    (tmp_path / "run").mkdir()
    env = {**os.environb, b"GOLDFISH_FOLLOW": b"\xff", b"PYTHONPATH": str(ROOT).encode()}
    done = subprocess.run([sys.executable, "-m", "oracle", "follow", str(tmp_path / "run")], env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == 2
    assert_named(done.stderr.decode(), "$GOLDFISH_FOLLOW", "is not UTF-8")


@pytest.mark.parametrize("field", ["user_roles", "assistant_roles"])
@pytest.mark.parametrize("roles", [[""], [" "], []], ids=["empty", "blank", "none"])
def test_a_follow_role_that_is_empty_is_exit_2_naming_it(field, roles, tmp_path, monkeypatch, capsys):
    from oracle import follow

    (tmp_path / "run").mkdir()
    monkeypatch.setenv(follow.ENV, json.dumps({"url": "redis://127.0.0.1:1/0", field: roles}))
    assert follow.main([str(tmp_path / "run")]) == 2
    assert_named(capsys.readouterr().err, "oracle follow: ", f"--{field[:-1].replace('_', '-')}: ")


# ---- V1: empty option values ---------------------------------------------------------------------
EMPTY = [
    (["--assistant-role", ""], "--assistant-role: an empty role name"),
    (["--user-role", ""], "--user-role: an empty role name"),
    (["--user-role", "human", "--user-role", " "], "--user-role: an empty role name"),
    (["--direction", ""], "--direction: the value is empty"),
    (["--format", ""], "--format: the value is empty"),
    (["--store-format", "  "], "--format: the value is empty"),
    (["--key-template", ""], "--key-template: the value is empty"),
    (["--role-field", ""], "--role-field: the value is empty"),
    (["--content-field", ""], "--content-field: the value is empty"),
    (["--gate", ""], "--gate: the value is empty"),
]


@pytest.mark.parametrize("argv, fragment", EMPTY, ids=[" ".join(a) for a, _ in EMPTY])
def test_an_empty_option_value_is_exit_2_naming_it(argv, fragment, snapshot_run, tmp_path, capsys):
    """An empty --assistant-role replaced the default roles: a wrong FAIL (every turn "unanswered"); the others
    were silently the default."""
    code, err, _ = audit_copy(snapshot_run, tmp_path, lambda run: None, capsys, *argv)
    assert code == 2
    assert_named(err, fragment.split(":")[0], fragment)


@pytest.mark.parametrize("argv, fragment", EMPTY[:2] + EMPTY[3:4], ids=[" ".join(a) for a, _ in EMPTY[:2] + EMPTY[3:4]])
def test_an_empty_option_value_with_a_store_is_exit_2(argv, fragment, stored_run, capsys):
    run, base = stored_run
    code, err = audit(run, capsys, "--store-url", f"{base}/0", *argv)
    assert code == 2
    assert_named(err, fragment.split(":")[0], fragment)


# ---- U3: --batch without a store -----------------------------------------------------------------
@pytest.mark.parametrize("batch, fragment", [("nan", "'nan' is not a whole number"), ("abc", "is not a whole number"),
                                             ("-1", "-1 must be >= 1"), ("0", "0 must be >= 1"),
                                             ("1000000", "1000000 is more than 100000")])
def test_a_bad_batch_without_a_store_is_exit_2(batch, fragment, snapshot_run, tmp_path, capsys):
    """A re-audit from the snapshot accepted any --batch: it returned before checking it."""
    code, err, _ = audit_copy(snapshot_run, tmp_path, lambda run: None, capsys, "--batch", batch)
    assert code == 2
    assert_named(err, "--batch", fragment)


# ---- M1: a journal line of hundreds of MB --------------------------------------------------------
def test_a_line_longer_than_the_limit_is_one_unreadable_line_and_the_torn_rule_holds(tmp_path):
    from contracts import codec
    from contracts.jsonl import line_chunks, read_chunks

    path = tmp_path / "a.jsonl"
    long = b'{"x": "' + b"a" * 10_000 + b'"}'
    path.write_bytes(b'{"a": 1}\n' + long + b'\n{"b": 2}\n' + long)  # in the middle, and the torn last line
    lines = [raw for _, chunk, _ in line_chunks(path, 64, limit=100) for raw in chunk]
    assert len(lines) == 4 and lines[0] == b'{"a": 1}\n' and lines[2] == b'{"b": 2}\n'
    assert max(map(len, lines)) < 100  # never held whole
    problems: list[str] = []
    records = [r for _, chunk in read_chunks(path, None, codec.loads_object, problems, chunk_bytes=64, limit=100)
               for r in chunk]
    assert records == [{"a": 1}, {"b": 2}]
    assert problems == [f"{path}:2: longer than 100 bytes (not a record); skipped: '{{\"x\": \"{'a' * 73}...'"]
    path.write_bytes(b'{"a": 1}\n' + long + b"\n")  # a complete last line is not the torn one: reported
    problems = []
    list(read_chunks(path, None, codec.loads_object, problems, chunk_bytes=64, limit=100))
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: longer than 100 bytes")


def test_an_audit_reads_a_256_mb_journal_line_in_bounded_memory(snapshot_run, tmp_path):
    """One 300 MB line made the audit peak at 1.27 GB (readlines reads a whole line however long)."""
    run = tmp_path / "run"
    shutil.copytree(snapshot_run, run)
    shard = run / "journal" / "local-1.jsonl"
    good = shard.read_bytes()
    with open(shard, "wb") as fh:
        fh.write(b'{"x": "')
        for _ in range(256):
            fh.write(b"a" * (1 << 20))
        fh.write(b'"}\n' + good)
    # the audit's own high-water mark (VmHWM: this process's memory since its exec), not ru_maxrss, which Linux
    # carries over an exec from the process that forked it: pytest's own size late in the suite (701 MB once)
    script = ("import sys; from oracle.audit_cli import main; code = main(sys.argv[1:]); "
              "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:')).split()[1]; "
              "print('peak', int(hwm) // 1024, 'code', code)")
    done = subprocess.run([sys.executable, "-c", script, str(run), "--jobs", "1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    shard.unlink()
    peak, code = done.stdout.split()[-3], done.stdout.split()[-1]
    assert int(peak) < 600, f"peak RSS {peak} MB"  # the audit's own ~150 MB, and at most 2 x 64 MB for the line
    assert code == "1", done.stdout + done.stderr  # one unreadable line fails the strict gate
    assert f"{shard}:1: longer than 67,108,864 bytes (not a record); skipped: " in done.stdout


# ---- U1: CR-only line ends -----------------------------------------------------------------------
def test_a_journal_with_cr_only_line_ends_is_exit_2_saying_so(snapshot_run, tmp_path, capsys):
    """It read as one torn line, skipped silently: the message was only "holds no valid journal records"."""
    def damage(run):
        shard = run / "journal" / "local-1.jsonl"
        shard.write_bytes((shard.read_bytes() * 3).replace(b"\n", b"\r"))

    code, err, run = audit_copy(snapshot_run, tmp_path, damage, capsys)
    assert code == 2
    assert_named(err, f"{run / 'journal' / 'local-1.jsonl'}: lines must end in", "line ends are CR only")
    from oracle.history import JournalError, read_journal

    with pytest.raises(JournalError, match="line ends are CR only"):
        read_journal(run)
