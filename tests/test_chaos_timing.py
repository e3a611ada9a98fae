"""Applied-fault timing vs the plan, in plain threads (the CLI) and under gevent (inside Locust)."""
from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap
from pathlib import Path


from support_chaos import chaos_stack, controller_for, read_timeline  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[1]
PLAN = """
    faults:
      - {id: ck, kind: redis-client-kill, target: redis, every: 250ms, start: 200ms, until: 6s}
      - {id: pz, kind: pause, target: bot, every: 1s, start: 300ms, until: 6s, duration: 400ms, count: 1}
      - {id: lb, kind: lb-disable, target: bot-2, every: 2s, start: 500ms, until: 6s, duration: 500ms}
"""


def lateness_ms(run_dir):
    applies = [r for r in read_timeline(run_dir) if r["event"] == "apply"]
    assert applies and all(r["outcome"] == "ok" for r in applies), applies
    return [(r["time"] - r["planned"]) * 1000 for r in applies]


def report(label, late):
    print(f"\n{label}: {len(late)} applies, lateness mean {statistics.mean(late):.1f} ms, "
          f"max {max(late):.1f} ms, min {min(late):.1f} ms")


def test_timing_in_threads(chaos_stack, tmp_path):
    ctl = controller_for(chaos_stack, PLAN, tmp_path / "run").start()
    assert ctl.wait(60)
    late = lateness_ms(tmp_path / "run")
    report("threads", late)
    assert len(late) == 24 + 6 + 3
    assert min(late) >= -5                   # never early (5 ms: wall vs monotonic clock)
    assert max(late) < 100, late             # the bar: within 100 ms of the plan


GEVENT_RUN = textwrap.dedent("""
    from gevent import monkey; monkey.patch_all()
    import sys, textwrap
    sys.path.insert(0, "tests")
    from chaos.backends.local import LocalBackend
    from chaos.controller import Controller
    from chaos.plan import parse_plan
    import threading, gevent.threading
    assert threading.Thread is gevent.threading.Thread or 'gevent' in repr(threading.Thread)
    plan = parse_plan(textwrap.dedent(sys.argv[3]))
    ctl = Controller(plan, LocalBackend(sys.argv[1], health_timeout=30), sys.argv[2]).start()
    assert ctl.wait(60)
""")


def test_timing_under_gevent_like_locust(chaos_stack, tmp_path):
    """Locust monkey-patches: the controller's threads become greenlets; deadlines must still hold."""
    res = subprocess.run([sys.executable, "-c", GEVENT_RUN, str(chaos_stack.state_dir), str(tmp_path / "run"), PLAN],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    late = lateness_ms(tmp_path / "run")
    report("gevent", late)
    assert len(late) == 33 and min(late) >= -5 and max(late) < 100, late
    recovers = [r for r in read_timeline(tmp_path / "run") if r["event"] == "recover"]
    assert len(recovers) == 33 and all(r["outcome"] == "ok" for r in recovers)
