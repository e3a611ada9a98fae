"""Bad input to the local backend (#16, continued): a targets file, the pid file it names, and a stack's
``state.json`` that are FIFOs, /dev/zero, not UTF-8, nested too deeply or hold fields of the wrong type,
and a ``--stack-state`` that names another file than ``state.json``.

Each is exit 2 (or the exception Locust's init turns into exit 2) with one message naming the file and
the field, never a hang (a FIFO without a writer), never memory without bound (/dev/zero), never a
traceback, and always before any fault is applied. Everything runs in-process, like test_bad_input.py.
"""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_bad_input import assert_named

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(30)]

PLAN = "duration: 2s\nfaults:\n  - {kind: kill, target: bot-1, at: 0s, duration: 1s}\n"


def not_regular(tmp_path: Path, kind: str, name: str) -> tuple[Path, str]:
    """A FIFO (no writer: reading it never starts) or a link to /dev/zero (reading it never ends) named ``name``."""
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
        return path, "not a regular file but a FIFO"
    path.symlink_to("/dev/zero")
    return path, "not a regular file but a character device"


# ---- a targets file, and the pid file it names: `chaos validate --targets FILE`, `--stack-state FILE` ---------
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_targets_file_that_is_not_a_regular_file_is_refused_unread(kind, tmp_path, capsys):
    """It hung on a FIFO and read /dev/zero until a MemoryError traceback (exit 1)."""
    from chaos.__main__ import main
    from locustfiles.endofrun import check_chaos
    from targets.file import TargetsError

    path, why = not_regular(tmp_path, kind, "targets.yaml")
    assert main(["validate", "--targets", str(path)]) == 2
    assert_named(capsys.readouterr().err, f"{path}: cannot read targets file: {why}", why)
    (tmp_path / "plan.yaml").write_text(PLAN)
    settings = SimpleNamespace(chaos=str(tmp_path / "plan.yaml"), chaos_backend="local", stack_state=str(path))
    with pytest.raises(TargetsError, match=f"{path}: cannot read targets file: {why}"):
        check_chaos(settings)  # Locust's init: "error: chaos plan ...", exit 2


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_pid_file_that_is_not_a_regular_file_is_refused_by_file_line_and_field(kind, tmp_path, capsys):
    """`pid_file: /dev/zero` read all of /dev/zero (MemoryError) before keeping its first 4096 bytes."""
    from chaos.__main__ import main
    from targets.registry import adopt_pid_file

    pid_file, why = not_regular(tmp_path, kind, "web.pid")
    targets = tmp_path / "targets.yaml"
    targets.write_text(f"targets:\n  web:\n    pid_file: {pid_file}\n")
    assert main(["validate", "--targets", str(targets)]) == 2
    assert_named(capsys.readouterr().err, f"{targets}:3: pid_file: {pid_file}: {why} (target web)", "pid_file")
    assert not (tmp_path / ".targets.state").exists()  # refused before its registry was written
    # one that becomes a FIFO or a device after validation: adoption says why not, at once
    member = {"name": "web", "pid": None, "pid_file": str(pid_file)}
    assert adopt_pid_file(member) == f"pid file {pid_file}: {why}" and member["pid"] is None


# ---- a stack's state.json: `chaos validate|run PLAN --backend local --state-dir DIR` ------------------------
def good_state(d: Path) -> dict:
    return {"version": 1, "dir": str(d), "haproxy_socket": None, "members": {"bot-1": {
        "name": "bot-1", "role": "bot", "pid": None, "pid_start": None, "port": 8001, "cmd": ["sleep", "100"],
        "env": {"A": "1"}, "cwd": str(d), "log": str(d / "bot-1.log"), "health": {}, "lb_server": "bots/bot-1"}}}


def validate(d: Path, capsys) -> tuple[int, str]:
    from chaos.__main__ import main

    (d / "plan.yaml").write_text(PLAN)
    code = main(["validate", str(d / "plan.yaml"), "--backend", "local", "--state-dir", str(d)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_state_json_that_is_not_a_regular_file_is_refused_unread(kind, tmp_path, capsys):
    """A FIFO hung; /dev/zero gave "cannot resolve 'bot-1' ...: " with no reason at all."""
    path, why = not_regular(tmp_path, kind, "state.json")
    code, err = validate(tmp_path, capsys)
    assert code == 2
    assert_named(err, f"{path}: cannot read the state file: {why}", "cannot resolve 'bot-1'")


@pytest.mark.parametrize("name, content, fragment", [
    ("not-utf8", b'{"version": 1, "members": {"\xff\xfe": {}}}', "not valid JSON (not UTF-8 text"),
    ("nested-100000-deep", b"[" * 100_000, "not valid JSON (nested too deeply)"),
    ("torn", b'{"version": 1, "memb', "not valid JSON"),
], ids=["not-utf8", "nested-100000-deep", "torn"])
def test_a_state_json_that_is_not_json_names_the_file(name, content, fragment, tmp_path, capsys):
    """Bare codec or recursion text that named no file."""
    (tmp_path / "state.json").write_bytes(content)
    code, err = validate(tmp_path, capsys)
    assert code == 2
    assert_named(err, f"{tmp_path / 'state.json'}: {fragment}", fragment)


def member_edit(field, value):
    return lambda st: st["members"]["bot-1"].__setitem__(field, value)


STATE_FIELDS = [
    ("pid-a-word", member_edit("pid", "x"), "members.bot-1.pid: must be a pid", "not 'x'"),
    ("pid-negative", member_edit("pid", -5), "members.bot-1.pid: must be a pid", "not -5"),
    ("pid-init", member_edit("pid", 1), "members.bot-1.pid: must be a pid", "1 is init"),
    ("pid-huge", member_edit("pid", 10 ** 30), "members.bot-1.pid: must be a pid", "not 1000"),
    ("pid-true", member_edit("pid", True), "members.bot-1.pid: must be a pid", "not True"),
    ("pid-float", member_edit("pid", 123.5), "members.bot-1.pid: must be a pid", "not 123.5"),
    ("pid_start-a-word", member_edit("pid_start", "early"), "members.bot-1.pid_start: must be clock ticks", "early"),
    ("port-a-string", member_edit("port", "8001"), "members.bot-1.port: must be a port", "not '8001'"),
    ("port-too-big", member_edit("port", 70000), "members.bot-1.port: must be a port", "not 70000"),
    ("cmd-a-string", member_edit("cmd", "sleep 100"), "members.bot-1.cmd: must be a list of strings", "'sleep 100'"),
    ("cmd-empty", member_edit("cmd", []), "members.bot-1.cmd: must be a list of strings", "not []"),
    ("cmd-numbers", member_edit("cmd", ["sleep", 100]), "members.bot-1.cmd: must be a list of strings", "100"),
    ("cmd-nul", member_edit("cmd", ["sle\0ep"]), "members.bot-1.cmd: must be a list of strings", "sle"),
    ("env-a-list", member_edit("env", ["A=1"]), "members.bot-1.env: must be a mapping of NAME: string", "A=1"),
    ("env-null", member_edit("env", None), "members.bot-1.env: must be a mapping", "not None"),
    ("env-a-number-value", member_edit("env", {"A": 1}), "members.bot-1.env: must be a mapping", "{'A': 1}"),
    ("env-name-with-equals", member_edit("env", {"A=B": "1"}), "members.bot-1.env: must be a mapping", "A=B"),
    ("cwd-a-number", member_edit("cwd", 3), "members.bot-1.cwd: must be a directory", "not 3"),
    ("log-empty", member_edit("log", ""), "members.bot-1.log: must be a file", "not ''"),
    ("cwd-missing", lambda st: st["members"]["bot-1"].pop("cwd"), "members.bot-1.cwd: missing", "cwd"),
    ("health-unknown-check", member_edit("health", {"ftp": "x"}), "members.bot-1.health: must be one check", "ftp"),
    ("health-tcp-port-a-word", member_edit("health", {"tcp": ["127.0.0.1", "x"]}), "members.bot-1.health", "'x'"),
    ("health-http-a-number", member_edit("health", {"http": 3}), "members.bot-1.health", "3"),
    ("health-null", member_edit("health", None), "members.bot-1.health", "not None"),
    ("role-a-list", member_edit("role", ["bot"]), "members.bot-1.role: must be a string", "['bot']"),
    ("lb_server-with-a-newline", member_edit("lb_server", "bots/bot-1\nshutdown"),
     "members.bot-1.lb_server: must be HAProxy's backend/server", "shutdown"),
    ("pid_file-a-number", member_edit("pid_file", 3), "members.bot-1.pid_file: must be a file", "not 3"),
    ("member-a-string", lambda st: st["members"].__setitem__("bot-1", "sleep"), "members.bot-1: must be a mapping",
     "'sleep'"),
    ("members-a-list", lambda st: st.__setitem__("members", ["bot-1"]), "members: must be a mapping", "['bot-1']"),
    ("haproxy_socket-a-number", lambda st: st.__setitem__("haproxy_socket", 3), "haproxy_socket: must be", "not 3"),
]


@pytest.mark.parametrize("name, edit, field, fragment", STATE_FIELDS, ids=[s[0] for s in STATE_FIELDS])
def test_a_state_member_field_of_the_wrong_type_is_refused_by_validate(name, edit, field, fragment, tmp_path, capsys):
    """`"pid": "x"` passed validate (exit 0), then `run` recorded a TypeError for apply and recover (exit 1)."""
    st = good_state(tmp_path)
    edit(st)
    (tmp_path / "state.json").write_text(json.dumps(st))
    code, err = validate(tmp_path, capsys)
    assert code == 2
    assert_named(err, f"{tmp_path / 'state.json'}: {field}", fragment)


def test_a_good_state_json_passes_validate(tmp_path, capsys):
    """The checks refuse only what a backend would trip over: a state as refbot and chaos write it passes."""
    st = good_state(tmp_path)
    st["haproxy_socket"] = ["127.0.0.1", 9999]
    st["members"]["bot-1"].update(pid=os.getpid(), health={"tcp": ["127.0.0.1", 8001]}, cmd=["redis-server", "--save", ""])
    st["members"]["redis"] = {"role": "redis", "pid": None, "port": 6379, "cmd": None, "env": {}, "cwd": str(tmp_path),
                              "log": str(tmp_path / "r.log"), "health": {"redis": "redis://127.0.0.1:6379/0"}}
    (tmp_path / "state.json").write_text(json.dumps(st))
    code, err = validate(tmp_path, capsys)
    assert code == 0, err


def test_chaos_run_on_a_member_with_a_wrong_field_is_exit_2_before_anything_is_touched(tmp_path, capsys):
    """The hunt's F11: exit 1 "NOT healed" after TypeErrors; now refused before the first fault."""
    from chaos.__main__ import main

    st = good_state(tmp_path)
    st["members"]["bot-1"]["pid"] = "x"
    (tmp_path / "state.json").write_text(json.dumps(st))
    (tmp_path / "plan.yaml").write_text(PLAN)
    run = tmp_path / "run"
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert main(["run", str(tmp_path / "plan.yaml"), "--backend", "local", "--state-dir", str(tmp_path),
                 "--run-dir", str(run)]) == 2
    # given back: a handler left behind turned a later test's Ctrl-C into chaos's Interrupted (test_refbot_stack)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    captured = capsys.readouterr()
    assert_named(captured.err, f"{tmp_path / 'state.json'}: members.bot-1.pid: must be a pid", "not 'x'")
    assert "apply" not in captured.out and "NOT healed" not in captured.out, captured.out
    timeline = run / "chaos.jsonl"
    assert not timeline.exists() or '"apply"' not in timeline.read_text()
    assert json.loads((tmp_path / "state.json").read_text()) == st  # untouched


# ---- Locust's --stack-state: a targets file (.yaml/.yml) or a stack's state.json, nothing else --------------
def test_a_stack_state_named_otherwise_than_state_json_is_refused(tmp_path):
    """`--stack-state ss2/mystate.json` read ss2/state.json and named that file in its errors; chaos could act on
    whatever state.json sat beside the file given."""
    from chaos.backends.local import stack_options
    from locustfiles.endofrun import check_chaos

    mine = tmp_path / "mystate.json"
    st = good_state(tmp_path)
    mine.write_text(json.dumps(st))
    other = dict(st, members={"bot-1": dict(st["members"]["bot-1"], pid=os.getppid())})
    (tmp_path / "state.json").write_text(json.dumps(other))   # another stack's, beside it
    (tmp_path / "plan.yaml").write_text(PLAN)
    settings = SimpleNamespace(chaos=str(tmp_path / "plan.yaml"), chaos_backend="local", stack_state=str(mine))
    with pytest.raises(ValueError) as err:
        check_chaos(settings)  # Locust's init: "error: chaos plan ...: <this>", exit 2
    assert_named(str(err.value), f"--stack-state {mine}: a stack's state file is named state.json", ".yaml or .yml")
    assert stack_options(str(tmp_path / "state.json")) == {"state_dir": str(tmp_path)}
    with pytest.raises(ValueError, match="is named state.json"):
        stack_options(str(tmp_path))  # a folder is not the file either


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
