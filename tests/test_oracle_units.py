"""The oracle's pieces on their own: journal loading, decoding, metrics, windows, readers."""
from __future__ import annotations

import json
import random
import shutil
from http.server import BaseHTTPRequestHandler

import pandas as pd
import pytest

from conftest import http_server
from oracle.audit import audit_run
from oracle.decode import Shape, decode_session
from oracle.history import read_journal
from oracle.keys import TemplateMismatch
from oracle.metrics import wilson
from oracle.store import RawSession, StoreOptions
import support_oracle
from support_oracle import (build_world, finding_keys, inject, raw_entries, simple_specs, write_journal,
                            write_snapshot)


def test_journal_garbage_is_reported_with_file_and_line_and_torn_last_line_is_silent(tmp_path):
    world = build_world(simple_specs(2))
    good = world.records[:5]
    write_journal(tmp_path, good, extra_lines={0: ["this is not json\n", '{"session": "gf00", "turn": 1}\n',
                                                   json.dumps(world.records[5]) + "\n", '{"run": "x", "sess']})
    sessions, problems = read_journal(tmp_path)
    shard = tmp_path / "journal" / "local-0.jsonl"
    assert problems[0].startswith(f"{shard}:6: not JSON") and "skipped: 'this is not json'" in problems[0]
    assert problems[1].startswith(f"{shard}:7:") and "missing field 'outcome'" in problems[1]
    assert len(problems) == 2  # the torn last line (line 9) is skipped silently
    assert sum(len(t) for t in sessions.values()) == 6


def test_a_journal_of_only_garbage_is_a_clear_error(tmp_path):
    from oracle.history import JournalError
    write_journal(tmp_path, [], extra_lines={0: ["garbage\n", "more garbage\n"]})
    with pytest.raises(JournalError, match="no valid journal records.*local-0.jsonl:1"):
        read_journal(tmp_path)


def test_garbage_journal_lines_do_not_stop_the_audit(tmp_path):
    world = build_world(simple_specs(3), seed=2)
    expected = inject(world, world.order[2], "lost", random.Random(2))
    write_journal(tmp_path, world.records, extra_lines={0: ["\x00\x01garbage\n", "[1, 2]\n"]})
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path)
    assert finding_keys(tmp_path) == expected
    garbage = [p for p in summary["problems"] if not p.startswith("errors: ")]  # why its fail turns failed, first
    assert len(garbage) == 2 and ":" in garbage[0]


@pytest.mark.parametrize("entry, reason", [
    (b"\x80\x05\x95\x10\x00", "pickle (protocol 5)"),
    (b"\xff\xfe{}", "not utf-8"),
    (b'{"type": "human", "data": {"content": "x"', "not valid JSON"),
    (b'"just a string"', "wrong shape"),
    (b'{"type": 3, "data": {"content": "x"}}', "no role"),
    (b'{"type": "human", "data": {"content": 7}}', "no text"),
])
def test_undecodable_entries_become_corrupt_never_raise(entry, reason):
    raw = RawSession("gf0", "k", True, None, [b'{"type": "ai", "data": {"content": "ok"}}', entry])
    decoded = decode_session(raw, Shape(StoreOptions()))
    assert decoded.messages == [(0, "assistant", "ok")]
    assert len(decoded.corrupt) == 1 and reason in decoded.corrupt[0]["reason"]
    assert decoded.corrupt[0]["index"] == 1 and decoded.corrupt[0]["excerpt"]


def test_multimodal_content_and_other_roles_decode():
    entries = [json.dumps({"type": "system", "data": {"content": "be nice"}}),
               json.dumps({"type": "human", "data": {"content": [{"type": "text", "text": "hi "}, "there"]}})]
    decoded = decode_session(RawSession("s", "k", True, None, entries), Shape(StoreOptions()))
    assert decoded.messages == [(0, "other", "be nice"), (1, "user", "hi there")] and not decoded.corrupt


def test_wilson_intervals_and_empty_totals():
    assert wilson(0, 0) == {"count": 0, "total": 0, "rate": None, "low": None, "high": None}
    w = wilson(1, 10)
    assert w["rate"] == 0.1 and 0.0 < w["low"] < 0.1 < w["high"] < 0.5
    assert wilson(0, 100)["low"] == 0.0 and wilson(0, 100)["high"] > 0


def test_wilson_is_scipys_wilson_interval():
    """The closed form against scipy's binomtest(...).proportion_ci(method="wilson"), edges included."""
    from scipy.stats import binomtest

    cases = [(k, n) for n in range(1, 41) for k in range(n + 1)]
    cases += [(k, n) for n in (10 ** 6, 10 ** 9) for k in (0, 1, 7, n // 3, n - 1, n)]
    for k, n in cases:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        w = wilson(k, n)
        assert abs(w["low"] - ci.low) < 1e-12 and abs(w["high"] - ci.high) < 1e-12, (k, n, w, ci)
    assert wilson(12, 10)["rate"] == 1.2 and wilson(12, 10)["high"] == 1.0  # a count over its total is kept


def test_a_fault_no_conversation_spanned_is_named_as_not_measured(tmp_path):
    """At --think 0 a conversation burns its turns while a restarted bot is down, so no probe asks after the
    restart for what was said before it: a bot whose memory the restart wiped PASSed, silently. A fault kind no
    session spanned (a turn acknowledged before it began, a probe answered after) is named; a spanned one is not."""
    world = build_world([[support_oracle.TurnSpec("plant", "ok"), support_oracle.TurnSpec("chatter", "ok"),
                          support_oracle.TurnSpec("probe", "ok")] for _ in range(3)], seed=1)
    first = [r for r in world.records if r["session"] == world.order[0]]
    spanned = (first[0]["received"] + first[2]["sent"]) / 2
    after = max(r["received"] for r in world.records) + 5
    with open(tmp_path / "chaos.jsonl", "w") as fh:
        for kind, start in (("redis-restart", spanned), ("kill", after)):
            for event, when in (("apply", start), ("recover", start + 0.001)):
                fh.write(json.dumps({"fault": f"{kind}#0", "kind": kind, "target": "t", "instance": "t",
                                     "backend": "local", "event": event, "time": when, "outcome": "ok"}) + "\n")
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path, recovery_s=0.0)
    assert [p for p in summary["problems"] if "was not measured" in p] == [
        "chaos: no conversation had a turn acknowledged before a kill fault began and a recall probe answered after "
        "it: memory across kill was not measured (give --think, e.g. 0.5-2, or longer conversations, so that "
        "conversations outlive the faults)"]


def test_windows_faults_and_attribution(tmp_path):
    """Losses planted inside a fault window are attributed to its kind, against a clean baseline."""
    world = build_world([[support_oracle.TurnSpec("chatter", "ok")] * 6 for _ in range(8)], seed=1)
    t0 = min(r["sent"] for r in world.records)
    hit = sorted((r for r in world.records if r["turn"] == 3), key=lambda r: r["session"])
    for r in hit[:4]:  # lose turn 3 of four sessions
        world.stored[r["session"]] = [(t, m) for t, m in world.stored[r["session"]] if t != 3]
    start = min(r["sent"] for r in hit) - 0.01
    end = max(r["sent"] for r in hit) + 0.01
    with open(tmp_path / "chaos.jsonl", "w") as fh:
        fh.write(json.dumps({"fault": "f1#1", "kind": "redis-restart", "target": "redis", "instance": "redis",
                             "backend": "local", "event": "apply", "time": start, "outcome": "ok"}) + "\n")
        fh.write(json.dumps({"fault": "f1#1", "kind": "redis-restart", "target": "redis", "instance": "redis",
                             "backend": "local", "event": "recover", "time": end, "outcome": "ok"}) + "\n")
    (tmp_path / "steps.jsonl").write_text(json.dumps({"step": 0, "users": 8, "start": t0 - 1, "end": t0 + 1e4}) + "\n")
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path, window_s=1.0, recovery_s=0.0)
    windows = pd.read_csv(tmp_path / "audit" / "windows.csv")
    assert list(windows.columns) == ["start", "end", "step", "acked", "throughput", "latency_p50", "latency_p95",
                                     "latency_p99", "errors", "probes", "probes_failed", "lost", "crosstalk",
                                     "anomalies", "faults"]
    assert windows["acked"].sum() == 48 and windows["lost"].sum() == 4
    assert windows.loc[windows["lost"] > 0, "faults"].eq("redis-restart").all()
    assert (windows["step"] == 0).all()
    (fault,) = summary["by_fault"]
    assert fault["kind"] == "redis-restart" and fault["stored_loss"]["count"] == 4
    assert fault["stored_loss"]["low"] > summary["baseline"]["stored_loss"]["rate"] == 0
    assert summary["baseline"]["stored_loss"]["count"] == 0 and summary["baseline"]["stored_loss"]["total"] == 48 - fault["stored_loss"]["total"]
    assert summary["metrics"]["stored_loss"]["count"] == 4 and summary["steps"][0]["users"] == 8
    sessions = pd.read_csv(tmp_path / "audit" / "sessions.csv")
    assert sessions["lost"].sum() == 4 and sessions["anomalous"].sum() == 4


class _Histories(BaseHTTPRequestHandler):
    store: dict = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        session = self.path.split("/")[2]
        if session not in self.store:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps({"session": session, "messages": self.store[session]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_store():
    """A real HTTP server on loopback serving {session: [message dicts]} at /sessions/<id>/history."""
    with http_server(_Histories) as server:
        yield server


def test_http_reader(tmp_path, http_store):
    world = build_world(simple_specs(4), seed=7)
    rng = random.Random(7)
    expected = inject(world, world.order[0], "lost", rng) | inject(world, world.order[1], "vanished", rng)
    _Histories.store = {s: [m for _, m in world.stored[s]] for s in world.order if s not in world.gone}
    write_journal(tmp_path, world.records)
    url = f"http://127.0.0.1:{http_store.server_port}/sessions/{{session}}/history"
    summary = audit_run(tmp_path, StoreOptions(http_url=url))
    assert finding_keys(tmp_path) == expected and summary["store"]["reader"] == "http"
    assert audit_run(tmp_path)["metrics"] == summary["metrics"]  # and again from the snapshot


def test_an_http_history_api_that_lists_newest_first_is_no_verdict_not_every_session_reordered(tmp_path, http_store):
    """A correct bot whose history API answers newest first (its default order): every session was 'reordered',
    a false FAIL, where a Redis list or a JSON blob so is refused naming the order."""
    world = build_world(simple_specs(4), seed=7)
    _Histories.store = {s: [m for _, m in world.stored[s]][::-1] for s in world.order}
    write_journal(tmp_path, world.records)
    url = f"http://127.0.0.1:{http_store.server_port}/sessions/{{session}}/history"
    with pytest.raises(TemplateMismatch, match="histories from --http-url with two or more stored turns lists them "
                                               "newest first.*its order parameter in --http-url"):
        audit_run(tmp_path, StoreOptions(http_url=url))
    _Histories.store = {s: [m for _, m in world.stored[s]] for s in world.order}  # ?order=asc
    assert audit_run(tmp_path, StoreOptions(http_url=url))["anomalies"] == {}


def test_function_reader(tmp_path):
    world = build_world(simple_specs(3), seed=8)
    expected = inject(world, world.order[2], "duplicated", random.Random(8))
    support_oracle.FUNCTION_STORE.clear()
    support_oracle.FUNCTION_STORE.update({s: raw_entries(world, s) for s in world.order})
    write_journal(tmp_path, world.records)
    audit_run(tmp_path, StoreOptions(reader="support_oracle:function_reader"))
    assert finding_keys(tmp_path) == expected


def test_function_reader_with_str_entries_snapshots_them_as_text(tmp_path):
    """A reader function may return entries as str (docs/oracle.md); they are snapshotted as text."""
    world = build_world(simple_specs(3), seed=8)
    expected = inject(world, world.order[2], "duplicated", random.Random(8))
    support_oracle.FUNCTION_STORE.clear()
    support_oracle.FUNCTION_STORE.update({s: [e.decode() if isinstance(e, bytes) else e for e in raw_entries(world, s)]
                                          for s in world.order})
    write_journal(tmp_path, world.records)
    summary = audit_run(tmp_path, StoreOptions(reader="support_oracle:function_reader"))
    assert finding_keys(tmp_path) == expected
    assert audit_run(tmp_path)["metrics"] == summary["metrics"]  # and again from the snapshot


def test_a_window_without_steps_jsonl_takes_its_turns_most_common_step_lowest_on_a_tie():
    import numpy as np
    from collections import Counter
    from oracle.tally import Tally
    from oracle.windows import window_table
    # window 0: steps 2, 2, 1 -> 2; window 1: steps 3, 1 (a tie) -> 1; window 2: no step known -> empty
    sent = np.array([0.1, 0.2, 0.3, 1.1, 1.2, 2.1])
    n = len(sent)
    no = np.zeros(n, bool)
    tally = Tally(1.0)
    tally.add_turns({"sent": sent, "done": sent + 0.05, "latency": np.full(n, 0.05), "ok": ~no, "error": no,
                     "answered": no, "failed": no, "lost": no, "anomalous": no, "online": no,
                     "step": np.array([2, 2, 1, 3, 1, np.nan]), "kind": np.array(["chatter"] * n), "refused_burst": no},
                    np.zeros((n, 0), bool), np.zeros(n, int), ~no)
    assert window_table(tally.windows, 1.0, [], [], Counter(), Counter())["step"].tolist() == [2, 1, pd.NA]
    steps = [{"step": 7, "start": 1.0, "end": 2.0}]
    table = window_table(tally.windows, 1.0, [], steps, Counter(), Counter())
    assert table["step"].tolist() == [2, 7, pd.NA] and table["acked"].tolist() == [3, 2, 1]
    assert table["latency_p50"].tolist() == pytest.approx([0.05] * 3, rel=0.05)  # a 5% histogram


def test_an_unknown_outcome_is_reported_by_line_and_the_rest_of_its_chunk_is_kept(tmp_path):
    world = build_world(simple_specs(2))
    bad = dict(world.records[1], outcome="maybe")
    write_journal(tmp_path, [world.records[0], bad, *world.records[2:]])
    sessions, (problem,) = read_journal(tmp_path)
    assert ":2: outcome 'maybe' is not one of ok/fail/info; skipped: " in problem
    assert sum(len(t) for t in sessions.values()) == len(world.records) - 1
    assert {t.outcome for ts in sessions.values() for t in ts} <= {"ok", "fail", "info"}


def test_workers_copies_complete_a_killed_masters_journal_and_the_audit_says_so(tmp_path):
    """A master killed mid-run holds a prefix of each worker's lines (its last one torn); the workers'
    own copies in workers/ hold them all. The audit reads a copy instead when it extends the master's
    lines, says which, and ignores a copy whose lines differ from the master's."""
    world = build_world(simple_specs(9), seed=4)
    full = tmp_path / "full"
    write_journal(full, world.records, shards=3, by_user=True)
    write_snapshot(full, world)
    expected = audit_run(full)

    run = tmp_path / "run"
    shutil.copytree(full, run, ignore=shutil.ignore_patterns("audit"))
    journal, workers = run / "journal", run / "workers"
    workers.mkdir()
    shards = sorted(journal.glob("*.jsonl"))
    whole = shards[0].read_bytes()
    (workers / shards[0].name).write_bytes(whole)  # the master had only its first lines, the last torn
    shards[0].write_bytes(whole[: whole.index(b"\n", len(whole) // 2) + 20])
    shards[1].rename(workers / shards[1].name)  # the master never heard from this worker
    other = shards[2].read_bytes()  # a file that is not this master's worker: not merged
    (workers / shards[2].name).write_bytes(b'{"run": "another"}\n' + other)

    summary = audit_run(run)
    assert summary["metrics"] == expected["metrics"] and summary["observed"] == expected["observed"]
    copies = summary["information"]["journal_copies"]
    assert [(c["read"], c["master"]) for c in copies] == [
        (f"workers/{shards[0].name}", f"journal/{shards[0].name}"), (f"workers/{shards[1].name}", None)]
    assert copies[0]["lines_added"] == whole.count(b"\n") - shards[0].read_bytes().count(b"\n")
    assert copies[1]["lines_added"] == (full / "journal" / shards[1].name).read_bytes().count(b"\n")
    assert any(f"{workers / shards[2].name} is not a copy of" in p for p in summary["problems"])
    assert shards[0].read_bytes().count(b"\n") < whole.count(b"\n")  # nothing written into journal/


def test_which_keys_are_the_runs_is_told_a_page_at_a_time():
    from oracle.keys import SessionSet
    owned = SessionSet()
    owned.update(["gf0000000000000001", "gf00000000000000ff", "hand-written-7"])
    other = SessionSet()
    other.update(["gf0000000000000001", "gfffffffffffffffff"])  # overlapping sets merge without duplicates
    owned.merge(other)
    assert owned.contains(["gf0000000000000001", "gf0000000000000002", "gfffffffffffffffff", "hand-written-7",
                           "hand-written-8", "gf00000000000000FF"]) == [True, False, True, True, False, False]
    assert SessionSet().contains(["gf0000000000000001", "x"]) == [False, False]  # nothing journaled: nothing ours
    keys = owned.keys(StoreOptions(url="redis://127.0.0.1:1/0", key_template="chat:{session}:log"))
    assert keys.owns(["chat:gf0000000000000001:log", "chat:gf0000000000000001", "chat:hand-written-7:log",
                      "message_store:gf0000000000000001", "chat::log", "chat:log"]) == [True, False, True,
                                                                                        False, False, False]


def test_judging_tunes_the_cycle_collector_and_always_puts_it_back():
    import gc

    from oracle.judge import rare_full_collections
    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with rare_full_collections():
            assert gc.get_threshold()[0] > before[0]
            raise RuntimeError("a store that died mid-audit")
    assert gc.get_threshold() == before


def test_windows_grown_batch_by_batch_in_any_order_hold_exactly_the_counts_of_all_turns():
    import numpy as np

    from oracle.tally import LATENCY_BINS, Windows
    rng = np.random.default_rng(5)
    batches = [rng.integers(lo, lo + 40, 300) for lo in rng.permutation(np.arange(1000, 3000, 37))[:40]]
    whole, halves = Windows(), [Windows(), Windows()]
    for i, index in enumerate(batches):
        ones, bins = np.ones(len(index)), index % LATENCY_BINS
        for w in (whole, halves[i % 2]):
            w.add(index, [ones] * 6, index, bins, np.full(len(index), np.nan))
    halves[0].merge(halves[1])
    every = np.concatenate(batches)
    expected = np.bincount(every - every.min())
    for w in (whole, halves[0]):
        assert (w.start, w.end) == (every.min(), every.max())
        assert (w.counts[:, 0] == expected).all() and (w.counts[:, 5] == expected).all()
        assert w.latency.sum() == len(every) and (w.latency.sum(axis=1) == expected).all()
        assert len(w.counts) == len(w.latency) == len(expected)


def test_a_gone_key_is_evicted_only_when_the_store_evicted_after_its_last_ack():
    from oracle.judge import Evidence
    samples = Evidence(True, [(100.0, 0), (110.0, 3), (120.0, 3), (130.0, 9)])
    assert [samples.gone_class(t) for t in (50.0, 100.0, 109.9, 110.0, 125.0, 130.0, 500.0)] == \
        ["evicted", "evicted", "evicted", "evicted", "evicted", "expired", "expired"]
    assert Evidence(False, []).gone_class(1.0) == "vanished"
    assert Evidence(False, [(100.0, 4), (200.0, 4)]).gone_class(50.0) == "evicted"  # 4 evicted since the start
    assert Evidence(False, [(100.0, 7), (110.0, 2)]).gone_class(105.0) == "evicted"  # a restart, then 2 evicted


def test_a_store_whose_policy_evicts_only_keys_with_a_ttl_evicted_no_history_without_one():
    """Another app's cache on a shared Redis (volatile-lru, its own keys with TTLs) evicted keys all run; a history
    without a TTL deleted there was `evicted`, and --gate evicted=off PASSed it (verdict hunt 17)."""
    from oracle.judge import Evidence
    from oracle.keys import evicts_untimed

    evictions = [(100.0, 0), (130.0, 9)]
    assert Evidence(False, evictions, evicts_untimed=False).gone_class(110.0) == "vanished"
    assert Evidence(True, evictions, evicts_untimed=False).gone_class(110.0) == "evicted"  # keys with TTLs: may be
    assert Evidence(False, evictions).gone_class(110.0) == "evicted"  # allkeys-*, or unknown
    assert Evidence.of({"evictions": evictions, "evicts_untimed": False}).gone_class(110.0) == "vanished"
    assert Evidence.of({"evictions": evictions}).gone_class(110.0) == "evicted"  # an older snapshot: it may
    assert [evicts_untimed({"maxmemory_policy": p}) for p in ("volatile-lru", "volatile-ttl", "noeviction",
                                                                "allkeys-lru", "allkeys-random")] == \
        [False, False, False, True, True]
    assert evicts_untimed({}) is True


def test_the_store_s_maxmemory_policy_is_read_with_its_evidence(redis_server):
    from oracle.keys import _info, evicts_untimed

    client = redis_server.client()
    client.config_set("maxmemory-policy", "volatile-lru")
    try:
        assert evicts_untimed(_info(client)) is False
    finally:
        client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert evicts_untimed(_info(client)) is True
    finally:
        client.config_set("maxmemory-policy", "noeviction")


def test_a_gone_key_expired_only_when_the_store_expired_a_key_since_the_sessions_first_write():
    """Keys under the template carry a 1-hour TTL, and Redis restarted without persistence: the sessions written
    before the crash were gone, called 'expired', and `--gate expired=off` passed the run (a real LangChain app).
    A key the store never expired did not expire: the expired_keys counter must have risen since the first write."""
    from oracle.judge import Evidence
    never = Evidence(True, [], [(100.0, 0), (110.0, 0), (120.0, 0)])
    assert never.gone_class(115.0, 105.0) == "vanished"
    restarted = Evidence(True, [], [(100.0, 40), (110.0, 40), (120.0, 0), (130.0, 0)])  # 40 before the run
    assert restarted.gone_class(115.0, 105.0) == "vanished"
    assert Evidence(True, [], [(100.0, 40), (110.0, 41)]).gone_class(108.0, 105.0) == "expired"
    assert Evidence(True, [], [(100.0, 40), (110.0, 0), (120.0, 3)]).gone_class(108.0, 105.0) == "expired"  # after a restart
    assert Evidence(True, [], [(500.0, 3)]).gone_class(108.0, 105.0) == "expired"  # no sample before: since start
    assert Evidence(True, []).gone_class(108.0) == "expired"  # an older snapshot: no counter known
    assert Evidence(False, [], [(500.0, 3)]).gone_class(108.0, 105.0) == "vanished"  # no TTL under the template


def test_a_pause_the_history_outlived_is_no_pause_to_hold_against_its_ttl():
    """A correct bot's key, refreshed on every write with a 5 s TTL (read back as a floor of 3.6 s), outlived a 4 s
    pause: a probe after it recalled a fact planted before it. Held against the floor, that pause made the session
    `expired` (bot hunt 10). A pause after which no probe passed on an earlier fact still counts."""
    import json

    from contracts.journal import decode_line
    from oracle.checkers import longest_pause
    from support_oracle import TurnSpec, build_world

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]], seed=2)
    records = sorted(world.records, key=lambda r: r["turn"])
    records[2]["fact"] = records[0]["fact"]  # the probe asks for the fact turn 0 planted
    for r in records[2:]:  # a 4 s pause before the probe
        r["sent"] += 4
        r["received"] += 4
    turns = [decode_line(json.dumps(r)) for r in records]
    assert longest_pause(turns) < 3  # the probe passed after it: the history outlived the pause
    records[2]["verdict"] = "amnesia"
    assert longest_pause([decode_line(json.dumps(r)) for r in records]) > 4


def test_a_gone_key_that_could_only_have_expired_after_its_conversation_is_after_end():
    """Keys under the template live 5 s after their last write; the audit reads at 120 s. A session acknowledged
    last at 108 s, none of whose pauses reached 5 s, expired once it was over: by design (AFTER_END, no finding).
    A pause of 6 s inside it, or an audit 2 s after its end (too soon for a TTL restarted by its last write),
    leaves `expired`."""
    from oracle.checkers import AFTER_END
    from oracle.judge import Evidence

    ttl = Evidence(True, [], [(100.0, 40), (120.0, 41)], ttl_floor=5.0, ttl_at=120.0)
    assert ttl.gone_class(108.0, 100.0, longest_pause=1.0) == AFTER_END
    assert ttl.gone_class(108.0, 100.0, longest_pause=6.0) == "expired"
    assert ttl.gone_class(118.0, 100.0, longest_pause=1.0) == "expired"
    assert ttl.gone_class(108.0, 100.0) == "expired"  # no pauses known: as before


def test_a_store_still_loading_its_data_is_reached_not_unreachable():
    """Redis answers -LOADING after a restart; redis-py files it as a ConnectionError, and it was said "cannot reach
    the store", the words for a store that does not answer (input hunt 16)."""
    import redis

    from oracle.redis_reader import unreached

    said = unreached(redis.BusyLoadingError("Redis is loading the dataset in memory"), " at redis://127.0.0.1:1/0")
    assert said.startswith("the store at redis://127.0.0.1:1/0 answered that it is still loading") and \
        "cannot reach" not in said
    assert unreached(redis.ConnectionError("Connection refused")).startswith("cannot reach the store")
