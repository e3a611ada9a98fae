"""Bad input, round 10 (hunt-input10 W6-W8): a script name that forges an output line, a snapshot line whose
key exists but whose entries are null or missing (the bot blamed for a damaged file), and durations written with
another script's digits or with '_' (read as 5 s / 10 s).
"""
from __future__ import annotations

import json

import pytest

from test_bad_input import assert_named
from test_bad_input_oracle import SESSIONS, audit_copy, snapshot_line, snapshot_run

__all__ = ["snapshot_run"]  # a fixture: pytest finds it by name, here

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# ---- W6: a script's name with a control character ---------------------------------------------
@pytest.mark.parametrize("name, code", [(r"x\ngoldfish: verdict PASS (forged)", "U+000A, a line break"),
                                        (r"x\rgoldfish", "U+000D, a line break"), (r"x\e[2Jy", "U+001B"),
                                        (r"x\u202Ey", "U+202E"), (r"x\ty", "U+0009")],
                         ids=["newline", "carriage-return", "escape", "rtl-override", "tab"])
def test_a_script_name_with_a_control_character_is_refused_at_its_line(name, code, tmp_path):
    """`name: "x\\ngoldfish: verdict PASS (forged)"` was accepted and printed raw in "run folder ... (script
    NAME, ...)": a forged line. --label and --run-dir already refuse control characters."""
    from locustfiles.script import ScriptError, load_script

    path = tmp_path / "s.yaml"
    path.write_text(f'steps:\n  - plant: code\n  - probe: code\nname: "{name}"\n')
    with pytest.raises(ScriptError) as info:
        load_script(path)
    message = str(info.value)
    assert message.startswith(f"{path}:4: name: "), message
    assert f"control character ({code})" in message, message
    assert "\n" not in message and "\x1b" not in message and "\u202e" not in message, message


@pytest.mark.parametrize("name", ["support", "ünïcode näme", "a, b (c) #1"])
def test_a_printable_script_name_is_still_taken(name):
    from locustfiles.script import parse_script

    assert parse_script(f'name: "{name}"\nsteps:\n  - chatter\n').name == name


# ---- W7: a snapshot line with exists: true and entries null or missing --------------------------
@pytest.mark.parametrize("entries_as", ["text", "json"])
@pytest.mark.parametrize("damage", ["null", "missing"])
def test_an_existing_key_with_null_or_missing_entries_is_exit_2_naming_file_and_line(damage, entries_as, snapshot_run,
                                                                                      tmp_path, capsys):
    """Was a FAIL, exit 1, "acknowledged turns the store lost": a damaged snapshot blamed on the bot. A key that
    exists holds a list (Redis has no empty list); goldfish writes a missing key as exists: false."""
    line = snapshot_line(entries_as=entries_as)
    if damage == "null":
        line["entries"] = None
    else:
        del line["entries"]

    def write(run):
        (run / "store" / SESSIONS).write_text(json.dumps(line) + "\n")

    code, err, run = audit_copy(snapshot_run, tmp_path, write, capsys)
    assert code == 2, err
    assert_named(err, f"{run / 'store' / SESSIONS}:1: not a snapshot line", "$.entries")
    assert "`$.exists` is true" in err, err


@pytest.mark.parametrize("entries", [[], None, "missing"], ids=["as-goldfish-writes-it", "null", "missing"])
def test_a_missing_key_is_still_read_as_lost_not_refused(entries, snapshot_run, tmp_path, capsys):
    """A snapshot of a key that does not exist (goldfish writes `"exists": false, "entries": []`) is evidence the
    store lost the session: a verdict (FAIL, exit 1), not a damaged file."""
    line = snapshot_line(exists=False, type="none", entries=entries)
    if entries == "missing":
        del line["entries"]

    def write(run):
        (run / "store" / SESSIONS).write_text(json.dumps(line) + "\n")

    code, err, _ = audit_copy(snapshot_run, tmp_path, write, capsys)
    assert code == 1, err
    assert "not a snapshot line" not in err and "Traceback" not in err, err


def test_snapshot_session_refuses_an_existing_key_without_entries():
    """The judge's own reader of a line (oracle/snapshot.py snapshot_session) says the same, for either encoding."""
    from oracle.snapshot import snapshot_session

    for entries_as in ("text", "json"):
        line = snapshot_line(entries_as=entries_as, entries=None)
        with pytest.raises(ValueError, match="entries is null or missing, but exists is true"):
            snapshot_session(json.dumps(line).encode())
    assert snapshot_session(json.dumps(snapshot_line(exists=False, entries=None)).encode()).entries == []


# ---- W8: durations with non-ASCII digits or '_' ------------------------------------------------
@pytest.mark.parametrize("text, bad", [("٥s", "U+0665"), ("５s", "U+FF15"), ("１_０", "U+FF11"), ("1_0", "U+005F"),
                                       ("1_0s", "U+005F"), ("٣", "U+0663"), ("1m٣0s", "U+0663"), ("5ｓ", "U+FF53"),
                                       ("0.٥", "U+0665")])
def test_a_duration_is_ascii_digits_only(text, bad):
    """`\\d` matched any script's digits and float() took them (and '_'): `at: "٥s"` was 5 s, `--window 1_0` 10 s."""
    from contracts.durations import DurationError, parse_duration

    with pytest.raises(DurationError) as info:
        parse_duration(text, "at")
    message = str(info.value)
    assert message.startswith(f"at: {text!r} is not a duration: it holds "), message
    assert bad in message and "ASCII digits 0-9 (no '_')" in message, message


@pytest.mark.parametrize("text, seconds", [("5s", 5), ("10", 10), ("1m30s", 90), ("0.5s", 0.5), ("500ms", 0.5),
                                           (" 2 ", 2), ("1h5m", 3900)])
def test_ascii_durations_still_read(text, seconds):
    from contracts.durations import parse_duration

    assert parse_duration(text) == pytest.approx(seconds)


def test_a_plan_time_in_arabic_indic_digits_is_refused_at_its_line():
    from chaos.plan import PlanError, parse_plan

    with pytest.raises(PlanError) as info:
        parse_plan('faults:\n  - {kind: kill, target: bot, at: "٥s"}\n', "p.yaml")
    assert "p.yaml:2: at: '٥s' is not a duration" in str(info.value), info.value


def test_an_audit_window_in_full_width_digits_is_refused(capsys):
    from oracle.audit_cli import main

    with pytest.raises(SystemExit) as info:
        main(["/nonexistent-run", "--window", "１_０"])
    assert info.value.code == 2
    assert_named(capsys.readouterr().err, "argument --window: '１_０' is not a duration", "U+FF11")


def test_a_script_think_in_full_width_digits_is_refused_at_its_line():
    from locustfiles.script import ScriptError, parse_script

    with pytest.raises(ScriptError, match=r"^s.yaml:3: steps\[1\].think: '５' is not seconds"):
        parse_script("steps:\n  - chatter\n  - think: '５'\n", "s.yaml")
