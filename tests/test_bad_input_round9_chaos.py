"""Input the ninth round found handled wrongly (chaos run folders and targets state folders).

- a second ``python -m chaos run PLAN2 --run-dir RUN`` after a controller was SIGKILLed mid-pause started a fresh
  list and rewrote RUN/chaos/outstanding.json: the paused bot stayed SIGSTOPped, the run said "0 fault(s) left
  outstanding", exit 0, and ``chaos heal RUN`` then recovered nothing: the one record needed to heal was gone. Now
  the run is refused, exit 2, naming the file and the fault, and the file is left as it is.
- a targets file whose ``state_dir`` named a refbot stack's folder: ``chaos targets start`` rewrote its state.json
  with the file's members only, so the stack's redis, bots and HAProxy left the record (orphans), and
  ``refbot down`` then died on ``haproxy_socket: null`` with a TypeError. Now the start is refused, exit 2, naming
  the state file and the running members, and ``refbot down`` takes a null socket.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaos.backend import Backend
from conftest import free_port, wait_until
from support_chaos import chaos_stack, read_timeline, run_chaos, write_plan  # noqa: F401 - fixture
from targets import registry

pytestmark = [pytest.mark.timeout(180)]
REPO = Path(__file__).resolve().parents[1]


# ---- 1. a run folder holding a fault a killed controller left ---------------------------------------------------
def test_a_run_into_a_folder_with_an_unhealed_fault_is_refused(chaos_stack, tmp_path):
    """Before: the second run exited 0, rewrote outstanding.json to ``faults: []`` and bot-1 stayed stopped."""
    pause = write_plan(tmp_path, "faults: [{id: p1, kind: pause, target: bot-1, at: 0s, duration: 5m}]", "pause.yaml")
    other = write_plan(tmp_path, "faults: [{id: k2, kind: redis-client-kill, target: redis, at: 0s}]", "ck.yaml")
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(pause), "--state-dir", str(chaos_stack.state_dir),
                              "--run-dir", str(run)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        wait_until(lambda: any(r["event"] == "apply" and r["outcome"] == "ok" for r in read_timeline(run)),
                   timeout=20, what="pause applied")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
    outstanding = run / "chaos" / "outstanding.json"
    before = outstanding.read_bytes()

    second = run_chaos("run", other, "--state-dir", chaos_stack.state_dir, "--run-dir", run)

    said = second.stdout + second.stderr
    assert second.returncode == 2, said
    assert str(outstanding) in second.stderr and "p1#0 (pause on bot-1)" in second.stderr, said
    assert f"python -m chaos heal {run}" in second.stderr, said
    assert outstanding.read_bytes() == before                     # the record heal needs is kept
    assert [r["fault"] for r in read_timeline(run)] == ["p1#0"]    # the refused run applied nothing
    assert chaos_stack.process_state("bot-1") == "T"

    healed = run_chaos("heal", run)
    assert healed.returncode == 0 and "1 recovered, 0 failed" in healed.stdout, healed.stdout + healed.stderr
    assert chaos_stack.process_state("bot-1") != "T"
    # all healed (faults: []): the folder is reused
    again = run_chaos("run", other, "--state-dir", chaos_stack.state_dir, "--run-dir", run)
    assert again.returncode == 0 and "0 fault(s) left outstanding" in again.stdout, again.stdout + again.stderr


def test_the_controller_refuses_a_run_folder_with_faults_left(tmp_path):
    """What Locust's ``--chaos`` builds at the test start: it gets the same one-line ValueError (it then stops the
    test with no fault applied). Before: the controller was built and went on to rewrite the file."""
    from chaos.controller import Controller
    from chaos.plan import Plan

    run = tmp_path / "run"
    (run / "chaos").mkdir(parents=True)
    entry = {"key": "p1#0@bot-1", "instance": "bot-1", "state": "applied", "undo": {"pid": 1},
             "fault": {"id": "p1#0", "kind": "pause", "target": "bot-1", "duration": 60, "params": {}}}
    (run / "chaos" / "outstanding.json").write_text(json.dumps({"backend": "local", "backend_config": {},
                                                                 "faults": [entry]}))

    class NoBackend:
        name = "none"

        def config(self):
            return {}

    with pytest.raises(ValueError, match=r"outstanding\.json lists 1 fault.*p1#0 \(pause on bot-1\).*chaos heal"):
        Controller(Plan(faults=[], path="p.yaml"), NoBackend(), run)
    assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == [entry]


# ---- 2. a targets file's state_dir holding a stack -------------------------------------------------------------
def targets_file(tmp_path: Path, state_dir: Path, port: int) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(textwrap.dedent(f"""\
        state_dir: {state_dir}
        targets:
          web:
            command: {json.dumps([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"])}
            health: {{tcp: "127.0.0.1:{port}"}}
        """))
    return path


def test_targets_start_refuses_a_state_dir_that_holds_a_running_stack(chaos_stack, tmp_path):
    """Before: exit 0, and the stack's state.json held only ``web`` (haproxy_socket null): its members orphaned."""
    state_file = chaos_stack.state_dir / "state.json"
    before = state_file.read_bytes()
    port = free_port()

    targets = targets_file(tmp_path, chaos_stack.state_dir, port)
    try:
        started = run_chaos("targets", "start", targets, timeout=90)

        said = started.stdout + started.stderr
        assert started.returncode == 2, said
        assert str(state_file) in started.stderr, said
        for name in ("redis", "bot-1", "bot-2", "haproxy"):
            assert f"{name} (pid {json.loads(before)['members'][name]['pid']})" in started.stderr, said
        assert state_file.read_bytes() == before
        assert not registry.check_health({"health": {"tcp": ["127.0.0.1", port]}})   # web was not started
    finally:  # without the fix: web stopped and the stack's record put back, so the teardown stops the stack
        run_chaos("targets", "stop", targets, timeout=60)
        state_file.write_bytes(before)


def test_refbot_down_takes_a_state_file_with_a_null_haproxy_socket(tmp_path):
    """A targets file's registry records ``haproxy_socket: null``. Before: ``refbot down`` died with a TypeError and
    left its process running."""
    port = free_port()
    state_dir = tmp_path / "state"
    targets = targets_file(tmp_path, state_dir, port)
    started = run_chaos("targets", "start", targets, timeout=90)
    pid = registry.load(state_dir)["members"]["web"]["pid"]
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert registry.load(state_dir)["haproxy_socket"] is None

        down = subprocess.run([sys.executable, "-m", "refbot", "down", "--state-dir", str(state_dir)], cwd=REPO,
                              capture_output=True, text=True, timeout=60)

        assert down.returncode == 0, down.stdout + down.stderr
        assert "Traceback" not in down.stderr and "stopped web" in down.stdout, down.stdout + down.stderr
        wait_until(lambda: not registry.pid_alive(pid), timeout=10, what="web stopped")
    finally:
        if pid and registry.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_recorded_member_that_is_not_running_is_dropped(tmp_path):
    """Only running members are kept from harm: one no longer running (a target removed from the file) is dropped."""
    state_dir = tmp_path / "state"
    old = tmp_path / "old.yaml"
    old.write_text(f"state_dir: {state_dir}\ntargets:\n  gone:\n    command: {sys.executable} -c pass\n")
    assert run_chaos("validate", "--targets", old).returncode == 0
    assert list(registry.load(state_dir)["members"]) == ["gone"]

    now = targets_file(tmp_path, state_dir, free_port())
    checked = run_chaos("validate", "--targets", now)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert list(registry.load(state_dir)["members"]) == ["web"]


@pytest.mark.parametrize("kind, instance, said", [
    ("nuke", "bot-1", "local backend cannot recover 'nuke': nothing was undone"),
    ("pause", "bot-9", "no member 'bot-9' in "),
])
def test_heal_of_a_fault_it_cannot_undo_fails_and_keeps_the_record(chaos_stack, tmp_path, kind, instance, said):
    """An outstanding.json edited by hand, or from another goldfish: a kind this one does not know was "recovered ...
    ok, 1 recovered" and dropped from the record, though nothing was undone; an instance the stack does not have
    was a bare KeyError (input hunt 9: W10). Both are failed recoveries now, named, and the record is kept."""
    run = tmp_path / "run"
    (run / "chaos").mkdir(parents=True)
    entry = {"key": f"p1#0@{instance}", "fault": {"id": "p1#0", "kind": kind, "target": instance, "duration": 60,
                                                  "params": {}},
             "instance": instance, "state": "applied", "undo": {}, "applied": 1.0, "planned": 1.0, "toxiproxy": None}
    outstanding = run / "chaos" / "outstanding.json"
    outstanding.write_text(json.dumps({"backend": "local", "backend_config": {"state_dir": str(chaos_stack.state_dir)},
                                       "faults": [entry]}))
    healed = run_chaos("heal", run)
    out = healed.stdout + healed.stderr
    assert healed.returncode == 1 and "0 recovered, 1 failed" in healed.stdout and said in out, out
    assert [e["key"] for e in json.loads(outstanding.read_text())["faults"]] == [f"p1#0@{instance}"]


class RecordingBackend(Backend):
    """A stand-in for the kubernetes backend (kill and restart only), which needs a cluster: it records what it
    is asked to recover. Only the controller's choice of what to recover is under test here."""

    name, kinds = "kubernetes", frozenset({"kill", "restart"})

    def __init__(self):
        self.recovered = []

    def instances(self, target):
        return [target]

    def apply(self, fault, instance):
        raise AssertionError("heal applied a fault")

    def recover(self, fault, instance, undo):
        self.recovered.append((fault.kind, instance))


def test_heal_never_calls_a_kind_recovered_that_the_backend_cannot_do(tmp_path):
    """The check of an unknown kind lived in the local backend only: the docker and kubernetes backends "recovered" a
    kind they do not do (their recover falls through), dropped the record and said ok. The controller checks it
    for every backend now, and recovers the rest."""
    from chaos.controller import heal_run

    run = tmp_path / "run"
    (run / "chaos").mkdir(parents=True)
    entries = [{"key": f"p{i}#0@web-{i}", "fault": {"id": f"p{i}#0", "kind": kind, "target": "web", "duration": 60,
                                                     "params": {}},
                "instance": f"web-{i}", "state": "applied", "undo": {}, "applied": 1.0, "planned": 1.0,
                "toxiproxy": None} for i, kind in enumerate(("pause", "kill"))]
    outstanding = run / "chaos" / "outstanding.json"
    outstanding.write_text(json.dumps({"backend": "kubernetes", "backend_config": {}, "faults": entries}))
    backend = RecordingBackend()

    recovered, failed = heal_run(run, backend)

    assert backend.recovered == [("kill", "web-1")]
    assert (recovered, [f["key"] for f in failed]) == (1, ["p0#0@web-0"])
    said = [r for r in read_timeline(run) if r["event"] == "recover" and r["outcome"] == "error"]
    assert "kubernetes backend cannot recover 'pause': nothing was undone" in said[0]["error"], said
    assert [e["key"] for e in json.loads(outstanding.read_text())["faults"]] == ["p0#0@web-0"]


def test_refbot_status_of_a_targets_files_record_lists_its_members(tmp_path):
    """`refbot status --state-dir` of a targets file's record (no HAProxy socket, members without a port) was a
    traceback (helper-84's note)."""
    state_dir = tmp_path / "state"
    path = tmp_path / "t.yaml"
    path.write_text(f"state_dir: {state_dir}\ntargets:\n  web:\n    command: {json.dumps([sys.executable, '-c', 'pass'])}\n")
    assert run_chaos("validate", "--targets", path).returncode == 0
    assert list(registry.load(state_dir)["members"]) == ["web"]
    shown = subprocess.run([sys.executable, "-m", "refbot", "status", "--state-dir", str(state_dir)],
                           capture_output=True, text=True, timeout=60)
    assert "Traceback" not in shown.stderr and shown.returncode in (0, 1), shown.stderr
    assert [line.split()[0] for line in shown.stdout.splitlines()[1:]] == ["web"], shown.stdout
