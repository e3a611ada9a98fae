"""Which fault a lost turn is charged to ("lost after", oracle/attribution.py): the first fault after its ack that
can have destroyed it. A Redis crash's losses were charged to every bot fault between the acks and the crash
(a bot kill at 4 s took 178 of them, the crash at 20 s 120: chaos hunt 18 F1)."""
from __future__ import annotations

import numpy as np

from oracle.attribution import first_fault_after
from oracle.judge import Fault

KILL, PAUSE, CRASH, QUIET = 0, 1, 2, 3


def test_turns_acked_long_before_a_bot_fault_go_to_the_store_crash_after_it():
    done = np.array([1.0, 3.5, 8.0, 12.5, 19.0, 25.0])  # acks; turns at 1 s and 8 s were made long before a fault
    ok = np.ones(len(done), bool)
    faults = [Fault(KILL, 4.0, 6.0), Fault(PAUSE, 13.0, 15.0), Fault(CRASH, 20.0, 21.0, lasting=True)]
    kinds = first_fault_after(ok, done, faults, QUIET, reach_s=5.0)
    assert kinds.tolist() == [CRASH] * 5 + [QUIET]  # every turn acked before the crash is the crash's
    kinds = first_fault_after(ok, done, faults[:2], QUIET, reach_s=5.0)  # no crash: the bot faults in reach
    # 1 s: 3 s before the kill; 3.5 s: likewise; 8 s: 5 s before the pause; 12.5 s: just before it; 19 s: after all
    assert kinds.tolist() == [KILL, KILL, PAUSE, PAUSE, QUIET, QUIET]
    kinds = first_fault_after(ok, done, faults[:2], QUIET, reach_s=1.0)  # long before a bot fault: none of its doing
    assert kinds.tolist() == [QUIET, KILL, QUIET, PAUSE, QUIET, QUIET]


def test_a_long_bot_fault_overlapping_the_crash_takes_none_of_its_losses():
    done = np.array([2.0, 9.0, 14.0, 18.0, 25.0])
    faults = [Fault(PAUSE, 10.0, 30.0), Fault(CRASH, 20.0, 21.0, lasting=True)]  # a 20 s pause around the crash
    kinds = first_fault_after(np.ones(5, bool), done, faults, QUIET, reach_s=5.0)
    assert kinds.tolist() == [CRASH, CRASH, CRASH, CRASH, PAUSE]  # after the crash: acked during the pause
    unacked = first_fault_after(np.zeros(5, bool), done, faults, QUIET, reach_s=5.0)
    assert unacked.tolist() == [QUIET] * 5
