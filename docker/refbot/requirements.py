"""Print the reference bot's requirements, one per line, from pyproject.toml.

Why: the image installs only what refbot needs (the `stack` extra plus redis), not the whole
suite (Locust, pandas, kubernetes...), and pyproject.toml stays the one list of versions.
"""
import sys
import tomllib

project = tomllib.load(open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb"))["project"]
wanted = [d for d in project["dependencies"] if d.split("[")[0].split(">")[0].split("=")[0].strip() == "redis"]
print("\n".join(wanted + project["optional-dependencies"]["stack"]))
