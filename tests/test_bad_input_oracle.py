"""The bad-input corpus (#16), the oracle's part: a store snapshot's line or meta.json, a rolling-audit file, a
server that is not Redis, a summary.json metric and $GOLDFISH_FOLLOW, each damaged the way a hunt found it
was a traceback (exit 3), a hang, or a comparison that read a missing count as 0. Each is exit 2 naming the
file and line or the field, or (a rolling file: it only saves reads) passed over, never a traceback.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import zlib
from pathlib import Path

import pytest

from test_bad_input import assert_named

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SESSION = "gf0000000000000001"
SESSIONS = f"sessions.{zlib.crc32(SESSION.encode()) % 16:02d}.jsonl"  # oracle.history.partition_of


@pytest.fixture(scope="module")
def snapshot_run(tmp_path_factory):
    """A journaled run and its store snapshot (one session), as the audit writes them."""
    from oracle.store import StoreOptions

    run = tmp_path_factory.mktemp("snap") / "run"
    (run / "journal").mkdir(parents=True)
    (run / "journal" / "local-1.jsonl").write_text(json.dumps(
        {"run": "run", "session": SESSION, "turn": 0, "outcome": "ok", "sent": 1.0, "received": 2.0,
         "message": f"[{SESSION}t0] hi", "reply": "Noted."}) + "\n")
    store = run / "store"
    store.mkdir()
    (store / "meta.json").write_text(json.dumps({
        "reader": "redis", "url": "redis://127.0.0.1/0", "key_template": StoreOptions().key_template,
        "format": "auto", "direction": "lpush", "complete": True, "partitions": 16,
        "files": [f"sessions.{p:02d}.jsonl" for p in range(16)],
        "shape": {"role_field": "type", "content_field": "data.content", "user_roles": ["human"],
                  "assistant_roles": ["ai"], "messages_field": "messages"}}))
    (store / SESSIONS).write_text(json.dumps(snapshot_line()) + "\n")
    (store / "foreign.jsonl").write_text("")
    return run


def snapshot_line(**changes) -> dict:
    entries = [json.dumps({"type": "human", "data": {"content": f"[{SESSION}t0] hi"}}),
               json.dumps({"type": "ai", "data": {"content": "Noted."}})]
    return {"session": SESSION, "key": f"message_store:{SESSION}", "exists": True, "ttl": None, "type": "list",
            "entries": entries, **changes}


def audit_copy(snapshot_run, tmp_path, damage, capsys, *argv) -> tuple[int, str, Path]:
    from oracle.audit_cli import main

    run = tmp_path / "run"
    shutil.copytree(snapshot_run, run)
    damage(run)
    before = {p: p.read_bytes() for p in (run / "journal").iterdir()}
    code = main([str(run), "--jobs", "1", *argv])
    assert {p: p.read_bytes() for p in (run / "journal").iterdir()} == before  # nothing recorded lost
    return code, capsys.readouterr().err, run


def test_the_undamaged_snapshot_passes(snapshot_run, tmp_path, capsys):
    assert audit_copy(snapshot_run, tmp_path, lambda run: None, capsys)[0] == 0



def test_a_session_stored_beyond_the_line_limit_is_re_audited_from_its_snapshot(snapshot_run, tmp_path, capsys):
    """A bot that stores 65 MB in one history: the audit judged it from the store and wrote its snapshot line,
    which a re-audit then refused as 'not JSON' (the limit that guards against untrusted lines)."""
    from contracts.jsonl import LINE_BYTES

    def grow(run):
        huge = json.dumps({"type": "ai", "data": {"content": "x" * LINE_BYTES}})
        line = snapshot_line(entries=snapshot_line()["entries"] + [huge])
        (run / "store" / SESSIONS).write_text(json.dumps(line) + "\n")

    code, err, run = audit_copy(snapshot_run, tmp_path, grow, capsys)
    assert code == 0, err[-2000:]
    assert json.loads((run / "audit" / "summary.json").read_text())["sessions"] == 1


# ---- F2: a snapshot line whose entries are not a list ------------------------------------------
@pytest.mark.parametrize("entries", [5, "abc", {"a": 1}], ids=["a-number", "a-string", "an-object"])
@pytest.mark.parametrize("entries_as", ["text", "json"])
def test_snapshot_entries_not_a_list_is_exit_2_naming_file_and_line(entries, entries_as, snapshot_run, tmp_path,
                                                                     capsys):
    """A number was a traceback (exit 3) with no file or line; a string or an object was read as its characters
    or keys (a session whose history was lost, judged from garbage)."""
    def damage(run):
        (run / "store" / SESSIONS).write_text(json.dumps(snapshot_line(entries=entries, entries_as=entries_as)) + "\n")

    code, err, run = audit_copy(snapshot_run, tmp_path, damage, capsys)
    assert code == 2, err
    assert_named(err, f"{run / 'store' / SESSIONS}:1: not a snapshot line", "$.entries")


# ---- F3: store/meta.json fields the re-audit uses ----------------------------------------------
META = [
    ("role-field-null", {"shape": {"role_field": None}}, "Expected `str`, got `null` - at `$.shape.role_field`"),
    ("content-field-null", {"shape": {"content_field": None}}, "got `null` - at `$.shape.content_field`"),
    ("messages-field-a-number", {"shape": {"messages_field": 3}}, "got `int` - at `$.shape.messages_field`"),
    ("direction-sideways", {"direction": "sideways"}, "Invalid enum value 'sideways' - at `$.direction`"),
    ("format-zzz", {"format": "zzz"}, "Invalid enum value 'zzz' - at `$.format`"),
    ("partitions-1e9", {"partitions": 1e9}, "at `$.partitions`"),
    ("partitions-a-billion", {"partitions": 10**9}, "Invalid enum value 1000000000 - at `$.partitions`"),
]


@pytest.mark.parametrize("name, change, fragment", META, ids=[m[0] for m in META])
def test_a_bad_meta_field_is_exit_2_naming_meta_json_and_the_field(name, change, fragment, snapshot_run, tmp_path,
                                                                    capsys):
    """A null role or content field was a traceback (exit 3); a direction or format the reader has no way of
    reading was taken silently (as the default); a partition count of 1e9 said "written by an older goldfish"."""
    def damage(run):
        meta = json.loads((run / "store" / "meta.json").read_text())
        meta["shape"].update(change.pop("shape", {}))
        meta.update(change)
        (run / "store" / "meta.json").write_text(json.dumps(meta))

    code, err, run = audit_copy(snapshot_run, tmp_path, lambda run: damage(run), capsys)
    assert code == 2, err
    assert_named(err, f"{run / 'store' / 'meta.json'}: ", fragment)


# ---- F8: a server that answers, but not as Redis -----------------------------------------------
def _serving(serve):
    """A loopback server handing each connection to ``serve(conn, stop)`` in a thread; yields its redis:// URL."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn, stop), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    server.close()


@pytest.fixture
def not_redis():
    """A loopback server that answers every command with +PONG: redis-py's HELLO gets a string, not a map."""
    def serve(conn, stop):
        with conn:
            while not stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(b"+PONG\r\n" * max(1, data.count(b"*")))

    yield from _serving(serve)


@pytest.fixture
def trickling():
    """A loopback server that reads a command, then sends "+" every 0.1 s and never ends the line (at most 600)."""
    def serve(conn, stop):
        with conn:
            try:
                conn.recv(65536)
                for _ in range(600):
                    if stop.wait(0.1):
                        return
                    conn.sendall(b"+")
            except OSError:
                return

    yield from _serving(serve)


@pytest.mark.timeout(60)
def test_a_server_that_never_finishes_a_reply_is_refused_not_waited_for(trickling, monkeypatch):
    """Each stray byte restarted the socket's timeout: Locust's start check hung before any load, and `oracle audit
    --store-url` until killed (input hunt 17). The PING has a deadline of its own (shortened here)."""
    from oracle import redis_reader
    from oracle.options import OptionError, reach_store
    from oracle.store import StoreOptions

    monkeypatch.setattr(redis_reader, "PING_DEADLINE_S", 2.0)
    with pytest.raises(OptionError) as raised:
        reach_store(StoreOptions(url=trickling))
    assert_named(str(raised.value), "cannot reach the store", "no complete reply to PING within 2s")


def test_a_server_that_does_not_answer_as_redis_is_exit_2(not_redis, snapshot_run, tmp_path, capsys):
    """It was a traceback (exit 3): AttributeError: 'bytes' object has no attribute 'get', from redis-py."""
    code, err, _ = audit_copy(snapshot_run, tmp_path, lambda run: None, capsys, "--store-url", not_redis)
    assert code == 2, err
    assert_named(err, f"cannot reach the store at {not_redis}", "does not answer as a Redis server")


def test_two_ways_to_read_the_store_are_exit_2_naming_both(snapshot_run, tmp_path, capsys, redis_server):
    """--store-url beside --http-url: the HTTP reader was used and --store-url silently ignored (a FAIL, exit 1,
    from a history endpoint the user did not mean)."""
    code, err, _ = audit_copy(snapshot_run, tmp_path, lambda run: None, capsys, "--store-url", redis_server.url,
                              "--http-url", "http://127.0.0.1:9/{session}")
    assert code == 2, err
    assert_named(err, "--store-url and --http-url", "give one way to read the store, not 2")


def test_locusts_store_check_refuses_a_server_that_does_not_answer_as_redis(not_redis):
    from oracle.options import OptionError, reach_store
    from oracle.store import StoreOptions

    with pytest.raises(OptionError) as raised:
        reach_store(StoreOptions(url=not_redis))
    assert_named(str(raised.value), f"--store-url {not_redis!r}: cannot reach the store",
                 "does not answer as a Redis server")


# ---- F4: a rolling-audit file that is not a regular file ---------------------------------------
def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _directory(path: Path) -> None:
    path.mkdir()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("replace", [_fifo, _dev_zero, _directory], ids=["fifo", "dev-zero", "directory"])
def test_a_rolling_file_that_is_not_a_regular_file_is_passed_over(replace, tmp_path, redis_server, capsys):
    """A FIFO hung the final audit, /dev/zero grew one line until MemoryError (exit 3), a directory was exit 2:
    a rolling file only saves reads, so its sessions are read from the store and the results are a fresh audit's."""
    from oracle.audit_cli import main
    from oracle.follow import follow
    from oracle.store import StoreOptions
    from support_oracle import build_world, simple_specs, store_with_langchain, write_journal

    world = build_world(simple_specs(12), seed=8)
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(redis_server.url, world)
    progress = run / "audit" / "rolling" / "progress.json"
    follow(run, StoreOptions(url=redis_server.url), every=0.01, settle=0.0, stopping=progress.exists)
    judged = sorted((run / "audit" / "rolling").glob("judged.*.jsonl"))
    assert len(judged) >= 2
    fresh = tmp_path / "fresh"
    shutil.copytree(run, fresh, ignore=shutil.ignore_patterns("rolling"))
    judged[0].unlink()
    replace(judged[0])

    assert main([str(run), "--store-url", redis_server.url]) == main([str(fresh), "--store-url", redis_server.url])
    assert "Traceback" not in capsys.readouterr().err
    summary, again = (json.loads((r / "audit" / "summary.json").read_text()) for r in (run, fresh))
    assert summary["metrics"] == again["metrics"] and summary["observed"] == again["observed"]
    assert 0 < summary["rolling"]["reused"] < 8  # the other files' judgements still stand


# ---- F9: a summary.json metric without its count -----------------------------------------------
@pytest.fixture(scope="module")
def audited_pair(tmp_path_factory):
    from support_report import synthetic

    root = tmp_path_factory.mktemp("pair")
    return synthetic(root / "base", label="v1"), synthetic(root / "candidate", label="v2", probes_failed=30)


@pytest.mark.parametrize("count, fragment", [
    (None, "Object missing required field `count` - at `$.metrics.probe_amnesia`"),
    ("null", "Expected `int`, got `null` - at `$.metrics.probe_amnesia.count`"),
], ids=["missing", "null"])
def test_a_metric_without_its_count_is_exit_2_not_no_change(count, fragment, audited_pair, tmp_path, capsys):
    """A missing count was read as 0 of the total: a candidate with half its probes failed printed
    "no significant change" and exit 0 (with the count: WORSE, exit 1)."""
    from oracle.__main__ import main

    base, candidate = audited_pair
    assert main(["compare", str(base), str(candidate), "--gate", "off"]) == 1  # undamaged: worse
    capsys.readouterr()
    cand = tmp_path / "candidate"
    shutil.copytree(candidate, cand)
    path = cand / "audit" / "summary.json"
    summary = json.loads(path.read_text())
    metric = summary["metrics"]["probe_amnesia"]
    del metric["count"]
    if count == "null":
        metric["count"] = None
    path.write_text(json.dumps(summary))
    assert main(["compare", str(base), str(cand), "--gate", "off"]) == 2
    assert_named(capsys.readouterr().err, f"{path}: ", fragment)


# ---- F10: $GOLDFISH_FOLLOW, the rolling audit's store options ----------------------------------
FOLLOW_ENV = [
    ("timeout-nan-text", {"timeout_s": "NaN"}, "Expected `float`, got `str` - at `$.timeout_s`"),
    ("timeout-nan", '{"url": "redis://127.0.0.1:1/0", "timeout_s": NaN}', "at `$.timeout_s`"),
    ("timeout-negative", {"timeout_s": -5}, "Expected `float` > 0.0 - at `$.timeout_s`"),
    ("on-batch", {"on_batch": 1}, "unknown field `on_batch`"),
    ("user-roles-a-string", {"user_roles": "human"}, "Expected `array`, got `str` - at `$.user_roles`"),
    ("assistant-role-a-number", {"assistant_roles": ["ai", 3]}, "at `$.assistant_roles[1]`"),
    ("scan-a-word", {"scan_foreign": "yes"}, "Expected `bool`, got `str` - at `$.scan_foreign`"),
]


@pytest.mark.parametrize("name, env, fragment", FOLLOW_ENV, ids=[f[0] for f in FOLLOW_ENV])
def test_a_bad_follow_option_is_exit_2_naming_the_field(name, env, fragment, tmp_path, monkeypatch, capsys):
    """timeout_s "NaN" or -5 and on_batch 1 were tracebacks (exit 3); user_roles "human" was read as the roles
    h, u, m, a and n."""
    from oracle import follow

    (tmp_path / "run").mkdir()
    text = env if isinstance(env, str) else json.dumps({"url": "redis://127.0.0.1:1/0", **env})
    monkeypatch.setenv(follow.ENV, text)
    assert follow.main([str(tmp_path / "run")]) == 2
    assert_named(capsys.readouterr().err, "oracle follow: ", fragment)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_journal_with_one_sessions_lines_unreadable_is_judged_again_from_its_snapshot(tmp_path, jobs):
    """Every journal line of one session damaged after the store was read (a bad copy): the re-audit from the
    snapshot was refused, blaming the snapshot ("holds lines no journaled session asked for... read the store
    again"), though the store may be long gone. It judges the rest as the live audit did: the unreadable gate
    fails the run, and the problems say which stored sessions had no readable journal line."""
    from oracle.audit import audit_run
    from oracle.verdict import parse_gates
    from support_oracle import TurnSpec, build_world, write_journal, write_snapshot

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(12)], seed=5)
    victim = world.order[3]
    write_journal(tmp_path, [r for r in world.records if r["session"] != victim],
                  extra_lines={0: ["garbage\n"] * sum(r["session"] == victim for r in world.records)})
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path, gates=parse_gates("strict"), jobs=jobs)
    assert summary["verdict"]["result"] == "fail"
    assert any(line.startswith("unreadable:") for line in summary["verdict"]["failed"]), summary["verdict"]["failed"]
    assert summary["sessions"] == len(world.order) - 1
    assert any(f"have no readable journal line (for example {victim})" in p for p in summary["problems"]), \
        summary["problems"]


def test_a_store_that_cannot_be_read_names_the_faults_the_run_s_chaos_left_in_force(tmp_path, capsys):
    """Locust killed while its plan held Redis paused: `oracle audit` said only "cannot reach the store: Timeout",
    though chaos/outstanding.json listed the pause and `chaos heal` was the fix (chaos hunt 18)."""
    from conftest import free_port
    from support_oracle import build_world, oracle_main, simple_specs, write_journal

    run = tmp_path / "run"
    write_journal(run, build_world(simple_specs(2), seed=3).records)
    (run / "chaos").mkdir()
    (run / "chaos" / "outstanding.json").write_text(json.dumps({"backend": "local", "faults": [
        {"key": "stop-redis#0@redis", "instance": "redis", "state": "applied",
         "fault": {"id": "stop-redis#0", "kind": "pause", "target": "redis"}}]}))
    code, _, err = oracle_main(capsys, "audit", run, "--store-url", f"redis://127.0.0.1:{free_port()}/0")
    assert code == 2, err
    assert "cannot reach the store" in err and "lists 1 fault(s) this run's chaos left in force (first: " \
        "stop-redis#0 pause on redis)" in err and f"python -m chaos heal {run}" in err, err
    (run / "chaos" / "outstanding.json").write_text(json.dumps({"backend": "local", "faults": []}))
    code, _, err = oracle_main(capsys, "audit", run, "--store-url", f"redis://127.0.0.1:{free_port()}/0")
    assert code == 2 and "chaos heal" not in err, err
