"""A history key with a TTL that expires in a user's pause, and is made again by the next turn: the key exists but
lacks the turns before the pause. Each lost turn was explained as "a race ... a summary or a trim" though the store's
keys carry a TTL shorter than the pause (LangChain hunt 16); now it says the key most likely expired there."""
from __future__ import annotations

from contracts.journal import Turn
from oracle.checkers import finding
from oracle.explain import explain
from oracle.judge import Evidence, mark_expired_in_pause

T0 = 1_700_000_000.0
S = "gf00000000000000aa"


def turns(pause: float) -> list[Turn]:
    """Turns 0-1 answered in half a second each, then turns 2-3 (turn 2 sent ``pause`` + 0.5 s after turn 1's answer)."""
    at = [T0, T0 + 1, T0 + 2 + pause, T0 + 3 + pause]
    return [Turn(session=S, turn=n, token=f"{S}t{n}", message=f"[{S}t{n}] hi", sent=t, received=t + 0.5,
                 outcome="ok", reply="ok") for n, t in enumerate(at)]


def lost_oldest(ts: list[Turn]) -> list[dict]:
    return [finding("lost", S, t.turn, t.sent, token=t.token, key=f"message_store:{S}", stored_user_entries=2,
                    sent=t.sent, received=t.received, oldest=True) for t in ts[:2]]


def evidence(ttl_floor=3.0, expired_since=T0 + 3, ttl=True) -> Evidence:
    return Evidence(ttl_in_use=ttl, expiries=[(T0 - 10, 5), (expired_since + 0.1, 6)], ttl_floor=ttl_floor,
                    ttl_at=T0 + 100)


def test_oldest_turns_lost_before_a_pause_longer_than_the_ttl_say_the_key_expired_there():
    ts = turns(pause=4.0)
    found = lost_oldest(ts)
    mark_expired_in_pause(found, ts, evidence())
    for f in found:
        assert f["evidence"]["expired_in_pause"] == {"pause_s": 4.5, "ttl_floor": 3.0, "before_turn": 2}
        f["cause"] = "lost"
        said = explain(f)
        assert "most likely expired in that pause" in said and "4.5 s pause" in said and "race" not in said, said


def test_no_ttl_a_shorter_pause_or_no_expiry_since_leave_the_losses_as_they_were():
    for ts, ev in ((turns(4.0), evidence(ttl=False)), (turns(2.0), evidence()),
                   (turns(4.0), evidence(expired_since=T0 - 5))):  # the store expired nothing since
        found = lost_oldest(ts)
        mark_expired_in_pause(found, ts, ev)
        assert not any("expired_in_pause" in f["evidence"] for f in found)


def alone(found: list[dict]) -> list[dict]:
    for f in found:
        f["evidence"]["alone"] = True  # check_lost: no other turn of the session was in flight with it
    return found


def test_oldest_turns_lost_with_short_pauses_but_a_key_older_than_its_ttl_say_the_ttl_is_not_renewed():
    """A TTL set only when the key is made (EXPIRE NX): the key expires mid-conversation though no pause was as long
    as the TTL (bot hunt 17 #1: explained as a race or a trim)."""
    ts = turns(pause=2.0)  # turn 2 sent 4 s after the first write, 2.5 s after turn 1's answer
    found = alone(lost_oldest(ts))
    mark_expired_in_pause(found, ts, evidence())
    for f in found:
        assert "expired_in_pause" not in f["evidence"]
        assert f["evidence"]["expired_unrenewed"] == {"age_s": 4.0, "ttl_floor": 3.0, "before_turn": 2}
        f["cause"] = "lost"
        said = explain(f)
        assert "4 s old" in said and "renew it at each write" in said and "race" not in said, said


def test_a_key_younger_than_its_ttl_or_a_lost_turn_in_flight_with_another_is_no_unrenewed_ttl():
    for found, ev in ((alone(lost_oldest(turns(2.0))), evidence(ttl_floor=5.0)),  # the key was 4 s old: younger
                      (lost_oldest(turns(2.0)), evidence()),  # not alone: a race is likelier
                      (alone(lost_oldest(turns(2.0))), evidence(expired_since=T0 - 5))):  # nothing expired since
        mark_expired_in_pause(found, turns(2.0), ev)
        assert not any("expired_unrenewed" in f["evidence"] or "expired_in_pause" in f["evidence"] for f in found)
