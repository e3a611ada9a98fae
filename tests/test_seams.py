"""The seams between the parts (docs/CONTRACTS.md): chaos depends on no other part of goldfish (not the
reference bot, the Locust side or the oracle); the Locust side calls the oracle only through its public
entry (oracle/__init__.py)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHAOS_MODULES = ["chaos.__main__", "chaos.controller", "chaos.backends.local", "chaos.backends.docker",
                 "chaos.backends.kubernetes", "chaos.backends.toxiproxy"]


def test_chaos_imports_nothing_from_refbot_locustfiles_or_oracle():
    code = (f"import sys; import {', '.join(CHAOS_MODULES)}\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'refbot', 'locustfiles', 'oracle'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_chaos_does_not_name_the_reference_bot():
    hits = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "chaos").rglob("*")) if p.is_file()
            and p.suffix in (".py", ".yaml", ".yml", ".md")
            for n, line in enumerate(p.read_text().splitlines(), 1) if "refbot" in line]
    assert hits == []


def test_locustfiles_call_the_oracle_only_through_its_public_entry():
    hits = []
    for p in sorted((REPO / "locustfiles").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            hits += [f"{p.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n.startswith("oracle.")]
    assert hits == []
