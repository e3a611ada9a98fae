"""Bot hunt 12, X1 and X3: what the keys hold decides the key-template advice; a store that refuses INFO is unknown
evidence, never zeros.

X1: the advice decided which key beside a session holds its history by TYPE alone: a title string ("Delivery
question") or a rating ("none") beside the list counted as a second page (a false "history split over keys ...
--reader", exit 2), and a hash holding the messages (its ``messages`` field, or numbered fields) was taken for
metadata, the title string named instead. X3: an ACL user with the documented grants (``+@read +ping +select``, no
``+info``) had INFO refused silently: "up since before the first acknowledged turn (uptime unknown)", "expired 0",
"evicted 0" were stated as evidence, and a correct bot whose keys expired after their conversations got exit 2.
"""
from __future__ import annotations

import json
import logging
import time
from types import SimpleNamespace

import pytest

from contracts.runfolder import RunFolder
from locustfiles import telemetry as sampler
from oracle.audit import audit_run
from oracle.keys import TemplateMismatch, find_session_keys
from oracle.store import StoreOptions
from support_oracle import TurnSpec, build_world, simple_specs, store_with_langchain, write_journal

TITLE = "Delivery question"


def journaled_world(run):
    world = build_world(simple_specs(4), start=time.time() - 60, seed=12)
    write_journal(run, world.records)
    return world


def messages(world, s) -> list[dict]:
    return [m for _, m in world.stored[s]]


def mismatch(run, **options) -> str:
    with pytest.raises(TemplateMismatch) as err:
        audit_run(run, StoreOptions(**options))
    return str(err.value)


def _list_with_title(client, s, msgs):
    client.lpush(f"chat:{s}", *[json.dumps(m) for m in msgs])  # newest first, as --direction lpush reads
    client.set(f"chat:{s}:title", TITLE)


def _list_with_ratings(client, s, msgs):
    client.lpush(f"chat:{s}", *[json.dumps(m) for m in msgs])
    for n in range(1, 4):
        client.set(f"chat:{s}:rating:{n}", "none")


def _hash_messages_field_with_metadata(client, s, msgs):
    client.hset(f"chat:{s}", mapping={"messages": json.dumps(msgs), "title": TITLE, "count": len(msgs)})
    client.set(f"chat:{s}:title", TITLE)
    client.set(f"chat:{s}:last_seen", "1732730000.25")


def _hash_messages_field_with_title(client, s, msgs):
    client.hset(f"chat:{s}", "messages", json.dumps(msgs))
    client.set(f"chat:{s}:title", TITLE)


def _numbered_hash_with_title(client, s, msgs):
    client.hset(f"chat:{s}", mapping={**{str(n): json.dumps(m) for n, m in enumerate(msgs)}, "title": TITLE})
    client.set(f"chat:{s}:title", TITLE)


@pytest.mark.parametrize("layout", [_list_with_title, _list_with_ratings, _hash_messages_field_with_metadata,
                                    _hash_messages_field_with_title, _numbered_hash_with_title])
def test_the_advice_names_the_key_that_holds_the_messages_and_following_it_passes(tmp_path, redis_server, layout):
    run = tmp_path / "run"
    world = journaled_world(run)
    client = redis_server.client()
    for s in world.order:
        layout(client, s, messages(world, s))
    message = mismatch(run, url=redis_server.url)
    assert "split over keys" not in message, message
    assert "try --key-template 'chat:{session}'." in message, message
    summary = audit_run(run, StoreOptions(url=redis_server.url, key_template="chat:{session}"))
    assert summary["anomalies"] == {}, summary["anomalies"]


def test_pages_that_each_hold_messages_are_still_a_history_split_over_keys(tmp_path, redis_server):
    """JSON pages (strings, each a message list) beside a title: the two pages are the history, the title is not."""
    run = tmp_path / "run"
    world = journaled_world(run)
    client = redis_server.client()
    for s in world.order:
        msgs = messages(world, s)
        client.set(f"chat:{s}:p0", json.dumps(msgs[:2]))
        client.set(f"chat:{s}:p1", json.dumps(msgs[2:]))
        client.set(f"chat:{s}:title", TITLE)
    message = mismatch(run, url=redis_server.url)
    assert "try --key-template" not in message, message
    assert "in 2 keys (chat:{session}:p0, chat:{session}:p1)" in message and "--reader" in message, message


# X3 -------------------------------------------------------------------------------------------------------------


def reader_url(redis_server, grants: str = "+@read +ping +select") -> str:
    """A user with the grants docs/oracle.md used to list (no +info), on the test's own server."""
    redis_server.client().execute_command("ACL", "SETUSER", "reader", "on", ">pw", "~*", "&*", *grants.split())
    return f"redis://reader:pw@127.0.0.1:{redis_server.port}/0"


def test_telemetry_warns_once_that_info_was_refused_and_still_samples_the_ttls(tmp_path, redis_server, caplog):
    url = reader_url(redis_server)
    redis_server.client().set("message_store:gf0000000000000001", "[]", ex=30)
    s = sampler.Sampler(tmp_path, SimpleNamespace(user_count=1), url, interval=60,
                        template="message_store:{session}")
    with caplog.at_level(logging.WARNING, logger="goldfish"):
        s.sample()
        s.stop()  # its first sample (or this one's) and the one at the stop
    got = [json.loads(line) for line in RunFolder(tmp_path).telemetry.read_text().splitlines()]
    assert len(got) >= 2
    for record in got:
        assert record["store_error"].startswith("INFO refused: "), record
        assert set(record["store"]) == {"template_ttl_floor", "template_ttls"}
        assert 25 < record["store"]["template_ttl_floor"] <= 30
        assert 25 < record["store"]["template_ttls"]["gf0000000000000001"] <= 31  # by id: the audit keeps the run's
    warned = [r.getMessage() for r in caplog.records if "refused INFO" in r.getMessage()]
    assert len(warned) == 1 and "+info" in warned[0], warned

    from oracle import telemetry
    problems = []
    frame = telemetry.load(tmp_path, problems)
    assert not frame["store_ok"].any() and frame["keys"].isna().all()  # unknown, not 0 keys
    assert any("refused INFO" in p and "+info" in p for p in problems), problems


def _after_end_run(tmp_path, redis_server):
    """A correct bot whose keys (TTL 30 s) expired after its conversations ended (about 110 s ago), the run's
    telemetry read with the documented read-only user."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok"), TurnSpec("chatter", "ok")]
             for _ in range(6)]  # every probe passes: the bot remembered
    world = build_world(specs, start=time.time() - 120, seed=4)  # pauses of 0.2-1.2 s
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world, ttl=30)
    url = reader_url(redis_server)
    s = sampler.Sampler(run, SimpleNamespace(user_count=6), url, interval=60, template="message_store:{session}")
    s.stop()
    redis_server.client().delete(*[f"message_store:{s}" for s in world.order])  # as their TTL would have
    return run, url


def test_info_refused_with_ttls_seen_is_judged_by_the_ttls_not_by_invented_counters(tmp_path, redis_server):
    run, url = _after_end_run(tmp_path, redis_server)
    summary = audit_run(run, StoreOptions(url=url))
    assert summary["anomalies"] == {}, summary["anomalies"]
    said = [p for p in summary["problems"] if "expired after their conversations ended" in p]
    assert len(said) == 1 and "the keys of 6 session(s)" in said[0], summary["problems"]


def test_info_refused_with_no_ttl_seen_says_info_was_refused_not_invented_facts(tmp_path, redis_server):
    run, url = _after_end_run(tmp_path, redis_server)
    RunFolder(run).telemetry.unlink()  # no TTL seen anywhere: only INFO could tell a loss from a wrong place
    message = mismatch(run, url=url)
    assert "refused INFO" in message and "+info" in message, message
    for invented in ("uptime unknown", "expired 0", "evicted 0", "has been up since"):
        assert invented not in message, message


def test_other_databases_are_looked_at_when_info_keyspace_is_refused(redis_server):
    """The bot writes to database 3, --store-url says 0: with INFO refused only database 0 was looked at."""
    import redis

    url = reader_url(redis_server)
    session = "gf00000000000000c3"
    redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/3").rpush(f"message_store:{session}", "x")
    client = redis.Redis.from_url(url)
    found, _ = find_session_keys(client, [session])
    assert found == {session: [(3, f"message_store:{session}")]}



def test_digests_by_a_user_without_scripting_are_none_and_the_keys_are_read_again(redis_server):
    """The rolling audit's final re-check asks Redis for each key's digest with a script; the documented read-only
    user may not run SCRIPT EXISTS, and the audit ended 'audit FAILED ... no permissions', exit 3 (helper-108)."""
    from oracle.redis_reader import RedisReader

    redis_server.client().rpush("message_store:gf0000000000000001", b'{"type": "human"}')
    reader = RedisReader(StoreOptions(url=reader_url(redis_server, "+@read +ping +select +info")))
    assert reader.digests(["gf0000000000000001", "gf0000000000000002"]) == {
        "gf0000000000000001": ["?", "not digested"], "gf0000000000000002": ["?", "not digested"]}
    owner = RedisReader(StoreOptions(url=redis_server.url))  # scripting allowed: digested, as before
    kind, entries, digest = owner.digests(["gf0000000000000001"])["gf0000000000000001"]
    assert (kind, entries) == ("list", 1) and digest, digest
