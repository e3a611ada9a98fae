#!/usr/bin/env bash
# Build the images the compose stack needs on a machine without a registry, both cached:
# the debootstrap base image (skipped when it exists) and the refbot image on it (podman's
# layer cache: seconds when only refbot/ changed, nothing when nothing did).
# Env: GOLDFISH_BASE_IMAGE, GOLDFISH_REFBOT_IMAGE, CONTAINERS_CONF (see docker/podman/).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_IMAGE=${GOLDFISH_BASE_IMAGE:-localhost/goldfish-base:bookworm}
REFBOT_IMAGE=${GOLDFISH_REFBOT_IMAGE:-localhost/goldfish-refbot:latest}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/docker/podman/containers.conf}

GOLDFISH_BASE_IMAGE="$BASE_IMAGE" bash docker/base/build-base.sh
build=(podman build --format docker --layers -f docker/refbot/Dockerfile --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$REFBOT_IMAGE")
# Behind a TLS-intercepting proxy, pip inside the build needs the host's CA bundle.
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  build+=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro --build-arg PIP_CERT=/run/host-ca.crt)
fi
log=$(mktemp /tmp/goldfish-refbot-build.XXXXXX)
start=$(date +%s)
if "${build[@]}" . >"$log" 2>&1; then
  echo "refbot image $REFBOT_IMAGE ready in $(( $(date +%s) - start ))s ($(grep -c 'Using cache' "$log" || true) cached steps)"
  rm -f "$log"
else
  tail -20 "$log" >&2; echo "refbot image build failed (log: $log)" >&2; exit 1
fi
