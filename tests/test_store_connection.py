"""How goldfish connects to a store: what reading needs, and nothing more.

- A read-only ACL user (no ``CLIENT SETNAME``) or a Redis with CLIENT renamed away is read: goldfish names its
  connections ``goldfish`` when it may (so a redis-client-kill fault tells them apart), never as a condition.
- A Redis without HELLO (Redis 5, or HELLO renamed away) is read over RESP2 when the URL chooses no protocol; with
  ``?protocol=3`` the message says what to write instead.
- A store that answers but refuses a command is named as such, not "cannot reach"; Locust's start check connects as
  the audit does, so what would fail the audit fails there, before any load.
- The web UI's start form refuses an unreachable store with the command line's message, before any load.

All against real redis-servers on loopback ports, a real Locust and its real web UI.
"""
from __future__ import annotations

import subprocess

import pytest
import redis

from conftest import RedisServer, free_port, wait_until
from oracle.audit import audit_run
from oracle.options import OptionError, reach_store
from oracle.redis_reader import RedisReader
from oracle.store import StoreError, StoreOptions
from support_locust import chat_bot, quick_script, run_locust
from support_oracle import build_world, simple_specs, store_with_langchain, write_journal
from support_refbot import refbot_stack  # noqa: F401 - fixture
from support_webui import locust_ui

READ_ONLY = ["~*", "+@read", "+ping", "+info"]  # what the audit's advice asks for; no +client|setname


class FlaggedRedis(RedisServer):
    """A real redis-server started with extra flags (``--rename-command HELLO ""``); checked over RESP2, which a
    server without HELLO still speaks."""

    def __init__(self, workdir, flags):
        super().__init__(workdir)
        self.flags = list(flags)

    def args(self) -> list[str]:
        return super().args() + self.flags

    def start(self) -> "FlaggedRedis":
        log = open(self.dir / "redis.log", "ab")
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        client = self.client()
        wait_until(lambda: client.ping(), what=f"redis-server on port {self.port}")
        return self

    def client(self, **kw) -> redis.Redis:
        return redis.Redis.from_url(self.url, protocol=2, **kw)


@pytest.fixture
def flagged_redis(tmp_path):
    started: list[FlaggedRedis] = []

    def start(*flags) -> FlaggedRedis:
        server = FlaggedRedis(tmp_path / f"redis-flagged-{len(started)}", flags).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def add_user(client: redis.Redis, name: str, *rules: str) -> None:
    client.acl_setuser(name, enabled=True, passwords=["+pw"], reset=True)
    client.execute_command("ACL", "SETUSER", name, *rules)


def user_url(server, name: str, db: int = 0) -> str:
    return f"redis://{name}:pw@127.0.0.1:{server.port}/{db}"


def stored_run(tmp_path, url: str):
    """A run folder whose journal the store at ``url`` holds exactly (LangChain's layout): a clean audit."""
    world = build_world(simple_specs(4), seed=5)
    run = tmp_path / "run"
    write_journal(run, world.records)
    store_with_langchain(url, world)
    return run, world


def assert_clean_live_audit(run, url: str, world) -> None:
    summary = audit_run(run, StoreOptions(url=url))
    assert summary["anomalies"] == {}, summary["anomalies"]
    assert summary["store"]["source"] == "live"
    assert summary["turns"]["info_stored"] == len(world.order)


def names_of_clients(admin: redis.Redis) -> list[str]:
    return [c.get("name") for c in admin.client_list()]


# ---- D6: a read-only user, a renamed CLIENT -------------------------------------------------------------------

def test_a_read_only_user_is_audited_and_passes_the_start_check(tmp_path, redis_server):
    """Was: `cannot reach the store at ...: this user has no permissions to run the 'client|setname' command`
    (exit 2) from the audit, after a Locust start check that passed (a PING without the name)."""
    admin = redis_server.client()
    add_user(admin, "gfro", *READ_ONLY)
    run, world = stored_run(tmp_path, redis_server.url)
    url = user_url(redis_server, "gfro")
    reach_store(StoreOptions(url=url))  # Locust's start check
    assert_clean_live_audit(run, url, world)
    # the name is still given where the user may: what a redis-client-kill fault counts as goldfish's own
    reader = RedisReader(StoreOptions(url=redis_server.url))
    reader.check()
    assert "goldfish" in names_of_clients(admin)
    reader.close()


def test_a_redis_with_client_renamed_away_is_audited(tmp_path, flagged_redis):
    server = flagged_redis("--rename-command", "CLIENT", "")
    run, world = stored_run(tmp_path, server.url)
    reach_store(StoreOptions(url=server.url))
    assert_clean_live_audit(run, server.url, world)


# ---- D7: no HELLO ------------------------------------------------------------------------------------------------

def test_a_redis_without_hello_is_read_over_resp2(tmp_path, flagged_redis):
    """Was: `cannot reach the store at ...: unknown command 'HELLO', with args beginning with: '3'` (exit 2)."""
    server = flagged_redis("--rename-command", "HELLO", "")
    run, world = stored_run(tmp_path, f"{server.url}?protocol=2")
    reach_store(StoreOptions(url=server.url))
    assert_clean_live_audit(run, server.url, world)
    # with a password: HELLO 3 AUTH is unknown too; AUTH over RESP2 logs in
    server.client().config_set("requirepass", "s3cr3t")
    secret = f"redis://:s3cr3t@127.0.0.1:{server.port}/0"
    reach_store(StoreOptions(url=secret))
    assert_clean_live_audit(run, secret, world)
    # the URL asks for RESP3: said so, with the way out, and not as a store that cannot be reached
    resp3 = f"{secret}?protocol=3"
    with pytest.raises(StoreError) as raised:
        RedisReader(StoreOptions(url=resp3)).check()
    message = str(raised.value)
    assert "answered but does not speak RESP3 (it has no HELLO command" in message, message
    assert "?protocol=2" in message and "cannot reach" not in message and "s3cr3t" not in message
    with pytest.raises(OptionError) as refused:
        reach_store(StoreOptions(url=resp3))
    assert "does not speak RESP3" in str(refused.value) and "s3cr3t" not in str(refused.value)


# ---- a refused command is named; the start check fails where the audit would --------------------------------------

def test_a_store_that_refuses_a_command_is_not_one_that_cannot_be_reached(redis_server):
    admin = redis_server.client()
    add_user(admin, "noping", "~*", "+@read")  # no +ping
    add_user(admin, "noselect", "~*", "+@read", "+ping")  # no +select: database 1 is refused
    for url, command in ((user_url(redis_server, "noping"), "'ping'"),
                         (user_url(redis_server, "noselect", 1), "'select'")):
        with pytest.raises(StoreError) as raised:
            RedisReader(StoreOptions(url=url)).check()
        audit = str(raised.value)
        assert "the store at redis://noping:***@" in audit or "the store at redis://noselect:***@" in audit, audit
        assert "answered but refused a command" in audit and command in audit and "cannot reach" not in audit
        with pytest.raises(OptionError) as start:  # Locust's start check says the same, before any load
            reach_store(StoreOptions(url=url))
        assert "answered but refused a command" in str(start.value) and command in str(start.value)
        assert "pw@" not in audit + str(start.value)


def test_locust_with_a_read_only_user_runs_and_is_audited(tmp_path, refbot_stack):  # noqa: F811
    """Was: the start check passed, the whole load ran, then `audit FAILED ... NO VERDICT`, exit 3."""
    stack = refbot_stack(replicas=1, mode="correct", think_ms=0)
    store = stack.state["store_url"]
    admin = redis.Redis.from_url(store)
    add_user(admin, "gfro", *READ_ONLY)
    port = admin.connection_pool.connection_kwargs["port"]
    url = f"redis://gfro:pw@127.0.0.1:{port}/0"
    run = run_locust(stack.url, tmp_path / "run", "--store-url", url, "--script", quick_script(tmp_path),
                     "--think", "0.02", users=3, rate=3, time_s="3s")
    assert run.returncode == 0, run.output[-3000:]
    assert "goldfish: audit:" in run.output and "audit FAILED" not in run.output, run.output[-3000:]
    admin.close()


# ---- D3: the web UI's start form reaches the store as the command line does -------------------------------------

def test_the_web_form_refuses_an_unreachable_store_with_the_command_lines_message(tmp_path, redis_server):
    """Was: "Swarming started", the load ran, then the audit failed: NO VERDICT, exit code 3."""
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(OptionError) as command_line:
        reach_store(StoreOptions(url=unreachable))
    bot_log = tmp_path / "bot.log"
    with chat_bot("memory", log=bot_log) as url, locust_ui(tmp_path / "ui", "--host", url, "--store-url",
                                                           redis_server.url) as ui:
        refused = ui.swarm(user_count=2, spawn_rate=2, host=url, store_url=unreachable)
        assert refused["success"] is False, refused
        assert refused["message"] == f"goldfish: {command_line.value}", refused
        assert "cannot reach the store" in refused["message"]
        assert ui.status()["runs"] == []
        assert ui.quit() == 0, ui.output[-3000:]
    assert f"goldfish: error: {command_line.value} (the test was not started)" in ui.output
    assert not bot_log.exists() or bot_log.read_text() == ""  # no turn was sent
    assert not (ui.cwd / "results").exists()
