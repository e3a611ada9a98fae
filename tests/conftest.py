"""Shared fixtures: real servers on free loopback ports, always stopped afterwards.

Area-specific helpers live in tests/support_<area>.py; keep this file to what every area needs.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def http_server(handler):
    """A real ThreadingHTTPServer on a free loopback port, serving with ``handler`` (a BaseHTTPRequestHandler
    class) in a thread; yields the server; always shut down."""
    from http.server import ThreadingHTTPServer
    import threading

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON (``send_json``) and logs nothing: the tests' fake HTTP APIs."""

    def send_json(self, status: int, document, headers: dict | None = None) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def wait_until(condition, timeout: float = 15.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``condition`` until it returns a truthy value; fail the test with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - polling tolerates transient errors
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error!r})")


class RedisServer:
    """A real redis-server on a free loopback port, in its own directory."""

    def __init__(self, workdir: Path, persistence: str = "none"):
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.persistence = persistence
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--appendonly", "no", "--protected-mode", "no"]
        if self.persistence == "rdb":
            args[args.index("--save") + 1] = "1 1"
        elif self.persistence.startswith("aof"):
            args[args.index("--appendonly") + 1] = "yes"
            args += ["--appendfsync", "always" if self.persistence == "aof-always" else "everysec"]
        return args

    def start(self) -> "RedisServer":
        log = open(self.dir / "redis.log", "ab")
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        client = redis.Redis.from_url(self.url)
        wait_until(lambda: client.ping(), what=f"redis-server on port {self.port}")
        return self

    def client(self, **kw) -> redis.Redis:
        return redis.Redis.from_url(self.url, **kw)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def redis_factory(tmp_path):
    """Start real redis-servers: ``redis_factory(persistence="aof-always")``; all stopped at teardown."""
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is not installed: run `make setup` (apt-get install redis-server)")
    started: list[RedisServer] = []

    def start(persistence: str = "none") -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(started)}", persistence).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(signal.SIGKILL)


@pytest.fixture
def redis_server(redis_factory) -> RedisServer:
    """One real redis-server with no persistence, flushed and private to the test."""
    return redis_factory()


@pytest.fixture(autouse=True, scope="session")
def _no_proxy_for_loopback():
    """Keep any HTTP(S)_PROXY in the environment away from loopback traffic."""
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    yield


STRAY_PROGRAMS = (b"redis-server", b"haproxy", b"refbot", b"uvicorn", b"locust")


def stray_processes(marker: str) -> list[tuple[int, str]]:
    """Our kind of server still running with ``marker`` (the test run's temp root) in its command
    line, working directory or environment: something a test started and did not stop."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            where = cmdline + os.readlink(entry / "cwd").encode() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and marker.encode() in where and any(p in cmdline for p in STRAY_PROGRAMS):
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")[:160]))
    return found


def pytest_sessionstart(session):
    """Before any test picks a port: remove containers an earlier, killed test run left behind."""
    if hasattr(session.config, "workerinput"):
        return
    from support_docker import remove_abandoned_projects
    for project in remove_abandoned_projects():
        print(f"removed compose project {project}, left by a test process that no longer runs")


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if any test left a redis-server, haproxy, bot or locust behind (then kill it)."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        root = str(session.config._tmp_path_factory.getbasetemp())
    except Exception:  # noqa: BLE001 - no temp dirs were made: nothing could have been started there
        return
    strays = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        strays = stray_processes(root)
        if not strays:
            return
        time.sleep(0.5)  # a teardown's SIGTERM may still be taking effect
    for pid, _ in strays:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    report = "\n".join(f"  pid {pid}: {cmd}" for pid, cmd in strays)
    print(f"\nERROR: tests left {len(strays)} process(es) running (now killed):\n{report}")
    session.exitstatus = 1
