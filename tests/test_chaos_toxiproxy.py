"""Toxic faults against a replay of the Toxiproxy 2.x HTTP API contract (MOCK: no Toxiproxy binary
can run here). The exchanges below are transcribed from Toxiproxy's api.go (routes, status codes,
JSON shapes, error bodies ``{"error", "status"}``) — not captured from a live server."""
from __future__ import annotations


import pytest

from chaos.backends.local import LocalBackend  # noqa: F401 - the main backend alongside
from chaos.controller import Controller, heal_run
from chaos.plan import parse_plan
from chaos.toxiproxy import Toxiproxy, ToxiproxyError
from support_chaos import read_timeline, replay  # noqa: F401 - replay is a fixture

PROXY = {"name": "redis", "listen": "[::]:26379", "upstream": "redis:6379", "enabled": True, "toxics": []}
LATENCY = {"name": "goldfish-slow_0", "type": "latency", "stream": "downstream", "toxicity": 1,
           "attributes": {"latency": 300, "jitter": 50}}
CONTRACT = [
    {"method": "GET", "path": "/version", "status": 200, "body": "2.9.0", "content_type": "text/plain"},
    {"method": "GET", "path": "/proxies", "status": 200, "body": {"redis": PROXY}},
    {"method": "GET", "path": "/proxies/nope", "status": 404, "body": {"error": "proxy not found", "status": 404}},
    {"method": "POST", "path": "/proxies/redis/toxics", "status": 200, "body": LATENCY},
    {"method": "POST", "path": "/proxies/redis/toxics", "status": 409,
     "body": {"error": "toxic already exists", "status": 409}},
    {"method": "DELETE", "path": "/proxies/redis/toxics/goldfish-slow_0", "status": 204, "body": None},
    {"method": "DELETE", "path": "/proxies/redis/toxics/goldfish-slow_0", "status": 404,
     "body": {"error": "toxic not found", "status": 404}},
]


def test_client_speaks_the_contract(replay):
    srv = replay(CONTRACT)
    api = Toxiproxy(srv.url)
    assert api.version() == "2.9.0"
    assert list(api.proxies()) == ["redis"]
    with pytest.raises(ToxiproxyError, match="404: proxy not found"):
        api.proxy("nope")
    assert api.add_toxic("redis", "goldfish-slow_0", "latency", {"latency": 300, "jitter": 50})["type"] == "latency"
    with pytest.raises(ToxiproxyError, match="409: toxic already exists"):
        api.add_toxic("redis", "goldfish-slow_0", "latency", {"latency": 300, "jitter": 50})
    assert api.remove_toxic("redis", "goldfish-slow_0") is True
    assert api.remove_toxic("redis", "goldfish-slow_0") is False      # already gone: idempotent
    assert srv.requests[3]["body"] == {"name": "goldfish-slow_0", "type": "latency", "stream": "downstream",
                                       "toxicity": 1.0, "attributes": {"latency": 300, "jitter": 50}}
    assert srv.unused() == []


class NoBackend(LocalBackend):
    """The main backend is not used by toxic faults; this one has no stack behind it."""
    def __init__(self):
        super().__init__("/nonexistent-stack")


def test_toxic_fault_is_added_then_removed_on_schedule(replay, tmp_path):
    srv = replay([CONTRACT[1], CONTRACT[1], CONTRACT[1], CONTRACT[3], CONTRACT[5]])
    plan = parse_plan(f"""
toxiproxy: {srv.url}
faults:
  - {{id: slow, kind: toxic, target: redis, at: 0s, duration: 300ms, toxic: latency, latency: 300ms, jitter: 50}}
""")
    ctl = Controller(plan, NoBackend(), tmp_path / "run").start()
    assert ctl.wait(20)
    tl = read_timeline(tmp_path / "run")
    assert [(r["event"], r["outcome"], r["backend"]) for r in tl] == [("apply", "ok", "local"), ("recover", "ok", "local")]
    assert tl[0]["detail"] == {"proxy": "redis", "toxic": "goldfish-slow_0"}
    posted = [r for r in srv.requests if r["method"] == "POST"]
    assert posted[0]["body"]["attributes"] == {"latency": 300, "jitter": 50}
    assert [r["method"] for r in srv.requests][-1] == "DELETE"


def test_unknown_proxy_is_refused_before_anything(replay, tmp_path):
    srv = replay([CONTRACT[1]])
    plan = parse_plan(f"toxiproxy: {srv.url}\nfaults:\n  - {{kind: toxic, target: pg, at: 0s, duration: 1s, "
                      f"toxic: timeout, timeout: 0}}\n", "t.yaml")
    with pytest.raises(Exception, match="t.yaml:3: target: 'pg' has no instances"):
        Controller(plan, NoBackend(), tmp_path / "run").start()
    assert [r["method"] for r in srv.requests] == ["GET"]


def test_heal_after_a_hard_kill_removes_the_toxic(replay, tmp_path):
    """The outstanding file carries the Toxiproxy URL, so `chaos heal` can remove the toxic."""
    srv = replay([CONTRACT[1], CONTRACT[1], CONTRACT[3], CONTRACT[6]])
    plan = parse_plan(f"toxiproxy: {srv.url}\nfaults:\n  - {{id: slow, kind: toxic, target: redis, at: 0s, "
                      f"duration: 1m, toxic: latency, latency: 300}}\n")
    ctl = Controller(plan, NoBackend(), tmp_path / "run").start()
    from conftest import wait_until
    wait_until(lambda: any(r["event"] == "apply" for r in read_timeline(tmp_path / "run")), what="toxic applied")
    # Simulate the hard kill: abandon this controller without stop() and heal from the file.
    ctl._stop.set()
    recovered, failed = heal_run(tmp_path / "run", backend=NoBackend())
    assert (recovered, failed) == (1, [])
    assert srv.requests[-1]["method"] == "DELETE" and srv.requests[-1]["path"].endswith("/goldfish-slow_0")
