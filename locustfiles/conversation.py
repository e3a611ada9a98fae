"""ChatUser: one whole scripted conversation per task iteration, every turn journaled and judged.

Each turn is a normal Locust request named ``chat <kind>`` (a handful of rows, never one per
session) that succeeds only when the outcome is ``ok``. Probes also fire ``RECALL`` (name: the
fact) and replies that carry another session's token or nonce fire ``CROSSTALK`` (name:
``reply``); both with low-cardinality error texts, so Locust's tables stay small. The source
session of a cross-talk is in the journal record and in the event's ``context``.

Outcomes follow Jepsen: ``ok`` 2xx with a reply; ``fail`` the request never left (connection
refused, name not resolved); ``info`` anything after which the bot may or may not have stored
the turn (timeout, reset, any non-2xx status, a 2xx without a readable reply, a turn still in
flight when the test stopped).
"""
from __future__ import annotations

import logging
import os
import random
import time

import gevent
from gevent import GreenletExit
from gevent.pool import Group
from locust import FastHttpUser, task

from locustfiles.judge import crosstalk, recall
from locustfiles.outcome import read_response
from locustfiles.script import MAX_BURST
from oracle.tokens import make_token, new_nonce, new_session_id

log = logging.getLogger("goldfish")
CROSSTALK_LOG_LIMIT = 10  # per process: the first few cross-talks are logged with their source


class Amnesia(Exception):
    """A probe's reply does not hold the planted nonce."""


class CrossTalk(Exception):
    """A reply carries another session's token or nonce (source sessions: journal / context)."""


AMNESIA = Amnesia("amnesia")
CROSSTALK = CrossTalk("reply carries another session's token or nonce (source session in the journal)")


class ChatUser(FastHttpUser):
    """A user who holds whole conversations from a script (``--script``), one per iteration."""

    concurrency = MAX_BURST  # connections a burst may open at once

    def __init__(self, environment):
        self.rt = environment.goldfish
        self.network_timeout = self.connection_timeout = self.rt.settings.timeout
        super().__init__(environment)
        self.user_id = f"{os.getpid()}-u{self.rt.next_user_id()}"

    def wait_time(self):
        return self.think()

    def think(self) -> float:
        low, high = self.rt.settings.think
        return low if low == high else random.uniform(low, high)

    @task
    def conversation(self) -> None:
        rt = self.rt
        session = new_session_id()
        facts: dict[str, tuple[list[str], bool]] = {}  # fact -> (acceptable nonces, latest last; maybe absent)
        turn = 0
        steps = rt.script.steps
        for i, step in enumerate(steps):
            kind = step.kind
            if kind == "think":
                gevent.sleep(random.uniform(*step.think))
                continue
            if kind == "burst":
                group = Group()
                for k in range(step.turns):
                    group.spawn(self.turn, session, turn + k, "burst", self.chatter_line(None), None, None, facts)
                try:
                    group.join()
                except GreenletExit:
                    group.kill()  # each in-flight burst turn journals itself as interrupted
                    raise
                turn += step.turns
            elif kind == "plant":
                nonce = new_nonce()
                message = f"[{make_token(session, turn)}] My {step.fact} is {nonce}."
                self.turn(session, turn, "plant", message, step.fact, nonce, facts)
                turn += 1
            elif kind == "probe":
                message = f"[{make_token(session, turn)}] What is my {step.fact}?"
                self.turn(session, turn, "probe", message, step.fact, None, facts)
                turn += 1
            else:
                self.turn(session, turn, "chatter", self.chatter_line(step.text), None, None, facts)
                turn += 1
            if i + 1 < len(steps) and rt.settings.think[1] > 0:
                gevent.sleep(self.think())

    def chatter_line(self, text: str | None) -> str:
        return text or random.choice(self.rt.script.chatter)

    def turn(self, session: str, turn: int, kind: str, message: str, fact: str | None,
             nonce: str | None, facts: dict) -> None:
        """Send one turn, judge it, fire its events and journal it (also when interrupted)."""
        rt = self.rt
        token = make_token(session, turn)
        if kind in ("chatter", "burst"):
            message = f"[{token}] {message}"
        if kind == "plant":
            rt.plants.add(nonce, session)
        if kind == "probe" and fact in facts:
            nonce = facts[fact][0][-1]
        body, headers = rt.contract.request(session, message)
        record = {"run": rt.settings.run_id, "session": session, "turn": turn, "kind": kind, "token": token,
                  "message": message, "fact": fact, "nonce": nonce, "sent": time.time(), "received": None,
                  "outcome": "info", "status": None, "reply": None, "error": None, "verdict": None,
                  "crosstalk": [], "step": rt.step, "user": self.user_id}
        start = time.perf_counter()
        try:
            with self.client.post(rt.contract.path, json=body, headers=headers, name=f"chat {kind}",
                                  catch_response=True) as resp:
                record["received"] = time.time()
                status, content, error = resp.status_code, None, getattr(resp, "error", None)
                if status:
                    try:
                        content = resp.content
                    except Exception as exc:  # noqa: BLE001 - body lost mid-read: indeterminate
                        status, error = 0, exc
                read_response(status, content, error, rt.contract, record)
                if record["outcome"] == "ok":
                    resp.success()
                else:
                    resp.failure(record["error"])
        except GreenletExit:
            record["received"] = time.time()
            record["error"] = "interrupted: the test stopped with this turn in flight"
            self.finish(record, fact, nonce, facts, 0.0)
            raise
        self.finish(record, fact, nonce, facts, (time.perf_counter() - start) * 1000)

    def finish(self, record: dict, fact, nonce, facts: dict, response_ms: float) -> None:
        """Online judgement and the journal line; no gevent switch happens in here.

        ``facts[fact]`` is (acceptable nonces, maybe absent). An ``ok`` plant is certain; an
        ``info`` plant may or may not be stored, so a probe then accepts the old value or the
        new one, and when no plant of the fact is certain, "I don't know" is no evidence of
        amnesia either: the verdict stays null (indeterminate) and no RECALL event fires."""
        rt = self.rt
        kind, outcome, reply = record["kind"], record["outcome"], record["reply"]
        if kind == "plant" and outcome != "fail":
            if outcome == "ok":
                facts[fact] = ([nonce], False)
            else:
                nonces, maybe_absent = facts.get(fact, ([], True))
                facts[fact] = (nonces + [nonce], maybe_absent)
        if outcome == "ok":
            fire = self.environment.events.request.fire
            if kind == "probe" and nonce is not None:
                nonces, maybe_absent = facts[fact]
                passed = any(recall(reply, n) for n in nonces)  # nonces ends with the latest plant
                if passed or not maybe_absent:
                    record["verdict"] = "pass" if passed else "amnesia"
                    fire(request_type="RECALL", name=fact, response_time=response_ms, response_length=len(reply),
                         exception=None if passed else AMNESIA, context={"session": record["session"]})
            sources = crosstalk(reply, record["session"], rt.plants)
            if sources:
                record["crosstalk"] = sources
                fire(request_type="CROSSTALK", name="reply", response_time=response_ms,
                     response_length=len(reply), exception=CROSSTALK,
                     context={"session": record["session"], "sources": sources})
                if rt.crosstalk_logged < CROSSTALK_LOG_LIMIT:
                    rt.crosstalk_logged += 1
                    log.warning("cross-talk: session %s turn %s got a reply carrying %s",
                                record["session"], record["turn"], ", ".join(sources))
        if rt.journal is not None:
            rt.journal.record(record)
