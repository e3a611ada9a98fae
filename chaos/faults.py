"""The fault vocabulary: every kind the plan language knows, with its parameters.

One vocabulary, several backends (chaos/backends/): a backend lists the kinds it can carry out
in ``Backend.kinds``; the plan is checked against that list before anything is touched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KILL = "kill"                      # SIGKILL (docker kill / delete pod grace 0); start again after `duration`
RESTART = "restart"                # graceful: SIGTERM, wait for exit, start again
PAUSE = "pause"                    # SIGSTOP ... SIGCONT (docker pause/unpause) for `duration`
REDIS_RESTART = "redis-restart"    # stop Redis like a crash/restart (persistence decides what survives), start again
REDIS_CLIENT_KILL = "redis-client-kill"  # CLIENT KILL TYPE normal SKIPME yes (instant)
REDIS_STALL = "redis-stall"        # CLIENT PAUSE <duration ms>; recover with CLIENT UNPAUSE
LB_DROP = "lb-drop"                # HAProxy: shutdown sessions server bots/bot-N (instant)
LB_DISABLE = "lb-disable"          # HAProxy: set server bots/bot-N state maint for `duration`, then ready
ROLLING_RESTART = "rolling-restart"  # restart replicas one by one onto `release`, waiting healthy between
TOXIC = "toxic"                    # Toxiproxy toxic (latency, reset_peer, timeout) for `duration`
REDIS_FAILOVER = "redis-failover"  # Sentinel promotes the replica (graceful, or the primary killed while it lags)
REDIS_BGSAVE = "redis-bgsave"      # BGSAVE, waited for: the RDB point a later crash falls back to

HOUR = 3600.0
# A `redis-stall` with mode all cannot be cut short (Redis 7.0 postpones even CLIENT UNPAUSE), and one
# with mode write outlives a dead controller: both end only when their CLIENT PAUSE does. So it is bounded.
MAX_STALL_S = 300.0


@dataclass(frozen=True)
class Param:
    """One kind-specific parameter: its Python type, default (None = optional, no default), and help."""
    type: type
    default: Any = None
    required: bool = False
    choices: tuple = ()
    help: str = ""
    low: float | None = None   # numbers: the range a value must lie in (NaN never does)
    high: float | None = None
    only_with: tuple[str, tuple[str, ...]] | None = None  # taken only when this other parameter has one of these values


@dataclass(frozen=True)
class KindSpec:
    """What the plan language knows about a kind.

    duration: "required" (the fault is a state that must be undone after a while: pause, stall; 0 s would
    do nothing, so it is refused),
    "optional" (kill: how long the instance stays down; 0 = start again at once), "none" (instant
    faults: client kill, lb-drop — recover is a no-op that is still logged).
    """
    name: str
    duration: str
    params: dict[str, Param] = field(default_factory=dict)
    help: str = ""
    max_duration: float | None = None  # seconds, for a fault nothing can cut short


KINDS: dict[str, KindSpec] = {s.name: s for s in [
    KindSpec(KILL, "optional", {}, "SIGKILL the instance; start it again after duration (default at once)"),
    KindSpec(RESTART, "optional", {
        "grace": Param(float, 10.0, help="seconds to wait after SIGTERM before SIGKILL", low=0, high=HOUR)},
        "graceful stop (SIGTERM), then start again (after duration, if given)"),
    KindSpec(PAUSE, "required", {}, "freeze the instance (SIGSTOP / docker pause) for duration"),
    KindSpec(REDIS_RESTART, "optional", {
        "mode": Param(str, "crash", choices=("crash", "shutdown"),
                      help="crash = SIGKILL (only what persistence already flushed survives); "
                           "shutdown = SHUTDOWN (Redis saves per its config)")},
        "stop Redis and start it again; its persistence decides what survives"),
    KindSpec(REDIS_CLIENT_KILL, "none", {
        "type": Param(str, "normal", choices=("normal", "pubsub"), help="CLIENT KILL TYPE")},
        "drop every normal client connection (CLIENT KILL TYPE normal SKIPME yes)"),
    KindSpec(REDIS_STALL, "required", {
        "mode": Param(str, "all", choices=("all", "write"),
                      help="all = every command stalls (Redis 7.0 blocks even CLIENT UNPAUSE, so it lasts exactly "
                           "duration); write = writes stall, reads go on, ended by CLIENT UNPAUSE")},
        "CLIENT PAUSE for duration, then UNPAUSE", max_duration=MAX_STALL_S),
    KindSpec(LB_DROP, "none", {}, "HAProxy: shut down the live sessions of the server"),
    KindSpec(LB_DISABLE, "required", {}, "HAProxy: put the server in maintenance for duration, then ready"),
    KindSpec(ROLLING_RESTART, "none", {
        "release": Param(str, required=True, help="release label the replicas come back on (REFBOT_RELEASE)"),
        "env": Param(dict, help="extra environment for the new release (names and values are text)"),
        "pause": Param(float, 0.0, help="seconds to wait between replicas after one is healthy", low=0, high=HOUR)},
        "restart the replicas one by one onto another release, waiting healthy between"),
    KindSpec(TOXIC, "required", {
        "toxic": Param(str, required=True, choices=("latency", "reset_peer", "timeout"), help="toxic type"),
        "stream": Param(str, "downstream", choices=("upstream", "downstream")),
        "toxicity": Param(float, 1.0, help="probability the toxic applies to a connection", low=0, high=1),
        "latency": Param(int, help="latency toxic: ms", low=0, high=HOUR * 1000, only_with=("toxic", ("latency",))),
        "jitter": Param(int, help="latency toxic: ms", low=0, high=HOUR * 1000, only_with=("toxic", ("latency",))),
        "timeout": Param(int, help="reset_peer/timeout toxic: ms (0 = forever for timeout)", low=0, high=HOUR * 1000,
                         only_with=("toxic", ("reset_peer", "timeout")))},
        "Toxiproxy toxic on the proxy named by target, for duration"),
    KindSpec(REDIS_FAILOVER, "optional", {
        "mode": Param(str, "sentinel", choices=("sentinel", "lossy"),
                      help="sentinel = SENTINEL FAILOVER (the old primary is demoted); lossy = the replica is "
                           "stopped and held behind, then the primary is SIGKILLed and Sentinel promotes the replica"),
        "lag": Param(float, 2.0, help="lossy: seconds the replica is held behind before the primary is killed",
                     low=0, high=HOUR, only_with=("mode", ("lossy",)))},
        "fail the replicated Redis over to its replica; duration: how long the old primary stays down"),
    KindSpec(REDIS_BGSAVE, "none", {},
             "BGSAVE and wait until the snapshot is on disk (an RDB restart falls back to it)"),
]}

# Kinds whose target is a logical name of the backend but which act on a shared thing
# (the whole replica set): count does not apply, the fault hits all instances in order.
WHOLE_TARGET_KINDS = frozenset({ROLLING_RESTART, REDIS_FAILOVER})


@dataclass
class Fault:
    """One occurrence of a plan fault, as a backend sees it.

    id is ``<plan fault id>#<occurrence>`` (the timeline's ``fault``); duration is seconds or None.
    It round-trips through JSON (outstanding.json) so another process can recover it.
    """
    id: str
    kind: str
    target: str
    duration: float | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "target": self.target,
                "duration": self.duration, "params": dict(self.params)}

    @classmethod
    def from_dict(cls, d: dict) -> "Fault":
        return cls(d["id"], d["kind"], d["target"], d.get("duration"), dict(d.get("params") or {}))
