"""Write the README's detection table from the matrix test's observed results.

    .venv/bin/python -m pytest tests/test_detection_matrix.py   # writes results/matrix/*.json
    .venv/bin/python scripts/matrix_table.py                    # rewrites the table in README.md

The table sits between the markers below; everything else in the README is left alone.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
NAMES = {"probe_amnesia": "failed probes", "stored_loss": "lost turns", "crosstalk": "cross-talk",
         "reordered": "reordered", "duplicated": "duplicated", "corrupt": "corrupt entries",
         "vanished": "vanished/expired sessions", "evicted": "evicted sessions", "unanswered": "unanswered",
         "info": "indeterminate (`info`) turns"}


def shows(result: dict) -> str:
    observed = result["observed"]
    found = [f"{NAMES[m]} {observed[m]}" for m in result["must_show"]]
    if not found:
        return f"clean: 0 anomalies, 0 failed probes ({result['probes']} probes, {result['ok_turns']} acknowledged turns)"
    text = ", ".join(found)
    # a row whose point is what did NOT happen (an honest bot refusing turns) says so
    zero = [NAMES[m] for m in result["must_be_zero"] if m in ("stored_loss", "probe_amnesia")]
    if zero and result["must_show"] == ["info"]:
        text += ", 0 " + " and 0 ".join(zero)
    if result.get("attributed_to"):
        text += f"; {result['attributed']} lost turns attributed to `{result['attributed_to']}`"
    for counter, growth in (result.get("telemetry_grew") or {}).items():
        text += f"; the store's {counter} +{growth} during the load"
    text += f" (of {result['probes']} probes, {result['ok_turns']} acknowledged turns)"
    check = result.get("check") or {}
    if check.get("name") == "since_snapshot":
        text += (f"; all {check['acked_since_snapshot']} turns sent after the snapshot and acknowledged before the "
                 f"crash lost, none of the {check['acked_before_snapshot']} acknowledged before it")
    if check.get("name") == "failover":
        text += f"; `{check['promoted']}` promoted in {check['failover_s']} s"
    if latency := result.get("latency_quiet"):
        text += f"; ok-turn latency before the fault p50 {latency['p50_ms']} ms, p95 {latency['p95_ms']} ms"
    return text


def table(results: list[dict]) -> str:
    lines = ["| bug | how it happens in the field | refbot mode and trigger | what goldfish showed | caught |",
             "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['bug']} | {r['field']} | `{r['mode']}`: {r['trigger']} | {shows(r)} | "
                     f"{'yes' if r['detected'] else '**no**'} |")
    return "\n".join(lines)


def main() -> int:
    sys.path.insert(0, str(REPO / "tests"))
    from matrix_rows import ROWS

    folder = REPO / "results" / "matrix"
    results = [json.loads((folder / f"{row.id}.json").read_text()) for row in ROWS if (folder / f"{row.id}.json").exists()]
    if not results:
        print(f"matrix_table: no results in {folder}; run pytest tests/test_detection_matrix.py first", file=sys.stderr)
        return 2
    readme = REPO / "README.md"
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        print(f"matrix_table: README.md has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 2
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{table(results)}\n{END}{tail}")
    print(f"matrix_table: wrote {len(results)} rows to README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
