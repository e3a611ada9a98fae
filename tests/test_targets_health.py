"""A member that runs but never passes its health probe says what the last probe found: a replica
whose port a leftover container's NAT rule captured was "not healthy after 90s" with an empty log
and no cause (CI, stop 39)."""
from __future__ import annotations

import signal
import sys

import pytest

from conftest import JsonHandler, free_port, http_server
from targets import registry


def running_member(tmp_path, health: dict) -> dict:
    member = {"name": "app", "role": "app", "pid": None, "cmd": [sys.executable, "-c", "import time; time.sleep(60)"],
              "env": {}, "cwd": str(tmp_path), "log": str(tmp_path / "app.log"), "health": health}
    registry.start_member(member)
    return member


def test_a_refused_probe_is_named_with_the_port_capture_hint(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/healthz"
    member = running_member(tmp_path, {"http": url})
    try:
        with pytest.raises(registry.MemberUnhealthy) as caught:
            registry.wait_healthy(member, timeout=0.5)
    finally:
        registry.stop_member(member, signal.SIGKILL)
    message = str(caught.value)
    assert f"last probe: {url}: [Errno 111] Connection refused" in message
    assert "NAT rule" in message and "app.log" in message


class Unwell(JsonHandler):
    def do_GET(self):
        self.send_json(503, {"ok": False})


def test_a_probe_answered_with_another_status_names_it(tmp_path):
    with http_server(Unwell) as server:
        url = f"http://127.0.0.1:{server.server_port}/healthz"
        member = running_member(tmp_path, {"http": url})
        try:
            assert registry.health_problem(member) == f"{url} answered 503"
            with pytest.raises(registry.MemberUnhealthy, match="last probe: .* answered 503; last lines"):
                registry.wait_healthy(member, timeout=0.3)
        finally:
            registry.stop_member(member, signal.SIGKILL)


def test_a_redis_probe_that_fails_names_the_url(tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    member = running_member(tmp_path, {"redis": url})
    try:
        problem = registry.health_problem(member)
    finally:
        registry.stop_member(member, signal.SIGKILL)
    assert problem.startswith(url + ": ") and "refused" in problem.lower()
