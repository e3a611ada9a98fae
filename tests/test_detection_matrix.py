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
        "info": summary["turns"]["info"],
    }


def attributed(summary: dict, kind: str) -> int:
    """Lost turns the audit charges to fault kind ``kind``: lost after their acknowledgement, at a rate
    above the quiet baseline's (oracle/attribution.py)."""
    for entry in summary.get("by_fault", []):
        if entry.get("kind") == kind:
            return entry.get("charged", 0)
    return 0


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def lost_turns(run_dir: Path, records: list[dict]) -> set[tuple[str, int]]:
    """(session, turn) of every ok turn the store lost: a ``lost`` finding, or any ok turn of a session
    whose key is gone (``vanished``/``expired``) — what ``stored_loss`` counts."""
    anomalies = read_jsonl(run_dir / "audit" / "anomalies.jsonl")
    gone = {a["session"] for a in anomalies if a["class"] in ("vanished", "expired")}
    return ({(a["session"], a["turn"]) for a in anomalies if a["class"] == "lost"}
            | {(r["session"], r["turn"]) for r in records if r["outcome"] == "ok" and r["session"] in gone})


def quiet_latency(records: list[dict], timeline: list[dict]) -> dict:
    """Latency of the turns acknowledged before the first fault: what a setting costs when all is well."""
    first = min((r["time"] for r in timeline if r["event"] == "apply"), default=float("inf"))
    ms = sorted(1000 * (r["received"] - r["sent"]) for r in records if r["outcome"] == "ok" and r["received"] < first)
    at = lambda q: round(ms[min(len(ms) - 1, int(q * len(ms)))], 1) if ms else None  # noqa: E731
    return {"turns": len(ms), "p50_ms": at(0.5), "p95_ms": at(0.95), "p99_ms": at(0.99)}


def check_failover(records, timeline, lost) -> dict:
    """The failover really happened: applied, a replica promoted in the primary's place, healed."""
    applies = [r for r in timeline if r["kind"] == "redis-failover" and r["event"] == "apply"]
    recovers = [r for r in timeline if r["kind"] == "redis-failover" and r["event"] == "recover"]
    detail = applies[0].get("detail") or {} if applies else {}
    return {"ok": len(applies) == 1 and applies[0]["outcome"] == "ok" and detail.get("promoted") not in
            (None, detail.get("primary")) and len(recovers) == 1 and recovers[0]["outcome"] == "ok",
            "primary": detail.get("primary"), "promoted": detail.get("promoted"),
            "failover_s": detail.get("failover_s"), "healed": (recovers[0].get("detail") if recovers else None)}


def check_since_snapshot(records, timeline, lost) -> dict:
    """Exactly the turns acknowledged since the snapshot are lost, judged by cause rather than timing:
    a turn acknowledged before BGSAVE began was written before the fork (kept); a turn sent after the
    snapshot was on disk and acknowledged before the crash was written after it (lost); a turn sent
    after Redis was back is kept. Turns overlapping the snapshot or the crash may go either way."""
    at = {(r["kind"], r["event"]): r["time"] for r in timeline if r["outcome"] == "ok"}
    began, saved = at[("redis-bgsave", "apply")], at[("redis-bgsave", "recover")]
    crashed, back = at[("redis-restart", "apply")], at[("redis-restart", "recover")]
    ok = [r for r in records if r["outcome"] == "ok"]
    before = [r for r in ok if r["received"] < began]
    since = [r for r in ok if r["sent"] > saved and r["received"] < crashed]
    after = [r for r in ok if r["sent"] > back]
    key = lambda r: (r["session"], r["turn"])  # noqa: E731
    figures = {"acked_before_snapshot": len(before), "lost_of_those": sum(key(r) in lost for r in before),
               "acked_since_snapshot": len(since), "kept_of_those": sum(key(r) not in lost for r in since),
               "sent_after_restart": len(after), "lost_after_restart": sum(key(r) in lost for r in after),
               "lost": len(lost)}
    figures["ok"] = (min(len(before), len(since), len(after)) > 0 and figures["lost_of_those"] == 0
                     and figures["kept_of_those"] == 0 and figures["lost_after_restart"] == 0)
    return figures


CHECKS = {"failover": check_failover, "since_snapshot": check_since_snapshot}


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
    timeline, records = read_jsonl(run.run_dir / "chaos.jsonl"), run.records()
    if row.quiet_latency:
        result["latency_quiet"] = quiet_latency(records, timeline)
    if row.check:
        lost = lost_turns(run.run_dir, records)
        result["check"] = {"name": row.check, **CHECKS[row.check](records, timeline, lost)}
    result["detected"] = (all(observed[m] > 0 for m in row.must_show) and all(observed[m] == 0 for m in row.must_be_zero)
                          and all(v > 0 for v in grew.values()) and (not row.check or result["check"]["ok"]))
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
    if row.check:
        assert result["check"]["ok"], f"{row.id}: check {row.check} failed: {result['check']} (see {result['run_dir']})"
    # a bug found fails the run (strict gates); a correct bot under survivable faults passes, and so
    # does an honest one that refused what it could not make durable (indeterminate turns are no bug)
    found_bug = any(m != "info" for m in row.must_show)
    expected = (1, "fail") if found_bug else (0, "pass")
    assert (result["exit_code"], result["verdict"]) == expected, f"{row.id}: {result}"
