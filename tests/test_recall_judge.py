"""The online recall judge: which answers a probe accepts (indeterminate plants that land late), and
values matched in any case, in recall and in cross-talk alike.

The conversation bookkeeping is driven through ChatUser's own ``conversation`` / ``turn`` / ``finish``
with no network: ``send`` is a small in-process bot (``FakeBot``) that reads each message and answers,
times out (``info``) or refuses (``fail``) as a test scripts it, and may apply a timed-out plant later.
Importing ChatUser imports Locust, which must monkey-patch before anything imports ssl (pytest's plugins
do): as in tests/test_locust_wire.py, those tests (``inner``) run in a fresh interpreter that patches
first, started by ``test_conversation_bookkeeping_in_a_patched_interpreter``.
"""
from __future__ import annotations

import json
import os
import re
from http.cookiejar import CookieJar
from types import SimpleNamespace

import pytest

from support_locust import run_patched

from locustfiles.judge import PlantRegistry, crosstalk, recall
from locustfiles.script import parse_script
from contracts.tokens import NONCE_RE, make_token, new_nonce, new_session_id

INNER = os.environ.get("GOLDFISH_RECALL_CHECKS") == "1"
inner = pytest.mark.skipif(not INNER, reason="runs in the patched interpreter (see the module docstring)")
if INNER:
    from locustfiles.contract import ChatContract
    from locustfiles.conversation import ChatUser
else:
    ChatUser = SimpleNamespace(hold_conversation=None, turn=None, finish=None, burst=None, chatter_line=None)


def test_conversation_bookkeeping_in_a_patched_interpreter():
    if INNER:
        pytest.skip("this is the inner run")
    run_patched(__file__, "GOLDFISH_RECALL_CHECKS")

PLANT = re.compile(r"My ([a-z ]+) is (\S+)\.$")
PROBE = re.compile(r"What is my ([a-z ]+)\?$")
TWO_PLANTS_AND_A_PROBE = "steps:\n  - plant: postcode\n  - plant: postcode\n  - probe: postcode\n"


class FakeBot:
    """One session's memory. ``plants`` scripts each plant in order: ``ok`` (stored, answered),
    ``late`` (times out: ``info``; stored only after the next ``ok`` plant of the same fact, as a slow
    first request the bot carries on with), ``lost`` (times out, never stored), ``fail`` (connection
    refused: never reached the bot). ``answer`` (fact, memory, plants seen) -> the probe's reply."""

    def __init__(self, plants: list[str], answer=None):
        self.plants = list(plants)
        self.memory: dict[str, str] = {}
        self.pending: dict[str, str] = {}
        self.planted: list[str] = []  # every value sent in a plant, in order
        self.answer = answer or (lambda fact, memory, planted: f"Your {fact} is {memory[fact]}." if fact in memory
                                 else f"I don't know your {fact}.")

    def send(self, message: str) -> tuple:
        if p := PLANT.search(message):
            fact, value = p[1], p[2]
            self.planted.append(value)
            how = self.plants.pop(0)
            if how == "fail":
                return None, 0, None, ConnectionRefusedError(111, "Connection refused")
            if how in ("late", "lost"):
                if how == "late":
                    self.pending[fact] = value
                return None, 0, None, TimeoutError("timed out")
            self.memory[fact] = value
            if fact in self.pending:  # the slow first request lands now, after this one
                self.memory[fact] = self.pending.pop(fact)
            return None, 200, b'{"reply": "Noted."}', None
        if q := PROBE.search(message):
            return None, 200, json.dumps({"reply": self.answer(q[1], self.memory, self.planted)}).encode(), None
        return None, 200, b'{"reply": "Noted."}', None


class Journal(list):
    def record(self, turn) -> None:
        self.append(turn)


class FakeWire:
    method, in_query = "POST", False

    @staticmethod
    def request(session, message, conversation=None):
        return message.encode(), {}

    @staticmethod
    def target(session):
        return "http://bot/chat", "/chat"


class OfflineUser:
    """ChatUser's conversation, turn and finish, with ``send`` answered by a FakeBot."""

    conversation, turn, finish, burst, chatter_line = (ChatUser.hold_conversation, ChatUser.turn, ChatUser.finish,
                                                       ChatUser.burst, ChatUser.chatter_line)
    socket = None  # HTTP turns (not --websocket)

    def __init__(self, bot: FakeBot, script: str = TWO_PLANTS_AND_A_PROBE, plants: PlantRegistry | None = None):
        self.bot = bot
        self.journal = Journal()
        self.rt = SimpleNamespace(contract=ChatContract(), plants=plants or PlantRegistry(), journal=self.journal,
                                  settings=SimpleNamespace(run_id="r", timeout=5.0, think=(0.0, 0.0)), step=0,
                                  crosstalk_logged=0, script=parse_script(script))
        self.environment = SimpleNamespace(events=SimpleNamespace(request=SimpleNamespace(fire=lambda **kw: None)))
        self.user_id, self.bot_session = "u", None
        self.client = SimpleNamespace(client=SimpleNamespace(cookiejar=CookieJar()))  # emptied per conversation

    def wire(self):
        return FakeWire

    def context(self):
        return {}

    def send(self, wire, url, uri, payload, headers):
        return self.bot.send(payload.decode())

    def run(self):
        """One conversation: (outcomes of the plants, the probe's journal record)."""
        self.conversation()
        done = list({t.turn: t for t in self.journal}.values())  # each turn's last record (turn 0: in flight first)
        probes = [t for t in done if t.kind == "probe"]
        assert len(probes) == 1
        return [t.outcome for t in done if t.kind == "plant"], probes[0]


def probe(plants: list[str], answer=None, script: str = TWO_PLANTS_AND_A_PROBE):
    bot = FakeBot(plants, answer)
    outcomes, record = OfflineUser(bot, script).run()
    return outcomes, record, bot


@inner
def test_a_timed_out_plant_that_lands_after_the_next_ok_plant_is_a_legal_answer():
    """The tester's zombie bot: plant 1 times out (info), plant 2 is ok, the bot stores plant 1 after plant 2 and
    answers with it. An indeterminate write may take effect at any later time: pass, not amnesia."""
    outcomes, record, bot = probe(["late", "ok"])
    assert outcomes == ["info", "ok"]
    assert record.reply == f"Your postcode is {bot.planted[0]}." and record.verdict == "pass"
    assert record.nonce == bot.planted[1]  # the journal names the latest plant sent


@inner
def test_every_info_plant_before_the_probe_stays_acceptable_with_the_latest_ok_one():
    """info, ok, info, ok: both info values and the latest ok value pass; the superseded ok value does not."""
    script = "steps:\n" + "  - plant: postcode\n" * 4 + "  - probe: postcode\n"
    for index, verdict in ((0, "pass"), (1, "amnesia"), (2, "pass"), (3, "pass")):
        bot = FakeBot(["lost", "ok", "lost", "ok"],
                      lambda fact, memory, planted, index=index: f"Your {fact} is {planted[index]}.")
        outcomes, record = OfflineUser(bot, script).run()
        assert outcomes == ["info", "ok", "info", "ok"]
        assert record.verdict == verdict, (index, record)


@inner
@pytest.mark.parametrize("answer, verdict", [
    (lambda fact, memory, planted: f"Your {fact} is 0000-ZZZZ.", "amnesia"),  # another value
    (lambda fact, memory, planted: f"I don't know your {fact}.", "amnesia"),  # no value
    (lambda fact, memory, planted: f"Your {fact} is {planted[1]}.", "pass"),  # the latest ok plant
], ids=["another-value", "no-value", "latest-ok"])
def test_with_an_ok_plant_a_wrong_answer_is_still_amnesia(answer, verdict):
    outcomes, record, _ = probe(["late", "ok"], answer)
    assert outcomes == ["info", "ok"] and record.verdict == verdict


@inner
def test_a_failed_plants_value_is_never_acceptable():
    """A ``fail`` plant never left the client: answering with its value is amnesia (after an ok plant, before
    one, or as the only other plant)."""
    for plants, outcomes in ((["ok", "fail"], ["ok", "fail"]), (["fail", "ok"], ["fail", "ok"])):
        index = plants.index("fail")
        _, record, _ = probe(plants, lambda fact, memory, planted, index=index: f"Your {fact} is {planted[index]}.")
        assert record.verdict == "amnesia", plants
    # only a failed plant and an info plant: the failed value is not a pass (no ok plant: no verdict at all)
    _, record, _ = probe(["fail", "lost"], lambda fact, memory, planted: f"Your {fact} is {planted[0]}.")
    assert record.verdict is None


@inner
def test_with_no_ok_plant_i_dont_know_is_no_verdict_and_an_info_value_passes():
    _, record, _ = probe(["lost", "lost"])
    assert record.verdict is None
    for index in (0, 1):
        _, record, _ = probe(["lost", "lost"], lambda fact, memory, planted, index=index: f"It is {planted[index]}.")
        assert record.verdict == "pass"


@inner
def test_a_lower_cased_answer_recalls_the_value():
    """The tester's lowerreply bot: "your postcode is 8892-x7q4." recalled the fact, in another case."""
    _, record, bot = probe(["ok", "ok"], lambda fact, memory, planted: f"Your {fact} is {memory[fact]}.".lower())
    value = bot.planted[1]  # 4 random letters or digits after the dash: all digits 0.6% of the time (lower() the same)
    assert value.lower() in record.reply and (value not in record.reply or value == value.lower())
    assert record.verdict == "pass"
    _, record, _ = probe(["late", "ok"], lambda fact, memory, planted: f"your {fact} is {planted[0].lower()}.")
    assert record.verdict == "pass"  # an indeterminate plant's value, lower-cased
    _, record, _ = probe(["ok", "ok"], lambda fact, memory, planted: f"your {fact} is {planted[0].lower()}.")
    assert record.verdict == "amnesia"  # the superseded value is no answer in any case


def test_recall_ignores_case_of_the_value():
    assert recall("your postcode is 8892-x7q4.", "8892-X7Q4")
    assert recall("YOUR POSTCODE IS 8892-X7Q4.", "8892-x7q4")
    assert recall("Your postcode is 8892-X7Q4.", "8892-X7Q4")
    assert not recall("your postcode is 8892-x7q5.", "8892-X7Q4")
    assert not recall(None, "8892-X7Q4") and not recall("", "8892-X7Q4")


def test_recall_takes_a_space_or_nothing_for_the_hyphen():
    """A model that reformats the identifier ("8892 X7Q4", "8892X7Q4") recalled it: every probe was amnesia, a
    false FAIL. The halves must still be the value's, next to each other."""
    assert recall("Your postcode is 8892 X7Q4.", "8892-X7Q4") and recall("postcode: 8892x7q4", "8892-X7Q4")
    assert recall("It was 5555-AAAA, sorry: 8892 x7q4.", "1111-BBBB", "8892-X7Q4")  # an info plant's value
    assert not recall("8892 and X7Q4 are both codes.", "8892-X7Q4")
    assert not recall("Your postcode is 8892 X7Q5.", "8892-X7Q4")


def test_a_lower_cased_leak_of_another_sessions_value_is_cross_talk():
    plants = PlantRegistry(capacity=10)
    me, other = new_session_id(), new_session_id()
    plants.add("8892-X7Q4", other)
    assert crosstalk("I also have the postcode 8892-x7q4 on file.", me, plants) == [other]
    assert crosstalk("I also have the postcode 8892-X7Q4 on file.", me, plants) == [other]
    assert crosstalk("I also have the postcode 8892-x7Q4 on file.", other, plants) == []  # its own
    assert plants.owner("8892-x7q4") == other and plants.owner("8892-X7Q4") == other
    assert crosstalk("Your postcode is 8892-x7q5.", me, plants) == []


@inner
def test_a_lower_cased_leak_in_a_probe_reply_is_journaled_as_cross_talk():
    """Through ChatUser.finish: another session of the same process planted the value, the reply carries it
    lower-cased."""
    plants, other = PlantRegistry(), new_session_id()
    plants.add("1234-ABCD", other)
    user = OfflineUser(FakeBot(["ok", "ok"], lambda fact, memory, planted:
                               f"Your {fact} is {memory[fact]}. I also have 1234-abcd for another customer."),
                       plants=plants)
    _, record = user.run()
    assert list(record.crosstalk) == [other] and record.verdict == "pass"


def test_the_any_case_nonce_pattern_finds_what_the_nonce_pattern_finds():
    """judge's nonce pattern is contracts.tokens.NONCE_RE in either case: it must not drift from it."""
    for _ in range(200):
        nonce = new_nonce()
        for text in (f"is {nonce}.", f"is {nonce.lower()}.", f"[{make_token(new_session_id(), 1)}] {nonce}x"):
            found = {n.upper() for n in NONCE_RE.findall(text.upper())}
            from locustfiles.judge import NONCE_ANY_CASE_RE
            assert {n.upper() for n in NONCE_ANY_CASE_RE.findall(text)} == found


def test_the_bookkeeping_functions_state_the_rule():
    from locustfiles.judge import planted, probe_verdict
    facts: dict = {}
    planted(facts, "postcode", "1111-AAAA", "fail")
    assert "postcode" not in facts and probe_verdict(facts, "postcode", "1111-AAAA") is None
    planted(facts, "postcode", "2222-BBBB", "info")
    assert probe_verdict(facts, "postcode", "no idea") is None
    assert probe_verdict(facts, "postcode", "2222-bbbb") == "pass"
    planted(facts, "postcode", "3333-CCCC", "ok")
    planted(facts, "postcode", "4444-DDDD", "fail")
    assert facts["postcode"].latest == "3333-CCCC"
    assert [probe_verdict(facts, "postcode", v) for v in ("1111-AAAA", "2222-BBBB", "3333-cccc", "4444-DDDD", "")] \
        == ["amnesia", "pass", "pass", "amnesia", "amnesia"]
    planted(facts, "postcode", "5555-EEEE", "ok")
    assert [probe_verdict(facts, "postcode", v) for v in ("2222-BBBB", "3333-CCCC", "5555-EEEE")] \
        == ["pass", "amnesia", "pass"]
    assert probe_verdict(facts, "zip", "5555-EEEE") is None  # another fact
