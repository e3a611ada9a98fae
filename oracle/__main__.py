"""`python -m oracle audit|report|compare|trend ...` — each subcommand lives in its own module."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "audit": ("oracle.audit_cli", "re-read or re-audit a run, print the summary, exit non-zero on breached thresholds"),
    "report": ("oracle.report", "render report.html and the PNG charts of an audited run"),
    "compare": ("oracle.compare", "compare releases: BASE CANDIDATE [MORE...]"),
    "trend": ("oracle.trend", "amnesia and loss over many runs, per run and per release: RUN [RUN...]"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"} or argv[0] not in COMMANDS:
        print("usage: python -m oracle {audit,report,compare,trend} ...\n")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<8} {text}")
        return 0 if argv and argv[0] in {"-h", "--help"} else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
