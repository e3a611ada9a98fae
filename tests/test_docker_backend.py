"""The docker chaos backend against a real engine: podman serving the Docker Engine API, the
stack from docker-compose.yml (podman-compose), real kills, restarts and pauses of containers.

Skipped with a reason when podman is not installed. The images are built once and cached
(docker/build-images.sh); a warm run of this file takes about a minute.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from chaos.backends.docker import DockerBackend, EngineUnavailable, role_of
from chaos.controller import Controller, heal_run
from chaos.plan import PlanError, load_plan
from conftest import wait_until
from support_chaos import write_plan
from support_docker import (BASE_IMAGE, ROOT, ComposeStack, EngineService, build_images, chat, new_project,
                            remove_project, require_container_dns, require_podman, started_at,
                            wait_for_status)

# A cold machine builds the images inside the first test's setup (debootstrap ~70 s, pip ~2 min,
# more under load): allow for it beyond the suite's default per-test timeout.
pytestmark = pytest.mark.timeout(900)


# ---- fixtures: one engine and one image build per session, one stack per module ------------------
@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    require_podman()
    service = EngineService(tmp_path_factory.mktemp("engine"))
    yield service
    service.stop()


@pytest.fixture(scope="session")
def images(engine):
    build_images()


@pytest.fixture(scope="session")
def container_dns(images):
    require_container_dns()


@pytest.fixture(scope="module")
def stack(container_dns):
    if not shutil.which("podman-compose"):
        pytest.skip("podman-compose is not installed (apt-get install podman-compose)")
    s = ComposeStack(new_project())
    try:
        yield s.up()
    finally:
        s.down()


@pytest.fixture(scope="module")
def stack_none(container_dns):
    """A second stack whose Redis keeps nothing on disk (GOLDFISH_REDIS_PERSISTENCE=none)."""
    if not shutil.which("podman-compose"):
        pytest.skip("podman-compose is not installed (apt-get install podman-compose)")
    s = ComposeStack(new_project(), persistence="none")
    try:
        yield s.up()
    finally:
        s.down()


@pytest.fixture
def backend(engine, stack):
    b = DockerBackend(project=stack.project, base_url=engine.url)
    yield b
    b.close()


def timeline(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "chaos.jsonl").read_text().splitlines()]


def outstanding(run_dir: Path) -> list[dict]:
    path = run_dir / "chaos" / "outstanding.json"
    return json.loads(path.read_text()).get("faults", []) if path.exists() else []


def chaos_cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chaos", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, **kw)


# ---- the faults, for real ----------------------------------------------------------------------------
@pytest.mark.slow
def test_controller_kills_and_restarts_a_bot_and_crash_restarts_redis(stack, backend, tmp_path):
    """kill bot-2 + redis-restart (crash) through the controller: both really restart, the timeline
    records apply and recover, and with aof-always every acknowledged fact survives the crash."""
    sessions = [f"gf{os.getpid():08x}{i:08x}"[:18] for i in range(6)]
    for i, s in enumerate(sessions):
        chat(stack.url, s, 0, f"My order number is 100{i}-ABCD.")
    c_bot, c_redis = (backend._container(n) for n in ("bot-2", "redis"))
    before = {"bot-2": started_at(c_bot), "redis": started_at(c_redis)}
    plan = write_plan(tmp_path, """
        name: docker-test
        faults:
          - {id: kill-bot, kind: kill, target: bot-2, at: 0s, duration: 1s}
          - {id: crash-redis, kind: redis-restart, target: redis, at: 1s, duration: 1s, mode: crash}
    """)
    run_dir = tmp_path / "run"
    ctl = Controller(load_plan(plan), backend, run_dir).start()
    assert ctl.wait(180), "the plan did not end and heal within 180 s"

    records = timeline(run_dir)
    seen = {(r["kind"], r["instance"], r["event"], r["outcome"], r["backend"]) for r in records}
    for kind, inst in (("kill", "bot-2"), ("redis-restart", "redis")):
        assert (kind, inst, "apply", "ok", "docker") in seen, records
        assert (kind, inst, "recover", "ok", "docker") in seen, records
    apply_kill = next(r for r in records if r["kind"] == "kill" and r["event"] == "apply")
    assert apply_kill["detail"]["container"] == c_bot.id
    assert outstanding(run_dir) == []
    assert started_at(c_bot) != before["bot-2"], "bot-2 was not restarted"
    assert started_at(c_redis) != before["redis"], "redis was not restarted"
    stack.wait_replicas(3)
    for i, s in enumerate(sessions):
        assert chat(stack.url, s, 1, "What is my order number?") == f"Your order number is 100{i}-ABCD."


@pytest.mark.slow
def test_redis_crash_with_persistence_none_loses_every_stored_session(stack_none, engine):
    """The same crash as above on a Redis with persistence none: every key is gone afterwards and
    the bots answer probes with amnesia — what the persistence setting predicts."""
    import redis
    from chaos.faults import Fault

    backend = DockerBackend(project=stack_none.project, base_url=engine.url)
    store = redis.Redis.from_url(stack_none.store_url)
    sessions = [f"gf{os.getpid():08x}{i:08x}"[:18] for i in range(3)]
    try:
        for i, s in enumerate(sessions):
            chat(stack_none.url, s, 0, f"My postcode is 200{i}-WXYZ.")
        assert store.exists(*[f"message_store:{s}" for s in sessions]) == 3
        fault = Fault("crash#0", "redis-restart", "redis", None, {"mode": "crash"})
        backend.recover(fault, "redis", backend.apply(fault, "redis"))
        wait_until(lambda: store.ping(), timeout=30, what="redis back on its published port")
        assert store.exists(*[f"message_store:{s}" for s in sessions]) == 0
        for s in sessions:
            assert chat(stack_none.url, s, 1, "What is my postcode?") == "I don't know your postcode."
    finally:
        store.close()
        backend.close()


@pytest.mark.slow
def test_lb_disable_puts_the_server_in_maintenance_and_recover_makes_it_ready(stack, backend):
    from chaos.faults import Fault

    fault = Fault("lb#0", "lb-disable", "bot-1", 5.0, {})
    backend.check(fault)
    undo = backend.apply(fault, "bot-1")
    assert undo["server"] == "bots/bot-1"
    try:
        wait_until(lambda: "bot-1" not in stack.replicas(), timeout=30, what="HAProxy to stop routing to bot-1")
    finally:
        backend.recover(fault, "bot-1", json.loads(json.dumps(undo)))
    stack.wait_replicas(3)


@pytest.mark.slow
def test_redis_client_kill_stall_and_lb_drop_act_on_the_real_services(stack, backend):
    """redis-cli runs inside the Redis container; lb-drop goes to HAProxy's published runtime API."""
    import threading
    import time

    import redis
    from chaos.faults import Fault

    store = redis.Redis.from_url(stack.store_url, client_name="gf-victim", socket_timeout=30)
    watcher = redis.Redis.from_url(stack.store_url, socket_timeout=30)
    try:
        store.ping()
        undo = backend.apply(Fault("ck#0", "redis-client-kill", "redis", None, {"type": "normal"}), "redis")
        assert undo["killed"] >= 1
        assert "gf-victim" not in {c.get("name") for c in watcher.client_list()}

        stall = Fault("st#0", "redis-stall", "redis", 3.0, {})
        undo = backend.apply(stall, "redis")
        assert undo["pause_ms"] == 3000
        took = {}

        def write():
            t = time.monotonic()
            watcher.set("gf-stall-probe", "1")
            took["s"] = time.monotonic() - t

        writer = threading.Thread(target=write)
        writer.start()
        backend.recover(stall, "redis", undo)
        writer.join(30)
        assert took["s"] >= 1.0, f"a write during a 3 s CLIENT PAUSE returned after {took['s']:.2f}s"
        assert watcher.get("gf-stall-probe") == b"1"

        undo = backend.apply(Fault("dr#0", "lb-drop", "bot-2", None, {}), "bot-2")
        assert undo["server"] == "bots/bot-2"
    finally:
        store.close()
        watcher.close()
    stack.wait_replicas(3)


@pytest.mark.slow
def test_rolling_restart_replaces_each_bot_onto_the_new_release_and_memory_survives(stack, backend, tmp_path):
    session = f"gf{os.getpid():08x}{0xabc:08x}"[:18]
    chat(stack.url, session, 0, "My phone number is 5550-RRST.")
    before = {n: backend._container(n).id for n in ("bot-1", "bot-2", "bot-3")}
    plan = write_plan(tmp_path, """
        faults:
          - {id: roll, kind: rolling-restart, target: bot, at: 0s, release: v2}
    """)
    run_dir = tmp_path / "run"
    ctl = Controller(load_plan(plan), backend, run_dir)
    dry = "\n".join(ctl.dry_run())
    assert all(f"container {stack.project}_bot-{n}_1" in dry for n in (1, 2, 3)), dry
    ctl.start()
    assert ctl.wait(300)
    records = timeline(run_dir)
    assert [(r["event"], r["outcome"]) for r in records] == [("apply", "ok"), ("recover", "ok")], records
    assert records[0]["detail"] == {"members": ["bot-1", "bot-2", "bot-3"], "release": "v2"}
    after = {n: backend._container(n).id for n in before}
    assert all(after[n] != before[n] for n in before), "every bot must be a new container"
    releases = {}

    def all_answered() -> bool:
        health = requests.get(stack.url + "/healthz", timeout=3).json()
        releases[health["replica"]] = health["release"]
        return len(releases) == 3

    wait_until(all_answered, timeout=60, what="all three replicas answering through HAProxy")
    assert releases == {"bot-1": "v2", "bot-2": "v2", "bot-3": "v2"}
    assert chat(stack.url, session, 1, "What is my phone number?") == "Your phone number is 5550-RRST."


@pytest.mark.slow
def test_a_rolling_restart_onto_a_broken_release_rolls_back_to_the_old_container(stack, backend):
    """The new container exits at once (an unknown memory mode): the old one is put back, running."""
    from chaos.faults import Fault

    old = backend._container("bot-1")
    fault = Fault("roll#0", "rolling-restart", "bot-1", None, {"release": "v3", "env": {"REFBOT_MODE": "no-such-mode"}})
    with pytest.raises(RuntimeError, match="rolling restart of bot-1 failed, the old container is back"):
        backend.apply(fault, "bot-1")
    current = backend._container("bot-1")
    assert current.id == old.id and current.status == "running"
    names = [c.name for c in backend.client.containers.list(all=True, filters={"label": f"com.docker.compose.project={stack.project}"})]
    assert not [n for n in names if n.endswith("-gf-old")], names
    stack.wait_replicas(3)


def start_long_pause(tmp_path, stack, engine, target: str):
    """`python -m chaos run` of a 300 s pause of ``target`` on the docker backend: (process, run folder)."""
    plan = write_plan(tmp_path, f"""
        name: long-pause
        faults:
          - {{id: freeze, kind: pause, target: {target}, at: 0s, duration: 300s}}
    """)
    run_dir = tmp_path / "run"
    proc = chaos_cli("run", str(plan), "--backend", "docker", "--backend-opt", f"project={stack.project}",
                     "--backend-opt", f"base_url={engine.url}", "--run-dir", str(run_dir))
    return proc, run_dir


@pytest.mark.slow
def test_sigterm_during_a_pause_unpauses_the_container(stack, backend, engine, tmp_path):
    proc, run_dir = start_long_pause(tmp_path, stack, engine, "bot-3")
    try:
        container = backend._container("bot-3")
        wait_for_status(container, "paused")
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    container.reload()
    assert container.status == "running", out
    recover = [r for r in timeline(run_dir) if r["event"] == "recover"]
    assert [(r["instance"], r["outcome"], r.get("via")) for r in recover] == [("bot-3", "ok", "sigterm")]
    assert outstanding(run_dir) == []
    stack.wait_replicas(3)


@pytest.mark.slow
def test_heal_after_sigkill_unpauses_from_the_json_undo_record(stack, backend, engine, tmp_path):
    proc, run_dir = start_long_pause(tmp_path, stack, engine, "bot-1")
    container = backend._container("bot-1")
    try:
        wait_for_status(container, "paused")
        wait_until(lambda: outstanding(run_dir) and outstanding(run_dir)[0]["state"] == "applied",
                   timeout=30, what="the pause to be recorded as applied")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    container.reload()
    assert container.status == "paused", "SIGKILL must leave the fault outstanding (that is what heal is for)"
    healed = subprocess.run([sys.executable, "-m", "chaos", "heal", str(run_dir)], cwd=ROOT, capture_output=True,
                            text=True, timeout=180)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert "1 recovered, 0 failed" in healed.stdout
    container.reload()
    assert container.status == "running"
    assert outstanding(run_dir) == []
    stack.wait_replicas(3)


# ---- bad input ------------------------------------------------------------------------------------
def test_no_engine_socket_says_how_to_start_podman(tmp_path):
    missing = f"unix://{tmp_path}/no-engine.sock"
    with pytest.raises(EngineUnavailable) as err:
        DockerBackend(project="x", base_url=missing)
    assert "no-engine.sock" in str(err.value) and "podman system service" in str(err.value)
    plan = write_plan(tmp_path, "faults:\n  - {id: k, kind: kill, target: bot, at: 1s}\n")
    done = subprocess.run([sys.executable, "-m", "chaos", "validate", str(plan), "--backend", "docker",
                           "--backend-opt", f"base_url={missing}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "no container engine answers" in done.stderr and "podman system service" in done.stderr


def test_roles_come_from_the_label_else_the_service_name():
    assert role_of("bot-2", {}) == "bot"
    assert role_of("haproxy", {}) == "lb"
    assert role_of("redis", {}) == "redis"
    assert role_of("frontend", {"goldfish.role": "lb"}) == "lb"


@pytest.mark.slow
def test_a_project_with_no_containers_is_named_in_the_error(engine, tmp_path):
    backend = DockerBackend(project="gf-no-such-project", base_url=engine.url)
    with pytest.raises(LookupError, match="gf-no-such-project.*no containers"):
        backend.instances("bot")
    plan = write_plan(tmp_path, "faults:\n  - {id: k, kind: kill, target: bot, at: 1s}\n")
    with pytest.raises(PlanError, match="gf-no-such-project"):
        Controller(load_plan(plan), backend, tmp_path / "run").validate()


@pytest.mark.slow
def test_a_service_the_project_does_not_have_is_refused_before_anything_is_touched(stack, backend, tmp_path):
    plan = write_plan(tmp_path, "faults:\n  - {id: k, kind: kill, target: bot-7, at: 0s}\n")
    with pytest.raises(PlanError, match="bot-7.*no instances"):
        Controller(load_plan(plan), backend, tmp_path / "run").validate()
    with pytest.raises(LookupError, match=r"no service 'bot-7'.*bot-1, bot-2, bot-3"):
        backend.describe("bot-7")
    assert not (tmp_path / "run" / "chaos.jsonl").exists() or timeline(tmp_path / "run") == []


@pytest.mark.slow
def test_a_container_that_will_not_restart_is_a_clear_recover_error_left_outstanding(engine, images, tmp_path):
    """A 'bot' that exits 3 on its second start: the kill applies, the recover fails naming the
    container and its exit code, the fault stays outstanding, and heal reports it again."""
    project = new_project("gfbad")
    backend = DockerBackend(project=project, base_url=engine.url)
    script = ("if [ -e /tmp/started ]; then rm -f /tmp/ready; echo refusing to start twice; sleep 1; exit 3; fi; "
              "touch /tmp/started /tmp/ready; exec sleep 600")
    try:
        backend.client.containers.run(
            BASE_IMAGE, ["sh", "-c", script], name=f"{project}_bot-1_1", detach=True,
            labels={"com.docker.compose.project": project, "com.docker.compose.service": "bot-1",
                    "goldfish.role": "bot", "goldfish.health": "test -e /tmp/ready"})
        plan = write_plan(tmp_path, "faults:\n  - {id: k, kind: kill, target: bot, at: 0s}\n")
        run_dir = tmp_path / "run"
        ctl = Controller(load_plan(plan), backend, run_dir).start()
        assert ctl.wait(180)
        records = timeline(run_dir)
        # the scheduled recover fails, and so does the controller's final heal: both are recorded
        assert (records[0]["event"], records[0]["outcome"]) == ("apply", "ok")
        assert records[1:] and {(r["event"], r["outcome"]) for r in records[1:]} == {("recover", "error")}
        error = records[1]["error"]
        assert f"{project}_bot-1_1" in error and "exit code 3" in error and "refusing to start twice" in error
        assert [e["instance"] for e in outstanding(run_dir)] == ["bot-1"]
        recovered, failed = heal_run(run_dir)
        assert (recovered, len(failed)) == (0, 1)
        from chaos.faults import Fault
        with pytest.raises(RuntimeError, match="not running"):
            backend.apply(Fault("k#1", "kill", "bot", None, {}), "bot-1")
    finally:
        backend.close()
        remove_project(project)
