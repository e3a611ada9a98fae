"""How hard can the embedded stack be pushed? Sustained turns/s with zero think time.

Four runs of the same bounded closed-loop load (aiohttp, C concurrent conversations of
10 turns each, on loopback), side by side:

  A  one replica directly, fresh-per-request (no store)      the app's own ceiling
  B  the same replica through HAProxy                         + the load balancer
  C  one replica directly, correct mode (LangChain + Redis)   + the store
  D  the stack through HAProxy, correct mode, N replicas      what a load test sees

and the ratios B/A (HAProxy), C/A (Redis via LangChain) and D/C (the whole stack vs one
replica). Run: ``.venv/bin/python benchmarks/bench_stack.py [--duration 6] [--concurrency 32]``.
Everything runs on this machine: the load generator competes with the stack for CPU, so
read the ratios, not the absolute figures.
"""
from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from refbot import stack  # noqa: E402

TURNS_PER_CONVERSATION = 10


async def load(url: str, duration: float, concurrency: int, max_turns: int) -> dict:
    """Closed loop: each worker holds conversations back to back until time or the turn budget runs out."""
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + duration

    async def worker(http: aiohttp.ClientSession):
        nonlocal errors
        while time.monotonic() < deadline and len(latencies) + errors < max_turns:
            session = "gf" + secrets.token_hex(8)
            for turn in range(TURNS_PER_CONVERSATION):
                body = {"session_id": session, "message": f"[{session}t{turn}] Nice weather for a chat."}
                t0 = time.monotonic()
                try:
                    async with http.post(f"{url}/chat", json=body) as response:
                        await response.read()
                        ok = response.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    latencies.append(time.monotonic() - t0)
                else:
                    errors += 1
                if time.monotonic() >= deadline:
                    return

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        for _ in range(concurrency):  # warm up connections and the replica
            async with http.post(f"{url}/chat", json={"session_id": "warmup", "message": "hi"}) as r:
                await r.read()
        start = time.monotonic()
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        elapsed = time.monotonic() - start
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else float("nan")  # noqa: E731
    return {"turns": len(latencies), "errors": errors, "seconds": elapsed, "rate": len(latencies) / elapsed,
            "p50": pick(0.50), "p99": pick(0.99), "mean": statistics.fmean(latencies) * 1000 if latencies else 0}


def measure(label: str, url: str, args) -> dict:
    result = asyncio.run(load(url, args.duration, args.concurrency, args.max_turns))
    print(f"{label:<52} {result['rate']:>9.0f} {result['p50']:>8.1f} {result['p99']:>8.1f} "
          f"{result['turns']:>8} {result['errors']:>6}", flush=True)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=6.0, help="seconds per run (default 6)")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent conversations (default 32)")
    p.add_argument("--replicas", type=int, default=3, help="replicas in run D (default 3)")
    p.add_argument("--max-turns", type=int, default=200_000, help="turn budget per run (default 200000)")
    args = p.parse_args()

    quiet = lambda *_: None  # noqa: E731
    base = Path(tempfile.mkdtemp(prefix="refbot-bench-"))
    print(f"{'run (zero think time, ' + str(args.concurrency) + ' concurrent conversations)':<52} "
          f"{'turns/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'turns':>8} {'errors':>6}")
    one = stack.StackOptions(replicas=1, mode="fresh-per-request", think_ms=0, jitter_ms=0, state_dir=base / "one")
    try:
        st = stack.up(one, say=quiet)
        bot = f"http://127.0.0.1:{st['members']['bot-1']['port']}"
        a = measure("A  1 replica direct, fresh-per-request (no store)", bot, args)
        b = measure("B  1 replica via HAProxy, fresh-per-request", st["url"], args)
    finally:
        stack.down(one.state_dir, say=quiet)
    full = stack.StackOptions(replicas=args.replicas, mode="correct", think_ms=0, jitter_ms=0, state_dir=base / "full")
    try:
        st = stack.up(full, say=quiet)
        bot = f"http://127.0.0.1:{st['members']['bot-1']['port']}"
        c = measure("C  1 replica direct, correct (LangChain + Redis)", bot, args)
        d = measure(f"D  stack via HAProxy, correct, {args.replicas} replicas", st["url"], args)
    finally:
        stack.down(full.state_dir, say=quiet)
    print(f"\nratios: B/A (HAProxy) {b['rate'] / a['rate']:.2f}   C/A (Redis via LangChain) "
          f"{c['rate'] / a['rate']:.2f}   D/C (stack of {args.replicas} vs one replica) {d['rate'] / c['rate']:.2f}")
    print(f"sustained stack throughput (D): {d['rate']:.0f} turns/s in correct mode, zero think time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
