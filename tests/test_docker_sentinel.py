"""docker/compose.sentinel.yml: the replicated topology of `refbot up --redis sentinel` for a container
engine — read as data, and brought up for real with podman-compose (skipped without podman)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field

import pytest
import yaml

from conftest import free_port, wait_until
from contracts.redis_url import parse_sentinel_url
from oracle.redis_reader import RedisReader
from oracle.store import StoreOptions
from targets import sentinel
from support_docker import ROOT, ComposeStack, build_images, chat, new_project, podman, remove_project, require_podman

OVERRIDE = yaml.safe_load((ROOT / "docker" / "compose.sentinel.yml").read_text())
SENTINEL_CONF = (ROOT / "docker" / "sentinel" / "sentinel.conf").read_text().splitlines()
SERVICES = ["redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3", "bot-1", "bot-2", "bot-3", "haproxy"]
BOTS = ("bot-1", "bot-2", "bot-3")


def test_the_override_has_the_embedded_topology_and_settings():
    services = OVERRIDE["services"]
    assert services["toxiproxy"]["profiles"] == ["toxiproxy"]  # a Sentinel client goes where Sentinel says
    assert services["redis-replica"]["labels"]["goldfish.role"] == "redis"
    assert services["redis-replica"]["command"][-3:] == ["--replicaof", "redis", "6379"]
    for n in (1, 2, 3):
        assert services[f"sentinel-{n}"]["labels"]["goldfish.role"] == "sentinel"
        assert services[f"sentinel-{n}"]["ports"][0].startswith("${GOLDFISH_BIND:-127.0.0.1}:")
        url = parse_sentinel_url(services[f"bot-{n}"]["environment"]["REFBOT_REDIS_URL"])
        assert url.sentinels == (("sentinel-1", 26379), ("sentinel-2", 26379), ("sentinel-3", 26379))
        assert url.service == sentinel.SERVICE
    # the same Sentinel settings as the embedded stack (targets/sentinel.py)
    for line in (f"sentinel monitor {sentinel.SERVICE} redis 6379 {sentinel.QUORUM}",
                 f"sentinel down-after-milliseconds {sentinel.SERVICE} {sentinel.DOWN_AFTER_MS}",
                 f"sentinel failover-timeout {sentinel.SERVICE} {sentinel.FAILOVER_TIMEOUT_MS}"):
        assert line in SENTINEL_CONF


@dataclass
class SentinelCompose(ComposeStack):
    """docker-compose.yml + docker/compose.sentinel.yml, the sentinels published on free ports."""
    sentinel_ports: list = field(default_factory=lambda: [free_port() for _ in range(3)])

    @property
    def store_url(self) -> str:
        return f"redis+sentinel://{','.join(f'127.0.0.1:{p}' for p in self.sentinel_ports)}/mymaster/0"

    def env(self) -> dict:
        return {**super().env(), **{f"GOLDFISH_SENTINEL_{i}_PORT": str(p) for i, p in enumerate(self.sentinel_ports, 1)}}

    def compose(self, *args, timeout: float = 300):
        import subprocess
        cmd = ["podman-compose", "-p", self.project, "-f", "docker-compose.yml", "-f", "docker/compose.sentinel.yml",
               *args]
        return subprocess.run(cmd, cwd=ROOT, env=self.env(), capture_output=True, text=True, timeout=timeout)

    def up(self) -> "SentinelCompose":
        done = self.compose("up", "-d", *SERVICES)  # podman-compose 1.0.3 ignores profiles: name them
        if done.returncode != 0:
            raise RuntimeError(f"podman-compose up failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        try:  # nine containers: the bots find the master through the Sentinels, by podman's DNS, which took over
            # 120 s once in a whole `make test` on a busy 2-core machine (it comes up in ~20 s alone)
            self.wait_replicas(3, timeout=300)
        except AssertionError as exc:  # say why: each bot's last lines (a name not resolved, no master yet)
            said = [podman("logs", "--tail", "15", f"{self.project}_{bot}_1", check=False) for bot in BOTS]
            logs = "\n".join(f"--- {bot}:\n{(p.stdout + p.stderr)[-1500:]}" for bot, p in zip(BOTS, said))
            raise AssertionError(f"{exc}\n{logs}") from None
        return self

    def down(self) -> None:
        super().down()
        podman("volume", "rm", "-f", f"{self.project}_redis-replica-data", check=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compose_sentinel_fails_over_and_the_bots_and_the_oracle_follow():
    require_podman()
    if not shutil.which("podman-compose"):
        pytest.skip("podman-compose is not installed (apt-get install podman-compose)")
    build_images()
    stack = SentinelCompose(new_project("gfs"), persistence="none")
    try:
        stack.up()
        session = "gf5e471e1c0de0f00d"
        chat(stack.url, session, 0, "My order number is 4242-SENT.")
        reader = RedisReader(StoreOptions(url=stack.store_url, scan_foreign=False))
        [[raw]] = list(reader.read([session]))
        assert raw.exists and len(raw.entries) == 2
        first = reader.client.connection_pool.get_master_address()

        podman("kill", f"{stack.project}_redis_1")  # the primary container dies; Sentinel promotes the replica
        wait_until(lambda: chat(stack.url, session, 1, "What is my order number?") == "Your order number is 4242-SENT.",
                   timeout=90, interval=0.5, what="a bot answering from the promoted replica")
        [[raw]] = list(reader.read([session]))
        assert reader.client.connection_pool.get_master_address() != first
        assert len(raw.entries) >= 4
    finally:
        stack.down()
        remove_project(stack.project)
