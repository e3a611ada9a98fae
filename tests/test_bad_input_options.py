"""Bad input, continued (#16): option values the first corpus (test_bad_input.py) let through.

- `python -m refbot up|down|status`: every number in its range (NaN and infinity in none), a release that is
  a name, a --state-dir that is a directory: exit 2 naming the option and the value, nothing started;
- Locust's options: --start-body checked without --start-path, --audit-every and --telemetry-interval at
  least a second, `-t 0` refused headless (Locust reads it as no limit);
- chaos plans: ids that are names, env names Popen takes, no NUL in a text parameter, a second BOM; the dry
  run of a plan of 100,000 occurrences is bounded.

The refbot and two Locust cases run the real commands (a bad value must stop them before anything starts);
the rest runs in-process with test_bad_input.py's helpers.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from chaos.backend import Backend
from support_locust import chat_bot, run_locust
from support_refbot import REPO, processes_mentioning, refbot_cli
from test_bad_input import LocustLikeParser, assert_named, init_exit, marked_line

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# ---- python -m refbot up ----------------------------------------------------------------------
def refbot_up(state_dir, *flags, timeout: float = 30) -> subprocess.CompletedProcess:
    """``python -m refbot up`` that must stop at once; whatever it started is stopped, whatever happens."""
    cmd = [sys.executable, "-m", "refbot", "up", "--state-dir", str(state_dir), *map(str, flags)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # `up` stops everything it started on SIGTERM
        out, err = proc.communicate(timeout=120)
        err += f"\n(no exit within {timeout}s)"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if os.path.isdir(state_dir):
            refbot_cli("down", "--state-dir", state_dir)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


REFBOT_UP = [
    (["--replicas", "100000"], "--replicas must be at least 1 and at most 32 (got 100000)"),
    (["--replicas", "33"], "--replicas must be at least 1 and at most 32 (got 33)"),
    (["--port", "99999"], "--port 99999 is not a TCP port"),
    (["--port", "-1"], "--port -1 is not a TCP port"),
    (["--redis-port", "99999"], "--redis-port 99999 is not a TCP port"),
    (["--redis-port", "-1"], "--redis-port -1 is not a TCP port"),
    (["--think-ms", "-1"], "--think-ms -1 must be"),
    (["--jitter-ms", "-1"], "--jitter-ms -1 must be"),
    (["--flush-ms", "-1"], "--flush-ms -1 must be"),
    (["--timeout", "0"], "--timeout 0 must be"),
    (["--timeout", "-1"], "--timeout -1 must be"),
    (["--think-ms", "nan"], "--think-ms nan must be"),
    (["--think-ms", "inf"], "--think-ms inf must be"),
    (["--jitter-ms", "nan"], "--jitter-ms nan must be"),
    (["--flush-ms", "nan"], "--flush-ms nan must be"),
    (["--wait-ms", "nan"], "--wait-ms nan"),
    (["--timeout", "inf"], "--timeout inf must be"),
    (["--lb-retries", "-1"], "--lb-retries -1 must be"),
    (["--releases", "a b"], "--releases: 'a b' is not a release name"),
    (["--mode", "window:"], "--mode 'window:': nothing follows ':'"),
]


@pytest.mark.parametrize("flags, fragment", REFBOT_UP, ids=[" ".join(f) for f, _ in REFBOT_UP])
def test_bad_refbot_up_options_exit_2_before_anything_starts(flags, fragment, tmp_path):
    state_dir = tmp_path / "s"
    result = refbot_up(state_dir, *flags)
    assert result.returncode == 2, result.stderr[-2000:]
    assert_named(result.stderr, flags[0], fragment)
    assert not (state_dir / "state.json").exists()
    assert processes_mentioning(str(state_dir)) == []  # no redis-server, bot or haproxy was started


@pytest.mark.parametrize("where", ["/dev/null", "fifo", "/proc/1/x"])
def test_a_state_dir_that_is_not_a_directory_is_exit_2_for_up_down_and_status(where, tmp_path):
    if where == "fifo":
        where = str(tmp_path / "fifo")
        os.mkfifo(where)
    result = refbot_up(where)
    assert result.returncode == 2, result.stderr[-2000:]
    assert_named(result.stderr, f"--state-dir {where}", "not a directory" if where != "/proc/1/x" else "cannot create")
    if where != "/proc/1/x":  # nothing is up in a folder that cannot be: `down` says so, exit 0
        for command in ("down", "status"):
            other = refbot_cli(command, "--state-dir", where, timeout=30)
            assert other.returncode == 2, other.stderr
            assert_named(other.stderr, f"--state-dir {where}", "not a directory")


# ---- Locust's options: what its init checks ------------------------------------------------------
@pytest.fixture(scope="module")
def parser():
    """goldfish's options and the Locust ones they are judged with (``-t`` parsed to whole seconds, as Locust
    parses it; Locust itself is not imported in-process: see test_bad_input.LocustLikeParser)."""
    from locustfiles import options

    p = LocustLikeParser(prog="locust")
    options.add_arguments(p)
    p.add_argument("-t", "--run-time", type=int)
    for flag in ("--headless", "--autostart", "--worker"):
        p.add_argument(flag, action="store_true")
    return p


LOCUST_OPTIONS = [
    (["--start-body", "not json"], "--start-body: not JSON"),
    (["--start-body", "{"], "--start-body: not JSON"),
    (["--start-body", "[1]"], "--start-body: '[1]' is not a JSON object"),
    (["--audit-every", "1ms"], "--audit-every: '1ms' is shorter than a second"),
    (["--audit-every", "0.5"], "--audit-every: '0.5' is shorter than a second"),
    (["--telemetry-interval", "1ms"], "--telemetry-interval: '1ms' is shorter than a second"),
    (["--reply-where", "event"], "--reply-where: 'event' is not PATH=VALUE"),
    (["--websocket", "--reply-format", "sse"], "--websocket and --reply-format sse (a frame holds the whole reply"),
    (["--websocket", "--chat-method", "GET"], "--websocket and --chat-method GET: a turn over a WebSocket is one"),
    (["--websocket", "--body-format", "form"], "--websocket and --body-format form"),
    (["--websocket", "--poll-path", "/jobs/{reply.id}"], "--websocket and --poll-path /jobs/{reply.id}"),
    (["--websocket", "--session-from", "cookie:sid"], "--websocket and --session-from cookie:sid (a frame has no"),
    (["--poll-path", "jobs/{reply.id}"], "--poll-path: 'jobs/{reply.id}' must start with one '/'"),
    (["--poll-path", "//jobs"], "--poll-path: '//jobs' must start with one '/'"),
    (["--poll-path", "/jobs/{reply.job..id}"], "a {reply.FIELD} path has an empty part"),
    (["--poll-path", "/jobs/{job_id}"], "the placeholders are {session}, {reply.FIELD} (a value of the turn's JSON "
                                         "answer, the job's id) and {header.NAME}"),
    (["--poll-path", "/jobs/{reply.id"], "the placeholders are {session}, {reply.FIELD}"),
    (["--poll-path", "{header.Loc@ation}"], "{header.Loc@ation} does not name a header"),
    (["--poll-path", "/jobs/{header.}"], "{header.} does not name a header"),
    (["--reply-where", "=x"], "--reply-where: '=x' is not PATH=VALUE"),
    (["--reply-where", "!=x", "--reply-format", "sse"], "--reply-where: '!=x' is not PATH=VALUE"),
    (["--reply-where", "items.*.role=bot", "--reply-format", "sse"], "--reply-where: 'items.*.role=bot' is not"),
    (["--reply-where", "role=assistant"], "--reply-where 'role=assistant' picks among a stream's pieces"),
    (["--reply-where", "role=assistant", "--reply-format", "text"], "--reply-where 'role=assistant' picks among"),
    (["--headless", "-t", "0"], "-t/--run-time 0: Locust reads 0 as no time limit"),
    (["--autostart", "--run-time", "0"], "-t/--run-time 0"),
]


@pytest.mark.parametrize("argv, fragment", LOCUST_OPTIONS, ids=[" ".join(a) for a, _ in LOCUST_OPTIONS])
def test_bad_locust_options_stop_the_run_before_any_load(argv, fragment, parser, capsys):
    code, out = init_exit(parser, argv, capsys)
    assert code == 2, out
    assert_named(out, fragment.split(":")[0], fragment)


def test_the_values_next_to_the_bounds_are_accepted(parser, capsys):
    """0 turns the rolling audit and telemetry off; without --headless (the web UI) `-t 0` is Locust's own
    business, the step shape ends a run by itself, and no -t at all is a run stopped by hand. The refusals
    above must not catch these."""
    for argv in (["--audit-every", "1s", "--reader", "os:getcwd"], ["--audit-every", "0"], ["--telemetry-interval", "0"],
                 ["--telemetry-interval", "1"], ["-t", "0"], ["--headless"], ["--headless", "-t", "1"],
                 ["--worker", "--headless", "-t", "0"], ["--headless", "-t", "0", "--step-users", "1", "--steps", "2"],
                 ["--start-body", '{"a": 1}']):
        assert init_exit(parser, argv, capsys) == (0, ""), argv
    code, out = init_exit(parser, ["--telemetry-interval", "999ms"], capsys)
    assert code == 2 and "--telemetry-interval" in out


@pytest.mark.parametrize("argv, said", [(["--start-body", "not json"], "--start-body: not JSON"),
                                        (["--chat-path", "//chat"], "--chat-path: '//chat' starts with '//'")])
def test_an_option_that_cannot_work_stops_a_real_run_before_any_load(tmp_path, argv, said):
    """Without --start-path a --start-body was not checked: a traceback in test_start, then the load ran anyway
    (93 requests, no run.json, an empty journal); a --chat-path of two slashes passed the checks, then every turn
    failed ("invalid request URI '//chat'"): NO VERDICT after the load."""
    bot_log = tmp_path / "bot.log"
    with chat_bot("memory", log=bot_log) as url:
        run = run_locust(url, tmp_path / "run", *argv, time_s="3s", timeout=60)
    assert run.returncode == 2, run.output[-2000:]
    assert said in run.output and "Traceback" not in run.output
    assert not bot_log.exists() or bot_log.read_text() == ""  # no turn was sent
    assert not list((tmp_path / "run").glob("journal/*.jsonl"))


def test_run_time_0_stops_a_real_headless_run_before_any_load(tmp_path):
    """Locust reads -t 0 as no limit: the run went on until killed."""
    bot_log = tmp_path / "bot.log"
    with chat_bot("memory", log=bot_log) as url:
        run = run_locust(url, tmp_path / "run", time_s="0", timeout=60)
    assert run.returncode == 2, run.output[-2000:]
    assert "-t/--run-time 0" in run.output and "Traceback" not in run.output
    assert not bot_log.exists() or bot_log.read_text() == ""


# ---- chaos plans ------------------------------------------------------------------------------
RR = "{kind: rolling-restart, target: bot, at: 1s, release: v2"
PLANS = [
    ("id-null", "faults:\n  - {id: null, kind: kill, target: bot, at: 1s}  #!\n", "id: must be letters"),
    ("id-true", "faults:\n  - {id: true, kind: kill, target: bot, at: 1s}  #!\n", "got True"),
    ("id-nan", "faults:\n  - {id: .nan, kind: kill, target: bot, at: 1s}  #!\n", "got nan"),
    ("id-with-a-line-break", 'faults:\n  - {id: "a\\n", kind: kill, target: bot, at: 1s}  #!\n', "id: must be letters"),
    ("env-name-with-equals", "faults:\n  - " + RR + ", env: {'A=B': x}}  #!\n",
     "env: 'A=B' is not an environment variable name"),
    ("env-name-with-nul", "faults:\n  - " + RR + ', env: {"A\\0": x}}  #!\n', "is not an environment variable name"),
    ("env-name-empty", "faults:\n  - " + RR + ", env: {'': x}}  #!\n", "env: '' is not an environment variable name"),
    ("env-value-with-nul", "faults:\n  - " + RR + ', env: {A: "x\\0y"}}  #!\n', "env: holds a NUL character"),
    ("release-with-nul", 'faults:\n  - kind: rolling-restart\n    target: bot\n    at: 1s\n    release: "v\\0"  #!\n',
     "release: holds a NUL character"),
    ("two-byte-order-marks", "\ufeff\ufefffaults:  #!\n  - {kind: kill, target: bot, at: 1s}\n",
     "starts with a stray byte-order mark"),
]


@pytest.mark.parametrize("name, text, fragment", PLANS, ids=[p[0] for p in PLANS])
def test_bad_plans(name, text, fragment, tmp_path, capsys):
    from chaos.__main__ import main

    plan = tmp_path / "plan.yaml"
    plan.write_bytes(text.encode())
    assert main(["validate", str(plan)]) == 2
    assert_named(capsys.readouterr().err, f"{plan}:{marked_line(text)}:", fragment)
    if name == "two-byte-order-marks":  # one mark is what some editors write: fine
        plan.write_bytes(text[1:].encode())
        assert main(["validate", str(plan)]) == 0, capsys.readouterr().err


class DescribingBackend(Backend):
    """A backend that only resolves and describes (all a dry run may do), counting its descriptions."""

    name, kinds = "fake", frozenset({"kill"})

    def __init__(self):
        self.described = 0

    def instances(self, target):
        return ["bot-1", "bot-2", "bot-3"]

    def apply(self, fault, instance):
        raise AssertionError("a dry run applied a fault")

    def recover(self, fault, instance, undo):
        raise AssertionError("a dry run recovered a fault")

    def describe(self, instance):
        self.described += 1
        return f"{instance} (fake)"


def test_the_dry_run_of_100000_occurrences_is_bounded(tmp_path):
    """It printed 200,001 lines and took 15-90 s (a description per occurrence); a normal plan's is unchanged."""
    from chaos.controller import Controller
    from chaos.plan import parse_plan

    big = parse_plan("duration: 100000s\nfaults:\n  - {kind: kill, target: bot, every: 1s, count: 1}\n", "big.yaml")
    backend = DescribingBackend()
    lines = Controller(big, backend, tmp_path / "run").dry_run()
    assert len(lines) <= 2001 and backend.described <= 1000, len(lines)
    assert lines[-1].startswith("... and 98999 more occurrence(s), the last at +99999s"), lines[-1]
    small = parse_plan("duration: 4s\nfaults:\n  - {kind: kill, target: bot, every: 1s, count: 2}\n", "small.yaml")
    assert Controller(small, backend, tmp_path / "run2").dry_run() == [
        line for k, t in enumerate((1, 2, 3))
        for line in [f"+{t}s f1#{k} kill on bot:"] + [f"    {inst} (fake)" for inst in
                                                      small.faults[0].choose(["bot-1", "bot-2", "bot-3"], k, 0)]]
    assert not (tmp_path / "run" / "chaos.jsonl").exists()
