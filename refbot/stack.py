"""The embedded local stack: redis-server + N refbot replicas + HAProxy, on loopback.

``up`` starts them, waits until each is healthy and records them in the state file
(targets/registry.py); ``down`` stops exactly what the state file names, by pid and process
group; ``status`` reports each member. The state file is written after every member starts,
so even an interrupted ``up`` leaves nothing untracked — and ``up`` cleans up after itself
when anything fails.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import refbot
from refbot import haproxy
from targets import registry as state, sentinel
from targets.haproxy import server_status
from refbot.config import parse_mode

PERSISTENCE = ("none", "rdb", "aof-everysec", "aof-always")
# redis.conf's eviction policies; with any but noeviction a full store drops keys silently (a cache)
EVICTION = ("noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
            "volatile-random", "volatile-ttl")
MEMORY_SIZE = re.compile(r"\d+(b|k|kb|m|mb|g|gb)?", re.I)  # redis.conf's size grammar: 100mb, 1gb, 512k, bytes
TOPOLOGIES = ("single", "sentinel")   # one redis-server; or a primary, a replica and three sentinels
APT_PACKAGE = {"redis-server": "redis-server", "haproxy": "haproxy"}
MAX_REPLICAS = 32     # each replica is a Python process of its own; more is a typo, not a stack
MAX_MS = 3_600_000    # --think-ms, --jitter-ms, --flush-ms, --wait-ms: at most an hour
MAX_TIMEOUT = 86_400  # --timeout: at most a day
MAX_LB_RETRIES = 100
RELEASE = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a release label: it names a pickled class and goes in env
PACKAGE_ROOT = Path(refbot.__file__).resolve().parent.parent


class StackError(RuntimeError):
    """The stack cannot be brought up or down as asked; the message says why and what to do."""


class AlreadyUp(StackError):
    pass


class BadOption(StackError):
    """An option value that can never work (exit code 2, like an argparse error)."""


@dataclass
class StackOptions:
    replicas: int = 3
    mode: str = "correct"
    releases: list[str] = field(default_factory=lambda: ["v1"])
    persistence: str = "none"
    think_ms: float = 30.0
    jitter_ms: float = 20.0
    flush_ms: float = 1000.0
    state_dir: str | Path | None = None
    port: int | None = None          # HAProxy's frontend port (free one if None)
    redis_port: int | None = None
    lb_retries: int = 0
    maxmemory: str | None = None         # redis-server --maxmemory (e.g. 8mb); None: no limit
    maxmemory_policy: str | None = None  # redis-server --maxmemory-policy (e.g. allkeys-lru)
    timeout: float = 60.0            # per member, to become healthy
    redis: str = "single"            # TOPOLOGIES
    save: str | None = None          # RDB save points with persistence rdb (default "1 1")
    wait_replicas: int = 0           # bots WAIT for this many replicas after each write (0: no WAIT)
    wait_ms: float = 100.0           # ... at most this long

    def release_of(self, index: int) -> str:
        return self.releases[index] if len(self.releases) > 1 else self.releases[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def find_binary(name: str) -> str:
    """The path of ``redis-server`` or ``haproxy``; $REFBOT_REDIS_SERVER / $REFBOT_HAPROXY may name another.

    Without an override, /usr/sbin and /sbin are searched too: Debian puts haproxy there and
    leaves them off ordinary users' PATH.
    """
    variable = "REFBOT_" + name.upper().replace("-", "_")
    wanted = os.environ.get(variable) or name
    path = shutil.which(wanted)
    if not path and wanted == name:
        path = shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")
    if not path:
        raise StackError(f"{wanted} not found: install it with `sudo apt-get install {APT_PACKAGE[name]}` "
                         f"(or `make setup`), or set ${variable} to its path")
    return path


def validate(opts: StackOptions) -> None:
    """Reject bad options before anything starts."""
    parse_mode(opts.mode)  # ConfigError names the known modes and what a parameter must be
    if not 1 <= opts.replicas <= MAX_REPLICAS:
        raise BadOption(f"--replicas must be at least 1 and at most {MAX_REPLICAS} (got {opts.replicas})")
    for flag, ms in (("--think-ms", opts.think_ms), ("--jitter-ms", opts.jitter_ms), ("--flush-ms", opts.flush_ms)):
        if not 0 <= ms <= MAX_MS:  # NaN is in no range
            raise BadOption(f"{flag} {ms:g} must be a number of ms in [0, {MAX_MS}] (an hour)")
    if not 0 < opts.timeout <= MAX_TIMEOUT:
        raise BadOption(f"--timeout {opts.timeout:g} must be seconds in (0, {MAX_TIMEOUT}] (a day)")
    if not 0 <= opts.lb_retries <= MAX_LB_RETRIES:
        raise BadOption(f"--lb-retries {opts.lb_retries} must be in [0, {MAX_LB_RETRIES}]")
    for flag, port in (("--port", opts.port), ("--redis-port", opts.redis_port)):
        if port is not None and not 1 <= port <= 65535:
            raise BadOption(f"{flag} {port} is not a TCP port (1-65535)")
    if opts.port is not None and opts.port == opts.redis_port:
        raise BadOption(f"--port and --redis-port are both {opts.port}: HAProxy and redis-server need a port each")
    if opts.persistence not in PERSISTENCE:
        raise BadOption(f"unknown --persistence {opts.persistence!r}; choose one of {', '.join(PERSISTENCE)}")
    if opts.redis not in TOPOLOGIES:
        raise BadOption(f"unknown --redis {opts.redis!r}; choose one of {', '.join(TOPOLOGIES)}")
    if opts.save is not None and opts.persistence != "rdb":
        raise BadOption(f"--save {opts.save!r} sets RDB save points; it needs --persistence rdb")
    if opts.wait_replicas and opts.redis != "sentinel":
        raise BadOption(f"--wait-replicas {opts.wait_replicas} needs replicas to wait for: add --redis sentinel "
                        "(one primary, one replica); a single redis-server would fail every turn")
    if opts.wait_replicas not in (0, 1):
        raise BadOption(f"--wait-replicas must be 0 or 1 (the sentinel stack has one replica; got {opts.wait_replicas})")
    if not 1 <= opts.wait_ms <= MAX_MS:  # the bots' own rule (refbot/config.py): WAIT with 0 blocks forever
        raise BadOption(f"--wait-ms {opts.wait_ms:g}: give --wait-ms at least 1 and at most {MAX_MS}")
    if not opts.releases or any(not r.strip() for r in opts.releases):
        raise BadOption("--releases must be a comma-separated list of non-empty release names")
    if bad := next((r for r in opts.releases if not RELEASE.fullmatch(r)), None):
        raise BadOption(f"--releases: {bad!r} is not a release name (letters, digits, '.', '_', '-'; at most 64)")
    if len(opts.releases) not in (1, opts.replicas):
        raise BadOption(f"--releases names {len(opts.releases)} releases for {opts.replicas} replicas; "
                         "give one (for all) or one per replica")
    if opts.maxmemory is not None and not MEMORY_SIZE.fullmatch(opts.maxmemory):
        raise BadOption(f"--maxmemory {opts.maxmemory!r} is not a size like 8mb, 1gb, 512k or a number of bytes")
    if opts.maxmemory_policy is not None and opts.maxmemory_policy not in EVICTION:
        raise BadOption(f"unknown --maxmemory-policy {opts.maxmemory_policy!r}; choose one of {', '.join(EVICTION)}")
    if opts.maxmemory_policy is not None and opts.maxmemory is None:
        raise BadOption("--maxmemory-policy needs --maxmemory (without a limit nothing is ever evicted)")
    for flag, port in (("--port", opts.port), ("--redis-port", opts.redis_port)):
        if port is not None and not port_free(port):
            raise BadOption(f"{flag} {port}: 127.0.0.1:{port} is already in use; pick another port or omit {flag}")


def state_directory(given, create: bool) -> Path:
    """The state directory (``--state-dir``, else $REFBOT_STATE_DIR, else .stack), created when ``create``;
    BadOption naming where it came from when it is not a directory or cannot be made one."""
    directory = state.state_dir(given)
    env = os.environ.get("REFBOT_STATE_DIR")
    flag = f"--state-dir {given}" if given else f"$REFBOT_STATE_DIR {env}" if env else f"state directory {directory}"
    if directory.exists() and not directory.is_dir():
        raise BadOption(f"{flag}: {directory} is not a directory")
    if create:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadOption(f"{flag}: cannot create {directory}: {exc.strerror or exc}") from None
    return directory


def redis_args(binary: str, port: int, directory: Path, persistence: str, save: str | None = None,
               maxmemory: str | None = None, policy: str | None = None) -> list[str]:
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--protected-mode", "no", "--daemonize", "no", "--save", "", "--appendonly", "no"]
    if persistence == "rdb":
        args[args.index("--save") + 1] = "1 1" if save is None else save
    elif persistence.startswith("aof"):
        args[args.index("--appendonly") + 1] = "yes"
        args += ["--appendfsync", "always" if persistence == "aof-always" else "everysec"]
    if maxmemory is not None:
        args += ["--maxmemory", maxmemory]
    if policy is not None:
        args += ["--maxmemory-policy", policy]
    return args


def plan(opts: StackOptions, directory: Path) -> dict:
    """The state the stack will have: every member's command, env, ports, log and health spec."""
    redis_bin, haproxy_bin = find_binary("redis-server"), find_binary("haproxy")
    taken: set[int] = set()

    def pick(port):
        while port is None or port in taken:
            port = free_port()
        taken.add(port)
        return port

    redis_port, lb_port = pick(opts.redis_port), pick(opts.port)
    sock = haproxy.socket_path(directory)
    if opts.redis == "sentinel":
        members = _replicated_members(opts, directory, redis_bin, redis_port, pick)
        store_url = sentinel.sentinel_url([m["port"] for m in members.values() if m["role"] == "sentinel"])
    else:
        store_url = f"redis://127.0.0.1:{redis_port}/0"
        members = {"redis": _redis_member("redis", opts, directory, redis_bin, redis_port)}
    wait = {"REFBOT_WAIT_REPLICAS": str(opts.wait_replicas), "REFBOT_WAIT_MS": f"{opts.wait_ms:g}"} \
        if opts.wait_replicas else {}
    for i in range(opts.replicas):
        name, port, release = f"bot-{i + 1}", pick(None), opts.release_of(i)
        members[name] = {
            "name": name, "role": "bot", "pid": None, "port": port,
            "cmd": [sys.executable, "-m", "refbot", "serve", "--host", "127.0.0.1", "--port", str(port)],
            "env": {"REFBOT_MODE": opts.mode, "REFBOT_RELEASE": release, "REFBOT_REPLICA": name,
                    "REFBOT_REDIS_URL": store_url, "REFBOT_THINK_MS": str(opts.think_ms),
                    "REFBOT_JITTER_MS": str(opts.jitter_ms), "REFBOT_FLUSH_MS": str(opts.flush_ms),
                    "REFBOT_STATE_DIR": str(directory), "PYTHONUNBUFFERED": "1", **wait},
            "cwd": str(PACKAGE_ROOT), "log": str(directory / f"{name}.log"),
            "health": {"http": f"http://127.0.0.1:{port}/healthz"},
            "release": release, "mode": opts.mode, "lb_server": f"{haproxy.BACKEND}/{name}"}
    config = directory / "haproxy.cfg"
    members["haproxy"] = {
        "name": "haproxy", "role": "lb", "pid": None, "port": lb_port,
        "cmd": [haproxy_bin, "-db", "-f", str(config)], "env": {},
        "cwd": str(directory), "log": str(directory / "haproxy.log"),
        "health": {"tcp": ["127.0.0.1", lb_port]}, "config": str(config), "lb_retries": opts.lb_retries}
    return {"version": state.VERSION, "dir": str(directory), "url": f"http://127.0.0.1:{lb_port}",
            "store_url": store_url, "haproxy_socket": str(sock), "mode": opts.mode,
            "persistence": opts.persistence, "redis": opts.redis, "started": time.time(), "members": members}


def _redis_member(name: str, opts: StackOptions, directory: Path, binary: str, port: int) -> dict:
    return {"name": name, "role": "redis", "pid": None, "port": port,
            "cmd": redis_args(binary, port, directory / name, opts.persistence, opts.save, opts.maxmemory,
                              opts.maxmemory_policy), "env": {},
            "cwd": str(directory / name), "log": str(directory / f"{name}.log"),
            "health": {"redis": f"redis://127.0.0.1:{port}/0"}, "persistence": opts.persistence,
            "maxmemory": opts.maxmemory, "maxmemory_policy": opts.maxmemory_policy}


def _replicated_members(opts: StackOptions, directory: Path, binary: str, primary_port: int, pick) -> dict:
    """redis-1 (primary), redis-2 (its replica) and sentinel-1..3 (targets/sentinel.py)."""
    members = {}
    for name, port in (("redis-1", primary_port), ("redis-2", pick(None))):
        m = _redis_member(name, opts, directory, binary, port)
        # a full sync starts at once instead of waiting 5 s for more replicas to join
        m["cmd"] += ["--repl-diskless-sync-delay", "0"]
        members[name] = m
    sentinel.record_roles({"members": members}, "redis-1")
    for i in (1, 2, 3):
        name, port = f"sentinel-{i}", pick(None)
        config = directory / name / "sentinel.conf"
        members[name] = {"name": name, "role": "sentinel", "pid": None, "port": port,
                         "cmd": [binary, str(config), "--sentinel"], "env": {},
                         "cwd": str(directory / name), "log": str(directory / f"{name}.log"),
                         "health": {"redis": f"redis://127.0.0.1:{port}"}, "config": str(config)}
    return members


def live_members(st: dict) -> list[str]:
    return [name for name, m in st.get("members", {}).items() if state.member_alive(m)]


def up(opts: StackOptions, say=print) -> dict:
    """Bring the stack up and return its state; on any failure stop what was started and raise."""
    validate(opts)
    directory = state_directory(opts.state_dir, create=True)
    with state.locked_state(directory, missing_ok=True) as existing:
        if existing:
            alive = live_members(existing)
            if alive:
                raise AlreadyUp(f"a stack is already up in {directory} ({', '.join(alive)} running; "
                                f"load balancer {existing.get('url')}); run `python -m refbot down"
                                f"{_dir_flag(opts.state_dir)}` first")
            say(f"note: replacing a stale state file in {directory} (none of its processes runs)")
        st = plan(opts, directory)
        servers = {n: m["port"] for n, m in st["members"].items() if m["role"] == "bot"}
        Path(st["members"]["haproxy"]["config"]).parent.mkdir(parents=True, exist_ok=True)
        Path(st["members"]["haproxy"]["config"]).write_text(
            haproxy.render_config(st["members"]["haproxy"]["port"], servers, Path(st["haproxy_socket"]),
                                  opts.lb_retries))
        Path(st["haproxy_socket"]).unlink(missing_ok=True)
        for m in st["members"].values():
            if m["role"] == "sentinel":
                Path(m["config"]).parent.mkdir(parents=True, exist_ok=True)
                Path(m["config"]).write_text(sentinel.sentinel_config(m["port"], Path(m["cwd"]),
                                                                      st["members"]["redis-1"]["port"]))
        try:
            for name in [n for n, m in st["members"].items() if m["role"] in ("redis", "sentinel")]:
                _start(st, name, opts.timeout, say)
            if sentinel.replicated(st):
                sentinel.wait_synced(st, "redis-1", opts.timeout)
                sentinel.wait_agreed(st, "redis-1", opts.timeout)
            for name in servers:  # start replicas together: their imports overlap
                state.start_member(st["members"][name])
                state.save(st, directory)
            for name in servers:
                state.wait_healthy(st["members"][name], opts.timeout)
                say(f"{name} up on 127.0.0.1:{st['members'][name]['port']} "
                    f"(release {st['members'][name]['release']}, mode {opts.mode})")
            _start(st, "haproxy", opts.timeout, say)
            _wait_lb_sees_all(st, opts.timeout)
        except BaseException:
            _stop_all(st)
            state.remove(directory)
            raise
    say(f"stack up: {st['url']}  store {st['store_url']}  state {directory / state.STATE_NAME}")
    return st


def _start(st: dict, name: str, timeout: float, say) -> None:
    member = st["members"][name]
    state.start_member(member)
    state.save(st, st["dir"])
    state.wait_healthy(member, timeout)
    say(f"{name} up on 127.0.0.1:{member['port']}")


def _wait_lb_sees_all(st: dict, timeout: float) -> None:
    bots = [n for n, m in st["members"].items() if m["role"] == "bot"]
    deadline = time.monotonic() + timeout
    seen: dict = {}
    while time.monotonic() < deadline:
        try:
            seen = server_status(st["haproxy_socket"], haproxy.BACKEND)
            if all(seen.get(b, "").startswith("UP") for b in bots):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise StackError(f"HAProxy does not see every replica up after {timeout:.0f}s: {seen}")


def _stop_all(st: dict, sig: int = signal.SIGTERM) -> list[str]:
    """Stop members load balancer first, store last; return the names that were running."""
    order = sorted(st.get("members", {}),
                   key=lambda n: {"lb": 0, "bot": 1, "sentinel": 2}.get(st["members"][n]["role"], 3))
    return [name for name in order if state.stop_member(st["members"][name], sig)]


def down(state_dir=None, say=print) -> list[str] | None:
    """Stop everything the state file names and remove it; None when nothing was up."""
    directory = state_directory(state_dir, create=False)
    if not directory.exists():
        return None
    with state.locked_state(directory, missing_ok=True) as st:
        if not st:
            return None
        stopped = _stop_all(st)
        sock = st.get("haproxy_socket", directory / "haproxy.sock")
        if isinstance(sock, (str, Path)):  # null (a targets file's registry) or host:port: no socket file to remove
            Path(sock).unlink(missing_ok=True)
        state.remove(directory)
    say(f"stack down: stopped {', '.join(stopped) if stopped else 'nothing (no member was running)'}")
    return stopped


def status(state_dir=None) -> list[dict] | None:
    """One row per member: name, role, pid, port, alive, healthy, release, mode, lb (HAProxy's view)."""
    st = state.load(state_directory(state_dir, create=False))
    if st is None:
        return None
    lb_view = {}
    try:
        if isinstance(st.get("haproxy_socket"), str):  # null: a targets file's record, no load balancer
            lb_view = server_status(st["haproxy_socket"], haproxy.BACKEND)
    except OSError:
        pass
    rows = []
    for name, m in st["members"].items():
        alive = state.member_alive(m)
        rows.append({"name": name, "role": m["role"], "pid": m.get("pid"), "port": m.get("port"),
                     "alive": alive, "healthy": alive and state.check_health(m),
                     "release": m.get("release", ""), "mode": m.get("mode", ""),
                     "lb": lb_view.get(name, "") if m["role"] == "bot" else "",
                     "replication": m.get("replication", "")})
    return rows


def format_status(rows: list[dict]) -> str:
    header = f"{'member':<10} {'role':<8} {'pid':>8} {'port':>6} {'state':<6} {'release':<8} {'mode':<22} haproxy"
    lines = [header]
    for r in rows:
        role = r.get("replication") or r["role"] or "-"  # primary / replica of a replicated store; none: a target
        lines.append(f"{r['name']:<10} {role:<8} {r['pid'] or '-':>8} {r['port'] or '-':>6} "
                     f"{'up' if r['healthy'] else 'down':<6} {r['release']:<8} {r['mode']:<22} {r['lb']}")
    return "\n".join(lines)


def _dir_flag(state_dir) -> str:
    return f" --state-dir {state_dir}" if state_dir else ""
