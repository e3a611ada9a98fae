# Sourced by demo.sh and soak.sh: what they print once Locust has stopped (needs $PY).
closing() {  # closing NAME RUN_DIR: the verdict summary, the run folder and its report
    echo
    if [ -f "$2/audit/summary.json" ]; then
        "$PY" -c 'import sys; from oracle.report import terminal_summary; print(terminal_summary(sys.argv[1]))' "$2" || true
        echo
    fi
    echo "$1: run folder  $2"
    [ -f "$2/report.html" ] && echo "$1: report      $2/report.html  (open it in a browser)"
    return 0
}
