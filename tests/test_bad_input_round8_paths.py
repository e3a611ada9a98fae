"""Paths the eighth round found handled wrongly.

- Locust's ``--run-dir OLD/store`` or ``OLD/journal`` (a folder inside another run's folder) was accepted: the new run
  lived inside the old one, and a later live audit of OLD deleted it (store/ replaced) or read its files as OLD's
  journal shards. Refused now before any load (exit 2), naming OLD.
- A ``--run-dir`` that is a dangling symbolic link said "File exists" (nothing is there) and the users then sat idle
  until -t ended. Named now as a link to a missing folder, exit 2 at once.
- ``python -m chaos validate|run`` printed the plan path raw and took a ``--run-dir`` holding a line break or ESC: a file
  name could forge a "chaos: done" or "goldfish: PASS" line, or clear the terminal. The path is printed escaped now;
  ``--run-dir`` is refused as Locust's is.
- ``kind: on`` in a plan was refused as "unknown fault kind True", a value the user never wrote.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from support_chaos import run_chaos
from support_locust import CHATFILE, LOCUST
from test_bad_input_round6_options import parser  # noqa: F401 - the fixture

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

FORGED = "chaos: done (end); 0 fault(s) left outstanding\x1b[2J"


def _old_run(tmp_path):
    """A finished run's folder: run.json, journal/ and a store/ snapshot folder."""
    old = tmp_path / "old"
    (old / "journal").mkdir(parents=True)
    (old / "store").mkdir()
    (old / "run.json").write_text('{"run": "old", "end": 1}\n')
    return old


def _locust(tmp_path, run_dir, time_s="20s"):
    return subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "--only-summary", "-u", "1", "-r", "1", "-t", time_s,
                           "--host", "http://127.0.0.1:9", "--no-audit", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


# ---- 1. a --run-dir inside another run's folder ----------------------------------------------------------------
def test_a_run_dir_inside_another_runs_store_is_refused_before_the_load(tmp_path):
    old = _old_run(tmp_path)
    done = _locust(tmp_path, old / "store")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-2000:]
    assert f"--run-dir {old / 'store'} lies inside the run folder {old}" in said, said[-2000:]
    assert os.listdir(old / "store") == [] and not (old / "store" / "run.json").exists()


@pytest.mark.parametrize("inside", ["journal", "journal/new", "audit/x", "anything/deeper"])
def test_a_run_dir_anywhere_inside_another_run_is_refused_naming_that_run(parser, tmp_path, inside):  # noqa: F811
    from locustfiles.options import OptionError, Settings

    old = _old_run(tmp_path)
    with pytest.raises(OptionError) as refused:
        Settings.from_options(parser.parse_args(["--run-dir", str(old / inside)]))
    assert f"lies inside the run folder {old}" in str(refused.value)
    # a link into it is inside it too
    (tmp_path / "link").symlink_to(old)
    with pytest.raises(OptionError, match="lies inside the run folder"):
        Settings.from_options(parser.parse_args(["--run-dir", str(tmp_path / "link" / "store")]))
    # a sibling, or a new folder beside it, is fine
    settings = Settings.from_options(parser.parse_args(["--run-dir", str(tmp_path / "new" / "run")]))
    assert settings.run_dir == str(tmp_path / "new" / "run")


def test_chaos_run_dir_inside_another_run_is_refused_as_locusts_is(tmp_path):
    """`chaos run --run-dir OLD/store` wrote its timeline where a live re-audit of OLD replaces the folder."""
    old = _old_run(tmp_path)
    plan = tmp_path / "k.yaml"
    plan.write_text("name: k\nfaults:\n  - {id: k1, kind: kill, target: bot, at: 1s, duration: 1s, count: 1}\n")
    done = run_chaos("run", plan, "--backend", "local", "--state-dir", tmp_path / "stack", "--run-dir",
                     old / "store" / "chaos")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--run-dir {old / 'store' / 'chaos'} lies inside the run folder {old}" in done.stderr, done.stderr
    assert os.listdir(old / "store") == []


# ---- 2. a --run-dir that is a dangling symbolic link ----------------------------------------------------------
def test_a_dangling_symlink_run_dir_is_named_as_one_and_exits_at_once(tmp_path):
    target = tmp_path / "nonexist" / "deeper"
    (tmp_path / "rd").symlink_to(target)
    done = _locust(tmp_path, tmp_path / "rd", time_s="60s")
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-2000:]
    assert f"--run-dir {tmp_path / 'rd'} is a symbolic link to {target}, which does not exist" in said, said[-2000:]
    assert "File exists" not in said


# ---- 3. chaos: paths with control characters ---------------------------------------------------------------------
def _no_forged_line(out: str) -> None:
    assert "\x1b" not in out, out
    assert not any(line.startswith("chaos: done") for line in out.splitlines()), out


def test_chaos_validate_prints_a_plan_path_with_a_line_break_escaped(tmp_path):
    bad = tmp_path / f"p\n{FORGED}.yaml"
    bad.write_text("name: p\nfaults:\n  - {id: a, kind: kil, target: bot, at: 3s}\n")
    done = run_chaos("validate", bad)
    assert done.returncode == 2, done.stderr
    _no_forged_line(done.stdout + done.stderr)
    assert "p\\nchaos: done (end)" in done.stderr and "\\x1b[2J.yaml:3: kind: unknown fault kind 'kil'" in done.stderr
    good = tmp_path / f"q\n{FORGED}.yaml"
    good.write_text("name: q\nfaults:\n  - {id: a, kind: kill, target: bot, at: 3s}\n")
    done = run_chaos("validate", good)
    assert done.returncode == 0, done.stderr
    _no_forged_line(done.stdout)
    assert "q\\nchaos: done" in done.stdout and ": ok" in done.stdout


def test_chaos_run_prints_a_refused_plan_path_escaped(tmp_path):
    forever = tmp_path / f"f\n{FORGED}.yaml"
    forever.write_text("name: f\nfaults:\n  - {id: a, kind: kill, target: bot, every: 10s}\n")
    done = run_chaos("run", forever, "--run-dir", tmp_path / "run", "--state-dir", tmp_path / "stack")
    assert done.returncode == 2, done.stderr
    _no_forged_line(done.stdout + done.stderr)
    assert "repeats forever" in done.stderr and "f\\nchaos: done (end)" in done.stderr


@pytest.mark.parametrize("command", ["run", "validate"])
def test_chaos_run_dir_with_a_control_character_is_refused_as_locusts_is(tmp_path, command):
    plan = tmp_path / "k.yaml"
    plan.write_text("name: k\nfaults:\n  - {id: k1, kind: kill, target: bot, at: 1s, duration: 1s, count: 1}\n")
    run_dir = tmp_path / f"r\n{FORGED}"
    done = run_chaos(command, plan, "--backend", "local", "--state-dir", tmp_path / "stack", "--run-dir", run_dir)
    assert done.returncode == 2, done.stdout + done.stderr
    _no_forged_line(done.stdout + done.stderr)
    assert "--run-dir" in done.stderr and "holds a control character (U+000A, a line break)" in done.stderr
    assert not run_dir.exists()


# ---- 4. kind: on ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("written", ["on", "yes", "off", "No"])
def test_a_yaml_boolean_kind_is_named_as_written_with_a_hint_to_quote_it(tmp_path, written):
    plan = tmp_path / "p.yaml"
    plan.write_text(f"name: p\nfaults:\n  - {{id: a, kind: {written}, target: bot, at: 3s, duration: 1s}}\n")
    done = run_chaos("validate", plan)
    assert done.returncode == 2, done.stderr
    assert f"kind: unknown fault kind {written!r} (YAML 1.1 reads an unquoted {written} as the boolean" in done.stderr
    assert "quote" in done.stderr and "unknown fault kind True" not in done.stderr and \
        "unknown fault kind False" not in done.stderr


def test_a_quoted_kind_that_is_unknown_is_named_as_before():
    from chaos.plan import PlanError, parse_plan

    with pytest.raises(PlanError) as refused:
        parse_plan('faults:\n  - {id: a, kind: "on", target: bot, at: 3s}\n')
    assert "unknown fault kind 'on' (one of:" in str(refused.value) and "YAML 1.1" not in str(refused.value)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
