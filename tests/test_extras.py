"""The extras split (README "Which install for what"): the core install runs Locust, the journal,
the oracle and the local chaos backend without any extra, and a chaos backend or the reference bot
whose packages are an extra that is missing says which extra to install.

Each check runs in a fresh interpreter where the extras' top-level packages cannot be imported
(``sys.modules[name] = None`` makes ``import name`` raise ModuleNotFoundError, as when it is not
installed). `make test-locust-oldest` runs this file again in a venv that really has only the core
install.
"""
from __future__ import annotations

import subprocess
import sys

from support_locust import REPO

EXTRAS = ("docker", "kubernetes", "fastapi", "starlette", "uvicorn", "langchain_core", "langchain_community",
          "aiohttp", "httpx", "hypothesis")
BLOCK = f"import sys\nfor name in {EXTRAS!r}:\n    sys.modules[name] = None\n"


def python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_the_core_modules_import_without_any_extra():
    proc = python("import locustfiles.hooks, locustfiles.conversation, locustfiles.endofrun\n"
                  "import oracle.audit, oracle.report, oracle.compare, oracle.audit_cli\n"
                  "import chaos.controller, chaos.backends.local, chaos.__main__\n"
                  "from chaos.backends import backend_class\n"
                  "assert backend_class('local').name == 'local'\n"
                  "print('core ok')")
    assert proc.returncode == 0 and "core ok" in proc.stdout, proc.stderr[-3000:]


def test_the_docker_and_kubernetes_backends_name_their_extra():
    proc = python("from chaos.backend import MissingExtra\n"
                  "from chaos.backends import make_backend\n"
                  "for name in ('docker', 'kubernetes'):\n"
                  "    try:\n"
                  "        make_backend(name)\n"
                  "    except MissingExtra as exc:\n"
                  "        print(exc)\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "the docker backend needs the 'docker' package, which is not installed: install goldfish[containers] "
        "(pip install -e '.[containers]' in the goldfish checkout)",
        "the kubernetes backend needs the 'kubernetes' package, which is not installed: install "
        "goldfish[kubernetes] (pip install -e '.[kubernetes]' in the goldfish checkout)"]


def test_chaos_cli_without_the_docker_sdk_exits_2_naming_the_extra(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {kind: kill, target: bot, at: 1s}\n")
    proc = python("import runpy\nrunpy.run_module('chaos', run_name='__main__')", "validate", str(plan),
                  "--backend", "docker")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "install goldfish[containers]" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_refbot_without_the_stack_extra_exits_2_before_starting_anything(tmp_path):
    proc = python("import runpy\nrunpy.run_module('refbot', run_name='__main__')", "up", "--state-dir",
                  str(tmp_path / "stack"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "install goldfish[stack]" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "stack").exists()  # no redis-server, no replica was started
