"""Bad input, round 12 (hunt-input12 D3, D4, m1).

- D3: a password with a raw '@' followed by '/', '?' or '#' (``redis://:s3cr@t/xyz@host/0``) was masked only up to
  its first '@': messages showed the rest of it, twice (also in the reason the URL check quoted).
- D4: a targets file's ``log:`` that is a FIFO passed ``chaos validate`` and hung ``chaos targets start`` (opening it
  to append waits for a reader); ``/dev/zero`` as the log of a command that never became healthy was read whole for
  "the last lines of the log" until MemoryError.
- (D5, ``--chaos-backend``/``--stack-state`` without ``--chaos``, stays accepted as round 4 decided: a locust.conf or
  the web UI sets the backend once, and a run without a plan is a run without chaos.)
- m1: a plan's kind parameters and percentages took any script's digits and '_' (``grace: '٣'``, ``'1_0'``,
  ``count: '٥٠%'``), which times, scripts and gates refuse.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from test_bad_input import assert_named

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REPO = Path(__file__).resolve().parents[1]
PLAN = "name: p\nfaults:\n  - {id: a, kind: pause, target: web, at: 1s, duration: 1s}\n"


def _bounded(args, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """``args`` from the repo root in a session of its own; killed (its whole group) after ``timeout`` seconds,
    and the test fails saying it hung."""
    proc = subprocess.Popen([str(a) for a in args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{args[:4]} hung ({timeout}s): {out[-1000:]} {err[-1000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _chaos(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return _bounded([sys.executable, "-m", "chaos", *args], timeout=timeout)


# ---- D3: the whole password is hidden, whatever it holds --------------------------------------------------------
URLS = [  # (URL, redact.url of it, a piece of the password that must never be shown)
    ("redis://:s3cr@t/xyz@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0", "xyz"),
    ("redis://u:p@ss#wqz@h:1/0", "redis://***@h:1/0", "wqz"),
    ("redis://:hunter2@x?y@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0", "hunter2"),
    ("redis://:hunter2@x?y@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0", "x?y"),
    ("redis://us@er:p@w/rd@[::1]:6379/0", "redis://***@[::1]:6379/0", "rd@"),
    ("redis://:a#b@[::1]:1/0?password=x", "redis://***@[::1]:1/0?password=***", "a#b"),
    ("redis://u:12/34@h/0", "redis://***@h/0", "34"),
    ("redis+sentinel://:p/wq@h:1,h:2/mymaster/0", "redis+sentinel://***@h:1,h:2/mymaster/0", "wq"),
    ("unix://:p/wq@/tmp/r.sock?db=0", "unix://***@/tmp/r.sock?db=0", "wq"),
    ("http://bob:hunter2@x/y@127.0.0.1:1/history/{session}", "http://***@127.0.0.1:1/history/{session}", "x/y"),
    ("redis://tok/qq@h:1/0", "redis://***@h:1/0", "qq"),
]
KEPT = [  # URLs whose credentials are whole: as before
    ("redis://:p@ss@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("redis://:p%40ss@h:1/0", "redis://:***@h:1/0"),
    ("redis://:pw@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    ("redis://h:1/0", "redis://h:1/0"),
    ("http://h/users/@me", "http://h/users/@me"),
    ("http://u:p@h/x?a=1&token=z", "http://u:***@h/x?a=1&token=***"),
]


@pytest.mark.parametrize("url, shown, secret", URLS)
def test_a_password_with_a_raw_at_and_a_slash_query_or_fragment_is_hidden_whole(url, shown, secret):
    from contracts import redact

    assert redact.url(url) == shown
    assert secret not in redact.text(f"--store-url {url!r}: failed")
    assert redact.credentials_problem(url) and "percent-encode" in redact.credentials_problem(url)
    said = redact.reason(url, ValueError(f"path '{url.split('@', 2)[-1]}': must be /db"))
    assert secret not in said and "percent-encode" in said


@pytest.mark.parametrize("url, shown", KEPT)
def test_whole_credentials_are_masked_as_before(url, shown):
    from contracts import redact

    assert redact.url(url) == shown
    assert redact.credentials_problem(url) is None
    assert redact.reason(url, "port 0 (of h): no Redis") == "port 0 (of h): no Redis"


def test_a_reason_that_quotes_the_password_is_masked():
    from contracts import redact

    assert redact.reason("redis://:hunter2@h:1/0", "AUTH hunter2 refused") == "AUTH *** refused"


@pytest.mark.parametrize("check", ["redis", "http"])
def test_a_targets_health_url_with_a_cut_short_password_is_refused_without_showing_it(check, tmp_path):
    url = "redis://:s3cr@t/xyz@127.0.0.1:6379/abc" if check == "redis" else "http://bob:s3cr@t/xyz@127.0.0.1:1/h"
    (tmp_path / "t.yaml").write_text(f'targets:\n  web: {{command: sleep 1000, health: {{{check}: "{url}"}}}}\n')
    (tmp_path / "p.yaml").write_text(PLAN)
    done = _chaos("validate", "--targets", tmp_path / "t.yaml", tmp_path / "p.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"t.yaml:2: health: {check}: '{url.split(':')[0]}://", "percent-encode")
    assert "xyz" not in done.stdout + done.stderr and "s3cr" not in done.stdout + done.stderr


def test_a_locust_store_or_http_url_with_a_cut_short_password_is_refused_without_showing_it(locust_parser, capsys):
    from test_bad_input import init_exit

    for option, url in (("--store-url", "redis://:s3cr@t/xyz@127.0.0.1:6379/0"),
                        ("--http-url", "http://bob:s3cr@t/xyz@127.0.0.1:1/history/{session}")):
        code, out = init_exit(locust_parser, [option, url], capsys)
        assert code == 2, out
        assert_named(out, f"{option} '{url.split(':')[0]}://", "percent-encode")
        assert "xyz" not in out and "s3cr" not in out, out


@pytest.fixture(scope="module")
def locust_parser():
    from test_bad_input import LocustLikeParser

    from locustfiles import options

    parser = LocustLikeParser(prog="locust")
    options.add_arguments(parser)
    return parser


# ---- D4: a log that is no regular file ---------------------------------------------------------------------------
def _fifo_targets(tmp_path) -> Path:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "t.yaml").write_text('targets:\n  web: {command: "sleep 1000", log: fifo}\n')
    return tmp_path / "t.yaml"


def test_a_log_that_is_a_fifo_is_refused_by_validate_and_start_instead_of_hanging(tmp_path):
    targets = _fifo_targets(tmp_path)
    (tmp_path / "p.yaml").write_text(PLAN)
    done = _chaos("validate", "--targets", targets, tmp_path / "p.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"t.yaml:2: log: {tmp_path / 'fifo'}", "not a regular file but a FIFO (target web)")
    try:
        done = _chaos("targets", "start", targets, "--timeout", "3", timeout=30)
    finally:
        _chaos("targets", "stop", targets, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, "t.yaml:2: log:", "not a regular file but a FIFO")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/full"])
def test_a_log_that_is_a_device_is_refused_at_its_line(device, tmp_path):
    """Only validated: never started with such a log (the old code read it until MemoryError)."""
    (tmp_path / "t.yaml").write_text(f'targets:\n  web: {{command: "false", log: {device}, health: {{tcp: "127.0.0.1:1"}}}}\n')
    done = _chaos("validate", "--targets", tmp_path / "t.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"t.yaml:2: log: {device}", "not a regular file but a character device")


def test_a_log_of_dev_null_and_a_new_file_are_accepted(tmp_path):
    for log in ("/dev/null", "new.log"):
        (tmp_path / "t.yaml").write_text(f'targets:\n  web: {{command: "sleep 1000", log: {log}}}\n')
        done = _chaos("validate", "--targets", tmp_path / "t.yaml")
        assert done.returncode == 0, done.stdout + done.stderr


TAIL = """
import sys
from targets import registry
member = {"name": "web", "cmd": ["true"], "cwd": sys.argv[2], "env": {}, "log": sys.argv[1]}
print(registry.log_tail(member))
try:
    registry.start_member(member)
except OSError as exc:
    print("refused:", exc)
"""


def test_the_registry_never_blocks_on_a_log_that_is_a_fifo(tmp_path):
    """A state file may still name one: the tail of it is "(no log)" and a start is refused, in a bounded process
    (the old code blocked in open() for ever)."""
    os.mkfifo(tmp_path / "fifo")
    done = _bounded([sys.executable, "-c", TAIL, tmp_path / "fifo", tmp_path], timeout=30,
                    env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["(no log)", f"refused: [Errno 22] not a regular file but a FIFO: "
                                                    f"'{tmp_path / 'fifo'}'"]


def test_the_tail_of_a_long_log_is_its_last_lines(tmp_path):
    from targets import registry

    log = tmp_path / "web.log"
    log.write_text("".join(f"line {n} " + "x" * 200 + "\n" for n in range(5000)))  # about 1 MB
    tail = registry.log_tail({"log": str(log)}).splitlines()
    assert tail == [f"line {n} " + "x" * 200 for n in range(4985, 5000)]
    log.write_text("short\nlog")
    assert registry.log_tail({"log": str(log)}) == "short\nlog"


# ---- m1: a plan's parameters and percentages are ASCII digits ----------------------------------------------------
@pytest.mark.parametrize("field, value, kind", [
    ("grace", "'٣'", "restart"), ("grace", "'1_0'", "restart"), ("grace", "'３'", "restart"),
    ("count", "'٥٠%'", "kill"), ("count", "'５０%'", "kill"), ("count", "'5_0%'", "kill"),
    ("max_blast", "'٥٠%'", "kill"),
])
def test_a_plans_number_in_another_scripts_digits_or_with_underscore_is_refused_at_its_line(field, value, kind,
                                                                                          tmp_path):
    from chaos.plan import PlanError, load_plan

    fault = f"{{id: a, kind: {kind}, target: bot, at: 1s" + (f", {field}: {value}}}" if field != "max_blast" else "}")
    top = f"max_blast: {value}\n" if field == "max_blast" else ""
    path = tmp_path / "plan.yaml"
    path.write_text(f"name: p\n{top}faults:\n  - {fault}\n")
    with pytest.raises(PlanError) as info:
        load_plan(str(path))
    line = 2 if field == "max_blast" else 3
    assert_named("\n".join(info.value.problems), f"plan.yaml:{line}: {field}: {value}",
                 "ASCII digits 0-9 (no '_')")


@pytest.mark.parametrize("field, value", [("grace", "5"), ("grace", "'5s'"), ("grace", "' 5 '"), ("grace", "'1e3'"),
                                          ("count", "50%"), ("count", "' 50 % '"), ("count", "all")])
def test_ascii_numbers_and_percentages_are_still_taken(field, value, tmp_path):
    from chaos.plan import load_plan

    path = tmp_path / "plan.yaml"
    path.write_text(f"name: p\nfaults:\n  - {{id: a, kind: restart, target: bot, at: 1s, {field}: {value}}}\n")
    load_plan(str(path))
