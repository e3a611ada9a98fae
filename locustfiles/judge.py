"""Online judgement of one reply: did a probe recall its nonce, does the reply leak another session?

Cross-talk is seen two ways: a token names its session by itself (contracts/tokens.py), and a
nonce is looked up in a bounded map of recent plants made *by this process* (nonce -> session).
So token leaks are caught across processes and machines; nonce leaks only when the planting
session ran in the same Locust process. The map is bounded (oldest plants forgotten first)
so memory stays flat on long runs.
"""
from __future__ import annotations

from collections import OrderedDict

from contracts.tokens import NONCE_RE, TOKEN_RE

DEFAULT_CAPACITY = 200_000


class PlantRegistry:
    """Recent plants of this process: nonce -> session, at most ``capacity`` of them."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self._owner: OrderedDict[str, str] = OrderedDict()

    def add(self, nonce: str, session: str) -> None:
        self._owner[nonce] = session
        if len(self._owner) > self.capacity:
            self._owner.popitem(last=False)

    def owner(self, nonce: str) -> str | None:
        return self._owner.get(nonce)

    def __len__(self) -> int:
        return len(self._owner)


def crosstalk(reply: str, session: str, plants: PlantRegistry) -> list[str]:
    """Other sessions whose token or recently planted nonce appears in ``reply`` (sorted, unique)."""
    if not reply:
        return []
    others: set[str] = set()
    if "gf" in reply:  # cheap pre-check: every token starts with "gf"
        others.update(m.group(1) for m in TOKEN_RE.finditer(reply))
    if "-" in reply:
        for nonce in NONCE_RE.findall(reply):
            owner = plants.owner(nonce)
            if owner is not None:
                others.add(owner)
    others.discard(session)
    return sorted(others)


def recall(reply: str | None, nonce: str) -> bool:
    """A probe passes when the reply holds the planted nonce."""
    return reply is not None and nonce in reply
