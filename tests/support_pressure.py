"""Memory pressure on a Redis: the other data a cache Redis holds beside the chat histories.

``memory_pressure(url, started=path)`` writes large unrelated keys (``filler:<n>``) at a steady
rate from a thread, from the moment ``started`` exists (the run's telemetry.jsonl: the load has
begun) for ``seconds``, so a Redis with a small ``maxmemory`` and an eviction policy must evict.
Bounded in time and in count; always stopped on exit.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import redis


@contextmanager
def memory_pressure(url: str, seconds: float, value_kb: int = 32, every_ms: int = 20, started: Path | None = None,
                    wait_start: float = 120.0):
    stop = threading.Event()
    written = {"keys": 0, "error": None}

    def fill():
        client = redis.Redis.from_url(url, socket_timeout=5)
        deadline = time.monotonic() + wait_start
        while started is not None and not started.exists():  # wait for the load (bounded)
            if stop.wait(0.05) or time.monotonic() > deadline:
                return
        value = b"x" * (value_kb * 1024)
        end = time.monotonic() + seconds
        for n in range(int(seconds * 1000 / every_ms) + 1):
            if stop.is_set() or time.monotonic() > end:
                break
            try:
                client.set(f"filler:{n}", value)
                written["keys"] += 1
            except redis.RedisError as exc:  # e.g. OOM under noeviction: keep the first reason
                written["error"] = written["error"] or str(exc)
            stop.wait(every_ms / 1000)
        client.close()

    thread = threading.Thread(target=fill, name="memory-pressure", daemon=True)
    thread.start()
    try:
        yield written
    finally:
        stop.set()
        thread.join(10)
