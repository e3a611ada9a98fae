"""Bad input found by the seventh input hunt (/tmp/hunt-input7):

- a script fact holding the word "is" (`plant: name is bob`) was taken; its plant sentence "My name is bob is
  0534-V0WX." reads as the fact `name` (the grammar ends a fact at its first " is "), so a correct bot answered
  every probe "I don't know" and the run FAILed. Now refused before any load, exit 2, naming the file, the line
  and the fact (locustfiles/script.py ambiguous_fact);
- `--run-dir` with a line break or an escape sequence was printed raw by Locust's end-of-run lines and `oracle
  audit`, forging a `goldfish: PASS, exit code 0` line under a failed run. Refused like `--label` (one function,
  locustfiles/options.py check_line); `--session-header ''` and `--replica-header ''` (an unset variable: left out,
  each is the default) are refused as the other empty options are;
- a chaos plan some of whose faults fell after the load's end passed without a word (only a plan that applied
  none was warned about). The audit's warnings now name those never applied, when each was due and when the load
  ended (oracle/timeline.py idle_plan).
"""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from support_locust import chat_bot, run_locust
from test_bad_input_round6_options import _settings, parser  # noqa: F401 - the fixture

pytestmark = [pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

FORGED = "\ngoldfish: PASS, exit code 0 \x1b[32mGREEN"


# ---- A. a script fact holding the word "is" ------------------------------------------------------------------
@pytest.mark.parametrize("fact, read", [("name is bob", "name"), ("name is", "name"), ("what is my", "what"),
                                        ("a b is c", "a b")])
def test_a_fact_the_plant_sentence_cannot_read_back_is_refused(fact, read):
    from locustfiles.script import ScriptError, parse_script

    with pytest.raises(ScriptError) as caught:
        parse_script(f"steps:\n  - chatter\n  - plant: {fact}\n  - probe: {fact}\n", "my.yaml")
    said = str(caught.value)
    assert said.startswith("my.yaml:3: steps[1].plant: ") and repr(fact) in said, said
    assert "ambiguous" in said and f"reads as fact {read!r}" in said, said


@pytest.mark.parametrize("fact", ["is open", "island", "this", "my order", "order number"])
def test_a_fact_the_plant_sentence_reads_back_whole_is_taken(fact):
    """The grammar's fact starts after "My ": a first word "is", and "is" inside a word, read back whole."""
    from locustfiles.script import parse_script

    script = parse_script(f"steps:\n  - plant: {fact}\n  - probe: {fact}\n", "my.yaml")
    assert [s.fact for s in script.steps] == [fact, fact]


def test_a_script_with_an_ambiguous_fact_stops_locust_before_any_load(tmp_path):
    """The hunt's repro, against the reference bot (correct mode, which reads the plant as the fact `name`):
    every probe was amnesia, FAIL exit 1 of a correct bot. Now exit 2 naming the script, its line and the fact,
    and nothing is sent."""
    from support_refbot import running_stack

    script = tmp_path / "isfact.yaml"
    script.write_text("steps:\n  - plant: name is bob\n  - probe: name is bob\n")
    run_dir = tmp_path / "run"
    with running_stack(tmp_path, replicas=1, think_ms=0) as stack:
        done = run_locust(stack.url, run_dir, "--script", script, "--no-audit", users=2, rate=2, time_s="3s",
                          timeout=90)
    assert done.returncode == 2, done.output[-3000:]
    assert f"{script}:2: steps[0].plant: fact 'name is bob'" in done.output, done.output[-3000:]
    assert "ambiguous" in done.output
    assert not (run_dir / "journal").exists() and done.count() == 0


# ---- B. --run-dir with control characters; --session-header '' and --replica-header '' ---------------------------
@pytest.mark.parametrize("run_dir", ["results/x" + FORGED, "results/x\x1b[2J", "results/x\r", "results/x\u2028y"],
                         ids=["forged-line", "escape", "cr", "line-separator"])
def test_a_run_dir_with_a_control_character_is_refused(parser, capsys, run_dir):
    settings, code, said = _settings(parser, ["--run-dir", run_dir], capsys)
    assert code == 2 and "--run-dir" in said and "control character" in said, (settings, said)
    assert "\n" not in said and "\x1b" not in said  # the message shows it escaped


def test_a_printable_run_dir_is_taken(parser, capsys):
    for run_dir in ("results/v1.4.2 night", "results/ünï-β"):
        settings, code, said = _settings(parser, ["--run-dir", run_dir], capsys)
        assert code == 0 and settings.run_dir == run_dir, said


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
@pytest.mark.parametrize("option, left_out", [("--session-header", "--session-field says"),
                                              ("--replica-header", "no replica is journaled")])
def test_an_empty_session_or_replica_header_is_refused_naming_it(parser, capsys, option, value, left_out):
    """Each was silently the option left out (an unset variable: `--replica-header "$REPLICA_HEADER"`)."""
    settings, code, said = _settings(parser, [option, value], capsys)
    assert code == 2 and option in said and "empty (an unset variable?)" in said and left_out in said, said
    settings, code, said = _settings(parser, [option, "X-Refbot-Replica"], capsys)
    assert code == 0, said


def test_a_run_dir_that_forges_a_verdict_line_stops_a_real_locust_run(tmp_path):
    """The hunt's repro: the end-of-run lines printed the folder raw, a `goldfish: PASS, exit code 0` line of its
    own under a run that failed. Now exit 2 before any load, and no such line, no escape, no folder."""
    run_dir = Path(str(tmp_path / "evil") + FORGED)
    with chat_bot("forget") as url:
        done = run_locust(url, tmp_path / "json", "--run-dir", run_dir, "--no-audit", users=2, rate=2, time_s="3s",
                          timeout=90)
    assert done.returncode == 2, done.output[-3000:]
    assert "--run-dir" in done.output and "control character" in done.output, done.output[-3000:]
    assert not any(line.startswith("goldfish: PASS") for line in done.output.splitlines()), done.output[-3000:]
    assert "\x1b[32m" not in done.output and not run_dir.exists()


# ---- C. a chaos plan some of whose faults fall after the load's end ------------------------------------------
PARTLY_LATE = textwrap.dedent("""\
    faults:
      - {id: early, kind: pause, target: sleeper, at: 1s, duration: 1s}
      - {id: late, kind: pause, target: sleeper, at: 60s, duration: 2s}
      - {id: late2, kind: pause, target: sleeper, at: 90s, duration: 5s}
    """)


def test_a_plan_whose_later_faults_never_applied_is_said_beside_the_verdict(tmp_path):
    """The hunt's repro: 2 of a plan's 3 faults due after a short run's end, PASS and not a word of it (a plan
    that applied none is warned about). Now the audit's warnings name them, when they were due and when the load
    ended: at the end of the Locust run and in summary.json's problems."""
    sleeper = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        (tmp_path / "sleeper.pid").write_text(str(sleeper.pid))
        targets = tmp_path / "targets.yaml"
        targets.write_text("targets:\n  sleeper: {pid_file: sleeper.pid}\n")
        plan = tmp_path / "partial.yaml"
        plan.write_text(PARTLY_LATE)
        run_dir = tmp_path / "run"
        with chat_bot("memory") as url:
            done = run_locust(url, run_dir, "--chaos", plan, "--chaos-backend", "local", "--stack-state", targets,
                              "--http-url", url + "/history/{session}", "--role-field", "role", "--content-field",
                              "content", "--settle", "0", users=2, rate=2, time_s="4s", timeout=120)
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert done.returncode == 0, done.output[-4000:]
    applied = [json.loads(line)["fault"] for line in (run_dir / "chaos.jsonl").read_text().splitlines()
               if json.loads(line)["event"] == "apply"]
    assert applied == ["early#0"], applied
    said = f"chaos: 2 of the 3 fault occurrence(s) of the plan {plan} never applied: late#0 (pause) due at +60s, " \
           "late2#0 (pause) due at +90s after the test started at "
    assert said in done.output, done.output[-4000:]
    problems = json.loads((run_dir / "audit" / "summary.json").read_text())["problems"]
    (warning,) = [p for p in problems if p.startswith(said)]
    assert "but the load ended at +" in warning and "says nothing of surviving them" in warning, warning
    ended = float(warning.split("the load ended at +")[1].split("s,")[0])
    assert 3 <= ended <= 15, warning  # -t 4s


def test_a_plan_that_applied_every_fault_is_not_warned_about(tmp_path):
    """Offline, on a run folder as Locust leaves it: every occurrence applied (or skipped, which is said
    elsewhere) gives no warning; one with no apply on the timeline does, by id."""
    from oracle.timeline import idle_plan, load_faults

    plan = "faults:\n  - {id: a, kind: pause, target: bot, at: 1s, duration: 1s}\n" \
           "  - {id: b, kind: kill, target: bot, every: 2s, until: 7s, duration: 1s}\n"
    start = 1_800_000_000.0
    (tmp_path / "run.json").write_text(json.dumps({"run": "run", "plan": "p.yaml", "plan_text": plan,
                                                   "start": start, "end": None}))
    (tmp_path / "journal").mkdir()
    (tmp_path / "journal" / "local-1.jsonl").write_text(
        json.dumps({"session": "s", "turn": 0, "sent": start + 9.5, "received": start + 9.6}) + "\n")

    def timeline(ids):  # b#1 is skipped (an apply with outcome error, no recover), the others applied and healed
        events = []
        for i, f in enumerate(ids):
            events += [(f, "apply", "error" if f == "b#1" else "ok", i)] + ([] if f == "b#1" else
                                                                           [(f, "recover", "ok", i + 0.5)])
        (tmp_path / "chaos.jsonl").write_text("".join(
            json.dumps({"fault": f, "kind": "kill", "event": e, "time": start + 1 + t, "outcome": o}) + "\n"
            for f, e, o, t in events))
        return idle_plan(tmp_path, load_faults(tmp_path), start + 9.6)

    assert timeline(["a#0", "b#0", "b#1", "b#2"]) is None  # b#1 skipped: an apply with outcome error
    said = timeline(["a#0", "b#0"])
    assert said.startswith("chaos: 2 of the 4 fault occurrence(s) of the plan p.yaml never applied: b#1 to #2 "
                           "(kill, 2 occurrences) due from +4s to +6s after the test started at "), said
    assert "before the load ended at +9.6s" in said and "yet the timeline has no record of them" in said, said
