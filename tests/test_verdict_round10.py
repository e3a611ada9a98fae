"""Verdict hunt 10: what a verdict says when gates are off, when a run measured nothing or was cut short, and
limits and gates files read otherwise than written.

- gate_off_pass_held: `--gate off` (or `probe_amnesia=off`) on a bot that forgot every probe said "PASS — 13
  gate(s) held": a gate that is off judged nothing. Now "0 gate(s) held, 13 off (nothing judged)".
- gates_off_badge_vs_exit: the report's badge said NOTHING MEASURED for that PASS (exit 0), and FAIL for a run
  that measured nothing (exit 2). The badge now follows the exit code.
- trend_untrusted_exit0: `oracle trend` listed a night cut short (untrusted) or one that measured nothing
  (unmeasured), pooled its counts into its release's rates and exited 0. Now not pooled, exit 2 (as a night with
  no verdict) unless --allow-no-verdict.
- compare_html_untrusted_says_exit0: `oracle compare --html` of a NOT TRUSTED candidate exited 3 while its page
  said "A pipeline gating on this exits 0".
- unicode_digits / gate_huge_count: `probe_amnesia=１００`, `=1_000`, `=٣` were read as numbers, and a count no
  run reaches made a gate that could never fail.
- a gates file whose path holds '=' was read as name=limit.
Real audits of journaled runs with a store snapshot, synthetic audited run folders, the commands' main().
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oracle import compare, report, trend
from oracle.audit import audit_run
from oracle.report_data import load_run
from oracle.verdict import NO_PROBE_SENT, GateError, Limit, exit_code, headline, parse_gates, parse_limit
from support_oracle import TurnSpec, build_world, write_journal, write_snapshot
from support_report import synthetic

CUT_SHORT = {"user_exceptions": {"count": 2, "first": "KeyError: 'reply'"}}


def audited(run: Path, gates: str, forgot: bool = True, probes: bool = True, **meta) -> dict:
    """A journaled run (a bot that forgot every recall probe, or a script whose probes were never reached), its
    store snapshot and its audit under ``gates``: the summary."""
    last = [TurnSpec("probe", "ok", verdict_amnesia=forgot)] if probes else []
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), *last] for _ in range(6)], seed=5)
    write_journal(run, world.records)
    write_snapshot(run, world)
    start, end = min(r["sent"] for r in world.records), max(r["received"] or r["sent"] for r in world.records)
    (run / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "label": "v1", "start": start, "end": end, **meta}))
    return audit_run(run, gates=parse_gates(gates), jobs=1)


def badge(page: Path) -> tuple[str, str]:
    level, text = re.search(r'<div class="badge ([^"]*)">([^<]*)</div>', page.read_text()).groups()
    return level, " ".join(text.split())


# ---- 1. a gate that is off is counted off, never held ------------------------------------------------

@pytest.mark.parametrize("gates, said", [
    ("off", "PASS — 0 gate(s) held, 13 off (nothing judged)"),  # was "PASS — 13 gate(s) held"
    ("strict,probe_amnesia=off", "PASS — 12 gate(s) held, 1 off"),  # the forgotten probes' gate: off, not held
])
def test_a_gate_turned_off_is_counted_off_never_held(tmp_path, gates, said):
    summary = audited(tmp_path, gates)
    amnesia = next(r for r in summary["verdict"]["rules"] if r["gate"] == "probe_amnesia")
    assert amnesia["count"] == amnesia["total"] == 6 and amnesia["result"] == "off"
    assert headline(summary["verdict"]) == said and exit_code(summary["verdict"]) == 0


# ---- 2. the badge follows the exit code --------------------------------------------------------------

def test_the_badge_of_a_pass_with_gates_off_is_pass_and_of_a_run_that_measured_nothing_is_nothing_measured(
        tmp_path):
    off = tmp_path / "off"
    off.mkdir()
    audited(off, "off")  # exit 0: its badge said NOTHING MEASURED (probe_amnesia and stored_loss off)
    assert badge(report.render(off)) == ("ok", "PASS")
    assert report.shown_verdict(load_run(off)) == ("ok", "PASS", "0 gate(s) held, 13 off (nothing judged)")

    quiet = tmp_path / "quiet"  # the script has probes, none was sent: exit 2; its badge said FAIL
    quiet.mkdir()
    summary = audited(quiet, "strict", probes=False, script_probes=1)
    assert exit_code(summary["verdict"]) == 2
    assert badge(report.render(quiet)) == ("none", "NOTHING MEASURED")
    assert report.shown_verdict(load_run(quiet)) == ("none", "NOTHING MEASURED", NO_PROBE_SENT)


# ---- 3. trend: a night cut short or that measured nothing is listed, not pooled, exit 2 ----------------

def test_trend_lists_untrusted_and_unmeasured_nights_without_pooling_them_and_exits_2(tmp_path, capsys):
    base = synthetic(tmp_path / "a", label="v1", seed=1, ok_turns=2000)
    cut = synthetic(tmp_path / "b", label="v1", seed=2, ok_turns=3000)
    meta = json.loads((cut / "run.json").read_text())
    (cut / "run.json").write_text(json.dumps({**meta, "run": "b", "start": meta["start"] + 86400, **CUT_SHORT}))
    quiet = synthetic(tmp_path / "c", label="v1", seed=3, ok_turns=5000)
    meta = json.loads((quiet / "run.json").read_text())
    (quiet / "run.json").write_text(json.dumps({**meta, "run": "c", "start": meta["start"] + 2 * 86400}))
    summary = json.loads((quiet / "audit" / "summary.json").read_text())
    summary["verdict"] = {**compare.candidate_verdict(summary, compare_args()), "result": "fail",
                          "failed": [NO_PROBE_SENT]}  # as the audit writes it: exit 2
    (quiet / "audit" / "summary.json").write_text(json.dumps(summary))
    paths = [str(base), str(cut), str(quiet)]

    assert trend.main(paths) == 2  # was 0
    out, err = capsys.readouterr()
    listed = out.split("per release")[0]
    assert " untrusted " in listed and " unmeasured " in listed  # their rows, as before
    pooled = out.split("per release")[1].split("\n\n")[0]
    assert "(0/2000)" in pooled and "(0/10000)" not in pooled  # the release's rates: the night that held alone
    assert "not pooled (2 run(s)" in out and "Locust users raised 2 exception(s)" in out and NO_PROBE_SENT in out
    assert "b (" in err and "c (" in err and "untrusted" in err and "unmeasured" in err and "exit 2" in err

    html = tmp_path / "trend.html"
    assert trend.main([*paths, "--allow-no-verdict", "--html", str(html)]) == 0
    assert "not pooled into the release rates" in html.read_text()


def compare_args(gate=None):
    """The options compare.candidate_verdict reads, as the command's defaults."""
    import argparse

    return argparse.Namespace(gate=gate, max_probe_amnesia=None, max_stored_loss=None, max_crosstalk=None)


# ---- 4. compare --html of a NOT TRUSTED candidate says so, and exit 3 ------------------------------------

def test_the_compare_page_of_a_candidate_not_trusted_says_not_trusted_and_exit_3(tmp_path, capsys):
    base = synthetic(tmp_path / "a", label="v1", seed=1)
    cand = synthetic(tmp_path / "b", label="v2", seed=2)
    meta = json.loads((cand / "run.json").read_text())
    (cand / "run.json").write_text(json.dumps({**meta, **CUT_SHORT}))
    page = tmp_path / "compare.html"
    assert compare.main([str(base), str(cand), "--html", str(page)]) == 3
    assert "-> exit 3" in capsys.readouterr().out
    text = " ".join(page.read_text().split())
    assert "A pipeline gating on this exits 3" in text and "exits 0" not in text  # was "exits 0"
    assert "NOT TRUSTED: Locust users raised 2 exception(s)" in text
    assert badge(page) == ("warn", "no significant change · NOT TRUSTED")


# ---- 5. limits: ASCII digits only, and no count beyond any run ----------------------------------------

@pytest.mark.parametrize("limit", ["１００", "1_000", "٣", "1_0%", "０.5", "0.0_1"])
def test_a_limit_in_other_than_ascii_digits_is_refused_naming_the_item(limit):
    with pytest.raises(GateError, match=re.escape(f"--gate 'probe_amnesia={limit}': '{limit}' is not a limit")):
        parse_gates(f"probe_amnesia={limit}")  # were read as 100, 1000, 3, 10%, 50%, 1%


def test_a_gates_file_limit_in_other_than_ascii_digits_is_refused_with_its_line(tmp_path):
    file = tmp_path / "gates.yaml"
    file.write_text("profile: lenient\nerrors: 1_000\n", encoding="utf-8")
    with pytest.raises(GateError, match=re.escape(f"{file}:2: errors: '1_000' is not a limit")):
        parse_gates(str(file))


@pytest.mark.parametrize("text, why", [
    ("010", "errors: 010: write 10 (a leading 0 reads as octal in YAML 1.1: 010 is 8)"),
    ("!!float 1", "errors: the tag !!float is not read here (a limit is its text: 1 is a count, 1% or 0.01 a rate): "
                  "write '1' without it"),
    ("!!str 0.5", "errors: the tag !!str is not read here"),
])
def test_a_gates_file_limit_yaml_reads_otherwise_is_refused_with_its_line(tmp_path, text, why):
    """A plan refuses them; a gates file read their text, which YAML reads otherwise (input hunt 15)."""
    file = tmp_path / "gates.yaml"
    file.write_text(f"profile: lenient\nerrors: {text}\n", encoding="utf-8")
    with pytest.raises(GateError, match=re.escape(f"{file}:2: {why}")):
        parse_gates(str(file))
    file.write_text("errors: !!str 5%\nstored_loss: '1%'\ncrosstalk: !!int 3\nvanished: off\n")  # the same read
    assert parse_gates(str(file)).limits["errors"] == Limit(rate=0.05)


def test_a_count_no_run_reaches_is_refused_as_a_gate_that_could_never_fail():
    with pytest.raises(GateError, match=re.escape("'99999999999999999999' is a count above 1,000,000,000, more "
                                                  "than any run reaches: the gate could never fail (to turn it off, "
                                                  "--gate probe_amnesia=off)")):
        parse_gates("probe_amnesia=99999999999999999999")
    assert parse_limit("1000000000", "x", "errors") == Limit(count=10 ** 9)  # the largest allowed


# ---- 6. a gates file whose path holds '=' is the file ---------------------------------------------------

def test_a_gates_file_whose_path_holds_an_equals_sign_is_read_as_the_file(tmp_path):
    file = tmp_path / "g=v2.yaml"
    file.write_text("profile: lenient\nprobe_amnesia: 0\n")
    gates = parse_gates(str(file))  # was: unknown gate '/…/g'
    assert gates.limits["probe_amnesia"] == Limit(count=0) and gates.limits["stored_loss"] == Limit(rate=0.001)
    assert parse_gates(f"{file},errors=off").limits["errors"] == Limit()


# ---- a rate exactly at its limit -----------------------------------------------------------------------

def test_a_run_exactly_at_a_decimal_percent_limit_passes_however_it_is_written():
    """0.7% was parsed as 0.7 / 100, a float a hair below 0.007, so 7 failed probes of 1,000 FAILed '0.70% > allowed
    0.7%' where 0.007 PASSed: 122 of the 999 limits from 0.1% to 99.9% failed a run at them (verdict hunt 16)."""
    from oracle.verdict import evaluate

    observed = {"probe_amnesia": {"count": 7, "total": 1000}}
    for spec in ("probe_amnesia=0.7%", "probe_amnesia=0.007", "probe_amnesia=0.70%"):
        assert evaluate(observed, parse_gates(spec))["result"] == "pass", spec
    assert evaluate({"probe_amnesia": {"count": 8, "total": 1000}}, parse_gates("probe_amnesia=0.7%"))["result"] == "fail"
    at_limit = [(tenths, total) for tenths in range(1, 1000) for total in (1000, 2000, 10000)
                if not parse_gates(f"errors={tenths / 10:g}%").limits["errors"].allows(tenths * total // 1000, total)]
    assert at_limit == []
    just_over = [tenths for tenths in range(1, 1000)
                 if parse_gates(f"errors={tenths / 10:g}%").limits["errors"].allows(tenths * 10 + 1, 10000)]
    assert just_over == []
