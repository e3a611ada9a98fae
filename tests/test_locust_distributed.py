"""Distributed runs: `--processes 2`, and a master with two workers on loopback (one SIGKILLed).

The complete journal must end up in the master's run folder (journal/<worker-id>.jsonl),
record for record what Locust counted; a SIGKILLed worker loses only its in-flight turns.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import free_port, wait_until
from support_locust import (CHATFILE, LOCUST, LocustRun, _kill_group, chat_bot, finish as finish_or_dump, locust_cmd,
                            run_locust)
from test_locust_runs import assert_journal_matches_locust


def master_journal_equals_worker_shards(run_dir):
    shards = sorted((run_dir / "journal").glob("*.jsonl"))
    assert len(shards) == 2 and all(s.stat().st_size > 0 for s in shards)
    for shard in shards:
        local = run_dir / "workers" / shard.name
        assert shard.read_bytes() == local.read_bytes(), shard.name
    return shards


@pytest.mark.slow
def test_processes_2_gives_one_complete_journal_in_the_run_folder(tmp_path):
    """Also with the step shape: the master's steps reach the workers' journal records; and the master's
    --replica-header reaches the workers (each turn tagged with its own response's header)."""
    port = free_port()  # loopback and a free port: Locust's default binds tcp://*:5557, shared by every run here
    with chat_bot("memory") as url:
        run = run_locust(url, tmp_path / "run", "--processes", "2", "--master-bind-host", "127.0.0.1",
                         "--master-bind-port", port, "--master-host", "127.0.0.1", "--master-port", port,
                         "--step-users", "4", "--steps", "2",
                         "--step-duration", "3s", "--replica-header", "X-Turn-Token", users=8, time_s="60s")
    assert run.returncode == 0, run.output
    master_journal_equals_worker_shards(run.run_dir)
    records = run.records()
    assert_journal_matches_locust(run, records)
    assert {r["verdict"] for r in records if r["kind"] == "probe" and r["outcome"] == "ok"} == {"pass"}
    assert all(r["replica"] == r["token"] for r in records if r["status"])
    steps = (run.run_dir / "steps.jsonl").read_text().splitlines()
    assert len(steps) == 2
    assert {r["step"] for r in records} <= {None, 0, 1} and {0, 1} <= {r["step"] for r in records}


def start_workers(n, port, cwd):
    procs = []
    for i in range(n):
        (cwd / f"w{i}").mkdir(exist_ok=True)
        procs.append(subprocess.Popen(
            [LOCUST, "-f", CHATFILE, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port),
             "--loglevel", "WARNING"], cwd=cwd / f"w{i}", stdout=subprocess.DEVNULL,
            stderr=open(cwd / f"w{i}" / "worker.log", "wb"), start_new_session=True))
    return procs


def run_master(url, run_dir, port, *extra, users=6, time_s="6s", expect=2):
    (run_dir / "locust").mkdir(parents=True, exist_ok=True)
    cmd = locust_cmd(url, run_dir, "--master", "--expect-workers", str(expect), "--master-bind-host", "127.0.0.1",
                     "--master-bind-port", str(port), *extra, users=users, rate=users, time_s=time_s)
    return subprocess.Popen(cmd, cwd=run_dir.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish_with_workers(master, workers):
    """The master's end, then its workers'; each worker killed whatever happens."""
    try:
        done = finish(master)
        for w in workers:
            w.wait(30)
        return done
    finally:
        for w in workers:
            _kill_group(w)


def finish(master, timeout=120):
    try:
        out, err = finish_or_dump(master, timeout)
    finally:
        _kill_group(master)
    return subprocess.CompletedProcess(master.args, master.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize("late", [False, True], ids=["together", "one-joins-late"])
def test_master_and_two_workers_on_loopback(tmp_path, late):
    """``late``: the second worker starts mid-test and gets half the users (Locust rebalances). It could get the
    master's spawn, and fire test_start, before goldfish's init had run: its users talked to the bot and journaled
    nothing, and the run PASSed with a third of its conversations unjudged (verdict hunt:
    late_worker_unjournaled_pass, 7 of 8 tries)."""
    port = free_port()
    run_dir = tmp_path / "run"
    with chat_bot("memory") as url:
        master = run_master(url, run_dir, port, **({"users": 8, "time_s": "10s", "expect": 1} if late else {}))
        workers = start_workers(1 if late else 2, port, tmp_path)
        try:
            if late:
                wait_until(lambda: any(f.stat().st_size for f in (run_dir / "journal").glob("*.jsonl")), timeout=60,
                           what="the first worker's turns")
                (tmp_path / "late").mkdir()
                workers += start_workers(1, port, tmp_path / "late")
        finally:
            done = finish_with_workers(master, workers)
    run = LocustRun(done, run_dir, run_dir / "locust" / "stats.json")
    assert run.returncode == 0, run.output
    master_journal_equals_worker_shards(run_dir)  # both workers' shards, whole
    assert_journal_matches_locust(run, run.records())


@pytest.mark.slow
def test_a_master_sigtermed_during_the_load_records_that_it_stopped_early(tmp_path):
    """A CI job's time-out on a distributed run: Locust's master quits inside its own SIGTERM handler, stopping the
    load and finishing goldfish's run before goldfish's quit ran, so run.json said nothing (PASS, exit 0, a 6 s run
    of 30 taken for a full one: verdict hunt 17). It records stopped_early, as a local run does."""
    port = free_port()
    run_dir = tmp_path / "run"
    with chat_bot("memory") as url:
        master = run_master(url, run_dir, port, "--think", "0.05", users=4, time_s="60s")
        workers = start_workers(2, port, tmp_path)
        try:
            wait_until(lambda: sum(p.stat().st_size for p in (run_dir / "journal").glob("*.jsonl")) > 4000,
                       timeout=60, what="turns in the master's journal")
            os.kill(master.pid, signal.SIGTERM)
        finally:
            done = finish_with_workers(master, workers)
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["stopped_early"]["signal"] == "SIGTERM", (meta, done.stderr[-3000:])
    assert "SIGTERM during the load" in done.stderr and meta["end"] is not None


@pytest.mark.slow
def test_sigkilled_worker_loses_only_its_in_flight_turns(tmp_path):
    port = free_port()
    run_dir = tmp_path / "run"
    bot_log = tmp_path / "bot.log"
    users = 6  # 3 per worker; the support script has bursts of 2, so at most 2 turns in flight per user
    with chat_bot("memory", log=bot_log) as url:
        master = run_master(url, run_dir, port, "--think", "0.02", users=users, time_s="8s")
        workers = start_workers(2, port, tmp_path)
        try:
            victim = workers[0]
            shard = lambda: [p for p in (run_dir / "workers").glob("*.jsonl")  # noqa: E731
                             if p.stat().st_size > 4000]
            wait_until(lambda: len(shard()) == 2, timeout=60, what="both workers journaling")
            # the victim is the worker whose pid wrote which shard: find it through /proc fds
            victim_shard = next(p for p in shard() if any(
                os.path.realpath(f"/proc/{victim.pid}/fd/{fd}") == str(p.resolve())
                for fd in os.listdir(f"/proc/{victim.pid}/fd")))
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(10)
            done = finish(master)
            workers[1].wait(30)
        finally:
            for w in workers:
                _kill_group(w)
    assert "recovered" in done.stderr or (run_dir / "journal" / victim_shard.name).read_bytes() == \
        victim_shard.read_bytes(), done.stderr
    # the master's copy of the killed worker's journal holds every line the worker wrote
    assert (run_dir / "journal" / victim_shard.name).read_bytes() == victim_shard.read_bytes()
    run = LocustRun(done, run_dir, run_dir / "locust" / "stats.json")
    records = run.records()
    journaled = {r["token"] for r in records}
    received = {line.split("]")[0].lstrip("[") for line in bot_log.read_text().splitlines()}
    assert {r["token"] for r in records if r["outcome"] == "ok"} <= received
    lost = received - journaled
    assert len(lost) <= (users // 2) * 2, sorted(lost)


@pytest.mark.parametrize("killed", [2, 1], ids=["every", "one"])
def test_a_run_whose_workers_went_missing_is_not_trusted(tmp_path, killed):
    """Both workers SIGKILLed mid-run: Locust stops the test when the last one goes missing, and the turns that
    happened pass their gates. The load generators died and cut every conversation short: exit 3, NOT TRUSTED,
    run.json's workers_lost says so (it passed, exit 0, with nothing recorded). The terminal said "verdict PASS" and
    "exit code 3: Locust's own", and run.json "pass" beside exit code 3: NOT TRUSTED is said, and recorded
    (``untrusted``). One worker of two killed: the rest PASSed, exit 0, its lost turns and journal lines unjudged
    (verdict hunt 14): NOT TRUSTED too, as a local run killed mid-load is."""
    port = free_port()
    run_dir = tmp_path / "run"
    with chat_bot("memory") as url:
        master = run_master(url, run_dir, port, "--think", "0.05", "--http-url", f"{url}/history/{{session}}",
                            "--role-field", "role", "--content-field", "content", users=4, time_s="20s")
        workers = start_workers(2, port, tmp_path)
        try:
            wait_until(lambda: len([p for p in (run_dir / "workers").glob("*.jsonl") if p.stat().st_size > 4000]) == 2,
                       timeout=60, what="both workers journaling")
            for w in workers[:killed]:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait(10)
            done = finish(master)
        finally:
            for w in workers:
                _kill_group(w)
    output = done.stdout + done.stderr
    assert done.returncode == 3, output[-3000:]
    said = "every Locust worker went missing" if killed == 2 else "1 Locust worker(s) went missing during the test: "
    assert f"NOT TRUSTED — {said}" in output and "Locust's own" not in output
    assert "run: NOT TRUSTED, exit code 3" in output.replace(str(run_dir), "run")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["workers_lost"] == {"count": killed, "all": killed == 2} and meta["exit_code"] == 3
    assert meta["untrusted"].startswith(said)
    assert '<div class="badge warn">NOT TRUSTED</div>' in (run_dir / "report.html").read_text()


@pytest.mark.slow
def test_a_web_ui_master_gives_each_test_its_own_folder_with_every_workers_shard(tmp_path):
    """Two tests started and stopped through a master's web UI: each run folder holds both workers' journal
    shards (the workers take the run folder from the master's options at each start), equal line for line
    to the workers' own copies, and Locust's totals for the test are its journal's."""
    from support_webui import locust_ui
    from test_locust_webui import assert_locust_counts_the_journal, records

    port = free_port()
    with chat_bot("memory") as url, locust_ui(tmp_path / "master", "--master", "--master-bind-host", "127.0.0.1",
                                              "--master-bind-port", port, "--host", url, "--think", "0.02") as ui:
        workers = start_workers(2, port, tmp_path)
        try:
            wait_until(lambda: ui.get("/worker-count").json()["worker_count"] == 2, what="two workers")
            folders = []
            for n in range(2):
                assert ui.swarm(user_count=4, spawn_rate=4, label=f"t{n}")["success"]
                # worker counts reach the master with their stats reports (every 3 s)
                ui.wait(lambda s: len(s["runs"]) == n + 1 and s["counts"]["turns"] >= 40, timeout=60)
                ui.stop()
                run_dir = ui.cwd / ui.status()["runs"][-1]["dir"]
                folders.append(run_dir)
                shards = sorted((run_dir / "journal").glob("*.jsonl"))
                assert len(shards) == 2, shards
                for shard in shards:
                    local = next(tmp_path.glob(f"w*/{run_dir.relative_to(ui.cwd)}/workers/{shard.name}"))
                    assert shard.read_bytes() == local.read_bytes(), shard.name
                assert {r["run"] for r in records(run_dir)} == {run_dir.name}
                assert_locust_counts_the_journal(ui, run_dir)
            assert folders[0] != folders[1]
            assert ui.quit() == 0, ui.output[-3000:]
        finally:
            for w in workers:
                _kill_group(w)
