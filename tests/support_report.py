"""Synthetic audited run folders with known numbers, written exactly as docs/CONTRACTS.md pins them.

``synthetic(dir, lost=60, ...)`` writes run.json, steps.jsonl, chaos.jsonl, a journal shard and
audit/{anomalies.jsonl, sessions.csv, windows.csv, summary.json}. Losses and failed probes fall
in windows where a fault was active, as they would in a real run, so every chart has something
to show. The totals in summary.json are the sums of the window table, so a test can check that
the report shows exactly what the folder holds.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

T0 = 1_700_000_000.0
SESSION_COLUMNS = ["session", "turns", "ok", "fail", "info", "info_stored", "probes", "probes_answered",
                   "probes_failed", "lost", "crosstalk", "reordered", "duplicated", "corrupt", "vanished",
                   "unanswered", "anomalous", "first_sent", "last_received"]
WINDOW_COLUMNS = ["start", "end", "step", "acked", "throughput", "latency_p50", "latency_p95", "latency_p99",
                  "errors", "probes", "probes_failed", "lost", "crosstalk", "anomalies", "faults"]
PLAN = """faults:
  - id: f1
    kind: kill
    target: bot-2
    at: 60s
    duration: 15s
  - id: f2
    kind: pause
    target: redis
    at: 150s
    duration: 10s
  - id: f3
    kind: restart
    target: redis
    at: 240s
"""
# (fault id, kind, instance, start offset, end offset or None = never recovered)
FAULTS = [("f1#1", "kill", "bot-2", 60.0, 75.0), ("f2#1", "pause", "redis", 150.0, 160.0),
          ("f3#1", "restart", "redis", 240.0, None)]


def _rate(count: int, total: int) -> dict:
    if total <= 0:
        return {"count": int(count), "total": 0, "rate": None, "low": None, "high": None}
    ci = binomtest(int(count), int(total)).proportion_ci(method="wilson")
    return {"count": int(count), "total": int(total), "rate": count / total, "low": ci.low, "high": ci.high}


def _spread(rng, count: int, capacity: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Place ``count`` events into windows with room left, preferring ``allowed`` ones."""
    placed = np.zeros(len(capacity), dtype=int)
    for _ in range(int(count)):
        room = (capacity - placed) > 0
        pool = np.flatnonzero(room & allowed) if (room & allowed).any() else np.flatnonzero(room)
        if len(pool) == 0:
            raise ValueError("more events than capacity")
        placed[rng.choice(pool)] += 1
    return placed


def synthetic(run_dir: str | Path, *, label: str = "v1", ok_turns: int = 2000, lost: int = 0,
              probes: int = 400, probes_failed: int = 0, crosstalk: int = 0, errors: int = 12, info: int = 5,
              sessions: int = 200, script: str = "support-chat", script_sha: str = "5f1c0ffee",
              chaos: bool = True, steps: bool = True, audited: bool = True, seed: int = 1,
              window_s: float = 5.0, duration: float = 300.0, breaches: list[str] | None = None) -> Path:
    """Write one audited run folder; return its path. Counts are exact totals over the run."""
    rng = np.random.default_rng(seed)
    run_dir = Path(run_dir)
    (run_dir / "journal").mkdir(parents=True, exist_ok=True)
    n = int(duration // window_s)
    starts = T0 + np.arange(n) * window_s
    step_of = np.minimum((np.arange(n) * window_s // (duration / 3)).astype(int), 2)
    users = {0: 10, 1: 20, 2: 40}
    weights = np.array([1.0, 2.0, 3.5])[step_of] * rng.uniform(0.8, 1.2, n)
    acked = rng.multinomial(ok_turns, weights / weights.sum())
    window_probes = rng.multinomial(probes, weights / weights.sum())
    faults = FAULTS if chaos else []
    kinds_in = [[k for _, k, _, s, e in faults
                 if starts[i] < T0 + (e if e is not None else duration) + window_s and starts[i] + window_s > T0 + s]
                for i in range(n)]
    faulted = np.array([bool(k) for k in kinds_in])
    lost_w = _spread(rng, lost, acked, faulted)
    failed_w = _spread(rng, probes_failed, window_probes, faulted)
    cross_w = _spread(rng, crosstalk, acked, faulted)
    errors_w = rng.multinomial(errors, np.ones(n) / n)
    base_latency = 0.020 + 0.004 * step_of
    p50 = base_latency * rng.uniform(0.9, 1.1, n) + faulted * 0.015
    windows = []
    for i in range(n):
        windows.append({"start": starts[i], "end": starts[i] + window_s, "step": int(step_of[i]) if steps else "",
                        "acked": int(acked[i]), "throughput": acked[i] / window_s, "latency_p50": round(p50[i], 4),
                        "latency_p95": round(p50[i] * 2.1, 4), "latency_p99": round(p50[i] * 3.4, 4),
                        "errors": int(errors_w[i]), "probes": int(window_probes[i]),
                        "probes_failed": int(failed_w[i]), "lost": int(lost_w[i]), "crosstalk": int(cross_w[i]),
                        "anomalies": int(lost_w[i] + cross_w[i]), "faults": ";".join(kinds_in[i])})
    session_ids = [f"gf{seed:04x}{k:012x}" for k in range(sessions)]
    anomalies = []
    per_session = {s: {"lost": 0, "crosstalk": 0, "probes_failed": 0} for s in session_ids}
    for cls, counts in (("lost", lost_w), ("crosstalk", cross_w)):
        k = 0
        for i in np.flatnonzero(counts):
            for _ in range(counts[i]):
                k += 1
                # cross-talk victims are distinct sessions, so the session count is the entry count
                session = session_ids[-k] if cls == "crosstalk" else session_ids[rng.integers(sessions)]
                per_session[session][cls] += 1
                turn = int(rng.integers(1, 12))
                t = float(starts[i] + rng.uniform(0, window_s))
                if cls == "lost":
                    evidence = {"token": f"{session}t{turn}", "sent": t, "received": t + 0.03, "status": 200,
                                "stored_user_turns": [0, turn - 1, turn + 1]}
                    text = (f"Turn {turn} of session {session} was acknowledged (HTTP 200) but its user entry "
                            f"is not in the stored history; the turns before and after it are.")
                else:
                    source = session_ids[rng.integers(sessions)]
                    evidence = {"entry": f"[{source}t3] My order number is 1234-ABCD.", "source": source}
                    text = f"Session {session}'s stored history holds an entry written by session {source}."
                anomalies.append({"id": f"{cls}-{k}", "class": cls, "session": session, "turn": turn, "time": t,
                                  "evidence": evidence, "explanation": text})
    for i in np.flatnonzero(failed_w):
        for _ in range(failed_w[i]):
            per_session[session_ids[rng.integers(sessions)]]["probes_failed"] += 1
    turns_per_session = rng.multinomial(ok_turns, np.ones(sessions) / sessions)
    probes_per_session = rng.multinomial(probes, np.ones(sessions) / sessions)
    session_rows = []
    for s, t, p in zip(session_ids, turns_per_session, probes_per_session):
        c = per_session[s]
        anomalous = int(bool(c["lost"] or c["crosstalk"] or c["probes_failed"]))
        session_rows.append({"session": s, "turns": int(t), "ok": int(t), "fail": 0, "info": 0, "info_stored": 0,
                             "probes": int(p), "probes_answered": int(p), "probes_failed": c["probes_failed"],
                             "lost": c["lost"], "crosstalk": c["crosstalk"], "reordered": 0, "duplicated": 0,
                             "corrupt": 0, "vanished": 0, "unanswered": 0, "anomalous": anomalous,
                             "first_sent": T0, "last_received": T0 + duration})
    anomalous_sessions = sum(r["anomalous"] for r in session_rows)
    crosstalk_sessions = sum(1 for r in session_rows if r["crosstalk"])

    run = {"run": run_dir.name, "label": label, "target": "http://127.0.0.1:8080",
           "options": {"users": 40, "spawn_rate": 5, "run_time": "5m", "window_s": window_s},
           "plan": "plans/mixed.yaml" if chaos else None, "plan_text": PLAN if chaos else None,
           "script": script, "script_sha": script_sha, "start": T0, "end": T0 + duration,
           "versions": {"goldfish": "0.1.0", "locust": "2.31.0", "python": "3.11.2"}}
    (run_dir / "run.json").write_text(json.dumps(run, indent=2))
    (run_dir / "journal" / "local-1.jsonl").write_text(json.dumps(
        {"run": run_dir.name, "session": session_ids[0], "turn": 0, "kind": "chatter",
         "token": f"{session_ids[0]}t0", "message": f"[{session_ids[0]}t0] Hello.", "fact": None, "nonce": None,
         "sent": T0, "received": T0 + 0.02, "outcome": "ok", "status": 200, "reply": "Noted.", "error": None,
         "verdict": None, "crosstalk": [], "step": 0, "user": "local-1"}) + "\n")
    if steps:
        with open(run_dir / "steps.jsonl", "w") as f:
            for k in range(3):
                f.write(json.dumps({"step": k, "users": users[k], "start": T0 + k * duration / 3,
                                    "end": T0 + (k + 1) * duration / 3}) + "\n")
    if chaos:
        with open(run_dir / "chaos.jsonl", "w") as f:
            for fault, kind, instance, s, e in faults:
                target = "bot" if kind == "kill" else "redis"
                for event, t in (("apply", s), ("recover", e)):
                    if t is None:
                        continue
                    f.write(json.dumps({"fault": fault, "kind": kind, "target": target, "instance": instance,
                                        "backend": "local", "event": event, "time": T0 + t, "outcome": "ok",
                                        "error": None, "params": {}}) + "\n")
    if not audited:
        return run_dir
    audit = run_dir / "audit"
    audit.mkdir(exist_ok=True)
    with open(audit / "anomalies.jsonl", "w") as f:
        for a in anomalies:
            f.write(json.dumps(a) + "\n")
    for name, columns, rows in (("sessions.csv", SESSION_COLUMNS, session_rows),
                                ("windows.csv", WINDOW_COLUMNS, windows)):
        with open(audit / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)

    def group(mask) -> dict:
        sel = [w for w, m in zip(windows, mask) if m]
        return {"windows": len(sel),
                "probe_amnesia": _rate(sum(w["probes_failed"] for w in sel), sum(w["probes"] for w in sel)),
                "stored_loss": _rate(sum(w["lost"] for w in sel), sum(w["acked"] for w in sel)),
                "anomalies": _rate(sum(w["anomalies"] for w in sel), sum(w["acked"] for w in sel))}

    kinds = list(dict.fromkeys(k for ks in kinds_in for k in ks))
    summary = {
        "run": run_dir.name, "label": label, "window_s": window_s, "sessions": sessions,
        "turns": {"total": ok_turns + errors + info, "ok": ok_turns, "fail": errors, "info": info, "info_stored": 2},
        "metrics": {"probe_amnesia": _rate(probes_failed, probes), "stored_loss": _rate(lost, ok_turns),
                    "session_amnesia": _rate(anomalous_sessions, sessions), "crosstalk": _rate(crosstalk_sessions, sessions)},
        "throughput": ok_turns / duration,
        "latency": {"p50": float(np.median(p50)), "p95": float(np.median(p50) * 2.1),
                    "p99": float(np.median(p50) * 3.4)},
        "anomalies": {c: n_ for c, n_ in (("lost", lost), ("crosstalk", crosstalk)) if n_},
        "by_fault": [{"kind": k, "occurrences": 1, "recovery_s": window_s, **group([k in ks for ks in kinds_in])}
                     for k in kinds],
        "baseline": group([not ks for ks in kinds_in]),
        "steps": [{"step": k, "users": users[k]} for k in range(3)] if steps else [],
        "store": {"complete": True, "reader": "redis-list"},
        "thresholds": {"max_crosstalk": 0}, "breaches": list(breaches or []),
    }
    (audit / "summary.json").write_text(json.dumps(summary, indent=2))
    return run_dir
