"""The detection matrix: one row per memory bug in DESIGN.md's table.

Each row says how the field gets the bug, how the matrix triggers it (refbot mode, stack,
load, chaos plan) and the signature goldfish must show: which measures must be above zero
and which must stay at zero. tests/test_detection_matrix.py runs the rows; each run writes
its observed figures to results/matrix/<id>.json, and scripts/matrix_table.py turns those
into the README's table, so the table shows what was measured, not what was hoped.

Measures (read from audit/summary.json): ``probe_amnesia`` (failed answered probes, not
excused by an indeterminate plant), ``stored_loss`` (lost ok turns), ``crosstalk``,
``reordered``, ``duplicated``, ``corrupt``, ``vanished`` (incl. ``expired`` and ``evicted``),
``evicted``, ``unanswered``, ``info`` (indeterminate turns: e.g. refused by an honest bot).

A row may also need store counters to grow during the load (``telemetry_grows``, read from the
run's telemetry.jsonl), may put memory pressure on the store beside the load (``pressure``:
tests/support_pressure.py), may name a ``check`` (tests/test_detection_matrix.py CHECKS) that
must hold, e.g. that the failover really happened, and may ask for ``quiet_latency``: the
acknowledged turns' latency before the first fault, so rows that differ in one setting (WAIT)
can be compared.
"""
from __future__ import annotations

from dataclasses import dataclass

STORED = ("stored_loss", "crosstalk", "reordered", "duplicated", "corrupt", "vanished", "evicted", "unanswered")
ALL = ("probe_amnesia", *STORED)


@dataclass(frozen=True)
class Row:
    id: str
    bug: str                      # the README's name for it
    field: str                    # how it happens in production
    trigger: str                  # how the matrix provokes it, in words
    stack: dict                   # flags for `python -m refbot up`
    must_show: tuple[str, ...]    # measures that must be > 0
    must_be_zero: tuple[str, ...] # measures that must be exactly 0
    plan: str | None = None       # tests/plans/<plan>.yaml
    script: str = "support"       # locustfiles/scripts/<script>.yaml
    users: int = 8
    seconds: int = 18
    locust: tuple[str, ...] = ()  # extra Locust flags
    attributed_to: str | None = None  # fault kind the loss must be attributed to
    pressure: dict | None = None  # filler keys beside the load: support_pressure.memory_pressure's arguments
    telemetry_grows: tuple[str, ...] = ()  # store counters (Redis INFO) that must rise during the load
    check: str | None = None      # an extra check that must hold (CHECKS in test_detection_matrix.py)
    quiet_latency: bool = False   # record ok-turn latency before the first fault

    def others_zero(self) -> tuple[str, ...]:
        return self.must_be_zero


FAST = {"think_ms": 10, "jitter_ms": 10}

ROWS = [
    Row("correct", "none (correct mode)",
        "LangChain's RedisChatMessageHistory per request, Redis with appendfsync always",
        "bot kill, graceful restart and pause, HAProxy session drop, Redis client kill, Redis crash",
        {"mode": "correct", "persistence": "aof-always", **FAST},
        must_show=(), must_be_zero=ALL, plan="matrix-survivable", seconds=30),
    Row("redis-none", "Redis without persistence",
        "a cache-configured Redis (no RDB/AOF) restarted by a node upgrade or an OOM kill",
        "Redis crash mid-run, persistence none, correct bot",
        {"mode": "correct", "persistence": "none", **FAST},
        must_show=("stored_loss",), must_be_zero=("crosstalk", "duplicated", "corrupt"),
        plan="matrix-redis-crash", attributed_to="redis-restart"),
    Row("process-local", "memory in a per-process dict",
        "LangChain's quick-start `store = {}` shipped behind a load balancer with several replicas",
        "3 replicas, round-robin, no stickiness",
        {"mode": "process-local", **FAST},
        must_show=("probe_amnesia", "vanished"), must_be_zero=("crosstalk", "corrupt")),
    Row("fresh-per-request", "memory built inside the handler",
        "the history object constructed per request, so nothing outlives the turn",
        "any probe",
        {"mode": "fresh-per-request", **FAST},
        must_show=("probe_amnesia", "vanished"), must_be_zero=("crosstalk", "corrupt")),
    Row("shared-instance", "one history object shared by concurrent users",
        "a memory object cached at module level and re-pointed per request: user A sees user B's chat",
        "concurrent users on each replica",
        {"mode": "shared-instance", "think_ms": 40, "jitter_ms": 40},
        must_show=("crosstalk",), must_be_zero=("corrupt",), users=16),
    Row("read-modify-write", "read-modify-write race",
        "history kept as one blob: read, think, write back without WATCH; double-sent turns overwrite each other",
        "bursts of concurrent turns in one session",
        {"mode": "read-modify-write", "think_ms": 40, "jitter_ms": 40},
        must_show=("stored_loss",), must_be_zero=("crosstalk", "corrupt"), script="bursty"),
    Row("fire-and-forget", "write acknowledged before it is flushed",
        "turns queued in-process and written to Redis later; the reply goes out first",
        "SIGKILL a replica every 5 s",
        {"mode": "fire-and-forget", "flush_ms": 1500, **FAST},
        must_show=("stored_loss",), must_be_zero=("crosstalk", "corrupt"), plan="matrix-kill-bots",
        attributed_to="kill", seconds=22),
    Row("pickle-drift", "pickled history across releases",
        "messages pickled with a class that a new release renamed; the new replicas load an empty history",
        "replicas on releases v1, v2, v1",
        {"mode": "pickle-drift", "releases": "v1,v2,v1", **FAST},
        must_show=("probe_amnesia", "corrupt"), must_be_zero=("crosstalk",)),
    Row("window", "context window drops old turns",
        "only the last k turns are put in the prompt; facts from earlier are never seen again",
        "facts probed more than 3 turns after they were planted",
        {"mode": "window:3", **FAST},
        must_show=("probe_amnesia",), must_be_zero=STORED),
    Row("context-key-mismatch", "history stored but never put in the prompt",
        "the memory writes one key and the prompt template reads another (a renamed input variable)",
        "any probe",
        {"mode": "context-key-mismatch", **FAST},
        must_show=("probe_amnesia",), must_be_zero=STORED),
    Row("ttl", "session keys expire",
        "a TTL on the history keys shorter than the pause between a user's visits",
        "keys expire 2 s after the last write; users pause 3-4 s between messages (a key that expires only once "
        "its conversation is over forgets nobody: no finding)",
        {"mode": "ttl:2", **FAST},
        must_show=("vanished",), must_be_zero=("crosstalk", "corrupt", "duplicated"),
        locust=("--think", "3-4", "--settle", "4s"), seconds=24),
    Row("evicted", "a cache Redis evicts histories",
        "Redis configured as a cache (maxmemory with allkeys-lru) and shared with other data: under memory "
        "pressure it drops whole session histories, silently",
        "maxmemory 8mb, allkeys-lru; 32 KB filler keys written every 20 ms beside the load",
        {"mode": "correct", "persistence": "none", "maxmemory": "8mb", "maxmemory_policy": "allkeys-lru", **FAST},
        must_show=("evicted",), must_be_zero=("crosstalk", "corrupt", "duplicated", "reordered"),
        pressure={"value_kb": 32, "every_ms": 20}, telemetry_grows=("evicted_keys",)),
    Row("failover-async", "replica promoted without the primary's last writes",
        "Redis primary + replica behind Sentinel with asynchronous replication (the default): the primary dies "
        "while its replica lags, and Sentinel promotes the replica with what it has",
        "the replica held 2 s behind (stopped, socket buffers full), then the primary SIGKILLed and Sentinel "
        "failing over, under load; quiet before and after",
        {"mode": "correct", "redis": "sentinel", **FAST},
        must_show=("stored_loss",), must_be_zero=("crosstalk", "duplicated", "corrupt"), plan="matrix-failover",
        seconds=30, attributed_to="redis-failover", check="failover", quiet_latency=True),
    Row("failover-wait", "the same failover, the bot calling WAIT",
        "the same Sentinel setup; the bot sends WAIT 1 100 after each write and answers 503 (the client "
        "records `info`) unless the replica confirmed the write",
        "the same lossy failover, bots started with `--wait-replicas 1 --wait-ms 100`",
        {"mode": "correct", "redis": "sentinel", "wait_replicas": 1, "wait_ms": 100, **FAST},
        must_show=("info",), must_be_zero=("stored_loss", "probe_amnesia", "crosstalk", "duplicated", "corrupt"),
        plan="matrix-failover", seconds=30, check="failover", quiet_latency=True),
    Row("rdb-snapshot", "Redis with RDB snapshots only",
        "RDB persistence (periodic BGSAVE, no AOF) and a crash: the restart loads the last snapshot, and every "
        "turn acknowledged since it is gone",
        "BGSAVE at 6 s, Redis SIGKILLed at 11 s; save points off (`--save '3600 1'`) so the plan decides when "
        "the snapshot is taken",
        {"mode": "correct", "persistence": "rdb", "save": "3600 1", **FAST},
        must_show=("stored_loss",), must_be_zero=("crosstalk", "duplicated", "corrupt"), plan="matrix-rdb-snapshot",
        seconds=20, attributed_to="redis-restart", check="since_snapshot"),
]
