"""docker-compose.yml and its pieces, read as data (no engine needed): the names the chaos plans
use, the published ports the docs promise, and the toxiproxy-less override."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DIRECT = yaml.safe_load((ROOT / "docker" / "compose.direct.yml").read_text())


def published(service: str) -> set[int]:
    """Container ports a service publishes."""
    return {int(p.rsplit(":", 1)[1]) for p in COMPOSE["services"][service].get("ports", [])}


def test_services_and_roles_match_the_chaos_targets():
    services = COMPOSE["services"]
    assert set(services) == {"redis", "toxiproxy", "bot-1", "bot-2", "bot-3", "haproxy"}
    roles = {name: s.get("labels", {}).get("goldfish.role") for name, s in services.items()}
    assert roles == {"redis": "redis", "toxiproxy": "toxiproxy", "bot-1": "bot", "bot-2": "bot", "bot-3": "bot",
                     "haproxy": "lb"}
    for n in (1, 2, 3):
        env = services[f"bot-{n}"]["environment"]
        assert env["REFBOT_REPLICA"] == f"bot-{n}" and env["REFBOT_HOST"] == "0.0.0.0"
        assert env["REFBOT_REDIS_URL"].startswith("${GOLDFISH_BOT_REDIS_URL:-redis://toxiproxy:6379")


def test_published_ports_are_the_documented_ones_on_loopback_by_default():
    assert published("haproxy") == {8080, 9999, 8404}
    assert published("redis") == {6379}
    assert published("toxiproxy") == {8474}
    for s in COMPOSE["services"].values():
        for p in s.get("ports", []):
            assert p.startswith("${GOLDFISH_BIND:-127.0.0.1}:"), p
    docs = (ROOT / "docs" / "containers.md").read_text()
    for port in ("8080", "6379", "9999", "8404", "8474"):
        assert port in docs


def test_haproxy_servers_are_the_bots_and_the_runtime_api_is_on_the_admin_port():
    cfg = (ROOT / "docker" / "haproxy" / "haproxy.cfg").read_text()
    assert re.findall(r"server (bot-\d) \1:8000", cfg) == ["bot-1", "bot-2", "bot-3"]
    assert "stats socket ipv4@0.0.0.0:9999 level admin" in cfg
    assert "balance roundrobin" in cfg


def test_every_persistence_setting_has_a_redis_config():
    for mode, lines in {"none": ["appendonly no", 'save ""'], "rdb": ["save 1 1"],
                        "aof-everysec": ["appendonly yes", "appendfsync everysec"],
                        "aof-always": ["appendonly yes", "appendfsync always"]}.items():
        text = (ROOT / "docker" / "redis" / f"{mode}.conf").read_text()
        assert all(line in text.splitlines() for line in lines), mode


def test_toxiproxy_sits_between_bots_and_redis_and_the_override_removes_it():
    proxies = json.loads((ROOT / "docker" / "toxiproxy" / "toxiproxy.json").read_text())
    assert proxies == [{"name": "redis", "listen": "0.0.0.0:6379", "upstream": "redis:6379", "enabled": True}]
    assert DIRECT["services"]["toxiproxy"]["profiles"] == ["toxiproxy"]
    for n in (1, 2, 3):
        assert DIRECT["services"][f"bot-{n}"]["environment"]["REFBOT_REDIS_URL"] == "redis://redis:6379/0"
    assert all("toxiproxy" not in (s.get("depends_on") or []) for s in COMPOSE["services"].values())
