"""Redis behind Sentinel in the embedded stack: configs, roles, sync, agreement, failover, restore.

The replicated topology (`python -m refbot up --redis sentinel`) has data members ``redis-1``
(the first primary) and ``redis-2`` (its replica), each ``role: redis`` with ``replication:
primary|replica``, and ``sentinel-1..3`` (``role: sentinel``). Which node is primary is Sentinel's
business, so this module asks the sentinels and writes their answer into the state file: each
data member's ``replication`` and its ``cmd`` (a replica's ends with ``--replicaof host port``),
so a member started again from its record comes back in its current role, never as a second,
empty primary.

Pitfalls this module exists for: a replica still in its first sync can be promoted empty, so
nothing is armed before every replica's link is up and its offset has caught up
(``wait_synced``); a stopped server never answers, so every client here has socket timeouts.
Standard library plus redis-py, like targets.registry: refbot (`up`) and chaos (the failover
faults, heal) both use it.
"""
from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import redis

from targets import registry as state

SERVICE = "mymaster"
QUORUM = 2
DOWN_AFTER_MS = 2000        # a primary silent this long is down (not 1 s: a busy 2-core box stalls that long)
FAILOVER_TIMEOUT_MS = 5000  # Sentinel retries a failover of the same primary after twice this
TIMEOUT = 2.0               # socket timeouts of every client here


class SentinelError(RuntimeError):
    """The replicated store did not reach the state asked for in time; the message says what it saw."""


def replicated(st: dict) -> bool:
    return st.get("redis") == "sentinel"


def data_members(st: dict) -> list[str]:
    return [n for n, m in st["members"].items() if m.get("role") == "redis"]


def sentinel_members(st: dict) -> list[str]:
    return [n for n, m in st["members"].items() if m.get("role") == "sentinel"]


def client(member: dict, timeout: float = TIMEOUT) -> redis.Redis:
    return redis.Redis("127.0.0.1", member["port"], socket_timeout=timeout, socket_connect_timeout=timeout,
                       decode_responses=True)


def sentinel_url(ports: list[int], service: str = SERVICE, db: int = 0) -> str:
    """The store URL naming every sentinel (contracts/redis_url.py parses it)."""
    return f"redis+sentinel://{','.join(f'127.0.0.1:{p}' for p in ports)}/{service}/{db}"


def sentinel_config(port: int, directory: Path, primary_port: int) -> str:
    """A sentinel's config file (Sentinel rewrites it as it learns; it must be writable)."""
    return (f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {directory}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n")


def with_replicaof(cmd: list[str], primary_port: int | None) -> list[str]:
    """``cmd`` without any ``--replicaof host port``, plus one naming ``primary_port`` (None: a primary)."""
    out, skip = [], 0
    for arg in cmd:
        if skip:
            skip -= 1
        elif arg == "--replicaof":
            skip = 2
        else:
            out.append(arg)
    return out + (["--replicaof", "127.0.0.1", str(primary_port)] if primary_port else [])


# --- asking ------------------------------------------------------------------------------

def answers(st: dict) -> dict[str, str | None]:
    """Each sentinel's answer to 'who is the primary?' as a member name (None: no answer)."""
    by_port = {st["members"][n]["port"]: n for n in data_members(st)}
    said = {}
    for name in sentinel_members(st):
        try:
            with client(st["members"][name]) as s:
                addr = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            said[name] = by_port.get(int(addr[1])) if addr else None
        except (redis.RedisError, OSError):
            said[name] = None
    return said


def named_primary(st: dict) -> str | None:
    """The member a majority of sentinels names as primary, or None while they disagree."""
    named = [a for a in answers(st).values() if a]
    for name in set(named):
        if named.count(name) * 2 > len(sentinel_members(st)):
            return name
    return None


def info(member: dict) -> dict:
    """INFO replication of a data member; {} when it does not answer (down or stopped), or when what
    answers on its port is not its own process: on a shared machine another program can take a dead
    member's port, and nothing here may read or command someone else's Redis."""
    try:
        with client(member) as r:
            found = r.info("server", "replication")
    except (redis.RedisError, OSError):
        return {}
    return found if found.get("process_id") == member.get("pid") else {}


def live_primary(st: dict) -> str | None:
    """The sentinels' primary if it runs and says it is a master."""
    name = named_primary(st)
    if name and state.member_alive(st["members"][name]) and info(st["members"][name]).get("role") == "master":
        return name
    return None


def synced(st: dict, primary: str, target_offset: int | None = None) -> list[str]:
    """What still keeps the replicas from being in sync with ``primary`` ([] when they are): each
    data member other than the primary must be its replica, link up, first sync done, and offset at
    least ``target_offset`` (the primary's offset when the wait began)."""
    port = st["members"][primary]["port"]
    waiting = []
    for name in data_members(st):
        if name == primary:
            continue
        r = info(st["members"][name])
        if r.get("role") != "slave" or int(r.get("master_port", 0)) != port:
            waiting.append(f"{name} is not a replica of {primary} ({r.get('role') or 'no answer'})")
        elif r.get("master_link_status") != "up" or r.get("master_sync_in_progress"):
            waiting.append(f"{name}: link {r.get('master_link_status')}, sync in progress {r.get('master_sync_in_progress')}")
        elif target_offset is not None and int(r.get("slave_repl_offset", -1)) < target_offset:
            waiting.append(f"{name}: offset {r.get('slave_repl_offset')} behind {target_offset}")
    return waiting


def disagreement(st: dict, primary: str) -> list[str]:
    """What keeps the sentinels from agreeing on ``primary`` and its replicas ([] when they agree):
    each names it, knows the other sentinels, and sees every other data member as a healthy replica."""
    ports = {st["members"][n]["port"]: n for n in data_members(st) if n != primary}
    problems = []
    for name in sentinel_members(st):
        try:
            with client(st["members"][name]) as s:
                master, replicas = s.sentinel_master(SERVICE), s.sentinel_slaves(SERVICE)
        except (redis.RedisError, OSError) as exc:
            problems.append(f"{name}: {exc}")
            continue
        if int(master["port"]) != st["members"][primary]["port"] or not master["is_master"] or master["is_sdown"]:
            problems.append(f"{name} sees the primary at port {master['port']} ({master.get('flags')})")
        if master.get("num-other-sentinels", 0) < len(sentinel_members(st)) - 1:
            problems.append(f"{name} knows {master.get('num-other-sentinels')} other sentinels")
        healthy = {int(r["port"]) for r in replicas if not (r["is_sdown"] or r["is_odown"] or r["is_disconnected"])}
        for port, member in ports.items():
            if port not in healthy:
                problems.append(f"{name} does not see {member} as a healthy replica")
    return problems


def _until(what: str, value, deadline: float):
    """Poll ``value()`` until it is truthy and return it; SentinelError at ``deadline``."""
    while not (found := value()):
        if time.monotonic() > deadline:
            raise SentinelError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return found


def _until_none(what: str, problems, deadline: float) -> None:
    """Poll ``problems()`` until it lists none; SentinelError naming what was still wrong at ``deadline``."""
    while left := problems():
        if time.monotonic() > deadline:
            raise SentinelError(f"timed out waiting for {what}: {'; '.join(left)}")
        time.sleep(0.05)


def wait_synced(st: dict, primary: str, timeout: float = 60.0) -> None:
    """Every replica linked to ``primary`` and caught up with its offset as of now."""
    deadline = time.monotonic() + timeout
    offset = int(_until(f"{primary} to answer", lambda: info(st["members"][primary]), deadline)["master_repl_offset"])
    _until_none(f"the replicas to sync with {primary}", lambda: synced(st, primary, offset), deadline)


def wait_agreed(st: dict, primary: str, timeout: float = 60.0) -> None:
    _until_none(f"the sentinels to agree on {primary}", lambda: disagreement(st, primary), time.monotonic() + timeout)


def wait_promoted(st: dict, old: str, timeout: float = 30.0) -> str:
    """The member the sentinels promote in place of ``old`` (polls until a live one is named)."""
    try:
        return _until(f"a primary other than {old}", lambda: (p := live_primary(st)) != old and p,
                      time.monotonic() + timeout)
    except SentinelError as exc:
        raise SentinelError(f"{exc}; the sentinels name {answers(st)}") from None


# --- changing ----------------------------------------------------------------------------

def record_roles(st: dict, primary: str) -> None:
    """Write who is primary into the state: ``replication`` and ``cmd`` of every data member."""
    port = st["members"][primary]["port"]
    for name in data_members(st):
        m = st["members"][name]
        m["replication"] = "primary" if name == primary else "replica"
        m["cmd"] = with_replicaof(m["cmd"], None if name == primary else port)


def failover(st: dict, timeout: float = 30.0, old: str | None = None) -> str:
    """SENTINEL FAILOVER (Sentinel's own, graceful: the replica is promoted, the old primary demoted);
    returns the promoted member. ``old``: the live primary, when the caller has just asked for it."""
    old = old or live_primary(st)
    if old is None:
        raise SentinelError("no live primary the sentinels agree on; cannot fail over")
    refused = ask_failover(st)
    if len(refused) == len(sentinel_members(st)):
        raise SentinelError(f"every sentinel refused SENTINEL FAILOVER: {'; '.join(refused)}")
    return wait_promoted(st, old, timeout)


def ask_failover(st: dict) -> list[str]:
    """SENTINEL FAILOVER to the first sentinel that takes it; the refusals before it (e.g. INPROG)."""
    refused = []
    for name in sentinel_members(st):
        try:
            with client(st["members"][name]) as s:
                s.execute_command("SENTINEL", "FAILOVER", SERVICE)
            break
        except (redis.RedisError, OSError) as exc:
            refused.append(f"{name}: {exc}")
    return refused


def restore(state_dir, timeout: float = 90.0, promote_timeout: float = 30.0) -> dict:
    """Bring the replicated store back to one healthy primary, every replica in sync with it, and the
    sentinels agreeing — from whatever a fault left (idempotent; ``python -m chaos heal`` runs it too).

    A dead primary with a live replica is left to Sentinel to replace: started first, it would come
    back empty or stale as primary and its replicas would copy that."""
    deadline = time.monotonic() + timeout
    with state.locked_state(state_dir) as st:
        for name in data_members(st) + sentinel_members(st):
            m = st["members"][name]
            if not state.signal_member(m, signal.SIGCONT):  # a stopped member answers nothing
                if m["role"] == "sentinel":
                    state.start_member(m)
    primary = _await_primary(state_dir, time.monotonic() + promote_timeout)
    with state.locked_state(state_dir) as st:
        record_roles(st, primary)
        for name in data_members(st):
            m = st["members"][name]
            if not state.member_alive(m):
                _move_if_taken(m)
                state.start_member(m)  # a replica of the primary, per its recorded cmd
    port = st["members"][primary]["port"]
    for name in data_members(st):
        if name != primary:
            member = dict(st["members"][name], name=name)
            answered = _until(f"{name} to answer as pid {member['pid']} on port {member['port']}",
                              lambda: info(member), deadline)
            if int(answered.get("master_port", 0)) != port:  # e.g. the old primary, not yet demoted
                with client(member) as r:
                    r.execute_command("REPLICAOF", "127.0.0.1", port)
    wait_synced(st, primary, max(1.0, deadline - time.monotonic()))
    wait_agreed(st, primary, max(1.0, deadline - time.monotonic()))
    return {"primary": primary, "replicas": [n for n in data_members(st) if n != primary]}


def _move_if_taken(member: dict) -> None:
    """A replica whose port another program took while it was down gets a free one: Sentinel learns
    replicas' addresses from their primary, so only the member's record (port, cmd, health) changes."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", member["port"]))
            return
        except OSError:
            pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    member["cmd"][member["cmd"].index("--port") + 1] = str(port)
    member["port"], member["health"] = port, {"redis": f"redis://127.0.0.1:{port}/0"}


def _await_primary(state_dir, deadline: float) -> str:
    """The live primary the sentinels name. While a dead one is still named and a replica lives, Sentinel
    promotes it (asked with SENTINEL FAILOVER if it has not after a few seconds); only with no data member
    alive is the named primary started again as it was. Raises SentinelError at ``deadline``."""
    asked_at = time.monotonic() + 3 * DOWN_AFTER_MS / 1000
    while time.monotonic() < deadline:
        st = state.load(state_dir)
        if primary := live_primary(st):
            return primary
        named = named_primary(st)
        alive = [n for n in data_members(st) if state.member_alive(st["members"][n])]
        if named and named not in alive:
            if not alive:
                return _start_as_primary(state_dir, named)
            if time.monotonic() > asked_at:
                asked_at = float("inf")
                ask_failover(st)
        time.sleep(0.05)
    raise SentinelError(f"no live primary: the sentinels name {answers(state.load(state_dir))}")


def _start_as_primary(state_dir, name: str) -> str:
    with state.locked_state(state_dir) as st:
        m = st["members"][name]
        m["cmd"] = with_replicaof(m["cmd"], None)
        state.start_member(m)
        member = dict(m, name=name)
    state.wait_healthy(member, 60)
    return name
