"""Oracle input the eighth round found handled wrongly.

- a gate set twice across flags was taken silently, while the same in one --gate was refused: argparse keeps the
  last of two ``--gate``, so ``--gate probe_amnesia=0 --gate probe_amnesia=50%`` PASSed a run that strict FAILs;
  ``--gate probe_amnesia=0 --max-probe-amnesia 0.5`` PASSed it too (the shorthand won, in either order), and
  ``--gate strict --gate lenient`` was lenient. Each is refused now (exit 2, naming both), in ``oracle audit``
  and ``oracle compare``; a shorthand over a profile (``--max-probe-amnesia 0.5 --gate strict``) still changes
  it. ``--store-url`` given twice read the second store: refused too;
- ``oracle compare BASE CAND`` whose candidate reached no bot (no turn acknowledged: its audit exits 2, "nothing
  measured") said "no significant change" and exited 1, a regression to CI: exit 2 now, naming the run.
"""
from __future__ import annotations

import pytest

from oracle import compare
from oracle.audit import audit_run
from oracle.verdict import NOTHING_ACKNOWLEDGED, parse_gates
from support_oracle import TurnSpec, build_world, oracle_main, write_journal, write_snapshot
from support_report import synthetic

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def audit(capsys, *args):
    """``python -m oracle audit ...`` through its main(), in this process: (exit code, stdout, stderr)."""
    return oracle_main(capsys, "audit", *args)


@pytest.fixture
def forgetful_run(tmp_path):
    """An audited run whose bot forgot one recall probe of three (33%): strict FAILs it, probe_amnesia=50% PASSes
    it."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("probe", "ok", verdict_amnesia=(s == 0)), TurnSpec("probe", "ok"),
              TurnSpec("probe", "ok")] for s in range(1)]
    specs += [[TurnSpec("plant", "ok"), TurnSpec("probe", "ok", verdict_amnesia=True), TurnSpec("probe", "ok")],
              [TurnSpec("plant", "ok"), TurnSpec("probe", "ok"), TurnSpec("chatter", "ok")]]
    world = build_world(specs, seed=8)
    run = tmp_path / "run"
    write_journal(run, world.records)
    write_snapshot(run, world)
    audit_run(run, gates=parse_gates("strict"))
    return run


# ---- 1. a gate set twice across flags ------------------------------------------------------------------------
def test_the_run_fails_strict_and_passes_a_50_percent_amnesia_gate(forgetful_run, capsys):
    """The premise of the tests below: which of two gates was used changes the verdict."""
    assert audit(capsys, forgetful_run, "--gate", "strict")[0] == 1
    assert audit(capsys, forgetful_run, "--gate", "probe_amnesia=50%")[0] == 0
    assert audit(capsys, forgetful_run, "--max-probe-amnesia", "0.5")[0] == 0
    assert audit(capsys, forgetful_run, "--max-probe-amnesia", "0.5", "--gate", "strict")[0] == 0  # an override


@pytest.mark.parametrize("args, named", [
    (["--gate", "probe_amnesia=0", "--gate", "probe_amnesia=50%"], ["'probe_amnesia=0'", "'probe_amnesia=50%'"]),
    (["--gate", "strict", "--gate", "lenient"], ["'strict'", "'lenient'"]),
    (["--gate", "probe_amnesia=0", "--max-probe-amnesia", "0.5"], ["--max-probe-amnesia 50%", "'probe_amnesia=0'"]),
    (["--max-probe-amnesia", "0.5", "--gate", "probe_amnesia=0"], ["--max-probe-amnesia 50%", "'probe_amnesia=0'"]),
    (["--gate", "lenient,crosstalk=0", "--max-crosstalk", "3"], ["--max-crosstalk 3", "crosstalk=0"]),
    (["--max-probe-amnesia", "0", "--max-probe-amnesia", "0.5"], ["'0'", "'0.5'"]),
])
def test_a_gate_set_twice_across_flags_is_refused_in_audit(forgetful_run, capsys, args, named):
    code, out, err = audit(capsys, forgetful_run, *args)
    assert code == 2, out + err
    assert all(name in err for name in named), err
    assert "PASS" not in out


def test_a_store_url_given_twice_is_refused_naming_both_with_the_password_masked(forgetful_run, capsys):
    code, _, err = audit(capsys, forgetful_run, "--store-url", "redis://:hunter2@127.0.0.1:1/0",
                         "--store-url", "redis://127.0.0.1:2/0")
    assert code == 2 and "--store-url" in err and "given twice" in err
    assert "127.0.0.1:1/0" in err and "127.0.0.1:2/0" in err and "hunter2" not in err


def test_the_audit_options_are_refused_twice_on_a_reused_parser_only_within_one_parse():
    """The check is per parse: a parser parsing two command lines (Locust parses more than once) takes each."""
    import argparse

    from oracle.options import add_gate_options, add_store_options

    parser = argparse.ArgumentParser()
    add_store_options(parser)
    add_gate_options(parser)
    assert parser.parse_args(["--gate", "lenient", "--store-url", "redis://a/0"]).gate == "lenient"
    assert parser.parse_args(["--gate", "strict", "--store-url", "redis://b/0"]).store_url == "redis://b/0"


def test_a_gate_set_twice_across_flags_is_refused_in_compare(tmp_path, capsys):
    base = synthetic(tmp_path / "a", seed=1)
    cand = synthetic(tmp_path / "b", crosstalk=3, seed=2)
    for args, named in ((["--gate", "crosstalk=0", "--gate", "crosstalk=5"], ["'crosstalk=0'", "'crosstalk=5'"]),
                        (["--gate", "crosstalk=0", "--max-crosstalk", "5"], ["--max-crosstalk 5", "'crosstalk=0'"]),
                        (["--max-crosstalk", "5", "--gate", "crosstalk=0"], ["--max-crosstalk 5", "'crosstalk=0'"]),
                        (["--gate", "strict", "--gate", "lenient"], ["'strict'", "'lenient'"])):
        try:
            code = compare.main([str(base), str(cand), *args])
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        assert code == 2, (args, captured.out)
        assert all(name in captured.err for name in named), captured.err
    assert compare.main([str(base), str(cand), "--gate", "strict", "--max-crosstalk", "5"]) == 0  # an override


# ---- 2. compare with a candidate that measured nothing -------------------------------------------------------
def test_compare_with_a_candidate_that_reached_no_bot_is_bad_input_naming_it(tmp_path, capsys):
    base = synthetic(tmp_path / "base", label="v1", seed=1)
    world = build_world([[TurnSpec("plant", "fail"), TurnSpec("probe", "fail")] for _ in range(3)], seed=9)
    world.gone = set(world.order)  # the bot was never reached: nothing stored
    cand = tmp_path / "cand"
    write_journal(cand, world.records)
    write_snapshot(cand, world)
    summary = audit_run(cand, gates=parse_gates("strict"))
    assert NOTHING_ACKNOWLEDGED in summary["verdict"]["failed"]
    assert audit(capsys, cand)[0] == 2  # its own audit: nothing measured
    code = compare.main([str(base), str(cand)])
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert str(cand) in captured.err and "nothing measured" in captured.err
    assert "no significant change" not in captured.out
    assert compare.main([str(cand), str(base)]) == 2  # a base that measured nothing compares nothing either
    assert "the base" in capsys.readouterr().err


def test_a_shorthand_rate_of_100_percent_is_refused_not_a_traceback(forgetful_run, capsys):
    """Found on the way: `oracle audit RUN --max-probe-amnesia 1` raised GateError out of the option parsing: a
    traceback and exit 3 ("a bug"), where compare refused it with exit 2."""
    code, out, err = audit(capsys, forgetful_run, "--max-probe-amnesia", "1")
    assert code == 2, out + err
    assert "--max-probe-amnesia" in err and "100%" in err and "Traceback" not in err + out
