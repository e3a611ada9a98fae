"""What every ChatUser of one Locust process shares: settings, script, contract, plants, journal.

One ``Runtime`` hangs on ``environment.goldfish`` (set by locustfiles/hooks.py at init), so
users reach it without module globals and a test can build its own.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from locustfiles.contract import ChatContract
from locustfiles.journal import Journal
from locustfiles.judge import PlantRegistry
from locustfiles.options import Settings
from locustfiles.script import Script, load_script


@dataclass
class Runtime:
    settings: Settings
    script: Script
    contract: ChatContract
    plants: PlantRegistry = field(default_factory=PlantRegistry)
    journal: Journal | None = None  # a live.TalliedJournal around it while a test runs
    step: int | None = None  # current load step (step shape), broadcast by the master
    crosstalk_logged: int = 0
    runner_kind: str = ""
    end: object = None        # endofrun.EndOfRun (master / local runner)
    collector: object = None  # distributed.MasterCollector (master)
    shipper: object = None    # distributed.WorkerShipper (worker)
    telemetry: object = None  # telemetry.Sampler (master / local runner, during the load)
    watch: object = None      # distributed.MasterWatch (worker)
    live: object = None       # live.Live: the current test's counts for the web UI (master / local runner)
    replicas: object = None   # replica.ReplicaTag with --replica-header
    _user_ids: itertools.count = field(default_factory=itertools.count)

    @classmethod
    def from_settings(cls, settings: Settings) -> "Runtime":
        return cls(settings=settings, script=load_script(settings.script),
                   contract=ChatContract.from_settings(settings))

    def next_user_id(self) -> int:
        return next(self._user_ids)
