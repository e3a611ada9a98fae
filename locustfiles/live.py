"""Live counts of what the journal recorded in the test in progress, for the web UI's goldfish tab.

The counts are taken from the journal records themselves (``TalliedJournal`` wraps the journal), so the tab
can never disagree with the journal: the recall and cross-talk judgements live here and in the journal, not
in Locust's request statistics, whose totals count real HTTP turns only. Each Locust process counts its own
turns; a worker sends its counts with every stats report (Locust's ``report_to_master``) and the master adds
up the latest ones of the current run (``worker_report``), as Locust's examples/web_ui_cache_stats.py does.
The same channel carries the one fact no journal record holds: WebSocket replies that came in several frames
(``Tally.streamed``), which the end of the run writes to run.json (``streamed_replies``). It is the channel,
not a message at the warning, because its counts are absolute and the master keeps each worker's latest: a
worker that dies loses at most its last report's seconds, and one on another machine needs no shared folder.

Sessions are counted by outcome without keeping every session: a user holds one conversation at a time,
so a session's flags are folded into the totals when its user starts the next one (memory grows with the
number of users, not of sessions).
"""
from __future__ import annotations

from collections import Counter

AMNESIA, CROSSTALK, INFO = 1, 2, 4  # a session's flags
SESSION_COUNTS = {AMNESIA: "sessions_amnesia", CROSSTALK: "sessions_crosstalk", INFO: "sessions_info"}
COUNTS = ("turns", "ok", "fail", "info", "interrupted", "probes_answered", "probes_passed", "probes_amnesia",
          "crosstalk_replies", "sessions", "sessions_clean", "sessions_amnesia", "sessions_crosstalk",
          "sessions_info")


class Tally:
    """What one process journaled in one run, counted record by record (no I/O, no gevent switch)."""

    def __init__(self, run: str):
        self.run = run
        self.counts: Counter = Counter()
        self.open: dict[str, list] = {}  # user -> [session, flags]: the conversation it is holding
        self.streamed_replies: dict | None = None  # {count, first}: see ``streamed``

    def streamed(self, frame: bytes) -> None:
        """Count a turn after whose reply the WebSocket bot sent another frame holding a reply (socket_turns.py),
        keeping the first such frame: no journal record says it, and it makes the run's FAIL NOT TRUSTED."""
        if self.streamed_replies is None:
            self.streamed_replies = {"count": 0, "first": frame.decode("utf-8", "replace")[:200]}
        self.streamed_replies["count"] += 1

    def add(self, turn) -> None:
        """Count one journal record (a ``contracts.journal.Turn``; an in-flight record is not a turn yet)."""
        if turn.in_flight:
            return
        c = self.counts
        c["turns"] += 1
        interrupted = turn.interrupted
        if interrupted:
            c["interrupted"] += 1  # journaled as info, but no request was counted: the stop cut it short
        else:
            c[turn.outcome] += 1
        verdict = turn.verdict
        if verdict is not None:
            c["probes_answered"] += 1
            c["probes_passed" if verdict == "pass" else "probes_amnesia"] += 1
        if turn.crosstalk:
            c["crosstalk_replies"] += 1
        user, session = turn.user or turn.session, turn.session
        held = self.open.get(user)
        if held is None or held[0] != session:
            if held is not None:
                self._fold(c, held[1])
            c["sessions"] += 1
            held = self.open[user] = [session, 0]
        held[1] |= (AMNESIA if verdict == "amnesia" else 0) | (CROSSTALK if turn.crosstalk else 0) | \
            (INFO if turn.outcome == "info" and not interrupted else 0)

    @staticmethod
    def _fold(counts: Counter, flags: int) -> None:
        if not flags:
            counts["sessions_clean"] += 1
        for bit, name in SESSION_COUNTS.items():
            if flags & bit:
                counts[name] += 1

    def snapshot(self) -> dict:
        """Every count, the conversations still open included."""
        counts = Counter(self.counts)
        for _session, flags in self.open.values():
            self._fold(counts, flags)
        return {name: int(counts[name]) for name in COUNTS}


# What stops the test under load when a journal line cannot be written (a full disk, a file-size limit): set by
# the master's or the local runner's EndOfRun for each test it starts (locustfiles/endofrun.py), called with the
# shard's path and the error. None (a worker, a library user): the error goes to the user that recorded, as before.
journal_failed = None


class TalliedJournal:
    """The journal as the users see it (``record``, ``path``, ``close``), counting each record on its way in
    and, with ``--replica-header``, tagging it with the replica that answered (locustfiles/replica.py).

    A record that cannot be written (``OSError``: no space left on the device) stops the test: the first is
    handed to ``journal_failed``, which says what and where once and stops the load, and later records are
    dropped without a word (the test is stopping). Why: every user used to raise the error at each turn (1,355
    tracebacks on a full disk) while the load went on sending turns that could not be journaled, and the run
    ended with two contradicting exit codes."""

    def __init__(self, journal, tally: Tally, replicas=None):
        self.journal, self.tally, self.replicas = journal, tally, replicas
        self.failed: OSError | None = None

    @property
    def path(self):
        return self.journal.path

    def record(self, turn) -> None:
        if self.failed is not None:
            return  # nothing more can be journaled, and the test is stopping (said once)
        if self.replicas is not None and self.replicas.header and not turn.in_flight:
            turn.replica = self.replicas.take()
        try:
            self.journal.record(turn)
        except OSError as exc:
            stop = journal_failed
            if stop is None:
                raise
            self.failed = exc
            stop(self.journal.path, exc)
            return
        self.tally.add(turn)  # what the journal holds, never a record it could not write

    def close(self) -> None:
        self.journal.close()


class Live:
    """The counts of the current run on the master or the local runner: its own tally, or its workers'."""

    def __init__(self):
        self.run: str | None = None
        self.local: Tally | None = None
        self.workers: dict[str, dict] = {}
        self.streamed: dict[str, dict] = {}  # worker -> its Tally.streamed_replies

    def start(self, run: str, local: Tally | None = None) -> None:
        self.run, self.local, self.workers, self.streamed = run, local, {}, {}

    def on_worker_report(self, client_id: str, data: dict, **_kw) -> None:
        report = data.get("goldfish")
        if report and report.get("run") == self.run:  # a late report of an earlier run is not this one's
            self.workers[client_id] = report["counts"]
            if report.get("streamed"):
                self.streamed[client_id] = report["streamed"]

    def streamed_replies(self) -> dict | None:
        """This run's ``Tally.streamed_replies``, its workers' added up: the latest report of each, kept when the
        worker goes missing (a worker that dies loses at most its last few seconds, never the fact)."""
        if self.local is not None:
            return self.local.streamed_replies
        if not self.streamed:
            return None
        seen = list(self.streamed.values())
        return {"count": sum(int(s.get("count") or 0) for s in seen), "first": seen[0].get("first")}

    def counts(self) -> dict:
        if self.local is not None:
            return self.local.snapshot()
        total = Counter()
        for counts in self.workers.values():
            total.update(counts)
        return {name: int(total[name]) for name in COUNTS}


def report_to_master(tally: Tally | None, data: dict) -> None:
    """On a worker: add this run's counts (absolute, so a lost report loses nothing) to its stats report."""
    if tally is not None:
        data["goldfish"] = {"run": tally.run, "counts": tally.snapshot(), "streamed": tally.streamed_replies}
