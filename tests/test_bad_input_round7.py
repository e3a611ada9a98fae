"""Input the seventh round found handled wrongly.

- goldfish's Locust options had no environment variables: a container or CI job configured through LOCUST_*
  variables, as Locust's own options are, had ``LOCUST_CHAOS`` ignored (a chaos test ran without chaos and
  PASSed), ``LOCUST_STORE_URL`` ignored (the default store audited). Each option now reads the variable Locust's
  naming gives it; the command line wins over it, an empty one is refused as an empty option is.
- a store read with options that miss its roles FAILed a correct bot: replies under a role not given as an
  assistant role (``bot``) were 'unanswered', every one; a --role-field the entries lack ('role' for LangChain's
  'type') read every entry as an item with no text, and every turn was 'lost'. Both are exit 2 now, naming the
  option, as a wrong --user-role already was;
- ``--settle 700h`` waited without a word: the run looked hung. A settle of 10 s or more is announced, with when
  the audit will read the store.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import wait_until
from support_locust import CHATFILE, LOCUST, _kill_group, chat_bot, finish, locust_cmd
from test_bad_input_round6_options import parser  # noqa: F401 - the fixture

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# ---- 1. LOCUST_* environment variables ------------------------------------------------------------------------
def test_goldfish_options_read_locusts_environment_variables(parser, monkeypatch):
    from locustfiles.options import Settings

    monkeypatch.setenv("LOCUST_CHAOS", "plans/restart.yaml")
    monkeypatch.setenv("LOCUST_STORE_URL", "redis://127.0.0.1:7001/2")
    monkeypatch.setenv("LOCUST_GATE", "lenient")
    monkeypatch.setenv("LOCUST_NO_AUDIT", "true")
    monkeypatch.setenv("LOCUST_HEADER", "X-Tenant: acme")
    monkeypatch.setenv("LOCUST_LABEL", "v2.0")
    settings = Settings.from_options(parser.parse_args([]))
    assert settings.chaos == "plans/restart.yaml" and settings.label == "v2.0"
    assert settings.no_audit and settings.headers == {"X-Tenant": "acme"}
    assert settings.store.url == "redis://127.0.0.1:7001/2"
    assert parser.parse_args([]).gate == "lenient"
    # the command line wins over the variable
    settings = Settings.from_options(parser.parse_args(["--chaos", "plans/pause.yaml", "--label", "v3"]))
    assert settings.chaos == "plans/pause.yaml" and settings.label == "v3"


def test_an_empty_environment_variable_is_refused_as_an_empty_option(parser, monkeypatch, capsys):
    monkeypatch.setenv("LOCUST_CHAOS", "")
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([])
    assert exited.value.code == 2
    assert "--chaos" in capsys.readouterr().err


def test_a_real_locust_run_arms_the_plan_its_environment_names(tmp_path):
    """LOCUST_CHAOS was ignored: the run went on without a plan. Naming a plan that does not exist shows it is
    read: the run stops before any load, naming the plan, and leaves no run folder."""
    run = tmp_path / "run"
    done = subprocess.run([LOCUST, "-f", CHATFILE, "--headless", "-u", "1", "-r", "1", "-t", "2s",
                           "--host", "http://127.0.0.1:9", "--no-audit", "--run-dir", str(run)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "LOCUST_CHAOS": str(tmp_path / "nightly-plan.yaml")})
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-2000:]
    assert "nightly-plan.yaml" in said and "cannot read plan" in said, said[-2000:]
    assert not run.exists()


# ---- 2. a long settle is announced -------------------------------------------------------------------------------
def test_a_long_settle_says_when_the_audit_will_read_the_store(tmp_path, redis_server):
    run = tmp_path / "run"
    err_file = tmp_path / "locust.err"
    with chat_bot("memory") as url, open(err_file, "w") as err:
        proc = subprocess.Popen(locust_cmd(url, run, "--store-url", redis_server.url, "--settle", "700h", users=2,
                                           time_s="2s"), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                                text=True, start_new_session=True)
        try:
            wait_until(lambda: "settle: the audit reads the store in" in err_file.read_text(), timeout=60,
                       what="the settle announced")
            proc.send_signal(signal.SIGTERM)  # a signal during the settle still stops it (phase settle)
            finish(proc, 60)
        finally:
            _kill_group(proc)
    said = err_file.read_text()
    assert "settle: the audit reads the store in 2,520,000 s (--settle)" in said or \
        "settle: the audit reads the store in 2,519,99" in said, said[-2000:]
    assert proc.returncode == 143
    assert json.loads((run / "run.json").read_text())["interrupted"]["phase"] == "settle"


# ---- 3. options that miss the store's roles ---------------------------------------------------------------------
def _world_stored(tmp_path, reply_role: str = "ai"):
    import time

    from support_oracle import build_world, lc, simple_specs, write_journal, write_snapshot

    world = build_world(simple_specs(4), start=time.time() - 60, seed=9)
    for s in world.order:
        world.stored[s] = [(t, lc(reply_role, m["data"]["content"]) if m["type"] == "ai" else m)
                           for t, m in world.stored[s]]
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    return world


def test_replies_under_a_role_not_given_are_named_not_unanswered(tmp_path):
    from oracle.audit import audit_run
    from oracle.keys import TemplateMismatch

    _world_stored(tmp_path, reply_role="bot")
    with pytest.raises(TemplateMismatch, match=r"entries of role 'bot'.*--assistant-role bot"):
        audit_run(tmp_path)
    s = audit_run(tmp_path, shape={"assistant_roles": ("ai", "bot")})
    assert "unanswered" not in s["anomalies"], s["anomalies"]


def test_a_role_field_the_entries_lack_is_named_not_every_turn_lost(tmp_path):
    from oracle.audit import audit_run
    from oracle.keys import TemplateMismatch

    _world_stored(tmp_path)
    with pytest.raises(TemplateMismatch, match=r"holds a role at --role-field 'role'.*--role-field"):
        audit_run(tmp_path, shape={"role_field": "role"})
    assert "lost" not in audit_run(tmp_path)["anomalies"]


def test_one_entry_per_exchange_with_the_reply_in_a_field_is_named_not_unanswered(tmp_path):
    """{"role": "user", "content": <message>, "response": <reply>} per exchange: every turn of a correct bot was
    'unanswered' (bot hunt 6: pair_entry); the audit reads one message per entry, so it says so, exit 2."""
    import time

    from oracle.audit import audit_run
    from oracle.keys import TemplateMismatch
    from support_oracle import build_world, simple_specs, write_journal, write_snapshot

    world = build_world(simple_specs(4), start=time.time() - 60, seed=9)
    replies = {(r["session"], r["turn"]): r["reply"] + ' (say "hi")' for r in world.records if r["outcome"] == "ok"}
    for r in world.records:  # a reply holding quotes: the stored JSON escapes them
        r["reply"] = replies.get((r["session"], r["turn"]), r["reply"])
    for s in world.order:
        world.stored[s] = [(t, {"role": "user", "content": m["data"]["content"], "response": replies.get((s, t))})
                           for t, m in world.stored[s] if m["type"] == "human"]
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    shape = {"role_field": "role", "content_field": "content", "user_roles": ("user",),
             "assistant_roles": ("assistant",)}
    with pytest.raises(TemplateMismatch, match=r"one entry per exchange.*--reader"):
        audit_run(tmp_path, shape=shape)
