"""Bad input to the oracle found by the fourth hunt: each was a wrong exit code, a hang or a traceback."""
from __future__ import annotations

import os

import pytest

from test_bad_input import assert_named
from test_bad_input_round3 import cli, journaled

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.mark.parametrize("source, said", [
    ("import sys\ndef read(sessions):\n    sys.exit(0)\n", "it called sys.exit(0)"),
    ("def read(sessions)\n    return []\n", "cannot import round4_reader: expected ':'"),
    ("raise RuntimeError('no credentials')\ndef read(sessions):\n    return []\n",
     "cannot import round4_reader: RuntimeError('no credentials')"),
])
def test_a_reader_that_exits_or_cannot_be_imported_is_exit_2_naming_it(tmp_path, source, said):
    """A reader calling sys.exit(0) ended the audit with exit 0 and no verdict (a CI gate read it as passed); a
    syntax error or an exception at import was a traceback and exit 3 ("a bug")."""
    run = tmp_path / "run"
    journaled(run)
    (tmp_path / "round4_reader.py").write_text(source)
    done = cli("oracle", "audit", run, "--reader", "round4_reader:read", path=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, "round4_reader", said)
    assert "Traceback" not in done.stderr and not (run / "audit" / "summary.json").exists()


def test_a_store_that_refuses_the_judging_processes_stops_every_judge_without_a_hang(tmp_path, redis_server):
    """A Redis at maxclients: the judging processes cannot connect. The audit hung (a judge killed while holding
    the pool's queue lock) or printed a traceback per judge as it was stopped; now one line and exit 2."""
    from support_oracle import fill_redis

    run = tmp_path / "run"
    world = journaled(run, sessions=40)
    client = redis_server.client()
    fill_redis(client, world)
    client.config_set("maxclients", 1)
    client.close()
    done = cli("oracle", "audit", run, "--store-url", redis_server.url, "--jobs", "4", timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, redis_server.url, "max number of clients reached")
    assert "Traceback" not in done.stderr and "Terminated" not in done.stderr, done.stderr


@pytest.mark.parametrize("argv, named", [(["--key-template", "chat:{session}"], "--key-template"),
                                         (["--direction", "rpush", "--no-scan"], "--direction, --no-scan"),
                                         (["--store-format", "blob", "--batch", "10"], "--store-format, --batch")])
def test_store_read_options_without_a_store_are_exit_2_not_ignored(tmp_path, argv, named):
    """A re-audit from the snapshot reads no store: --key-template, --direction, --store-format, --batch and
    --no-scan changed nothing and it PASSed as before (a --key-template meant to fix a mismatch)."""
    from test_bad_input_round3 import audited, files

    run = tmp_path / "run"
    audited(run)
    kept = files(run, "audit", "store")
    done = cli("oracle", "audit", run, *argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, named, "none is read")
    assert "pass --store-url" in done.stderr
    assert files(run, "audit", "store") == kept
    assert cli("oracle", "audit", run, "--role-field", "type").returncode == 0  # a shape option re-judges the snapshot


@pytest.mark.parametrize("acl, said", [("+@all -scan", "SCAN (or pass --no-scan)"), ("+@all -lrange", "TTL and LRANGE")])
def test_a_store_that_refuses_a_command_says_what_to_grant_not_to_wait(tmp_path, redis_server, acl, said):
    """An ACL without SCAN or LRANGE (or a renamed command, or a Sentinel's port as the store) ended in 'run the
    audit again once the store is back', which never helps."""
    from support_oracle import fill_redis

    run = tmp_path / "run"
    world = journaled(run)
    client = redis_server.client()
    fill_redis(client, world)
    client.acl_setuser("auditor", enabled=True, passwords=["+pw"], keys=["*"], commands=acl.split())
    url = redis_server.url.replace("redis://", "redis://auditor:pw@")
    done = cli("oracle", "audit", run, "--store-url", url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, "no permissions", said)
    assert "grant them to the URL's user" in done.stderr and "once the store is back" not in done.stderr


def test_a_redis_cluster_node_as_the_store_says_to_read_the_cluster_with_a_reader(tmp_path):
    """A Redis Cluster node redirects a key it does not hold (MOVED): the audit said 'failed after 0 sessions:
    8372 127.0.0.1:6631 ... run the audit again once the store is back', and the store was up."""
    import signal
    import subprocess

    import redis

    from conftest import free_port, wait_until

    nodes, procs = [], []
    try:
        for name in ("a", "b"):
            port, bus = free_port(), free_port()
            (tmp_path / name).mkdir()
            procs.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-port", str(bus), "--save", "",  # the bus port, else port + 10000 (past 65535, or taken)
                 "--appendonly", "no", "--dir", str(tmp_path / name)], stdout=subprocess.DEVNULL,
                start_new_session=True))
            nodes.append((port, bus, redis.Redis(port=port)))
            wait_until(nodes[-1][2].ping, what=f"cluster node {name}")
        (a_port, a_bus, a), (b_port, _, b) = nodes
        a.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)  # a holds every key; b only knows of a
        b.execute_command("CLUSTER", "MEET", "127.0.0.1", a_port, a_bus)

        def moved():
            try:
                b.get("message_store:x")
            except redis.exceptions.MovedError:
                return True
        wait_until(moved, what="node b redirecting keys to node a")
        run = tmp_path / "run"
        journaled(run)
        done = cli("oracle", "audit", run, "--store-url", f"redis://127.0.0.1:{b_port}/0")
        assert done.returncode == 2, done.stdout + done.stderr
        assert_named(done.stderr, f"127.0.0.1:{b_port}", "a node of a Redis Cluster")
        assert "--reader" in done.stderr and "once the store is back" not in done.stderr
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
