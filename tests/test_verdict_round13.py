"""Verdict hunt 13: a live re-audit of a store that lost data since the run's audit, however it is reached.

- V1 reaudit_after_retention_trim_flips_pass: another tenant's retention job trimmed the run's histories
  (`LTRIM key 0 1`) after a PASS; `oracle audit RUN --store-url` said FAIL ("acknowledged turns the store lost") and
  replaced store/ and summary.json. Only keys gone since were refused; a list shorter than the run's read is too.
- V2 reaudit_url_spelling_bypasses_lost_since_guard: the guard compared the URL as written, so
  `redis://127.0.0.1:PORT` was another store than `redis://127.0.0.1:PORT/0`: a FAIL whose keys expired re-audited
  PASS over 0 turns. URLs are compared by the database they reach (oracle.keys.same_store).
Real redis-server (tests/conftest.py), real audits of journaled runs (support_oracle).
"""
from __future__ import annotations

import json
import time

import pytest

from oracle import audit_cli
from oracle.audit import audit_run
from oracle.keys import TemplateMismatch
from oracle.store import StoreOptions
from oracle.verdict import exit_code
from support_oracle import TurnSpec, build_world, fill_redis, write_journal

TEMPLATE = "message_store:{session}"


def passed_run(tmp_path, client, url: str) -> None:
    """A run of 8 conversations the store holds whole, audited live: PASS."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(8)], start=time.time() + 2, seed=41)
    write_journal(tmp_path, world.records)
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": time.time()}))
    fill_redis(client, world)
    assert exit_code(audit_run(tmp_path, StoreOptions(url=url), jobs=1)["verdict"]) == 0
    return world


def kept(tmp_path) -> tuple[str, str]:
    return (tmp_path / "store" / "meta.json").read_text(), (tmp_path / "audit" / "summary.json").read_text()


def test_a_history_trimmed_since_the_runs_audit_refuses_a_live_reaudit(tmp_path, redis_server):
    client = redis_server.client()
    world = passed_run(tmp_path, client, redis_server.url)
    before = kept(tmp_path)
    for session in world.order[:3]:  # a retention job keeps the newest two entries
        client.ltrim(TEMPLATE.format(session=session), 0, 1)
    with pytest.raises(TemplateMismatch, match=r"3 of the 8 sessions whose keys .* found hold fewer entries than "
                                               r"it read: .*trimmed.*without --store-url"):
        audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)
    assert audit_cli.main([str(tmp_path), "--store-url", redis_server.url, "--jobs", "1"]) == 2
    assert kept(tmp_path) == before
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 0  # the run's own reading: still its PASS

    client.delete(TEMPLATE.format(session=world.order[5]))  # and one gone: both said
    with pytest.raises(TemplateMismatch, match=r"1 of the 8 sessions .* are gone now and 3 hold fewer entries"):
        audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)


def test_a_history_that_grew_since_is_not_a_loss(tmp_path, redis_server):
    """Only less than the run's read is refused: an entry appended since (another writer) is judged as before."""
    client = redis_server.client()
    world = passed_run(tmp_path, client, redis_server.url)
    client.rpush(TEMPLATE.format(session=world.order[0]), json.dumps({"type": "human", "data": {"content": "hi"}}))
    audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)  # not refused


def test_a_key_that_holds_another_layout_now_is_judged_not_refused(tmp_path, redis_server):
    """Only fewer entries refuse: a list that is now a hash (another layout) is read and judged as such."""
    client = redis_server.client()
    world = passed_run(tmp_path, client, redis_server.url)
    key = TEMPLATE.format(session=world.order[0])
    client.delete(key)
    client.hset(key, mapping={"title": "t"})
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)
    assert exit_code(summary["verdict"]) == 1


@pytest.mark.parametrize("spelt", ["redis://localhost:{port}", "redis://127.0.0.1:{port}", "redis://[::1]:{port}/0"])
def test_one_store_by_any_spelling(spelt):
    from oracle.keys import same_store

    assert same_store("redis://127.0.0.1:6390/0", spelt.format(port=6390))
    assert not same_store("redis://127.0.0.1:6390/0", spelt.format(port=6391))
    assert not same_store("redis://127.0.0.1:6390/1", spelt.format(port=6390))
    assert not same_store("redis://snapshot-only", spelt.format(port=6390)) and same_store("x", "x")


def test_the_same_store_under_another_spelling_of_its_url_is_the_same_store(tmp_path, redis_server):
    client = redis_server.client()
    world = passed_run(tmp_path, client, redis_server.url)
    assert redis_server.url.endswith("/0")
    other = redis_server.url[:-2]  # redis://127.0.0.1:PORT: db 0 all the same
    before = kept(tmp_path)
    client.delete(*[TEMPLATE.format(session=s) for s in world.order])  # a FLUSHDB since
    with pytest.raises(TemplateMismatch, match=rf"at {other}, though this store's complete read for the run \(of "
                                               rf"{redis_server.url}; its snapshot, ended .*\) found every one of them"):
        audit_run(tmp_path, StoreOptions(url=other), jobs=1)
    assert audit_cli.main([str(tmp_path), "--store-url", other, "--jobs", "1"]) == 2
    assert kept(tmp_path) == before


def test_an_integer_id_is_found_as_a_whole_word_of_a_key_name(redis_server):
    """Bot hunt 13 Y1: a bot issuing ids 1, 2, 3... (--session-from) keeps `chat:<n>`; session "3" also matched
    `chat:13`, and the advice said the messages were in 2 keys (chat:1{session}, chat:{session}): use --reader.
    The right advice, `chat:{session}`, PASSes. A goldfish id is still found anywhere in a name."""
    from oracle.keys import _key_templates

    client = redis_server.client()
    for n in range(1, 40):
        client.rpush(f"chat:{n}", "x")
    client.rpush("chatgf0123456789abcdef", "x")
    assert _key_templates(client, 0, "3") == {"chat:{session}": "list"}
    assert _key_templates(client, 0, "gf0123456789abcdef") == {"chat{session}": "list"}


def test_a_hash_numbered_by_nanosecond_times_is_read_in_order():
    """Bot hunt 13 Y2: fields named by `time.time_ns()` (19 digits) were no positions (at most 18), every entry a
    corrupt one, and the audit stopped: "text that is not JSON ... store each message as a JSON object" — they were."""
    from oracle.redis_reader import hash_history
    from oracle.store import RawSession

    raw = RawSession("s", "k", True, None)
    hash_history(raw, {b"1732730000000000002": b"b", b"1732730000000000001": b"a", b"title": b"t",
                       b"9" * 41: b"x"}, "messages")
    assert raw.entries[:2] == [b"a", b"b"] and len(raw.entries) == 3
    assert raw.entries[2].startswith(b"<hash field '999999999999... (41 characters)' is no message number")


def test_a_store_that_did_not_answer_the_runs_telemetry_outside_its_faults_is_said(tmp_path, redis_server):
    """Verdict hunt 13 D1: another run's chaos restarted the shared Redis; this run's 500s then FAILed its errors
    gate as the bot's own, though its telemetry had sampled the store unreachable. The audit says so."""
    from contracts.timeline import INFO_REFUSED

    client = redis_server.client()
    passed_run(tmp_path, client, redis_server.url)
    now = time.time()
    samples = [{"time": now + 1, "users": 4, "rss": {}, "store": {"used_memory": 1}, "store_error": None},
               {"time": now + 2, "users": 4, "rss": {}, "store": None, "store_error": "ConnectionError: refused"},
               {"time": now + 3, "users": 4, "rss": {}, "store": None,
                "store_error": INFO_REFUSED + "NOPERM this user has no permissions to run the info command"}]
    (tmp_path / "telemetry.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    summary = audit_run(tmp_path, jobs=1)
    said = [p for p in summary["problems"] if "did not answer 1 of this run's telemetry sample(s)" in p]
    assert said and "ConnectionError: refused" in said[0] and "another run's chaos" in said[0], summary["problems"]
