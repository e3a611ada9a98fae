"""Locust keeps a master's lost worker as missing for the rest of the process: one lost in the web UI's first test
made every later test NOT TRUSTED, exit 3, "1 Locust worker(s) went missing" (verdict hunt 15). A test counts the
workers lost during it.

The master's ``runner.clients`` is a stand-in with the two members the code reads (``missing``, ``len``) as
Locust's WorkerNodes has them: importing Locust here patches the interpreter (gevent) under pytest's import hooks."""
from __future__ import annotations

from types import SimpleNamespace


class WorkerNodesStandIn(dict):
    @property
    def missing(self):
        return [w for w in self.values() if w.state == "missing"]


def master_with(*states: str):
    clients = WorkerNodesStandIn({f"w{i}": SimpleNamespace(id=f"w{i}", state=s) for i, s in enumerate(states)})
    return SimpleNamespace(runner=SimpleNamespace(clients=clients))


def test_a_worker_lost_in_an_earlier_test_is_not_this_tests():
    from locustfiles.endofrun import missing_workers, workers_lost

    env = master_with("missing", "running")
    before = missing_workers(env)
    assert before == {"w0"}
    assert workers_lost(env, before) is None
    assert workers_lost(env) == {"count": 1, "all": False}   # without the test's start: as before


def test_a_worker_lost_during_this_test_counts_and_all_means_every_worker():
    from locustfiles.endofrun import missing_workers, workers_lost

    env = master_with("missing", "running")
    before = missing_workers(env)
    env.runner.clients["w1"].state = "missing"
    assert workers_lost(env, before) == {"count": 1, "all": True}
    assert workers_lost(master_with("missing", "missing")) == {"count": 2, "all": True}


def test_a_local_runner_has_no_workers():
    from locustfiles.endofrun import missing_workers, workers_lost

    assert workers_lost(SimpleNamespace(runner=SimpleNamespace())) is None
    assert missing_workers(SimpleNamespace(runner=None)) == frozenset()
