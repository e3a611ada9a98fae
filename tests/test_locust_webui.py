"""The Locust web UI as a way to run goldfish: one test, one run folder, however it is started.

A real `locust -f locustfiles/chat.py` with its web UI, driven through the UI's own endpoints (/swarm as
the start form posts it, /stop), against the real reference stack or the test bots; screenshots of the
goldfish tab in real headless Chromium.
"""
from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys

import pytest

from conftest import wait_until
from targets import registry as state
from support_locust import CHATFILE, LOCUST, REPO, chat_bot, journal_records, quick_script
from support_refbot import refbot_stack  # noqa: F401 - fixture
from support_webui import CHROMIUM, dom, locust_ui, screenshot, template_args


records = journal_records  # one record per turn (a first turn's in-flight record superseded)


def counted(records_) -> list[dict]:
    """The journal's turns that were requests: a turn the stop interrupted fired no request event."""
    return [r for r in records_ if not (r["error"] or "").startswith("interrupted")]


def csv_aggregated(run_dir) -> int:
    with open(run_dir / "locust" / "requests.csv", newline="") as f:
        return int(next(row for row in csv.DictReader(f) if row["Name"] == "Aggregated")["Request Count"])


def ui_aggregated(ui) -> int:
    return next(row for row in ui.stats()["stats"] if row["name"] == "Aggregated")["num_requests"]


def assert_locust_counts_the_journal(ui, run_dir) -> int:
    """Locust's Aggregated request count is the journal's turn count, less the turns the stop interrupted
    (journaled as indeterminate; they fired no request event): in the CSV goldfish wrote at the stop, in
    the goldfish tab (from Locust's live stats), and on the Statistics tab (Locust caches /stats/requests
    for ~2 s, so it is read again until it shows the stopped state)."""
    journal = records(run_dir)
    sent = len(counted(journal))
    assert csv_aggregated(run_dir) == sent, (csv_aggregated(run_dir), sent, len(journal))
    assert tab_rows(ui.status())[("turns", "requests in Locust's totals")]["value"] == sent
    wait_until(lambda: ui_aggregated(ui) == sent, timeout=30, interval=0.5, what="the Statistics tab's total")
    assert {row["method"] for row in ui.stats()["stats"] if row["name"] != "Aggregated"} == {"POST"}
    return sent


RECOVERY_S = 5.0  # the audit's recovery margin after a fault (oracle audit --recovery's default)


def _quiet_since(timeline, seconds: float) -> bool:
    """The fault recovered more than ``seconds`` ago: turns after its recovery margin are quiet, so the errors gate
    has turns to measure (stopped while every turn was under the fault or its margin, the run FAILed 'errors: not
    measured' on a busy machine)."""
    import time

    recovered = [json.loads(line)["time"] for line in timeline.read_text().splitlines() if '"recover"' in line]
    return bool(recovered) and time.time() > recovered[-1] + seconds


def tab_rows(status) -> dict:
    return {(r["section"], r["item"]): r for r in status["rows"]}


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed: no screenshots")
def test_two_runs_in_one_ui_session_make_two_complete_run_folders(tmp_path, refbot_stack):  # noqa: F811
    stack = refbot_stack(replicas=2, mode="correct", think_ms=0, jitter_ms=5)
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {id: k, kind: kill, target: bot-2, at: 1s, duration: 3s}\n")
    profile = tmp_path / "chromium"
    with locust_ui(tmp_path / "ui", "--host", stack.url, "--chaos", plan, "--stack-state",
                   state.state_path(stack.dir), "--store-url", stack.state["store_url"], "--settle", "0.5",
                   "--script", quick_script(tmp_path), "--think", "0.02", "--audit-every", "1s") as ui:
        assert ui.status()["runs"] == [] and not (ui.cwd / "results").exists()  # nothing before a test
        runs = []
        for n, label in enumerate(("first", "second")):
            assert ui.swarm(user_count=6, spawn_rate=6, label=label)["success"]
            status = ui.wait(lambda s: s["runs"] and s["runs"][-1]["phase"] == "load" and len(s["runs"]) == n + 1)
            run_dir = ui.cwd / status["runs"][-1]["dir"]
            timeline = run_dir / "chaos.jsonl"
            ui.wait(lambda s: timeline.exists() and '"apply"' in timeline.read_text(), what="the fault applied")
            if n == 0:  # the tab while the fault is in force
                shot = screenshot(f"{ui.url}/?tab=goldfish", tmp_path / "goldfish-tab-during.png", profile)
                rows = tab_rows(ui.status())
                fault = rows[("chaos", "k#0")]
                assert fault["value"] == "kill on bot-2" and "applied +" in fault["detail"], fault
                assert rows[("verdict", "when the test stops")] and rows[("run", "folder")]["value"] == run_dir.name
            ui.wait(lambda s: s["counts"]["turns"] >= 150 and _quiet_since(timeline, RECOVERY_S + 1.5), timeout=90,
                    what="turns on both sides of the fault and its recovery margin")
            ui.wait(lambda s: (tab_rows(s).get(("rolling audit", "sessions judged")) or {}).get("value", 0) > 0,
                    timeout=60, what="the rolling audit's first judgements of this test, in the tab")
            assert ui.stop()["success"]  # returns once healed, audited, reported and judged
            status = ui.status()
            runs.append(run_dir)
            assert status["runs"][-1]["verdict"] == "pass" and status["runs"][-1]["exit_code"] == 0, status["rows"]
            assert_locust_counts_the_journal(ui, run_dir)
            journal = records(run_dir)
            rows = tab_rows(status)
            assert rows[("turns", "journaled")]["value"] == len(journal)
            assert rows[("probes", "answered")]["value"] == sum(r["verdict"] is not None for r in journal)
            assert rows[("verdict", "result")]["value"] == "PASS"
            if n == 0:  # the tab after the stop: the verdict, its rules and the report
                shot = screenshot(f"{ui.url}/?tab=goldfish", tmp_path / "goldfish-tab-after.png", profile,
                                  size="1400,2200")
                page = dom(f"{ui.url}/?tab=goldfish", profile)
                assert "probe_amnesia" in page and "report.html" in page and "healed" in page, page[-3000:]
            report = ui.get(status["runs"][-1]["report"])
            assert report.status_code == 200 and "<h1>goldfish · " + label in report.text
            assert 'href="locust/report.html"' in report.text
            assert ui.get(status["runs"][-1]["report"].replace("report.html", "locust/report.html")).status_code == 200
        assert ui.quit() == 0, ui.output[-3000:]
    assert shot.exists()
    first, second = runs
    assert first != second and first.name.endswith("-first") and second.name.endswith("-second")
    for run_dir, label in zip(runs, ("first", "second")):
        meta = json.loads((run_dir / "run.json").read_text())
        assert (meta["label"], meta["phase"], meta["verdict"], meta["exit_code"]) == (label, "done", "pass", 0)
        assert {r["run"] for r in records(run_dir)} == {run_dir.name}  # a fresh journal each
        events = [json.loads(line)["event"] for line in (run_dir / "chaos.jsonl").read_text().splitlines()]
        assert events == ["apply", "recover"], events  # the plan re-armed from its beginning
        summary = json.loads((run_dir / "audit" / "summary.json").read_text())
        assert summary["turns"]["total"] == len(records(run_dir)) and summary["verdict"]["result"] == "pass"
        assert summary["rolling"]["reused"] > 0  # each test's own rolling audit, its judgements kept
        assert (run_dir / "report.html").exists() and (run_dir / "locust" / "report.html").exists()
        assert meta["start"] >= json.loads((first / "run.json").read_text())["start"]
    assert json.loads((second / "run.json").read_text())["start"] > json.loads((first / "run.json").read_text())["end"]
    assert not set(r["session"] for r in records(first)) & set(r["session"] for r in records(second))


def test_a_failed_run_is_not_masked_by_a_later_pass_and_bad_form_values_start_nothing(tmp_path):
    """Run 1 (strict) fails on amnesia, run 2 (the form sets --gate probe_amnesia=off) passes: the process
    exits 1, naming the first run that did not pass. A start with a bad option value is refused."""
    with chat_bot("forget") as url, locust_ui(tmp_path / "ui", "--host", url, "--script",
                                              quick_script(tmp_path)) as ui:
        refused = ui.swarm(user_count=3, spawn_rate=3, think="soon")
        assert refused["success"] is False and "--think: 'soon'" in refused["message"], refused
        assert ui.status()["runs"] == []
        verdicts = []
        for gate in ("strict", "probe_amnesia=off"):
            assert ui.swarm(user_count=3, spawn_rate=3, gate=gate)["success"]
            ui.wait(lambda s: s["runs"] and s["runs"][-1]["phase"] == "load" and s["counts"]["probes_answered"] >= 5)
            ui.stop()
            last = ui.status()["runs"][-1]
            verdicts.append((last["verdict"], last["exit_code"]))
            assert_locust_counts_the_journal(ui, ui.cwd / last["dir"])
        assert verdicts == [("fail", 1), ("pass", 0)]
        dirs = [run["dir"] for run in ui.status()["runs"]]
        assert ui.quit() == 1, ui.output[-3000:]
    assert f"exit code 1: run {dirs[0]} (fail, exit code 1), the first of the 1 of 2 runs that did not pass" in ui.output
    assert sorted(str(p.relative_to(ui.cwd)) for p in (ui.cwd / "results").iterdir()) == sorted(dirs)


def test_reset_stats_keeps_the_tests_user_exceptions(tmp_path):
    """The Reset Stats button empties Locust's dict of user exceptions. A test whose users raised early, reset after
    ramp-up as people do, PASSed with exit 0 (verdict hunt 16): goldfish keeps them, so it is NOT TRUSTED, exit 3.
    The user count edited mid-test is recorded in run.json's load (it said the first count: compare's like for like
    read it)."""
    locustfile = tmp_path / "broken_early.py"
    locustfile.write_text("from locust import task\n"
                          "from locustfiles import hooks  # noqa: F401\n"
                          "from locustfiles.conversation import ChatUser\n"
                          "RAISED = []\n\n\n"
                          "class BrokenEarly(ChatUser):\n"
                          "    @task\n"
                          "    def conversation(self):\n"
                          "        super().conversation()\n"
                          "        if len(RAISED) < 2:  # a bug that bites early in the test only\n"
                          "            RAISED.append(1)\n"
                          "            raise RuntimeError('a bug after the conversation')\n")
    with chat_bot("memory") as url, locust_ui(tmp_path / "ui", "--host", url, "--script", quick_script(tmp_path),
                                              "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                                              "--content-field", "content", "--settle", "0",
                                              locustfile=locustfile) as ui:
        assert ui.swarm(user_count=3, spawn_rate=3)["success"]
        wait_until(lambda: sum(e["count"] for e in ui.exceptions()) == 2, timeout=60, what="both exceptions")
        ui.reset_stats()
        assert ui.exceptions() == []
        ui.wait(lambda s: s["runs"] and s["counts"]["probes_answered"] >= 3)
        assert ui.swarm(user_count=2, spawn_rate=2)["success"]  # the form's edit of a running test's users
        run_json = ui.cwd / ui.status()["runs"][-1]["dir"] / "run.json"
        wait_until(lambda: json.loads(run_json.read_text())["load"].get("users_changed") == [2], timeout=60,
                   what="run.json's load to record the new user count")
        ui.stop()
        last = ui.status()["runs"][-1]
        assert last["exit_code"] == 3 and last["untrusted"].startswith("Locust users raised"), ui.output[-3000:]
        meta = json.loads((ui.cwd / last["dir"] / "run.json").read_text())
        assert meta["user_exceptions"]["count"] == 2 and "a bug after the conversation" in meta["user_exceptions"]["first"]
        assert ui.quit() == 3
    assert "NOT TRUSTED — Locust users raised 2 exception(s)" in ui.output, ui.output[-3000:]


def test_quitting_without_a_test_leaves_nothing_and_exits_0(tmp_path):
    with chat_bot("memory") as url, locust_ui(tmp_path / "ui", "--host", url) as ui:
        args = template_args(ui.get("/").text)
        assert [t["key"] for t in args["extended_tabs"]] == ["goldfish"]
        # the start form: goldfish's options in a sensible order (not alphabetical), the store URL masked
        form = list(args["extra_options"])
        assert form[:6] == ["label", "script", "think", "chaos", "chaos_backend", "stack_state"], form
        assert form.index("gate") < form.index("store_url") < form.index("chat_path") < form.index("timeout")
        assert args["extra_options"]["store_url"]["is_secret"] is True
        assert not {"run_dir", "header", "step_users", "max_probe_amnesia"} & set(form)
        assert ui.quit(signal.SIGINT) == 0, ui.output[-3000:]
    assert not (tmp_path / "ui" / "results").exists()
    assert "Traceback" not in ui.output


def test_help_lists_goldfishs_options_in_their_groups_and_tags_are_refused_in_one_line(tmp_path):
    """Locust prints ``--help`` before it imports a locustfile, so ``python -m locustfiles`` registers
    goldfish's options first: its --help is Locust's, with goldfish's groups after Locust's own."""
    shown = subprocess.run([sys.executable, "-m", "locustfiles", "--help"], cwd=REPO, capture_output=True, text=True,
                           timeout=120).stdout
    assert "Web UI options:" in shown and shown.index("Web UI options:") < shown.index("goldfish: the run:")
    groups = ["goldfish: the run:", "goldfish: the chat API contract:", "goldfish: store and audit:",
              "goldfish: chaos:", "goldfish: gates:", "goldfish: load shape:"]
    at = [shown.index(g) for g in groups]
    assert at == sorted(at), shown[-4000:]
    for option, group in (("--chat-path", 1), ("--replica-header", 1), ("--store-url", 2), ("--chaos-backend", 3),
                          ("--gate", 4), ("--step-users", 5), ("--run-dir", 0)):
        where = shown.index(f"  {option} ")
        assert at[group] < where and (group + 1 == len(at) or where < at[group + 1]), option
    with chat_bot("memory", log=tmp_path / "bot.log") as url:
        done = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "-u", "1", "-t", "3s", "--host", url,
                               "-T", "probe"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "goldfish: error: -T/--tags and -E/--exclude-tags choose Locust tasks" in done.stderr
    assert "Traceback" not in done.stderr and "No tasks defined" not in done.stderr
    assert not (tmp_path / "results").exists() and (tmp_path / "bot.log").read_text() == ""  # no load


CHAOS_ROWS = """
import json, sys
from types import SimpleNamespace
from locustfiles.webui import _chaos_rows
settings = SimpleNamespace(chaos="plan.yaml", chaos_backend="local", run_dir=sys.argv[1])
out = []
_chaos_rows(lambda section, item, value="", detail="": out.append([item, value, detail]),
            SimpleNamespace(settings=settings, controller=None, started=100.0))
print(json.dumps(out))
"""


def chaos_rows(run_dir) -> list[tuple]:
    """The goldfish tab's chaos rows for a run folder (in a process of their own: importing Locust patches
    this one with gevent)."""
    done = subprocess.run([sys.executable, "-c", CHAOS_ROWS, str(run_dir)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(row) for row in json.loads(done.stdout.splitlines()[-1])]


def test_the_chaos_rows_pair_faults_as_the_audit_does_and_name_damaged_lines(tmp_path):
    """The tab reads chaos.jsonl through the audit's pairing (oracle.timeline.load_faults): a damaged line is a
    problem row naming file and line, never an error page; a FIFO where the timeline should be is one row."""
    import os

    apply = {"fault": "k#0", "kind": "kill", "target": "bot", "instance": "bot-2", "event": "apply", "outcome": "ok"}
    lines = [{**apply, "time": 110.0}, {**apply, "event": "recover", "time": 113.0, "via": "duration"},
             {**apply, "fault": "p#0", "kind": "pause", "time": 120.0},
             {**apply, "fault": "x#0", "time": 121.0, "outcome": "error", "error": "no such instance"},
             [1], {**apply, "time": "noon"}]
    (tmp_path / "chaos.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = chaos_rows(tmp_path)
    assert out[1] == ("in force now", "pause on bot-2", "")
    assert ("k#0", "kill on bot-2", "applied +10.0 s · healed +13.0 s (duration)") in out
    assert ("p#0", "pause on bot-2", "applied +20.0 s · in force") in out
    problems = [detail for item, _, detail in out if item == "problem"]
    assert f"{tmp_path / 'chaos.jsonl'}:5: not a JSON object" in problems[0], problems
    assert f"{tmp_path / 'chaos.jsonl'}:6: time 'noon' is not a finite number" in problems[1], problems
    assert "fault x#0 (kill on bot-2) failed to apply: no such instance" in problems[2], problems
    (tmp_path / "chaos.jsonl").unlink()
    os.mkfifo(tmp_path / "chaos.jsonl")
    assert chaos_rows(tmp_path)[-1] == ("problem", "", f"cannot read {tmp_path / 'chaos.jsonl'}: not a regular "
                                                       "file but a FIFO")


def test_a_start_during_the_previous_stop_keeps_that_runs_exit_code(tmp_path):
    """Run 1 passes its gates (off) but requests failed, so Locust's --exit-code-on-error 7 is its code. Run 2
    is started while run 1 settles: Locust clears its counters for run 2 before goldfish's test_start waits for
    run 1 to finish, and run 1 came out 0 (the process too). Run 1 keeps the counters of its own test."""
    import threading

    with chat_bot("flaky") as url, locust_ui(tmp_path / "ui", "--host", url, "--script", quick_script(tmp_path),
                                             "--gate", "off", "--exit-code-on-error", "7", "--settle", "4",
                                             "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                                             "--content-field", "content") as ui:
        assert ui.swarm(user_count=3, spawn_rate=3)["success"]
        ui.wait(lambda s: s["runs"] and s["runs"][-1]["phase"] == "load" and s["counts"]["turns"] >= 10)
        stopping = threading.Thread(target=ui.stop)
        stopping.start()
        ui.wait(lambda s: s["runs"][-1]["phase"] == "settle")
        assert ui.swarm(user_count=1, spawn_rate=1)["success"]  # waits for run 1's stop to finish
        stopping.join(120)
        ui.wait(lambda s: len(s["runs"]) == 2 and s["runs"][-1]["phase"] == "load")
        ui.stop()
        first = ui.status()["runs"][0]
        assert (first["verdict"], first["exit_code"]) == ("pass", 7), first
        assert json.loads((ui.cwd / first["dir"] / "run.json").read_text())["exit_code"] == 7
        assert ui.quit() == 7, ui.output[-3000:]
