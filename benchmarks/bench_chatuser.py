"""ChatUser's turns/s against a plain FastHttpUser posting the same JSON, side by side in one run.

Each round runs two Locust processes at the same time, one with only PlainUser and one with
only ChatUser (same number of users), each against its own trivial endpoint that answers
instantly (a raw asyncio HTTP server process). Both see the same machine load: by default both
Locust processes are pinned to the same CPU and both servers to another, so the two share one
core, its caches and its noisy neighbours (unpinned, rounds on a busy 2-core VM scattered from 0.6
to 1.25). On a shared machine, wall-clock rates depend on scheduling and on the servers as much as
on the load generator. So the headline is the CPU cost per request, read from /proc over a
steady-state window: plain CPU-ms/request divided by ChatUser CPU-ms/turn is the ratio of their
rates when a Locust process is CPU-bound (goal >= 0.9). Fair by construction: same users (20 each,
one request in flight per user, two during ChatUser's bursts), same server code, bodies of the same
shape and size. Also printed: the wall rates, the journal's bytes per turn and its outcomes (every
turn must be ``ok`` against the instant server, or the run is void: a ChatUser that fails fast
would look cheap).

    .venv/bin/python benchmarks/bench_chatuser.py [--seconds 8] [--rounds 3] [--users 20] [--no-pin]

``--chat-class UrlopenChatUser`` measures ChatUser with every turn through ``UserAgent.urlopen``, the
layer under Locust's public ``FastHttpSession.request``: what any turn path on Locust's public API
costs at least (docs/locust.md "Why the turn path is not on Locust's public API").

Bounded: --rounds rounds of --seconds plus ~10 s of start-up and shutdown each (~60 s by
default); loopback only.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")

BENCH_SCRIPT = """\
name: bench
steps:
  - plant: order number
  - chatter
  - probe: order number
  - plant: postcode
  - chatter
  - burst: 2
  - probe: postcode
  - chatter
"""

LOCUSTFILE = """\
from locust import FastHttpUser, constant, task

from locustfiles import hooks  # noqa: F401 - options, journal, end-of-run
from locustfiles.conversation import ChatUser


class PlainUser(FastHttpUser):
    \"\"\"The baseline: the same JSON body to the same endpoint, nothing else.\"\"\"

    wait_time = constant(0)

    @task
    def post(self):
        self.client.post("/chat", json={"session_id": "gf0123456789abcdef",
                                        "message": "[gf0123456789abcdeft3] My order number is 1234-ABCD."},
                         name="plain")


class UrlopenChatUser(ChatUser):
    \"\"\"ChatUser with every turn through UserAgent.urlopen, as if the bot had redirected once.\"\"\"

    def __init__(self, environment):
        super().__init__(environment)
        self._lean = False
"""

PLANT_RE = re.compile(r"My ([a-z ]+?) is (\S+)\.")
PROBE_RE = re.compile(r"What is my ([a-z ]+?)\?")
FACTS: dict[tuple[str, str], str] = {}
COUNT = 0


def answer(body: bytes) -> bytes:
    """The reference grammar with per-session memory, so ChatUser's probes pass as against a
    healthy bot (the server's CPU is not what is measured)."""
    request = json.loads(body)
    session, message = request.get("session_id", ""), request.get("message", "")
    if m := PLANT_RE.search(message):
        FACTS[session, m[1]] = m[2]
        text = "Noted."
    elif m := PROBE_RE.search(message):
        text = f"Your {m[1]} is {FACTS.get((session, m[1]))}."
    else:
        text = "Noted."
    reply = json.dumps({"reply": text}).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(reply)).encode() + b"\r\n\r\n" + reply)


class InstantHTTP(asyncio.Protocol):
    """Answers every request on a kept-alive connection at once; ``GET /count`` returns how
    many requests it answered (for steady-state rates)."""

    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        global COUNT
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            length = 0
            i = head.find(b"content-length:")
            if i >= 0:
                length = int(head[i + 15:].split(b"\r\n", 1)[0])
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body, self.buffer = self.buffer[head_end + 4:end], self.buffer[end:]
            if head.startswith(b"get /count"):
                text = str(COUNT).encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(text)).encode()
                                     + b"\r\n\r\n" + text)
            else:
                COUNT += 1
                self.transport.write(answer(body))


def server_count(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /count HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data or not data.split(b"\r\n\r\n", 1)[1]:
            data += s.recv(4096)
    return int(data.split(b"\r\n\r\n", 1)[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(port: int) -> None:
    loop = asyncio.new_event_loop()
    loop.run_until_complete(loop.create_server(InstantHTTP, "127.0.0.1", port, backlog=1024))
    loop.run_forever()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(pid: int, cpu: int | None) -> None:
    """Put a process (and the threads it starts later) on one CPU; no-op when not asked or not possible."""
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(pid, {cpu})


def start_locust(tmp: Path, port: int, user_class: str, users: int, run_time: float, tag: str) -> subprocess.Popen:
    cmd = [LOCUST, "-f", str(tmp / "benchfile.py"), user_class, "--headless", "-u", str(users), "-r", str(users),
           "-t", f"{int(run_time)}s", "--host", f"http://127.0.0.1:{port}", "--run-dir", str(tmp / f"run-{tag}"),
           "--script", str(tmp / "bench.yaml"), "--only-summary", "--loglevel", "WARNING",
           "--stop-timeout", "0"]
    return subprocess.Popen(cmd, cwd=tmp, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def run_round(tmp: Path, ports: dict[str, int], users: int, seconds: int, rnd: int,
              cpu: int | None = None) -> dict[str, dict]:
    """Both classes at the same time, each in its own Locust process against its own server, so
    both see the same machine load (with ``cpu``: both pinned to that one CPU, so they share the
    same core, caches and neighbours). After a warm-up, each process's CPU time (/proc) and its
    server's request count are sampled ``seconds`` apart: steady state only."""
    warmup = 3.0
    procs = {cls: start_locust(tmp, port, cls, users, warmup + seconds + 30, f"{cls}-{rnd}")
             for cls, port in ports.items()}
    for proc in procs.values():
        pin(proc.pid, cpu)
    try:
        deadline = time.monotonic() + 60
        for cls, port in ports.items():  # wait until each one sends (imports take a while)
            first = server_count(port)
            while server_count(port) == first:
                if procs[cls].poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{cls} sent nothing:\n{procs[cls].stderr.read().decode()[-3000:]}")
                time.sleep(0.05)
        time.sleep(warmup)
        t0 = time.monotonic()
        start = {cls: (cpu_seconds(procs[cls].pid), server_count(port)) for cls, port in ports.items()}
        time.sleep(seconds)
        t1 = time.monotonic()
        end = {cls: (cpu_seconds(procs[cls].pid), server_count(port)) for cls, port in ports.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # a clean stop: the journal's end-of-run runs
        for proc in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    out = {}
    for cls in ports:
        journal = list((tmp / f"run-{cls}-{rnd}" / "journal").glob("*.jsonl"))
        outcomes = Counter(json.loads(line)["outcome"] for f in journal for line in f.read_bytes().splitlines()
                           if b'"error":"interrupted' not in line)
        out[cls] = {"requests": end[cls][1] - start[cls][1], "seconds": t1 - t0, "cpu_s": end[cls][0] - start[cls][0],
                    "journal_bytes": sum(f.stat().st_size for f in journal),
                    "journal_lines": sum(f.read_bytes().count(b"\n") for f in journal), "outcomes": outcomes}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=int, default=8, help="steady-state seconds per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--users", type=int, default=20, help="users per class")
    p.add_argument("--no-pin", action="store_true",
                   help="do not pin (default on 2+ CPUs: both Locust processes share the last CPU, "
                        "both servers the first)")
    p.add_argument("--chat-class", default="ChatUser", choices=("ChatUser", "UrlopenChatUser"),
                   help="the class measured against PlainUser")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve:
        serve(a.serve)
        return 0
    chat = a.chat_class
    classes = ("PlainUser", chat)
    ports = {cls: free_port() for cls in classes}
    servers = [subprocess.Popen([sys.executable, __file__, "--serve", str(port)], start_new_session=True)
               for port in ports.values()]
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    locust_cpu = cpus[-1] if len(cpus) >= 2 and not a.no_pin else None
    for server in servers:
        pin(server.pid, cpus[0] if locust_cpu is not None else None)
    rounds: list[dict[str, dict]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-chatuser-") as tmp:
            tmp = Path(tmp)
            (tmp / "bench.yaml").write_text(BENCH_SCRIPT)
            (tmp / "benchfile.py").write_text(LOCUSTFILE)
            deadline = time.monotonic() + 10
            for port in ports.values():
                while True:
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise SystemExit("the instant server did not start")
                        time.sleep(0.05)
            for rnd in range(a.rounds):
                rounds.append(run_round(tmp, ports, a.users, a.seconds, rnd, locust_cpu))
    finally:
        for server in servers:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

    def cpu_ms(r):
        return 1000 * r["cpu_s"] / r["requests"]

    print(f"bench_chatuser: {a.rounds} rounds x {a.seconds}s steady state; each round runs a PlainUser and a "
          f"{chat} Locust process at the same time ({a.users} users each, own instant asyncio server each; "
          + (f"both Locust processes on CPU {locust_cpu}, servers on CPU {cpus[0]})" if locust_cpu is not None
             else "not pinned)"))
    for cls, label, unit in (("PlainUser", "plain FastHttpUser", "request"), (chat, chat, "turn")):
        per = [r[cls] for r in rounds]
        print(f"  {label:18s}: median {statistics.median(map(cpu_ms, per)):.3f} CPU-ms/{unit} (rounds: "
              f"{'  '.join(f'{cpu_ms(r):.3f}' for r in per)}); median "
              f"{statistics.median(r['requests'] / r['seconds'] for r in per):.0f} {unit}s/s at "
              f"{statistics.median(100 * r['cpu_s'] / r['seconds'] for r in per):.0f}% CPU")
    ratios = [cpu_ms(r["PlainUser"]) / cpu_ms(r[chat]) for r in rounds]
    plain_ms = statistics.median(cpu_ms(r["PlainUser"]) for r in rounds)
    chat_ms = statistics.median(cpu_ms(r[chat]) for r in rounds)
    print(f"  ratio {chat}/plain at equal CPU (plain CPU per request / {chat} CPU per turn): median "
          f"{statistics.median(ratios):.3f} (rounds: {'  '.join(f'{x:.3f}' for x in ratios)}; goal >= 0.9)")
    print(f"  per-process ceiling at one full core: plain {1000 / plain_ms:.0f} req/s, "
          f"{chat} {1000 / chat_ms:.0f} turns/s")
    lines = sum(r[chat]["journal_lines"] for r in rounds)
    outcomes = sum((r[chat]["outcomes"] for r in rounds), Counter())
    print(f"  journal: {lines} records, "
          f"{sum(r[chat]['journal_bytes'] for r in rounds) / max(lines, 1):.0f} bytes/turn; outcomes "
          + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()) + " (turns in flight at the stop left out)")
    if outcomes["ok"] < sum(outcomes.values()):  # a fast ChatUser that fails its turns measures nothing
        print("bench_chatuser: ChatUser turns that were not ok against an instant server: the figures are void")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
