"""Helpers for the web-UI tests: a real `locust -f locustfiles/chat.py` with its web UI on a free loopback
port, driven through the UI's own HTTP endpoints, and real headless Chromium for screenshots and the DOM.

    with locust_ui(tmp_path, "--host", url) as ui:
        ui.swarm(user_count=4, spawn_rate=4)      # POST /swarm, as the start form does
        ui.wait(lambda s: s["counts"]["turns"] > 20)
        ui.stop()                                 # POST /stop: returns once the run is audited and judged
    ui.returncode, ui.output                      # after the context: the process quit on SIGTERM
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import requests

from conftest import free_port, wait_until
from support_locust import CHATFILE, LOCUST, _kill_group

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = os.environ.get("GOLDFISH_SCREENSHOTS")  # also keep the screenshots here (e.g. for a review)


class LocustUI:
    def __init__(self, proc: subprocess.Popen, port: int, cwd: Path, out, err):
        self.proc, self.port, self.cwd, self._out, self._err = proc, port, cwd, out, err
        self.url = f"http://127.0.0.1:{port}"
        self.http = requests.Session()
        self.http.trust_env = False  # loopback only: no proxies
        self.returncode: int | None = None

    def get(self, path: str, **kw) -> requests.Response:
        return self.http.get(self.url + path, timeout=kw.pop("timeout", 10), **kw)

    def status(self) -> dict:
        return self.get("/goldfish/status").json()

    def swarm(self, **form) -> dict:
        """POST /swarm as the start form does (user_count, spawn_rate, and any option by its dest name)."""
        reply = self.http.post(self.url + "/swarm", data=form, timeout=60).json()
        return reply

    def stop(self, timeout: float = 180) -> dict:
        """POST /stop (GET on older Locust, such as 2.42.0 at the pin's lower end): Locust stops the users and fires
        test_stop, where goldfish heals, audits and judges."""
        reply = self.http.post(self.url + "/stop", timeout=timeout)
        if reply.status_code == 405:
            reply = self.http.get(self.url + "/stop", timeout=timeout)
        return reply.json()

    def wait(self, condition, timeout: float = 60, what: str = "the goldfish status") -> dict:
        """Poll /goldfish/status until ``condition(status)`` holds; return that status."""
        def check():
            status = self.status()
            return status if condition(status) else None
        return wait_until(check, timeout=timeout, interval=0.2, what=what)

    def reset_stats(self) -> None:
        """The Reset Stats button: POST /stats/reset (GET on older Locust)."""
        reply = self.http.post(self.url + "/stats/reset", timeout=30)
        if reply.status_code == 405:
            reply = self.http.get(self.url + "/stats/reset", timeout=30)
        reply.raise_for_status()

    def exceptions(self) -> list:
        """The Exceptions tab's rows (Locust's dict of user exceptions)."""
        return self.get("/exceptions").json()["exceptions"]

    def stats(self) -> dict:
        return self.get("/stats/requests").json()

    def quit(self, sig=signal.SIGTERM, timeout: float = 120) -> int:
        self.proc.send_signal(sig)
        self.returncode = self.proc.wait(timeout)
        return self.returncode

    @property
    def output(self) -> str:
        self._out.seek(0)
        self._err.seek(0)
        return self._out.read().decode(errors="replace") + self._err.read().decode(errors="replace")


@contextmanager
def locust_ui(cwd: Path, *args, workers: int = 0, locustfile=CHATFILE):
    """Start the web UI in ``cwd`` (run folders go to ``cwd/results``); on exit SIGTERM it (Locust's own
    quit) unless the test already quit it, and kill its process group if anything is left."""
    port = free_port()
    cwd.mkdir(parents=True, exist_ok=True)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # files, not pipes: never block
    proc = subprocess.Popen([LOCUST, "-f", str(locustfile), "--web-host", "127.0.0.1", "--web-port", str(port),
                             "--loglevel", "WARNING", *map(str, args)], cwd=cwd, stdout=out, stderr=err,
                            start_new_session=True)
    ui = LocustUI(proc, port, cwd, out, err)
    try:
        def up():
            if proc.poll() is not None:
                raise AssertionError(f"locust exited with {proc.returncode}:\n{ui.output[-3000:]}")
            return ui.get("/").status_code == 200
        wait_until(up, timeout=60, interval=0.2, what="the Locust web UI")
        yield ui
        if ui.returncode is None:
            ui.quit()
    finally:
        _kill_group(proc)
        ui.returncode = proc.returncode if ui.returncode is None else ui.returncode


def template_args(html: str) -> dict:
    """``window.templateArgs`` of Locust's index page (what the React app is started with)."""
    match = re.search(r"window\.templateArgs = (\{.*?\})\s*</script>", html, re.S)
    assert match, "no templateArgs in the page"
    return json.loads(match.group(1))


def chromium(profile: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    assert CHROMIUM, "chromium is not installed (scripts/setup.sh installs it for `make test`)"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={profile}", "--virtual-time-budget=8000"]
    return subprocess.run(base + list(args), capture_output=True, text=True, timeout=timeout)


def screenshot(url: str, out: Path, profile: Path, size: str = "1400,1300") -> Path:
    """A real headless-Chromium screenshot of ``url`` (the React app has ~8 s of virtual time to poll)."""
    chromium(profile, f"--screenshot={out}", f"--window-size={size}", url)
    assert out.exists() and out.stat().st_size > 10_000, f"chromium wrote no screenshot of {url}"
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(SCREENSHOTS) / out.name)
    return out


def dom(url: str, profile: Path) -> str:
    """The page's DOM after the React app rendered it (text of the rows, the form's fields)."""
    return chromium(profile, "--dump-dom", "--window-size=1400,1300", url).stdout
