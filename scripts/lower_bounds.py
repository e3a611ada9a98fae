"""Print ``name==lower-bound`` for the named core dependencies in pyproject.toml, one argument each.

Why: CI tests the Locust tests on both ends of the pinned range (Makefile `test-locust-oldest`), and
the lower end must come from the same line as the pin, not a second copy of its number.

    python3 scripts/lower_bounds.py locust geventhttpclient   # -> locust==2.42 geventhttpclient==2.6
"""
import re
import sys
import tomllib
from pathlib import Path

deps = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]["dependencies"]
out = []
for name in sys.argv[1:]:
    spec = next((d for d in deps if re.match(rf"{re.escape(name)}\s*[<>=!~\[;]", d)), None)
    low = re.search(r">=\s*([\w.]+)", spec or "")
    if not low:
        sys.exit(f"lower_bounds: pyproject.toml has no core dependency {name!r} with a '>=' lower bound")
    out.append(f"{name}=={low[1]}")
print(" ".join(out))
