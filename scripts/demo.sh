#!/usr/bin/env bash
# `make demo`: the whole product on the embedded default, as a user would run it by hand:
#   1. python -m refbot up      redis-server + bot replicas + HAProxy on free loopback ports
#   2. locust -f locustfiles/chat.py --headless ... --chaos PLAN --store-url ...
#      step load, chaos applied and always healed, then audit + report + summary
#   3. python -m refbot down    always, also on Ctrl-C or an error
# Settings (environment): MODE (refbot memory mode), PLAN, STEPS, STEP_USERS, STEP_DURATION,
# PERSISTENCE, REDIS (single | sentinel), WAIT_REPLICAS, RELEASES, LABEL, RUN_DIR. Exit code: Locust's (1 when a threshold is breached).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
. scripts/closing.sh
MODE="${MODE:-correct}"
PLAN="${PLAN:-chaos/plans/gentle.yaml}"
STEPS="${STEPS:-4}"
STEP_USERS="${STEP_USERS:-8}"
STEP_DURATION="${STEP_DURATION:-30s}"
PERSISTENCE="${PERSISTENCE:-aof-always}"
REDIS="${REDIS:-single}"
WAIT_REPLICAS="${WAIT_REPLICAS:-0}"
LABEL="${LABEL:-demo-${MODE//:/-}}"
RUN_DIR="${RUN_DIR:-results/$(date -u +%Y%m%dT%H%M%SZ)-$LABEL}"
case "$MODE" in
    pickle-drift) RELEASES="${RELEASES:-v1,v2,v1}" ;;   # the bug needs replicas on different releases
    *) RELEASES="${RELEASES:-v1}" ;;
esac
STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/goldfish-demo.XXXXXX")"

cleanup() {
    "$PY" -m refbot down --state-dir "$STATE_DIR" || echo "demo: refbot down failed; see $STATE_DIR" >&2
    rm -rf "$STATE_DIR"
}
trap cleanup EXIT
trap 'echo "demo: interrupted"; exit 130' INT TERM

echo "demo: bringing up the embedded stack (mode $MODE, persistence $PERSISTENCE, redis $REDIS, releases $RELEASES)"
"$PY" -m refbot up --state-dir "$STATE_DIR" --mode "$MODE" --persistence "$PERSISTENCE" --releases "$RELEASES" \
    --redis "$REDIS" --wait-replicas "$WAIT_REPLICAS" || exit $?
read -r URL STORE_URL < <("$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["url"], s["store_url"])' "$STATE_DIR/state.json")

echo "demo: $STEPS load steps of +$STEP_USERS users x $STEP_DURATION against $URL, chaos plan $PLAN"
# each step's users arrive within a second (the shape's spawn rate is at least --step-users per second);
# Locust's own report and CSVs go to $RUN_DIR/locust/ at the stop, linked from report.html
"$VENV/bin/locust" -f locustfiles/chat.py --headless --only-summary \
    --host "$URL" --run-dir "$RUN_DIR" --label "$LABEL" \
    --step-users "$STEP_USERS" --steps "$STEPS" --step-duration "$STEP_DURATION" \
    --chaos "$PLAN" --chaos-backend local --stack-state "$STATE_DIR/state.json" \
    --store-url "$STORE_URL" --think 0.1-0.4 --replica-header X-Refbot-Replica
status=$?
closing demo "$RUN_DIR"
exit $status
