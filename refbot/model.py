"""A deterministic stand-in for an LLM that knows only the context it is handed.

Like a real model it has no memory of its own: whether it can answer "What is my X?"
depends entirely on what the memory layer put into its context. That is what makes every
memory bug visible as amnesia. Grammar: docs/CONTRACTS.md, "Message grammar".
"""
from __future__ import annotations

import asyncio
import random
import re
from typing import Iterable

from langchain_core.messages import BaseMessage

PLANT_RE = re.compile(r"\bMy (?P<fact>[a-z][a-z ]*?) is (?P<value>\S(?:.*?\S)?)\.(?=\s|$)")
PROBE_RE = re.compile(r"\bWhat is my (?P<fact>[a-z][a-z ]*?)\?")
ECHO_CHARS = 80


def facts_in(context: Iterable[BaseMessage]) -> dict[str, str]:
    """The latest value of each fact the user stated in ``context`` (oldest message first).

    Only the user's own words count: an assistant echo quoting an old plant must not
    resurrect a fact the memory layer dropped.
    """
    facts: dict[str, str] = {}
    for message in context:
        if message.type != "human":
            continue
        for match in PLANT_RE.finditer(str(message.content)):
            facts[match["fact"]] = match["value"]
    return facts


def answer(context: list[BaseMessage], message: str) -> str:
    """The reply to ``message`` given ``context`` — a pure function, so tests can pin it."""
    probe = PROBE_RE.search(message)
    if probe:
        fact = probe["fact"]
        value = facts_in(context).get(fact)
        return f"Your {fact} is {value}." if value is not None else f"I don't know your {fact}."
    echo = message if len(message) <= ECHO_CHARS else message[: ECHO_CHARS - 3] + "..."
    return f'Noted. You said: "{echo}"'


class Model:
    """``answer`` plus think time, awaited without blocking so concurrent requests overlap."""

    def __init__(self, think_ms: float = 30.0, jitter_ms: float = 20.0, rng: random.Random | None = None):
        self.think_ms = think_ms
        self.jitter_ms = jitter_ms
        self.rng = rng or random.Random()

    def think_seconds(self) -> float:
        return (self.think_ms + self.rng.uniform(0.0, self.jitter_ms)) / 1000.0

    async def respond(self, context: list[BaseMessage], message: str) -> str:
        await asyncio.sleep(self.think_seconds())
        return answer(context, message)
