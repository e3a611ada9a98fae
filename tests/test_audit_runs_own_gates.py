"""`oracle audit RUN` without --gate judges with the gates the run was started with (run.json options.gates),
as compare judges with the audited ones: a run that PASSed under its own gates, re-audited from its snapshot or
finished after a signal with the command run.json names, was judged strict and FAILed (verdict hunt 15)."""
from __future__ import annotations

import json

import pytest

from support_oracle import build_world, oracle_main, simple_specs, write_journal, write_snapshot

RUNS_GATES = "probe_amnesia=50%,errors=off"


def run_folder(tmp_path, gates):
    world = build_world(simple_specs(6))   # two of six probes answered with amnesia, a failed request
    run = tmp_path / "run"
    write_journal(run, world.records)
    write_snapshot(run, world)
    if gates is not None:
        (run / "run.json").write_text(json.dumps({"options": {"gates": gates}}))
    return run


def test_the_runs_own_gates_judge_a_re_audit(tmp_path, capsys):
    run = run_folder(tmp_path, RUNS_GATES)
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 0, out
    assert f"gates: the run's own, '{RUNS_GATES}' (run.json)" in out
    assert json.loads((run / "audit" / "summary.json").read_text())["verdict"]["gates"] == RUNS_GATES


def test_gate_given_judges_with_it(tmp_path, capsys):
    run = run_folder(tmp_path, RUNS_GATES)
    code, out, _ = oracle_main(capsys, "audit", run, "--gate", "strict")
    assert code == 1 and "the run's own" not in out
    code, out, _ = oracle_main(capsys, "audit", run, "--max-probe-amnesia", "0.1")
    assert code == 1 and "the run's own" not in out


def test_a_run_without_recorded_gates_is_judged_strict(tmp_path, capsys):
    code, out, _ = oracle_main(capsys, "audit", run_folder(tmp_path, None))
    assert code == 1 and "the run's own" not in out


def test_recorded_gates_that_no_longer_parse_are_refused_naming_them(tmp_path, capsys):
    run = run_folder(tmp_path, str(tmp_path / "gone.yaml"))
    code, out, err = oracle_main(capsys, "audit", run)
    assert code == 2, out + err
    assert "the run's gates" in err and "options.gates" in err and "give --gate" in err
    assert not (run / "audit" / "summary.json").exists()
    code, _, _ = oracle_main(capsys, "audit", run, "--gate", "lenient")
    assert code in (0, 1)


def test_a_re_audit_with_run_json_unreadable_keeps_the_earlier_audit(tmp_path, capsys):
    """Input hunt 15: a NOT TRUSTED run (its users raised) re-audited with run.json damaged exited 2 after replacing
    summary.json with one that knew nothing of it; following "repair or remove it" the next re-audit said PASS."""
    run = run_folder(tmp_path, RUNS_GATES)
    run_json = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**run_json, "user_exceptions": {"count": 3, "first": "KeyError"}}))
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 3 and "NOT TRUSTED" in out
    earlier = (run / "audit" / "summary.json").read_bytes()
    (run / "run.json").write_text('{"options": {"gates": "probe_')   # cut short: a full disk, a bad copy
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 2
    last = out.splitlines()[-1]
    assert last.startswith("NO VERDICT — ") and "run.json cannot be read" in last and "is kept" in last
    assert "remove" not in last
    assert (run / "audit" / "summary.json").read_bytes() == earlier


def test_a_not_trusted_run_stays_so_once_its_run_json_is_removed(tmp_path, capsys):
    """Its audit keeps run.json's trust record (summary.json run_record); a re-audit once run.json was removed PASSed,
    exit 0 (input hunt 15)."""
    run = run_folder(tmp_path, RUNS_GATES)
    run_json = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**run_json, "user_exceptions": {"count": 3, "first": "KeyError"}}))
    assert oracle_main(capsys, "audit", run)[0] == 3
    (run / "run.json").unlink()
    code, out, _ = oracle_main(capsys, "audit", run, "--gate", RUNS_GATES)
    assert code == 3 and "NOT TRUSTED — Locust users raised 3 exception(s)" in out, out
    summary = json.loads((run / "audit" / "summary.json").read_text())
    assert summary["run_record"]["user_exceptions"]["count"] == 3


@pytest.mark.parametrize("journal", [{"bytes": "12k"}, {"bytes": float("nan")}, {"bytes": [1]}, {"bytes": -1}, "x"])
def test_a_damaged_journal_size_is_not_trusted(tmp_path, capsys, journal):
    """run.json's journal.bytes is what a journal that lost lines since is caught by; damaged, the check was skipped
    with a warning no terminal showed, and a deleted failed probe PASSed, exit 0 (input hunt 15)."""
    run = run_folder(tmp_path, RUNS_GATES)
    run_json = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**run_json, "journal": journal}))
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 3 and "NOT TRUSTED — run.json's journal.bytes is damaged" in out, out


def test_a_whole_journal_size_is_trusted(tmp_path, capsys):
    run = run_folder(tmp_path, RUNS_GATES)
    size = sum(p.stat().st_size for p in (run / "journal").glob("*.jsonl"))
    run_json = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**run_json, "journal": {"bytes": size}}))
    assert oracle_main(capsys, "audit", run)[0] == 0


@pytest.mark.parametrize("spec", ["strict", "lenient", "lenient,probe_amnesia=0.123456789,crosstalk=3,errors=off",
                                  "stored_loss=0%,duplicated=2"])
def test_the_gates_written_out_parse_to_the_same_limits(spec):
    from oracle.verdict import parse_gates

    gates = parse_gates(spec)
    assert parse_gates(gates.written_out()).limits == gates.limits


def test_a_gates_file_edited_since_the_run_changes_no_re_audit(tmp_path, capsys):
    """A gates file is named by its path: edited (or removed) since the run, a re-audit judged with what it says now
    (verdict hunt 15). run.json keeps the limits written out (options.gate_limits), and those judge."""
    from oracle.verdict import parse_gates

    gates_file = tmp_path / "gates.yaml"
    gates_file.write_text("probe_amnesia: 50%\nerrors: off\n")
    run = run_folder(tmp_path, str(gates_file))
    run_json = json.loads((run / "run.json").read_text())
    run_json["options"]["gate_limits"] = parse_gates(str(gates_file)).written_out()
    (run / "run.json").write_text(json.dumps(run_json))
    gates_file.write_text("probe_amnesia: 0\n")   # stricter since
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 0, out
    assert json.loads((run / "audit" / "summary.json").read_text())["verdict"]["gates"] == str(gates_file)
    gates_file.unlink()
    assert oracle_main(capsys, "audit", run)[0] == 0
