"""Unit tests of the pieces ChatUser is made of: script parsing, contract, judgement, options, journal."""
from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

from locustfiles.contract import ChatContract, NoReply
from locustfiles.outcome import classify_error
from contracts.journal import Turn, decode_line
from contracts.jsonl import complete_lines, read_jsonl
from locustfiles.journal import Journal
from locustfiles.judge import PlantRegistry, crosstalk, recall
from locustfiles.options import OptionError, Settings, parse_duration, parse_think
from locustfiles.script import ScriptError, load_script, parse_script
from contracts.tokens import make_token, new_session_id

SCRIPTS = Path(__file__).resolve().parent.parent / "locustfiles" / "scripts"


@pytest.mark.parametrize("name", ["support", "soak", "bursty"])
def test_shipped_scripts_load(name):
    script = load_script(SCRIPTS / f"{name}.yaml")
    assert script.turns >= 10 and script.sha
    kinds = {s.kind for s in script.steps}
    assert {"plant", "probe"} <= kinds


def test_support_script_is_10_to_20_turns_with_several_facts():
    script = load_script(SCRIPTS / "support.yaml")
    assert 10 <= script.turns <= 20
    assert len({s.fact for s in script.steps if s.kind == "probe"}) >= 3


BAD_SCRIPTS = [
    ("steps:\n  - plant: order number\n  - probe: postcode\n", 3, "steps[1].probe", "before any step plants"),
    ("steps:\n  - plant: Order Number\n", 2, "steps[0].plant", "lower-case"),
    ("steps:\n  - plant: a\n  - burst: 1\n", 3, "steps[1].burst", "out of range"),
    ("steps:\n  - plant: a\n  - jump: 3\n", 3, "steps[1]", "unknown step 'jump'"),
    ("steps:\n  - chatter: 'My name is Bob.'\n", 2, "steps[0].chatter", "looks like a plant"),
    ("name: x\nstep:\n  - chatter\n", 2, "step", "unknown key"),
    ("steps: [plant: a\n", 2, "", "not valid YAML"),
    ("steps:\n  - think: soon\n", 2, "steps[0].think", "not seconds"),
]


@pytest.mark.parametrize("text,line,field,what", BAD_SCRIPTS)
def test_malformed_script_names_file_line_and_field(text, line, field, what):
    with pytest.raises(ScriptError) as info:
        parse_script(text, "my.yaml")
    message = str(info.value)
    assert message.startswith(f"my.yaml:{line}: {field}"), message
    assert what in message


def test_missing_script_file_is_a_clear_error(tmp_path):
    with pytest.raises(ScriptError, match="cannot read"):
        load_script(tmp_path / "nope.yaml")


def test_contract_default_and_nested_with_header():
    assert ChatContract().request("gf1", "hi") == ({"session_id": "gf1", "message": "hi"}, None)
    c = ChatContract(path="/v2", message_field="input.text", session_field="", session_header="X-Conv",
                     headers=(("Authorization", "Bearer x"),), reply_field="data.answer.text")
    assert c.request("gf1", "hi") == ({"input": {"text": "hi"}}, {"Authorization": "Bearer x", "X-Conv": "gf1"})
    assert c.reply({"data": {"answer": {"text": "yo"}}}) == "yo"
    with pytest.raises(NoReply):
        c.reply({"data": {"answer": {}}})
    with pytest.raises(NoReply):
        c.reply(["not", "a", "dict"])
    assert ChatContract(reply_field="choices.0.text").reply({"choices": [{"text": "a"}]}) == "a"


def test_crosstalk_by_token_and_by_nonce_but_not_own():
    plants = PlantRegistry(capacity=2)
    me, other, third = new_session_id(), new_session_id(), new_session_id()
    plants.add("1234-ABCD", other)
    assert crosstalk(f"Noted. You said: [{make_token(me, 3)}] hi", me, plants) == []
    assert crosstalk("Your postcode is 1234-ABCD.", me, plants) == [other]
    assert crosstalk(f"quoting [{make_token(third, 0)}]", me, plants) == [third]
    assert crosstalk("Your postcode is 1234-ABCD.", other, plants) == []
    plants.add("1111-AAAA", me)
    plants.add("2222-BBBB", me)  # capacity 2: the oldest plant is forgotten
    assert plants.owner("1234-ABCD") is None and len(plants) == 2
    assert recall("Your x is 1111-AAAA.", "1111-AAAA") and not recall(None, "1111-AAAA")


def test_error_classification_is_jepsen_style():
    assert classify_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused")) == ("fail", "connection refused")
    assert classify_error(socket.gaierror(-2, "no name")) == ("fail", "host name not resolved")
    assert classify_error(socket.timeout("timed out"))[0] == "info"
    assert classify_error(ConnectionResetError(104, "reset")) == ("info", "connection reset")


def test_options_parse_and_reject_with_the_option_name():
    assert parse_think("0.2-1.0") == (0.2, 1.0) and parse_think("0.5") == (0.5, 0.5)
    assert parse_duration("1m30s", "x") == 90 and parse_duration("500ms", "x") == 0.5
    with pytest.raises(OptionError, match="--think"):
        parse_think("fast")
    with pytest.raises(OptionError, match="--settle"):
        parse_duration("soon", "settle")

    class O:
        chat_path, message_field, session_field, reply_field = "/chat", "message", "session_id", "reply"
        header = ["Authorization: Bearer x"]
        max_probe_amnesia = "1.5"

    with pytest.raises(OptionError, match="--max-probe-amnesia"):
        Settings.from_options(O)
    O.max_probe_amnesia = "0.01"
    s = Settings.from_options(O)
    assert s.headers == {"Authorization": "Bearer x"} and s.public()["headers"] == {"Authorization": "***"}
    assert s.run_dir.startswith("results/") and str(s.gates.limits["probe_amnesia"]) == "1%"
    assert s.gates.spec == "strict,probe_amnesia=1%" and s.public()["gates"] == s.gates.spec
    O.gate = "lenient,lost=nope"
    with pytest.raises(OptionError, match="--gate .lost=nope.: .nope. is not a limit"):
        Settings.from_options(O)
    O.header = ["no colon"]
    with pytest.raises(OptionError, match="--header"):
        Settings.from_options(O)


def test_journal_appends_lines_and_readers_skip_a_torn_last_line(tmp_path):
    forwarded = []
    j = Journal(tmp_path / "j" / "local-1.jsonl", forward=forwarded.append)
    j.record(Turn(session="gf0", turn=0, reply="ünïcode", outcome="ok", sent=1.0))
    j.record(Turn(session="gf0", turn=1, sent=2.0))
    j.close()
    with open(j.path, "ab") as f:
        f.write(b'{"turn": 2, "tor')
    assert [t.turn for t in read_jsonl(j.path, decode_line)] == [0, 1]
    assert [t.reply for t in read_jsonl(j.path, decode_line)] == ["ünïcode", None]
    assert b"".join(forwarded) == b"".join(complete_lines(j.path.read_bytes()))
    with open(j.path, "ab") as f:
        f.write(b'\n{"turn": 3}\n')
    with pytest.raises(ValueError, match=r"local-1.jsonl:3: not JSON"):
        list(read_jsonl(j.path, decode_line))