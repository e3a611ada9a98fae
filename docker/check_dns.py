"""Do containers on a podman network find each other by name? The compose stack needs it (HAProxy
finds bot-1..3 by name, the bots find redis); without it each stack waits minutes for replicas
that never answer, and HAProxy logs "could not resolve address 'bot-1'".

    python docker/check_dns.py IMAGE    # exit 0 in seconds when it works; else exit 1 and one
                                        # line on stderr naming the cause and the fix

podman's networks resolve container names only with the DNS plugin of its network backend:
CNI (what Debian's podman 4.3 picks when netavark is not installed) needs the dnsname plugin,
netavark needs aardvark-dns. scripts/setup.sh (GOLDFISH_SETUP=full) installs the right one.
Two steps: a new network must have DNS enabled (podman enables it only when it finds the
plugin), then a container of IMAGE on it must resolve another container's name.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DNS_PACKAGE = {"cni": "golang-github-containernetworking-plugin-dnsname", "netavark": "aardvark-dns"}
RESOLVE_WITHIN_S = 10


def podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=60 + RESOLVE_WITHIN_S)


def one_line(text: str) -> str:
    return " ".join(text.split())


def problem(image: str) -> str | None:
    """None when name resolution works, else one line: what failed and how to fix it."""
    backend = podman("info", "--format", "{{.Host.NetworkBackend}}").stdout.strip() or "unknown"
    package = DNS_PACKAGE.get(backend, f"the DNS plugin of the {backend} network backend")
    fix = f"install {package}: run `GOLDFISH_SETUP=full bash scripts/setup.sh`"
    net = f"gfdns{os.getpid()}{uuid.uuid4().hex[:4]}"
    target = f"{net}-a"
    try:
        made = podman("network", "create", net)
        if made.returncode:
            return f"podman network create {net} failed: {one_line(made.stderr)}"
        if podman("network", "inspect", "--format", "{{.DNSEnabled}}", net).stdout.strip() != "true":
            return (f"containers cannot resolve each other by name: podman's {backend} network backend creates "
                    f"networks without DNS (DNSEnabled false on a new one), so HAProxy cannot find bot-1; {fix}")
        started = podman("run", "-d", "--pull=never", "--network", net, "--name", target, image, "sleep", "infinity")
        if started.returncode:
            return f"cannot start a container of {image} on network {net}: {one_line(started.stderr)}"
        probe = podman("run", "--rm", "--pull=never", "--network", net, image, "timeout", str(RESOLVE_WITHIN_S),
                       "sh", "-c", 'until getent hosts "$1" >/dev/null; do sleep 0.2; done', "sh", target)
        if probe.returncode:
            return (f"containers cannot resolve each other by name: on podman network {net} (DNS enabled, "
                    f"{backend} backend) a container did not resolve {target} within {RESOLVE_WITHIN_S} s "
                    f"(exit {probe.returncode}{'; ' + one_line(probe.stderr) if probe.stderr.strip() else ''}); "
                    f"check the DNS plugin, or reinstall it: {fix}")
        return None
    finally:
        podman("rm", "-f", "-t", "0", target)
        podman("network", "rm", "-f", net)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "docker" / "podman" / "containers.conf"))
    found = problem(argv[0])
    if found:
        print(f"check_dns: {found}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
