"""The run report: self-contained HTML with embedded charts, terminal summary, bad input."""
from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from oracle import report
from support_report import synthetic

REPO = Path(__file__).resolve().parents[1]
CHART_NAMES = ["timeline", "amnesia_vs_throughput", "attribution"]
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|<link\b|<script\b[^>]*\bsrc=|url\(\s*["']?(?:https?:)?//""",
                      re.I)
DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope="module")
def amnesic_run(tmp_path_factory) -> Path:
    """60/2000 lost, 25/400 failed probes, 3 cross-talk entries, three faults, three load steps; rendered once."""
    run = synthetic(tmp_path_factory.mktemp("runs") / "run-amnesic", label="v1.4.0", lost=60, probes_failed=25,
                    crosstalk=3)
    report.render(run)
    return run


def test_report_embeds_every_chart_and_references_nothing_external(amnesic_run):
    html = (amnesic_run / "report.html").read_text()
    uris = DATA_URI.findall(html)
    assert len(uris) == len(CHART_NAMES)
    for name, uri in zip(CHART_NAMES, uris):
        assert base64.b64decode(uri) == (amnesic_run / "charts" / f"{name}.png").read_bytes()
    assert not EXTERNAL.search(html), EXTERNAL.search(html)
    assert "<style>" in html


def test_report_shows_the_headline_numbers_and_verdict(amnesic_run):
    html = (amnesic_run / "report.html").read_text()
    for text in ("v1.4.0", ">FAIL<", "3.00%", "60/2000", "6.25%", "25/400", "1.50%", "3/200",
                 "[2.34%, 3.84%]", "http://127.0.0.1:8080", "support-chat", "kind: restart", "spawn_rate"):
        assert text in html, text
    # counts per anomaly class
    assert re.search(r'href="#class-lost">lost</a></td><td class="num">60<', html)
    # the verdict: every gate with its limit, observation and result
    assert re.search(r'<code>stored_loss</code>.*?<td class="num">0</td>\s*<td class="num">60/2000</td>.*?>fail<',
                     html, re.S)
    assert re.search(r'<code>reordered</code>.*?>not measured<', html, re.S)  # an older summary: no observation


def test_every_shown_anomaly_has_a_linkable_anchor(amnesic_run):
    html = (amnesic_run / "report.html").read_text()
    ids = re.findall(r'<div class="anomaly" id="([^"]+)"', html)
    assert len([i for i in ids if i.startswith("lost-")]) == report.EXAMPLES_PER_CLASS
    assert len([i for i in ids if i.startswith("crosstalk-")]) == 3
    for i in ids:
        assert f'href="#{i}"' in html
    assert "was acknowledged (HTTP 200) but its user entry is not in the stored history" in html


def test_chart_pngs_are_real_pictures(amnesic_run):
    for name in CHART_NAMES:
        png = amnesic_run / "charts" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 10_000, name
        pixels = imread(png)
        assert pixels.shape[0] > 300 and pixels.shape[1] > 800
        assert float(np.std(pixels[..., :3])) > 0.05, f"{name} looks blank"


def test_terminal_summary_is_a_compact_table(amnesic_run):
    text = report.terminal_summary(amnesic_run)
    assert "verdict: FAIL" in text
    assert "FAIL          stored_loss: 60 acknowledged turns lost by the store of 2,000" in text
    assert re.search(r"stored loss rate\s+3\.00%\s+\[2\.34%, 3\.84%\]\s+60/2000", text)
    assert re.search(r"probe amnesia rate\s+6\.25%", text)
    assert "failed requests 17 (refused 12, indeterminate 5)" in text
    assert "faults: kill x1, pause x1, restart x1" in text
    assert len(text.splitlines()) < 35


def test_copied_run_folder_renders_the_same_numbers(amnesic_run, tmp_path):
    copy = tmp_path / "elsewhere" / amnesic_run.name
    shutil.copytree(amnesic_run, copy)
    (copy / "report.html").unlink()
    shutil.rmtree(copy / "charts")
    report.render(copy)
    strip = lambda h: DATA_URI.sub("", h)  # noqa: E731
    assert strip((copy / "report.html").read_text()) == strip((amnesic_run / "report.html").read_text())
    assert report.terminal_summary(copy) == report.terminal_summary(amnesic_run)
    for name in CHART_NAMES:
        assert (copy / "charts" / f"{name}.png").stat().st_size > 10_000


def test_the_verdict_heads_the_report(tmp_path):
    run = synthetic(tmp_path / "run", lost=60)
    html = report.render(run).read_text()
    assert '<div class="badge fail">FAIL</div>' in html
    assert "60 acknowledged turns lost by the store of 2,000 acknowledged turns (3.00%" in html
    assert "verdict: FAIL - stored_loss: 60 acknowledged turns lost by the store" in report.terminal_summary(run)


def test_run_without_chaos_steps_or_probes_still_renders(tmp_path):
    run = synthetic(tmp_path / "quiet", chaos=False, steps=False, probes=0, lost=0)
    page = report.render(run)
    html = page.read_text()
    assert len(DATA_URI.findall(html)) == len(CHART_NAMES)
    assert "no chaos timeline" in html.lower() and "No load steps" in html
    assert '<div class="badge ok">PASS</div>' in html
    assert "n/a" in report.terminal_summary(run)  # probe amnesia with n=0


def test_empty_audit_tables_render(tmp_path):
    """A run that answered nothing: header-only CSVs, no anomalies, n=0 everywhere."""
    run = synthetic(tmp_path / "empty", ok_turns=0, probes=0, errors=0, info=0, chaos=False, steps=False)
    (run / "audit" / "windows.csv").write_text("start,end,step,acked,throughput,latency_p50,latency_p95,"
                                               "latency_p99,errors,probes,probes_failed,lost,crosstalk,anomalies,faults\n")
    (run / "audit" / "anomalies.jsonl").write_text("")
    html = report.render(run).read_text()
    assert "NOTHING MEASURED" in html
    assert len(DATA_URI.findall(html)) == len(CHART_NAMES)


def test_malformed_anomaly_lines_are_reported_and_a_torn_last_line_skipped(tmp_path):
    run = synthetic(tmp_path / "torn", lost=2)
    anomalies = run / "audit" / "anomalies.jsonl"
    good = anomalies.read_text().splitlines()
    anomalies.write_text(good[0] + "\nnot json\n" + good[1] + '\n{"id": "lost-3", "cla')
    html = report.render(run).read_text()
    assert 'id="lost-1"' in html and 'id="lost-2"' in html and 'id="lost-3"' not in html
    assert f"{anomalies}:2: not JSON: " in html and "skipped: &#39;not json&#39;" in html
    assert ":4:" not in report.terminal_summary(run)


def test_folder_that_is_not_a_run_exits_2(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert report.main([str(tmp_path)]) == 2
    assert f"{tmp_path}: not a run folder (it has neither run.json nor journal/)" in capsys.readouterr().err
    assert report.main([str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert report.main([str(tmp_path / "notes.txt")]) == 2
    assert f"{tmp_path / 'notes.txt'}: not a folder" in capsys.readouterr().err
    (tmp_path / "loop").symlink_to("loop")  # was "no such folder" (input hunt 16)
    assert report.main([str(tmp_path / "loop")]) == 2
    assert f"{tmp_path / 'loop'}: a symbolic link that leads nowhere" in capsys.readouterr().err


def test_unaudited_run_says_to_audit_first(tmp_path, capsys):
    run = synthetic(tmp_path / "raw", audited=False)
    assert report.main([str(run)]) == 2
    err = capsys.readouterr().err
    assert f"run `python -m oracle audit {run}` first, or pass --audit" in err
    assert not (run / "report.html").exists()


def test_cli_renders_and_prints_the_summary(tmp_path):
    run = synthetic(tmp_path / "cli", lost=5)
    done = subprocess.run([sys.executable, "-m", "oracle", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "stored loss rate" in done.stdout and f"report: {run / 'report.html'}" in done.stdout
    assert (run / "report.html").stat().st_size > 50_000


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium is not installed: no headless browser check")
def test_report_opens_offline_in_headless_chromium(amnesic_run, tmp_path):
    """Open report.html from disk in real headless Chromium with networking off; screenshot and DOM."""
    page = (amnesic_run / "report.html").as_uri()
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}"]
    shot = tmp_path / "shot.png"
    subprocess.run(base + [f"--screenshot={shot}", "--window-size=1400,3000", page], capture_output=True,
                   timeout=120, check=False)
    assert shot.exists(), "chromium wrote no screenshot"
    pixels = imread(shot)
    assert pixels.shape[:2] == (3000, 1400)
    assert float(np.std(pixels[..., :3])) > 0.05, "screenshot is blank"
    # a copy with a probe script (the report itself has none): did every image decode, was anything fetched?
    probe = tmp_path / "probe.html"
    probe.write_text((amnesic_run / "report.html").read_text().replace("</body>", PROBE_SCRIPT + "</body>"))
    dom = subprocess.run(base + ["--virtual-time-budget=5000", "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    imgs = re.findall(r'<img class="chart"[^>]*src="data:image/png;base64,', dom)
    assert len(imgs) == len(CHART_NAMES)
    assert 'id="lost-1"' in dom
    body = re.search(r'<body data-img-widths="([^"]*)" data-resources="([^"]*)"', dom)
    assert body, "the probe script did not run"
    widths = [int(w) for w in body.group(1).split(",")]
    assert len(widths) == len(CHART_NAMES) and min(widths) > 800, widths  # every chart decoded
    assert body.group(2) == "", f"the page fetched resources: {body.group(2)}"


PROBE_SCRIPT = """<script>window.addEventListener("load", () => {
  document.body.setAttribute("data-img-widths",
    [...document.images].map(i => i.complete ? i.naturalWidth : -1).join(","));
  document.body.setAttribute("data-resources",
    performance.getEntriesByType("resource").map(r => r.name).join(" "));
});</script>"""


@pytest.mark.slow
def test_report_renders_what_the_real_audit_writes(tmp_path, capsys):
    """End to end with the oracle's own audit (--audit) on a journal + store snapshot, with a fault."""
    import json
    import random

    audit = pytest.importorskip("oracle.audit", reason="oracle.audit is not available")
    assert audit.audit_run  # the seam report --audit calls
    from support_oracle import TurnSpec, build_world, inject, write_journal, write_snapshot

    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok", verdict_amnesia=i % 7 == 0),
              TurnSpec("chatter", "info"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok")]
             for i in range(40)]
    world = build_world(specs, seed=11)
    rng = random.Random(11)
    for session in world.order[:4]:
        inject(world, session, "lost", rng)
    run = tmp_path / "run-real"
    write_journal(run, world.records, shards=2)
    write_snapshot(run, world)
    start = min(r["sent"] for r in world.records)
    end = max(r["received"] or r["sent"] for r in world.records)
    (run / "run.json").write_text(json.dumps({
        "run": world.records[0]["run"], "label": "refbot-correct", "target": "http://127.0.0.1:9", "options": {"users": 4},
        "plan": None, "plan_text": None, "script": "support-chat", "script_sha": "abc", "start": start, "end": end,
        "versions": {}}))
    mid = (start + end) / 2
    (run / "chaos.jsonl").write_text("".join(json.dumps(
        {"fault": "f1#1", "kind": "kill", "target": "bot", "instance": "bot-1", "backend": "local", "event": e,
         "time": t, "outcome": "ok", "error": None, "params": {}}) + "\n" for e, t in (("apply", start + 1),
                                                                                      ("recover", mid))))
    assert report.main([str(run)]) == 2  # not audited yet
    capsys.readouterr()
    assert report.main([str(run), "--audit"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((run / "audit" / "summary.json").read_text())
    lost = summary["metrics"]["stored_loss"]
    assert lost["count"] >= 1
    assert re.search(rf"stored loss rate\s+\S+%\s+\[.*\]\s+{lost['count']}/{lost['total']}", out)
    html = (run / "report.html").read_text()
    assert f"{lost['count']}/{lost['total']}" in html
    assert len(DATA_URI.findall(html)) == len(CHART_NAMES)
    findings = [json.loads(line) for line in (run / "audit" / "anomalies.jsonl").read_text().splitlines()]
    for finding in findings[: report.EXAMPLES_PER_CLASS]:
        if finding["class"] == "lost":
            assert f'id="{report.anchor(finding["id"])}"' in html
    assert "during kill" in html


def test_audit_flag_on_a_run_without_store_snapshot_explains(tmp_path, capsys):
    pytest.importorskip("oracle.audit", reason="oracle.audit is not available")
    run = synthetic(tmp_path / "raw", audited=False)
    assert report.main([str(run), "--audit"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run}: the audit failed:") and "snapshot" in err


def test_fault_timeline_pairs_applies_and_recovers(tmp_path):
    """Open-ended faults last to the end of the run; an apply that failed is reported, not shaded."""
    import json

    from oracle.report_data import load_run

    run = synthetic(tmp_path / "faults")
    with open(run / "chaos.jsonl", "a") as f:
        f.write(json.dumps({"fault": "f4#1", "kind": "pause", "target": "bot", "instance": "bot-3",
                            "backend": "local", "event": "apply", "time": 1_700_000_100.0, "outcome": "error",
                            "error": "no such process", "params": {}}) + "\n")
    data = load_run(run)
    assert list(data.faults["fault"]) == ["f1#1", "f2#1", "f3#1"]
    restart = data.faults.iloc[2]
    assert bool(restart["open"]) and restart["end"] == data.run["end"]
    assert data.faults.iloc[0]["end"] - data.faults.iloc[0]["start"] == 15.0
    html = report.render(run).read_text()
    assert "chaos: fault f4#1 (pause on bot-3) failed to apply: no such process" in html
    assert "(not recovered: end of run)" in html


def test_report_links_locusts_own_report_when_the_run_has_it(tmp_path):
    run = synthetic(tmp_path / "run")
    assert 'href="locust/report.html"' not in report.render(run).read_text()
    (run / "locust").mkdir()
    for name in ("report.html", "requests.csv"):
        (run / "locust" / name).write_text("x")
    html = report.render(run).read_text()
    assert html.count('href="locust/report.html"') >= 2 and 'href="locust/requests.csv"' in html
    assert not EXTERNAL.search(html)


def test_pooled_windows_rest_on_enough_probes_and_never_mix_faults_or_steps(tmp_path):
    from oracle.charts import pool_windows
    from oracle.report_data import load_run

    data = load_run(synthetic(tmp_path / "run", probes_failed=25, lost=60))
    pooled = pool_windows(data.windows, "probes", 20)
    assert pooled["probes"].sum() == data.windows["probes"].sum() and pooled["windows"].sum() == len(data.windows)
    assert len(pooled) < len(data.windows) / 3
    for point in pooled.itertuples():
        inside = data.windows[(data.windows["start"] >= point.start) & (data.windows["end"] <= point.end)]
        assert len(inside) == point.windows and inside["faults"].nunique() == 1 and inside["step"].nunique() == 1
        # below the minimum only when the whole run of such windows has fewer (a short fault, a step's tail)
        assert point.probes >= 20 or point.windows == len(inside)


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium is not installed: no headless browser check")
def test_tables_fit_their_cards_at_1280_px(tmp_path):
    """The attribution table with every metric (13 columns before) and the breakdown tables fit their cards
    in a 1,280 px wide window: no card scrolls sideways."""
    import json

    run = synthetic(tmp_path / "r", lost=60, probes_failed=25, crosstalk=3)  # run id "r", as window_journal's
    summary = json.loads((run / "audit" / "summary.json").read_text())
    for row in summary["by_fault"] + [summary["baseline"]]:
        row["lost_after"], row["charged"] = {"count": 12, "total": 1234}, 12
    summary["by_fault"][0]["probe_amnesia"]["above_baseline"] = True
    (run / "audit" / "summary.json").write_text(json.dumps(summary))
    from test_breakdown import window_journal

    window_journal(run, k=3, replicas=True)
    html = report.render(run).read_text()
    assert 'id="breakdown-distance_turns"' in html and 'id="charts-attribution"' in html
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", OVERFLOW_SCRIPT + "</body>"))
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'p'}",
                          "--window-size=1280,3000", "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = re.search(r'data-sections="(\d+)" data-overflow="([^"]*)"', dom)
    assert found, "the probe script did not run"
    assert int(found.group(1)) >= 8 and found.group(2) == "", f"cards that scroll sideways: {found.group(2)}"


OVERFLOW_SCRIPT = """<script>window.addEventListener("load", () => {
  const all = [...document.querySelectorAll("section")];
  const wide = all.filter(s => s.scrollWidth > s.clientWidth + 1).map(s => `${s.id}:${s.scrollWidth}>${s.clientWidth}`);
  document.body.setAttribute("data-sections", all.length);
  document.body.setAttribute("data-overflow", wide.join(","));
});</script>"""


@pytest.mark.parametrize("content", [b"{}", b"[]", b'{"metrics": [], "turns": {}, "observed": {}, "verdict": {}}',
                                     b'{"metrics": {}, "turns": "x", "observed": {}, "verdict": 3}', b"\x80garbage"])
def test_a_damaged_summary_is_exit_2_naming_it_never_a_report(tmp_path, capsys, content):
    """A hand-edited or truncated audit/summary.json must not render a report that looks like a verdict."""
    from oracle import compare

    run = synthetic(tmp_path / "run")
    (run / "audit" / "summary.json").write_bytes(content)
    assert report.main([str(run)]) == 2
    assert compare.main([str(run), str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'audit' / 'summary.json'}" in err and "Traceback" not in err
    assert not (run / "report.html").exists()


def _first_line_edited(path: Path, edit) -> None:
    import json

    lines = path.read_text().splitlines()
    lines[0] = edit(json.loads(lines[0]))
    path.write_text("\n".join(lines) + "\n")


def _window_edited(path: Path, column: str, value: str, row: int = 0) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[row + 1].split(",")
    cells[header.index(column)] = value
    lines[row + 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


DAMAGED_REPORT_INPUTS = [
    ("window-start-a-word", lambda r: _window_edited(r / "audit" / "windows.csv", "start", "noon"),
     "audit/windows.csv:2: start 'noon' is not a number; the window is left out"),
    ("window-acked-a-word", lambda r: _window_edited(r / "audit" / "windows.csv", "acked", "x"),
     "audit/windows.csv:2: acked 'x' is not a number"),
    ("window-start-infinite", lambda r: _window_edited(r / "audit" / "windows.csv", "start", "inf"),
     "audit/windows.csv:2: not a time span after the window before it"),
    ("window-out-of-order", lambda r: _window_edited(r / "audit" / "windows.csv", "start", "1", row=3),
     "audit/windows.csv:5: not a time span after the window before it"),
    ("windows-ragged", lambda r: (r / "audit" / "windows.csv").write_text("start,end\n1,2\n3,4,5,6\n"),
     "audit/windows.csv: unreadable (Error tokenizing data"),
    ("windows-missing-columns", lambda r: (r / "audit" / "windows.csv").write_text("start,end\n1,2\n"),
     "audit/windows.csv: no column step, acked"),
    ("anomaly-time-empty", lambda r: _first_line_edited(r / "audit" / "anomalies.jsonl",
                                                         lambda a: __import__("json").dumps({**a, "time": ""})),
     "audit/anomalies.jsonl:1: Expected `float | null`, got `str` - at `$.time`"),
    ("anomaly-session-a-list", lambda r: _first_line_edited(r / "audit" / "anomalies.jsonl",
                                                             lambda a: __import__("json").dumps({**a, "session": [1]})),
     "audit/anomalies.jsonl:1: Expected `str | null`, got `array` - at `$.session`"),
    ("run-options-a-list", lambda r: (r / "run.json").write_text('{"options": [1], "versions": "x", "label": [2]}'),
     "run.json: options [1] is not an object; left out"),
    ("chaos-apply-at-time-0", lambda r: _first_line_edited(r / "chaos.jsonl",
                                                            lambda a: __import__("json").dumps({**a, "time": 0})),
     None),
]


@pytest.mark.parametrize("name, damage, warning", DAMAGED_REPORT_INPUTS, ids=[d[0] for d in DAMAGED_REPORT_INPUTS])
def test_a_damaged_audit_file_is_a_warning_naming_file_and_line_and_the_report_still_renders(
        name, damage, warning, amnesic_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(amnesic_run, run)
    damage(run)
    done = subprocess.run([sys.executable, "-m", "oracle", "report", str(run)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    html = (run / "report.html").read_text()
    if warning is not None:
        from html import unescape
        assert f"{run}/{warning}" in unescape(html), [w for w in re.findall(r"<li>warning: ([^<]*)", html)]
    assert len(DATA_URI.findall(html)) == len(CHART_NAMES)


def test_a_damaged_breakdown_is_computed_again_from_the_journal(amnesic_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(amnesic_run, run)
    good = (run / "audit" / "breakdown.json").read_text()
    for damaged in ('{"probes": 1, "failed": 0, "replicas": false, "cliff": true, "tables": []}',
                    '{"probes": 1, "failed": 0, "replicas": false, "cliff": null, "tables": [{"key": "a"}]}', "[1]"):
        (run / "audit" / "breakdown.json").write_text(damaged)
        done = subprocess.run([sys.executable, "-m", "oracle", "report", str(run)], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        html = (run / "report.html").read_text()  # the warning is the report's, naming the file and the field
        assert f"warning: {run / 'audit' / 'breakdown.json'}: " in html and "computed again from the journal" in html
        assert (run / "audit" / "breakdown.json").read_text() == good


def test_the_report_keeps_the_earliest_examples_of_each_class_in_one_pass(tmp_path):
    """A soak whose store lost everything writes millions of anomaly records: the report reads them once and
    keeps the earliest EXAMPLES_PER_CLASS of each class (ties in file order), their counts and the times of the
    classes windows.csv does not count, not every record."""
    import json
    import random

    from oracle.report_data import EXAMPLES_PER_CLASS, read_anomalies

    rng = random.Random(7)
    records = [{"id": f"{cls}-{i}", "class": cls, "time": float(rng.randrange(50)), "session": "s", "turn": i}
               for i in range(2000) for cls in ("lost", "reordered", "foreign")]
    rng.shuffle(records)
    path = tmp_path / "anomalies.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    got = read_anomalies(path, [])
    for cls in ("lost", "reordered", "foreign"):
        mine = [r for r in records if r["class"] == cls]
        assert got.examples[cls] == sorted(mine, key=lambda r: r["time"])[:EXAMPLES_PER_CLASS]
        assert got.counts[cls] == len(mine)
    assert sorted(got.other_times) == sorted(r["time"] for r in records if r["class"] == "reordered")


SUMMARY_DAMAGE = [("throughput", "x", "at `$.throughput`"), ("latency", [1], "at `$.latency`"),
                  ("by_fault", [1], "at `$.by_fault[0]`"), ("problems_total", "x", "at `$.problems_total`"),
                  ("anomalies", {"lost": "x"}, "at `$.anomalies[...]`")]


@pytest.mark.parametrize("field, value, where", SUMMARY_DAMAGE, ids=[d[0] for d in SUMMARY_DAMAGE])
def test_a_damaged_summary_is_exit_2_naming_the_field_in_report_and_compare(field, value, where, amnesic_run,
                                                                            tmp_path):
    import json

    run = tmp_path / "run"
    shutil.copytree(amnesic_run, run)
    summary = json.loads((run / "audit" / "summary.json").read_text())
    (run / "audit" / "summary.json").write_text(json.dumps({**summary, field: value}))
    for argv in (["report", str(run)], ["compare", str(amnesic_run), str(run)]):
        done = subprocess.run([sys.executable, "-m", "oracle", *argv], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 2 and f"{run / 'audit' / 'summary.json'}: " in done.stderr, done.stderr[-2000:]
        assert where in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
