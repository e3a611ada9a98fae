"""Bad-input round 14 (files): what a snapshot, a summary, outstanding.json, a plan and a script say of themselves.

- snapshot line ``"exists": false`` with its entries still in it: judged a vanished session (FAIL, exit 1), and the
  audit tables were replaced; now the snapshot is damaged (exit 2, file:line), on the text and the
  ``entries_as: json`` paths.
- a summary.json whose ``anomalies`` hold findings its ``observed`` counts none of (a PASS showing ``lost 5``):
  report and compare said PASS, exit 0.
- meta.json ``files`` (``../../../etc/passwd``, ``[]``), ``key_template`` without ``{session}``, ``shape: null``, and a
  line's ``entries_as: "xml"``, ``ttl: "5"``, ``type: "zset2"``: re-audited to PASS without a word.
- ``chaos heal RUN`` with chaos/outstanding.json a directory: a raw ``[Errno 21] Is a directory``.
- a plan's ``at: 1_0`` was 10 (YAML 1.1 drops the '_'), while a duration refuses '_'.
- a plan's ``name: [a]``, a script's ``name: 5``, ``chatter: [1, 2]`` and a NUL in a chatter line were accepted.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support_oracle import TurnSpec, build_world, oracle_main, write_journal, write_snapshot
from test_bad_input import assert_named

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

AGAIN = "--store-url"  # every snapshot refusal says how to read the store again


def specs(sessions: int = 6) -> list[list[TurnSpec]]:
    """Healthy conversations: every turn acknowledged and stored, every probe answered (a PASS)."""
    return [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok"), TurnSpec("chatter", "ok")]
            for _ in range(sessions)]


def _audited(run: Path, entries_as_json: bool) -> Path:
    from oracle.audit import audit_run

    world = build_world(specs(), seed=14)
    for r in world.records:
        r["run"] = run.name
    write_journal(run, world.records)
    write_snapshot(run, world, entries_as_json=entries_as_json)
    start, end = min(r["sent"] for r in world.records), max(r["received"] or r["sent"] for r in world.records)
    (run / "run.json").write_text(json.dumps({"run": run.name, "label": "v1", "start": start, "end": end}))
    audit_run(run, jobs=1)
    return run


@pytest.fixture(scope="module", params=["text", "json"])
def snapshot_run(request, tmp_path_factory):
    """A run audited from its store snapshot, written with its entries as text or as JSON (``entries_as``)."""
    return _audited(tmp_path_factory.mktemp(f"r14-{request.param}") / "run", request.param == "json")


def recorded(run: Path) -> dict:
    """What an audit recorded: its tables and the snapshot (a refusal must leave every byte)."""
    return {p: p.read_bytes() for d in (run / "audit", run / "store") for p in sorted(d.rglob("*")) if p.is_file()}


def reaudit(snapshot_run, tmp_path, capsys, damage) -> tuple[int, str, Path]:
    run = tmp_path / "run"
    shutil.copytree(snapshot_run, run)
    damage(run)
    before = recorded(run)
    code, _, err = oracle_main(capsys, "audit", run, "--jobs", "1")
    if code == 2:
        assert recorded(run) == before  # nothing recorded is replaced
    return code, err, run


def first_line_with_entries(run: Path) -> tuple[Path, int, dict]:
    """(file, 1-based line, decoded line) of the first snapshot line whose key exists and holds entries."""
    for path in sorted((run / "store").glob("sessions.*.jsonl")):
        for n, raw in enumerate(path.read_text().splitlines(), 1):
            line = json.loads(raw)
            if line["exists"] and line["entries"]:
                return path, n, line
    raise AssertionError("no snapshot line with entries")


def edit_line(run: Path, **changes) -> tuple[Path, int, dict]:
    path, n, line = first_line_with_entries(run)
    lines = path.read_text().splitlines()
    lines[n - 1] = json.dumps({**line, **changes})
    path.write_text("\n".join(lines) + "\n")
    return path, n, line


def test_the_undamaged_snapshot_re_audits_to_pass(snapshot_run, tmp_path, capsys):
    assert json.loads((snapshot_run / "audit" / "summary.json").read_text())["verdict"]["result"] == "pass"
    code, err, _ = reaudit(snapshot_run, tmp_path, capsys, lambda run: None)
    assert code == 0, err


# ---- 1. exists: false with entries ----------------------------------------------------------------------------------
def test_a_snapshot_line_saying_exists_false_beside_its_entries_is_a_damaged_snapshot(snapshot_run, tmp_path, capsys):
    """It was judged a vanished session: FAIL (exit 1), and the earlier PASS tables were replaced."""
    where = {}

    def damage(run):
        where["path"], where["n"], line = edit_line(run, exists=False)
        where["count"] = len(line["entries"])

    code, err, _ = reaudit(snapshot_run, tmp_path, capsys, damage)
    assert code == 2, err
    assert_named(err, f"{where['path']}:{where['n']}: ",
                 f"exists is false, but it holds {where['count']} entries): the snapshot is damaged")
    assert AGAIN in err


def test_a_snapshot_line_saying_type_none_beside_exists_true_is_a_damaged_snapshot(snapshot_run, tmp_path, capsys):
    """The same contradiction the other way round was re-audited as a PASS, unwarned (input hunt 16)."""
    where = {}

    def damage(run):
        where["path"], where["n"], _ = edit_line(run, type="none")

    code, err, _ = reaudit(snapshot_run, tmp_path, capsys, damage)
    assert code == 2, err
    assert_named(err, f"{where['path']}:{where['n']}: ", '(type is "none", no such key, but exists is true): the snapshot is damaged')
    assert AGAIN in err


@pytest.mark.parametrize("entries_as", ["text", "json"])
def test_snapshot_session_refuses_exists_false_with_entries_on_both_paths(entries_as):
    from oracle.snapshot import snapshot_session

    line = {"session": "gf0000000000000001", "key": "k", "exists": False, "ttl": None, "type": "none",
            "entries": [{"type": "human", "data": {"content": "hi"}}] if entries_as == "json" else ["hi", "there"]}
    if entries_as == "json":
        line["entries_as"] = "json"
    with pytest.raises(ValueError, match="exists is false, but it holds"):
        snapshot_session(json.dumps(line).encode())
    assert snapshot_session(json.dumps({**line, "entries": []}).encode()).exists is False  # a missing key: fine


# ---- 3. meta.json and line fields -----------------------------------------------------------------------------------
@pytest.mark.parametrize("key, value, fragment", [
    ("files", ["../../../etc/passwd"], "`$.files` is ['../../../etc/passwd'], not the snapshot's 16 session files"),
    ("files", [], "`$.files` is [], not the snapshot's 16 session files"),
    ("key_template", "abc", "`$.key_template` 'abc' does not contain {session}"),
    ("shape", None, "`$.shape` is null"),
], ids=["files-outside", "files-empty", "template-no-session", "shape-null"])
def test_a_meta_json_field_no_goldfish_writes_is_refused_naming_it(snapshot_run, tmp_path, capsys, key, value,
                                                                   fragment):
    def damage(run):
        meta = json.loads((run / "store" / "meta.json").read_text())
        meta[key] = value
        (run / "store" / "meta.json").write_text(json.dumps(meta))

    code, err, run = reaudit(snapshot_run, tmp_path, capsys, damage)
    assert code == 2, err
    assert_named(err, f"{run / 'store' / 'meta.json'}: ", fragment)
    assert AGAIN in err


@pytest.mark.parametrize("changes, fragment", [
    ({"entries_as": "xml"}, "Invalid enum value 'xml' - at `$.entries_as`"),
    ({"ttl": "5"}, "Expected `int | null`, got `str` - at `$.ttl`"),
    ({"type": "zset2"}, "Invalid enum value 'zset2' - at `$.type`"),
], ids=["entries-as-xml", "ttl-text", "type-unknown"])
def test_a_snapshot_line_field_of_a_value_no_reader_writes_is_refused_at_its_line(snapshot_run, tmp_path, capsys,
                                                                                 changes, fragment):
    where = {}

    def damage(run):
        where["path"], where["n"], _ = edit_line(run, **changes)

    code, err, _ = reaudit(snapshot_run, tmp_path, capsys, damage)
    assert code == 2, err
    assert_named(err, f"{where['path']}:{where['n']}: not a snapshot line: ", fragment)


def test_snapshot_session_checks_the_fields_on_its_text_path():
    """A line read the exact way (entries as text) was taken with ``ttl: "5"`` as it was."""
    from oracle.snapshot import snapshot_session

    line = {"session": "gf0000000000000001", "key": "k", "exists": True, "ttl": "5", "type": "list",
            "entries": ["hi"]}
    with pytest.raises(ValueError, match=r"\$\.ttl"):
        snapshot_session(json.dumps(line).encode())
    assert snapshot_session(json.dumps({**line, "ttl": 5}).encode()).ttl == 5


# ---- 2. a summary whose anomalies contradict its counts -------------------------------------------------------------
@pytest.fixture(scope="module")
def audited_pass(tmp_path_factory):
    return _audited(tmp_path_factory.mktemp("r14-summary") / "run", False)


def test_a_pass_summary_holding_anomalies_no_count_observed_is_refused_by_report_and_compare(audited_pass, tmp_path,
                                                                                            capsys):
    run, base = tmp_path / "run", tmp_path / "base"
    shutil.copytree(audited_pass, run)
    shutil.copytree(audited_pass, base)
    summary_file = run / "audit" / "summary.json"
    summary = json.loads(summary_file.read_text())
    assert summary["verdict"]["result"] == "pass" and not summary["anomalies"]
    summary["anomalies"] = {"lost": 5}
    summary_file.write_text(json.dumps(summary))
    for argv in (("report", run), ("compare", base, run)):
        code, out, err = oracle_main(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert_named(err, str(summary_file), "$.anomalies holds findings (lost 5) but every count of $.observed is "
                                             "0, so its verdict judged none of them: the summary disagrees with itself")


def test_a_pass_that_a_gate_allows_with_its_anomalies_is_still_reported(tmp_path, capsys):
    """``--gate lost=...``: a PASS may hold anomalies its gates allow; only a contradiction is refused."""
    from oracle.audit import audit_run
    from oracle.verdict import parse_gates

    run = tmp_path / "run"
    world = build_world(specs(), seed=14)
    for r in world.records:
        r["run"] = run.name
    lost = next(s for s in world.order if len(world.stored[s]) > 2)
    world.stored[lost] = world.stored[lost][:-2]  # the last exchange never stored
    write_journal(run, world.records)
    write_snapshot(run, world)
    (run / "run.json").write_text(json.dumps({"run": run.name, "label": "v1"}))
    audit_run(run, jobs=1, gates=parse_gates("strict,stored_loss=5,unanswered=5"))
    summary = json.loads((run / "audit" / "summary.json").read_text())
    assert summary["verdict"]["result"] == "pass" and summary["anomalies"], summary["anomalies"]
    code, out, err = oracle_main(capsys, "report", run)
    assert code == 0, err


# ---- 4. outstanding.json a directory --------------------------------------------------------------------------------
def test_heal_with_outstanding_json_a_directory_explains_it(tmp_path, capsys):
    from chaos.__main__ import main

    path = tmp_path / "run" / "chaos" / "outstanding.json"
    path.mkdir(parents=True)
    assert main(["heal", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert_named(err, f"{path}: not a regular file but a directory: ",
                 "the list of faults still in force cannot be read, so none can be called healed")
    assert "Errno" not in err and path.is_dir()


# ---- 5. '_' in a plan's bare number ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fault, shown, meant", [
    ("{kind: pause, target: bot, at: 1_0, duration: 1}", "1_0", "10"),
    ("{kind: pause, target: bot, at: 5, duration: 2_0}", "2_0", "20"),
    ("{kind: pause, target: bot, every: 10, until: 1_00, duration: 1}", "1_00", "100"),
    ("{kind: pause, target: bot, at: 1_0.5, duration: 1}", "1_0.5", "10.5"),
], ids=["at", "duration", "until", "float"])
def test_a_plan_number_with_an_underscore_is_refused_as_a_duration_is(tmp_path, fault, shown, meant):
    from chaos.plan import PlanError, load_plan

    path = tmp_path / "plan.yaml"
    path.write_text(f"faults:\n  - {fault}\n")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert_named(str(info.value), f"{path}:2: {shown}: write {meant} ", "without '_'")


def test_a_plan_of_plain_numbers_still_loads(tmp_path):
    from chaos.plan import load_plan

    path = tmp_path / "plan.yaml"
    path.write_text("name: '5'\nduration: 1000\nfaults:\n  - {kind: pause, target: bot, at: 10, duration: 1.5}\n")
    plan = load_plan(path)
    assert plan.name == "5" and plan.duration == 1000 and plan.faults[0].at == 10


# ---- 6. plain values of the wrong type ------------------------------------------------------------------------------
@pytest.mark.parametrize("top, fragment", [
    ("name: [a]", "name: must be text, not a list"),
    ("name: {a: 1}", "name: must be text, not a mapping"),
    ('name: "a\\0b"', "name: holds a NUL character"),
], ids=["list", "mapping", "nul"])
def test_a_plan_name_that_is_no_text_is_refused(tmp_path, top, fragment):
    from chaos.plan import PlanError, load_plan

    path = tmp_path / "plan.yaml"
    path.write_text(f"{top}\nfaults:\n  - {{kind: pause, target: bot, at: 5, duration: 1}}\n")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert_named(str(info.value), f"{path}:1: ", fragment)


STEPS = "steps:\n  - plant: order number\n  - probe: order number\n"


@pytest.mark.parametrize("text, line, fragment", [
    ("name: 5\n" + STEPS, 1, "name: must be text, not a number (quote it: '5')"),
    ("name: [a]\n" + STEPS, 1, "name: must be text, not a list"),
    ("chatter: [1, 2]\nsteps:\n  - chatter\n", 1, "chatter: must be a line of text, not a number (quote it: '1')"),
    ("chatter:\n  - hello there\n  - true\nsteps:\n  - chatter\n", 3, "chatter: must be a line of text, not true/false"),
    ('steps:\n  - chatter: "a\\0b"\n', 2, "steps[0].chatter: 'a\\x00b' holds a NUL character"),
    ('chatter: ["a\\0b"]\nsteps:\n  - chatter\n', 1, "chatter: 'a\\x00b' holds a NUL character"),
], ids=["name-number", "name-list", "chatter-numbers", "chatter-bool", "step-chatter-nul",
        "chatter-nul"])
def test_a_script_value_of_the_wrong_type_is_refused_at_its_line(tmp_path, text, line, fragment):
    from locustfiles.script import ScriptError, load_script

    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScriptError) as info:
        load_script(path)
    assert_named(str(info.value), f"{path}:{line}: ", fragment)


def test_quoted_script_values_still_load(tmp_path):
    from locustfiles.script import load_script

    path = tmp_path / "s.yaml"
    path.write_text("name: '5'\nchatter: ['1', '2']\n" + STEPS + "  - chatter: 3\n")
    script = load_script(path)  # a step's chatter is the exact line sent: `12345` is its text
    assert script.name == "5" and script.chatter == ("1", "2") and script.steps[-1].text == "3"
