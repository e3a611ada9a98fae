#!/usr/bin/env bash
# One-time set-up on a fresh Debian/Ubuntu machine: system packages, a venv, goldfish with its extras.
# Idempotent: re-running only installs what is missing. GOLDFISH_SETUP says for what:
#   core  (`make setup`)  goldfish, Locust and the oracle: testing your own bot. No system packages.
#   stack (`make demo`)   + redis-server and haproxy, and the reference bot (goldfish[stack])
#   full  (`make test`)   + the container and browser tooling below, and goldfish[test]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
LEVEL="${GOLDFISH_SETUP:-core}"
case "$LEVEL" in
    core) extras="" ;;
    stack) extras="[stack]" ;;
    full) extras="[test]" ;;
    *) echo "setup: GOLDFISH_SETUP=$LEVEL: expected core, stack or full" >&2; exit 2 ;;
esac

# redis-server and haproxy: the embedded stack (not for core). The rest only for the whole test suite
# (GOLDFISH_SETUP=full, what `make test` asks for): podman + runc + podman-compose + debootstrap
# + socat and podman's DNS plugin for the container path, chromium for the report's browser test, openssl for
# the tests' self-signed certificates.
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
updated=""
apt_install() {
    [ -n "$updated" ] || { $SUDO apt-get update -qq; updated=1; }
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v haproxy >/dev/null || need+=(haproxy)
[ "$LEVEL" != core ] || need=()  # testing your own bot needs no system package
if [ "$LEVEL" = full ]; then
    for tool in podman runc podman-compose debootstrap socat chromium openssl; do
        command -v "$tool" >/dev/null || need+=("$tool")
    done
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${need[*]}"
    apt_install "${need[@]}"
    # The Debian packages start system-wide daemons; goldfish starts its own on free ports.
    for svc in redis-server haproxy; do
        (command -v systemctl >/dev/null && $SUDO systemctl disable --now "$svc" >/dev/null 2>&1) || true
        (command -v service >/dev/null && $SUDO service "$svc" stop >/dev/null 2>&1) || true
    done
fi

# The compose stack finds its containers by name (HAProxy -> bot-1..3, bots -> redis). podman's
# networks resolve names only with the DNS plugin of its network backend, which
# --no-install-recommends leaves out: CNI (what Debian 12's podman picks without netavark, and
# keeps once chosen) needs the dnsname plugin, netavark needs aardvark-dns. We install the plugin
# of the backend podman uses; switching backends would need `podman system reset`. Checked on
# every run, so a podman installed earlier without the plugin (or with it removed since) is fixed
# too; --reinstall because the package may be installed with its binary gone.
# docker/check_dns.py then checks that one container really resolves another.
if [ "$LEVEL" = full ]; then
    export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/docker/podman/containers.conf}"
    backend=$(podman info --format '{{.Host.NetworkBackend}}')
    dns_ready() {  # a new network gets DNS (CNI: only when podman finds dnsname); netavark: aardvark-dns is there
        local net="goldfish-setup-dns-$$" dns
        podman network create "$net" >/dev/null
        dns=$(podman network inspect --format '{{.DNSEnabled}}' "$net")
        podman network rm -f "$net" >/dev/null
        [ "$dns" = true ] || return 1
        [ "$backend" != netavark ] || [ -x /usr/lib/podman/aardvark-dns ] || [ -x /usr/libexec/podman/aardvark-dns ]
    }
    if ! dns_ready; then
        case "$backend" in
            cni) dns_pkg=golang-github-containernetworking-plugin-dnsname ;;
            netavark) dns_pkg=aardvark-dns ;;
            *) echo "setup: podman's network backend '$backend' is unknown here: cannot pick its DNS plugin" >&2; exit 1 ;;
        esac
        echo "setup: installing $dns_pkg: podman's $backend networks resolve container names only with it"
        apt_install --reinstall "$dns_pkg"
        dns_ready || { echo "setup: podman's $backend networks still have no DNS after installing $dns_pkg" \
                            "(see docs/containers.md, Engine)" >&2; exit 1; }
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
echo "setup: installing goldfish$extras into $VENV"
"$VENV/bin/python" -m pip install -q -e ".$extras"
echo "setup: done"
