"""The torn-line rule (contracts/jsonl.py): the last line with no newline after it is the one a crash was writing,
skipped; the same line zeroed (a file system that lost the file's last blocks fills them with NULs) is damage, as
every other line that is not a record: a failed recall probe zeroed so PASSed, exit 0 (input hunt 15)."""
from __future__ import annotations

import json

import pytest

from support_oracle import build_world, oracle_main, simple_specs, write_journal, write_snapshot


@pytest.fixture
def run(tmp_path):
    world = build_world(simple_specs(3))
    run = tmp_path / "run"
    write_journal(run, world.records)
    write_snapshot(run, world)
    return run


def last_line_replaced(run, make):
    shard = next((run / "journal").glob("*.jsonl"))
    data = shard.read_bytes()
    last = data[:-1].rsplit(b"\n", 1)[1] + b"\n"
    shard.write_bytes(data[:-len(last)] + make(last))


def unreadable(run) -> int:
    return json.loads((run / "audit" / "summary.json").read_text())["observed"]["unreadable"]["count"]


def test_a_last_line_cut_short_is_skipped(run, capsys):
    last_line_replaced(run, lambda line: line[:len(line) // 2])
    oracle_main(capsys, "audit", run, "--gate", "lenient")
    assert unreadable(run) == 0


@pytest.mark.parametrize("make", [lambda line: b"\0" * len(line), lambda line: line[:20] + b"\0" * (len(line) - 20)],
                         ids=["zeroed", "half-zeroed"])
def test_a_last_line_of_nuls_is_damage_named_by_its_line(run, capsys, make):
    last_line_replaced(run, make)
    code, out, err = oracle_main(capsys, "audit", run, "--gate", "lenient")
    assert unreadable(run) == 1
    assert code != 0
    assert "local-0.jsonl:" in out + err


def test_a_torn_last_line_too_long_to_hold_is_still_torn_unless_it_holds_nuls(tmp_path):
    """A line past the read limit is a LongLine stand-in holding a NUL of its own: that NUL is no damage."""
    from contracts import codec
    from contracts.jsonl import read_chunks

    path = tmp_path / "a.jsonl"
    for tail, reported in ((b'{"x": "' + b"a" * 500, 0), (b"\0" * 500, 1)):
        path.write_bytes(b'{"a": 1}\n' + tail)
        problems: list[str] = []
        list(read_chunks(path, None, codec.loads_object, problems, chunk_bytes=64, limit=100))
        assert len(problems) == reported, problems
