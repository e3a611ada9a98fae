"""The contracts between the parts: one record, one codec, one JSONL rule, one duration grammar."""
from __future__ import annotations

import math

import pytest

from contracts import codec
from contracts.durations import DurationError, parse_duration
from contracts.journal import RecordError, Turn, decode_chunk, decode_line, encode_line
from contracts.jsonl import JsonlError, read_jsonl
from contracts.runfolder import RunFolder
from contracts.tokens import TOKEN_RE, make_token, new_session_id


def test_the_writers_record_is_the_readers_record():
    session = new_session_id()
    turn = Turn("run-1", session, 3, "probe", make_token(session, 3), f"[{make_token(session, 3)}] What?", "city",
                "1234-ABCD", 1.5, 1.75, "ok", 200, "Your city is 1234-ABCD.", None, "pass", (new_session_id(),), 2, "u1")
    line = encode_line(turn)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line) == turn == decode_chunk([line])[0]
    assert list(codec.loads(line)) == list(Turn.__struct_fields__)  # the key order is the struct's
    assert TOKEN_RE.search(turn.message).group(1) == session


def test_a_line_with_only_the_required_fields_gets_the_documented_defaults():
    t = decode_line(b'{"session": "gf1", "turn": 2, "outcome": "info", "sent": 5}')
    assert (t.kind, t.token, t.received, t.crosstalk, t.run) == ("chatter", "gf1t2", None, (), None)
    assert decode_chunk([b'{"session": "gf1", "turn": 2, "outcome": "info", "sent": 5}\n']) is None  # the exact path


@pytest.mark.parametrize("raw, why", [
    (b'{"session": "s", "turn": 1e400, "outcome": "ok", "sent": 1}', "turn 'inf'|turn inf|not a finite"),
    (b'{"session": "s", "turn": 1, "outcome": "ok", "sent": 1e400}', "sent .* finite"),
    (b'{"session": "s", "turn": -1, "outcome": "ok", "sent": 1}', "out of range"),
    (b'{"session": "s", "turn": 1.5, "outcome": "ok", "sent": 1}', "not a whole number"),
    (b'{"session": "s", "turn": 1, "outcome": "maybe", "sent": 1}', "outcome 'maybe'"),
    (b'{"session": "s", "turn": 1, "outcome": "ok"}', "missing field 'sent'"),
    (b'{"session": "\xff", "turn": 1, "outcome": "ok", "sent": 1}', "not UTF-8"),
    (b'{"session": ["x"], "turn": 1, "outcome": "ok", "sent": 1}', "not an id"),
    # a probe's verdict the gate would not count (an answered recall left out: a run with amnesia PASSed)
    (b'{"session": "s", "turn": 1, "outcome": "ok", "sent": 1, "kind": "probe", "verdict": "Amnesia"}',
     "verdict 'Amnesia' is not one of pass/amnesia/null"),
    (b'{"session": "s", "turn": 1, "outcome": "ok", "sent": 1, "token": "st1", "verdict": 0}', "verdict 0"),
    # a probe whose kind no longer reads as one (a hand edit, a typo): read as chatter, its recall went uncounted
    (b'{"session": "s", "turn": 1, "outcome": "ok", "sent": 1, "kind": "plantx", "verdict": "amnesia"}',
     "kind 'plantx' is not one of plant/probe/chatter/burst"),
    (b'{"session": "s", "turn": 1, "outcome": "ok", "sent": 1, "kind": 5}', "kind 5 is not one of"),
    (b'[1, 2]', "not a JSON object"),
    (b'[' * 100_000 + b']' * 100_000, "nested too deeply"),
    (b'\x00\x01', "not JSON"),
])
def test_a_bad_line_raises_the_documented_error_only(raw, why):
    assert decode_chunk([raw]) is None
    with pytest.raises(RecordError, match=why):
        decode_line(raw)


def test_the_codec_fails_one_way_and_reads_what_json_readers_accept():
    assert codec.loads(b"[NaN, 1e400]")[1] == math.inf and math.isnan(codec.loads(b"[NaN]")[0])
    for bad in (b'"\xff"', b"{", b"[" * 50_000 + b"]" * 50_000, 3, b""):
        with pytest.raises(codec.DecodeError):
            codec.loads(bad)
    import numpy as np

    class Opaque:
        def __str__(self):
            return "opaque"

    assert codec.loads(codec.dumps({"n": np.int64(3), "x": np.float64(0.5), "o": Opaque()})) == \
        {"n": 3, "x": 0.5, "o": "opaque"}
    assert codec.dumps_document({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}\n'


def test_one_torn_line_rule_for_every_jsonl_file(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\nnot json\n{"a": 3}\n{"a": 4, "tor')
    problems = []
    assert [r["a"] for r in read_jsonl(path, problems=problems)] == [1, 2, 3]
    assert problems == [f"{path}:4: not JSON: Expecting value: line 1 column 1 (char 0); skipped: 'not json'"]
    path.write_bytes(b'{"a": 1}\n{"a": 4, "tor\n')  # a bad last line that is complete is not torn
    with pytest.raises(JsonlError, match=r"x.jsonl:2: not JSON"):
        list(read_jsonl(path))


def test_reading_in_chunks_numbers_lines_across_chunks(tmp_path):
    from contracts.jsonl import read_chunks

    path = tmp_path / "x.jsonl"
    path.write_bytes(b"".join(b'{"a": %d}\n' % i for i in range(50)) + b"bad\n" + b'{"a": 50}\n')
    problems = []
    chunks = list(read_chunks(path, None, lambda raw: codec.loads(raw)["a"], problems, chunk_bytes=64))
    assert [a for _, chunk in chunks for a in chunk] == list(range(51)) and len(chunks) > 5
    assert problems and problems[0].startswith(f"{path}:51: ")


@pytest.mark.parametrize("text, seconds", [
    (2, 2), (0.5, 0.5), ("2", 2), ("0.5s", 0.5), ("500ms", 0.5), ("1m30s", 90), ("2h", 7200), ("1h5m3s", 3903),
    ("1.5m", 90), (" 10 s ", 10), ("20", 20), ("3h30m10s", 12610),  # Locust's -t grammar is a subset
])
def test_one_duration_grammar(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["soon", "", "-1s", "nan", "inf", float("nan"), float("inf"), True, "1s30m", "5 sec",
                                 "31d", 1e12, "1e3s", "1h1h"])
def test_bad_durations_say_what_and_give_examples(bad):
    with pytest.raises(DurationError, match="^--settle: .*(duration|longest)"):
        parse_duration(bad, "--settle")


def test_run_folder_paths(tmp_path):
    folder = RunFolder(tmp_path / "run-1")
    assert folder.name == "run-1" and not folder.is_run()
    folder.journal.mkdir(parents=True)
    (folder.journal / "b.jsonl").write_text("")
    (folder.journal / "a.jsonl").write_text("")
    assert folder.is_run() and [p.name for p in folder.shards()] == ["a.jsonl", "b.jsonl"]
    assert folder.outstanding == tmp_path / "run-1" / "chaos" / "outstanding.json"
    assert folder.worker_shard("w1") == tmp_path / "run-1" / "workers" / "w1.jsonl"


REDACTED = [  # (as given, as written or printed)
    ("redis://:secret@redis.staging:6379/0", "redis://:***@redis.staging:6379/0"),
    ("redis://user:secret@h/0", "redis://user:***@h/0"),
    ("redis://:p@ss@word@h:6379/0", "redis://:***@h:6379/0"),            # a password holding '@'
    ("redis://:pa/ss@h:6379/0", "redis://***@h:6379/0"),                 # ... a raw '/' (ends the authority)
    ("redis://:pa?ss@h:6379/0", "redis://***@h:6379/0"),                 # ... a raw '?'
    ("redis://:pa#ss@h:6379/0", "redis://***@h:6379/0"),                 # ... a raw '#'
    ("redis://:12/34@h/0", "redis://***@h/0"),                           # ... digits that look like a port
    ("redis://h:6379/0?password=secret&db=1", "redis://h:6379/0?password=***&db=1"),
    ("rediss://h:6380/0?ssl_cert_reqs=none&Password=x", "rediss://h:6380/0?ssl_cert_reqs=none&Password=***"),
    ("http://alice:secret@bot.example.com/chat", "http://alice:***@bot.example.com/chat"),   # --host
    ("https://token@bot.example.com/", "https://***@bot.example.com/"),
    ("http://bot/sessions/{session}/history?api_key=k&v=2", "http://bot/sessions/{session}/history?api_key=***&v=2"),
    ("http://bot/h#access_token=t&x=1", "http://bot/h#access_token=***&x=1"),
    ("redis+sentinel://:pw@s1:26379,s2:26379/mymaster/0", "redis+sentinel://:***@s1:26379,s2:26379/mymaster/0"),
    ("redis+sentinel://s1:26379/m/0?sentinel_password=pw", "redis+sentinel://s1:26379/m/0?sentinel_password=***"),
    ("redis://:pw@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    ("http://[fe80::1%25eth0]:8080/chat", "http://[fe80::1%25eth0]:8080/chat"),
    ("http://[::1:80/", "http://*** (not a valid URL)"),
    ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=***"),
    ("unix://:pw@/run/redis.sock", "unix://:***@/run/redis.sock"),
    ("REDIS://:pw@H/0", "REDIS://:***@H/0"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("http://h/users/@me", "http://h/users/@me"),
    ("mymodule:read_histories", "mymodule:read_histories"),
    ("", ""),
]


@pytest.mark.parametrize("given, shown", REDACTED, ids=[g or "empty" for g, _ in REDACTED])
def test_one_redaction_for_every_url_shape(given, shown):
    from contracts import redact

    assert redact.url(given) == shown
    assert redact.text(f"cannot reach {given} (refused)") == f"cannot reach {shown} (refused)"


def test_redaction_of_headers_documents_and_error_lines():
    from contracts import redact

    assert redact.headers({"Authorization": "Bearer x", "X-Tenant": "t"}) == {"Authorization": "***", "X-Tenant": "***"}
    assert redact.header_line("Auth orization: Bearer x") == "Auth orization: ***"
    doc = {"target": "http://u:pw@h/", "options": {"store": {"url": "redis://:pw@h/0", "batch": 5}}, "n": [1, "x"]}
    assert redact.deep(doc) == {"target": "http://u:***@h/", "options": {"store": {"url": "redis://:***@h/0",
                                                                                  "batch": 5}}, "n": [1, "x"]}
    assert redact.text("Error 111 connecting to redis://:pw@h:1/0. Refused.") == \
        "Error 111 connecting to redis://:***@h:1/0. Refused."


def test_an_error_line_holding_a_long_value_is_redacted_in_one_pass():
    """Every error line goes through redact.text; its URL search was tried from each letter of a long run of letters,
    so a 100,000-character value took 16 s to report and a 400,000-character one minutes (fuzz hunt 18). Run in a
    child with a deadline: a search from each letter again would not end within it."""
    import subprocess
    import sys
    from pathlib import Path

    from contracts import redact

    code = ("from contracts import redact; s = redact.text('pid_file ' + 'a' * 2_000_000 + ' redis://:pw@h/0 .x://');"
            "print(len(s), s[-24:])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.stdout.split() == ["2000032", "a", "redis://:***@h/0", ".x://"], done.stdout + done.stderr
    assert redact.text("xyzhttps://a:b@c (https://x:y@z)") == "xyzhttps://a:***@c (https://x:***@z)"
