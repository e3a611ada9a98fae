"""The detection matrix: goldfish catches every known memory bug, and a correct bot comes out clean.

One end-to-end run per row of tests/matrix_rows.py: the real embedded stack in the row's
mode, a short headless Locust run of chat.py with the row's script and chaos plan, the
end-of-run heal + audit, then the row's signature checked against audit/summary.json.
Observed figures go to results/matrix/<row>.json for scripts/matrix_table.py (the README).
"""
from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import pytest

from matrix_rows import ROWS, Row
from oracle import telemetry
from support_locust import run_locust
from support_pressure import memory_pressure
from support_refbot import running_stack

REPO = Path(__file__).resolve().parent.parent
PLANS = Path(__file__).resolve().parent / "plans"
RESULTS = REPO / "results" / "matrix"


def measures(summary: dict) -> dict[str, int]:
    """The matrix's measures, as counts, from a run's audit summary."""
    anomalies = summary.get("anomalies", {})
    metrics = summary["metrics"]
    return {
        "probe_amnesia": metrics["probe_amnesia"]["count"],
        "stored_loss": metrics["stored_loss"]["count"],
        "crosstalk": anomalies.get("crosstalk", 0),
        "reordered": anomalies.get("reordered", 0),
        "duplicated": anomalies.get("duplicated", 0),
        "corrupt": anomalies.get("corrupt", 0),
        "vanished": anomalies.get("vanished", 0) + anomalies.get("expired", 0) + anomalies.get("evicted", 0),
        "evicted": anomalies.get("evicted", 0),
        "unanswered": anomalies.get("unanswered", 0),
    }


def attributed(summary: dict, kind: str) -> int:
    """Lost turns the audit charges to fault kind ``kind``: lost after their acknowledgement, at a rate
    above the quiet baseline's (oracle/attribution.py)."""
    for entry in summary.get("by_fault", []):
        if entry.get("kind") == kind:
            return entry.get("charged", 0)
    return 0


def run_row(row: Row, tmp_path: Path) -> dict:
    with running_stack(tmp_path, **row.stack) as stack:
        st = stack.state
        extra = ["--store-url", st["store_url"], "--script", REPO / "locustfiles" / "scripts" / f"{row.script}.yaml",
                 "--label", f"matrix-{row.id}", "--settle", "1s", *row.locust]
        if row.plan:
            extra += ["--chaos", PLANS / f"{row.plan}.yaml", "--chaos-backend", "local",
                      "--stack-state", Path(stack.dir) / "state.json"]
        pressure = nullcontext() if row.pressure is None else memory_pressure(
            st["store_url"], seconds=row.seconds, started=tmp_path / "run" / "telemetry.jsonl", **row.pressure)
        with pressure:
            run = run_locust(st["url"], tmp_path / "run", *extra, users=row.users, rate=row.users,
                             time_s=f"{row.seconds}s", timeout=row.seconds + 150)
    summary_file = run.run_dir / "audit" / "summary.json"
    assert summary_file.exists(), f"no audit summary; locust exited {run.returncode}:\n{run.output[-3000:]}"
    summary = json.loads(summary_file.read_text())
    rejected = [r for r in run.records() if r["status"] and 400 <= r["status"] < 500]
    # a 4xx means the client sent something malformed (once: after a paused replica resumed)
    assert not rejected, f"{len(rejected)} turns rejected by the bot, e.g. {rejected[0]}"
    observed = measures(summary)
    samples = telemetry.load(run.run_dir)
    grew = {c: telemetry.counter_growth(samples, c) for c in row.telemetry_grows}
    result = {
        "id": row.id, "bug": row.bug, "field": row.field, "trigger": row.trigger, "mode": row.stack.get("mode"),
        "must_show": list(row.must_show), "must_be_zero": list(row.must_be_zero), "observed": observed,
        "probes": summary["metrics"]["probe_amnesia"]["total"], "ok_turns": summary["metrics"]["stored_loss"]["total"],
        "sessions": summary.get("sessions"), "probe_amnesia_rate": summary["metrics"]["probe_amnesia"]["rate"],
        "stored_loss_rate": summary["metrics"]["stored_loss"]["rate"],
        "attributed": attributed(summary, row.attributed_to) if row.attributed_to else None,
        "attributed_to": row.attributed_to, "run_dir": str(run.run_dir),
        "verdict": summary["verdict"]["result"], "exit_code": run.returncode,
        "telemetry_grew": grew, "telemetry_samples": len(samples),
    }
    result["detected"] = (all(observed[m] > 0 for m in row.must_show) and all(observed[m] == 0 for m in row.must_be_zero)
                          and all(v > 0 for v in grew.values()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{row.id}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_signature(row: Row, tmp_path):
    result = run_row(row, tmp_path)
    observed = result["observed"]
    assert result["ok_turns"] > 20, f"too little load to judge: {result}"
    for measure in row.must_show:
        assert observed[measure] > 0, f"{row.id}: expected {measure} > 0, observed {observed}"
    for measure in row.must_be_zero:
        assert observed[measure] == 0, f"{row.id}: expected {measure} == 0, observed {observed} (see {result['run_dir']})"
    for counter, growth in result["telemetry_grew"].items():
        assert growth > 0, f"{row.id}: the store's {counter} did not grow during the load " \
                           f"({result['telemetry_samples']} telemetry samples): {result}"
    if row.attributed_to:
        assert result["attributed"] > 0, f"{row.id}: no loss attributed to {row.attributed_to}: {result}"
    # a bug found fails the run (strict gates); a correct bot under survivable faults passes
    expected = (0, "pass") if not row.must_show else (1, "fail")
    assert (result["exit_code"], result["verdict"]) == expected, f"{row.id}: {result}"
