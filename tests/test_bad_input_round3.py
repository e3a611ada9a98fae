"""Bad input, round 3: each case a hunt found was a traceback (exit 3), a verdict on nothing, a redis error that
never said what to do, or an output error after a printed "exit 0". Each now names what and where, exits 2 where
the run cannot be judged, and keeps what was recorded. The CLIs run in processes of their own on real run folders,
with a real redis-server and a real HTTP server.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from conftest import http_server
from support_oracle import TurnSpec, build_world, raw_entries, write_journal, write_snapshot
from test_bad_input import assert_named

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def cli(module: str, *argv, path: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m MODULE ...`` in a process of its own (``path``: also importable, for a --reader module)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(path or ""), str(REPO)]))}
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def journaled(run: Path, sessions: int = 4, seed: int = 3):
    """A run folder with a journal of a healthy run (and run.json): what the clients saw passes every gate, so
    a verdict can only come from the store. Returns its world (what a correct store holds)."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
              TurnSpec("probe", "ok")] for _ in range(sessions)]
    world = build_world(specs, seed=seed)
    for r in world.records:  # the journal is this run's, as run.json says (a live audit refuses another's)
        r["run"] = run.name
    write_journal(run, world.records)
    start, end = min(r["sent"] for r in world.records), max(r["received"] or r["sent"] for r in world.records)
    (run / "run.json").write_text(json.dumps({"run": run.name, "label": "v1", "start": start, "end": end}))
    return world


def audited(run: Path, sessions: int = 4, seed: int = 3):
    """A journaled run with a complete snapshot, audited from it."""
    world = journaled(run, sessions, seed)
    write_snapshot(run, world)
    assert cli("oracle", "audit", run).returncode == 0
    return world


def files(run: Path, *names) -> dict:
    return {p: p.read_bytes() for name in names for p in sorted((run / name).rglob("*")) if p.is_file()}


# ---- 1. x08: a snapshot entry whose base64 does not decode --------------------------------------------------

def test_a_snapshot_entry_whose_base64_does_not_decode_is_exit_2_naming_its_file_and_line(tmp_path):
    """Was "FAILED: ValueError: not a snapshot session (Error: Incorrect padding)", a traceback and exit 3."""
    run = tmp_path / "run"
    audited(run)
    part = next(p for p in sorted((run / "store").glob("sessions.*.jsonl")) if p.stat().st_size)
    lines = part.read_bytes().splitlines(keepends=True)
    line = json.loads(lines[-1])
    line["entries"] = [{"b64": "!!!notb64"}] + line["entries"][1:]
    lines[-1] = (json.dumps(line) + "\n").encode()
    part.write_bytes(b"".join(lines))
    kept = files(run, "journal", "audit", "store")
    done = cli("oracle", "audit", run)
    assert done.returncode == 2, done.stderr
    assert_named(done.stderr, f"store/{part.name}:{len(lines)}", "!!!notb64")
    assert "Read the store again" in done.stderr
    assert files(run, "journal", "audit", "store") == kept


# ---- 2. rd_entries_int / rd_missing_keys: --reader records of the wrong shape --------------------------------

READERS = '''
import json
SESSIONS = json.load(open(__file__.replace(".py", ".json")))
def entries_int(sessions):
    return [{"session": s, "exists": True, "entries": 5, "ttl": None, "key": s} for s in sessions]
def missing_keys(sessions):
    return [{"session": s} for s in sessions]
def all_missing(sessions):
    return []
def one_found(sessions):
    return [{"session": s, "exists": True, "entries": SESSIONS[s]} for s in sessions if s == min(SESSIONS)]
'''


def readers(tmp_path: Path, world) -> Path:
    """A --reader module, ``round3_readers``, in ``tmp_path`` (its stored histories beside it)."""
    (tmp_path / "round3_readers.py").write_text(READERS)
    (tmp_path / "round3_readers.json").write_text(json.dumps(
        {s: [e.decode() for e in raw_entries(world, s)] for s in world.order if s not in world.gone}))
    return tmp_path


@pytest.mark.parametrize("function, said", [("entries_int", '"entries": 5 (int)'),
                                            ("missing_keys", 'has no "exists"')])
def test_a_reader_record_of_the_wrong_shape_is_exit_2_naming_field_session_and_function(tmp_path, function, said):
    """entries 5 was a traceback (exit 3); records without exists/entries were a verdict: every turn lost."""
    run = tmp_path / "run"
    world = journaled(run)
    done = cli("oracle", "audit", run, "--reader", f"round3_readers:{function}", path=readers(tmp_path, world))
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"--reader round3_readers:{function}", said)
    assert any(f"session {s}" in done.stderr for s in world.order), done.stderr
    assert "lost" not in done.stdout and "FAIL" not in done.stdout


# ---- 3. o41 / rd_all_missing: a reader that finds none of the run's sessions ---------------------------------

class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


@pytest.fixture
def not_found_server():
    """A real HTTP server on loopback that answers 404 to every GET."""
    with http_server(_NotFound) as server:
        yield f"http://127.0.0.1:{server.server_port}"


def test_an_http_url_that_answers_404_for_every_session_is_exit_2_not_a_total_loss(tmp_path, not_found_server):
    """Was "FAIL — 43 sessions whose whole history is gone", exit 1, with 0% probe amnesia: a wrong URL judged."""
    run = tmp_path / "run"
    world = audited(run)
    kept = files(run, "journal", "audit", "store")
    url = f"{not_found_server}/history/{{session}}"
    done = cli("oracle", "audit", run, "--http-url", url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"--http-url {url}", "for every one of the")
    assert any(f"GET {not_found_server}/history/{s}" in done.stderr for s in world.order), done.stderr
    assert "Nothing was judged" in done.stderr and "gone" not in done.stdout
    assert files(run, "journal", "audit", "store") == kept  # the earlier complete snapshot and tables stand


def test_a_reader_function_that_finds_no_session_is_exit_2_and_keeps_what_it_read(tmp_path):
    run = tmp_path / "run"
    world = journaled(run)
    done = cli("oracle", "audit", run, "--reader", "round3_readers:all_missing", path=readers(tmp_path, world))
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, "--reader round3_readers:all_missing", "returned no history for any of the")
    meta = json.loads((run / "store" / "meta.json").read_text())  # no earlier snapshot: this read, incomplete
    assert meta["complete"] is False and "returned no history" in meta["error"]
    assert meta["sessions_read"] == len(world.order)


def test_a_reader_function_that_finds_one_session_is_judged(tmp_path):
    """The rule is every session: one found, the others are the store's losses, judged (exit 1)."""
    run = tmp_path / "run"
    world = journaled(run)
    done = cli("oracle", "audit", run, "--reader", "round3_readers:one_found", path=readers(tmp_path, world))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL" in done.stdout and "Traceback" not in done.stderr


# ---- 4. l40: the store stops answering during Locust's end-of-run audit --------------------------------------

END_AUDIT = '''
import sys
from types import SimpleNamespace
from oracle.store import StoreOptions
from locustfiles.endofrun import EndOfRun
run, url = sys.argv[1], sys.argv[2]
code, summary = EndOfRun.audit(SimpleNamespace(audited=None, settings=SimpleNamespace(
    run_dir=run if run != "-" else 12345, gates=None, store=StoreOptions(url=url, timeout_s=1.0))))
print("code", code)
'''


def test_a_store_that_stops_answering_at_the_end_of_run_audit_is_one_line_not_a_traceback(tmp_path, redis_server):
    """Was about 60 lines of traceback before the clear "audit FAILED: StoreError ... journal is intact" line."""
    run = tmp_path / "run"
    journaled(run)
    redis_server.proc.send_signal(signal.SIGSTOP)
    try:
        done = subprocess.run([sys.executable, "-c", END_AUDIT, str(run), redis_server.url], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
    out = done.stdout + done.stderr
    assert "code 3" in done.stdout, out  # docs/locust.md: 3, the audit failed, the journal is intact
    assert_named(out, "audit FAILED: StoreError", "The journal is intact")
    assert "audit failed\n" not in out  # the logged line that came with the traceback


def test_an_unexpected_error_in_the_end_of_run_audit_keeps_its_traceback(tmp_path, redis_server):
    done = subprocess.run([sys.executable, "-c", END_AUDIT, "-", redis_server.url], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert "code 3" in done.stdout and "Traceback" in done.stderr and "audit FAILED: TypeError" in done.stderr


# ---- 5. sc02/sc03: a Redis that needs a password --------------------------------------------------------------

def test_a_store_that_needs_a_password_says_to_give_it_in_the_url(tmp_path, redis_server):
    """Was redis's "HELLO must be called with the client already authenticated ...", never saying where."""
    run = tmp_path / "run"
    journaled(run)
    redis_server.client().config_set("requirepass", "s3cr3t")
    done = cli("oracle", "audit", run, "--store-url", redis_server.url)
    assert done.returncode == 2, done.stderr
    assert_named(done.stderr, f"the store at {redis_server.url}", "needs a password: give it in the URL")
    assert f":PASSWORD@ before the host 127.0.0.1:{redis_server.port}" in done.stderr
    wrong = f"redis://:wr0ng@127.0.0.1:{redis_server.port}/0"
    done = cli("oracle", "audit", run, "--store-url", wrong)
    assert done.returncode == 2, done.stderr
    assert_named(done.stderr, f"redis://:***@127.0.0.1:{redis_server.port}/0", "refused the password in the URL")
    assert "wr0ng" not in done.stderr


# ---- 6. cmp19/cmp20: compare --html that cannot be written ----------------------------------------------------

@pytest.mark.parametrize("where", ["a directory", "no such folder"])
def test_compare_html_that_cannot_be_written_names_the_option_and_prints_no_exit_0(tmp_path, where):
    """Was "... -> exit 0" printed, then "oracle compare: /tmp: Is a directory", exit 2."""
    run, base = tmp_path / "run", tmp_path / "base"
    audited(run)
    audited(base)
    target = tmp_path if where == "a directory" else Path("/proc/no-such-folder/out.html")
    done = cli("oracle", "compare", "--html", target, base, run)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_named(done.stderr, f"--html {target}", "Is a directory" if where == "a directory" else "No such file")
    assert "exit 0" not in done.stdout


# ---- 7. tr09/tr10: trend over a run whose run.json is missing or garbage --------------------------------------

@pytest.mark.parametrize("damage, said", [("missing", "run.json: missing or empty"), ("garbage", "run.json: unreadable")])
def test_trend_warns_of_a_run_whose_start_is_unknown_and_still_lists_it(tmp_path, damage, said):
    """Was listed first with start "?" and no word of why."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    audited(good)
    audited(bad, seed=4)
    if damage == "missing":
        (bad / "run.json").unlink()
        kept = cli("oracle", "trend", good, bad)  # the audit's copy of run.json's trust fields says its start
        assert kept.returncode == 0 and "its start is unknown" not in kept.stderr, kept.stderr
        summary = json.loads((bad / "audit" / "summary.json").read_text())
        del summary["run_record"]  # an audit by an older goldfish: nothing says the start
        (bad / "audit" / "summary.json").write_text(json.dumps(summary))
    else:
        (bad / "run.json").write_text("{garbage")
    done = cli("oracle", "trend", good, bad)
    # a garbage run.json cannot say whether the run was cut short: untrusted, which trend no longer pools: exit 2
    assert done.returncode == (2 if damage == "garbage" else 0), done.stderr
    assert_named(done.stderr, f"warning: {bad}: its start is unknown", said)
    assert "good" not in done.stderr
    per_run = done.stdout.split("per release")[0]  # (a night not pooled is named again below)
    assert len([line for line in per_run.splitlines() if line.startswith("  ?")]) == 1, done.stdout
