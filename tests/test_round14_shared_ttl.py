"""Verdict hunt 14: another goldfish run on the same Redis, whose bot keeps its histories a few seconds, lent this
run its TTL. This run's keys, deleted by a FLUSHDB or a cleanup job, then read as "expired after the conversation"
(by design) and the run PASSed, exit 0, with the store judged not at all. The TTL evidence is now this run's keys'
only: the ids in the bounds sampled (by the audit, and by the run's telemetry) must be journaled sessions."""
from __future__ import annotations

import json
import time

from oracle.audit import audit_run
from oracle.store import StoreOptions
from oracle.verdict import exit_code
from support_oracle import TurnSpec, build_world, fill_redis, write_journal

TEMPLATE = "message_store:{session}"


def _other_runs_keys(client, ttl_s: int, count: int = 30) -> list[str]:
    """Keys of another goldfish run under the same template, with its bot's TTL; a few of them expired already (the
    server's expired_keys counter rose during this run, as it does beside such a run)."""
    keys = [TEMPLATE.format(session=f"gf{n:016x}") for n in range(10**6, 10**6 + count)]
    for key in keys:
        client.rpush(key, json.dumps({"type": "human", "data": {"content": "hi"}}))
        client.expire(key, ttl_s)
    expire_now(client, keys[:3])
    return keys[3:]


def expire_now(client, keys) -> None:
    """Let ``keys`` expire (a short PEXPIRE, so the server counts them expired), polled until they are gone."""
    for key in keys:
        client.pexpire(key, 10)
    deadline = time.monotonic() + 10
    while any(client.exists(k) for k in keys):
        assert time.monotonic() < deadline, "keys did not expire"
        time.sleep(0.02)


def _run(tmp_path, client, telemetry: dict | None = None):
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(6)], start=time.time() - 120, seed=41)
    write_journal(tmp_path, world.records)
    now = time.time()
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": now - 121, "end": now}))
    if telemetry is not None:
        (tmp_path / "telemetry.jsonl").write_text(json.dumps(
            {"time": now - 60, "users": 6, "rss": {}, "store": telemetry, "store_error": None}) + "\n")
    fill_redis(client, world)
    return world


def test_another_runs_ttl_does_not_excuse_this_runs_deleted_keys(tmp_path, redis_server):
    client = redis_server.client()
    client.flushall()
    world = _run(tmp_path, client)
    _other_runs_keys(client, 5)
    client.delete(*[TEMPLATE.format(session=s) for s in world.order[:3]])  # a cleanup job: this bot sets no TTL
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)
    assert summary["anomalies"].get("vanished") == 3 and exit_code(summary["verdict"]) == 1, summary["anomalies"]
    assert not [p for p in summary["problems"] if "expired after" in p]


def test_the_telemetrys_bounds_of_another_runs_keys_are_not_this_runs_ttl(tmp_path, redis_server):
    """The run's telemetry saw TTLs under the template, but every key it saw was another run's: no evidence."""
    client = redis_server.client()
    client.flushall()
    world = _run(tmp_path, client, {"template_ttl_floor": 3.0, "template_ttls": {f"gf{10**6:016x}": 3.0}})
    expire_now(client, _other_runs_keys(client, 300))  # none left by the audit: the telemetry's is the evidence
    client.delete(*[TEMPLATE.format(session=s) for s in world.order[:2]])
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)
    assert summary["anomalies"].get("vanished") == 2 and exit_code(summary["verdict"]) == 1, summary["anomalies"]


def test_this_runs_own_ttl_still_counts_from_its_telemetry_and_from_the_store(tmp_path, redis_server):
    """A TTL bot: its telemetry saw its own keys' TTL (by id); by the audit some have expired after their
    conversations: by design, not a loss. The same from a key still there with its TTL, telemetry or not."""
    client = redis_server.client()
    client.flushall()
    world = _run(tmp_path, client, {"template_ttl_floor": 29.0, "template_ttls": {}})
    mine = world.order[0]
    record = json.loads((tmp_path / "telemetry.jsonl").read_text())
    record["store"]["template_ttls"] = {mine: 29.0}
    (tmp_path / "telemetry.jsonl").write_text(json.dumps(record) + "\n")
    _other_runs_keys(client, 3)
    for session in world.order:
        client.expire(TEMPLATE.format(session=session), 30)
    expire_now(client, [TEMPLATE.format(session=s) for s in world.order[:2]])  # as the bot's TTL would
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)
    assert not summary["anomalies"].get("vanished"), summary["anomalies"]
    assert [p for p in summary["problems"] if "2 session(s) expired after their conversations ended" in p], \
        summary["problems"]


def _audited_run(tmp_path, redis_server):
    """A run whose own audit read this store whole and PASSed (its snapshot and summary.json in the folder)."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(6)],
                        start=time.time() + 2, seed=43)
    write_journal(tmp_path, world.records)
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": time.time()}))
    client = redis_server.client()
    client.flushall()
    fill_redis(client, world)
    assert exit_code(audit_run(tmp_path, StoreOptions(url=redis_server.url), jobs=1)["verdict"]) == 0
    return {name: (tmp_path / name).read_text() for name in ("store/meta.json", "audit/summary.json")}


def test_a_reaudit_under_another_key_template_names_the_template_not_a_store_that_lost_its_keys(tmp_path,
                                                                                                redis_server):
    """Input hunt 14: a live re-audit with --key-template 'history:{session}' after a run read under the default
    said the store "lost them since (flushed, or restarted without persistence)", while every key was there."""
    import pytest

    from oracle.keys import TemplateMismatch

    kept = _audited_run(tmp_path, redis_server)
    with pytest.raises(TemplateMismatch) as refused:
        audit_run(tmp_path, StoreOptions(url=redis_server.url, key_template="history:{session}"), jobs=1)
    said = str(refused.value)
    assert "lost them since" not in said and "history:{session}" in said and "message_store:{session}" in said, said
    assert {name: (tmp_path / name).read_text() for name in kept} == kept


def test_a_store_that_fails_while_its_evidence_is_read_is_one_line_and_keeps_the_earlier_audit(tmp_path,
                                                                                               redis_server,
                                                                                               monkeypatch, capsys):
    """Input hunt 14: a Redis killed while the audit checked the earlier snapshot's keys (EXISTS, LLEN) was 2-3
    chained tracebacks and exit 3. The failure is redis-py's own ConnectionError raised in that check (a mock:
    killing the server inside that window of a few milliseconds cannot be timed in a test)."""
    import redis

    from oracle import audit_cli, keys

    kept = _audited_run(tmp_path, redis_server)

    def dies(*_args):
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(keys, "_lost_since", dies)
    capsys.readouterr()
    assert audit_cli.main([str(tmp_path), "--store-url", redis_server.url, "--jobs", "1"]) == 2
    said = capsys.readouterr()
    assert "failed while its evidence was read" in said.err and "Connection closed by server" in said.err, said
    assert "Traceback" not in said.err + said.out
    assert {name: (tmp_path / name).read_text() for name in kept} == kept
