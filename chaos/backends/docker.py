"""The docker backend: faults on the containers of one compose project, through the Engine API.

It speaks the Docker Engine API with the docker SDK, so it drives Docker and podman's
Docker-compatible service (``podman system service``) alike. Containers are found by the labels
every compose implementation sets (``com.docker.compose.project`` / ``.service``); an instance is
a compose service name (``bot-2``; ``bot-2.2`` when a service is scaled). Logical targets
(``bot``, ``redis``, ``lb``) match the ``goldfish.role`` label, else the service name.

Optional labels on a service (docker-compose.yml sets them): ``goldfish.role``,
``goldfish.lb-server`` (HAProxy ``backend/server``, default ``bots/<service>``),
``goldfish.health`` (a shell command that exits 0 when the container is ready; defaults per
role), ``goldfish.haproxy-admin`` (the HAProxy container's runtime API port, default 9999).

Redis faults run ``redis-cli`` inside the Redis container; HAProxy faults talk to its runtime
API on the port the lb container publishes. A rolling restart replaces each bot container by a
copy with the new release (a container's environment cannot change in place) and rolls back to
the old one when the copy does not come up. Undo records hold container ids and names only, so
``python -m chaos heal`` rebuilds everything from JSON after a SIGKILL.
"""
from __future__ import annotations

import os
import re
import socket
import time

from chaos import faults as F
from chaos.backend import Backend, MissingExtra, UnsupportedFault
from chaos.backends import NotApplied
from chaos.faults import Fault
from contracts.redis_url import CLIENT_NAME
from targets.haproxy import runtime_command

try:  # an extra: goldfish[containers]
    import docker
    from docker.errors import APIError, DockerException, NotFound
except ModuleNotFoundError as exc:
    raise MissingExtra("docker", "docker", "containers") from exc

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
NUMBER_LABEL = "com.docker.compose.container-number"
ROLE_LABEL = "goldfish.role"
LB_SERVER_LABEL = "goldfish.lb-server"
HEALTH_LABEL = "goldfish.health"
ADMIN_LABEL = "goldfish.haproxy-admin"

OLD_SUFFIX = "-gf-old"   # a container kept aside during a rolling restart until its successor is healthy

REDIS_KINDS = {F.REDIS_RESTART, F.REDIS_CLIENT_KILL, F.REDIS_STALL}
LB_KINDS = {F.LB_DROP, F.LB_DISABLE}

# Readiness per role, run inside the container with `sh -c` (no published port needed).
DEFAULT_HEALTH = {
    "bot": "python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)\"",
    "redis": "redis-cli ping | grep -q PONG",
    "lb": "bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080'",
}
# Where to look for an engine when neither base_url nor DOCKER_HOST says: Docker, then podman.
DEFAULT_SOCKETS = ("unix:///var/run/docker.sock", "unix:///run/podman/podman.sock")


class EngineUnavailable(RuntimeError):
    """No container engine answers on the socket; the message says how to start one."""


def _natural(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def role_of(service: str, labels: dict) -> str:
    """The logical role of a service: its goldfish.role label, else guessed from its name."""
    if labels.get(ROLE_LABEL):
        return labels[ROLE_LABEL]
    base = re.sub(r"[-_.]?\d+$", "", service)
    return {"haproxy": "lb", "lb": "lb", "redis": "redis", "bot": "bot"}.get(base, base)


def connect(base_url: str | None = None, timeout: float = 30.0) -> tuple[docker.DockerClient, str]:
    """A client that has answered a ping, and the URL it answered on; EngineUnavailable otherwise."""
    candidates = [base_url] if base_url else ([os.environ["DOCKER_HOST"]] if os.environ.get("DOCKER_HOST")
                                              else list(DEFAULT_SOCKETS))
    errors = []
    for url in candidates:
        if url.startswith("unix://") and not os.path.exists(url[len("unix://"):]):
            errors.append(f"{url}: no such socket")
            continue
        try:
            client = docker.DockerClient(base_url=url, timeout=int(timeout))
            client.ping()
            return client, url
        except (DockerException, OSError) as exc:
            errors.append(f"{url}: {exc}")
    raise EngineUnavailable(
        "no container engine answers (" + "; ".join(errors) + "). Start Docker, or podman's Docker-compatible "
        "service: `podman system service --time=0 unix:///tmp/podman.sock &` and pass "
        "`--backend-opt base_url=unix:///tmp/podman.sock` (or set DOCKER_HOST to that URL)")


class DockerBackend(Backend):
    name = "docker"
    kinds = frozenset({F.KILL, F.RESTART, F.PAUSE, F.REDIS_RESTART, F.REDIS_CLIENT_KILL, F.REDIS_STALL,
                       F.LB_DROP, F.LB_DISABLE, F.ROLLING_RESTART})

    def __init__(self, project: str | None = None, base_url: str | None = None, health_timeout: float = 90.0,
                 api_timeout: float = 60.0):
        self.project = project or os.environ.get("COMPOSE_PROJECT_NAME") or "goldfish"
        self.health_timeout = float(health_timeout)
        self.api_timeout = float(api_timeout)
        self.client, self.base_url = connect(base_url, api_timeout)

    def config(self) -> dict:
        return {"project": self.project, "base_url": self.base_url, "health_timeout": self.health_timeout,
                "api_timeout": self.api_timeout}

    def close(self) -> None:
        self.client.close()

    # ---- resolving --------------------------------------------------------------------------
    def _containers(self) -> dict[str, "docker.models.containers.Container"]:
        """Instance name -> container, for every container of the project (running or not)."""
        found = self.client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"})
        if not found:
            projects = sorted({c.labels.get(PROJECT_LABEL) for c in self.client.containers.list(all=True)} - {None})
            raise LookupError(f"compose project {self.project!r} has no containers on {self.base_url} "
                              f"(projects there: {', '.join(projects) or 'none'}); bring it up with "
                              f"`docker compose -p {self.project} up -d` or pass --backend-opt project=NAME")
        by_service: dict[str, list] = {}
        for c in found:
            if c.name.endswith(OLD_SUFFIX):
                continue
            by_service.setdefault(c.labels.get(SERVICE_LABEL, c.name), []).append(c)
        out = {}
        for service, cs in by_service.items():
            if len(cs) == 1:
                out[service] = cs[0]
            else:
                for c in cs:
                    out[f"{service}.{c.labels.get(NUMBER_LABEL, c.short_id)}"] = c
        return out

    def services(self) -> dict[str, str]:
        """Instance name -> role, for messages and tests."""
        return {n: role_of(c.labels.get(SERVICE_LABEL, n), c.labels) for n, c in self._containers().items()}

    def instances(self, target: str) -> list[str]:
        containers = self._containers()
        if target in containers:
            return [target]
        return sorted((n for n, c in containers.items()
                       if n.split(".")[0] == target or role_of(c.labels.get(SERVICE_LABEL, n), c.labels) == target),
                      key=_natural)

    def _container(self, instance: str):
        containers = self._containers()
        if instance not in containers:
            raise LookupError(f"compose project {self.project!r} has no service {instance!r} "
                              f"(services: {', '.join(sorted(containers, key=_natural))})")
        c = containers[instance]
        _refuse_self(c, instance)
        return c

    def check(self, fault: Fault) -> None:
        super().check(fault)
        roles = {role for n, role in self.services().items() if n in self.instances(fault.target)}
        if fault.kind in REDIS_KINDS and roles and roles != {"redis"}:
            raise UnsupportedFault(f"{fault.kind} needs a redis target, {fault.target!r} is {sorted(roles)}")
        if fault.kind == F.ROLLING_RESTART and roles and roles != {"bot"}:
            raise UnsupportedFault(f"rolling-restart needs the bot replicas as target, {fault.target!r} is {sorted(roles)}")
        if fault.kind in LB_KINDS:
            if roles and roles != {"bot"}:
                raise UnsupportedFault(f"{fault.kind} targets services behind the load balancer (e.g. bot); "
                                       f"{fault.target!r} is {sorted(roles)}")
            self._admin_address()   # raises when no lb container publishes its runtime API

    def describe(self, instance: str) -> str:
        names = self.instances(instance)
        if names and names != [instance]:   # a whole target (rolling-restart): describe each member
            return f"{instance}: " + "; ".join(self.describe(n) for n in names)
        c = self._container(instance)
        c.reload()
        st = c.attrs.get("State", {})
        role = role_of(c.labels.get(SERVICE_LABEL, instance), c.labels)
        return (f"{instance} (role {role}) container {c.name} {c.short_id} {st.get('Status', c.status)}"
                f" since {st.get('StartedAt', '?')[:19]} image {c.attrs.get('Config', {}).get('Image')}")

    # ---- faults -----------------------------------------------------------------------------
    def apply(self, fault: Fault, instance: str) -> dict:
        k = fault.kind
        if k == F.ROLLING_RESTART:
            return self._rolling_restart(fault, instance)
        c = self._container(instance)
        self._require_running(c, instance)
        undo = {"container": c.id, "name": c.name}
        if k == F.KILL or (k == F.REDIS_RESTART and fault.params.get("mode", "crash") == "crash"):
            c.kill(signal="SIGKILL")
            self._wait_state(c, {"exited", "stopped", "dead"}, 30, f"{instance} to die after SIGKILL")
        elif k in (F.RESTART, F.REDIS_RESTART):
            c.stop(timeout=int(round(float(fault.params.get("grace", 10.0)))))
        elif k == F.PAUSE:
            c.pause()
        elif k == F.REDIS_CLIENT_KILL:
            ours = self._redis_cli(c, instance, "CLIENT", "LIST").count(f" name={CLIENT_NAME} ")  # goldfish's own
            out = self._redis_cli(c, instance, "CLIENT", "KILL", "TYPE", fault.params.get("type", "normal"),
                                  "SKIPME", "yes")
            undo["killed"] = int(out) if out.isdigit() else out
            if out.isdigit():
                undo["touched"] = max(0, int(out) - ours)
        elif k == F.REDIS_STALL:
            # Exactly the planned length: Redis 7.0 postpones a CLIENT UNPAUSE sent on another
            # connection until a PAUSE ALL ends, so recover cannot cut it short anyway, and if the
            # controller dies Redis resumes on its own.
            undo["pause_ms"] = ms = max(1, int((fault.duration or 0) * 1000))
            self._redis_cli(c, instance, "CLIENT", "PAUSE", str(ms), "ALL")
        elif k == F.LB_DROP:
            undo["server"] = self._lb_server(c, instance)
            self._haproxy(f"shutdown sessions server {undo['server']}")
        elif k == F.LB_DISABLE:
            undo["server"] = self._lb_server(c, instance)
            self._haproxy(f"set server {undo['server']} state maint")
        else:
            raise UnsupportedFault(f"docker backend cannot do {k!r}")
        return undo

    def recover(self, fault: Fault, instance: str, undo: dict) -> None:
        k = fault.kind
        if k in (F.KILL, F.RESTART, F.REDIS_RESTART, F.PAUSE):
            self._ensure_running(self._recorded(instance, undo), instance)
        elif k == F.REDIS_STALL:
            c = self._recorded(instance, undo)
            if c.status == "running":
                self._redis_cli(c, instance, "CLIENT", "UNPAUSE")
        elif k == F.LB_DISABLE:
            self._haproxy(f"set server {undo.get('server') or self._lb_server(self._container(instance), instance)} "
                          f"state ready")
        elif k == F.ROLLING_RESTART:
            for name in self.instances(instance):
                self._finish_replacement(name)
                self._ensure_running(self._container(name), name)
                self._lb_ready(name)
        # redis-client-kill and lb-drop are instant: nothing to undo.

    # ---- rolling restart: containers cannot change their environment, so each is replaced -------
    def _rolling_restart(self, fault: Fault, target: str) -> dict:
        release = fault.params["release"]
        env = {**{k: str(v) for k, v in (fault.params.get("env") or {}).items()}, "REFBOT_RELEASE": release}
        grace = int(round(float(fault.params.get("grace", 10.0))))
        done = []
        for name in self.instances(target):
            self._finish_replacement(name)   # a replacement a killed controller left half done
            old = self._container(name)
            self._require_running(old, name, untouched=False)   # a replacement may have been finished above
            server = self._lb_server(old, name) if self._has_lb() else None
            if server:
                self._haproxy(f"set server {server} state maint")
            try:
                self._replace(old, name, env, grace)
            finally:   # new container or rolled-back old one: either way HAProxy may send it traffic
                if server:
                    self._haproxy(f"set server {server} state ready")
            done.append(name)
            if fault.params.get("pause") and self.pause_between(float(fault.params["pause"])):
                break
        return {"members": done, "release": release}

    def _replace(self, old, name: str, env_update: dict, grace: int) -> None:
        """Stop the container, set it aside, start a copy with the new environment; roll back on failure."""
        spec = _copy_spec(old, env_update)
        old.stop(timeout=grace)
        old.rename(old.name + OLD_SUFFIX)
        try:
            new = self._create(spec)
            new.start()
            self._wait_healthy(new, name)
        except Exception as exc:
            self._finish_replacement(name, rollback=True)
            raise RuntimeError(f"rolling restart of {name} failed, the old container is back: {exc}") from None
        old.remove(force=True)

    def _create(self, spec: dict):
        api = self.client.api
        networks = list(spec["networks"].items())
        first = {networks[0][0]: api.create_endpoint_config(aliases=networks[0][1])} if networks else None
        created = api.create_container(
            spec["image"], command=spec["cmd"], entrypoint=spec["entrypoint"] or None, environment=spec["env"],
            labels=spec["labels"], name=spec["name"], working_dir=spec["workdir"] or None, user=spec["user"] or None,
            host_config=api.create_host_config(binds=spec["binds"] or None, port_bindings=spec["ports"] or None),
            networking_config=api.create_networking_config(first) if first else None)
        for net, aliases in networks[1:]:
            api.connect_container_to_network(created["Id"], net, aliases=aliases)
        return self.client.containers.get(created["Id"])

    def _finish_replacement(self, name: str, rollback: bool = False) -> None:
        """Idempotent end of an interrupted replacement: keep the new container if there is one
        (unless rolling back), else put the set-aside old one back under its name."""
        olds = self.client.containers.list(all=True, filters={"label": [f"{PROJECT_LABEL}={self.project}",
                                                                        f"{SERVICE_LABEL}={name}"]})
        old = next((c for c in olds if c.name.endswith(OLD_SUFFIX)), None)
        if old is None:
            return
        current = next((c for c in olds if c.name == old.name[:-len(OLD_SUFFIX)]), None)
        if current is not None and rollback:
            current.remove(force=True)
            current = None
        if current is None:
            old.rename(old.name[:-len(OLD_SUFFIX)])
            old.reload()
            self._ensure_running(old, name)
        else:
            old.remove(force=True)

    def _has_lb(self) -> bool:
        try:
            self._admin_address()
            return True
        except UnsupportedFault:
            return False

    def _lb_ready(self, name: str) -> None:
        if self._has_lb():
            self._haproxy(f"set server {self._lb_server(self._container(name), name)} state ready")

    # ---- helpers ----------------------------------------------------------------------------
    def _recorded(self, instance: str, undo: dict):
        """The container the fault hit; the service's current one if it was replaced since."""
        if undo.get("container"):
            try:
                c = self.client.containers.get(undo["container"])
                c.reload()
                return c
            except NotFound:
                pass
        return self._container(instance)

    def _require_running(self, c, instance: str, untouched: bool = True) -> None:
        """NotApplied when the container is not running and nothing has been done yet (``untouched``)."""
        c.reload()
        if c.status != "running":
            raise (NotApplied if untouched else RuntimeError)(f"{instance} (container {c.name}) is {c.status}, not running")

    def _wait_state(self, c, states: set[str], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            c.reload()
            if c.status in states:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g}s waiting for {what} (state {c.status})")
            time.sleep(0.2)

    def _ensure_running(self, c, instance: str) -> None:
        """Unpause or start the container as needed (idempotent), then wait until it is healthy."""
        if c.status == "paused":
            c.unpause()
        elif c.status != "running":
            try:
                c.start()
            except APIError as exc:
                raise RuntimeError(f"{instance} (container {c.name}) will not start: {exc.explanation or exc}"
                                   f"{self._last_log(c)}") from None
        self._wait_healthy(c, instance)

    def _wait_healthy(self, c, instance: str) -> None:
        role = role_of(c.labels.get(SERVICE_LABEL, instance), c.labels)
        probe = c.labels.get(HEALTH_LABEL) or DEFAULT_HEALTH.get(role)
        deadline = time.monotonic() + self.health_timeout
        last = ""
        while True:
            c.reload()
            if c.status in ("exited", "dead", "stopped"):
                code = c.attrs.get("State", {}).get("ExitCode")
                raise RuntimeError(f"{instance} (container {c.name}) did not stay up: {c.status}, exit code {code}"
                                   f"{self._last_log(c)}")
            if c.status == "running":
                if not probe:
                    return
                code, out = c.exec_run(["sh", "-c", probe])
                if code == 0:
                    return
                last = (out or b"").decode(errors="replace").strip()[-200:]
            if time.monotonic() > deadline:
                raise RuntimeError(f"{instance} (container {c.name}) not healthy after {self.health_timeout:g}s "
                                   f"(state {c.status}; probe {probe!r}: {last or 'no output'})")
            time.sleep(0.5)

    @staticmethod
    def _last_log(c) -> str:
        try:
            tail = c.logs(tail=5).decode(errors="replace").strip()
        except (DockerException, OSError):
            return ""
        return f"; last log lines: {tail}" if tail else ""

    def _redis_cli(self, c, instance: str, *args: str) -> str:
        code, out = c.exec_run(["redis-cli", *args])
        text = (out or b"").decode(errors="replace").strip()
        if code != 0 or text.startswith("ERR") or text.startswith("(error)"):
            raise RuntimeError(f"redis-cli {' '.join(args)} in {instance} failed (exit {code}): {text}")
        return text

    def _lb_server(self, c, instance: str) -> str:
        return c.labels.get(LB_SERVER_LABEL) or f"bots/{c.labels.get(SERVICE_LABEL, instance)}"

    def _admin_address(self) -> tuple[str, int]:
        """Host address of the HAProxy runtime API: the port the lb container publishes."""
        for name, c in self._containers().items():
            if role_of(c.labels.get(SERVICE_LABEL, name), c.labels) != "lb":
                continue
            port = c.labels.get(ADMIN_LABEL, "9999")
            c.reload()
            bindings = (c.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(f"{port}/tcp") or []
            for b in bindings:
                host = b.get("HostIp") or "127.0.0.1"
                return ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host), int(b["HostPort"])
            raise UnsupportedFault(f"lb container {c.name} does not publish HAProxy's runtime API port {port} "
                                   f"(publish it, or set the {ADMIN_LABEL} label to the right port)")
        raise UnsupportedFault(f"compose project {self.project!r} has no lb (HAProxy) service for lb faults")

    def _haproxy(self, command: str) -> None:
        """One runtime API command through the lb container's published admin port."""
        runtime_command(self._admin_address(), command)


def _copy_spec(c, env_update: dict) -> dict:
    """What it takes to create the same container again, with env_update over its environment."""
    a = c.attrs
    cfg, hc = a.get("Config") or {}, a.get("HostConfig") or {}
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e and not e.startswith("HOSTNAME="))
    env.update(env_update)
    networks = {net: [x for x in (v.get("Aliases") or []) if not c.id.startswith(x)]
                for net, v in (a.get("NetworkSettings", {}).get("Networks") or {}).items()}
    ports = {p: [(b.get("HostIp") or "", b["HostPort"]) for b in bs] for p, bs in (hc.get("PortBindings") or {}).items()
             if bs}
    binds = [f"{m.get('Name') if m.get('Type') == 'volume' else m['Source']}:{m['Destination']}:"
             f"{'rw' if m.get('RW', True) else 'ro'}" for m in a.get("Mounts") or [] if m.get("Type") in ("bind", "volume")]
    return {"image": cfg.get("Image"), "cmd": cfg.get("Cmd"), "entrypoint": cfg.get("Entrypoint"), "env": env,
            "labels": cfg.get("Labels") or {}, "name": c.name, "workdir": cfg.get("WorkingDir"),
            "user": cfg.get("User"), "networks": networks, "ports": ports, "binds": binds}


def _refuse_self(c, instance: str) -> None:
    """Never act on the container the controller itself runs in (Locust inside the project)."""
    me = socket.gethostname()
    if len(me) >= 12 and c.id.startswith(me):
        raise PermissionError(f"refusing to touch {instance} (container {c.name}): the controller runs in it")
