"""The controller: runs a plan against a backend on monotonic deadlines, and always heals.

Every applied fault is outstanding (chaos/outstanding.py) until recovered. Plan end, stop()
(Ctrl-C, SIGTERM, Locust's test_stop), or an exception in the scheduler all end in heal(), which
recovers everything outstanding, logs each recovery on the timeline, and never raises: a failed
recovery is recorded, stays in outstanding.json for ``python -m chaos heal``, and is returned.

Runs as plain threads (the CLI) and inside Locust, where gevent's monkey-patching turns each
threading.Thread into a greenlet. Each occurrence waits for ``t0 + offset`` on the monotonic
clock (never cumulative sleeps), so one slow fault does not delay the next one.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from chaos.backend import Backend, UnsupportedFault
from chaos.backends import NotApplied
from chaos.faults import KINDS, TOXIC, WHOLE_TARGET_KINDS, Fault
from chaos.outstanding import Outstanding
from chaos.plan import Plan, PlanError, PlanFault
from chaos.timeline import Timeline

log = logging.getLogger("chaos")
PREPARE_S = 0.1   # occurrences start this early to do their bookkeeping before the planned time
DRY_RUN_SHOWN = 1000  # the dry run lists this many occurrences and counts the rest (a plan may have 100,000)
SKIPS_SHOWN = 10  # predicted skips listed before a run; the rest are counted


def shown(skips: list[str], most: int = SKIPS_SHOWN) -> list[str]:
    """The first ``most`` predicted skips, and a line counting the rest."""
    return skips[:most] + ([f"... and {len(skips) - most} more occurrence(s) that will be skipped"]
                           if len(skips) > most else [])


def claimable(pf: PlanFault, k: int, instances: list[str], busy: set, held: int, plan: Plan) -> tuple[list, bool]:
    """(instances occurrence ``k`` takes, whether max_concurrent stops it): one fault per instance at a time, a
    whole-target fault only on a target none of whose instances is held, at most max_concurrent instances held.
    The one rule of the run (``_claim``) and of its prediction (``predicted_skips``)."""
    if pf.kind in WHOLE_TARGET_KINDS:
        chosen = [] if busy & (set(instances) | {pf.target}) else [pf.target]
    else:
        free = [i for i in instances if i not in busy]
        chosen = pf.choose(free, k, plan.seed) if free else []
    full = plan.max_concurrent is not None and bool(chosen) and held + len(chosen) > plan.max_concurrent
    return ([] if full else chosen), full


def held_by(pf: PlanFault, chosen: list[str], instances: list[str]) -> list[str]:
    """What an occurrence that took ``chosen`` holds: a whole-target fault (a rolling restart) holds its target and
    every instance of it, so that no per-instance fault takes one meanwhile (a kill of a member the rolling restart
    then found down made it fail half applied, and a correct bot FAIL the chaos gate: chaos hunt 18)."""
    return [*chosen, *instances] if pf.kind in WHOLE_TARGET_KINDS else chosen


class Controller:
    def __init__(self, plan: Plan, backend: Backend, run_dir: str | Path, toxiproxy: str | None = None,
                 stop_timeout: float = 120.0, outstanding: Outstanding | None = None):
        """``outstanding``: what an earlier controller left (``heal_run``); without it the run folder must have
        no fault left outstanding (ValueError, nothing touched), since this controller rewrites that file."""
        self.plan, self.backend, self.run_dir = plan, backend, Path(run_dir)
        self._stop = threading.Event()
        backend.stopping = self._stop  # a long apply (a rolling restart's pauses) ends at the stop
        if outstanding is None:
            refuse_unhealed(self.run_dir)
            outstanding = Outstanding(self.run_dir, backend.name, backend.config())
        self.stop_timeout = stop_timeout
        url = toxiproxy or plan.toxiproxy
        self.toxiproxy = None
        if url:
            from chaos.backends.toxiproxy import ToxiproxyBackend
            self.toxiproxy = ToxiproxyBackend(url)
        self.timeline = Timeline(self.run_dir, backend.name)
        self.outstanding = outstanding
        self.failures: list[dict] = []        # failed recoveries (also on the timeline)
        self.unapplied: list[str] = []        # occurrences whose apply failed (a target not running...), with why
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._claimed: set[str] = set()
        self._cut_short: set[str] = set()      # applies the stop's heal recorded and recovered while they ran
        self._threads: list[threading.Thread] = []
        self._scheduler: threading.Thread | None = None
        self.t0_mono = self.t0_wall = None

    # ---- validation and dry run -------------------------------------------------------------
    def backend_for(self, kind: str) -> Backend:
        if kind == TOXIC:
            if self.toxiproxy is None:
                raise UnsupportedFault("toxic faults need a Toxiproxy: set 'toxiproxy: http://...' in the plan "
                                       "or pass --toxiproxy URL")
            return self.toxiproxy
        return self.backend

    def validate(self) -> list[tuple[float, PlanFault, int, list[str]]]:
        """Check every fault against the backend before anything is touched; PlanError otherwise.

        Returns the concrete schedule: (offset s, plan fault, occurrence, instances it would hit)."""
        problems, resolved, unreachable = [], {}, set()
        for f in self.plan.faults:
            where = self.plan.where(f, "kind")
            try:
                be = self.backend_for(f.kind)
                be.check(f.occurrence(0))
                instances = be.instances(f.target)
            except UnsupportedFault as exc:
                problems.append(f"{where}: kind: {exc} (fault {f.id})")
                continue
            except Exception as exc:  # noqa: BLE001 - report any backend failure as a plan problem
                if str(exc) in unreachable:       # the backend itself is down: say it once
                    continue
                unreachable.add(str(exc))
                problems.append(f"{where}: target: cannot resolve {f.target!r} on backend "
                                f"{self.backend.name!r}: {exc} (fault {f.id})")
                continue
            where = self.plan.where(f, "target")
            if not instances:
                problems.append(f"{where}: target: {f.target!r} has no instances on backend "
                                f"{self.backend.name!r} (fault {f.id})")
                continue
            if f.kind not in WHOLE_TARGET_KINDS:
                n = f.count.of(len(instances))
                cwhere = self.plan.where(f, "count") if "count" in f.lines else where
                if f.count.percent is None and f.count.n > len(instances):
                    problems.append(f"{cwhere}: count: {f.count.n} is more than the {len(instances)} "
                                    f"instance(s) of {f.target!r} (fault {f.id})")
                elif self.plan.max_blast is not None and n > self.plan.max_blast.of(len(instances)):
                    problems.append(f"{cwhere}: count: {f.count} hits {n} of {len(instances)} instance(s) of "
                                    f"{f.target!r}, above max_blast {self.plan.max_blast} (fault {f.id})")
            resolved[f.id] = instances
        if problems:
            raise PlanError(problems)
        self.instances = resolved
        return [(t, f, k, f.choose(resolved[f.id], k, self.plan.seed)) for t, f, k in self.plan.schedule()]

    def predicted_skips(self, schedule) -> list[str]:
        """Occurrences that will find their target taken, by ``_claim``'s rule (one fault per instance at a time,
        max_concurrent), each fault holding its instances for its duration: said before the run, not only on the
        timeline after it. A heal that takes long (a restart) can make more collide than predicted."""
        return [skip for _, skip in self.predicted_claims(schedule) if skip]

    def predicted_claims(self, schedule) -> list[tuple[list[str], str | None]]:
        """For each occurrence of ``schedule``: the instances it will take, by ``_claim``'s rule among the instances
        free then (the dry run showed a partial count's pick among all of them, and the run picked another: chaos
        hunt 18), or why it will be skipped."""
        busy: dict[str, tuple[float, str]] = {}  # instance -> (when it is free, the occurrence holding it)
        out = []
        for t, f, k, _ in schedule:
            busy = {i: held for i, held in busy.items() if held[0] > t}
            instances = self.instances[f.id]
            chosen, full = claimable(f, k, instances, set(busy), len(busy), self.plan)
            if full:
                out.append(([], f"{self.plan.where(f, 'kind')}: {f.id}#{k} at +{t:g}s will be skipped: "
                                f"max_concurrent {self.plan.max_concurrent} is reached then ({len(busy)} fault(s) in "
                                "force)"))
                continue
            if not chosen:
                taken = sorted(set(busy) & (set(instances) | {f.target}))
                until, holder = busy[taken[0]]
                out.append(([], f"{self.plan.where(f, 'kind')}: {f.id}#{k} at +{t:g}s will be skipped: "
                                f"{taken[0]!r} of target {f.target!r} is still under {holder} until +{until:g}s (one "
                                "fault per instance at a time)"))
                continue
            hold = (f.duration or 0.0) if KINDS[f.kind].duration != "none" else 0.0
            for instance in held_by(f, chosen, instances):
                busy[instance] = (t + hold, f"{f.id}#{k}")
            out.append((instances if f.kind in WHOLE_TARGET_KINDS else chosen, None))
        return out

    def not_running(self) -> list[str]:
        """The planned faults' instances that are not running (after ``validate``): their faults will not apply
        (chaos.backends.NotApplied), said before the run rather than found on its timeline."""
        out, asked = [], set()
        for f in self.plan.faults:
            if f.kind == TOXIC:
                continue
            for instance in self.instances[f.id]:
                why = None if instance in asked else self.backend.not_running(instance)
                asked.add(instance)
                if why:
                    out.append(f"{self.plan.where(f, 'target')}: {why}: a fault on it will not apply (fault {f.id})")
        return out

    def dry_run(self) -> list[str]:
        """What the plan would do, with the concrete instances; touches nothing. Beyond DRY_RUN_SHOWN
        occurrences, one line counts the rest (describing 100,000 occurrences took minutes)."""
        lines = []
        schedule = self.validate()
        claims = self.predicted_claims(schedule)
        for (t, f, k, _), (chosen, skip) in zip(schedule[:DRY_RUN_SHOWN], claims):
            be = self.backend_for(f.kind)
            dur = f" for {f.duration:g}s" if f.duration else ""
            lines.append(f"+{t:g}s {f.id}#{k} {f.kind}{dur} on {f.target}:" + (" skipped (below)" if skip else ""))
            for inst in chosen:
                lines.append(f"    {be.describe(inst)}")
        if len(schedule) > DRY_RUN_SHOWN:
            last = schedule[-1][0]
            lines.append(f"... and {len(schedule) - DRY_RUN_SHOWN} more occurrence(s), the last at +{last:g}s "
                         f"(the first {DRY_RUN_SHOWN} of {len(schedule)} are shown)")
        skips = [skip for _, skip in claims if skip]
        return lines + [f"warning: {skip}" for skip in shown(skips) + self.not_running()]

    # ---- running ----------------------------------------------------------------------------
    def start(self) -> "Controller":
        """Validate, then schedule in a background thread (a greenlet under Locust)."""
        schedule = self.validate()
        for skip in self.plan.warnings + shown(self.predicted_skips(schedule)) + self.not_running():
            log.warning("chaos plan: %s", skip)
        self.t0_mono, self.t0_wall = time.monotonic(), time.time()
        self._scheduler = threading.Thread(target=self._run, args=(schedule,), name="chaos-scheduler", daemon=True)
        self._scheduler.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the plan has ended and healed; True when done."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def unwritten(self) -> list[str]:
        """The run folder's records of the faults that could not be written (a full disk), each with why: the
        faults were healed all the same, but what the folder says of them is not whole."""
        return [w for w in (self.timeline.unwritten, self.outstanding.unwritten) if w]

    def _run(self, schedule) -> None:
        try:
            for t, f, k, _chosen in schedule:
                # Wake a little early: the occurrence resolves its instances and writes its
                # intent first, then waits for the exact deadline to act.
                if self._wait_until(self.t0_mono + t - PREPARE_S):
                    break
                th = threading.Thread(target=self._occurrence, args=(f, k, t), name=f"chaos-{f.id}#{k}", daemon=True)
                self._threads.append(th)
                th.start()
            for th in list(self._threads):
                th.join()
        except Exception:  # noqa: BLE001 - the scheduler must never die without healing
            log.exception("chaos scheduler failed; healing everything outstanding")
        finally:
            if not self._stop.is_set():
                self.heal(via="end")
                self._done.set()

    def _wait_until(self, deadline: float) -> bool:
        """Sleep until a monotonic deadline (never early); True when stop() came first."""
        while (remaining := deadline - time.monotonic()) > 0:
            if self._stop.wait(remaining):
                return True
        return self._stop.is_set()

    def _occurrence(self, pf: PlanFault, k: int, offset: float) -> None:
        fault = pf.occurrence(k)
        planned = self.t0_wall + offset
        try:
            be = self.backend_for(fault.kind)
            instances = be.instances(pf.target)
        except Exception as exc:  # noqa: BLE001
            self.timeline.record("apply", fault, pf.target, "error", f"cannot resolve target: {exc}", planned=planned)
            return
        keys, reason = self._claim(pf, k, fault, instances, planned)
        if not keys:
            # Instances still busy with an earlier fault may be free by the planned time: ask again then.
            if self._wait_until(self.t0_mono + offset):
                return
            keys, reason = self._claim(pf, k, fault, instances, planned)
            if not keys:
                self.timeline.record("apply", fault, pf.target, "error", reason, planned=planned)
                return
        elif self._wait_until(self.t0_mono + offset):
            for key, _inst in keys:           # stopped before acting: nothing was applied
                self.outstanding.remove(key)
            return
        for key, inst in keys:
            started = time.time()
            self.outstanding.update(key, started=started)  # a stop that comes before the apply ends records it
            try:
                undo = be.apply(fault, inst)
            except Exception as exc:  # noqa: BLE001 - log, then make sure nothing is left half-done
                self.timeline.record("apply", fault, inst, "error", f"{type(exc).__name__}: {exc}",
                                     planned=planned, when=started)
                self.unapplied.append(f"{fault.id} {fault.kind} on {inst}: {exc}")
                if isinstance(exc, NotApplied):   # it never took effect: not outstanding, nothing to recover
                    self.outstanding.remove(key)
                else:
                    self._recover(key, via="apply-failed")
                continue
            with self._lock:
                if key in self._cut_short:  # the stop's heal recorded it, and recovered it, while it applied
                    continue
                self.outstanding.update(key, state="applied", undo=undo or {}, applied=started)
            self.timeline.record("apply", fault, inst, "ok", planned=planned, detail=undo or None, when=started)
        if KINDS[fault.kind].duration != "none":
            if self._wait_until(self.t0_mono + offset + (fault.duration or 0)):
                return          # stop() heals what is outstanding
        for key, _inst in keys:
            self._recover(key, via="schedule")

    def _claim(self, pf: PlanFault, k: int, fault: Fault, instances: list[str], planned: float):
        """Pick free instances and write the intent to outstanding.json before acting.

        Returns ([(key, instance)], reason-if-none). One fault per instance at a time."""
        with self._lock:
            chosen, full = claimable(pf, k, instances, self.outstanding.instances(), len(self.outstanding), self.plan)
            if full:
                return [], (f"skipped: max_concurrent {self.plan.max_concurrent} reached "
                            f"({len(self.outstanding)} outstanding)")
            if not chosen:
                return [], "skipped: every instance of the target is already under a fault"
            keys = []
            for inst in chosen:
                key = Outstanding.key(fault.id, inst)
                keys.append((key, inst))
                self.outstanding.add({"key": key, "fault": fault.to_dict(), "instance": inst, "state": "applying",
                                      "members": instances if pf.kind in WHOLE_TARGET_KINDS else [],
                                      "undo": {}, "applied": None, "planned": planned,
                                      "toxiproxy": self.toxiproxy.url if fault.kind == TOXIC else None})
            return keys, None

    def _recover(self, key: str, via: str) -> bool:
        """Recover one outstanding entry unless another thread already is; never raises."""
        with self._lock:
            if key in self._claimed:
                return True
            entry = next((e for e in self.outstanding.entries() if e["key"] == key), None)
            if entry is None:
                return True
            self._claimed.add(key)
        fault, inst = Fault.from_dict(entry["fault"]), entry["instance"]
        try:
            be = self.backend_for(fault.kind)
            if fault.kind not in be.kinds:  # an outstanding.json edited, or from another goldfish: say so, keep it
                raise UnsupportedFault(f"{be.name} backend cannot recover {fault.kind!r}: nothing was undone")
            detail = be.recover(fault, inst, entry.get("undo") or {})
        except Exception as exc:  # noqa: BLE001 - a failed heal is recorded and reported, never raised
            err = f"{type(exc).__name__}: {exc}"
            self.timeline.record("recover", fault, inst, "error", err, via=via)
            self.failures.append({"fault": fault.id, "kind": fault.kind, "instance": inst, "error": err})
            with self._lock:
                self._claimed.discard(key)
            return False
        self.outstanding.remove(key)
        self.timeline.record("recover", fault, inst, "ok", via=via, detail=detail if isinstance(detail, dict) else None)
        with self._lock:
            self._claimed.discard(key)
        return True

    def heal(self, via: str = "heal") -> list[dict]:
        """Recover everything outstanding; returns the failures (also on the timeline). Never raises."""
        failed = []
        for entry in self.outstanding.entries():
            try:
                self._record_unfinished(entry)
                if not self._recover(entry["key"], via=via):
                    failed.append(entry)
            except Exception:  # noqa: BLE001
                log.exception("chaos heal of %s failed", entry.get("key"))
                failed.append(entry)
        return failed

    def _record_unfinished(self, entry: dict) -> None:
        """An apply still running when the heal comes (a rolling restart pausing between replicas outlived the
        load and ``stop_timeout``) is recorded as applied from its start, partly, before it is recovered: the
        timeline had a recover with no apply, and the audit took it for a damaged file, NO VERDICT (chaos hunt 18)."""
        with self._lock:
            if entry.get("state") != "applying" or not entry.get("started") or entry["key"] in self._cut_short:
                return
            self._cut_short.add(entry["key"])
        self.timeline.record("apply", Fault.from_dict(entry["fault"]), entry["instance"], "ok",
                             planned=entry.get("planned"), when=entry["started"],
                             detail={"unfinished": "still being applied when the run stopped: applied in part"})

    def stop(self, via: str = "stop") -> list[dict]:
        """Stop scheduling, let in-flight applies finish (bounded), heal everything; never raises."""
        try:
            self._stop.set()
            deadline = time.monotonic() + self.stop_timeout
            if self._scheduler is not None and self._scheduler is not threading.current_thread():
                self._scheduler.join(max(0.0, deadline - time.monotonic()))
            for th in list(self._threads):
                if th is not threading.current_thread():
                    th.join(max(0.0, deadline - time.monotonic()))
            return self.heal(via=via)
        except Exception:  # noqa: BLE001
            log.exception("chaos stop failed")
            return self.outstanding.entries()
        finally:
            self._done.set()


def refuse_unhealed(run_dir: str | Path) -> None:
    """ValueError naming the file and its faults when ``run_dir``'s outstanding.json lists faults a controller left
    (SIGKILLed mid-fault): a new controller there would rewrite that file, the one record ``chaos heal`` needs, and
    leave the faults in force (a bot SIGSTOPped) with nothing saying so. A file listing none is reused."""
    try:
        left = Outstanding.load(run_dir)
    except ValueError as exc:  # cut short or edited by hand: it may list faults in force, so it is not overwritten
        raise ValueError(f"{exc}; a chaos run there would overwrite it: look at it, heal by hand what it lists, "
                         "then remove it (or give another run folder)") from None
    entries = left.entries()
    if entries:
        faults = ", ".join(f"{e['fault']['id']} ({e['fault']['kind']} on {e['instance']})" for e in entries[:5])
        more = f" and {len(entries) - 5} more" if len(entries) > 5 else ""
        raise ValueError(f"{left.path} lists {len(entries)} fault(s) an earlier chaos run left in force: {faults}{more}; "
                         f"run `python -m chaos heal {run_dir}` first (a new run there would overwrite that record)")


def heal_run(run_dir: str | Path, backend: Backend | None = None) -> tuple[int, list[dict]]:
    """Recover what a dead controller left in run_dir (``python -m chaos heal``).

    Rebuilds the backend from outstanding.json unless one is given. Returns (recovered, failed)."""
    from chaos.backends import make_backend
    left = Outstanding.load(run_dir)
    entries = left.entries()
    if not entries:
        return 0, []
    if backend is None:
        try:
            backend = make_backend(left.backend, **left.backend_config)
        except ValueError as exc:  # the file names a backend or an option this goldfish does not know
            raise ValueError(f"{left.path}: {exc}") from None
    toxi_url = next((e.get("toxiproxy") for e in entries if e.get("toxiproxy")), None)
    plan = Plan(faults=[], path=str(run_dir))
    ctl = Controller(plan, backend, run_dir, toxiproxy=toxi_url, outstanding=left)
    failed = ctl.heal(via="heal-cli")
    return len(entries) - len(failed), failed
