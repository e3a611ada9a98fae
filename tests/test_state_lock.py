"""The stack's state lock under gevent (Locust): a chaos heal asking for the lock while an apply greenlet holds it
(a restart in its grace) blocked the whole hub in flock, so the holder never ran again and the run hung for good,
deaf to SIGTERM (chaos hunt 18 F0). The lock is asked for again and again now, letting the holder run."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TWO_GREENLETS = textwrap.dedent("""
    from gevent import monkey; monkey.patch_all()
    import sys, time, gevent
    from targets import registry
    order = []
    def holder():
        with registry.locked_state(sys.argv[1], missing_ok=True):
            order.append("held")
            time.sleep(0.5)   # an apply's wait for a process to stop, under the lock
            order.append("released")
    def healer():
        time.sleep(0.1)
        with registry.locked_state(sys.argv[1], missing_ok=True):
            order.append("healed")
    gevent.joinall([gevent.spawn(holder), gevent.spawn(healer)], timeout=20)
    print(order)
""")


def test_a_second_greenlet_waiting_for_the_state_lock_lets_the_holder_finish(tmp_path):
    try:
        res = subprocess.run([sys.executable, "-c", TWO_GREENLETS, str(tmp_path / "stack")], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the greenlet waiting for the lock blocked the hub: the holder never released it")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "['held', 'released', 'healed']", res.stdout + res.stderr
