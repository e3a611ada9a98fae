"""Input the thirteenth hunt found handled wrongly (chaos plans, stack states and heal).

- D5: a ``--stack-state`` whose ``haproxy_socket`` is gone (the stack's folder moved or cleaned, HAProxy restarted
  with another socket): ``chaos validate`` said ok, a Locust run did its whole load, the ``lb-disable`` failed as a
  bare ``FileNotFoundError: [Errno 2] No such file or directory`` and the run ended FAIL, exit 1. Now the backend's
  check reaches the socket: exit 2 before any load, naming it; the runtime API's connection error names it too.
- m2: ``chaos validate`` printed ``ok — 1 fault(s) ...`` and then refused the plan against the backend.
- m3: ``Kind: kill`` said only ``kind: missing``; the unknown field ``Kind`` is named now.
- m6: ``chaos heal`` of an outstanding.json whose undo ``pid`` is text died on a TypeError inside the recovery.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from chaos.plan import PlanError, parse_plan
from support_chaos import ChaosStack, run_chaos, write_plan
from support_locust import run_locust
from targets import haproxy

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = ChaosStack(tmp_path_factory.mktemp("stack13")).start()
    yield s
    s.stop()


def moved_state(stack: ChaosStack, folder: Path, sock) -> Path:
    """A copy of the stack's state whose haproxy_socket is ``sock``: the stack's folder moved or cleaned."""
    folder.mkdir()
    st = dict(stack.state(), haproxy_socket=str(sock))
    (folder / "state.json").write_text(json.dumps(st))
    return folder


LB_PLAN = "name: lb\nfaults:\n  - {id: d, kind: lb-disable, target: bot-1, at: 2s, duration: 2s}\n"


# ---- D5: the state's HAProxy socket is gone --------------------------------------------------------------------
def test_validate_refuses_an_lb_fault_when_the_haproxy_socket_is_gone(stack, tmp_path):
    gone = tmp_path / "gone" / "haproxy.sock"
    moved = moved_state(stack, tmp_path / "moved", gone)
    checked = run_chaos("validate", "--state-dir", moved, write_plan(tmp_path, LB_PLAN))
    said = checked.stdout + checked.stderr
    assert checked.returncode == 2, said
    assert f"the stack state's haproxy_socket {gone} does not exist (HAProxy is not running there)" in said, said
    assert "ok" not in checked.stdout, said
    # the real stack's socket answers: the same plan is ok there
    ok = run_chaos("validate", "--state-dir", stack.state_dir, write_plan(tmp_path, LB_PLAN))
    assert ok.returncode == 0 and "ok against backend local" in ok.stdout, ok.stdout + ok.stderr


def test_validate_refuses_an_lb_fault_when_nothing_answers_on_the_socket(stack, tmp_path):
    """A socket file left behind by a HAProxy that died: it exists, nothing listens."""
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(dead))
    s.close()
    moved = moved_state(stack, tmp_path / "moved", dead)
    checked = run_chaos("validate", "--state-dir", moved, write_plan(tmp_path, LB_PLAN))
    said = checked.stdout + checked.stderr
    assert checked.returncode == 2, said
    assert "haproxy_socket does not answer" in said and str(dead) in said and "Connection refused" in said, said


def test_a_locust_run_with_the_haproxy_socket_gone_is_refused_before_any_load(stack, tmp_path):
    gone = tmp_path / "gone" / "haproxy.sock"
    moved = moved_state(stack, tmp_path / "moved", gone)
    started = time.monotonic()
    run = run_locust(stack.url, tmp_path / "run", "--chaos", write_plan(tmp_path, LB_PLAN),
                     "--stack-state", moved / "state.json", "--store-url", stack.store_url,
                     users=4, rate=4, time_s="8s", timeout=120)
    assert run.returncode == 2, run.output[-3000:]
    assert f"haproxy_socket {gone} does not exist" in run.output, run.output[-3000:]
    assert run.count() == 0 and time.monotonic() - started < 8, run.output[-3000:]   # no load at all


def test_the_runtime_api_connection_error_names_the_socket(tmp_path):
    gone = tmp_path / "nowhere" / "haproxy.sock"
    with pytest.raises(FileNotFoundError, match=f"HAProxy's runtime API socket {gone}: No such file or directory"):
        haproxy.runtime_command(str(gone), "set server bots/bot-1 state maint")


# ---- m2: no "ok" line for a plan validate then refuses ---------------------------------------------------------
def test_validate_prints_no_ok_for_a_plan_the_backend_refuses(stack, tmp_path):
    plan = write_plan(tmp_path, "faults:\n  - {id: k, kind: kill, target: bot-3, at: 2s}\n")
    checked = run_chaos("validate", "--state-dir", stack.state_dir, plan)
    assert checked.returncode == 2 and "'bot-3' has no instances" in checked.stderr, checked.stdout + checked.stderr
    assert checked.stdout == "", checked.stdout


# ---- m3: `Kind:` is named as an unknown field ------------------------------------------------------------------
def test_a_fault_with_kind_in_another_case_names_the_unknown_field():
    with pytest.raises(PlanError) as caught:
        parse_plan("faults:\n  - {Kind: kill, target: bot-1, at: 2s}\n", "p.yaml")
    problems = caught.value.problems
    assert any("kind: missing (one of:" in p for p in problems), problems
    assert "p.yaml:2: Kind: unknown field (did you mean 'kind'?) (fault f1)" in problems, problems


# ---- m6: heal of a hand-edited outstanding.json ----------------------------------------------------------------
def outstanding_with(stack_dir, tmp_path: Path, entry_changes: dict, drop: tuple = ()) -> Path:
    run = tmp_path / "run"
    (run / "chaos").mkdir(parents=True)
    entry = {"key": "p#0@bot-1", "fault": {"id": "p#0", "kind": "pause", "target": "bot-1", "duration": 60.0,
                                           "params": {}},
             "instance": "bot-1", "state": "applied", "undo": {}, "applied": 1.0, "planned": 1.0, "toxiproxy": None}
    entry.update(entry_changes)
    for key in drop:
        entry.pop(key)
    (run / "chaos" / "outstanding.json").write_text(json.dumps(
        {"backend": "local", "backend_config": {"state_dir": str(stack_dir)}, "faults": [entry]}))
    return run


def test_heal_names_an_undo_pid_given_as_text(tmp_path):
    run = outstanding_with(tmp_path / "nostack", tmp_path, {"undo": {"pid": "26735", "pid_start": 8634832}})
    before = (run / "chaos" / "outstanding.json").read_bytes()
    healed = run_chaos("heal", run)
    said = healed.stdout + healed.stderr
    assert healed.returncode == 2 and "Traceback" not in said, said
    assert (f"{run / 'chaos' / 'outstanding.json'}: faults[0].undo.pid: must be a whole number, not str '26735' "
            "(fault p#0 on bot-1)") in healed.stderr, said
    assert (run / "chaos" / "outstanding.json").read_bytes() == before


def test_heal_of_an_entry_without_undo_continues_the_paused_member(stack, tmp_path):
    """The hunt's "undo missing" file had lost its "faults" key too (its generator replaced the document with the
    popped undo), hence "faults: missing". An entry without undo is healed from the state file, as one still
    ``applying`` (undo {}) is."""
    os.killpg(stack.pid("bot-1"), signal.SIGSTOP)
    try:
        run = outstanding_with(stack.state_dir, tmp_path, {}, drop=("undo",))
        healed = run_chaos("heal", run)
        assert healed.returncode == 0 and "1 recovered, 0 failed" in healed.stdout, healed.stdout + healed.stderr
        assert stack.process_state("bot-1") != "T"
    finally:
        os.killpg(stack.pid("bot-1"), signal.SIGCONT)
