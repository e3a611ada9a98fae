"""The run folder's own files: run.json (what ran) and steps.jsonl (load step boundaries).

Layout and fields: docs/CONTRACTS.md "Run folder", "Run metadata", "Load steps".
"""
from __future__ import annotations

import platform
import time
from pathlib import Path

from contracts import codec, redact
from contracts.runfolder import RunFolder, write_text


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def v(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"goldfish": v("goldfish"), "locust": v("locust"), "python": platform.python_version()}


def write_json_atomic(path: Path, data: dict) -> None:
    """Write through a temporary file of its own (a signal handler may write while a phase does), removed when the
    write fails (a full disk left one empty temporary per phase beside run.json)."""
    text = codec.dumps_document(redact.deep(data))  # the target, options and plan may hold credentials
    write_text(path, text)


def load_of(parsed_options, shape_class=None) -> dict:
    """The load Locust was asked for (``-u``, ``-r``, ``-t`` or the web UI's form, a LoadTestShape): runs under
    different loads are not like for like (``oracle compare`` says so). None where Locust did not say."""
    def get(name):
        value = getattr(parsed_options, name, None)
        return value if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None

    return {"users": get("num_users"), "spawn_rate": get("spawn_rate"), "run_time": get("run_time"),
            "shape": None if shape_class is None else  # an instance in Locust 2.x, a class in older releases
            (shape_class if isinstance(shape_class, type) else type(shape_class)).__name__}


def start_run(settings, script, target: str | None, load: dict | None = None) -> Path:
    """Create the run folder and write run.json with ``end: null`` (``load``: ``load_of``'s)."""
    folder = RunFolder(settings.run_dir)
    folder.journal.mkdir(parents=True, exist_ok=True)
    plan_text = None
    if settings.chaos:
        try:
            plan_text = Path(settings.chaos).read_text(encoding="utf-8")
        except OSError:
            plan_text = None
    meta = {"run": settings.run_id, "label": settings.label, "target": target, "options": settings.public(),
            "plan": settings.chaos or None, "plan_text": plan_text, "script": script.name,
            "script_sha": script.sha, "script_probes": sum(step.kind == "probe" for step in script.steps),
            "load": load, "start": time.time(), "end": None, "versions": versions()}
    write_json_atomic(folder.run_json, meta)
    return folder.path


def update_run(run_dir: str | Path, **fields) -> None:
    """Set fields of run.json (the phase in progress, the outcome); a missing run.json is left alone."""
    path = RunFolder(run_dir).run_json
    try:
        meta = codec.load_document(path)
    except (OSError, codec.DecodeError):
        return
    meta.update(fields)
    write_json_atomic(path, meta)


def end_run(run_dir: str | Path, **fields) -> None:
    update_run(run_dir, end=time.time(), **fields)


def append_step(run_dir: str | Path, step: int, users: int, start: float, end: float) -> None:
    with open(RunFolder(run_dir).steps, "ab") as f:
        f.write(codec.dumps_line({"step": step, "users": users, "start": start, "end": end}))
