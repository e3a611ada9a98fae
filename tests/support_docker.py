"""A real container engine for the docker-backend tests: podman's Docker-compatible service, the
cached images, and compose stacks brought up from the repository's docker-compose.yml.

Everything here is real (podman + runc, podman-compose); tests skip with a reason when podman
is not installed. Every service, container, network and volume started here is removed at
teardown by pid or by its compose project label, also after a failed test.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from conftest import free_port, wait_until
from targets.registry import pid_alive

ROOT = Path(__file__).resolve().parent.parent
CONTAINERS_CONF = ROOT / "docker" / "podman" / "containers.conf"
BASE_IMAGE = os.environ.get("GOLDFISH_BASE_IMAGE", "localhost/goldfish-base:bookworm")
REFBOT_IMAGE = os.environ.get("GOLDFISH_REFBOT_IMAGE", "localhost/goldfish-refbot:latest")
PROJECT_LABEL = "com.docker.compose.project"


def podman_env() -> dict:
    """The environment podman runs with here (runc, cgroupfs, no default ulimits)."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def require_podman() -> None:
    if not shutil.which("podman"):
        pytest.skip("podman is not installed: the docker backend needs a real container engine "
                    "(apt-get install podman runc podman-compose debootstrap)")
    if not shutil.which("runc"):
        pytest.skip("runc is not installed (apt-get install runc): podman is configured to use it here")


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], env=podman_env(), capture_output=True, text=True, check=check,
                          timeout=timeout)


class EngineService:
    """`podman system service` on a private socket, in its own session; stopped by pid."""

    def __init__(self, workdir: Path):
        self.socket = Path(f"/tmp/goldfish-test-podman-{os.getpid()}-{uuid.uuid4().hex[:6]}.sock")
        self.url = f"unix://{self.socket}"
        self.log = open(workdir / "podman-service.log", "ab")
        self.proc = subprocess.Popen(["podman", "system", "service", "--time=0", self.url], env=podman_env(),
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self.socket.exists, timeout=30, what=f"podman service socket {self.socket}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        self.socket.unlink(missing_ok=True)


def build_images() -> None:
    """The debootstrap base image and the refbot image on it; both cached (seconds when built)."""
    env = {**podman_env(), "GOLDFISH_BASE_IMAGE": BASE_IMAGE, "GOLDFISH_REFBOT_IMAGE": REFBOT_IMAGE}
    done = subprocess.run(["bash", str(ROOT / "docker" / "build-images.sh")], env=env, capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"building the images failed:\n{done.stdout}\n{done.stderr}")


def require_container_dns() -> None:
    """Seconds, once per session: containers on a podman network resolve each other by name
    (docker/check_dns.py). Without it every stack waits minutes for replicas HAProxy cannot
    find; this errors at once with the cause and the fix instead."""
    done = subprocess.run([sys.executable, str(ROOT / "docker" / "check_dns.py"), BASE_IMAGE], env=podman_env(),
                          capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        pytest.fail((done.stderr or done.stdout).strip(), pytrace=False)


def remove_project(project: str) -> None:
    """Remove every container, the network and the volume of a compose project (idempotent)."""
    ids = podman("ps", "-aq", "--filter", f"label={PROJECT_LABEL}={project}", check=False).stdout.split()
    if ids:
        podman("rm", "-f", "-t", "0", *ids, check=False)
    podman("network", "rm", "-f", f"{project}_default", check=False)
    podman("volume", "rm", "-f", f"{project}_redis-data", check=False)


@dataclass
class ComposeStack:
    """docker-compose.yml brought up with podman-compose, without Toxiproxy (no image here)."""
    project: str
    persistence: str = "aof-always"
    ports: dict = field(default_factory=lambda: {k: free_port() for k in ("http", "redis", "admin", "stats", "toxi")})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def store_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['redis']}/0"

    def env(self) -> dict:
        return {**podman_env(), "GOLDFISH_PYTHON_IMAGE": BASE_IMAGE, "GOLDFISH_REDIS_IMAGE": BASE_IMAGE,
                "GOLDFISH_HAPROXY_IMAGE": BASE_IMAGE, "GOLDFISH_REFBOT_IMAGE": REFBOT_IMAGE,
                "GOLDFISH_REDIS_PERSISTENCE": self.persistence, "GOLDFISH_THINK_MS": "5",
                "GOLDFISH_HTTP_PORT": str(self.ports["http"]), "GOLDFISH_REDIS_PORT": str(self.ports["redis"]),
                "GOLDFISH_HAPROXY_ADMIN_PORT": str(self.ports["admin"]),
                "GOLDFISH_HAPROXY_STATS_PORT": str(self.ports["stats"]),
                "GOLDFISH_TOXIPROXY_PORT": str(self.ports["toxi"])}

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        cmd = ["podman-compose", "-p", self.project, "-f", "docker-compose.yml", "-f", "docker/compose.direct.yml",
               *args]
        return subprocess.run(cmd, cwd=ROOT, env=self.env(), capture_output=True, text=True, timeout=timeout)

    def up(self) -> "ComposeStack":
        done = self.compose("up", "-d", "redis", "bot-1", "bot-2", "bot-3", "haproxy")
        if done.returncode != 0:
            raise RuntimeError(f"podman-compose up failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        self.wait_replicas(3)
        return self

    def replicas(self) -> set[str]:
        """Replica names answering /healthz through HAProxy (a handful of tries)."""
        seen = set()
        for _ in range(9):
            try:
                r = requests.get(self.url + "/healthz", timeout=3)
                if r.ok:
                    seen.add(r.json().get("replica"))
            except requests.RequestException:
                pass
        return seen

    def serving(self) -> set[str]:
        """Replica names that read a history from Redis through HAProxy (a handful of tries).

        /healthz is liveness only. A bot that just started, or lost its connection to a
        restarted Redis, resolves the name `redis` again, and podman's DNS sometimes takes 10-20 s
        to answer (seen in the bots' logs as "Temporary failure in name resolution"): such a
        replica is up but cannot serve a turn yet. Reading a history touches Redis, writes nothing.
        """
        seen = set()
        for _ in range(9):
            try:
                r = requests.get(self.url + "/sessions/gfreadiness/history", timeout=3)
                if r.ok:
                    seen.add(r.headers.get("X-Refbot-Replica"))
            except requests.RequestException:
                pass
        return seen

    def wait_replicas(self, n: int, timeout: float = 120) -> None:
        """Until ``n`` replicas are healthy behind HAProxy and each can reach Redis."""
        wait_until(lambda: len(self.replicas()) >= n and len(self.serving()) >= n, timeout=timeout, interval=0.5,
                   what=f"{n} bot replicas behind HAProxy at {self.url} serving from Redis")

    def down(self) -> None:
        self.compose("down", "-v", "-t", "1", timeout=180)
        remove_project(self.project)


def new_project(prefix: str = "gft") -> str:
    """A compose project name that says which test process owns it (see remove_abandoned_projects)."""
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:4]}"


OWNED_PROJECT = re.compile(r"gf[a-z]*-(\d+)-[0-9a-f]{4}")


def remove_abandoned_projects() -> list[str]:
    """Remove the compose projects of test processes that no longer run (a killed `make test`
    cannot tear down). Their containers keep their published ports' NAT rules after podman's
    port-holding conmon is gone, so a later test's server that binds such a port is never reached:
    a refbot replica started on one was "not healthy after 90s" with an empty log."""
    if not shutil.which("podman"):
        return []
    listed = podman("ps", "-a", "--filter", f"label={PROJECT_LABEL}",
                    "--format", f'{{{{index .Labels "{PROJECT_LABEL}"}}}}', check=False).stdout.split()
    abandoned = sorted({p for p in listed if (m := OWNED_PROJECT.fullmatch(p)) and not pid_alive(int(m[1]))})
    for project in abandoned:
        remove_project(project)
    return abandoned


def chat(url: str, session: str, turn: int, text: str, timeout: float = 10) -> str:
    """One turn through HAProxy; returns the reply text."""
    r = requests.post(url + "/chat", json={"session_id": session, "message": f"[{session}t{turn}] {text}"},
                      timeout=timeout)
    r.raise_for_status()
    return r.json()["reply"]


def wait_for_status(container, status: str, timeout: float = 60) -> None:
    def reached():
        container.reload()
        return container.status == status
    wait_until(reached, timeout=timeout, interval=0.2, what=f"container {container.name} to be {status}")


def started_at(container) -> str:
    container.reload()
    return container.attrs["State"]["StartedAt"]

