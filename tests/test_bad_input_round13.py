"""Bad input the thirteenth round found handled wrongly (hunt-input13 D2, D3, m14).

- D3: a journal/ (or workers/) that cannot be listed (no read permission: a results folder copied from another
  account) was read as no journal at all: Path.glob swallows the listing's PermissionError. `oracle audit` said "RUN
  has no journal ... (is this a run folder?)", report and compare "the journal has shrunk" (put it back from a
  backup), trend "no verdict". Now the listing's error is raised, named: `cannot list RUN/journal: Permission
  denied`, exit 2. And the audit said "cannot read" for a write it was refused (audit/ or the run folder not
  writable): "cannot write" now.
- D2: REFBOT_LOG_LEVEL that uvicorn does not know was a KeyError traceback from `refbot serve` and "bot-1 exited
  while starting" from `refbot up`. Refused now before anything starts, exit 2, naming the levels.
- m14: `refbot up --port P` / `--redis-port P` with P in use was exit 1; a refused option value is exit 2.

Real parts: real files with real permissions, read by a process without CAP_DAC_OVERRIDE (setpriv drops it when
the tests run as root), a real redis-server, real `python -m oracle` and `python -m refbot` processes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from contracts.runfolder import RunFolder
from oracle.audit import audit_run
from oracle.store import StoreOptions
from refbot.config import Config, ConfigError
from support_refbot import processes_mentioning, refbot_cli
from test_journal_integrity import GATES, set_run_json, stored_run

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parent.parent
DENIED = os.strerror(13)  # "Permission denied"


def unprivileged() -> list[str]:
    """The command prefix that runs a program the way an ordinary user meets permissions: as root, without the
    capabilities that read and write any file (setpriv, util-linux); nothing when the tests are not root."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root reads any folder (CAP_DAC_OVERRIDE) and setpriv (util-linux), which drops that, is missing")
    prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o311)
        probe = subprocess.run([*prefix, sys.executable, "-c", f"import os; os.listdir({folder!r})"],
                               capture_output=True, text=True)
        os.chmod(folder, 0o700)
    if probe.returncode == 0:
        pytest.skip("setpriv could not drop CAP_DAC_OVERRIDE here (a folder of mode 0311 was listed)")
    return prefix


def oracle(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*unprivileged(), sys.executable, "-m", "oracle", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def audited(tmp_path, redis_server):
    """A finished run, audited once (its snapshot in store/, its verdict PASS); modes put back after the test."""
    run, _ = stored_run(tmp_path, redis_server)
    set_run_json(run, journal={"bytes": RunFolder(run).journal_bytes()}, end=time.time())
    assert audit_run(run, StoreOptions(url=redis_server.url), gates=GATES)["verdict"]["result"] == "pass"
    yield run
    for path in [run, *run.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)


# ---- D3: a journal/ or workers/ that cannot be listed ----------------------------------------------------------
def test_a_journal_folder_that_cannot_be_listed_is_named_by_every_reader(audited, tmp_path):
    """journal/ mode 0311 (no read permission: its files open, its names cannot be listed). Every reader names the
    folder and the permission error, exit 2: none calls it a folder with no journal, or a journal that shrank."""
    (audited / "journal").chmod(0o311)
    done = oracle("audit", audited, "--gate", "strict,errors=off")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"oracle audit: cannot list {audited / 'journal'}: {DENIED}" in done.stderr, done.stderr
    for args in (("report", audited), ("compare", audited, audited), ("trend", audited)):
        done = oracle(*args)
        said = done.stdout + done.stderr
        assert done.returncode == 2 and f"cannot list {audited / 'journal'}: {DENIED}" in said, (args, said)
        assert "shrunk" not in said, (args, said)  # trend lists it under "no verdict", with that reason


def test_a_workers_folder_that_cannot_be_listed_is_named(audited):
    """workers/ (the workers' own copies, which may hold lines the master's shards lack) that cannot be listed was
    taken as none: the audit judged without them, PASS. It is named now, exit 2."""
    (audited / "workers").mkdir()
    (audited / "workers").chmod(0o311)
    done = oracle("audit", audited, "--gate", "strict,errors=off")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot list {audited / 'workers'}: {DENIED}" in done.stderr and "PASS" not in done.stdout


def test_a_write_the_audit_is_refused_is_said_as_a_write(audited, redis_server):
    """audit/ not writable (mode 0555): the audit cannot make audit/parts; the run folder not writable: the live
    audit cannot make store.reading. Both said "cannot read"; now "cannot write", exit 2. A file that cannot be
    read is still "cannot read"."""
    (audited / "audit").chmod(0o555)
    done = oracle("audit", audited, "--gate", "strict,errors=off")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"oracle audit: cannot write {audited / 'audit' / 'parts'}: {DENIED}" in done.stderr, done.stderr
    (audited / "audit").chmod(0o755)
    audited.chmod(0o555)
    done = oracle("audit", audited, "--store-url", redis_server.url, "--gate", "strict,errors=off")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"oracle audit: cannot write {audited / 'store.reading'}: {DENIED}" in done.stderr, done.stderr
    audited.chmod(0o755)
    shard = next((audited / "journal").glob("*.jsonl"))
    shard.chmod(0)
    done = oracle("audit", audited, "--gate", "strict,errors=off")
    assert done.returncode == 2 and f"oracle audit: cannot read {shard}: {DENIED}" in done.stderr, done.stderr


# ---- D2: REFBOT_LOG_LEVEL ---------------------------------------------------------------------------------------
LEVEL_REFUSED = "REFBOT_LOG_LEVEL='verbose' is not a log level (critical, error, warning, info, debug, trace)"


def test_an_unknown_log_level_is_refused_before_a_replica_starts(tmp_path):
    """`refbot serve` ended in uvicorn's KeyError traceback; `refbot up` in "bot-1 exited while starting" with it.
    Both exit 2 now, naming the variable and the levels, with nothing started."""
    env = {"REFBOT_LOG_LEVEL": "verbose", "REFBOT_PORT": "0", "REFBOT_REDIS_URL": "redis://127.0.0.1:1/0"}
    served = refbot_cli("serve", env=env, timeout=30)
    assert served.returncode == 2 and "Traceback" not in served.stderr, served.stderr
    assert f"refbot: error: {LEVEL_REFUSED}" in served.stderr, served.stderr
    state_dir = tmp_path / "stack"
    up = refbot_cli("up", "--replicas", "1", "--state-dir", state_dir, env={"REFBOT_LOG_LEVEL": "verbose"})
    try:
        assert up.returncode == 2 and f"refbot: error: {LEVEL_REFUSED}" in up.stderr, up.stdout + up.stderr
        assert not (state_dir / "state.json").exists() and processes_mentioning(str(state_dir)) == []
    finally:
        refbot_cli("down", "--state-dir", state_dir)


def test_log_levels_uvicorn_knows_are_taken_in_any_case():
    assert Config.from_env({"REFBOT_LOG_LEVEL": "DEBUG"}).log_level == "debug"
    assert Config.from_env({"REFBOT_LOG_LEVEL": ""}).log_level == Config.from_env({}).log_level == "warning"
    with pytest.raises(ConfigError, match="REFBOT_LOG_LEVEL='loud' is not a log level"):
        Config.from_env({"REFBOT_LOG_LEVEL": "loud"})
