"""A targets file's command may pass an empty argument: `redis-server --save ""` is how Redis turns snapshots off.

It was refused ("must name a program to run"); only an empty command or an empty program name is meaningless.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import redis

from conftest import free_port, wait_until
from targets import file as targets_file, registry


def test_an_empty_argument_reaches_the_program(tmp_path):
    """The empty argument is kept and passed on: the redis-server started from the record runs with save off."""
    port = free_port()
    path = tmp_path / "t.yaml"
    path.write_text(f'targets:\n  r:\n    command: redis-server --port {port} --bind 127.0.0.1 --save ""\n'
                    f"    health: {{redis: redis://127.0.0.1:{port}/0}}\n")
    member = targets_file.load(path).members["r"]
    assert member["cmd"] == ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    Path(member["log"]).parent.mkdir()
    proc = registry.start_member(member)
    try:
        client = redis.Redis(port=port)
        assert wait_until(lambda: _ping(client), what="redis-server from the targets file")
        assert client.config_get("save") == {"save": ""}
    finally:
        proc.terminate()
        proc.wait(10)


def _ping(client) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


@pytest.mark.parametrize("command", ["\"'' --port 1\"", '["", "--port"]', "[]", "' '"])
def test_an_empty_program_is_still_refused(tmp_path, command):
    """An empty program name, no argument at all, or a blank string (it splits to nothing)."""
    path = tmp_path / "t.yaml"
    path.write_text(f"targets:\n  r:\n    command: {command}\n")
    with pytest.raises(targets_file.TargetsError, match="t.yaml:3: command: must name a program to run"):
        targets_file.load(path)
