"""Test helpers for the reference bot and the embedded stack (reusable by every area).

    from support_refbot import refbot_stack          # the fixture (import it into your test module)

    def test_something(refbot_stack):
        stack = refbot_stack(replicas=2, mode="process-local", think_ms=0)   # real `python -m refbot up`
        stack.reply("gf...", "My order number is 1234-ABCD.", via="bot-1")
        stack.kill("bot-1"); stack.restart("bot-1")

Or, outside pytest fixtures, ``with running_stack(tmp_path, replicas=2) as stack: ...``.
Every stack is brought up by the real CLI in ``tmp_path`` and always taken down (the CLI's
``down``, then SIGKILL to any member's process group still alive), also when a test fails.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import requests

from conftest import wait_until
from targets import haproxy, registry as state

REPO = Path(__file__).resolve().parent.parent


def refbot_cli(*args, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m refbot ARGS`` to completion; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, "-m", "refbot", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def stack_flags(**opts) -> list[str]:
    """``replicas=2, think_ms=0`` -> ``["--replicas", "2", "--think-ms", "0"]``."""
    flags = []
    for key, value in opts.items():
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


def new_session() -> str:
    return "gf" + secrets.token_hex(8)


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line or environment contains ``text`` (to prove nothing was left running)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + b"\0" + (entry / "environ").read_bytes()
        except OSError:
            continue
        if text.encode() in blob and state.pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


class Stack:
    """A running embedded stack, seen through its state file."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.http = requests.Session()
        self.http.trust_env = False  # loopback only: no proxies

    @property
    def state(self) -> dict:
        return state.load(self.dir)

    @property
    def url(self) -> str:
        return self.state["url"]

    def member(self, name: str) -> dict:
        return self.state["members"][name]

    @property
    def bots(self) -> list[str]:
        return [n for n, m in self.state["members"].items() if m["role"] == "bot"]

    def base(self, via: str | None) -> str:
        return self.url if via is None else f"http://127.0.0.1:{self.member(via)['port']}"

    def chat(self, session: str, message: str, via: str | None = None, timeout: float = 30) -> requests.Response:
        """POST /chat through HAProxy (``via=None``) or straight to one replica (``via="bot-2"``)."""
        return self.http.post(f"{self.base(via)}/chat", json={"session_id": session, "message": message},
                              timeout=timeout)

    def reply(self, session: str, message: str, via: str | None = None) -> str:
        response = self.chat(session, message, via)
        assert response.status_code == 200, f"{response.status_code}: {response.text}"
        return response.json()["reply"]

    def history(self, session: str, via: str | None = None) -> list[dict]:
        response = self.http.get(f"{self.base(via)}/sessions/{session}/history", timeout=30)
        assert response.status_code == 200, response.text
        return response.json()["messages"]

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.state["store_url"])

    def stored_raw(self, session: str) -> list[bytes]:
        """The session's raw list elements, oldest first."""
        return self.redis().lrange(f"message_store:{session}", 0, -1)[::-1]

    def stored(self, session: str) -> list[dict]:
        """The session's LangChain entries, oldest first, as ``{"type", "content"}``."""
        return [{"type": e["type"], "content": e["data"]["content"]}
                for e in map(json.loads, self.stored_raw(session))]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Signal a member by its recorded pid and wait until it is gone; returns the old pid."""
        member = self.member(name)
        os.kill(member["pid"], sig)
        wait_until(lambda: not state.pid_alive(member["pid"]), timeout=30, what=f"{name} to die")
        return member["pid"]

    def restart(self, name: str, timeout: float = 60) -> dict:
        """Start a dead member again from its state-file record (same cmd, env, port) and wait until healthy."""
        with state.locked_state(self.dir) as st:
            member = st["members"][name]
            assert not state.member_alive(member), f"{name} is still running"
            state.start_member(member)
        state.wait_healthy(member, timeout)
        return member

    def lb_status(self) -> dict[str, str]:
        return haproxy.server_status(self.state["haproxy_socket"])

    def concurrently(self, calls: list[tuple], workers: int | None = None) -> list:
        """Run ``self.chat(*args)`` for each args tuple at once, so the requests really overlap."""
        with ThreadPoolExecutor(max_workers=workers or len(calls)) as pool:
            return list(pool.map(lambda args: self.chat(*args), calls))


def _force_down(state_dir: Path, last: dict | None) -> None:
    refbot_cli("down", "--state-dir", state_dir)
    for member in (last or {}).get("members", {}).values():
        if state.member_alive(member):
            state.stop_member(member, signal.SIGKILL)


@contextmanager
def running_stack(tmp_path: Path, **opts):
    """Bring a stack up with ``python -m refbot up`` in ``tmp_path/stack``; always take it down."""
    state_dir = Path(tmp_path) / f"stack-{secrets.token_hex(3)}"
    opts.setdefault("timeout", 90)
    last = None
    try:
        result = refbot_cli("up", "--state-dir", state_dir, *stack_flags(**opts), timeout=240)
        last = state.load(state_dir)
        assert result.returncode == 0, f"refbot up failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        yield Stack(state_dir)
    finally:
        last = state.load(state_dir) or last
        _force_down(state_dir, last)


@pytest.fixture
def refbot_stack(tmp_path):
    """Factory fixture: ``refbot_stack(replicas=2, mode="correct", think_ms=0, ...)`` -> Stack."""
    contexts = []

    def start(**opts) -> Stack:
        context = running_stack(tmp_path, **opts)
        stack = context.__enter__()  # cleans up after itself if `up` fails
        contexts.append(context)
        return stack

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)
