#!/usr/bin/env bash
# `make soak`: a long steady run on the embedded stack with the soak chaos plan — what a scheduled
# (nightly) soak runs before a launch:
#   1. python -m refbot up      redis-server (aof-always) + bot replicas + HAProxy on free loopback ports
#   2. locust --headless -u USERS -t DURATION ... --chaos <the plan, its duration set to DURATION>
#      store telemetry sampled every TELEMETRY_INTERVAL, the rolling audit every AUDIT_EVERY
#      (audit/rolling/progress.json); chaos healed, then the final audit + report + verdict
#   3. python -m refbot down    always, also on Ctrl-C or an error
# Settings (environment): DURATION (default 2h), USERS (16), SPAWN_RATE (4), THINK (0.5-2), MODE,
# PLAN (chaos/plans/soak.yaml), PERSISTENCE, RELEASES, MAXMEMORY + MAXMEMORY_POLICY (a cache Redis),
# TELEMETRY_INTERVAL (5s), AUDIT_EVERY (5m: the rolling audit; 0 off), PROCESSES (2 Locust workers
# under a master, as a long run is usually driven; 0: one local process), LABEL, RUN_DIR. Exit code: Locust's (1 when a gate fails). docs/soak.md.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
. scripts/closing.sh
MODE="${MODE:-correct}"
PLAN="${PLAN:-chaos/plans/soak.yaml}"
DURATION="${DURATION:-2h}"
USERS="${USERS:-16}"
SPAWN_RATE="${SPAWN_RATE:-4}"
THINK="${THINK:-0.5-2}"
PERSISTENCE="${PERSISTENCE:-aof-always}"
RELEASES="${RELEASES:-v1}"
TELEMETRY_INTERVAL="${TELEMETRY_INTERVAL:-5s}"
AUDIT_EVERY="${AUDIT_EVERY:-5m}"
PROCESSES="${PROCESSES:-2}"
LABEL="${LABEL:-soak-${MODE//:/-}}"
RUN_DIR="${RUN_DIR:-results/$(date -u +%Y%m%dT%H%M%SZ)-$LABEL}"
STACK_FLAGS=(--mode "$MODE" --persistence "$PERSISTENCE" --releases "$RELEASES")
[ -n "${MAXMEMORY:-}" ] && STACK_FLAGS+=(--maxmemory "$MAXMEMORY")
[ -n "${MAXMEMORY_POLICY:-}" ] && STACK_FLAGS+=(--maxmemory-policy "$MAXMEMORY_POLICY")
STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/goldfish-soak.XXXXXX")" || exit 1

cleanup() {
    "$PY" -m refbot down --state-dir "$STATE_DIR" || echo "soak: refbot down failed; see $STATE_DIR" >&2
    rm -rf "$STATE_DIR"
}
trap cleanup EXIT
trap 'echo "soak: interrupted"; exit 130' INT TERM

# the plan's faults repeat for the whole soak: its copy in the run folder lasts DURATION
mkdir -p "$RUN_DIR"
SOAK_PLAN="$RUN_DIR/plan.yaml"
{ grep -v '^duration:' "$PLAN"; echo "duration: $DURATION"; } > "$SOAK_PLAN" || exit 2

echo "soak: bringing up the embedded stack (${STACK_FLAGS[*]})"
"$PY" -m refbot up --state-dir "$STATE_DIR" "${STACK_FLAGS[@]}" || exit $?
read -r URL STORE_URL < <("$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["url"], s["store_url"])' "$STATE_DIR/state.json")

DISTRIBUTED=()
DRIVERS="one Locust process"
if [ "$PROCESSES" != 0 ]; then  # a master and its workers on loopback, on a free port (not Locust's shared 5557)
    PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    DISTRIBUTED=(--processes "$PROCESSES" --master-bind-host 127.0.0.1 --master-bind-port "$PORT"
                 --master-host 127.0.0.1 --master-port "$PORT")
    DRIVERS="$PROCESSES Locust workers and their master"
fi

echo "soak: $USERS users ($DRIVERS) for $DURATION against $URL, chaos plan $PLAN (as $SOAK_PLAN), telemetry every $TELEMETRY_INTERVAL"
"$VENV/bin/locust" -f locustfiles/chat.py --headless --only-summary \
    --host "$URL" --run-dir "$RUN_DIR" --label "$LABEL" \
    -u "$USERS" -r "$SPAWN_RATE" -t "$DURATION" \
    --chaos "$SOAK_PLAN" --chaos-backend local --stack-state "$STATE_DIR/state.json" \
    --store-url "$STORE_URL" --think "$THINK" --telemetry-interval "$TELEMETRY_INTERVAL" \
    --audit-every "$AUDIT_EVERY" --replica-header X-Refbot-Replica "${DISTRIBUTED[@]}"
status=$?
closing soak "$RUN_DIR"
echo "soak: trend       $PY -m oracle trend results/* --html results/trend.html"
exit $status
