"""Input the eighth round found handled wrongly.

- ``python -m chaos heal RUN`` on an outstanding.json that decodes but has no ``faults`` list printed "0 recovered"
  and exit 0: a damaged record of faults that may still be in force was reported as all healed. It is exit 2 now,
  naming the file and the field, and the file is left as it is (a wrong ``faults`` or entry already was).
- a ``kill`` whose target was not running failed to apply, and was then "recovered" by starting the target: a
  target that would not start left the fault listed as ``NOT healed ... run python -m chaos heal`` (exit 1), though
  it never took effect. A fault whose apply did nothing is not outstanding now and nothing is recovered; the
  timeline still says it failed to apply, and ``chaos run`` ends naming it, exit 1: the run tested less than its
  plan (before, exit 0).

(``--reply-field ''`` was looked at too: it has a documented meaning, the JSON value itself is the reply text, so it
is still taken: tests/test_bad_input_round6_options.py.)
"""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from conftest import free_port
from support_chaos import chaos_stack, read_timeline, run_chaos, write_plan  # noqa: F401 - fixture
from targets import file as targets_file, registry

pytestmark = [pytest.mark.timeout(180)]


# ---- 1. an outstanding.json without its faults list ---------------------------------------------------------------
@pytest.mark.parametrize("document", [
    {"backend": "local", "backend_config": {}},
    {},
])
def test_heal_refuses_an_outstanding_file_without_its_faults_list(tmp_path, document):
    run = tmp_path / "run"
    (run / "chaos").mkdir(parents=True)
    outstanding = run / "chaos" / "outstanding.json"
    outstanding.write_text(json.dumps(document))
    before = outstanding.read_bytes()

    healed = run_chaos("heal", run, timeout=60)

    said = healed.stdout + healed.stderr
    assert healed.returncode == 2, said
    assert "recovered" not in healed.stdout, said          # not "0 recovered, 0 failed"
    assert str(outstanding) in healed.stderr and "faults: missing" in healed.stderr, said
    assert outstanding.read_bytes() == before


def test_heal_of_an_empty_faults_list_is_still_nothing_to_do(tmp_path):
    """What chaos writes once everything is healed: ``faults: []``."""
    run = tmp_path / "run"
    (run / "chaos").mkdir(parents=True)
    (run / "chaos" / "outstanding.json").write_text(json.dumps({"backend": "local", "backend_config": {},
                                                                "faults": []}))
    healed = run_chaos("heal", run, timeout=60)
    assert healed.returncode == 0 and "0 recovered, 0 failed" in healed.stdout, healed.stdout + healed.stderr


# ---- 2. a kill of a target that is not running ----------------------------------------------------------------------
def test_a_kill_that_found_its_target_down_is_not_left_outstanding(tmp_path):
    """The target is named in a targets file and was never started; its command would not stay up anyway."""
    targets = tmp_path / "targets.yaml"
    command = [sys.executable, "-c", "import sys; sys.exit(3)"]
    targets.write_text(textwrap.dedent(f"""\
        targets:
          web:
            command: {json.dumps(command)}
            health: {{tcp: "127.0.0.1:{free_port()}"}}
        """))
    plan = write_plan(tmp_path, "faults:\n  - {id: down, kind: kill, target: web, at: 0s, duration: 1s}\n")
    run = tmp_path / "run"

    done = run_chaos("run", plan, "--targets", targets, "--run-dir", run, timeout=120)

    said = done.stdout + done.stderr
    assert "NOT healed" not in said and "chaos heal" not in said, said
    assert "0 fault(s) left outstanding" in said, said
    # the run tested nothing of its plan: said, and not exit 0, which a CI job reads as "the faults happened"
    # (input hunt 8, W9)
    assert done.returncode == 1, said
    assert "1 fault occurrence(s) did not apply" in done.stdout and \
        "NOT applied: down#0 kill on web: web is not running" in done.stdout, said
    assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == []
    timeline = read_timeline(run)
    assert [(r["event"], r["fault"], r["outcome"]) for r in timeline] == [("apply", "down#0", "error")], timeline
    assert "web is not running" in timeline[0]["error"]
    # nothing was "recovered": chaos did not start a target that was down before it
    member = registry.load(targets_file.open_registry(str(targets)))["members"]["web"]
    assert not member.get("pid"), member


def test_validate_says_which_target_is_not_running(tmp_path):
    """`chaos validate PLAN --targets FILE` said "ok" of a plan whose only target was down: its kill would not apply.
    It is still valid (the target may be started before the run), but the validation says so, naming the line."""
    targets = tmp_path / "targets.yaml"
    targets.write_text(textwrap.dedent(f"""\
        targets:
          web:
            command: {json.dumps([sys.executable, "-c", "pass"])}
            health: {{tcp: "127.0.0.1:{free_port()}"}}
        """))
    plan = write_plan(tmp_path, "faults:\n  - {id: down, kind: kill, target: web, at: 0s, duration: 1s}\n")
    done = run_chaos("validate", plan, "--targets", targets, timeout=60)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and f"{plan}: ok against backend local" in done.stdout, said
    assert f"warning: {plan}:2: web is not running" in done.stdout and "a fault on it will not apply (fault down)" \
        in done.stdout, said


# ---- 3. a timeline that cannot be written (a full disk) --------------------------------------------------------------
def test_a_timeline_that_cannot_be_written_is_said_and_the_fault_is_still_healed(chaos_stack, tmp_path):
    """chaos.jsonl on a full disk (a link to /dev/full: every write is ENOSPC): the recovery's record raised in the
    controller's thread, a traceback, then "0 fault(s) left outstanding", exit 0, and the timeline said the fault
    was never healed. The fault is healed all the same, the run says its record is incomplete, exit 1."""
    plan = write_plan(tmp_path, "faults:\n  - {id: freeze, kind: pause, target: bot-1, at: 0s, duration: 0.5s}\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "chaos.jsonl").symlink_to("/dev/full")
    done = run_chaos("run", plan, "--backend", "local", "--state-dir", chaos_stack.state_dir, "--run-dir", run,
                     timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "Traceback" not in said, said
    assert f"could not write {run / 'chaos.jsonl'}: apply of freeze#0 on bot-1" in said, said
    assert "the run folder's record of the faults is incomplete" in said, said
    assert chaos_stack.process_state("bot-1") != "T" and chaos_stack.healthy("bot-1")
    assert json.loads((run / "chaos" / "outstanding.json").read_text())["faults"] == []
