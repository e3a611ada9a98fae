"""Oracle (and Locust option) input the ninth round found handled wrongly.

- a rate limit of 100% was refused only as a shorthand (``--max-probe-amnesia 1.0``): ``--gate probe_amnesia=100%``,
  ``--gate probe_amnesia=1.0``, a gates file's ``probe_amnesia: 100%`` and ``oracle audit RUN --gate
  stored_loss=100%`` were taken, and a bot that forgot every probe PASSed. Refused wherever a gate is parsed now,
  with the shorthand's message (a count such as ``errors=5`` or ``probe_amnesia=1`` stays a count);
- ``locust ... -u -1``: two Locust tracebacks, then the run idled for the whole -t: refused at start, exit 2;
- a telemetry.jsonl ``rss`` of a 400-digit integer crashed ``oracle report`` (OverflowError, exit 3): the line is
  one file:line warning now;
- an audit/summary.json nested too deeply or holding a 5000-digit integer: report, compare and trend said "not a
  JSON object"; they keep the reason now;
- ``oracle compare --margin/--alpha`` and ``oracle audit --window/--recovery`` given twice used the last silently:
  refused, naming both values.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time

import pytest

from oracle import compare
from oracle.audit import audit_run
from oracle.options import OptionError, gates as gates_of
from oracle.verdict import GateError, parse_gates
from support_locust import CHATFILE, LOCUST, REPO
from support_oracle import TurnSpec, build_world, oracle_main, write_journal, write_snapshot
from support_report import synthetic

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

NEVER_FAILS = "is a rate of 100%: the gate could never fail"


oracle = oracle_main  # python -m oracle ..., in this process


@pytest.fixture
def amnesic_run(tmp_path):
    """An audited run whose bot forgot every recall probe it answered (100% amnesia): strict FAILs it."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("probe", "ok", verdict_amnesia=True), TurnSpec("chatter", "ok"),
              TurnSpec("probe", "ok", verdict_amnesia=True)] for _ in range(3)]
    world = build_world(specs, seed=9)
    run = tmp_path / "run"
    write_journal(run, world.records)
    write_snapshot(run, world)
    audit_run(run, gates=parse_gates("strict"))
    return run


# ---- 1. a rate of 100% ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["probe_amnesia=100%", "probe_amnesia=1.0", "amnesia=1e0", "stored_loss=100%",
                                  "lenient,errors=100.0%"])
def test_a_gate_rate_of_100_percent_is_refused_in_audit(amnesic_run, capsys, spec):
    """`oracle audit RUN --gate probe_amnesia=100%` PASSed a bot that forgot every probe, exit 0 ("13 failed recall
    probes of 13 ... <= allowed 100%"), while `--max-probe-amnesia 1.0` was refused: exit 2 now, the same words."""
    code, out, err = oracle(capsys, "audit", amnesic_run, "--gate", spec)
    assert code == 2, out + err
    assert NEVER_FAILS in err and spec.split(",")[-1].split("=")[1] in err, err
    assert "=off" in err and "Traceback" not in err + out


def test_a_count_is_no_rate_and_the_run_still_fails_strict(amnesic_run, capsys):
    """The premise and the bounds: strict FAILs the run; `probe_amnesia=1` is a count (one allowed, still FAIL),
    `errors=5` a count, `99%` a rate below 100%; all taken."""
    assert oracle(capsys, "audit", amnesic_run)[0] == 1
    assert oracle(capsys, "audit", amnesic_run, "--gate", "probe_amnesia=1,errors=5")[0] == 1
    code, out, err = oracle(capsys, "audit", amnesic_run, "--gate", "probe_amnesia=99%")
    assert code == 1 and "allowed 99%" in out, out + err
    assert str(parse_gates("probe_amnesia=1").limits["probe_amnesia"]) == "1"


def test_a_gates_file_rate_of_100_percent_is_refused_naming_its_line(amnesic_run, tmp_path, capsys):
    """A gates file `probe_amnesia: 100%` was taken (a PASS of a bot that forgot everything); refused, file:line,
    with the way to turn the gate off written as a file writes it."""
    gates_file = tmp_path / "gates.yaml"
    gates_file.write_text("profile: strict\nerrors: 5\nprobe_amnesia: 100%\n")
    code, out, err = oracle(capsys, "audit", amnesic_run, "--gate", gates_file)
    assert code == 2, out + err
    assert f"{gates_file}:3" in err and NEVER_FAILS in err and "probe_amnesia: off" in err, err
    with pytest.raises(GateError, match=f"{gates_file}:3: .*{NEVER_FAILS}"):
        parse_gates(str(gates_file))


def test_a_gate_rate_of_100_percent_is_refused_in_compare_and_for_locust(tmp_path, capsys):
    """`oracle compare --gate probe_amnesia=100%` and Locust's --gate (oracle.options.gates, what the end of a run
    and the web UI use) took it too."""
    base, cand = synthetic(tmp_path / "a", seed=1), synthetic(tmp_path / "b", probes_failed=400, seed=2)
    code, out, err = oracle(capsys, "compare", base, cand, "--gate", "strict,probe_amnesia=100%")
    assert code == 2, out + err
    assert NEVER_FAILS in err, err
    with pytest.raises(OptionError, match=NEVER_FAILS):
        gates_of(argparse.Namespace(gate="probe_amnesia=1.0"))
    assert str(gates_of(argparse.Namespace(gate="errors=5")).limits["errors"]) == "5"


# ---- 2. a negative user count ---------------------------------------------------------------------------------
def test_a_negative_user_count_stops_locust_at_start(tmp_path):
    """`locust ... -u -1`: Locust's parser took it, then `ValueError: target_user_count must be >= 0` in two
    greenlets, the run idled for the whole -t and ended NO VERDICT. One line naming -u now, exit 2, at once."""
    run_dir = tmp_path / "run"
    started = time.monotonic()
    proc = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "-u", "-1", "-r", "1", "-t", "20s",
                           "--host", "http://127.0.0.1:9", "--run-dir", str(run_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=90)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "-u/--users -1" in output and "Traceback" not in output, output[-3000:]
    assert time.monotonic() - started < 15  # not the whole -t
    assert not list(run_dir.glob("journal/*.jsonl"))


# ---- 3. a telemetry number beyond a float ---------------------------------------------------------------------
def test_a_huge_telemetry_integer_is_one_warning_not_a_crash(tmp_path, capsys):
    """`"rss": {"local": <400 digits>}` passed the sample's check (a whole number, no upper bound) and the report's
    chart raised OverflowError converting it to a float: exit 3, no report. The line is skipped with a file:line
    warning now, as other telemetry damage is; 2**64-1 (a 64-bit counter's largest) is still a sample."""
    from contracts.timeline import telemetry_sample

    run = synthetic(tmp_path / "run", seed=3)
    t0 = json.loads((run / "run.json").read_text()).get("start") or 1.7e9
    lines = [{"time": t0 + 1, "users": 5, "rss": {"local": int("9" * 400)}},
             {"time": t0 + 2, "users": 5, "rss": {"local": 50_000_000}}]
    (run / "telemetry.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out, err = oracle(capsys, "report", run)
    assert code == 0, out + err
    assert f"{run / 'telemetry.jsonl'}:1: rss" in out + err and "Traceback" not in out + err, out + err
    assert (run / "report.html").is_file()
    assert telemetry_sample(json.dumps({"time": 1.0, "rss": {"local": 2 ** 64 - 1}}))["rss"]["local"] == 2 ** 64 - 1
    for value in (2 ** 64, int("9" * 400)):
        with pytest.raises(ValueError, match="users"):
            telemetry_sample(json.dumps({"time": 1.0, "users": value}))


# ---- 4. a summary.json that is an object but cannot be read ---------------------------------------------------
@pytest.mark.parametrize("text, reason", [('{"problems": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
                                          ('{"problems": [' + "7" * 5000 + "]}", "4300 digits")])
def test_an_unreadable_summary_names_why_in_report_compare_and_trend(tmp_path, capsys, text, reason):
    """report, compare and trend said "summary.json: not a JSON object" of a file that is one, dropping the reason
    run.json's reader gives (nesting, the integer digit limit). Exit 2, the reason kept."""
    base = synthetic(tmp_path / "base", seed=1)
    run = synthetic(tmp_path / "run", seed=2)
    (run / "audit" / "summary.json").write_text(text)
    for args in (["report", run], ["compare", base, run], ["trend", run]):
        code, out, err = oracle(capsys, *args)
        assert code == 2, (args, out + err)
        assert reason in out + err and "not a JSON object" not in out + err, (args, out + err)
    (run / "audit" / "summary.json").write_text("[1, 2]")  # not an object: still said so
    code, out, err = oracle(capsys, "report", run)
    assert code == 2 and "not a JSON object but a list" in out + err, out + err


# ---- 5. a verdict-changing option given twice -----------------------------------------------------------------
@pytest.mark.parametrize("option, first, second", [("--margin", "0.5", "0.001"), ("--alpha", "0.05", "0.5")])
def test_compare_margin_or_alpha_given_twice_is_refused_naming_both(tmp_path, capsys, option, first, second):
    """`oracle compare B C --margin 0.5 --margin 0.001` judged with the last, without a word (a release gate
    loosened or tightened by a script that appends options). Exit 2, both values named."""
    base, cand = synthetic(tmp_path / "a", seed=1), synthetic(tmp_path / "b", seed=2)
    code, out, err = oracle(capsys, "compare", base, cand, option, first, option, second)
    assert code == 2, out + err
    assert option in err and "given twice" in err and f"'{first}'" in err and f"'{second}'" in err, err
    assert compare.main([str(base), str(cand), option, second]) == 0  # once is fine


@pytest.mark.parametrize("option, first, second, shown", [("--window", "5s", "1s", ("'5.0'", "'1.0'")),
                                                          ("--recovery", "5s", "0s", ("'5.0'", "'0.0'"))])
def test_audit_window_or_recovery_given_twice_is_refused_naming_both(amnesic_run, capsys, option, first, second,
                                                                     shown):
    """`oracle audit RUN --window 5s --window 1s` (and --recovery, which decides the failed requests a fault
    excuses) used the last silently. Exit 2, both values named."""
    code, out, err = oracle(capsys, "audit", amnesic_run, option, first, option, second)
    assert code == 2, out + err
    assert option in err and "given twice" in err and all(s in err for s in shown), err
    assert oracle(capsys, "audit", amnesic_run, option, second)[0] == 1  # once is fine (the run FAILs strict)


@pytest.mark.parametrize("command", ["trend", "compare"])
def test_output_whose_reader_went_away_is_no_crash_and_keeps_the_exit_code(tmp_path, command):
    """`python -m oracle trend RUNS | head -1` (or a CI log reader gone): the next print raised BrokenPipeError
    after the work was done: a traceback and exit 3, "no verdict" (input hunt 10). The rest of the output goes
    nowhere; the exit code is the command's, as with the whole output read."""
    import os
    import sys

    runs = [str(synthetic(tmp_path / name, label=label, seed=seed)) for name, label, seed in (("a", "v1", 1),
                                                                                             ("b", "v2", 2))]
    whole = subprocess.run([sys.executable, "-m", "oracle", command, *runs], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write meets EPIPE
    cut = subprocess.run([sys.executable, "-m", "oracle", command, *runs], cwd=REPO, stdout=write,
                         stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write)
    assert "Traceback" not in cut.stderr and "BrokenPipeError" not in cut.stderr, cut.stderr
    assert cut.returncode == whole.returncode, (cut.returncode, whole.returncode, cut.stderr)
