"""The local backend's ``redis-failover``: fail the embedded stack's Sentinel-managed Redis over.

``mode: sentinel`` asks Sentinel for a failover (SENTINEL FAILOVER): the replica is promoted and
the old primary demoted — the planned switch-over.

``mode: lossy`` is how asynchronous replication loses acknowledged writes: the primary dies while
its replica lags behind, and Sentinel promotes the replica with what it has. The replica is held
behind by stopping it (SIGSTOP). A stopped process is not a partition: its kernel still accepts
the replication stream into the socket buffers (megabytes), and on SIGCONT it reads everything —
small writes are then never lost. So the primary is first sent ballast (one key, rewritten) until
it holds megabytes the replica has not taken (CLIENT LIST ``omem``): from then on, every write it
acknowledges exists only in its own memory. After ``lag`` seconds of that, the primary is
SIGKILLed and the replica continued; Sentinel promotes it. The timeline's ``detail`` names the
old primary and the promoted member.

Recovery (targets.sentinel.restore) brings the old primary back as a replica of the new one and
waits until it is in sync and the sentinels agree; it also deletes the ballast key.
"""
from __future__ import annotations

import signal
import time

import redis

from chaos.backend import refuse_own_process
from chaos.faults import Fault
from targets import registry as state, sentinel

BALLAST_KEY = "goldfish:chaos:ballast"   # outside the session key space the oracle reads
CHUNK = 1 << 20
BEHIND = 4 << 20                          # bytes the primary must hold for the stopped replica
MAX_BALLAST = 256 << 20


def apply(state_dir: str, fault: Fault, timeout: float = 30.0) -> dict:
    st = state.load(state_dir)
    primary = sentinel.live_primary(st)
    if primary is None:
        raise sentinel.SentinelError(f"the sentinels name no live primary ({sentinel.answers(st)}); nothing to fail over")
    # a replica still in its first sync would be promoted empty: arm only once every replica has caught up
    sentinel.wait_synced(st, primary, timeout)
    started = time.monotonic()
    if fault.params.get("mode", "sentinel") == "sentinel":
        promoted = sentinel.failover(st, timeout, old=primary)
        detail = {"mode": "sentinel", "primary": primary}
    else:
        detail = {"mode": "lossy", "primary": primary, **_kill_while_behind(state_dir, primary, fault, timeout)}
        promoted = sentinel.wait_promoted(state.load(state_dir), primary, timeout)
    with state.locked_state(state_dir) as st:
        sentinel.record_roles(st, promoted)
    return {**detail, "promoted": promoted, "failover_s": round(time.monotonic() - started, 3)}


def _kill_while_behind(state_dir: str, primary: str, fault: Fault, timeout: float) -> dict:
    """Stop a replica, hold it ``lag`` seconds behind, SIGKILL the primary, continue the replica."""
    with state.locked_state(state_dir) as st:
        replica = next(n for n in sentinel.data_members(st) if n != primary)
        stopped = st["members"][replica]
        refuse_own_process(stopped["pid"], replica)
        state.signal_member(stopped, signal.SIGSTOP)
    try:
        behind = _fall_behind(st["members"][primary], timeout)
        time.sleep(float(fault.params.get("lag", 2.0)))  # acknowledged writes now live in the primary only
        with state.locked_state(state_dir) as st:
            victim = st["members"][primary]
            refuse_own_process(victim["pid"], primary)
            state.stop_member(victim, signal.SIGKILL)
    finally:
        state.signal_member(stopped, signal.SIGCONT)
    return {"replica": replica, **behind}


def _fall_behind(member: dict, timeout: float) -> dict:
    """Write ballast to the primary until it holds BEHIND bytes the stopped replica has not taken."""
    chunk, written, held = b"\0" * CHUNK, 0, 0
    deadline = time.monotonic() + timeout
    with sentinel.client(member, timeout=10) as r:
        while written < MAX_BALLAST and time.monotonic() < deadline:
            r.set(BALLAST_KEY, chunk)
            written += CHUNK
            held = max((int(c["omem"]) for c in r.client_list(_type="replica")), default=0)
            if held >= BEHIND:
                return {"ballast_bytes": written, "replica_behind_bytes": held}
    raise RuntimeError(f"the replica never fell behind: {written} bytes of ballast written, the primary holds "
                       f"{held} for it (is it really stopped?)")


def recover(state_dir: str, timeout: float = 90.0) -> dict:
    """One healthy primary, its replica in sync, the sentinels agreeing; the ballast deleted."""
    healthy = sentinel.restore(state_dir, timeout)
    try:
        with sentinel.client(state.load(state_dir)["members"][healthy["primary"]]) as r:
            r.unlink(BALLAST_KEY)
    except (redis.RedisError, OSError):
        pass  # only ballast: never fail a heal over it
    return healthy
