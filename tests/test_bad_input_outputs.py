"""Bad input on the oracle's outputs (#16): a full disk, a FIFO or a directory where an output goes, a journal
changed after the audit, a lone surrogate escape in run.json or summary.json. Each was a traceback (exit 3), a
hang, a truncated chart or a lost breakdown; each is now exit 2 naming the file (or a warning, for run.json),
with what was recorded before left whole and no temporary behind. The full disk is a real one: a 2 MB tmpfs
(root only; skipped otherwise), filled but for a few pages.
"""
from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support_oracle import build_world, fill_redis, simple_specs, write_journal, write_snapshot

REPO = Path(__file__).resolve().parents[1]
TABLES = ("audit/summary.json", "audit/sessions.csv", "audit/anomalies.jsonl", "audit/windows.csv")

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def audited_run(run: Path, label: str = "v1", sessions: int = 12, specs=None):
    """A small journaled run, its store snapshot and its audit (``world`` returned: what the store holds)."""
    from oracle.audit import audit_run

    world = build_world(specs or simple_specs(sessions), seed=5)
    for r in world.records:  # the journal is this run's, as run.json says (a live audit refuses another's)
        r["run"] = run.name
    write_journal(run, world.records)
    write_snapshot(run, world)
    start, end = min(r["sent"] for r in world.records), max(r["received"] or r["sent"] for r in world.records)
    (run / "run.json").write_text(json.dumps({"run": run.name, "label": label, "start": start, "end": end}))
    audit_run(run, jobs=1)
    return world


def oracle_cli(*argv, timeout: float = 30) -> subprocess.CompletedProcess:
    """``python -m oracle ...`` in a process of its own: a hang is a failure here, not a stuck suite."""
    return subprocess.run([sys.executable, "-m", "oracle", *map(str, argv)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def oracle_main(*argv) -> tuple[int, str]:
    """``python -m oracle ...`` in this process (fast enough to sweep a full disk page by page): (code, stderr)."""
    from oracle.__main__ import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in argv])
    gc.collect()  # files a failed audit left open hold their pages until closed
    return code, err.getvalue()


def contents(run: Path, names) -> dict:
    return {name: (run / name).read_bytes() for name in names}


def temporaries(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.name.endswith(".tmp")
                  or p.name in ("parts", "store.reading", "store.replaced"))


class Disk:
    """A mounted tmpfs; ``fill(leave)`` fills it but ``leave`` bytes, ``free()`` empties the filler."""

    def __init__(self, path: Path):
        self.path, self.filler = path, path / "filler"

    def fill(self, leave: int = 0) -> None:
        with open(self.filler, "wb", buffering=0) as fh:  # unbuffered: nothing left to fail at close
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * 65536)
        os.truncate(self.filler, max(0, self.filler.stat().st_size - leave))

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


@pytest.fixture
def disk(tmp_path):
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield Disk(mount)
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# ---- L1: a journal emptied after the audit -------------------------------------------------------------------
def test_a_journal_emptied_after_the_audit_does_not_replace_the_breakdown(tmp_path):
    """The report rebuilt audit/breakdown.json whenever the journal was newer: an emptied journal turned the
    audit's 12 probes into 0, silently. The breakdown written after the audit is kept; and as the journal shrank
    since the audit, the summary is no verdict of it: the report refuses, saying to put the journal back (an
    audit of what is left is refused too)."""
    from oracle import report
    from oracle.report_data import NotAudited

    run = tmp_path / "run"
    audited_run(run)
    report.render(run)
    before = (run / "audit" / "breakdown.json").read_bytes()
    assert json.loads(before)["probes"] == 12
    shard = next((run / "journal").iterdir())
    shard.write_text("")
    later = (run / "audit" / "breakdown.json").stat().st_mtime + 10
    os.utime(shard, (later, later))
    with pytest.raises(NotAudited, match="the journal has shrunk since this audit .* Put the whole journal back"):
        report.render(run)
    assert (run / "audit" / "breakdown.json").read_bytes() == before


# ---- D1: the report on a full disk ---------------------------------------------------------------------------
def test_the_report_on_a_full_disk_is_exit_2_and_keeps_the_earlier_charts(disk):
    """Was exit 3 (a traceback) with charts/timeline.png truncated in place: the earlier chart lost."""
    from oracle import report

    run = disk.path / "run"
    audited_run(run)
    report.render(run)
    kept = ["report.html", "audit/breakdown.json"] + [f"charts/{p.name}" for p in (run / "charts").iterdir()]
    before = contents(run, kept)
    disk.fill()
    code, err = oracle_main("report", run, "--quiet")
    assert code == 2, err
    assert "charts/timeline.png: No space left on device" in err and "Traceback" not in err
    assert contents(run, kept) == before
    assert temporaries(run) == []


# ---- D2: a live audit on a full disk -------------------------------------------------------------------------
def test_a_live_audit_on_a_full_disk_is_exit_2_and_keeps_the_earlier_snapshot_and_tables(disk, redis_server):
    """Was exit 3 (a traceback in SnapshotWriter) leaving store.reading/ behind; a disk that filled mid-read was
    blamed on the store. From no free page up to enough, every failure says the run folder cannot be written,
    and leaves the earlier snapshot and tables as they were, with no temporary behind."""
    run = disk.path / "run"
    world = audited_run(run)
    fill_redis(redis_server.client(), world)
    kept = list(TABLES) + [f"store/{p.name}" for p in (run / "store").iterdir()]
    before, failures = contents(run, kept), []
    for pages in range(64):
        disk.fill(pages * 4096)
        code, err = oracle_main("audit", run, "--jobs", "1", "--store-url", redis_server.url)
        disk.free()
        if code != 2:
            break
        failures.append(err)
        assert "cannot write the run folder: No space left on device (writing" in err, (pages, err)
        assert "the store at" not in err and "Traceback" not in err, (pages, err)
        assert contents(run, kept) == before, pages
        assert temporaries(run) == [], pages
    assert code in (0, 1), err  # with room enough, the audit runs
    assert "store.reading/meta.json" in failures[0]  # the read's first write: no free page at all


def test_the_end_of_run_audit_on_a_full_disk_is_one_line_not_a_traceback(disk, redis_server):
    """Locust's end-of-run audit on a full disk logged "audit failed" with a whole traceback before its own clear
    line (input hunt 17); `oracle audit` said it in one line. Exit 3 (the audit failed, the journal intact) stands."""
    run = disk.path / "run"
    world = build_world(simple_specs(6), seed=3)
    write_journal(run, world.records)
    fill_redis(redis_server.client(), world)
    disk.fill()
    script = ("import sys\nfrom types import SimpleNamespace\nfrom oracle.store import StoreOptions\n"
              "from locustfiles.endofrun import EndOfRun\n"
              "code, _ = EndOfRun.audit(SimpleNamespace(audited=None, settings=SimpleNamespace(run_dir=sys.argv[1], "
              "gates=None, store=StoreOptions(url=sys.argv[2]))))\nprint('code', code)\n")
    try:
        done = subprocess.run([sys.executable, "-c", script, str(run), redis_server.url], capture_output=True,
                              text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    finally:
        disk.free()
    out = done.stdout + done.stderr
    assert "code 3" in done.stdout, out
    assert "audit FAILED: CannotWrite: cannot write the run folder: No space left on device" in out, out
    assert "Traceback" not in out and "audit failed\n" not in out, out


# ---- D3/D4: a re-audit from the snapshot on a full disk ------------------------------------------------------
def test_a_reaudit_on_a_full_disk_is_exit_2_blames_the_disk_and_leaves_no_temporaries(disk):
    """With no free page the re-audit said the store failed and the snapshot was marked incomplete (neither
    true); with a few pages it was exit 3 leaving audit/parts/, anomalies.raw.tmp and sessions.csv.tmp."""
    run = disk.path / "run"
    audited_run(run)
    kept = list(TABLES) + [f"store/{p.name}" for p in (run / "store").iterdir()]
    before, failures = contents(run, kept), []
    for pages in range(64):
        disk.fill(pages * 4096)
        code, err = oracle_main("audit", run, "--jobs", "1")
        disk.free()
        if code != 2:
            break
        failures.append(err)
        assert "cannot write the run folder: No space left on device (writing" in err, (pages, err)
        assert "store" not in err.replace(str(run), "") and "Traceback" not in err, (pages, err)
        assert contents(run, kept) == before, pages
        assert temporaries(run) == [], pages
    assert code in (0, 1), err
    assert "audit/parts" in failures[0]  # judging: the partitions' files
    assert any("the audit's tables" in e for e in failures), failures  # putting them together, and after


# ---- D1 (minor): compare / trend --html on a full disk --------------------------------------------------------
@pytest.mark.parametrize("command", ["compare", "trend"])
def test_html_on_a_full_disk_is_exit_2_and_leaves_the_earlier_page_whole(command, tmp_path, disk):
    run, base = tmp_path / "run", tmp_path / "base"  # two runs: compare refuses a run compared with itself
    audited_run(run)
    audited_run(base)
    out = disk.path / "out.html"
    out.write_text("<html>the earlier page</html>")
    disk.fill()
    code, err = oracle_main(command, base, run, "--html", out, *(["--gate", "off"] if command == "compare" else []))
    assert code == 2, err
    assert f"{out}: No space left on device" in err
    assert out.read_text() == "<html>the earlier page</html>"
    assert sorted(p.name for p in disk.path.iterdir()) == ["filler", "out.html"]


# ---- H1/H2: --html to a FIFO; T3: a chart that is a FIFO; U2: report.html a directory --------------------------
@pytest.mark.parametrize("command", ["compare", "trend"])
def test_html_to_a_fifo_is_exit_2_naming_it_not_a_hang(command, tmp_path):
    """Opening a FIFO for writing waits for a reader: compare and trend blocked forever."""
    run, base = tmp_path / "run", tmp_path / "base"
    audited_run(run)
    audited_run(base)
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    done = oracle_cli(command, base, run, "--html", fifo, *(["--gate", "off"] if command == "compare" else []))
    assert done.returncode == 2, done.stderr
    assert f"{fifo}: not a regular file but a FIFO" in done.stderr and "Traceback" not in done.stderr


def test_a_chart_that_is_a_fifo_is_exit_2_naming_it(tmp_path):
    """Was exit 3: "UnsupportedOperation: File or stream is not seekable"."""
    from oracle import report

    run = tmp_path / "run"
    audited_run(run)
    report.render(run)
    chart = run / "charts" / "timeline.png"
    chart.unlink()
    os.mkfifo(chart)
    done = oracle_cli("report", run, "--quiet")
    assert done.returncode == 2, done.stderr
    assert f"{chart}: not a regular file but a FIFO" in done.stderr and "Traceback" not in done.stderr


def test_report_html_that_is_a_directory_is_named_as_itself(tmp_path):
    """The message named report.html.tmp, a file the user never made."""
    run = tmp_path / "run"
    audited_run(run)
    (run / "report.html").mkdir()
    done = oracle_cli("report", run, "--quiet")
    assert done.returncode == 2, done.stderr
    assert f"{run / 'report.html'}: Is a directory" in done.stderr
    assert ".tmp" not in done.stderr


# ---- T5: a lone surrogate escape ----------------------------------------------------------------------------
def _surrogate_label(run: Path) -> None:
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "label": "v1\ud800"}))  # ensure_ascii: written as \ud800


@pytest.mark.parametrize("command", ["report", "compare", "trend"])
def test_a_lone_surrogate_in_run_json_is_a_warning_naming_the_field(command, tmp_path):
    """JSON's \\ud800 escape decodes to a string no UTF-8 page or terminal can encode: exit 3 everywhere. A
    damaged run.json field is a warning and the report goes on, as for the others; the surrogate is replaced."""
    run, base = tmp_path / "run", tmp_path / "base"
    audited_run(run)
    audited_run(base, label="v0")
    _surrogate_label(run)
    argv = {"report": ("report", run), "compare": ("compare", base, run, "--gate", "off"),
            "trend": ("trend", base, run)}[command]
    done = oracle_cli(*argv)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if command == "report":
        page = (run / "report.html").read_text()
        assert "run.json: $.label: a lone surrogate escape" in page and "v1\ufffd" in page
    else:
        assert "v1\ufffd" in done.stdout


def test_a_lone_surrogate_in_the_run_json_of_a_run_with_no_verdict_is_made_safe_in_trend(tmp_path):
    """trend lists a run whose audit never ran by what its run.json says (oracle/trend.py run_meta)."""
    base, run = tmp_path / "base", tmp_path / "run"
    audited_run(base)
    audited_run(run)
    (run / "audit" / "summary.json").unlink()  # its audit failed: a night with no verdict
    _surrogate_label(run)
    done = oracle_cli("trend", base, run, "--allow-no-verdict")
    assert done.returncode == 0, done.stderr
    assert "v1\ufffd" in done.stdout and "no-verdict" in done.stdout


def test_a_lone_surrogate_in_summary_json_is_exit_2_naming_the_file_and_field(tmp_path):
    """summary.json is the audit's own: a damaged field refuses it (re-audit), as any other damaged field does."""
    run = tmp_path / "run"
    audited_run(run)
    summary = json.loads((run / "audit" / "summary.json").read_text())
    summary["problems"] = ["a problem \ud800"]
    (run / "audit" / "summary.json").write_text(json.dumps(summary))
    done = oracle_cli("report", run, "--quiet")
    assert done.returncode == 2, done.stderr
    assert f"{run / 'audit' / 'summary.json'}: $.problems[0]: a lone surrogate escape" in done.stderr


def test_a_lone_surrogate_in_run_json_does_not_crash_the_audit(tmp_path):
    """The audit copies the label into summary.json, whose encoder refused it (exit 3). The label is mended (the
    surrogate replaced), as the report and trend mend it, and the audit judges the run."""
    run = tmp_path / "run"
    audited_run(run)
    _surrogate_label(run)
    done = oracle_cli("audit", run, "--jobs", "1")
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    assert json.loads((run / "audit" / "summary.json").read_text())["label"].startswith("v1")
