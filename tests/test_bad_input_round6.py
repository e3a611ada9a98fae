"""Bad input, round 6 (hunt-input5): what downstream commands make of a damaged run, and options that were
silently read otherwise than written.

- runjson_torn: a run.json torn (half written) after its audit: `oracle audit` said NO VERDICT (it cannot tell
  whether Locust's users raised exceptions), but report, compare and trend read the same run as a plain PASS
  (exit 0), even when the torn run.json had recorded user exceptions. They now say NOT TRUSTED (compare exit 3,
  trend "untrusted"), as for a run whose users raised exceptions.
- failed_reaudit_mixes_tables: a folder where a table goes (audit/windows.csv) failed the audit half way, after
  the snapshot and two tables were replaced: new findings beside the old PASS summary. Refused before anything is
  read, naming it.
- redis_port0: `--store-url redis://127.0.0.1:0/0` was read on port 6379 (redis-py's default for port 0): the audit
  judged whatever Redis listened there, or blamed 6379. Refused, naming the host (never the password).
Real run folders (journal, snapshot, audit made by the suite's helpers), the CLI as users run it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support_oracle import TurnSpec
from test_bad_input_outputs import audited_run, oracle_cli

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _clean_specs(sessions: int = 8) -> list[list[TurnSpec]]:
    """Sessions a correct bot and store pass: every gate holds."""
    return [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")] for _ in range(sessions)]


@pytest.fixture(scope="module")
def passing(tmp_path_factory):
    """One audited run that PASSes, made once; tests work on copies."""
    run = tmp_path_factory.mktemp("round6") / "base"
    audited_run(run, "v1", specs=_clean_specs())
    return run


def test_a_torn_run_json_is_not_trusted_by_report_compare_and_trend_as_it_is_by_the_audit(passing, tmp_path):
    base = Path(shutil.copytree(passing, tmp_path / "base"))
    torn = Path(shutil.copytree(passing, tmp_path / "torn"))
    recorded = json.loads((torn / "run.json").read_text()) | {"user_exceptions": {"count": 7, "first": "KeyError"}}
    text = json.dumps(recorded)
    (torn / "run.json").write_text(text[:len(text) // 2])  # the half of it a full disk or a kill left
    why = "run.json: unreadable (not JSON"
    report = oracle_cli("report", torn)
    assert report.returncode == 0 and "NOT TRUSTED" in report.stdout and why in report.stdout, report.stdout
    assert '<div class="badge warn">NOT TRUSTED</div>' in (torn / "report.html").read_text()
    compare = oracle_cli("compare", base, torn)
    assert compare.returncode == 3, compare.stdout + compare.stderr
    assert "NOT TRUSTED" in compare.stdout and why in compare.stdout
    trend = oracle_cli("trend", base, torn)
    runs = trend.stdout.split("per release")[0].splitlines()[2:]  # per run: the torn run's label is unknown
    assert [" untrusted " in line for line in runs if line.strip()] == [True, False], trend.stdout  # torn first
    assert sum(" pass " in line for line in runs) == 1, trend.stdout


@pytest.mark.parametrize("url, named", [
    ("redis://127.0.0.1:0/0", "port 0 (of 127.0.0.1): no Redis listens there, and redis-py would connect to port 6379"),
    ("redis://user:secret@127.0.0.1:00/0", "port 0 (of 127.0.0.1)"),
    ("redis+sentinel://127.0.0.1:0/mymaster", "sentinel '127.0.0.1:0': want host:port (a port above 0)"),
])
def test_a_store_url_on_port_0_is_refused_not_read_on_6379(passing, tmp_path, url, named):
    """redis-py reads port 0 as "none given" and connects to 6379: the audit would have judged whatever Redis
    listens there (another team's, on a shared host), or blamed 6379 for refusing."""
    run = Path(shutil.copytree(passing, tmp_path / "run"))
    audit = oracle_cli("audit", run, "--store-url", url)
    assert audit.returncode == 2, audit.stdout + audit.stderr
    assert named in audit.stderr and "6379:" not in audit.stderr and "secret" not in audit.stderr, audit.stderr


@pytest.mark.parametrize("blocked", ["audit/windows.csv", "audit/summary.json", "audit/sessions.csv.tmp",
                                     "audit/parts", "audit"])
def test_an_audit_table_that_cannot_be_replaced_is_refused_before_anything_is_read(passing, tmp_path, blocked):
    """audit/windows.csv a folder: the re-audit read the store again, replaced the snapshot, anomalies.jsonl and
    sessions.csv, then failed on windows.csv ('cannot read windows.csv.tmp'), leaving the old PASS summary beside
    the new findings. Now refused first, naming it; every file of the earlier audit as it was."""
    run = Path(shutil.copytree(passing, tmp_path / "run"))
    path = run / blocked
    if blocked in ("audit/parts", "audit"):  # a file where the audit's folder goes
        shutil.rmtree(path, ignore_errors=True)
        path.write_text("not a folder")
    else:  # a folder where a table goes
        path.unlink(missing_ok=True)
        path.mkdir()
        (path / "keep").write_text("x")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    audit = oracle_cli("audit", run)
    assert audit.returncode == 2, audit.stdout + audit.stderr
    assert f"{path} is {'not a folder' if blocked in ('audit/parts', 'audit') else 'a folder'}" in audit.stderr
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing written, nothing left
