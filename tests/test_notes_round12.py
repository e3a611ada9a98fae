"""Round 12's small corrections of what a run's notes advise (bot hunt 12)."""
from __future__ import annotations

from oracle.audit import after_end_note

TOTALS = {"expired_after_end": 209, "expired_after_end_ok": 1200}


def test_keys_expired_after_the_end_advise_the_rolling_audit_only_when_the_run_had_none():
    """A run with --audit-every 3s whose keys (a 2 s TTL) expired after their conversations was told to use the
    rolling audit during the run (--audit-every), which it did: the advice is a shorter period."""
    plain = after_end_note(TOTALS, {"ttl_floor": 2.0})[0]
    assert "a shorter --settle, or the rolling audit during the run (--audit-every)" in plain, plain
    rolled = after_end_note(TOTALS, {"ttl_floor": 2.0}, rolling=True)[0]
    assert "a shorter --audit-every than this run's" in rolled and "a shorter --settle" not in rolled, rolled
    assert after_end_note({**TOTALS, "expired_after_end": 0}, {}, rolling=True) == []
