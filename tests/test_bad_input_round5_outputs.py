"""Bad input on the oracle's outputs, round 5 (hunt-input4): where the pages go and what a verdict says.

- x01-x06: ``compare``/``trend --html`` onto a run's journal shard, summary.json, run.json or store/meta.json
  replaced it with the page, exit 0; now exit 2 naming the path, the record untouched. An existing file that is
  not an HTML page is refused too; a run's report.html, an earlier page and a new path still work.
- l01/l02/z01: ``audit/``, ``charts/`` or ``report.html`` a symbolic link (into another run, or to the run's own
  journal): the report wrote through it; now exit 2 naming the link, what it points to untouched.
- j03: a summary whose verdict has no rules: compare said "PASS — 0 gate(s) held", exit 0; now exit 2 naming
  summary.json (report: exit 2; trend: a night with no verdict).
- a16/a16b: ``store`` a dangling symbolic link: "cannot read RUN/store.reading: Not a directory"; now the link is
  named as a dangling one.
Real run folders (journal, snapshot, audit made by the suite's helpers), the CLI as users run it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from support_oracle import TurnSpec, build_world, fill_redis
from test_bad_input_outputs import audited_run

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _clean_specs(sessions: int = 12) -> list[list[TurnSpec]]:
    """Sessions a correct bot and store pass: every gate holds (the hunt's runs were such PASS runs)."""
    return [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
             TurnSpec("probe", "ok"), TurnSpec("chatter", "ok")] for _ in range(sessions)]


def _world():
    return build_world(_clean_specs(), seed=5)


def _audited_run(run: Path, label: str = "v1"):
    return audited_run(run, label, specs=_clean_specs())


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One audited run, made once; each test works on copies of it."""
    run = tmp_path_factory.mktemp("round5") / "pristine"
    world = _audited_run(run)
    return run, world


@pytest.fixture
def runs(pristine, tmp_path):
    """``runs(name)``: a fresh copy of the audited run at tmp_path/name."""
    def copy(name: str) -> Path:
        run = Path(shutil.copytree(pristine[0], tmp_path / name, symlinks=True))
        meta = json.loads((run / "run.json").read_text())  # a run of its own: compare refuses a run with itself
        (run / "run.json").write_text(json.dumps({**meta, "start": meta["start"] + len(name) + sum(map(ord, name))}))
        return run
    return copy


def oracle_main(*argv) -> tuple[int, str, str]:
    """``python -m oracle ...`` in this process: (code, stdout, stderr)."""
    from oracle.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def html_command(command: str, base: Path, cand: Path, target) -> tuple[int, str, str]:
    return oracle_main(command, base, cand, "--html", target, *(["--gate", "off"] if command == "compare" else []))


def tree(run: Path) -> dict:
    """Every file of a run folder and its bytes (links as where they point)."""
    return {str(p.relative_to(run)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(run.rglob("*")) if p.is_symlink() or p.is_file()}


# ---- x01-x06: --html onto a run's records --------------------------------------------------------------------
RECORDS = ["journal/<shard>", "audit/summary.json", "run.json", "store/meta.json"]


def _record(run: Path, name: str) -> Path:
    return sorted((run / "journal").glob("*.jsonl"))[0] if name == "journal/<shard>" else run / name


@pytest.mark.parametrize("command", ["compare", "trend"])
@pytest.mark.parametrize("record", RECORDS)
def test_html_onto_a_runs_record_is_refused_naming_it(command, record, runs):
    base, cand = runs("base"), runs("cand")
    target = _record(cand, record)
    before = tree(cand)
    code, out, err = html_command(command, base, cand, target)
    assert code == 2, (out, err)
    assert f"--html {target}" in err and "records of the run folder" in err, err
    assert tree(cand) == before  # nothing replaced, no temporary beside it


@pytest.mark.parametrize("command", ["compare", "trend"])
def test_html_through_a_link_to_a_runs_journal_is_refused(command, runs, tmp_path):
    base, cand = runs("base"), runs("cand")
    shard = _record(cand, "journal/<shard>")
    link = tmp_path / "page.html"
    link.symlink_to(shard)
    before = shard.read_bytes()
    code, out, err = html_command(command, base, cand, link)
    assert code == 2, (out, err)
    assert str(link) in err and str(shard) in err, err
    assert shard.read_bytes() == before


@pytest.mark.parametrize("command", ["compare", "trend"])
def test_html_onto_an_existing_file_that_is_not_a_page_is_refused(command, runs, tmp_path):
    base, cand = runs("base"), runs("cand")
    notes = tmp_path / "notes.txt"
    notes.write_text("what I must not lose\n")
    code, out, err = html_command(command, base, cand, notes)
    assert code == 2, (out, err)
    assert f"{notes} is an existing file that is not an HTML page" in err, err
    assert notes.read_text() == "what I must not lose\n"


@pytest.mark.parametrize("command", ["compare", "trend"])
def test_html_to_a_report_an_earlier_page_or_a_new_path_still_works(command, runs, tmp_path):
    base, cand = runs("base"), runs("cand")
    assert oracle_main("report", "--quiet", cand)[0] == 0
    earlier = tmp_path / "earlier.html"
    earlier.write_text("<!DOCTYPE html>\n<html>the earlier page</html>")
    for target in (cand / "report.html", earlier, tmp_path / "new" / "page.html", cand / "compare.html"):
        code, out, err = html_command(command, base, cand, target)
        assert code == 0, (target, out, err)
        assert target.read_text().startswith("<!DOCTYPE html>") and "the earlier page" not in target.read_text()


# ---- l01/l02/z01: the report's outputs as symbolic links -----------------------------------------------------
def test_report_through_a_charts_link_into_another_run_is_refused(runs):
    victim, run = runs("victim"), runs("run")
    assert oracle_main("report", "--quiet", victim)[0] == 0
    shutil.rmtree(run / "charts", ignore_errors=True)
    (run / "charts").symlink_to(victim / "charts")
    before = tree(victim)
    code, out, err = oracle_main("report", "--quiet", run)
    assert code == 2, (out, err)
    assert f"{run / 'charts'} is a symbolic link (to {victim / 'charts'})" in err, err
    assert tree(victim) == before


def test_report_html_linked_to_the_runs_own_journal_is_refused(runs):
    run = runs("run")
    shard = _record(run, "journal/<shard>")
    (run / "report.html").unlink(missing_ok=True)
    (run / "report.html").symlink_to(shard)
    before = shard.read_bytes()
    code, out, err = oracle_main("report", "--quiet", run)
    assert code == 2, (out, err)
    assert f"{run / 'report.html'} is a symbolic link (to {shard})" in err, err
    assert shard.read_bytes() == before


def test_report_through_an_audit_link_into_another_run_is_refused(runs):
    """The report writes audit/breakdown.json: through the link, into the other run's tables."""
    victim, run = runs("victim"), runs("run")
    shutil.rmtree(run / "audit")
    (run / "audit").symlink_to(victim / "audit")
    before = tree(victim)
    code, out, err = oracle_main("report", "--quiet", run)
    assert code == 2, (out, err)
    assert f"{run / 'audit'} is a symbolic link" in err, err
    assert tree(victim) == before


def test_an_audit_through_an_audit_link_into_another_run_is_refused(runs):
    """The audit (from the snapshot) would write its tables through the link, into the other run's: exit 2 first."""
    victim, run = runs("victim"), runs("run")
    shutil.rmtree(run / "audit")
    (run / "audit").symlink_to(victim / "audit")
    before = tree(victim)
    code, out, err = oracle_main("audit", run)
    assert code == 2, (out, err)
    assert f"{run / 'audit'} is a symbolic link" in err, err
    assert tree(victim) == before


# ---- j03: a verdict with no rules ---------------------------------------------------------------------------
def _no_rules(run: Path) -> Path:
    summary = run / "audit" / "summary.json"
    s = json.loads(summary.read_text())
    assert s["verdict"]["rules"] and s["verdict"]["result"] == "pass", "the audit writes one rule per gate"
    s["verdict"]["rules"] = []
    summary.write_text(json.dumps(s))
    return summary


def test_compare_of_a_verdict_with_no_rules_is_exit_2_not_a_pass(runs):
    base, cand = runs("base"), runs("cand")
    summary = _no_rules(cand)
    code, out, err = oracle_main("compare", base, cand)
    assert code == 2, (out, err)
    assert f"{summary}: $.verdict.rules is empty" in err, err
    assert "PASS" not in out  # was "v1 on its own (gates strict): PASS — 0 gate(s) held", exit 0


def test_report_and_trend_of_a_verdict_with_no_rules_give_no_verdict(runs):
    base, cand = runs("base"), runs("cand")
    summary = _no_rules(cand)
    code, out, err = oracle_main("report", "--quiet", cand)
    assert code == 2 and f"{summary}: $.verdict.rules is empty" in err, (out, err)
    code, out, err = oracle_main("trend", base, cand)
    assert code == 2, (out, err)
    assert "no-verdict" in out and "$.verdict.rules is empty" in out, out


# ---- a16/a16b: store/ a dangling symbolic link -------------------------------------------------------------
def test_a_live_audit_names_a_dangling_store_link(runs, redis_server):
    run = runs("run")
    meta = json.loads((run / "run.json").read_text())  # the journal's own run, as a live audit requires
    (run / "run.json").write_text(json.dumps({**meta, "run": json.loads(next((run / "journal").glob("*.jsonl"))
                                                                        .read_text().splitlines()[0])["run"]}))
    fill_redis(redis_server.client(), _world())
    shutil.rmtree(run / "store")
    (run / "store").symlink_to(run.parent / "gone" / "store")
    code, out, err = oracle_main("audit", run, "--jobs", "1", "--store-url", redis_server.url)
    assert code == 2, (out, err)
    assert f"{run / 'store'} is a dangling symbolic link (to {run.parent / 'gone' / 'store'}" in err, err
    assert "store.reading" not in err and not (run / "store.reading").exists()


def test_a_reaudit_names_a_dangling_store_link(runs):
    run = runs("run")
    shutil.rmtree(run / "store")
    (run / "store").symlink_to(run.parent / "gone" / "store")
    code, out, err = oracle_main("audit", run, "--jobs", "1")
    assert code == 2, (out, err)
    assert f"{run / 'store'} is a dangling symbolic link" in err, err

