"""Bad input on the release comparison tools, round 6 (hunt-input5): one run given twice, a label that writes to
the terminal.

- trend_counts_copies_twice: two folders holding the same run (a copy, a backup: the same run id and start in
  run.json) were pooled twice by ``trend`` ("runs 2", 0/24 probes for 0/12: a narrower interval, overstated
  confidence); only an identical path was counted once. Now a run given twice (the same run id and start, or the
  same folder by another path) counts once, with one note naming both folders. Runs with no run id keep the
  folder's path as their identity.
- compare BASE BASE (the same folder, another path to it, or a copy) said "no significant change", exit 0: a release
  gate that compared a run with itself. Now exit 2 naming both folders.
- label_control_chars: a label holding a line break and an ESC sequence (stored in run.json) was printed raw by
  compare and trend: it could forge a "verdict: ... -> exit 0" line or send terminal control codes. Now shown
  escaped (\\n, \\x1b) in the terminal and in the --html pages.
Real run folders (journal, snapshot, audit made by the suite's helpers), the commands as users run them.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from support_oracle import TurnSpec
from test_bad_input_outputs import audited_run, oracle_cli

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

FORGED = "v9\nverdict: v9 against v1: BETTER (alpha 0.05, margin 1 points) -> exit 0\x1b[2K\r\x1b[2J"


def _clean_specs(sessions: int = 12) -> list[list[TurnSpec]]:
    """Sessions a correct bot and store pass: every gate holds; one probe each (12 probes a run)."""
    return [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
             TurnSpec("probe", "ok"), TurnSpec("chatter", "ok")] for _ in range(sessions)]


def oracle_main(*argv) -> tuple[int, str, str]:
    """``python -m oracle ...`` in this process: (code, stdout, stderr)."""
    from oracle.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One audited run (run id ``pristine``), made once; each test works on copies of it."""
    run = tmp_path_factory.mktemp("round6compare") / "pristine"
    audited_run(run, "v1", specs=_clean_specs())
    return run


def _edit(path: Path, fields: dict) -> None:
    doc = json.loads(path.read_text())
    doc.update(fields)
    path.write_text(json.dumps(doc))


@pytest.fixture
def runs(pristine, tmp_path):
    """``runs(name)``: a copy of the audited run at tmp_path/name (the same run: same run id and start);
    ``runs(name, other=True)``: the same data filed as another run (its own run id)."""
    def copy(name: str, other: bool = False, label: str | None = None) -> Path:
        run = Path(shutil.copytree(pristine, tmp_path / name, symlinks=True))
        if other:  # filed whole as another run: run.json, the journal's turns and the audit all say its id (only
            new = f"another-{name}"  # run.json's made another run's run.json over this run's audit: refused now)
            _edit(run / "run.json", {"run": new})
            for shard in (run / "journal").glob("*.jsonl"):
                shard.write_text("".join(json.dumps({**json.loads(line), "run": new}) + "\n"
                                         for line in shard.read_text().splitlines() if line.strip()))
            from contracts.runfolder import RunFolder
            _edit(run / "audit" / "summary.json", {"run": new, "journal": {"bytes": RunFolder(run).journal_bytes()}})
        if label is not None:
            _edit(run / "run.json", {"label": label})
            _edit(run / "audit" / "summary.json", {"label": label})
        return run
    return copy


def _release_line(out: str, label: str) -> str:
    part = out.split("per release, pooled over its runs")[1]
    return next(line for line in part.splitlines() if line.startswith(f"  {label} "))


# ---- trend_counts_copies_twice ---------------------------------------------------------------------------------
def test_trend_counts_a_copy_of_a_run_once_naming_both_folders(runs):
    a, b = runs("copyA"), runs("copyB")
    code, out, err = oracle_main("trend", a, b)
    assert code == 0, (out, err)
    assert "per run, in start order (1 runs)" in out, out
    pooled = _release_line(out, "v1")
    assert pooled.split()[1] == "1" and "(0/12)" in pooled and "(0/24)" not in pooled, pooled  # was runs 2, 0/24
    notes = [line for line in err.splitlines() if str(b) in line]
    assert len(notes) == 1 and str(a) in notes[0] and "the same run" in notes[0] and "counted once" in notes[0], err


def test_trend_counts_a_run_reached_by_another_path_once(runs, tmp_path):
    a = runs("run")
    link = tmp_path / "link"
    link.symlink_to(a)
    code, out, err = oracle_main("trend", a, link)
    assert code == 0, (out, err)
    assert "per run, in start order (1 runs)" in out and _release_line(out, "v1").split()[1] == "1", out
    assert str(a) in err and str(link) in err and "counted once" in err, err


def test_trend_keeps_two_runs_of_one_release_and_runs_with_no_run_id(runs):
    a, b = runs("night1"), runs("night2", other=True)  # the same start, another run id: two runs
    code, out, err = oracle_main("trend", a, b)
    assert code == 0, (out, err)
    assert _release_line(out, "v1").split()[1] == "2" and "(0/24)" in _release_line(out, "v1"), out
    assert "counted once" not in err, err
    # no run id (a hand-made run.json, or none at all): the folder is its identity, nothing merged
    c, d, e = runs("noid1"), runs("noid2"), runs("norunjson")
    for run in (c, d):
        meta = json.loads((run / "run.json").read_text())
        del meta["run"]
        (run / "run.json").write_text(json.dumps(meta))
    (e / "run.json").unlink()
    code, out, err = oracle_main("trend", c, d, e)
    assert code == 0, (out, err)
    assert "per run, in start order (3 runs)" in out and "counted once" not in err, (out, err)


# ---- compare BASE BASE -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["the same folder", "another path to it", "a copy"])
def test_compare_of_a_run_with_itself_is_refused_naming_both(how, runs, tmp_path):
    base = runs("base")
    if how == "another path to it":
        cand = tmp_path / "link"
        cand.symlink_to(base)
    else:
        cand = base if how == "the same folder" else runs("copy")
    code, out, err = oracle_main("compare", base, cand, "--gate", "off")
    assert code == 2, (out, err)  # was "no significant change", exit 0
    assert "the same run" in err and str(base) in err and str(cand) in err, err
    assert "exit 0" not in out, out


def test_compare_refuses_a_later_candidate_that_is_the_base(runs):
    base, other = runs("base"), runs("other", other=True)
    code, out, err = oracle_main("compare", base, other, runs("copy"), "--gate", "off")
    assert code == 2, (out, err)
    assert "the same run" in err and str(base) in err and "copy" in err, err


def test_compare_refuses_a_candidate_given_twice(runs):
    """``compare BASE C C``: the trend showed one run as two releases."""
    base, cand = runs("base"), runs("cand", other=True)
    code, out, err = oracle_main("compare", base, cand, cand, "--gate", "off")
    assert code == 2, (out, err)
    assert "the same run" in err and "and the candidate" in err and str(cand) in err, err


def test_compare_of_two_runs_still_compares(runs):
    base, cand = runs("base"), runs("cand", other=True)
    code, out, err = oracle_main("compare", base, cand, "--gate", "off")
    assert code == 0, (out, err)
    assert "against v1: no significant change (alpha 0.05, margin 1 points) -> exit 0" in out, out
    # no run id in either run.json: two folders are two runs
    for run in (base, cand):
        meta = json.loads((run / "run.json").read_text())
        del meta["run"]
        (run / "run.json").write_text(json.dumps(meta))
    code, out, err = oracle_main("compare", base, cand, "--gate", "off")
    assert code == 0, (out, err)


# ---- label_control_chars ---------------------------------------------------------------------------------------
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # every control character but \t and \n


def test_compare_shows_a_labels_control_characters_escaped(runs, tmp_path):
    base, cand = runs("base"), runs("cand", other=True, label=FORGED)
    html = tmp_path / "compare.html"
    done = oracle_cli("compare", base, cand, "--gate", "off", "--html", html)
    assert done.returncode == 0, done.stderr
    assert not CONTROL.search(done.stdout), repr(done.stdout)  # was ESC[2K, ESC[2J and a CR, raw
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("verdict:")]
    assert len(verdicts) == 1 and verdicts[0].startswith("verdict: v9\\nverdict: v9 against v1"), verdicts
    assert "\\x1b[2K\\r\\x1b[2J" in done.stdout, done.stdout
    page = html.read_text()
    assert not CONTROL.search(page) and "v9\\nverdict" in page


def test_trend_shows_a_labels_control_characters_escaped(runs, tmp_path):
    base, cand = runs("base"), runs("cand", other=True, label=FORGED)
    html = tmp_path / "trend.html"
    done = oracle_cli("trend", base, cand, "--html", html)
    assert done.returncode == 0, done.stderr
    assert not CONTROL.search(done.stdout + done.stderr), repr(done.stdout)
    assert not any(line.startswith("verdict:") for line in done.stdout.splitlines()), done.stdout
    assert "v9\\nverdict" in done.stdout, done.stdout
    page = html.read_text()
    assert not CONTROL.search(page) and "v9\\nverdict" in page


def test_a_folder_name_with_control_characters_is_shown_escaped(runs, tmp_path):
    base = runs("base")
    cand = runs("cand\x1b[2Jx", other=True)
    done = oracle_cli("compare", base, cand, "--gate", "off")
    assert done.returncode == 0, done.stderr
    assert not CONTROL.search(done.stdout) and "cand\\x1b[2Jx" in done.stdout, repr(done.stdout)
    html = tmp_path / "trend.html"
    done = oracle_cli("trend", base, cand, "--html", html)
    assert done.returncode == 0, done.stderr
    assert not CONTROL.search(done.stdout + done.stderr), repr(done.stdout)
    page = html.read_text()
    assert not CONTROL.search(page) and "cand\\x1b[2Jx" in page  # its run column
