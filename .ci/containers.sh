#!/usr/bin/env bash
# The container path, for real, on this machine: podman serves the Docker Engine API, the stack
# comes up from the SAME docker-compose.yml (podman-compose), Locust talks to it through HAProxy
# while the docker chaos backend kills+restarts a bot container and crash-restarts the Redis
# container, then the oracle audits the run. Everything is torn down at the end, also on failure.
#
#   .ci/containers.sh                      # skips (exit 0) when podman is not installed
#   PERSISTENCE=none .ci/containers.sh     # expect loss at the Redis restart instead of none
#   DURATION=45 USERS=8 THINK_MS=20 ...    # knobs; images are kept (they are the cache)
#
# Why podman-compose and not our own compose reader: it is Debian's packaged tool, reads the
# compose file a Docker user runs (merging our override), and labels containers exactly like
# Docker Compose (com.docker.compose.project/service), which is what the docker backend targets.
# Its 1.0.3 ignores `profiles`, so the toxiproxy-less variant names its services explicitly.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[[ -x .venv/bin/python ]] || make setup   # the venv with goldfish and Locust
.venv/bin/python -c "import docker" 2>/dev/null || .venv/bin/python -m pip install -q -e ".[containers]"  # the docker SDK

PERSISTENCE=${PERSISTENCE:-aof-always}
DURATION=${DURATION:-45}
USERS=${USERS:-8}
PROJECT=${PROJECT:-gfci$$}
BASE_IMAGE=${GOLDFISH_BASE_IMAGE:-localhost/goldfish-base:bookworm}
REFBOT_IMAGE=${GOLDFISH_REFBOT_IMAGE:-localhost/goldfish-refbot:latest}
RUN_DIR=${RUN_DIR:-results/containers-ci-$(date -u +%Y%m%dT%H%M%SZ)}
SOCK=/tmp/goldfish-podman-$$.sock
WORK=$(mktemp -d /tmp/goldfish-containers.XXXXXX)
T0=$(date +%s)

step() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
timed() { local s; s=$(date +%s); "$@"; echo "   ($(( $(date +%s) - s ))s)"; }
# logged LOG CMD...: run CMD with its output in LOG; print the time, or the log's tail on failure.
logged() {
  local log=$1 s rc=0; shift; s=$(date +%s)
  "$@" >"$log" 2>&1 || rc=$?
  echo "   ($(( $(date +%s) - s ))s, exit $rc, log $log)"
  if ((rc)); then tail -30 "$log" | sed 's/^/   | /'; fi
  return $rc
}

if ! command -v podman >/dev/null; then
  echo "containers: podman is not installed; skipping the container path (apt-get install podman to run it)"
  exit 0
fi

# ---- engine -----------------------------------------------------------------------------------
step "engine: podman $(podman --version | awk '{print $3}') with docker/podman/containers.conf (runc, cgroupfs, no default ulimits)"
missing=()
command -v runc >/dev/null || missing+=(runc)
command -v podman-compose >/dev/null || missing+=(podman-compose)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  step "installing ${missing[*]} (apt)"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get install -y "${missing[@]}" >"$WORK/apt.log" 2>&1 || { tail "$WORK/apt.log"; exit 1; }
fi
export CONTAINERS_CONF=$ROOT/docker/podman/containers.conf

SERVICE_PID=""
COMPOSE=(podman-compose -p "$PROJECT" -f docker-compose.yml)
teardown() {
  local rc=$?
  set +e
  step "teardown (exit status so far: $rc)"
  "${COMPOSE[@]}" down -v >"$WORK/down.log" 2>&1
  # podman-compose 1.0.3 leaves the network and anything it did not start; remove by label.
  ids=$(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT")
  [[ -n "$ids" ]] && podman rm -f $ids >/dev/null 2>&1
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1
  podman volume rm -f "${PROJECT}_redis-data" >/dev/null 2>&1
  if [[ -n "$SERVICE_PID" ]]; then kill "$SERVICE_PID" 2>/dev/null; wait "$SERVICE_PID" 2>/dev/null; fi
  rm -f "$SOCK"
  left=$(podman ps -aq --filter "label=com.docker.compose.project=$PROJECT" | wc -l)
  echo "   containers of $PROJECT left: $left; engine service stopped; logs kept in $WORK"
  step "done in $(( $(date +%s) - T0 ))s, exit $rc"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

# Own session: a Ctrl-C to this script's process group must not take the engine away from the
# chaos controller while it heals; teardown stops it by pid.
setsid podman system service --time=0 "unix://$SOCK" >"$WORK/service.log" 2>&1 &
SERVICE_PID=$!
export DOCKER_HOST=unix://$SOCK
for _ in $(seq 100); do [[ -S $SOCK ]] && break; sleep 0.1; done
[[ -S $SOCK ]] || { echo "podman system service did not create $SOCK"; cat "$WORK/service.log"; exit 1; }
step "engine API on $DOCKER_HOST (pid $SERVICE_PID)"

# ---- images (cached) --------------------------------------------------------------------------
step "images: $BASE_IMAGE (debootstrap) and $REFBOT_IMAGE on it, both cached"
timed env GOLDFISH_BASE_IMAGE="$BASE_IMAGE" GOLDFISH_REFBOT_IMAGE="$REFBOT_IMAGE" bash docker/build-images.sh
# HAProxy finds the bots, and the bots find Redis, by container name: seconds to check here,
# instead of 90 s waiting for replicas that never answer.
step "container name resolution on a podman network (docker/check_dns.py)"
timed .venv/bin/python docker/check_dns.py "$BASE_IMAGE"

# ---- stack ------------------------------------------------------------------------------------
read -r HTTP_PORT REDIS_PORT ADMIN_PORT STATS_PORT TOXI_PORT < <(.venv/bin/python - <<'EOF'
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
EOF
)
export GOLDFISH_PYTHON_IMAGE=$BASE_IMAGE GOLDFISH_REDIS_IMAGE=$BASE_IMAGE GOLDFISH_HAPROXY_IMAGE=$BASE_IMAGE
export GOLDFISH_REFBOT_IMAGE=$REFBOT_IMAGE GOLDFISH_REDIS_PERSISTENCE=$PERSISTENCE GOLDFISH_THINK_MS=${THINK_MS:-20}
export GOLDFISH_HTTP_PORT=$HTTP_PORT GOLDFISH_REDIS_PORT=$REDIS_PORT GOLDFISH_HAPROXY_ADMIN_PORT=$ADMIN_PORT
export GOLDFISH_HAPROXY_STATS_PORT=$STATS_PORT GOLDFISH_TOXIPROXY_PORT=$TOXI_PORT
services=(redis bot-1 bot-2 bot-3 haproxy)
if podman image exists "${GOLDFISH_TOXIPROXY_IMAGE:-ghcr.io/shopify/toxiproxy:2.9.0}"; then
  services+=(toxiproxy); variant="with toxiproxy"
else
  COMPOSE+=(-f docker/compose.direct.yml); variant="WITHOUT toxiproxy (its image is not here; docker/compose.direct.yml)"
fi
step "compose up: project $PROJECT, $variant, persistence $PERSISTENCE; chat :$HTTP_PORT redis :$REDIS_PORT admin :$ADMIN_PORT"
logged "$WORK/up.log" "${COMPOSE[@]}" up -d "${services[@]}"
URL=http://127.0.0.1:$HTTP_PORT
STORE=redis://127.0.0.1:$REDIS_PORT/0
.venv/bin/python - "$URL" <<'EOF'
import sys, time, requests
url, deadline, seen = sys.argv[1], time.monotonic() + 90, set()
while time.monotonic() < deadline and len(seen) < 3:
    try:
        r = requests.get(url + "/healthz", timeout=2)
        if r.ok:
            seen.add(r.json().get("replica"))
    except requests.RequestException:
        pass
    time.sleep(0.3)
print(f"   healthy replicas behind HAProxy: {sorted(map(str, seen))}")
sys.exit(0 if len(seen) == 3 else 1)
EOF
podman ps --filter "label=com.docker.compose.project=$PROJECT" --format '   {{.Names}}  {{.Status}}  {{.Ports}}'

# ---- load + chaos + audit ---------------------------------------------------------------------
export COMPOSE_PROJECT_NAME=$PROJECT
PLAN=docker/plans/ci.yaml
step "chaos plan $PLAN against the containers (dry run):"
.venv/bin/python -m chaos run "$PLAN" --backend docker --backend-opt "project=$PROJECT" --dry-run | sed 's/^/   /'

step "locust: $USERS users for ${DURATION}s against $URL, chaos on backend docker, run folder $RUN_DIR"
LOCUST_RC=0
logged "$WORK/locust.log" .venv/bin/locust -f locustfiles/chat.py --headless -u "$USERS" -r "$USERS" \
  -t "${DURATION}s" --host "$URL" --run-dir "$RUN_DIR" --label "containers-$PERSISTENCE" --chaos "$PLAN" \
  --chaos-backend docker --store-url "$STORE" --settle 3s --only-summary || LOCUST_RC=$?
grep -E "goldfish:|chaos (apply|recover)" "$WORK/locust.log" | tail -20 | sed 's/^/   /'
echo "   locust exit $LOCUST_RC (1 is expected when the audit finds loss)"
((LOCUST_RC <= 1)) || exit 1
step "audit: python -m oracle audit $RUN_DIR --store-url $STORE"
AUDIT_RC=0
logged "$WORK/audit.log" .venv/bin/python -m oracle audit "$RUN_DIR" --store-url "$STORE" || AUDIT_RC=$?
sed 's/^/   /' "$WORK/audit.log" | tail -25
((AUDIT_RC <= 1)) || exit 1

# ---- verdict ----------------------------------------------------------------------------------
step "checks"
.venv/bin/python docker/ci_check.py "$RUN_DIR" --persistence "$PERSISTENCE"
