"""Two bad-input holes: `oracle trend` over a night that gave no verdict, and the rolling audit's writer
meeting a FIFO (or a device) where its judgement file goes."""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from contracts.runfolder import RunFolder
from oracle import audit_cli, trend
from oracle.audit import audit_run
from oracle.history import PARTITIONS, SessionLines
from oracle.rolling import Judged, RollingPrior, RollingWriter
from oracle.snapshot import SnapshotWriter
from oracle.store import StoreOptions
from support_oracle import build_world, simple_specs, store_with_langchain, write_journal
from support_report import T0, synthetic
from test_oracle_rolling import one_pass

DAY = 86_400.0


def night_at(run: Path, day: int, **fields) -> Path:
    """Move a synthetic run to its night (``day`` days after T0), with run.json fields as the Locust run's end
    writes them (``end: None``: still going)."""
    meta = json.loads((run / "run.json").read_text())
    meta.update({"start": T0 + day * DAY, "end": T0 + day * DAY + 300, **fields})
    (run / "run.json").write_text(json.dumps(meta))
    return run


def nights(tmp_path: Path) -> dict[str, Path]:
    """results/: two audited nights around two that ended with no verdict, a run still going and a folder
    that is no run. The no-verdict nights are made as goldfish leaves them: the end of the Locust run
    recorded its exit code (3: the audit failed), and `oracle audit` exits 2 on them, writing no summary."""
    runs = {"first": night_at(synthetic(tmp_path / "first", label="v1.4", seed=1), 0),
            "unreachable": night_at(synthetic(tmp_path / "unreachable", label="v1.4", audited=False, seed=2), 1,
                                    phase="done", exit_code=3, verdict=None),
            "died": night_at(synthetic(tmp_path / "died", label="v1.5", audited=False, seed=3), 2,
                             phase="done", exit_code=3, verdict=None),
            "last": night_at(synthetic(tmp_path / "last", label="v1.5", lost=30, seed=4), 3),
            "going": night_at(synthetic(tmp_path / "going", label="v1.5", audited=False, seed=5), 4,
                              phase="load", end=None)}
    assert audit_cli.main([str(runs["unreachable"]), "--store-url", "redis://127.0.0.1:1/0"]) == 2
    # the store died mid-read: the partial snapshot is kept, marked incomplete (oracle/snapshot.py)
    SnapshotWriter(runs["died"], StoreOptions(url="redis://127.0.0.1:1/0"), {}, PARTITIONS).close(
        False, 0, error="ConnectionError: Connection closed by server.")
    assert audit_cli.main([str(runs["died"])]) == 2
    for run in ("unreachable", "died"):
        assert not RunFolder(runs[run]).summary.exists()
    (tmp_path / "matrix").mkdir()
    return runs


def test_a_night_that_gave_no_verdict_is_listed_with_its_reason_and_trend_exits_2(tmp_path, capsys):
    runs = nights(tmp_path)
    capsys.readouterr()
    html = tmp_path / "trend.html"
    paths = [str(p) for p in sorted(tmp_path.iterdir())]
    assert trend.main([*paths, "--html", str(html)]) == 2  # was 0: the two nights skipped like results/matrix
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == "per run, in start order (4 runs)"
    rows = lines[2:6]
    assert [row.split()[-2:] for row in rows] == [["pass", "-"], ["no-verdict", "-"], ["no-verdict", "-"],
                                                  ["fail", "worse"]], out  # against the last audited night
    assert rows[1].split()[2:8] == ["v1.4", "-", "-", "-", "-", "-"], "no rates for a night with no verdict"
    assert lines[6] == "" and lines[7] == "per release, pooled over its runs"
    pooled = {line.split()[0]: line.split()[1] for line in lines if line.startswith("  v1.")}
    assert pooled == {"v1.4": "1", "v1.5": "1"}, "a night with no verdict is pooled into no release"
    section = out.split("no verdict (2 run(s) ended without a usable audit/summary.json)\n")[1].splitlines()
    assert section[0].split()[2] == "unreachable:" and "no audit/summary.json" in section[0]
    assert "the run ended with exit code 3 (phase done)" in section[0]
    assert section[1].split()[2] == "died:" and "its store snapshot is incomplete (ConnectionError" in section[1]
    assert "error: 2 run(s) ended without a verdict" in err and "--allow-no-verdict" in err
    assert f"skipped: {tmp_path / 'matrix'}: not a run folder" in err
    assert f"skipped: {runs['going']}: not audited yet" in err and "still going" in err
    page = html.read_text()
    assert "2 run(s) ended without a verdict" in page and page.count("no verdict</span>") == 2
    assert "exit code 3 (phase done)" in page

    assert trend.main([*paths, "--allow-no-verdict"]) == 0  # the same listing, by the user's explicit choice
    out, err = capsys.readouterr()
    assert out.count(" no-verdict -") == 2 and "error:" not in err


def test_only_nights_with_no_verdict_are_still_listed_and_exit_2(tmp_path, capsys):
    runs = nights(tmp_path)
    capsys.readouterr()
    html = tmp_path / "trend.html"
    assert trend.main([str(runs["unreachable"]), str(runs["died"]), "--html", str(html)]) == 2
    out, err = capsys.readouterr()
    assert out.count(" no-verdict -") == 2 and "none of the folders is an audited run" not in err
    assert "No chart: no run gave a verdict." in html.read_text()


def test_folders_that_are_no_runs_and_runs_still_going_stay_skipped_with_exit_0(tmp_path, capsys):
    runs = nights(tmp_path)
    capsys.readouterr()
    assert trend.main([str(runs["first"]), str(runs["last"]), str(runs["going"]), str(tmp_path / "matrix")]) == 0
    out, err = capsys.readouterr()
    assert "no-verdict" not in out and "no verdict" not in out
    assert err.count("skipped:") == 2 and "still going" in err


def test_a_night_whose_process_ended_without_recording_its_end_is_no_verdict(tmp_path, capsys):
    """A nightly whose results disk filled after the load could not write its end to run.json; trend skipped it as
    still going and exited 0 (verdict hunt 16). The Locust process holds a lock while its run goes on
    (RunFolder.hold_running): held, the run is still going; let go (the process ended, or was killed), it is a
    night with no verdict; with no lock file (an older run), nothing tells, so it is skipped as before."""
    runs = nights(tmp_path)
    capsys.readouterr()
    going = RunFolder(runs["going"])
    assert going.running() is None
    assert trend.main([str(runs["first"]), str(going.path)]) == 0
    holding = going.hold_running()
    assert holding is not None and going.running() is True
    assert trend.main([str(runs["first"]), str(going.path)]) == 0
    assert "still going" in capsys.readouterr().err
    holding.close()  # as the end of the run, or the kernel when its process dies
    assert going.running() is False
    assert trend.main([str(runs["first"]), str(going.path)]) == 2
    out, err = capsys.readouterr()
    assert "its Locust process ended during its load phase without recording its end" in out, out
    assert "still going" not in err and "1 run(s) ended without a verdict" in err


def test_an_audited_night_whose_journal_went_since_is_no_verdict_not_skipped(tmp_path, capsys):
    """Its journal deleted (run.json, audit/ and store/ kept): trend skipped it, exit 0, where compare and report
    refuse it (input hunt 16). A night that cannot be judged is listed with no verdict: exit 2."""
    import shutil

    runs = nights(tmp_path)
    capsys.readouterr()
    summary = json.loads((runs["last"] / "audit" / "summary.json").read_text())
    summary["journal"] = {"bytes": sum(p.stat().st_size for p in (runs["last"] / "journal").glob("*.jsonl"))}
    (runs["last"] / "audit" / "summary.json").write_text(json.dumps(summary))  # as the audit records it
    shutil.rmtree(runs["last"] / "journal")
    assert trend.main([str(runs["first"]), str(runs["last"])]) == 2
    out, err = capsys.readouterr()
    assert "no verdict (1 run(s)" in out and f"{runs['last']}" in out, out + err


def test_trend_help_names_the_option_that_allows_a_night_with_no_verdict(capsys):
    with pytest.raises(SystemExit):
        trend.main(["--help"])
    assert "--allow-no-verdict" in capsys.readouterr().out


def judged(session: str) -> Judged:
    return Judged(session, 0, [], 0, True, [], None, [], [])


@pytest.mark.timeout(30)
def test_rolling_writer_passes_over_a_fifo_or_a_device_at_its_path_without_hanging(tmp_path, capsys):
    """A plain append open of a FIFO waits for a reader forever (the rolling audit hung). Now each is passed
    over with a message naming it, as RollingPrior passes it over: its sessions are read from the store."""
    folder = RunFolder(tmp_path / "run")
    path = {name: folder.rolling_part(3, f"judged.{name}") for name in ("fifo", "read", "link", "dev", "ok")}
    os.mkfifo(path["fifo"])
    os.mkfifo(path["read"])
    reader = os.open(path["read"], os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with a reader: the open alone succeeds
    os.symlink(path["fifo"], path["link"])  # lstat sees a link; what it points to is a FIFO
    os.symlink(os.devnull, path["dev"])
    writer = RollingWriter(folder, 3)
    try:
        for name in path:
            writer.write(f"journal/{name}.jsonl", judged(f"s-{name}"), b'{"session": "s"}\n')
            writer.write(f"journal/{name}.jsonl", judged(f"t-{name}"), b'{"session": "t"}\n')
        writer.close()
        assert os.read(reader, 1 << 16) == b"", "nothing was written into the FIFO"
    finally:
        os.close(reader)
    err = capsys.readouterr().err
    for name, kind in (("fifo", "a FIFO"), ("read", "a FIFO"), ("link", "a FIFO"), ("dev", "a character device")):
        assert err.count(f"oracle follow: {path[name]}: not a regular file but {kind};") == 1, err
    assert "judgements are not kept (the final audit reads its sessions from the store)" in err
    assert [msgspec.json.decode(line)["session"] for line in path["ok"].read_bytes().splitlines()] == \
        ["s-ok", "t-ok"]

    prior = RollingPrior(folder, 3)  # the reader passes the FIFO over too, and reads the regular file
    found = prior.take([SessionLines(f"journal/{name}.jsonl", f"s-{name}") for name in ("fifo", "ok")])
    prior.close()
    assert list(found) == ["s-ok"]


@pytest.mark.timeout(30)
def test_follow_with_fifos_in_the_rolling_folder_still_judges_and_the_final_audit_is_unchanged(tmp_path,
                                                                                                 redis_server):
    world = build_world(simple_specs(12), seed=7)
    run = tmp_path / "run"
    write_journal(run, world.records, by_user=True)
    store_with_langchain(redis_server.url, world)
    store = StoreOptions(url=redis_server.url)
    folder = RunFolder(run)
    for p in range(PARTITIONS):  # every partition's judgement file of the journal's one shard
        os.mkfifo(folder.rolling_part(p, "judged.local-0"))
    assert one_pass(run, store)["sessions"] == 8  # judged (progress.json), none kept
    assert all(f.is_fifo() for f in (run / "audit" / "rolling").glob("judged.*.jsonl"))
    summary = audit_run(run, store)
    assert "rolling" not in summary, "no judgement taken back: every session read from the store"
    fresh = tmp_path / "fresh"
    write_journal(fresh, world.records, by_user=True)
    assert audit_run(fresh, store)["metrics"] == summary["metrics"]
