"""An opt-in step-load shape: ``--step-users N --steps K --step-duration D`` runs K levels of
N, 2N, ... KN users, D seconds each, so one run yields several throughput levels.

Locust uses any shape class it finds in the locustfile, so this one is always *defined*; the
init hook (locustfiles/hooks.py) sets ``environment.shape_class = None`` unless the step
options are given, and the plain ``-u/-r/-t`` run happens. Each finished step is appended to
``steps.jsonl``; the master broadcasts the step index to workers for the journal's ``step``.

A step is a load level, not a ramp: each step's new users arrive within a second (spawn rate at least
``--step-users`` per second; a higher ``-r`` still applies). With Locust's headless default of 1 user/s a
step of +8 users spent 8 of its seconds ramping.
"""
from __future__ import annotations

import time

from locust import LoadTestShape

from locustfiles.distributed import MSG_STEP
from locustfiles.runfolder import append_step


class StepLoadShape(LoadTestShape):
    use_common_options = True  # honours -t (stops early) and -r (spawn rate)

    def __init__(self):
        super().__init__()
        self.current: tuple[int, int, float] | None = None  # (step, users, wall start)

    def tick(self):
        env = self.runner.environment
        s = env.goldfish.settings
        run_time = self.get_run_time()
        limit = s.steps * s.step_duration
        if env.parsed_options is not None and env.parsed_options.run_time:
            limit = min(limit, float(env.parsed_options.run_time))
        if run_time >= limit:
            self.finish()
            return None
        step = int(run_time // s.step_duration)
        users = s.step_users * (step + 1)
        if self.current is None or self.current[0] != step:
            self.finish()
            self.current = (step, users, time.time())
        env.goldfish.step = step
        self.runner.send_message(MSG_STEP, {"step": step})
        asked = (env.parsed_options.spawn_rate if env.parsed_options is not None else None) or 0
        return users, max(float(asked), float(s.step_users))

    def finish(self) -> None:
        """Write the open step's boundaries (at a step change, at the end, or at test_stop)."""
        if self.current is not None:
            step, users, start = self.current
            append_step(self.runner.environment.goldfish.settings.run_dir, step, users, start, time.time())
            self.current = None
