"""Bad input found by the sixth hunt (/tmp/hunt-input5): option values that are empty (an unset shell variable)
and were silently the default, a --label that holds control characters, and the empty folder a chaos dry run
left behind.

- Locust: ``--chaos ''`` ran the chaos test with no chaos at all and passed; an empty --label, --script, --think,
  --run-dir, --stack-state, --chaos-backend, --reply-format, --chat-method, --body-format, --body or --start-body
  was the default without a word (``--store-url ''`` and ``--gate ''`` were refused). Now refused, exit 2, naming
  the option, on the command line and in a config file; options whose empty value means something
  (``--session-field ''``, ``--reply-field ''``) still take it, and the web UI's form still reads an empty field
  as the default;
- a --label with a line break or an escape sequence (it forged a verdict line in ``oracle compare``): exit 2;
- ``python -m chaos run|validate --state-dir ''`` (``--targets ''``, ``--run-dir ''``) and ``python -m refbot
  up|down|status|demo --state-dir ''`` used the default stack in ./.stack: exit 2, naming the option;
- ``python -m chaos run --dry-run`` (and a run refused before its start) left an empty results/chaos-<time>/.

The CLIs run as real processes (a few seconds each); the Locust options' table runs in-process with the
parser test_bad_input.py builds (Locust itself is not imported in this process).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support_locust import CHATFILE, LOCUST, chat_bot
from test_bad_input import LocustLikeParser

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

REPO = Path(__file__).resolve().parent.parent
EMPTY = "empty (an unset variable?)"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "REFBOT_STATE_DIR"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _module(cwd: Path, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m ...`` run from ``cwd`` (not the repo: a ./.stack there is somebody's stack)."""
    return subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=_env())


@pytest.fixture(scope="module")
def parser():
    from locustfiles import options

    p = LocustLikeParser(prog="locust")
    options.add_arguments(p)
    return p


def _settings(parser, argv, capsys):
    """Settings.from_options of ``argv`` as Locust's init builds them; (exit code, message) when refused."""
    from locustfiles.options import OptionError, Settings

    try:
        return Settings.from_options(parser.parse_args(argv)), 0, ""
    except SystemExit as exc:
        captured = capsys.readouterr()
        return None, exc.code, captured.err + captured.out
    except OptionError as exc:
        return None, 2, str(exc)


# ---- 1. an empty Locust option that can only be an unset variable ---------------------------------------------
REFUSED_EMPTY = ["--label", "--script", "--think", "--chaos", "--chaos-backend", "--stack-state", "--run-dir",
                 "--reply-format", "--chat-method", "--body-format", "--body", "--start-body"]


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "blank"])
@pytest.mark.parametrize("option", REFUSED_EMPTY)
def test_an_empty_locust_option_is_refused_naming_it(parser, capsys, option, value):
    """Each was silently its default: --chaos '' no chaos (a PASS), --label '' the run filed under dev,
    --run-dir '' results/<time>-dev, --stack-state '' the stack in ./.stack."""
    settings, code, said = _settings(parser, [option, value], capsys)
    assert code == 2, (option, settings)
    assert option in said and EMPTY in said and "leave the option out" in said, said


def test_options_whose_empty_value_means_something_still_take_it(parser, capsys):
    """--session-field '' (the id is in a header, the path or a cookie) and --reply-field '' (the JSON value is the
    text) are documented; an option left out is its default."""
    settings, code, said = _settings(parser, ["--session-field", "", "--session-header", "X-Session"], capsys)
    assert code == 0 and settings.session_field == "" and settings.session_header == "X-Session", said
    settings, code, said = _settings(parser, ["--reply-field", ""], capsys)
    assert code == 0 and settings.reply_field == "", said
    settings, code, said = _settings(parser, [], capsys)
    assert code == 0 and settings.label == "dev" and settings.chaos == "" and settings.body == "", said
    assert settings.stack_state == ".stack/state.json" and settings.chat_method == "POST"


def test_an_empty_chaos_of_a_real_locust_run_is_refused_before_any_load(tmp_path):
    """`locust ... --chaos "$PLAN"` with $PLAN unset ran the chaos test without chaos: PASS, exit 0. Also
    `chaos =` in a config file. Now exit 2 naming --chaos, and no run folder."""
    conf = tmp_path / "bot.conf"
    conf.write_text("chaos =\n")
    with chat_bot("memory") as url:
        for n, extra in enumerate((["--chaos", ""], ["--config", str(conf)])):
            run = tmp_path / f"run{n}"
            done = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "-u", "1", "-r", "1", "-t", "3s",
                                   "--host", url, "--run-dir", str(run), *extra], capture_output=True, text=True,
                                  timeout=60, cwd=tmp_path)
            said = done.stdout + done.stderr
            assert done.returncode == 2, (extra, said[-3000:])
            assert "--chaos" in said and EMPTY in said, said[-2000:]
            assert "PASS" not in said and not run.exists()


# ---- 3. control characters in --label ----------------------------------------------------------------------
FORGED = "v9\nverdict: v9 against base: BETTER -> exit 0\x1b[2K"


@pytest.mark.parametrize("label", [FORGED, "v1\x1b[31m", "v1\r", "v1\u202e2v", "v1\u2028x", "a\tb"],
                         ids=["newline", "escape", "return", "bidi-override", "line-separator", "tab"])
def test_a_label_with_a_control_character_is_refused(parser, capsys, label):
    """A label is printed raw by `oracle compare` and `trend`: a line break in it forged a verdict line."""
    settings, code, said = _settings(parser, ["--label", label], capsys)
    assert code == 2 and "--label" in said and "control character" in said, (settings, said)
    assert "\n" not in said and "\x1b" not in said  # the message shows it escaped


def test_a_printable_label_is_taken(parser, capsys):
    for label in ("v1.4.2", "release 2 ünï", "v1/β"):
        settings, code, said = _settings(parser, ["--label", label], capsys)
        assert code == 0 and settings.label == label, said


def test_a_label_with_a_line_break_stops_a_real_locust_run(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "-u", "1", "-r", "1", "-t", "2s",
                           "--host", "http://127.0.0.1:9", "--no-audit", "--run-dir", str(run), "--label", FORGED],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "--label" in said and "control character" in said, said[-2000:]
    assert not run.exists()


def test_the_web_ui_form_still_reads_an_empty_field_as_the_default_and_refuses_a_control_character(tmp_path):
    """The form sets values itself (not through argparse): an empty --label or --chaos field there is the default,
    as before; a label with a line break is refused there too. Run in a child: importing Locust patches ssl."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from werkzeug.datastructures import MultiDict
        from test_bad_input import LocustLikeParser
        from locustfiles import options, webui
        p = LocustLikeParser(prog="locust")
        options.add_arguments(p)
        parsed = p.parse_args(["--run-dir", {str(tmp_path / 'run')!r}])
        print("empty:", webui.check_form(parsed, MultiDict({{"label": "", "chaos": "", "body": ""}})))
        print("forged:", webui.check_form(parsed, MultiDict({{"label": "v9\\nverdict: PASS"}})))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "empty: None" in done.stdout, done.stdout
    assert "forged: --label:" in done.stdout and "control character" in done.stdout, done.stdout


# ---- 2. chaos and refbot: an empty --state-dir was the default stack ---------------------------------------
@pytest.mark.parametrize("argv", [
    ["run", "PLAN", "--state-dir", ""], ["run", "PLAN", "--targets", " "], ["run", "PLAN", "--run-dir", ""],
    ["run", "PLAN", "--state-dir", "", "--dry-run"], ["validate", "PLAN", "--state-dir", ""],
    ["validate", "--targets", ""]], ids=lambda a: " ".join(x if x.strip() else repr(x) for x in a))
def test_an_empty_chaos_option_is_refused_not_the_default_stack(tmp_path, argv):
    """With a ./.stack in the working folder, `chaos run PLAN --state-dir ''` acted on that stack."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("duration: 1\nfaults:\n  - {kind: pause, target: bot, at: 0s, duration: 1s}\n")
    argv = [str(plan) if a == "PLAN" else a for a in argv]
    option = next(a for a in argv if a.startswith("--") and a != "--dry-run")
    done = _module(tmp_path, "chaos", *argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"argument {option}: the value is {EMPTY}" in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", ["status", "down", "up", "demo"])
def test_an_empty_refbot_state_dir_is_refused_not_the_default_stack(tmp_path, command):
    """`refbot down --state-dir ''` stopped the stack in ./.stack; `status` showed it (or said nothing is up)."""
    done = _module(tmp_path, "refbot", command, "--state-dir", "", timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"argument --state-dir: the value is {EMPTY}" in done.stderr, done.stderr
    assert not (tmp_path / ".stack").exists()


# ---- 4. no empty chaos folder from a dry run or a refused run ----------------------------------------------
@pytest.fixture
def own_process(tmp_path):
    """A process of this test, named in a targets file (pid_file): what a plan may pause."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)  # chaos never signals its own group
    (tmp_path / "s.pid").write_text(str(proc.pid))
    (tmp_path / "t.yaml").write_text("targets:\n  s:\n    pid_file: s.pid\n")
    try:
        yield tmp_path / "t.yaml"
    finally:
        proc.kill()
        proc.wait(10)


def test_a_dry_run_or_a_refused_run_leaves_no_empty_run_folder(tmp_path, own_process):
    plan = tmp_path / "plan.yaml"
    plan.write_text("duration: 2\nfaults:\n  - {kind: pause, target: s, at: 0s, duration: 500ms}\n")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("duration: 2\nfaults:\n  - {kind: pause, target: nosuch, at: 0s, duration: 500ms}\n")
    done = _module(tmp_path, "chaos", "run", plan, "--targets", own_process, "--dry-run")
    assert done.returncode == 0 and "pause for 0.5s on s" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "results").exists()  # the default results/chaos-<time>/ and results/ itself
    done = _module(tmp_path, "chaos", "run", plan, "--targets", own_process, "--dry-run", "--run-dir", "a/b")
    assert done.returncode == 0 and not (tmp_path / "a").exists(), done.stderr
    done = _module(tmp_path, "chaos", "run", wrong, "--targets", own_process)  # refused before its start
    assert done.returncode == 2 and "nosuch" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "results").exists()
    done = _module(tmp_path, "chaos", "validate", plan, "--targets", own_process, "--run-dir", "v/w")
    assert done.returncode == 0 and not (tmp_path / "v").exists(), done.stdout + done.stderr
    kept = tmp_path / "kept"
    kept.mkdir()
    done = _module(tmp_path, "chaos", "run", plan, "--targets", own_process, "--dry-run", "--run-dir", kept)
    assert done.returncode == 0 and kept.is_dir()  # a folder that was there before stays


def test_a_real_run_keeps_its_folder_and_timeline(tmp_path, own_process):
    """Nothing recorded is lost: a run that ran keeps results/chaos-<time>/chaos.jsonl."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("duration: 1\nfaults:\n  - {kind: pause, target: s, at: 0s, duration: 300ms}\n")
    done = _module(tmp_path, "chaos", "run", plan, "--targets", own_process)
    assert done.returncode == 0, done.stdout + done.stderr
    folders = list((tmp_path / "results").glob("chaos-*"))
    assert len(folders) == 1 and (folders[0] / "chaos.jsonl").stat().st_size > 0
