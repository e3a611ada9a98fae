"""A small real stack for the chaos tests: redis-server, two tiny HTTP "bots", HAProxy in front.

It writes the stack state file per docs/CONTRACTS.md ("Stack state file") with targets.registry, so
the local backend drives it exactly as it drives `python -m refbot up`. Everything runs on
loopback in its own session; ``stop()`` kills every member by the pids in the state file (the
controller may have restarted them), also after a failed test.
"""
from __future__ import annotations

import copy

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import requests

from conftest import free_port, wait_until
from targets import registry as state

BOT_SCRIPT = textwrap.dedent('''
    """Tiny bot: /healthz, /count (INCR in Redis over a kept-open connection), /slow (streams)."""
    import json, os, sys, time
    from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
    import redis
    name, port = sys.argv[1], int(sys.argv[2])
    store = redis.Redis.from_url(os.environ["STORE_URL"], client_name=name, socket_timeout=5)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def _send(self, body, status=200):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            if self.path == "/healthz":
                self._send({"name": name, "pid": os.getpid(), "release": os.environ.get("REFBOT_RELEASE")})
            elif self.path == "/count":
                self._send({"name": name, "count": store.incr("hits")})
            elif self.path == "/slow":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for _ in range(600):
                    self.wfile.write(b"2\\r\\nx\\n\\r\\n")
                    self.wfile.flush()
                    time.sleep(0.1)
                self.wfile.write(b"0\\r\\n\\r\\n")
            else:
                self._send({"error": "not found"}, 404)
        def log_message(self, *args):
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
''')

HAPROXY_CFG = """\
global
    stats socket {sock} mode 600 level admin
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
frontend fe
    bind 127.0.0.1:{port}
    default_backend bots
backend bots
    balance roundrobin
{servers}
"""

REDIS_PERSISTENCE = {
    "none": ["--save", "", "--appendonly", "no"],
    "rdb": ["--save", "1 1", "--appendonly", "no"],
    "aof-always": ["--save", "", "--appendonly", "yes", "--appendfsync", "always"],
    "aof-everysec": ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
}


class ChaosStack:
    """The stack; ``state_dir`` is what the local backend is given."""

    def __init__(self, root: Path, bots: int = 2, persistence: str = "aof-always"):
        self.root = Path(root)
        self.state_dir = self.root / ".stack"
        self.bots = bots
        self.persistence = persistence

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self, attempts: int = 3) -> "ChaosStack":
        """Start everything; retry on fresh ports if one was taken meanwhile (free_port races
        with other test runs on the machine)."""
        for attempt in range(attempts):
            try:
                return self._start()
            except (AssertionError, state.MemberUnhealthy):
                if attempt == attempts - 1:
                    raise

    def _start(self) -> "ChaosStack":
        d = self.state_dir
        d.mkdir(parents=True, exist_ok=True)
        (d / "bot.py").write_text(BOT_SCRIPT)
        rport, lport = free_port(), free_port()
        store_url = f"redis://127.0.0.1:{rport}/0"
        members = {"redis": {
            "role": "redis", "pid": None, "port": rport,
            "cmd": ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--protected-mode", "no",
                    "--dir", str(d / "redis"), *REDIS_PERSISTENCE[self.persistence]],
            "env": {}, "cwd": str(d / "redis"), "log": str(d / "redis.log"),
            "health": {"redis": store_url}, "persistence": self.persistence}}
        servers = []
        for i in range(1, self.bots + 1):
            port = free_port()
            members[f"bot-{i}"] = {
                "role": "bot", "pid": None, "port": port,
                "cmd": [sys.executable, str(d / "bot.py"), f"bot-{i}", str(port)],
                "env": {"STORE_URL": store_url, "REFBOT_RELEASE": "v1"}, "cwd": str(d),
                "log": str(d / f"bot-{i}.log"), "health": {"http": f"http://127.0.0.1:{port}/healthz"},
                "release": "v1", "mode": "correct", "lb_server": f"bots/bot-{i}"}
            servers.append(f"    server bot-{i} 127.0.0.1:{port} check inter 300ms fall 2 rise 1")
        sock = d / "haproxy.sock"
        cfg = d / "haproxy.cfg"
        cfg.write_text(HAPROXY_CFG.format(sock=sock, port=lport, servers="\n".join(servers)))
        members["haproxy"] = {"role": "lb", "pid": None, "port": lport, "cmd": ["haproxy", "-db", "-f", str(cfg)],
                              "env": {}, "cwd": str(d), "log": str(d / "haproxy.log"),
                              "health": {"tcp": ["127.0.0.1", lport]}}
        st = {"version": 1, "dir": str(d), "url": f"http://127.0.0.1:{lport}", "store_url": store_url,
              "haproxy_socket": str(sock), "members": members}
        state.save(st, d)
        try:
            with state.locked_state(d) as st:
                for name in ("redis", *[f"bot-{i}" for i in range(1, self.bots + 1)], "haproxy"):
                    state.start_member(st["members"][name])
            for name, m in self.state()["members"].items():
                state.wait_healthy(dict(m, name=name), timeout=30)
            wait_until(lambda: all(self.lb_status(f"bot-{i}") == "UP" for i in range(1, self.bots + 1)),
                       timeout=30, what="HAProxy sees every bot UP")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        st = state.load(self.state_dir)
        for m in (st or {}).get("members", {}).values():
            pid = m.get("pid")
            if pid and state.pid_alive(pid):
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.killpg(pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
                wait_until(lambda: not state.pid_alive(pid), timeout=10, what=f"pid {pid} gone")

    # ---- looking at it --------------------------------------------------------------------
    def state(self) -> dict:
        return state.load(self.state_dir)

    def member(self, name: str) -> dict:
        return self.state()["members"][name]

    def pid(self, name: str) -> int:
        return self.member(name)["pid"]

    @property
    def url(self) -> str:
        return self.state()["url"]

    @property
    def store_url(self) -> str:
        return self.state()["store_url"]

    def healthy(self, name: str) -> bool:
        return state.check_health(dict(self.member(name), name=name), timeout=1.0)

    def process_state(self, name: str) -> str:
        """The kernel's state letter for the member's pid: R/S running or sleeping, T stopped."""
        with open(f"/proc/{self.pid(name)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def haproxy(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.state()["haproxy_socket"])
            s.sendall(command.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def lb_status(self, bot: str) -> str:
        """HAProxy's status of bots/<bot> from `show stat` (UP, DOWN, MAINT, ...)."""
        lines = self.haproxy("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == "bots" and row.get("svname") == bot:
                return row["status"]
        raise AssertionError(f"no server bots/{bot} in HAProxy stats")

    def get(self, path: str, timeout: float = 5.0) -> requests.Response:
        return requests.get(self.url + path, timeout=timeout)


def write_plan(tmp_path: Path, text: str, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def run_chaos(*args, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """``python -m chaos ...`` in a subprocess, from the repo root."""
    return subprocess.run([sys.executable, "-m", "chaos", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=Path(__file__).resolve().parents[1], **kw)


def read_timeline(run_dir: Path) -> list[dict]:
    import json
    path = Path(run_dir) / "chaos.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


import pytest  # noqa: E402


@pytest.fixture
def chaos_stack(tmp_path):
    """A started ChaosStack (redis aof-always, two bots, HAProxy); always stopped at teardown."""
    stack = ChaosStack(tmp_path).start()
    yield stack
    stack.stop()


def controller_for(stack: ChaosStack, plan_text: str, run_dir: Path):
    """A Controller for an inline plan against the stack's local backend."""
    from chaos.backends.local import LocalBackend
    from chaos.controller import Controller
    from chaos.plan import parse_plan
    plan = parse_plan(textwrap.dedent(plan_text), "inline.yaml")
    return Controller(plan, LocalBackend(str(stack.state_dir), health_timeout=30), run_dir)


class ReplayServer:
    """A tiny local HTTP server that replays recorded API exchanges (for APIs nothing real can
    serve here: Toxiproxy, Kubernetes). Each exchange is ``{"method", "path", "query"?: {...},
    "status", "body"}``; a request is answered by the first unused exchange with the same
    method and path (and query items), else 599 so a test sees the unexpected call. Received
    requests (method, path, query, json body) are kept in ``requests`` for assertions."""

    def __init__(self, exchanges: list[dict]):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qsl, urlsplit
        self.exchanges = [dict(e, used=False) for e in exchanges]
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                parts = urlsplit(self.path)
                query = dict(parse_qsl(parts.query))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                server.requests.append({"method": self.command, "path": parts.path, "query": query, "body": body})
                for e in server.exchanges:
                    if (not e["used"] and e["method"] == self.command and e["path"] == parts.path
                            and all(query.get(k) == v for k, v in (e.get("query") or {}).items())):
                        e["used"] = True
                        data = b"" if e.get("body") is None else (
                            e["body"].encode() if isinstance(e["body"], str) else json.dumps(e["body"]).encode())
                        self.send_response(e["status"])
                        self.send_header("Content-Type", e.get("content_type", "application/json"))
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                self.send_response(599)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def unused(self) -> list[dict]:
        return [e for e in self.exchanges if not e["used"]]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def replay():
    """Start ReplayServers (recorded API exchanges, a mock of the real service) and close them all after."""
    servers = []

    def start(exchanges):
        server = ReplayServer(copy.deepcopy(exchanges))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
