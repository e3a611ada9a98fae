"""The local backend: processes on this machine named in a state file (docs/CONTRACTS.md), such as the
embedded stack's, or in a user's targets file (docs/chaos.md).

Processes are signalled by the pids in the state file (their whole process group: members run
in their own sessions), restarted from their recorded cmd/env/cwd with targets.registry, and the
new pid is written back under the state lock. HAProxy is driven through its runtime API socket;
Redis through redis-py on the member's health URL.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import time
from pathlib import Path
from urllib.parse import urlsplit

import redis

from chaos import faults as F
from chaos.backend import Backend, UnsupportedFault, refuse_own_process
from chaos.backends import NotApplied, local_failover
from chaos.faults import Fault
from contracts.redis_url import CLIENT_NAME
from targets import file as targets_file, registry as state, sentinel
from targets.haproxy import runtime_command, server_sessions, unreachable

STARTS_AGAIN = {F.KILL, F.RESTART, F.REDIS_RESTART, F.ROLLING_RESTART, F.REDIS_FAILOVER}
SIGNALLED = STARTS_AGAIN | {F.PAUSE}  # faults that signal the member's process (refuse_own_process)
REDIS_KINDS = {F.REDIS_RESTART, F.REDIS_CLIENT_KILL, F.REDIS_STALL, F.REDIS_FAILOVER, F.REDIS_BGSAVE}
LB_KINDS = {F.LB_DROP, F.LB_DISABLE}


def _natural(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


class LocalBackend(Backend):
    name = "local"
    kinds = frozenset({F.KILL, F.RESTART, F.PAUSE, F.REDIS_RESTART, F.REDIS_CLIENT_KILL, F.REDIS_STALL,
                       F.LB_DROP, F.LB_DISABLE, F.ROLLING_RESTART, F.REDIS_FAILOVER, F.REDIS_BGSAVE})

    def __init__(self, state_dir: str | None = None, health_timeout: float = 60.0, targets: str | None = None):
        """``state_dir``: a stack's state directory (default $REFBOT_STATE_DIR or .stack); or
        ``targets``: a targets file (docs/chaos.md), whose registry then is the state directory."""
        self.targets = str(Path(targets).absolute()) if targets else None
        self.state_dir = str(targets_file.open_registry(self.targets) if targets else state.state_dir(state_dir))
        self.health_timeout = health_timeout

    def config(self) -> dict:
        return {"state_dir": self.state_dir, "health_timeout": self.health_timeout,
                **({"targets": self.targets} if self.targets else {})}

    # ---- resolving --------------------------------------------------------------------------
    def _state(self) -> dict:
        st = state.load(self.state_dir)
        if st is None:
            raise state.StateError(f"nothing is up: no state file at {state.state_path(self.state_dir)} "
                                   f"(start the stack first, or name your processes in a targets file: --targets FILE)")
        return st

    def instances(self, target: str) -> list[str]:
        members = self._state()["members"]
        if target in members:
            return [target]
        return sorted((n for n, m in members.items() if m.get("role") == target), key=_natural)

    def check(self, fault: Fault) -> None:
        super().check(fault)
        st = self._state()
        names = self.instances(fault.target)
        roles = {st["members"][n].get("role") for n in names}
        if fault.kind in REDIS_KINDS and names and roles != {"redis"}:
            raise UnsupportedFault(f"{fault.kind} needs a redis target, {fault.target!r} is {sorted(roles)}")
        if fault.kind in LB_KINDS:
            if not st.get("haproxy_socket"):
                raise UnsupportedFault(f"{fault.kind} needs HAProxy: the state file has no haproxy_socket")
            if problem := unreachable(st["haproxy_socket"]):
                raise UnsupportedFault(f"{fault.kind} needs HAProxy: {problem}")
            if any(not st["members"][n].get("lb_server") for n in names):
                raise UnsupportedFault(f"{fault.kind} targets members behind the load balancer (e.g. bot); "
                                       f"{fault.target!r} has no lb_server")
        for name in names:
            pid = st["members"][name].get("pid")
            if fault.kind in SIGNALLED and isinstance(pid, int) and state.member_alive(st["members"][name]):
                try:
                    refuse_own_process(pid, name)
                except PermissionError as exc:  # said before any load: a CI script's `python app.py &` then locust
                    cmd = st["members"][name].get("cmd")
                    raise UnsupportedFault(
                        f"{exc}, which every fault that signals it would refuse: start it in a process group of its own "
                        f"(`setsid {shlex.join(map(str, cmd)) if isinstance(cmd, list) else 'COMMAND'} &`, or "
                        "`python -m chaos targets start`)") from None
            if fault.kind in STARTS_AGAIN and not st["members"][name].get("cmd"):
                raise UnsupportedFault(f"{fault.kind} must start {name} again, but it has no command "
                                       f"(give 'command' in the targets file)")
        if fault.kind == F.REDIS_FAILOVER and names:
            replicas = [n for n in names if st["members"][n].get("replication") == "replica"]
            if not sentinel.replicated(st) or not replicas:
                raise UnsupportedFault(f"redis-failover needs Redis with a replica behind Sentinel (the embedded "
                                       f"stack's `up --redis sentinel`); {fault.target!r} in {state.state_path(self.state_dir)} is "
                                       f"{len(names)} redis-server(s) and no replica")
        if fault.kind == F.ROLLING_RESTART and names and roles != {"bot"}:
            raise UnsupportedFault(f"rolling-restart needs the bot replicas as target, {fault.target!r} is {sorted(roles)}")

    def describe(self, instance: str) -> str:
        st = self._state()
        if instance not in st["members"]:
            return f"{instance}: " + ", ".join(self.describe(n) for n in self.instances(instance))
        m = st["members"][instance]
        pid = m.get("pid")
        alive = state.member_alive(m)
        up = _uptime(pid) if alive else None
        extra = "".join(f" {k} {m[k]}" for k in ("release", "lb_server", "persistence", "replication") if m.get(k))
        return (f"{instance} (role {m.get('role')}) pid {pid} {'running' if alive else 'NOT running'}"
                f"{f' up {up:.1f}s' if up is not None else ''} port {m.get('port')}{extra}")

    # ---- faults -----------------------------------------------------------------------------
    def apply(self, fault: Fault, instance: str) -> dict:
        k = fault.kind
        if k in (F.KILL, F.RESTART) or (k == F.REDIS_RESTART):
            graceful = k == F.RESTART or (k == F.REDIS_RESTART and fault.params.get("mode") == "shutdown")
            with state.locked_state(self.state_dir) as st:
                m = self._running(st, instance)
                pid = m["pid"]
                state.stop_member(m, signal.SIGTERM if graceful else signal.SIGKILL,
                                  timeout=float(fault.params.get("grace", 10.0)))
            return {"pid": pid}
        if k == F.PAUSE:
            with state.locked_state(self.state_dir) as st:
                m = self._running(st, instance)
                _signal_group(m["pid"], signal.SIGSTOP)
                _wait_stopped(m["pid"])
                return {"pid": m["pid"], "pid_start": m.get("pid_start")}
        if k == F.REDIS_CLIENT_KILL:
            with self._redis(instance) as r:
                ours = sum(c.get("name") == CLIENT_NAME for c in r.client_list())  # goldfish's telemetry and audit
                killed = r.execute_command("CLIENT", "KILL", "TYPE", fault.params.get("type", "normal"), "SKIPME", "yes")
            return {"killed": int(killed), "touched": max(0, int(killed) - ours)}
        if k == F.REDIS_STALL:
            # The pause carries its own timeout, so Redis resumes by itself even if the controller
            # dies. ALL cannot be ended early (Redis 7.0 postpones CLIENT UNPAUSE too): exact
            # duration. WRITE is ended by UNPAUSE; 2 s of slack cover a late recovery.
            mode = fault.params.get("mode", "all").upper()
            ms = int((fault.duration or 0) * 1000) + (0 if mode == "ALL" else 2000)
            with self._redis(instance) as r:
                r.execute_command("CLIENT", "PAUSE", ms, mode)
            return {"pause_ms": ms, "mode": mode}
        if k == F.LB_DROP:
            server = self._lb_server(instance)
            open_sessions = server_sessions(self._state()["haproxy_socket"], server)
            self._haproxy(f"shutdown sessions server {server}")
            return {"server": server, "touched": open_sessions}
        if k == F.LB_DISABLE:
            server = self._lb_server(instance)
            self._haproxy(f"set server {server} state maint")
            return {"server": server}
        if k == F.ROLLING_RESTART:
            return self._rolling_restart(fault, instance)
        if k == F.REDIS_FAILOVER:
            return local_failover.apply(self.state_dir, fault, timeout=self.health_timeout)
        if k == F.REDIS_BGSAVE:
            with self._redis(instance, timeout=self.health_timeout) as r:
                return _bgsave(r, self.health_timeout)
        raise UnsupportedFault(f"local backend cannot do {k!r}")

    def recover(self, fault: Fault, instance: str, undo: dict) -> dict | None:
        k = fault.kind
        if k not in F.WHOLE_TARGET_KINDS and instance not in self._state()["members"]:  # those name their target
            raise state.StateError(f"no member {instance!r} in {state.state_path(self.state_dir)}: nothing was undone")
        if k == F.REDIS_FAILOVER or (k in (F.KILL, F.RESTART, F.REDIS_RESTART, F.PAUSE) and self._replicated_store(instance)):
            # who is primary is Sentinel's call: a member comes back as a replica of the current primary
            return local_failover.recover(self.state_dir, timeout=max(90.0, self.health_timeout))
        if k in (F.KILL, F.RESTART, F.REDIS_RESTART):
            self._ensure_running(instance)
        elif k == F.PAUSE:
            m = self._state()["members"][instance]
            paused = dict(m, name=instance, pid=undo.get("pid") or m.get("pid"),
                          pid_start=undo.get("pid_start", m.get("pid_start")))
            if state.member_alive(paused):   # the process it stopped, not whoever has its pid now
                _signal_group(paused["pid"], signal.SIGCONT)
            self._ensure_running(instance)
        elif k == F.REDIS_STALL:
            # Under ALL this returns when the pause ends (it is postponed like any command).
            with self._redis(instance, timeout=10 + (fault.duration or 0)) as r:
                r.execute_command("CLIENT", "UNPAUSE")
        elif k == F.LB_DISABLE:
            self._haproxy(f"set server {undo.get('server') or self._lb_server(instance)} state ready")
        elif k == F.ROLLING_RESTART:
            for name in self.instances(instance):
                self._ensure_running(name)
                server = self._state()["members"][name].get("lb_server")
                if server and self._state().get("haproxy_socket"):
                    self._haproxy(f"set server {server} state ready")
        # redis-client-kill, lb-drop and redis-bgsave are instant: nothing to undo.
        return None

    # ---- helpers ----------------------------------------------------------------------------
    def _replicated_store(self, instance: str) -> bool:
        """Whether ``instance`` is a data member or sentinel of a Sentinel-managed Redis."""
        st = self._state()
        return sentinel.replicated(st) and st["members"].get(instance, {}).get("role") in ("redis", "sentinel")

    def not_running(self, instance: str) -> str | None:
        m = self._state()["members"].get(instance)
        if m is None or state.member_alive(m) or m.get("pid_file") and state.adopt_pid_file(dict(m)) is None:
            return None
        return state.pid_reused(dict(m, name=instance)) or f"{instance} is not running" + \
            (f" (pid {m['pid']})" if m.get("pid") else "")

    def _running(self, st: dict, instance: str, untouched: bool = True) -> dict:
        """The member's record when its process runs. Else NotApplied while nothing has been done yet
        (``untouched``), RuntimeError after (a rolling restart's later member)."""
        m = st["members"].get(instance)
        if m is None:
            raise state.StateError(f"no member {instance!r} in {state.state_path(self.state_dir)}")
        if not state.member_alive(m):
            why = [state.pid_reused(dict(m, name=instance)) or f"{instance} is not running (pid {m.get('pid')})"]
            if m.get("pid_file"):   # started again by someone else? its pid file says
                why.append(state.adopt_pid_file(m))
            if not state.member_alive(m):
                raise (NotApplied if untouched else RuntimeError)("; ".join(filter(None, why)))
        refuse_own_process(m["pid"], instance)
        return m

    def _ensure_running(self, instance: str) -> None:
        """Start the member if it is down (idempotent), then wait until it is healthy."""
        with state.locked_state(self.state_dir) as st:
            m = st["members"][instance]
            if not state.member_alive(m) and (not m.get("pid_file") or state.adopt_pid_file(m)):
                if state.check_health(m):   # e.g. a pid file that names a wrapper shell, not the server
                    raise RuntimeError(f"{instance} is not running, yet its health check passes: another process "
                                       f"serves it; not starting a second copy")
                state.start_member(m)   # unless someone else has started it again (its pid file says so)
            member = dict(m, name=instance)
        state.wait_healthy(member, timeout=self.health_timeout)

    def _rolling_restart(self, fault: Fault, target: str) -> dict:
        release = fault.params["release"]
        done = []
        for name in self.instances(target):
            with state.locked_state(self.state_dir) as st:
                m = self._running(st, name, untouched=not done)
                server = m.get("lb_server") if st.get("haproxy_socket") else None
            if server:
                self._haproxy(f"set server {server} state maint")
            with state.locked_state(self.state_dir) as st:
                m = st["members"][name]
                state.stop_member(m, signal.SIGTERM)
                m["env"] = {**m.get("env", {}), **(fault.params.get("env") or {}), "REFBOT_RELEASE": release}
                m["release"] = release
                state.start_member(m)
                member = dict(m, name=name)
            state.wait_healthy(member, timeout=self.health_timeout)
            if server:
                self._haproxy(f"set server {server} state ready")
            done.append(name)
            if fault.params.get("pause") and self.pause_between(float(fault.params["pause"])):
                break
        return {"members": done, "release": release}

    def _redis(self, instance: str, timeout: float = 10) -> redis.Redis:
        m = self._state()["members"][instance]
        url = m.get("health", {}).get("redis") or f"redis://127.0.0.1:{m['port']}/0"
        return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=5)

    def _lb_server(self, instance: str) -> str:
        server = self._state()["members"][instance].get("lb_server")
        if not server:
            raise UnsupportedFault(f"{instance} has no lb_server in the state file")
        return server

    def _haproxy(self, command: str) -> str:
        """One HAProxy runtime API command through the stack's unix socket."""
        return runtime_command(self._state()["haproxy_socket"], command)


def _bgsave(r: redis.Redis, timeout: float) -> dict:
    """BGSAVE and wait until this snapshot (not an earlier one) is on disk; what a restart then loads."""
    before = r.info("persistence")
    started = time.monotonic()
    r.bgsave(schedule=True)  # after a BGSAVE (or AOF rewrite) already running, if any
    while True:
        now = r.info("persistence")
        if now["rdb_saves"] > before["rdb_saves"] and not now["rdb_bgsave_in_progress"]:
            break
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"BGSAVE did not finish in {timeout:g}s ({now.get('rdb_last_bgsave_status')})")
        time.sleep(0.01)
    if now["rdb_last_bgsave_status"] != "ok":
        raise RuntimeError(f"BGSAVE failed: rdb_last_bgsave_status {now['rdb_last_bgsave_status']}")
    return {"saved_at": now["rdb_last_save_time"], "keys": r.dbsize(), "seconds": round(time.monotonic() - started, 3)}


def _signal_group(pid: int, sig: int) -> None:
    """Signal the member's process group (members run in their own session), else the pid."""
    refuse_own_process(pid, f"pid {pid}")
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_stopped(pid: int, timeout: float = 2.0) -> None:
    """Until the kernel shows ``pid`` stopped: a SIGSTOP takes effect when the process is next scheduled, so a
    busy one ran on for a moment after the apply was recorded (and a test that looked at once saw it running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state.process_state(pid) in (None, "T", "t", "Z", "X"):  # None: gone, nothing left to wait for
            return
        time.sleep(0.005)


def _uptime(pid: int) -> float | None:
    """Seconds since the process started (from /proc), for the dry run's proof of nothing touched."""
    start = state.start_ticks(pid)
    try:
        boot_uptime = float(open("/proc/uptime").read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return None if start is None else boot_uptime - start / os.sysconf("SC_CLK_TCK")


LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def stack_elsewhere(path: str, host: str | None, store_url: str | None) -> str | None:
    """A warning when the stack whose state file chaos acts on (``path``, .../state.json) is not the one the
    load goes to (``host``) or the audit reads (``store_url``): its faults then hit processes the run does not
    test, and the run PASSed with every bot of another stack killed. A front the state does not know (a proxy
    before the stack) is warned about too: it cannot be told apart."""
    if Path(path).suffix != ".json":
        return None  # a targets file names processes, not a stack's addresses
    try:
        st = state.load(Path(path).parent) or {}
    except state.StateError:
        return None  # the plan's validation says what is wrong with it

    def where(url: str | None) -> tuple | None:
        """(host, port) of a URL, every loopback name one host; None without a host."""
        try:
            parts = urlsplit(url or "")
            port = parts.port or {"https": 443, "http": 80}.get(parts.scheme, 6379)
        except ValueError:
            return None
        return ("loopback" if parts.hostname in LOOPBACK else parts.hostname, port) if parts.hostname else None

    ports = {("loopback", m.get("port")) for m in (st.get("members") or {}).values() if isinstance(m, dict)}
    stack = (where(st.get("url")), where(st.get("store_url")))
    tested = (where(host), where(store_url))
    apart = [(what, theirs, ours) for what, theirs, ours in zip(("bots", "Redis"), stack, tested)
             if theirs and ours and ours != theirs and ours not in ports]
    if not apart:
        return None
    said = "; ".join(f"its {what} at {theirs[0]}:{theirs[1]}, but this run's "
                     f"{'--host' if what == 'bots' else '--store-url'} is {ours[0]}:{ours[1]}"
                     for what, theirs, ours in apart)
    return (f"chaos acts on the stack of {path} ({said}): its faults may not reach what this run "
            "tests, and a PASS says nothing of them (point --stack-state at the stack under test)")


def stack_options(path: str) -> dict:
    """Backend options for Locust's ``--stack-state PATH``: a targets file (.yaml/.yml), else a stack's state file,
    which is always named state.json (the backend reads and writes ``state.json`` in its folder, whatever the
    path's file name, so another name is refused rather than a different file used)."""
    if Path(path).suffix in (".yaml", ".yml"):
        return {"targets": path}
    if Path(path).name != state.STATE_NAME:
        raise ValueError(f"--stack-state {path}: a stack's state file is named {state.STATE_NAME} (e.g. "
                         f".stack/{state.STATE_NAME}), a targets file ends in .yaml or .yml")
    return {"state_dir": str(Path(path).parent)}
