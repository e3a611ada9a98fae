#!/usr/bin/env bash
# Build goldfish's local base image from a Debian bookworm root filesystem made with
# debootstrap, for machines where no registry can be reached (so `python:3.11-slim`, `redis`
# and `haproxy` cannot be pulled). One image serves every service of docker-compose.yml:
# it has python3 + venv (refbot), redis-server and haproxy.
#
# Cached: does nothing when the image already exists (FORCE=1 rebuilds).
# Env: GOLDFISH_BASE_IMAGE (default localhost/goldfish-base:bookworm), DEBIAN_MIRROR
# (default: the first Debian mirror in apt's sources), ENGINE (default podman).
set -euo pipefail

IMAGE=${GOLDFISH_BASE_IMAGE:-localhost/goldfish-base:bookworm}
ENGINE=${ENGINE:-podman}
PACKAGES=python3,python3-venv,redis-server,haproxy,socat,ca-certificates,procps

if [[ -z "${FORCE:-}" ]] && "$ENGINE" image exists "$IMAGE" 2>/dev/null; then
  echo "base image $IMAGE exists (cached; FORCE=1 rebuilds)"
  exit 0
fi

command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 2; }

# The mirror apt already uses (deb822 .sources or one-line sources.list), else deb.debian.org.
mirror=${DEBIAN_MIRROR:-}
if [[ -z "$mirror" ]]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -oE '(https?://[^ ]*/debian)/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi

root=$(mktemp -d /var/tmp/goldfish-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
start=$(date +%s)
echo "debootstrap bookworm from $mirror into $root (packages: $PACKAGES)"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$root" "$mirror" >"$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; echo "debootstrap failed (log: $root.log)" >&2; exit 1; }
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

tar -C "$root" -c . | "$ENGINE" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "goldfish base: debootstrap bookworm + $PACKAGES" - "$IMAGE" >/dev/null
echo "built base image $IMAGE in $(( $(date +%s) - start ))s"
