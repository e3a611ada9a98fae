"""The state file of a set of member processes (docs/CONTRACTS.md, "Stack state file") and member control.

`python -m refbot up` writes ``<dir>/state.json`` for the embedded stack, and chaos writes one
for a user's targets file (targets/file.py); `refbot down`, `refbot status` and the chaos
controller's local backend read it and update it. Everything a process needs to stop, check or
restart a member is in its record, so any process can do it:

    from targets import registry
    with registry.locked_state(".stack") as st:       # flock on .stack/state.lock
        member = st["members"]["bot-2"]
        registry.stop_member(member, sig=signal.SIGKILL)
        registry.start_member(member)                 # same cmd/env/cwd/port; records the new pid
    registry.wait_healthy(member, timeout=30)

Kept to the standard library plus redis-py so other parts can import it cheaply.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import redis

from contracts.runfolder import open_append, open_regular, read_regular  # stdlib only: refbot's image has redis-py and no msgspec

VERSION = 1
DEFAULT_DIR = ".stack"
STATE_NAME = "state.json"
LOCK_NAME = "state.lock"
MAX_BYTES = 16 << 20    # a state file names a few processes; more than this is not one
PID_MAX = 1 << 22       # the largest pid Linux hands out (kernel.pid_max's ceiling)
LB_SERVER = re.compile(r"^[^/\s]+/[^/\s]+$")   # HAProxy's backend/server


class StateError(RuntimeError):
    """The state file is missing, unreadable or inconsistent; the message says which file."""


class MemberUnhealthy(RuntimeError):
    """A member did not become healthy in time (its log tail is in the message)."""


def state_dir(path: str | os.PathLike | None = None) -> Path:
    """The absolute state directory: ``path``, else $REFBOT_STATE_DIR, else ``.stack``."""
    return Path(path or os.environ.get("REFBOT_STATE_DIR") or DEFAULT_DIR).absolute()


def state_path(path=None) -> Path:
    return state_dir(path) / STATE_NAME


def load(path=None) -> dict | None:
    """The state in ``path`` (a state dir), or None when nothing is up there; StateError naming the
    file (and the field) when it is not a state file whose members can be signalled and started."""
    file = state_path(path)
    try:
        data = read_regular(file, MAX_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # a FIFO, a device, a directory, no permission; ValueError: a NUL byte
        raise StateError(f"{file}: cannot read the state file: {getattr(exc, 'strerror', None) or exc}") from None
    if len(data) > MAX_BYTES:
        raise StateError(f"{file}: more than the {MAX_BYTES} bytes a state file may have")
    try:
        state = json.loads(data)
    except (ValueError, RecursionError) as exc:
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else \
            "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise StateError(f"{file}: not valid JSON ({why}); remove it once you have stopped its processes") from None
    if not isinstance(state, dict) or state.get("version") != VERSION or "members" not in state:
        raise StateError(f"{file}: not a version-{VERSION} state file")
    if problem := _problem(state):
        raise StateError(f"{file}: {problem}")
    return state


def _problem(state: dict) -> str | None:
    """``field: why`` for the first field a backend would trip over (a wrong type or range), or None."""
    members = state["members"]
    if not isinstance(members, dict):
        return f"members: must be a mapping of name -> member, not {_short(members)}"
    if problem := _socket_problem(state.get("haproxy_socket")):
        return problem
    for name, m in members.items():
        if problem := _member_problem(name if name.isprintable() and len(name) <= 60 else _short(name, 60), m):
            return problem
    return None


def member_problem(name: str, member: dict, haproxy_socket=None) -> str | None:
    """What ``load`` would refuse in a state file holding this member (and socket), as ``field: why``; None when
    nothing. A writer (targets/file.py) checks a member with it before saving: a state file the reader refuses
    stops every later command until someone removes it."""
    return _socket_problem(haproxy_socket) or _member_problem(name, member, prefix="")


def _socket_problem(sock) -> str | None:
    if not (sock is None or _text(sock) or _host_port(sock)):
        return f"haproxy_socket: must be a socket path, [host, port] or null, not {_short(sock)}"
    return None


def _member_problem(name: str, m, prefix: str | None = None) -> str | None:
    where = f"members.{name}." if prefix is None else prefix
    if not isinstance(m, dict):
        return f"{where.rstrip('.')}: must be a mapping of the member's fields, not {_short(m)}"
    for field, (ok, what) in _FIELDS.items():
        if field in m and not ok(m[field]):
            return f"{where}{field}: must be {what}, not {_short(m[field])}"
    for field in ("cwd", "log"):
        if m.get("cmd") and field not in m:
            return f"{where}{field}: missing (a member with a cmd is started in its cwd, output to its log)"
    return None


def _short(value, limit: int = 40) -> str:
    """A value for a one-line message, cut short (contracts.codec.short, which needs msgspec)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _text(v) -> bool:
    return isinstance(v, str) and v != "" and "\0" not in v


def _host_port(v) -> bool:
    return isinstance(v, list) and len(v) == 2 and _text(v[0]) and type(v[1]) is int and 0 < v[1] < 65536


def _health(v) -> bool:
    return isinstance(v, dict) and set(v) <= {"http", "redis", "tcp"} and all(
        _host_port(check) if kind == "tcp" else _text(check) for kind, check in v.items())


_FIELDS = {   # what the backends and refbot do with a member's fields; every one but cwd and log may be absent
    "name": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "role": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "pid": (lambda v: v is None or (type(v) is int and 1 < v <= PID_MAX),
            f"a pid (a whole number from 2 to {PID_MAX}: 1 is init) or null"),
    "pid_start": (lambda v: v is None or (type(v) is int and v >= 0), "clock ticks since boot (a whole number) or null"),
    "port": (lambda v: v is None or (type(v) is int and 0 < v < 65536), "a port (1-65535) or null"),
    "cmd": (lambda v: v is None or (isinstance(v, list) and bool(v) and _text(v[0])
                                    and all(isinstance(a, str) and "\0" not in a for a in v)),
            "a list of strings naming a program (no NUL character) or null"),
    "env": (lambda v: isinstance(v, dict) and all(_text(k) and "=" not in k and isinstance(x, str) and "\0" not in x
                                                  for k, x in v.items()),
            "a mapping of NAME: string (no '=' in a name, no NUL character)"),
    "cwd": (_text, "a directory (a non-empty string)"),
    "log": (_text, "a file (a non-empty string)"),
    "pid_file": (lambda v: v is None or _text(v), "a file (a non-empty string) or null"),
    "health": (_health,
               "one check: {http: URL}, {redis: URL} or {tcp: [host, port]} (or none: {})"),
    "lb_server": (lambda v: v is None or (isinstance(v, str) and bool(LB_SERVER.match(v))),
                  "HAProxy's backend/server (e.g. bots/bot-1) or null"),
}


def save(state: dict, path=None) -> Path:
    """Write ``state`` atomically (temp file + rename), so a reader never sees half a file."""
    directory = state_dir(path or state.get("dir"))
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / STATE_NAME
    tmp = directory / f".{STATE_NAME}.{os.getpid()}.tmp"
    with open(tmp, "w") as out:
        json.dump(state, out, indent=2, sort_keys=False)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, file)
    return file


def remove(path=None) -> None:
    state_path(path).unlink(missing_ok=True)


LOCK_POLL_S = 0.02


@contextmanager
def locked_state(path=None, missing_ok: bool = False):
    """Hold the stack's lock, yield its state dict, and save it on exit if it changed.

    Raises StateError when nothing is up, unless ``missing_ok`` (then yields ``{}``).
    """
    directory = state_dir(path)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / LOCK_NAME, "a+") as lock:
        _wait_for_lock(lock)
        try:
            state = load(directory)
            if state is None:
                if not missing_ok:
                    raise StateError(f"nothing is up: no state file at {directory / STATE_NAME}")
                state = {}
            before = json.dumps(state, sort_keys=True)
            try:
                yield state
            finally:  # even when the body raised: a process it started must stay recorded
                if state and json.dumps(state, sort_keys=True) != before:
                    save(state, directory)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _wait_for_lock(lock) -> None:
    """flock, asked again every LOCK_POLL_S rather than blocking: under Locust the chaos controller's greenlets
    share one thread, and a heal's blocking flock stopped the whole hub while an apply greenlet held the lock
    (a restart in its grace): the run hung for good, deaf to SIGTERM (chaos hunt 18). time.sleep lets the holder
    run (gevent patches it) and is a plain wait in threads."""
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(LOCK_POLL_S)


# --- processes ---------------------------------------------------------------------------

def pid_alive(pid: int | None) -> bool:
    """True while ``pid`` runs (a zombie counts as dead; our own dead children are reaped)."""
    if not pid:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    state = process_state(pid)
    return state is not None and state != "Z"


def process_state(pid: int) -> str | None:
    """The kernel's state letter for ``pid`` (R running, S sleeping, T stopped, Z zombie; field 3 of
    /proc/PID/stat), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def start_ticks(pid: int | None) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of /proc/PID/stat); None if it is gone.

    A pid is reused once its process is gone; a pid with its start time names one process for as
    long as the machine runs. That pair is a member's identity."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def adopt(member: dict, pid: int) -> None:
    """Record ``pid`` as the member's process: its pid and its start time (``pid_start``)."""
    member["pid"], member["pid_start"] = pid, start_ticks(pid)


def adopt_pid_file(member: dict) -> str | None:
    """Adopt the process the member's ``pid_file`` names (someone else started it); None when
    adopted, else why not."""
    pid, why = pid_file_process(member)
    why = why or not_its_command(member, pid)
    if why is None:
        adopt(member, pid)
    return why


def pid_file_process(member: dict) -> tuple[int | None, str | None]:
    """The live process the member's ``pid_file`` names, or (None, why not). A pid file older than
    its process is stale: its pid was reused."""
    path = member["pid_file"]
    try:
        data = read_regular(path, 4096).strip()   # never more: a pid file is a line
        written = os.stat(path).st_mtime
    except (OSError, ValueError) as exc:  # ValueError: a path with a NUL byte
        return None, f"pid file {path}: {getattr(exc, 'strerror', None) or exc}"
    if not (data.isdigit() and len(data) <= 10):  # bytes: ASCII digits only (str.isdigit takes '١' and '²')
        return None, f"pid file {path}: expected a pid, found {data[:40].decode('utf-8', 'replace')!r}"
    pid = int(data)
    if pid <= 1:
        return None, f"pid file {path}: pid {pid} is init, or no process at all; refusing to adopt it"
    started = start_ticks(pid)
    if started is None or not pid_alive(pid):
        return None, f"pid file {path}: pid {pid} is not running"
    with open("/proc/uptime") as uptime:
        started_at = time.time() - float(uptime.read().split()[0]) + started / os.sysconf("SC_CLK_TCK")
    if started_at > written + 1.0:
        return None, (f"pid file {path} is stale: pid {pid} started {started_at - written:.1f}s after the file "
                      f"was written, so it is another process; refusing to adopt it")
    return pid, None


def not_its_command(member: dict, pid: int) -> str | None:
    """Why the process ``pid`` is not one the member's ``cmd`` starts (another program: a pid file that
    names a stranger, which chaos would signal), or None. Without a ``cmd`` there is nothing to compare."""
    cmd = member.get("cmd")
    if not cmd:
        return None
    argv = _argv(pid)
    wanted, runs = _program(cmd), _program(argv)
    if runs[0] == wanted[0] and wanted[1] in (None, runs[1]):   # the program (and the script or module it runs)
        return None
    if wanted == (runs[1], None):   # the command is the script an interpreter runs: a console script, #!/bin/sh
        return None
    shown = " ".join(argv) or "nothing chaos can read"
    return (f"pid {pid} in {member.get('pid_file') or 'the pid file'} runs {shown[:120]!r}, not the command "
            f"{' '.join(cmd)[:120]!r}; refusing to adopt it (correct the pid file or the command)")


_INTERPRETER = re.compile(r"(python|pypy|node|ruby|perl|php|sh|bash|dash|zsh)[\d.]*")
_SHELLS = {"sh", "bash", "dash", "zsh"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _program(argv: list[str]) -> tuple[str, str | None]:
    """What a command line runs: its program's name, and for an interpreter the script or module it runs.

    Equal for the ways one program is started: ``/usr/bin/python3.11 -m uvicorn`` and ``python3 -m
    uvicorn`` are (python, uvicorn); a console script's ``python /venv/bin/uvicorn`` is (python, uvicorn)
    too; ``sh -c 'exec CMD'`` is CMD's (a shell execs into it); a retitled process (``redis-server
    *:6379`` in one argument) is named by its first word."""
    words = list(argv)
    while words and (words[0] in ("exec", "env") or _ASSIGNMENT.match(words[0])):
        words = words[1:]
    if len(words) >= 3 and os.path.basename(words[0]) in _SHELLS and words[1] == "-c":
        try:
            return _program(shlex.split(words[2]))
        except ValueError:   # not shell words: compared as the shell itself
            pass
    first = words[0].split() if words else []
    name = os.path.basename(first[0]).rstrip(":") if first else ""
    if m := _INTERPRETER.fullmatch(name):
        return m.group(1), _script(words[1:])
    return name, None


def _script(args: list[str]) -> str | None:
    """The module (``-m mod``), code (``-c code``) or script an interpreter runs, the script without folder
    or ``.py``."""
    args = iter(args)
    for arg in args:
        if arg in ("-m", "-c"):
            return next(args, None)
        if arg in ("-X", "-W"):   # options that take a value
            next(args, None)
        elif not arg.startswith("-"):
            return os.path.basename(arg).removesuffix(".py")
    return None


def _argv(pid: int) -> list[str]:
    """The process's command line, one argument each ([] when it is gone or unreadable)."""
    try:
        data = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in data.split(b"\0") if a]


def member_alive(member: dict) -> bool:
    """The member's recorded pid runs and is still the member's process (never a reused pid)."""
    return pid_alive(member.get("pid")) and pid_reused(member) is None


def pid_reused(member: dict) -> str | None:
    """Why the recorded pid, which runs, is not the member's process (another process took the
    pid), or None. Without a recorded ``pid_start`` (a state file written by hand or by an older
    goldfish) only the program name in the command line can be checked."""
    pid, name = member.get("pid"), member.get("name", "the member")
    if not pid_alive(pid):
        return None
    if member.get("pid_start") is not None:
        now = start_ticks(pid)
        if now is None or now == member["pid_start"]:
            return None
        return (f"pid {pid} is no longer {name}: another process took it (started at tick {now} "
                f"after boot, {name} at tick {member['pid_start']}: {_cmdline(pid)!r}); refusing to signal it")
    program = os.path.basename((member.get("cmd") or [""])[0])
    if program and program in _cmdline(pid):
        return None
    return f"pid {pid} is no longer {name}: it runs {_cmdline(pid)!r}, not {program or 'a known program'}; refusing to signal it"


def _cmdline(pid: int) -> str:
    return " ".join(_argv(pid))


def start_member(member: dict) -> subprocess.Popen:
    """Start ``member`` from its record: cmd with env over os.environ, in cwd, log appended,
    in a new session (its own process group). Records the new pid and its start time in
    ``member`` (``adopt``); the caller saves the state (inside ``locked_state``).

    Ctrl-C and SIGTERM are held until the pid is recorded: landing inside Popen they would
    raise after the child exists but before anyone knows its pid, and it would outlive `down`."""
    Path(member["cwd"]).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **member.get("env", {})}
    # a FIFO would block this open until a reader comes, for ever (targets/file.py refuses one; a state file may
    # still name one): refused, naming the file
    log_file = open(member["log"], "ab") if os.path.realpath(member["log"]) == os.devnull else \
        open_append(member["log"])
    with _interrupts_held(), log_file as log:
        proc = subprocess.Popen(member["cmd"], env=env, cwd=member["cwd"], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        adopt(member, proc.pid)
    if member.get("pid_file"):   # whoever reads the pid file finds the process chaos started
        Path(member["pid_file"]).write_text(f"{proc.pid}\n")
    return proc


@contextmanager
def _interrupts_held(signals=(signal.SIGINT, signal.SIGTERM)):
    """Defer these signals' Python handlers to the end of the block, then deliver each once.

    Only the main thread can set handlers; elsewhere, and for a signal with no Python handler, the block
    runs unguarded. Python cannot see a handler set outside it (Locust's SIGTERM, set through gevent's
    event loop, reads as SIG_DFL), so "restoring" one would put the default action over it: after a
    chaos restart, a SIGTERM killed Locust outright, with no heal and no run.json. gevent defers such a
    handler to its event loop, after this block anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = [s for s in signals if callable(signal.getsignal(s))]
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)


def stop_member(member: dict, sig: int = signal.SIGTERM, timeout: float = 10.0) -> bool:
    """Stop the member's process group (SIGCONT too, in case chaos paused it); SIGKILL after
    ``timeout``. Returns whether it was running. Never signals a pid that is not the member."""
    if not member_alive(member):
        return False
    pid = member["pid"]
    _signal_group(pid, sig)
    if sig not in (signal.SIGKILL, signal.SIGCONT):
        _signal_group(pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    while member_alive(member) and time.monotonic() < deadline:   # by identity: the pid may be reused meanwhile
        time.sleep(0.05)
    if member_alive(member):
        _signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while member_alive(member) and time.monotonic() < deadline:
            time.sleep(0.05)
    return True


def signal_member(member: dict, sig: int) -> bool:
    """Send ``sig`` to the member's process group if it still runs as that program; whether it did."""
    if not member_alive(member):
        return False
    _signal_group(member["pid"], sig)
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:  # started with start_new_session: its own group
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


# --- health ------------------------------------------------------------------------------

_no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def check_health(member: dict, timeout: float = 1.0) -> bool:
    """One probe of the member's ``health`` spec: ``{"http": url}``, ``{"redis": url}`` or ``{"tcp": [host, port]}``;
    with none, running is healthy."""
    return health_problem(member, timeout) is None


def health_problem(member: dict, timeout: float = 1.0) -> str | None:
    """What one probe of the member's health found wrong, or None when it passed."""
    health = member.get("health") or {}
    if not health:
        return None if member_alive(member) else "not running"
    try:
        if "http" in health:
            with _no_proxy.open(health["http"], timeout=timeout) as response:
                return None if response.status == 200 else f"{health['http']} answered {response.status}"
        if "redis" in health:
            client = redis.Redis.from_url(health["redis"], socket_timeout=timeout, socket_connect_timeout=timeout)
            try:
                client.ping()
                return None
            finally:
                client.close()
        if "tcp" in health:
            host, port = health["tcp"]
            with socket.create_connection((host, port), timeout=timeout):
                return None
    except urllib.error.HTTPError as exc:
        return f"{health['http']} answered {exc.code}"
    except (OSError, redis.RedisError) as exc:
        return f"{_probed(health)}: {getattr(exc, 'reason', exc)}"
    raise StateError(f"member {member.get('name', '?')}: unknown health spec {health!r}")


def _probed(health: dict) -> str:
    return health.get("http") or health.get("redis") or ":".join(map(str, health.get("tcp", ())))


def wait_healthy(member: dict, timeout: float = 30.0) -> None:
    """Poll the member's health until it passes; raise MemberUnhealthy (with the last probe's failure and its
    log tail) on timeout or as soon as its process exits."""
    deadline = time.monotonic() + timeout
    while True:
        problem = health_problem(member)
        if member.get("pid") and not pid_alive(member["pid"]):   # even if healthy: then another process answers
            raise MemberUnhealthy(f"{member.get('name', member['cmd'][0])} exited while starting; "
                                  f"last lines of {member['log']}:\n{log_tail(member)}")
        if problem is None:
            return
        if time.monotonic() > deadline:
            hint = (" (refused while its process runs: it may listen elsewhere, or a NAT rule, such as a leftover "
                    "container's published port, may capture this port)") if "refused" in problem.lower() else ""
            raise MemberUnhealthy(f"{member.get('name', member['cmd'][0])} not healthy after {timeout:.0f}s; "
                                  f"last probe: {problem}{hint}; last lines of {member['log']}:\n{log_tail(member)}")
        time.sleep(0.05)


LOG_TAIL_BYTES = 64 * 1024


def log_tail(member: dict, lines: int = 15) -> str:
    """The last ``lines`` lines of the member's log, read from its last LOG_TAIL_BYTES only: a log of GBs, or a
    device (/dev/zero never ends), is never read whole; a FIFO or a device is "(no log)"."""
    try:
        with open_regular(member["log"]) as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - LOG_TAIL_BYTES))
            data = fh.read(LOG_TAIL_BYTES)
    except OSError:
        return "(no log)"
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > LOG_TAIL_BYTES and len(text) > 1:
        text = text[1:]   # the first line read is the end of a longer one
    return "\n".join(text[-lines:])
