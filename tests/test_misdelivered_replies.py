"""A reply delivered to the wrong client: the bot stores every exchange right, under its own key, but its response
path sends a turn another session's answer (a module-level "last reply"). The cross-talk of the reply is the fault;
the turn was also reported `unanswered` ("the bot answered without keeping its answer") over a history that keeps
its own answer right after it (API hunt 18 #3)."""
from __future__ import annotations

import msgspec

from test_duplicate_replies import S, classes, judge, turn

OTHER = "gf00000000000000bb"


def test_a_turn_answered_with_another_session_s_reply_is_not_also_unanswered():
    turns = [turn(0, "Noted."), turn(1, "I will remember that, Ann."), turn(2, "Bye.")]
    stored = [("human", 0), ("ai", "Noted."), ("human", 1), ("ai", "I will remember that, Ann."),
              ("human", 2), ("ai", "Bye.")]
    got_other = msgspec.structs.replace(turns[1], reply=f"Noted for [{OTHER}t3], Bob.",
                                        crosstalk=(OTHER,))
    assert judge([turns[0], got_other, turns[2]], stored) == []  # the journal's cross-talk reply is the fault
    not_stored = stored[:3] + stored[4:]  # and when its own answer was not stored either, that is still said
    assert classes(judge([turns[0], got_other, turns[2]], not_stored)) == [("unanswered", 1)]
    plain = msgspec.structs.replace(turns[1], reply="Noted for you, Bob.")  # no other session named
    assert classes(judge([turns[0], plain, turns[2]], stored)) == [("unanswered", 1)]
