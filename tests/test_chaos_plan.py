"""The plan language: times, counts, schedules, and a clear file:line:field error for every malformed form."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos.plan import Count, PlanError, load_plan, parse_plan, parse_time

PLANS = Path(__file__).resolve().parents[1] / "chaos" / "plans"


@pytest.mark.parametrize("text, seconds", [("20s", 20), ("500ms", 0.5), ("2m", 120), (3, 3), (1.5, 1.5),
                                           ("0.25s", 0.25), ("7", 7), ("1.5m", 90), (" 10 s ", 10),
                                           ("1m30s", 90), ("2h", 7200), ("1h5m", 3900)])
def test_times_in_ms_s_m_and_plain_seconds(text, seconds):
    assert parse_time(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["-1s", "soon", "", True, "1e3s", "s", "10 sec", "30s1m", "nan", "inf", "31d", 1e9])
def test_bad_times_are_refused(bad):
    with pytest.raises(ValueError, match="duration"):
        parse_time(bad)


@pytest.mark.parametrize("value, available, hits", [(1, 5, 1), (3, 5, 3), ("50%", 5, 3), ("1%", 10, 1),
                                                     ("all", 4, 4), ("100%", 3, 3)])
def test_count_forms(value, available, hits):
    assert Count.parse(value).of(available) == hits


def test_schedule_at_and_every_with_start_until():
    plan = parse_plan("""
faults:
  - {id: once, kind: kill, target: bot, at: 20s}
  - {id: rep, kind: pause, target: bot, every: 30s, start: 5s, until: 1m, duration: 2s}
  - {id: dflt, kind: lb-drop, target: bot, every: 1m, until: 150s}
""")
    assert [(t, f.id, k) for t, f, k in plan.schedule()] == [
        (5, "rep", 0), (20, "once", 0), (35, "rep", 1), (60, "dflt", 0), (120, "dflt", 1)]
    assert plan.horizon == 120


def test_a_fault_past_the_plan_duration_makes_the_plan_end_later():
    """`chaos validate` said "ends at 10s" of a plan whose 20 s pause starts at 5 s: the fault runs all the same
    (the duration bounds only 'every' repeats), as the dry run and `chaos run` showed."""
    plan = parse_plan("""
duration: 10s
faults:
  - {id: long, kind: pause, target: bot, at: 5s, duration: 20s}
  - {id: rep, kind: kill, target: bot, every: 4s}
""")
    assert [(t, f.id) for t, f, _ in plan.schedule()] == [(4, "rep"), (5, "long"), (8, "rep")]
    assert plan.horizon == 25
    assert parse_plan("duration: 1m\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n").horizon == 60


def test_defaults_ids_and_kind_params():
    plan = parse_plan("faults:\n  - {kind: restart, target: bot, at: 1s}\n  - {kind: redis-restart, target: redis, at: 2s}\n")
    assert [f.id for f in plan.faults] == ["f1", "f2"]
    assert plan.faults[0].params == {"grace": 10.0}
    assert plan.faults[1].params == {"mode": "crash"}
    assert plan.faults[0].occurrence(3).id == "f1#3"


def test_numbers_yaml_reads_as_text_and_times_with_units_are_taken():
    """YAML 1.1 reads 1e3 and 1e-1 (no dot) as text: `grace: 1e3` was "must be float, got '1e3'"; `grace: 5s` was
    refused while `lag: 5s` was taken. A kill's `duration: 0` keeps its meaning: started again at once."""
    plan = parse_plan("""
faults:
  - {kind: restart, target: bot, at: 1s, grace: 1e3}
  - {kind: restart, target: bot, at: 2s, grace: 5s}
  - {kind: rolling-restart, target: bot, at: 3s, release: v2, pause: 2m}
  - {kind: toxic, target: p, at: 4s, duration: 1s, toxic: latency, latency: 1e3, jitter: 250ms, toxicity: 1e-1}
  - {kind: toxic, target: p, at: 5s, duration: 1s, toxic: reset_peer, timeout: 1s}
  - {kind: redis-failover, target: redis, at: 6s, mode: lossy, lag: 1.5s}
  - {kind: kill, target: bot, at: 7s, duration: 0}
""")
    assert [f.params for f in plan.faults] == [
        {"grace": 1000.0}, {"grace": 5.0}, {"release": "v2", "pause": 120.0},
        {"toxic": "latency", "latency": 1000, "jitter": 250, "toxicity": 0.1, "stream": "downstream"},
        {"toxic": "reset_peer", "timeout": 1000, "stream": "downstream", "toxicity": 1.0},
        {"mode": "lossy", "lag": 1.5}, {}]
    assert plan.faults[-1].duration == 0


def test_bare_list_and_plan_duration_bound_every():
    plan = parse_plan("duration: 10s\nfaults:\n  - {kind: lb-drop, target: bot, every: 3s}\n")
    assert [t for t, _, _ in plan.schedule()] == [3, 6, 9]
    assert parse_plan("- {kind: kill, target: bot, at: 1s}").faults[0].kind == "kill"


MALFORMED = [
    ("faults: [{kind: kill, target: bot, at: 1s}", "p.yaml:1: not valid YAML"),
    ("", "the plan is empty"),
    ("just a string", "p.yaml:1: the plan must be a mapping"),
    ("name: x\n", "p.yaml:1: faults: missing"),
    ("faults: {kind: kill}\n", "p.yaml:1: faults: must be a list"),
    ("faults: []\n", "p.yaml:1: faults: the list is empty"),
    ("faults:\n  - kill\n", "p.yaml:2: faults[0]: each fault must be a mapping"),
    ("faults:\n  - target: bot\n    at: 1s\n", "p.yaml:2: kind: missing"),
    ("faults:\n  - kind: explode\n    target: bot\n    at: 1s\n", "p.yaml:2: kind: unknown fault kind 'explode'"),
    ("faults:\n  - kind: kill\n    at: 1s\n", "p.yaml:2: target: missing"),
    ("faults:\n  - kind: kill\n    target: [a]\n    at: 1s\n", "p.yaml:3: target: must be a non-empty name"),
    ("faults:\n  - kind: kill\n    target: bot\n", "p.yaml:2: at: missing"),
    ("faults:\n  - kind: kill\n    target: bot\n    at: 1s\n    every: 2s\n", "p.yaml:5: every: give either 'at'"),
    ("faults:\n  - kind: kill\n    target: bot\n    at: soon\n", "p.yaml:4: at: 'soon' is not a duration"),
    ("faults:\n  - kind: kill\n    target: bot\n    at: 1s\n    until: 5s\n", "p.yaml:5: until: only goes with 'every'"),
    ("faults:\n  - kind: kill\n    target: bot\n    every: 0s\n    until: 5s\n", "p.yaml:4: every: must be > 0"),
    ("faults:\n  - kind: kill\n    target: bot\n    every: 5s\n", "p.yaml:4: every: repeats forever"),
    ("faults:\n  - kind: kill\n    target: bot\n    every: 5s\n    start: 10s\n    until: 8s\n",
     "p.yaml:6: until: must be after start"),
    ("faults:\n  - kind: pause\n    target: bot\n    at: 1s\n", "p.yaml:2: duration: missing"),
    ("faults:\n  - kind: lb-drop\n    target: bot\n    at: 1s\n    duration: 2s\n", "p.yaml:5: duration: a lb-drop fault is instant"),
    ("faults:\n  - kind: pause\n    target: bot\n    every: 2s\n    until: 9s\n    duration: 3s\n",
     "p.yaml:6: duration: 3s is not shorter than every 2s"),
    ("faults:\n  - kind: kill\n    target: bot\n    at: 1s\n    count: 0\n", "p.yaml:5: count: count must be >= 1"),
    ("faults:\n  - kind: kill\n    target: bot\n    at: 1s\n    count: 150%\n", "p.yaml:5: count: count must be"),
    ("faults:\n  - kind: kill\n    target: bot\n    at: 1s\n    count: many\n", "p.yaml:5: count:"),
    ("faults:\n  - kind: rolling-restart\n    target: bot\n    at: 1s\n    release: v2\n    count: 1\n",
     "p.yaml:6: count: a rolling-restart goes through every instance"),
    ("faults:\n  - kind: rolling-restart\n    target: bot\n    at: 1s\n", "p.yaml:2: release: missing: required"),
    ("faults:\n  - kind: kill\n    target: bot\n    at: 1s\n    signal: 9\n", "p.yaml:5: signal: unknown field for kind kill"),
    ("faults:\n  - kind: restart\n    target: bot\n    at: 1s\n    grace: soon\n",
     "p.yaml:5: grace: must be float (seconds, or a time such as 5s), got 'soon'"),
    ("faults:\n  - kind: redis-restart\n    target: redis\n    at: 1s\n    mode: gentle\n",
     "p.yaml:5: mode: must be one of crash, shutdown"),
    ("faults:\n  - kind: toxic\n    target: redis\n    at: 1s\n    duration: 1s\n    toxic: bandwidth\n",
     "p.yaml:6: toxic: must be one of latency, reset_peer, timeout"),
    ("faults:\n  - {id: a, kind: kill, target: bot, at: 1s}\n  - {id: a, kind: kill, target: bot, at: 2s}\n",
     "p.yaml:3: id: duplicate fault id 'a' (first at line 2)"),
    ("faults:\n  - {id: 'a b', kind: kill, target: bot, at: 1s}\n", "p.yaml:2: id: must be letters"),
    ("faults:\n  - kind: kill\n    kind: pause\n    target: bot\n    at: 1s\n", "p.yaml:3: kind: given twice"),
    ("faultz: []\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n", "p.yaml:1: faultz: unknown plan key"),
    ("max_concurrent: 0\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n", "p.yaml:1: max_concurrent: must be"),
    ("max_blast: lots\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n", "p.yaml:1: max_blast:"),
    ("duration: forever\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n", "p.yaml:1: duration: 'forever' is not a duration"),
    ("toxiproxy: localhost:8474\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n", "p.yaml:1: toxiproxy: must be an http"),
    # round 4: what was silently dropped, never happened, did nothing, or was shown otherwise than written
    ('toxiproxy: "http://"\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n',
     "p.yaml:1: toxiproxy: must be an http(s) URL with a host"),
    ("faults:\n  - {kind: toxic, target: p, at: 1s, duration: 1s, toxic: reset_peer, latency: 100}\n",
     "p.yaml:2: latency: a toxic with toxic: reset_peer does not take it (it takes: stream, timeout, toxic, toxicity)"),
    ("faults:\n  - kind: toxic\n    target: p\n    at: 1s\n    duration: 1s\n    toxic: latency\n    latency: 100\n"
     "    timeout: 5000\n", "p.yaml:8: timeout: a toxic with toxic: latency does not take it (it takes: jitter, latency,"),
    ("faults:\n  - {kind: redis-failover, target: redis, at: 1s, lag: 30}\n",
     "p.yaml:2: lag: a redis-failover with mode: sentinel does not take it (it takes: mode)"),
    ('faults:\n  - {kind: rolling-restart, target: bot, at: 1s, release: "  "}\n', "p.yaml:2: release: must not be blank"),
    ("faults:\n  - {kind: pause, target: bot, at: 1s, duration: 0}\n", "p.yaml:2: duration: must be > 0: a pause of 0s"),
    ("faults:\n  - {kind: redis-stall, target: redis, at: 1s, duration: 0s}\n", "duration: must be > 0: a redis-stall"),
    ("faults:\n  - {kind: lb-disable, target: bot, at: 1s, duration: 0ms}\n", "duration: must be > 0: a lb-disable"),
    ("faults:\n  - {kind: toxic, target: p, at: 1s, duration: 0, toxic: latency, latency: 5}\n", "a toxic of 0s"),
    ("faults:\n  - {kind: rolling-restart, target: bot, at: 1s, release: yes}\n",
     "p.yaml:2: release: must be str, got True (YAML reads the file's yes as a boolean)"),
    ("max_concurrent: on\nfaults:\n  - {kind: kill, target: bot, at: 1s}\n",
     "p.yaml:1: max_concurrent: must be a whole number >= 1, got True (YAML reads the file's on as a boolean)"),
    ("faults:\n  - {kind: toxic, target: p, at: 1s, duration: 1s, toxic: latency, toxicity: lots}\n",
     "p.yaml:2: toxicity: must be float, got 'lots'"),
    ("duration: 10s\nfaults:\n  - {kind: kill, target: bot, every: 2s, until: 20s}\n", "p.yaml:3: until: 20s is after the plan duration"),
    ("max_concurrent: 1\nfaults:\n  - {kind: pause, target: bot-1, at: 1s, duration: 5s}\n"
     "  - {kind: pause, target: bot-2, at: 2s, duration: 5s}\n", "p.yaml:4: max_concurrent: 2 faults would be active at 2s"),
]


def test_a_fault_that_can_never_fire_is_a_warning_naming_its_line(tmp_path, capsys):
    """A repeating fault whose first occurrence is not before the plan's end never happens: said by its line (the
    soak recipe cuts its plan short on purpose, so it is a warning, and the plan still runs)."""
    from chaos.__main__ import main

    plan = parse_plan("duration: 60s\nfaults:\n  - kind: kill\n    target: bot\n    every: 10s\n    start: 100s\n"
                      "  - {kind: kill, target: bot, at: 5s}\n", "p.yaml")
    assert plan.warnings == ["p.yaml:6: start: the first occurrence, at 100s, is not before the plan duration 60s: "
                             "the fault would never happen (fault f1)"]
    (tmp_path / "p.yaml").write_text("duration: 0\nfaults:\n  - {kind: kill, target: bot, every: 10s}\n")
    assert main(["validate", str(tmp_path / "p.yaml")]) == 0
    assert (f"warning: {tmp_path / 'p.yaml'}:3: every: the first occurrence, at 10s, is not before the plan "
            "duration 0s") in capsys.readouterr().out


@pytest.mark.parametrize("text, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_every_malformed_plan_names_file_line_and_field(text, message):
    with pytest.raises(PlanError) as err:
        parse_plan(text, "p.yaml")
    assert any(message in p for p in err.value.problems), err.value.problems


def test_all_problems_are_reported_at_once():
    with pytest.raises(PlanError) as err:
        parse_plan("faults:\n  - {kind: nope, target: bot, at: 1s}\n  - {kind: kill, at: x}\n", "p.yaml")
    assert len(err.value.problems) == 3


def test_missing_file_is_a_plan_error(tmp_path):
    with pytest.raises(PlanError, match="cannot read plan"):
        load_plan(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name", ["gentle", "pod-restart-storm", "redis-restart", "connection-drop", "soak",
                                  "redis-failover"])
def test_shipped_plans_are_valid(name):
    plan = load_plan(PLANS / f"{name}.yaml")
    assert plan.schedule() and plan.horizon is not None


def test_gentle_plan_fits_a_two_minute_demo():
    assert load_plan(PLANS / "gentle.yaml").horizon <= 120
