"""A killed test run cannot tear its containers down; the next run removes them before any test
picks a port (their published ports' NAT rules outlive podman's port-holding conmon and capture a
later server's port). Real podman; skipped without it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from support_docker import (BASE_IMAGE, PROJECT_LABEL, build_images, podman, remove_abandoned_projects,
                            remove_project, require_podman)


@pytest.fixture(scope="module")
def images():
    require_podman()
    build_images()


def run_container(project: str) -> str:
    return podman("run", "-d", "--label", f"{PROJECT_LABEL}={project}", "-p", "127.0.0.1::6379",
                  BASE_IMAGE, "sleep", "300").stdout.strip()


def containers_of(project: str) -> list[str]:
    return podman("ps", "-aq", "--filter", f"label={PROJECT_LABEL}={project}").stdout.split()


def test_projects_of_dead_test_processes_are_removed_and_live_ones_kept(images):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    abandoned, live, foreign = f"gft-{dead_pid}-dead", f"gft-{__import__('os').getpid()}-a11e", f"other-{dead_pid}"
    try:
        for project in (abandoned, live, foreign):
            run_container(project)
        removed = remove_abandoned_projects()
        assert abandoned in removed and live not in removed and foreign not in removed
        assert containers_of(abandoned) == []
        assert len(containers_of(live)) == 1 and len(containers_of(foreign)) == 1
    finally:
        for project in (abandoned, live, foreign):
            remove_project(project)
