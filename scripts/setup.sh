#!/usr/bin/env bash
# One-time set-up on a fresh Debian/Ubuntu machine: system packages, a venv, goldfish with its extras.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

# redis-server and haproxy: the embedded stack. The rest only for the whole test suite
# (GOLDFISH_SETUP=full, what `make test` asks for): podman + runc + podman-compose + debootstrap
# + socat for the container path, chromium for the report's browser test.
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v haproxy >/dev/null || need+=(haproxy)
if [ "${GOLDFISH_SETUP:-}" = full ]; then
    for tool in podman runc podman-compose debootstrap socat chromium; do
        command -v "$tool" >/dev/null || need+=("$tool")
    done
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${need[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # The Debian packages start system-wide daemons; goldfish starts its own on free ports.
    for svc in redis-server haproxy; do
        (command -v systemctl >/dev/null && $SUDO systemctl disable --now "$svc" >/dev/null 2>&1) || true
        (command -v service >/dev/null && $SUDO service "$svc" stop >/dev/null 2>&1) || true
    done
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
echo "setup: installing goldfish[test] into $VENV"
"$VENV/bin/python" -m pip install -q -e '.[test]'
echo "setup: done"
