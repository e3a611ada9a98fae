"""The replicated store (`refbot up --redis sentinel`): real redis-server primary + replica and three
real sentinels on loopback; bots, the oracle's reader and the WAIT option going through Sentinel."""
from __future__ import annotations

import signal

import pytest
import redis

from conftest import wait_until
from contracts.redis_url import is_sentinel_url, parse_sentinel_url, redis_client
from oracle.redis_reader import RedisReader
from oracle.store import StoreError, StoreOptions
from targets import registry as state, sentinel
from support_refbot import new_session, refbot_cli, refbot_stack  # noqa: F401 - fixture


@pytest.mark.parametrize("url, sentinels, service, options", [
    ("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/0?socket_timeout=2",
     (("127.0.0.1", 26379), ("127.0.0.1", 26380)), "mymaster", {"db": 0, "socket_timeout": 2.0}),
    ("redis+sentinel://:s3cret@sentinel:26379/chat", (("sentinel", 26379),), "chat", {"password": "s3cret"}),
    ("rediss+sentinel://u:p@a:1,[::1]:2/m/3", (("a", 1), ("::1", 2)), "m",
     {"username": "u", "password": "p", "db": 3, "ssl": True}),
])
def test_sentinel_urls_list_every_sentinel(url, sentinels, service, options):
    parsed = parse_sentinel_url(url)
    assert (parsed.sentinels, parsed.service, parsed.options) == (sentinels, service, options)
    assert is_sentinel_url(url) and not is_sentinel_url("redis://127.0.0.1:6379/0")


@pytest.mark.parametrize("url, words", [
    ("redis+sentinel://:s3cret@h/m", ["sentinel 'h'", "host:port"]),
    ("redis+sentinel://h:1", ["/service or /service/db"]),
    ("redis+sentinel://h:1/m/x", ["must be a number", "'x'"]),
    ("redis+sentinel://h:1/m/0?socket_timeout=soon", ["socket_timeout"]),
])
def test_bad_sentinel_urls_say_what_is_wrong_without_the_password(url, words):
    with pytest.raises(ValueError) as caught:
        parse_sentinel_url(url)
    assert all(w in str(caught.value) for w in words) and "s3cret" not in str(caught.value)
    with pytest.raises(StoreError, match="bad --store-url") as caught:
        RedisReader(StoreOptions(url=url))
    assert "s3cret" not in str(caught.value)


def test_sentinel_stack_records_roles_and_every_reader_goes_through_sentinel(refbot_stack):
    stack = refbot_stack(redis="sentinel", replicas=1, think_ms=0, jitter_ms=0)
    st = stack.state
    members = st["members"]
    assert st["redis"] == "sentinel" and is_sentinel_url(st["store_url"])
    assert {n: (m["role"], m.get("replication")) for n, m in members.items() if m["role"] != "bot"} == {
        "redis-1": ("redis", "primary"), "redis-2": ("redis", "replica"), "sentinel-1": ("sentinel", None),
        "sentinel-2": ("sentinel", None), "sentinel-3": ("sentinel", None), "haproxy": ("lb", None)}
    assert "--replicaof" not in members["redis-1"]["cmd"]
    assert members["redis-2"]["cmd"][-3:] == ["--replicaof", "127.0.0.1", str(members["redis-1"]["port"])]
    assert [p for _h, p in parse_sentinel_url(st["store_url"]).sentinels] == \
        [members[f"sentinel-{i}"]["port"] for i in (1, 2, 3)]
    assert members["bot-1"]["env"]["REFBOT_REDIS_URL"] == st["store_url"]
    status = refbot_cli("status", "--state-dir", stack.dir)
    assert status.returncode == 0
    assert [line.split()[1] for line in status.stdout.splitlines()[1:3]] == ["primary", "replica"]

    session = new_session()
    stack.reply(session, "My order number is 1234-ABCD.")
    assert stack.reply(session, "What is my order number?") == "Your order number is 1234-ABCD."
    reader = RedisReader(StoreOptions(url=st["store_url"], scan_foreign=False))
    [[raw]] = list(reader.read([session]))
    assert raw.exists and len(raw.entries) == 4
    replica = redis.Redis(port=members["redis-2"]["port"], socket_timeout=2)
    wait_until(lambda: replica.llen(f"message_store:{session}") == 4, timeout=10, what="the turn on the replica")

    # after a failover the same reader (and the bots) find the new primary through the sentinels
    assert sentinel.failover(st) == "redis-2"
    wait_until(lambda: stack.chat(session, "What is my order number?").status_code == 200, timeout=20,
               what="the bots to reach the new primary")
    [[raw]] = list(reader.read([session]))
    assert reader.client.connection_pool.get_master_address()[1] == members["redis-2"]["port"]
    assert len(raw.entries) >= 6


def test_wait_replicas_answers_503_when_the_replica_does_not_confirm(refbot_stack):
    stack = refbot_stack(redis="sentinel", replicas=1, wait_replicas=1, wait_ms=50, think_ms=0, jitter_ms=0)
    replica, session = stack.member("redis-2"), new_session()
    assert stack.chat(session, "My postcode is 1000-AAAA.").status_code == 200
    state.signal_member(replica, signal.SIGSTOP)
    try:
        refused = stack.chat(session, "My postcode is 2000-BBBB.")
        assert refused.status_code == 503, refused.text
        assert "WAIT confirmed 0 of 1 replica(s) within 50 ms" in refused.json()["error"]
        # written to the primary but not acknowledged: indeterminate, exactly what the client is told
        stored = redis_client(stack.state["store_url"]).lrange(f"message_store:{session}", 0, -1)
        assert any(b"2000-BBBB" in e for e in stored)
    finally:
        state.signal_member(replica, signal.SIGCONT)
    wait_until(lambda: stack.chat(session, "Thanks.").status_code == 200, timeout=10, what="WAIT to confirm again")


@pytest.mark.parametrize("flags, words", [
    (["--redis", "cluster"], ["unknown --redis 'cluster'", "sentinel"]),
    (["--wait-replicas", "1"], ["--wait-replicas 1 needs replicas", "--redis sentinel"]),
    (["--save", "60 1"], ["--save", "needs --persistence rdb"]),
])
def test_bad_replication_options_are_refused_before_anything_starts(tmp_path, flags, words):
    result = refbot_cli("up", "--state-dir", tmp_path / "s", *flags)
    assert result.returncode == 2 and all(w in result.stderr for w in words), result.stderr
    assert not (tmp_path / "s" / "state.json").exists()


def test_up_refuses_a_wait_the_bots_would_refuse_before_starting_anything():
    """--wait-ms below 1 ms is Redis's "WAIT ... 0" (block forever) once rounded: the bots refuse it at start
    (refbot/config.py), so `up` refuses it first, with the same bound, instead of starting bots that exit."""
    from refbot import stack

    with pytest.raises(stack.BadOption, match="--wait-ms at least 1"):
        stack.validate(stack.StackOptions(redis="sentinel", wait_replicas=1, wait_ms=0.5))
    stack.validate(stack.StackOptions(redis="sentinel", wait_replicas=1, wait_ms=1))
