"""Readers of a run's results (`oracle report`, `compare`, `trend`) against an input hunt (round 13):

- D1: audit/ or run.json of another run in the folder gave that run's verdict (a PASS) to a run whose own audit
  FAILs or is NOT TRUSTED; now refused, exit 2 (trend: no verdict), naming both run ids;
- D4: trend cut labels to 14 characters and printed 'v1 ' as v1;
- m7: compare said a run whose run.json cannot be read used the script "None";
- m8/m10: a run.json that is not a regular file (a link to /dev/zero, a folder) or not an object read as a missing
  one (PASS), while `oracle audit` says NO VERDICT: now NOT TRUSTED, named, in report, compare and trend alike;
- m9: audit/summary.json a link to /dev/zero was "not audited yet".
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from support_oracle import TurnSpec, build_world, oracle_main, write_journal, write_snapshot
from support_report import T0, synthetic

DAY = 86_400.0


def _run(path: Path, run_id: str, day: int = 0, lose: bool = False, **fields) -> Path:
    """A run folder as goldfish writes it, with journal run id ``run_id`` (and run.json's the same), its store's
    snapshot (``lose``: the store lost the first turn of a session: the audit FAILs), started ``day`` days on."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")] for _ in range(3)]
    world = build_world(specs, start=T0 + day * DAY, seed=7)
    world.records = [{**r, "run": run_id} for r in world.records]
    write_journal(path, world.records)
    if lose:
        first = world.order[0]
        world.stored[first] = world.stored[first][2:]
    write_snapshot(path, world)
    end = max(r["received"] or r["sent"] for r in world.records) + 1
    (path / "run.json").write_text(json.dumps({"run": run_id, "label": run_id, "start": T0 + day * DAY, "end": end,
                                               "phase": "done", "exit_code": 0, **fields}))
    return path


def _audit(capsys, run: Path) -> int:
    return oracle_main(capsys, "audit", run, "--jobs", "1")[0]


# ---- D1: audit/ of another run --------------------------------------------------------------------------------------
def test_another_runs_audit_in_a_failing_run_is_refused_by_report_compare_and_trend(tmp_path, capsys):
    """B's own audit FAILs (the store lost a turn); with A's audit/ in its folder (the journals have the same size,
    so the size check held) report, compare and trend said PASS, exit 0."""
    a, b = _run(tmp_path / "A", "run-A"), _run(tmp_path / "B", "run-B", day=1, lose=True)
    assert _audit(capsys, a) == 0
    assert _audit(capsys, b) == 1
    shutil.rmtree(b / "audit")
    shutil.copytree(a / "audit", b / "audit")

    code, out, err = oracle_main(capsys, "report", b)
    assert code == 2 and "PASS" not in out, out + err
    assert "of run 'run-A'" in err and "is run 'run-B'" in err and str(b / "journal") in err, err
    assert f"python -m oracle audit {b}" in err, err
    code, out, err = oracle_main(capsys, "compare", a, b)
    assert code == 2 and "'run-A'" in err and "'run-B'" in err, out + err
    code, out, err = oracle_main(capsys, "trend", a, b)
    assert code == 2, out + err
    listed = out.split("no verdict (")[1]
    assert "B: " in listed and "'run-A'" in listed and "'run-B'" in listed, out


def test_another_runs_audit_with_no_journal_size_is_refused_too(tmp_path, capsys):
    """An older goldfish's summary records no journal.bytes: no check at all guarded it (report: PASS, no word)."""
    a, b = _run(tmp_path / "A", "run-A"), _run(tmp_path / "B", "run-Bbbbbbb", day=1, lose=True)
    assert _audit(capsys, a) == 0
    shutil.copytree(a / "audit", b / "audit")
    summary = json.loads((b / "audit" / "summary.json").read_text())
    del summary["journal"]
    (b / "audit" / "summary.json").write_text(json.dumps(summary))
    code, out, err = oracle_main(capsys, "report", b)
    assert code == 2 and "of run 'run-A'" in err and "'run-Bbbbbbb'" in err, out + err


def test_an_audit_whose_run_id_is_null_is_refused_and_one_without_it_is_still_read(tmp_path, capsys):
    """A summary.json whose run is null (or NaN) skipped the check of whose audit it is, and trend took its PASS
    (fuzz hunt 18); one with no run at all is an older goldfish's and is still read."""
    a = _run(tmp_path / "A", "run-A")
    assert _audit(capsys, a) == 0
    path = a / "audit" / "summary.json"
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "run": None}))
    code, out, err = oracle_main(capsys, "trend", a)
    assert code == 2 and "this audit's run is None, not a run id" in out + err, out + err
    code, out, err = oracle_main(capsys, "report", a)
    assert code == 2 and "summary.json is damaged" in err, out + err
    del summary["run"]
    path.write_text(json.dumps(summary))
    code, out, err = oracle_main(capsys, "trend", a)
    assert code == 0 and "pass" in out, out + err


# ---- D1: run.json of another run ------------------------------------------------------------------------------------
def test_another_runs_run_json_in_a_cut_short_run_is_refused_by_report_compare_and_trend(tmp_path, capsys):
    """C was cut short (phase load, no end): its audit is NOT TRUSTED, exit 3. With finished run A's run.json in its
    place, report, compare and trend said PASS, exit 0, under A's label."""
    a = _run(tmp_path / "A", "run-A")
    c = _run(tmp_path / "C", "run-C", day=1, phase="load", end=None, exit_code=None)
    assert _audit(capsys, a) == 0
    assert _audit(capsys, c) == 3
    shutil.copy(a / "run.json", c / "run.json")

    code, out, err = oracle_main(capsys, "report", c)
    assert code == 2 and "PASS" not in out, out + err
    assert "of run 'run-C'" in err and f"{c / 'run.json'} is run 'run-A'" in err, err
    assert "put this run's own run.json back" in err, err
    code, out, err = oracle_main(capsys, "compare", a, c)
    assert code == 2 and "'run-C'" in err and "'run-A'" in err, out + err
    code, out, err = oracle_main(capsys, "trend", a, c)
    assert code == 2 and "C: " in out.split("no verdict (")[1], out + err


def test_a_run_of_its_own_and_folders_with_no_run_id_are_still_taken(tmp_path, capsys):
    """The check refuses only two run ids that differ: an audited run is its own, and a summary or run.json with no
    run id (an older goldfish, a folder built by hand) is taken as before."""
    a = _run(tmp_path / "A", "run-A")
    assert _audit(capsys, a) == 0
    code, out, err = oracle_main(capsys, "report", a)
    assert code == 0 and "verdict: PASS" in out, out + err
    meta = json.loads((a / "run.json").read_text())
    del meta["run"]
    (a / "run.json").write_text(json.dumps(meta))
    assert oracle_main(capsys, "report", a)[0] == 0
    summary = json.loads((a / "audit" / "summary.json").read_text())
    del summary["run"]
    (a / "audit" / "summary.json").write_text(json.dumps(summary))
    meta["run"] = "run-Z"
    (a / "run.json").write_text(json.dumps(meta))
    assert oracle_main(capsys, "report", a)[0] == 0


# ---- D4: trend labels ---------------------------------------------------------------------------------------------
def _night(run: Path, day: int) -> Path:
    meta = json.loads((run / "run.json").read_text())
    meta.update(start=T0 + day * DAY, end=T0 + day * DAY + 300)
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_trend_shows_labels_whole_and_quotes_blanks_at_their_ends(tmp_path, capsys):
    long = "x" * 50
    labels = ["release-2026-11-a", "release-2026-11-b", "v1", "v1 ", f"{long}-alpha", f"{long}-beta"]
    runs = [_night(synthetic(tmp_path / f"r{i}", label=label, seed=i + 1), i) for i, label in enumerate(labels)]
    code, out, err = oracle_main(capsys, "trend", *runs)
    assert code == 0, out + err
    per_run, per_release = out.split("per release")
    for table in (per_run, per_release):
        assert "release-2026-11-a " in table and "release-2026-11-b " in table, out
        assert " 'v1 ' " in table and " v1 " in table, out
        assert "…" in table and "-alpha " in table and "-beta " in table, out  # cut in the middle: the end kept
    width = max(len(line) for line in per_run.splitlines())
    assert width < 200, out  # bounded: a 56-character label is cut


# ---- m7: compare of a run whose run.json cannot be read -----------------------------------------------------------
def test_compare_says_unknown_for_what_an_unreadable_run_json_does_not_say(tmp_path, capsys):
    base, cand = synthetic(tmp_path / "base", label="v1", seed=1), synthetic(tmp_path / "cand", label="v2", seed=2)
    (base / "run.json").write_text("{torn")
    code, out, err = oracle_main(capsys, "compare", base, cand)
    assert "different scripts (v1: unknown, v2: support-chat)" in out, out + err
    assert "script_sha) (v1: unknown," in out and "chaos plans (v1: unknown, v2: plans/mixed.yaml)" in out, out
    assert "None" not in out, out


# ---- m8 / m10: a run.json that is not a regular file, or not an object --------------------------------------------
def _readers(capsys, run: Path, other: Path) -> tuple:
    return (oracle_main(capsys, "report", run), oracle_main(capsys, "compare", other, run),
            oracle_main(capsys, "trend", other, run))


def test_a_run_json_linked_to_dev_zero_is_named_and_not_trusted_in_every_reader(tmp_path, capsys):
    """It read as a missing run.json ("missing or empty"): a PASS with exit 0, while `oracle audit` says NO VERDICT."""
    other = _night(synthetic(tmp_path / "other", label="v0", seed=1), 0)
    run = _night(synthetic(tmp_path / "run", label="v1", seed=2), 1)
    (run / "run.json").unlink()
    (run / "run.json").symlink_to("/dev/zero")
    (report, compare, trend) = _readers(capsys, run, other)
    assert report[0] == 0 and "verdict: NOT TRUSTED" in report[1] and "a character device" in report[1], report
    assert "missing or empty" not in report[1] + report[2], report
    assert compare[0] == 3 and "NOT TRUSTED" in compare[1] and "a character device" in compare[1], compare
    assert trend[0] == 2 and "run: untrusted: " in trend[1] and "a character device" in trend[1], trend


def test_a_run_json_folder_or_list_is_not_trusted(tmp_path, capsys):
    run = synthetic(tmp_path / "run", label="v1", seed=2)
    (run / "run.json").unlink()
    (run / "run.json").mkdir()
    code, out, err = oracle_main(capsys, "report", run)
    assert code == 0 and "verdict: NOT TRUSTED" in out and "Is a directory" in out, out + err
    (run / "run.json").rmdir()
    (run / "run.json").write_text("[]")
    code, out, err = oracle_main(capsys, "report", run)
    assert code == 0 and "verdict: NOT TRUSTED" in out and "not a JSON object but a list" in out, out + err


# ---- m9: audit/summary.json a link to /dev/zero -----------------------------------------------------------------
def test_a_summary_linked_to_dev_zero_is_named_not_called_not_audited(tmp_path, capsys):
    other = _night(synthetic(tmp_path / "other", label="v0", seed=1), 0)
    run = _night(synthetic(tmp_path / "run", label="v1", seed=2), 1)
    summary = run / "audit" / "summary.json"
    summary.unlink()
    summary.symlink_to("/dev/zero")
    code, out, err = oracle_main(capsys, "report", run)
    assert code == 2 and f"{summary}: not a regular file but a character device" in err, out + err
    assert "not audited yet" not in err, err
    code, out, err = oracle_main(capsys, "trend", other, run)
    assert code == 2 and "a character device" in out.split("no verdict (")[1], out + err


def test_a_run_json_removed_after_a_not_trusted_audit_stays_not_trusted(tmp_path, redis_server):
    """Input hunt 13 D1's last case: a run cut short (phase load, no end) audits NOT TRUSTED, exit 3; with its
    run.json removed since (a partial copy), report and compare said PASS, exit 0. The audit keeps run.json's
    trust fields in summary.json (run_record), and the readers judge by them when run.json is gone."""
    from oracle.audit import audit_run
    from oracle.report_data import load_run
    from oracle.store import StoreOptions
    from oracle.verdict import cut_short
    from support_oracle import build_world, fill_redis, simple_specs, write_journal

    world = build_world(simple_specs(3), seed=7)
    run = tmp_path / "run"
    write_journal(run, world.records)
    (run / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "start": 1.7e9, "end": None,
                                              "phase": "load"}))
    fill_redis(redis_server.client(), world)
    summary = audit_run(run, StoreOptions(url=redis_server.url))
    assert summary["run_record"] == {"run": world.records[0]["run"], "start": 1.7e9, "end": None, "phase": "load"}
    assert cut_short(load_run(run).run)
    (run / "run.json").unlink()
    data = load_run(run)
    assert cut_short(data.run) and any("run_record" in w for w in data.warnings), data.warnings
