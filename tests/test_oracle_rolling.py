"""The rolling audit (`--audit-every`, oracle/follow.py) against a real redis-server: what it judged
during the run stands at the end only while the key and the journal are unchanged; a loss after
its pass is still found, and the final audit equals a fresh one."""
from __future__ import annotations

import json
import shutil

import pytest

from oracle.audit import audit_run
from oracle.follow import follow
from oracle.store import StoreOptions
from support_locust import run_locust
from support_oracle import build_world, finding_keys, simple_specs, store_with_langchain, write_journal
from support_refbot import refbot_stack  # noqa: F401 - fixture


def one_pass(run, store: StoreOptions) -> dict:
    """follow() until it has written its progress once."""
    progress = run / "audit" / "rolling" / "progress.json"
    return follow(run, store, every=0.01, settle=0.0, stopping=progress.exists)


def sorted_rows(run) -> list[str]:
    return sorted((run / "audit" / "sessions.csv").read_text().splitlines())


@pytest.mark.parametrize("shards", [1, 3])
def test_judgements_stand_only_while_key_and_journal_are_unchanged(tmp_path, redis_server, shards):
    world = build_world(simple_specs(12), seed=7)  # users u0..u3 hold three sessions each, one after another
    run = tmp_path / "run"
    write_journal(run, world.records, shards=shards, by_user=True)
    store_with_langchain(redis_server.url, world)
    store = StoreOptions(url=redis_server.url)

    progress = one_pass(run, store)
    judged = [json.loads(line)["session"] for f in sorted((run / "audit" / "rolling").glob("judged.*.jsonl"))
              for line in f.read_text().splitlines()]
    # a session is complete once its user starts the next one: the last session of each user waits
    assert progress["sessions"] == len(judged) == 8 and progress["findings"] == {}
    assert progress["passes"] == 1

    # after the pass: one judged key deleted, one judged key loses its newest entry, one unjudged key deleted
    client = redis_server.client()
    deleted, shrunk, late = judged[0], judged[3], next(s for s in world.order if s not in judged)
    client.delete(f"message_store:{deleted}", f"message_store:{late}")
    client.lpop(f"message_store:{shrunk}")  # the newest entry: the last turn lost its reply

    fresh = tmp_path / "fresh"
    shutil.copytree(run, fresh, ignore=shutil.ignore_patterns("rolling"))
    summary = audit_run(run, store)
    assert summary["rolling"] == {"reused": 8 - 2}
    found = {session for _, session, _ in finding_keys(run)}
    assert {deleted, shrunk, late} <= found

    again = audit_run(fresh, store)  # the same store, no rolling judgements: the same outcome
    assert "rolling" not in again
    assert finding_keys(fresh) == finding_keys(run)
    assert again["metrics"] == summary["metrics"] and again["observed"] == summary["observed"]
    assert sorted_rows(fresh) == sorted_rows(run)

    redis_server.stop()  # the reused sessions' stored histories made it into the snapshot
    offline = audit_run(run)
    assert offline["metrics"] == summary["metrics"] and finding_keys(run) == finding_keys(fresh)


def test_keys_the_rolling_audit_read_then_flushed_are_a_loss_not_a_wrong_template(tmp_path, redis_server):
    """Someone flushed the store after the rolling audit had read the run's keys under the template: the final
    audit saw no key anywhere, a server up all along and a bot that remembered, and said the template or
    --store-url was wrong (exit 2, no verdict). The rolling audit's reads say the template was right: a loss."""
    import dataclasses
    import time

    specs = [[dataclasses.replace(spec, verdict_amnesia=False) for spec in session] for session in simple_specs(12)]
    world = build_world(specs, start=time.time() + 2, seed=9)  # acknowledged after the server started
    run = tmp_path / "run"
    write_journal(run, world.records, by_user=True)
    store_with_langchain(redis_server.url, world)
    store = StoreOptions(url=redis_server.url)
    assert one_pass(run, store)["sessions"] == 8
    redis_server.client().flushall()
    summary = audit_run(run, store)
    assert summary["verdict"]["result"] == "fail" and summary["anomalies"] == {"vanished": 12}
    assert summary["information"]["missing_keys"]["keys_seen"] == 8


def test_an_entry_changed_in_the_middle_after_the_rolling_pass_is_found(tmp_path, redis_server):
    """The digest was the key's length and its two end entries: an entry overwritten in the middle (LSET), or one
    removed and another inserted in its place (same length, same ends), kept the old PASS. The digest is now the
    whole content's, computed by Redis: any change shows, and the session is judged again."""
    world = build_world(simple_specs(12), seed=7)
    run = tmp_path / "run"
    write_journal(run, world.records, by_user=True)
    store_with_langchain(redis_server.url, world)
    store = StoreOptions(url=redis_server.url)
    one_pass(run, store)
    judged = [json.loads(line)["session"] for f in sorted((run / "audit" / "rolling").glob("judged.*.jsonl"))
              for line in f.read_text().splitlines()]
    client = redis_server.client()
    overwritten, swapped, donor = judged[0], judged[1], judged[2]
    client.lset(f"message_store:{overwritten}", 2, client.lindex(f"message_store:{donor}", 2))
    key = f"message_store:{swapped}"
    middle = client.lindex(key, 2)
    client.lrem(key, 1, middle)
    client.linsert(key, "BEFORE", client.lindex(key, 2), client.lindex(f"message_store:{donor}", 3))
    assert client.llen(key) == len(world.stored[swapped])
    summary = audit_run(run, store)
    assert summary["rolling"] == {"reused": 8 - 2}
    assert {overwritten, swapped} <= {session for _, session, _ in finding_keys(run)}


def test_a_torn_or_foreign_rolling_file_costs_reads_not_results(tmp_path, redis_server):
    world = build_world(simple_specs(12), seed=8)
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world)
    store = StoreOptions(url=redis_server.url)
    one_pass(run, store)
    for f in (run / "audit" / "rolling").glob("judged.*.jsonl"):  # garbage first, a torn line last
        text = f.read_bytes()
        f.write_bytes(b"not json\n" + text[: len(text) // 2])
    summary = audit_run(run, store)
    fresh = tmp_path / "fresh"
    shutil.copytree(run, fresh, ignore=shutil.ignore_patterns("rolling"))
    assert audit_run(fresh, store)["metrics"] == summary["metrics"]
    assert 0 < summary.get("rolling", {}).get("reused", 0) < 8


@pytest.mark.slow
def test_locust_audit_every_judges_during_the_run(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    run = run_locust(stack.url, tmp_path / "run", "--store-url", stack.state["store_url"], "--settle", "0.5",
                     "--audit-every", "1s", users=6, time_s="6s", timeout=240)
    assert run.returncode == 0, run.output[-4000:]
    progress = json.loads((run.run_dir / "audit" / "rolling" / "progress.json").read_text())
    summary = json.loads((run.run_dir / "audit" / "summary.json").read_text())
    assert progress["passes"] >= 2 and progress["sessions"] > 0 and progress["findings"] == {}
    assert summary["rolling"]["reused"] == progress["sessions"]  # nothing changed after it judged them
    assert summary["verdict"]["result"] == "pass"
    assert "rolling audit: every 1s" in run.output


@pytest.mark.parametrize("env, extra, fragment", [
    ({"url": "redis://127.0.0.1:1/0", "batch": 0}, [], "--batch: 0 must be a whole number >= 1"),
    ({"url": "garbage"}, [], "not a Redis URL"),
    ({"url": "redis://127.0.0.1:1/0", "key_template": "nokey"}, [], "must contain {session}"),
    ({"url": 5}, [], "oracle follow: "),
    ({"url": "redis://127.0.0.1:1/0"}, ["--every", "0"], "not a busy loop"),
    ({"url": "redis://127.0.0.1:1/0"}, [], "cannot reach the store"),
])
def test_follow_refuses_bad_options_and_an_unreachable_store_with_exit_2(env, extra, fragment, tmp_path, monkeypatch,
                                                                         capsys):
    """Its store options come as JSON in $GOLDFISH_FOLLOW: each was a traceback (exit 3), and --every 0 a busy
    loop rewriting progress.json a thousand times a second."""
    from oracle import follow

    import signal

    (tmp_path / "run").mkdir()
    monkeypatch.setenv(follow.ENV, json.dumps(env))
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert follow.main([str(tmp_path / "run"), *extra]) == 2
    assert fragment in capsys.readouterr().err
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # Ctrl-C given back


def test_follow_of_a_folder_that_is_not_one_is_exit_2(tmp_path, monkeypatch, capsys):
    from oracle import follow

    monkeypatch.setenv(follow.ENV, json.dumps({"url": "redis://127.0.0.1:1/0"}))
    (tmp_path / "file").write_text("x")
    for run in (tmp_path / "missing", tmp_path / "file"):
        assert follow.main([str(run)]) == 2
        assert "is not a folder" in capsys.readouterr().err


def test_a_key_judged_whole_that_expired_after_its_conversation_stays_judged(tmp_path, redis_server):
    """The rolling audit judged a session whole; its key then expired, by its TTL, after the conversation ended.
    The final audit judged it again as `expired` (its digest no longer matched) and FAILed a correct bot's soak
    (bot hunt 9, `--audit-every`). What was judged whole and expired whole after its end stands."""
    import time

    from support_oracle import read_findings
    from conftest import wait_until

    world = build_world(simple_specs(12), start=time.time() - 120, seed=7)
    run = tmp_path / "run"
    write_journal(run, world.records, by_user=True)
    store_with_langchain(redis_server.url, world, ttl=60)
    store = StoreOptions(url=redis_server.url)
    progress = one_pass(run, store)
    judged = [json.loads(line)["session"] for f in sorted((run / "audit" / "rolling").glob("judged.*.jsonl"))
              for line in f.read_text().splitlines()]
    assert progress["sessions"] == len(judged) == 8
    client = redis_server.client()
    expired = int(client.info("stats")["expired_keys"])
    client.set("message_store:short-lived", "x", px=1)  # the store expires keys under the template
    wait_until(lambda: client.get("message_store:short-lived") is None and
               int(client.info("stats")["expired_keys"]) > expired, what="a key to expire")
    client.delete(*[f"message_store:{s}" for s in judged[:2]])  # as their TTL would have, after they ended

    summary = audit_run(run, store)

    assert summary["rolling"] == {"reused": 8}
    assert summary["anomalies"] == {} and read_findings(run) == []


def test_a_store_that_stops_answering_during_a_pass_is_judged_again_at_the_next(tmp_path, redis_factory):
    """A Redis restart (nothing lost) during a rolling pass ended `oracle follow` with a traceback, and the rolling
    audit was gone for the rest of the run without a word (soak hunt 18). The pass is said and judged again."""
    server = redis_factory("aof-always")
    world = build_world(simple_specs(12), seed=7)
    run = tmp_path / "run"
    write_journal(run, world.records, by_user=True)
    store_with_langchain(server.url, world)
    progress_file = run / "audit" / "rolling" / "progress.json"
    stopped = []

    def stop_once(_partition, _sessions):  # the store goes down after the pass's first batch
        if not stopped:
            stopped.append(True)
            server.stop()

    def stopping() -> bool:
        if not progress_file.exists():
            return False
        progress = json.loads(progress_file.read_text())
        if progress.get("store_errors") and server.proc.poll() is not None:
            server.start()  # back, its data kept (AOF)
        return progress.get("sessions", 0) >= 8

    progress = follow(run, StoreOptions(url=server.url, batch=2, on_batch=stop_once), every=0.01, settle=0.0,
                      stopping=stopping)
    assert progress["store_errors"] == 1 and "store_error" in progress, progress
    assert progress["sessions"] == 8 and progress["findings"] == {}, progress
    fresh = tmp_path / "fresh"
    shutil.copytree(run, fresh, ignore=shutil.ignore_patterns("rolling"))
    summary = audit_run(run, StoreOptions(url=server.url))
    assert summary["rolling"] == {"reused": 8}  # the judgements of the pass made again stand
    again = audit_run(fresh, StoreOptions(url=server.url))
    assert finding_keys(fresh) == finding_keys(run) and again["metrics"] == summary["metrics"]
