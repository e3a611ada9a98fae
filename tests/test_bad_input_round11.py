"""Bad input, round 11 (hunt-input11 D8, m1, m2, m3, m6).

- D8: a NUL byte in a targets file's ``command`` (or its health URL / host) was written into the state folder's
  state.json and refused there, naming neither the targets file nor its line; after the targets file was fixed,
  every validate and run kept failing on the stale state.json, which did not say what to remove.
- m1: a script's ``repeat`` and ``burst`` took other scripts' digits and '_' (``"٣"`` and ``３`` were 3, ``1_0`` 10),
  as durations and gates no longer do.
- m2: a script's ``think: 2-1`` or ``think: 99999999`` said only "is not seconds or a range like 0.2-1.0".
- m3: a YAML merge key (``<<: *base``) was refused as "tag !!merge is not allowed", a tag the user never wrote.
- m6: Locust's ``--run-dir`` on a read-only mount said "is permission denied".
"""
from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from support_chaos import run_chaos
from support_locust import CHATFILE, LOCUST
from test_bad_input import assert_named

PLAN = "name: p\nfaults:\n  - {id: a, kind: pause, target: web, at: 1s, duration: 1s}\n"


def _validate(tmp_path, targets_text: str) -> subprocess.CompletedProcess:
    (tmp_path / "plan.yaml").write_text(PLAN)
    (tmp_path / "t.yaml").write_text(targets_text)
    return run_chaos("validate", "--backend", "local", "--targets", tmp_path / "t.yaml", tmp_path / "plan.yaml")


# ---- D8: NUL in a targets file, refused at its line, nothing written --------------------------------------------
@pytest.mark.parametrize("target, fragment", [
    ('{command: "sleep\\0 1000"}', "command: 'sleep\\x00 1000' holds a NUL character"),
    ('{command: [sleep, "10\\000"]}', "command: 'sleep 10\\x0000' holds a NUL character"),
    ('{command: sleep 1000, health: {http: "http://127.0.0.1:8000/\\0"}}', "health: http: "),
    ('{command: sleep 1000, health: {tcp: "a\\0b:80"}}', "health: tcp: 'a\\x00b:80' holds a NUL character"),
], ids=["command-string", "command-list", "health-http", "health-tcp"])
def test_a_nul_in_a_targets_file_is_refused_at_its_line_before_the_state_folder_is_written(target, fragment, tmp_path):
    done = _validate(tmp_path, f"targets:\n  web: {target}\n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"{tmp_path / 't.yaml'}:2: ", fragment)
    assert "NUL character" in done.stderr and "(target web)" in done.stderr, done.stderr
    assert "state.json" not in done.stderr, done.stderr
    assert not (tmp_path / ".t.state").exists()   # nothing written: the fixed file is read afresh

    fixed = _validate(tmp_path, "targets:\n  web: {command: sleep 1000}\n")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "1 target(s): web (not running)" in fixed.stdout, fixed.stdout


def test_a_member_the_state_files_reader_refuses_is_never_written(tmp_path):
    """The writer checks each member with the reader's own rule (registry.member_problem) before saving: whatever
    the targets file's checks miss, a state file that stops every later run is not written."""
    from targets import file as targets_file

    (tmp_path / "t.yaml").write_text("targets:\n  web: {command: sleep 1000}\n")
    targets = targets_file.load(tmp_path / "t.yaml")
    targets.members["web"]["cmd"] = ["sleep", "1\0"]   # as if a check of the file let it through
    with pytest.raises(targets_file.TargetsError) as info:
        targets_file.sync(targets)
    assert_named(str(info.value), f"{tmp_path / 't.yaml'}:2: cmd: ", "no NUL character")
    assert "(target web)" in str(info.value)
    assert not (tmp_path / ".t.state").exists()


@pytest.mark.parametrize("state", [
    {"version": 1, "members": {"web": {"cmd": ["sleep\0", "1000"], "cwd": "/", "log": "/tmp/x.log"}}},
    "garbage",
], ids=["nul-in-cmd", "not-json"])
def test_a_state_json_that_cannot_be_read_names_the_folder_to_remove(state, tmp_path):
    """The stale state.json of hunt 11 (written by an older goldfish): it must say which folder to remove."""
    folder = tmp_path / ".t.state"
    folder.mkdir()
    (folder / "state.json").write_text(state if isinstance(state, str) else json.dumps(state))
    done = _validate(tmp_path, "targets:\n  web: {command: sleep 1000}\n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"{folder / 'state.json'}: ", f"then remove the folder {folder} and run again")
    assert f"the state folder of {tmp_path / 't.yaml'}" in done.stderr, done.stderr

    subprocess.run(["rm", "-r", str(folder)], check=True)   # as the message says
    again = _validate(tmp_path, "targets:\n  web: {command: sleep 1000}\n")
    assert again.returncode == 0, again.stdout + again.stderr


# ---- m1: a script's repeat and burst in ASCII digits only --------------------------------------------------------
STEPS = "steps:\n  - plant: order number\n  - probe: order number\n"


@pytest.mark.parametrize("text, line, field, char", [
    ('repeat: "٣"\n' + STEPS, 1, "repeat", "'٣' (U+0663)"),
    ("repeat: ３\n" + STEPS, 1, "repeat", "'３' (U+FF13)"),
    ("repeat: 1_0\n" + STEPS, 1, "repeat", "'_' (U+005F)"),
    ("steps:\n  - plant: order number\n  - burst: ٣\n  - probe: order number\n", 3, "steps[1].burst", "'٣' (U+0663)"),
    ("steps:\n  - plant: order number\n  - burst: {turns: 1_0}\n  - probe: order number\n", 3, "steps[1].burst",
     "'_' (U+005F)"),
], ids=["arabic-indic", "full-width", "underscore", "burst-arabic-indic", "burst-turns-underscore"])
def test_a_script_count_in_another_scripts_digits_or_with_underscore_is_refused_at_its_line(text, line, field, char,
                                                                                           tmp_path):
    from locustfiles.script import ScriptError, load_script

    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScriptError) as info:
        load_script(path)
    assert_named(str(info.value), f"{path}:{line}: {field}: ", f"is not a whole number: it holds {char}")
    assert "ASCII digits 0-9, without '_'" in str(info.value)


@pytest.mark.parametrize("text, turns", [("repeat: 3\n" + STEPS, 6), ("repeat: +2\n" + STEPS, 4),
                                         ("steps:\n  - plant: order number\n  - burst: 3\n  - probe: order number\n", 5)])
def test_ascii_counts_are_still_taken(text, turns):
    from locustfiles.script import parse_script

    assert parse_script(text).turns == turns


# ---- m2: a script's think keeps the reason ------------------------------------------------------------------------
@pytest.mark.parametrize("think, reason", [
    ("2-1", "'2-1' is not seconds or a range like 0.2-1.0: it must have low <= high"),
    ("99999999", "'99999999' is not seconds or a range like 0.2-1.0: '99999999' is longer than the longest duration "
                 "allowed (1 days)"),
    ("0.1-99999999", "'0.1-99999999' is not seconds or a range like 0.2-1.0: '99999999' is longer than the longest "
                     "duration allowed (1 days)"),
    ("٣", "'٣' is not seconds or a range like 0.2-1.0: '٣' is not a duration: it holds '٣' (U+0663)"),
    ("nan", "'nan' is not seconds or a range like 0.2-1.0: 'nan' must be a finite duration >= 0"),
], ids=["low-above-high", "over-a-day", "high-over-a-day", "arabic-indic", "nan"])
def test_a_scripts_think_says_why_it_is_refused(think, reason, tmp_path):
    from locustfiles.script import ScriptError, load_script

    path = tmp_path / "s.yaml"
    path.write_text(f'steps:\n  - plant: order number\n  - think: "{think}"\n  - probe: order number\n')
    with pytest.raises(ScriptError) as info:
        load_script(path)
    assert_named(str(info.value), f"{path}:3: steps[1].think: ", reason)


@pytest.mark.parametrize("think", ["abc", "a-b", "-1", "1-"])
def test_a_scripts_think_that_is_no_duration_at_all_says_only_that(think):
    from locustfiles.script import ScriptError, parse_script

    with pytest.raises(ScriptError) as info:
        parse_script(f'steps:\n  - chatter\n  - think: "{think}"\n', "s.yaml")
    assert str(info.value) == f"s.yaml:3: steps[1].think: {think!r} is not seconds or a range like 0.2-1.0"


# ---- m3: a merge key is named as one ------------------------------------------------------------------------------
MERGE = "merge keys (<<) are not supported: write the keys out"


def test_a_merge_key_in_a_plan_is_named_at_its_line(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("x: &x {kind: kill, target: bot}\nfaults:\n  - <<: *x\n    at: 1s\n")
    done = run_chaos("validate", plan)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"{plan}:3: ", MERGE)
    assert "!!merge" not in done.stderr, done.stderr


def test_a_merge_key_in_a_targets_file_is_named_at_its_line(tmp_path):
    done = _validate(tmp_path, "base: &b {command: sleep 1000}\ntargets:\n  web:\n    <<: *b\n")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"{tmp_path / 't.yaml'}:4: ", MERGE)
    assert not (tmp_path / ".t.state").exists()


def test_a_merge_key_in_a_script_and_a_gates_file_is_named_at_its_line(tmp_path):
    from locustfiles.script import ScriptError, load_script
    from oracle.verdict import GateError, parse_gates

    script = tmp_path / "s.yaml"
    script.write_text("b: &b {plant: order number}\nsteps:\n  - <<: *b\n  - probe: order number\n")
    with pytest.raises(ScriptError) as info:
        load_script(script)
    assert_named(str(info.value), f"{script}:3: ", MERGE)

    gates = tmp_path / "gates.yaml"
    gates.write_text("<<: {errors: 3}\n")
    with pytest.raises(GateError) as info:
        parse_gates(str(gates))
    assert_named(str(info.value), f"{gates}:1: ", MERGE)


def test_an_unquoted_double_angle_as_a_value_says_to_quote_it():
    from contracts import yamldoc

    with pytest.raises(yamldoc.YamlError) as info:
        yamldoc.parse("steps:\n  - chatter: <<\n", "s.yaml")
    assert_named(str(info.value), "s.yaml:2: ", "<< unquoted is YAML's merge key; for the text, quote it: '<<'")
    assert yamldoc.value(yamldoc.parse("a: '<<'\n")) == {"a": "<<"}


# ---- m6: --run-dir on a read-only mount ---------------------------------------------------------------------------
@pytest.fixture
def read_only_mount(tmp_path):
    """A real read-only file system (tmpfs mounted ro; root only), unmounted afterwards."""
    where = tmp_path / f"ro-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(where)], capture_output=True)
    if made.returncode:
        pytest.skip(f"cannot mount a read-only tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_a_run_dir_on_a_read_only_mount_says_so(read_only_mount, tmp_path):
    run_dir = read_only_mount / "run"
    done = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "--only-summary", "-u", "1", "-r", "1", "-t", "5s",
                           "--host", "http://127.0.0.1:9", "--no-audit", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-2000:]
    assert (f"--run-dir {run_dir}: cannot write the run folder: {read_only_mount} is on a read-only file system"
            in output), output[-2000:]
    assert "permission denied" not in output and "Traceback" not in output, output[-2000:]

