"""`python -m oracle audit|report|compare|trend|follow ...` — each subcommand lives in its own module."""
from __future__ import annotations

import importlib
import sys
import traceback

COMMANDS = {
    "audit": ("oracle.audit_cli", "re-read or re-audit a run, print the summary and the verdict, exit 1 when a gate fails"),
    "report": ("oracle.report", "render report.html and the PNG charts of an audited run"),
    "compare": ("oracle.compare", "compare releases: BASE CANDIDATE [MORE...]"),
    "follow": ("oracle.follow", "the rolling audit of a run still being written (started by --audit-every)"),
    "trend": ("oracle.trend", "amnesia and loss over many runs, per run and per release: RUN [RUN...]"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"} or argv[0] not in COMMANDS:
        print(f"usage: python -m oracle {{{','.join(COMMANDS)}}} ...\n")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<8} {text}")
        return 0 if argv and argv[0] in {"-h", "--help"} else 2
    from contracts.console import interrupted_exit_code, sigterm_as_interrupt
    try:
        with sigterm_as_interrupt():  # the subcommand's imports (~0.3 s) too: Ctrl-C then is no traceback
            module = importlib.import_module(COMMANDS[argv[0]][0])
            return module.main(argv[1:])
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: what was written stays; no traceback (audit says how to finish)
        print(f"oracle {argv[0]}: interrupted", file=sys.stderr)
        return interrupted_exit_code(exc)
    except Exception as exc:  # noqa: BLE001 - never exit 1, which means "a gate failed", on a crash
        from contracts.runfolder import LOCAL_WRITE_ERRNOS, CannotWrite

        if isinstance(exc, CannotWrite):  # the run folder's device is full or read-only: the user's disk
            print(f"oracle {argv[0]}: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.filename is not None:  # a path that cannot be written or read: an
            print(f"oracle {argv[0]}: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)  # output that is
            return 2  # a folder, a full device. Bad input, named
        if isinstance(exc, OSError) and exc.errno in LOCAL_WRITE_ERRNOS:  # a write no caller named: still the disk
            print(f"oracle {argv[0]}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if isinstance(exc, UnicodeEncodeError) and "surrogates not allowed" in exc.reason:
            print(f"oracle {argv[0]}: a file read holds text that is not Unicode (a lone surrogate such as a "
                  f"\\ud800 escape in JSON, or a file name that is not UTF-8): {exc}", file=sys.stderr)
            return 2  # bad input no reader caught (oracle/report_data.py names run.json's and summary.json's)
        traceback.print_exc()
        print(f"oracle {argv[0]}: FAILED: {type(exc).__name__}: {exc} (exit 3: a damaged file no check caught, "
              "or a bug)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    try:  # Ctrl-C this early (the interpreter's first imports) is one line too, never a traceback
        from contracts.console import escape_unencodable, tolerate_closed_output

        escape_unencodable()
        tolerate_closed_output()
    except KeyboardInterrupt:
        print("oracle: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
