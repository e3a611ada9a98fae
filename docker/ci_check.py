"""Judge a container-path run folder (.ci/containers.sh): did the faults happen, heal, and did the
audit find what the Redis persistence setting predicts?

Prints one line per check; exits 1 when any fails. Why a script: the same checks read well in CI
logs and can be re-run on a kept run folder.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# What a Redis crash-restart must do to acknowledged turns, per persistence setting.
EXPECT_LOSS = {"aof-always": False, "none": True}


def timeline(run: Path) -> list[dict]:
    path = run / "chaos.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument("--persistence", default="aof-always")
    args = p.parse_args(argv)
    checks: list[tuple[bool, str]] = []

    events = timeline(args.run)
    for kind, role in (("kill", "bot"), ("redis-restart", "redis")):
        done = {e["event"] for e in events if e["kind"] == kind and e["outcome"] == "ok" and e["backend"] == "docker"}
        inst = sorted({e["instance"] for e in events if e["kind"] == kind})
        checks.append(({"apply", "recover"} <= done,
                       f"timeline: {kind} on {role} applied and recovered by the docker backend ({', '.join(inst) or 'none'})"))
    errors = [e for e in events if e["outcome"] != "ok"]
    checks.append((not errors, f"timeline: no failed apply/recover ({len(errors)}: "
                               f"{'; '.join(str(e.get('error')) for e in errors)[:300]})"))
    outstanding = args.run / "chaos" / "outstanding.json"
    left = json.loads(outstanding.read_text()).get("faults", []) if outstanding.exists() else []
    checks.append((not left, f"chaos: nothing left outstanding ({len(left)})"))

    summary_path = args.run / "audit" / "summary.json"
    if not summary_path.exists():
        checks.append((False, f"audit: {summary_path} missing"))
    else:
        s = json.loads(summary_path.read_text())
        turns, anomalies = s.get("turns", {}), s.get("anomalies", {})
        lost = int(anomalies.get("lost", 0)) + int(anomalies.get("vanished", 0))
        checks.append((turns.get("ok", 0) > 0, f"audit: {turns.get('ok', 0)} acknowledged turns of {turns.get('total', 0)} "
                                               f"({turns.get('info', 0)} indeterminate, {turns.get('fail', 0)} failed)"))
        expect = EXPECT_LOSS.get(args.persistence)
        what = f"audit: {lost} lost/vanished finding(s) with persistence {args.persistence}"
        if expect is None:
            checks.append((True, what + " (no prediction for this setting)"))
        else:
            checks.append(((lost > 0) == expect, what + f" (predicted: {'loss' if expect else 'no loss'})"))
        checks.append((int(anomalies.get("crosstalk", 0)) == 0, f"audit: no cross-talk ({anomalies.get('crosstalk', 0)})"))
        print(f"   anomalies: {json.dumps(anomalies)}")
    for ok, line in checks:
        print(f"   {'PASS' if ok else 'FAIL'}  {line}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
