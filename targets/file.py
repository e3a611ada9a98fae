"""A user's targets file: their own processes as chaos targets (docs/chaos.md, "Your own processes").

It is read from the YAML node tree, like a chaos plan, so every error names file, line and field,
and every problem is reported at once. Each target becomes a member of a registry state file
(targets/registry.py) in the file's state directory, where chaos records the pid and start time
of each process it starts or adopts from a pid file; from there the local backend treats it
exactly like a member of the embedded stack.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from contracts import redact, yamldoc
from contracts.redis_url import check_url
from contracts.runfolder import open_regular, special_kind
from targets import registry

TOP_KEYS = ("targets", "state_dir", "haproxy_socket")
TARGET_KEYS = ("command", "pid_file", "cwd", "env", "health", "role", "lb_server", "log")
HEALTH_SCHEMES = {"http": ("http", "https"), "redis": ("redis", "rediss", "unix")}
PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool")}
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_HOST_PORT_RE = re.compile(r"^\[?([^\s\[\]]+?)\]?:(\d{1,5})$")


class TargetsError(ValueError):
    """A targets file that cannot be used; ``problems`` holds one ``file:line: field: message`` each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid targets file:\n  " + "\n  ".join(problems))


@dataclass
class Targets:
    path: Path                 # the targets file (absolute)
    state_dir: Path            # where the registry state file lives
    haproxy_socket: str | list | None
    members: dict[str, dict]   # name -> registry member record, without pid
    lines: dict[str, int]      # name -> the line of its pid_file (else of its name), for messages


def load(path: str | Path) -> Targets:
    path = Path(path).absolute()
    try:  # the one YAML reader: plain data, file:line; a FIFO or /dev/zero refused unread, at most MAX_BYTES read
        _text, root = yamldoc.load(path, "targets file")
    except yamldoc.YamlError as exc:
        raise TargetsError([str(exc)]) from None
    return parse(root, path)


def open_registry(path: str | Path) -> Path:
    """Load the targets file and bring its registry up to date; returns the registry's state dir."""
    return sync(load(path))


def parse(root: yaml.Node | None, path: Path) -> Targets:
    """Check every field of the file's checked node tree (nothing is started or signalled); TargetsError
    lists all problems."""
    problems: list[str] = []
    if not isinstance(root, yaml.MappingNode):
        raise TargetsError([f"{path}:{_line(root) if root else 1}: the targets file must be a mapping "
                            f"with a 'targets' mapping (name -> command or pid_file, ...)"])
    top = _fields(root, path, "the targets file", TOP_KEYS, problems)
    base = path.parent
    state_dir = base / f".{path.stem}.state"
    if "state_dir" in top:
        state_dir = base / (_string(top["state_dir"], path, "state_dir", problems) or state_dir)
    sock = _haproxy_address(top["haproxy_socket"], path, base, problems) if "haproxy_socket" in top else None

    members: dict[str, dict] = {}
    lines: dict[str, int] = {}
    node = top.get("targets")
    if node is None:
        problems.append(f"{path}:{_line(root)}: targets: missing (a mapping: name -> command or pid_file, ...)")
    elif not isinstance(node, yaml.MappingNode) or not node.value:
        problems.append(f"{path}:{_line(node)}: targets: must be a non-empty mapping of name -> target")
    else:
        name_lines = {k.value: _line(k) for k, _ in node.value if _plain(k)}
        for name, spec in _fields(node, path, "targets", None, problems).items():
            where = f"{path}:{name_lines[name]}"
            if not _NAME_RE.match(name):
                problems.append(f"{where}: targets: name {name!r} must be letters, digits, '_', '.', '-' only")
            elif not isinstance(spec, yaml.MappingNode):
                problems.append(f"{where}: {name}: must be a mapping (command or pid_file, health, ...)")
            else:
                member = _member(name, name_lines[name], spec, path, base, state_dir, "haproxy_socket" in top, problems)
                if member:
                    members[name] = member
                    lines[name] = next((_line(v) for k, v in spec.value if k.value == "pid_file"), name_lines[name])
    if problems:
        raise TargetsError(problems)
    return Targets(path, state_dir.resolve(), sock, members, lines)


def sync(targets: Targets) -> Path:
    """Write the targets into their registry, keeping the pid and start time recorded for each
    (a member's process survives edits to its file), and adopt what the pid files name; TargetsError
    (nothing written) when a pid file names a process that is not its target's command, when a member is one
    the state file's reader would refuse (a NUL byte: the file would stop every later run), or when the state
    file there cannot be read (the message says which folder to remove)."""
    for name, spec in targets.members.items():   # what the state file's reader refuses is refused here, at its line
        if why := registry.member_problem(name, spec, targets.haproxy_socket):
            raise TargetsError([f"{targets.path}:{targets.lines[name]}: {why} (target {name})"])
    try:
        targets.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the file's state_dir (or the default beside it) cannot be made here
        raise TargetsError([f"{targets.path}: state_dir: cannot create {targets.state_dir}: {exc.strerror}"]) from None
    try:
        with registry.locked_state(targets.state_dir, missing_ok=True) as st:
            _sync(targets, st)
    except registry.StateError as exc:   # a damaged or foreign state.json: every run would stop on it
        raise registry.StateError(f"{exc}\n  (this is the state folder of {targets.path}: stop any process it "
                                  f"records, then remove the folder {targets.state_dir} and run again)") from None
    return targets.state_dir


def _sync(targets: Targets, st: dict) -> None:
    """Inside the registry's lock: keep each member's pid, adopt what the pid files name, write."""
    old = st.get("members", {})
    if others := _others_running(targets, old):
        raise TargetsError(others)
    members, problems = {}, []
    for name, spec in targets.members.items():
        member = dict(spec, pid=old.get(name, {}).get("pid"), pid_start=old.get(name, {}).get("pid_start"))
        if member.get("pid_file") and not registry.member_alive(member):
            pid, _not_running = registry.pid_file_process(member)
            if pid and (stranger := registry.not_its_command(member, pid)):
                problems.append(f"{targets.path}:{targets.lines[name]}: pid_file: {stranger} (target {name})")
            elif pid:
                registry.adopt(member, pid)
        members[name] = member
    if problems:
        raise TargetsError(problems)
    st.update(version=registry.VERSION, dir=str(targets.state_dir), targets=str(targets.path),
              haproxy_socket=targets.haproxy_socket, members=members)


def _others_running(targets: Targets, old: dict) -> list[str]:
    """A problem when the state file records running members this file does not name (a refbot stack's folder as
    state_dir): rewriting it would drop them, so `refbot down` and chaos would no longer know them (orphans)."""
    running = [f"{name} (pid {m.get('pid')})" for name, m in old.items()
               if name not in targets.members and isinstance(m, dict) and registry.member_alive(m)]
    if not running:
        return []
    return [f"{targets.path}: state_dir: {registry.state_path(targets.state_dir)} records running member(s) this file "
            f"does not name: {', '.join(running)}; writing it would lose them (left running, unknown to chaos and "
            "`refbot down`): give this file a state_dir of its own, or stop them first"]


# ---- one target -------------------------------------------------------------------------------

def _member(name, line, node, path, base, state_dir, has_sock, problems) -> dict | None:
    before = len(problems)
    f = _fields(node, path, name, TARGET_KEYS, problems)

    def bad(key, message):   # the field's line, or the target's when the field is missing
        problems.append(f"{path}:{_line(f[key]) if key in f else line}: {key}: {message} (target {name})")

    member = {"name": name, "role": None, "cmd": None, "env": {}, "cwd": str(base), "health": {},
              "log": str(state_dir.resolve() / f"{name}.log")}
    if "command" not in f and "pid_file" not in f:
        bad("command", "missing: give the command that starts it, or the pid_file it writes (or both)")
    if "command" in f:
        member["cmd"] = _command(f["command"], lambda m: bad("command", m))
    for key in ("pid_file", "cwd", "log"):
        if key in f and (value := _string(f[key], path, f"{key} (target {name})", problems)):
            member[key] = str(base / value)
    if member.get("pid_file"):  # a FIFO or a device is never a pid file: reading one would hang or never end
        try:
            open_regular(member["pid_file"]).close()
        except FileNotFoundError:
            pass  # not written yet: the process is not running
        except OSError as exc:
            bad("pid_file", f"{member['pid_file']}: {exc.strerror or exc}")
    if "cwd" in f and not Path(member["cwd"]).is_dir():
        bad("cwd", f"{member['cwd']} is not a directory")
    if "log" in f and Path(member["log"]).is_dir():   # the command's output is appended to it: a file
        bad("log", f"{member['log']} is a directory, not a file")
    elif "log" in f and os.path.realpath(member["log"]) != os.devnull:  # /dev/null: appending never blocks
        try:   # a FIFO blocks the start until a reader comes; /dev/zero's "last lines of the log" never end
            kind = special_kind(member["log"])
        except FileNotFoundError:
            kind = None   # created at the start
        except OSError as exc:
            kind = None
            bad("log", f"{member['log']}: {exc.strerror or exc}")
        if kind:
            bad("log", f"{member['log']}: not a regular file but {kind}")
    if "env" in f:
        member["env"] = _env(f["env"], lambda m: bad("env", m)) or {}
    if "health" in f:
        member["health"] = _health(f["health"], lambda m: bad("health", m)) or {}
    for key in ("role", "lb_server"):
        if key in f:
            member[key] = _string(f[key], path, f"{key} (target {name})", problems)
    if member.get("lb_server") and not re.match(r"^[^/\s]+/[^/\s]+$", member["lb_server"]):
        bad("lb_server", f"must be HAProxy's backend/server, e.g. api/app-1, got {member['lb_server']!r}")
    elif member.get("lb_server") and not has_sock:
        bad("lb_server", "needs the HAProxy runtime API: add 'haproxy_socket' at the top of the file")
    member["port"] = _port_of(member["health"])
    return member if len(problems) == before else None


def _command(node, bad) -> list[str] | None:
    if _plain(node) and node.tag == "tag:yaml.org,2002:str":
        try:
            argv = shlex.split(node.value)
        except ValueError as exc:
            return bad(f"cannot split {node.value!r} like a shell would: {exc}")
    elif (isinstance(node, yaml.SequenceNode) and node.tag == "tag:yaml.org,2002:seq"
          and all(_plain(n) for n in node.value)):
        argv = [n.value for n in node.value]
    else:
        return bad("must be a string (split like a shell) or a list of strings")
    if not argv or not argv[0]:  # an empty argument is fine (--save ""); an empty program is not
        return bad("must name a program to run")
    if any("\0" in arg for arg in argv):  # no program can be given one: refused here, not in the state file
        return bad(f"{yamldoc.show(' '.join(argv))} holds a NUL character, which no command line can carry")
    return argv


def _env(node, bad) -> dict | None:
    if not isinstance(node, yaml.MappingNode):
        return bad("must be a mapping of NAME: value")
    env = {}
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k.value):
            return bad(f"{getattr(k, 'value', k)!r} is not an environment variable name")
        if not _plain(v) or "\0" in v.value:
            return bad(f"{k.value}: must be a plain value (string or number, no NUL character)")
        env[k.value] = v.value
    return env


def _health(node, bad) -> dict | None:
    """``{http: URL}``, ``{tcp: host:port}`` or ``{redis: URL}`` -> the registry's health spec."""
    kinds = "http: http://127.0.0.1:8000/healthz, tcp: 127.0.0.1:8000 or redis: redis://127.0.0.1:6379/0"
    if (not isinstance(node, yaml.MappingNode) or len(node.value) != 1
            or not all(_plain(n) for n in node.value[0])):
        return bad(f"must be one check: {kinds}")
    kind, value = node.value[0][0].value, node.value[0][1].value
    if "\0" in value:   # urlsplit and the host:port pattern take it; no address holds one
        return bad(f"{kind}: {yamldoc.show(value)} holds a NUL character")
    if kind == "tcp":
        m = _HOST_PORT_RE.match(value)
        if not m or not 0 < int(m.group(2)) < 65536:
            return bad(f"tcp: expected host:port, got {value!r}")
        return {"tcp": [m.group(1), int(m.group(2))]}
    if kind not in HEALTH_SCHEMES:
        return bad(f"unknown check {kind!r}: {kinds}")
    shown = redact.url(value)   # a redis or http URL may hold a password: never printed
    if problem := redact.credentials_problem(value):   # redis-py would PING the host 't' of redis://:s3cr@t/x@h/0
        return bad(f"{kind}: {shown!r}: {problem}")
    try:
        url = urlsplit(value)
        url.port  # noqa: B018 - parsed only to refuse a port that is not a number
    except ValueError as exc:
        return bad(f"{kind}: {shown!r} is not a URL: {redact.reason(value, exc)}")
    if url.scheme not in HEALTH_SCHEMES[kind]:
        return bad(f"{kind}: expected a {' or '.join(s + '://' for s in HEALTH_SCHEMES[kind])} URL, got {shown!r}")
    if url.scheme != "unix" and not url.hostname:
        return bad(f"{kind}: {shown!r} names no host (e.g. {kind}://127.0.0.1:8000/)")
    if url.port == 0:
        return bad(f"{kind}: {shown!r}: port 0 is no port (1-65535)")
    if kind == "redis":
        try:
            check_url(value)   # a path that is not a database number (/abc) would PING database 0
        except ValueError as exc:
            return bad(f"redis: {shown!r}: {redact.reason(value, exc)}")
    return {kind: value}


def _port_of(health: dict) -> int | None:
    if "tcp" in health:
        return health["tcp"][1]
    url = health.get("http") or health.get("redis")
    try:
        return urlsplit(url).port if url else None
    except ValueError:
        return None


def _haproxy_address(node, path, base, problems):
    """A unix socket path (relative to the file) or host:port for a runtime API published over TCP."""
    value = _string(node, path, "haproxy_socket", problems)
    if value is None:
        return None
    if m := _HOST_PORT_RE.match(value):
        if not 0 < int(m.group(2)) < 65536:
            problems.append(f"{path}:{_line(node)}: haproxy_socket: port {m.group(2)} is not in 1-65535, "
                            f"got {value!r}")
            return None
        return [m.group(1), int(m.group(2))]
    return str(base / value)


# ---- YAML nodes -------------------------------------------------------------------------------

def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _fields(node: yaml.MappingNode, path, where: str, known, problems) -> dict[str, yaml.Node]:
    """A mapping's plain-string keys -> value nodes; unknown keys are problems."""
    out: dict[str, yaml.Node] = {}
    for k, v in node.value:
        if not _plain(k):
            problems.append(f"{path}:{_line(k)}: {where}: a key must be a plain name, not a list, mapping or tag")
            continue
        if known is not None and k.value not in known:  # (a key given twice: contracts.yamldoc refuses it)
            problems.append(f"{path}:{_line(k)}: {k.value}: unknown field in {where} (known: {', '.join(known)})")
        else:
            out[k.value] = v
    return out


def _plain(node) -> bool:
    """A plain scalar (string, number, boolean): never null, a collection or a tag such as !!python/..."""
    return isinstance(node, yaml.ScalarNode) and node.tag in PLAIN_TAGS


def _string(node, path, field: str, problems) -> str | None:
    if _plain(node) and node.tag == "tag:yaml.org,2002:str" and node.value.strip() and "\0" not in node.value:
        return node.value
    problems.append(f"{path}:{_line(node)}: {field}: must be a non-empty string (no NUL character)")
    return None
