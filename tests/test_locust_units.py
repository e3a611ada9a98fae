"""Unit tests of the pieces ChatUser is made of: script parsing, contract, judgement, options, journal."""
from __future__ import annotations

import errno
import json
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
from oracle.verdict import parse_gates

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
    assert c.reply(b'{"data": {"answer": {"text": "yo"}}}') == "yo"
    with pytest.raises(NoReply, match="no reply field 'data.answer.text'"):
        c.reply(b'{"data": {"answer": {}}}')
    with pytest.raises(NoReply):
        c.reply(b'["not", "a", "dict"]')
    with pytest.raises(NoReply, match="^reply is not JSON$"):
        c.reply(b"hello")
    with pytest.raises(NoReply, match="looks like an event stream: --reply-format sse"):
        c.reply(b'data: {"reply": "x"}\n\n')
    assert ChatContract(reply_field="choices.0.text").reply(b'{"choices": [{"text": "a"}]}') == "a"
    for guarded in (b")]}'\n", b")]}',\n", b" )]}'", b"while(1);", b"for(;;);"):  # anti-XSSI: Google's, Angular's
        assert c.reply(guarded + b'{"data": {"answer": {"text": "yo"}}}') == "yo", guarded
    assert ChatContract(session_from="reply:id").issued_session(b")]}'\n{\"id\": \"c-1\"}") == "c-1"
    with pytest.raises(NoReply, match="^reply is not JSON$"):
        c.reply(b")]}' hello")
    assert ChatContract(reply_field="").reply(b'"the body is a JSON string"') == "the body is a JSON string"
    with pytest.raises(NoReply, match="the reply is a JSON dict, not text: set --reply-field"):
        ChatContract(reply_field="").reply(b'{"reply": "x"}')


def test_contract_body_template_lists_and_session_in_the_path():
    openai = ChatContract(message_field="messages.0.content", session_field="user",
                          body='{"model": "m", "messages": [{"role": "user"}], "stream": false}')
    body, headers = openai.request("gf1", "hi")
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False, "user": "gf1"}
    assert headers is None
    assert openai.request("gf2", "yo")[0]["messages"] == [{"role": "user", "content": "yo"}]  # a fresh copy per turn
    langserve = ChatContract(message_field="input.question", session_field="config.configurable.session_id",
                             body='{"input": {"language": "Italian"}}')
    assert langserve.request("gf1", "hi")[0] == {"input": {"language": "Italian", "question": "hi"},
                                                  "config": {"configurable": {"session_id": "gf1"}}}
    # no template: a number makes a list
    assert ChatContract(message_field="messages.0.content").request("gf1", "hi")[0] == \
        {"messages": [{"content": "hi"}], "session_id": "gf1"}
    assert ChatContract(path="/c/{session}", session_field="").request("gf1", "hi") == ({"message": "hi"}, None)


def test_a_session_in_body_values_and_headers_is_the_turns_session_id():
    """A bot that takes a user id beside the conversation id (memory per user and conversation) got one user for
    every virtual user: {session} was replaced in --chat-path only. A quote in an id the bot issued stays JSON."""
    two = ChatContract(session_field="conversation_id", body='{"user": {"id": "u-{session}"}, "model": "m"}',
                       headers=(("X-User", "{session}"),))
    assert two.request("gf1", "hi") == ({"user": {"id": "u-gf1"}, "model": "m", "message": "hi",
                                         "conversation_id": "gf1"}, {"X-User": "gf1"})
    assert two.request('a"b', "hi")[0]["user"] == {"id": 'u-a"b'}
    assert two.request("gf2", "yo")[0]["user"] == {"id": "u-gf2"}  # a fresh copy per turn


@pytest.mark.parametrize("field,body,what", [
    ("input.text", '{"input": "fixed"}', "'text' is inside a str value"),
    ("messages.3.content", '{"messages": []}', "'3' is not an index of a list of 0 item"),
    ("messages.x", '{"messages": [1]}', "'x' is not an index"),
    ("a.1", "", "'1' is not an index of a list of 0 item"),
])
def test_contract_paths_that_cannot_be_set_are_named(field, body, what):
    from locustfiles.contract import PathError
    with pytest.raises(PathError, match=what):
        ChatContract(message_field=field, body=body).request("gf1", "hi")


def test_streamed_replies_langserve_openai_plain_and_errors():
    langserve = ChatContract(reply_format="sse", reply_field="content")
    stream = (b'event: metadata\r\ndata: {"run_id": "r1"}\r\n\r\n'
              b'event: data\r\ndata: {"content": "Your pin", "type": "AIMessageChunk"}\r\n\r\n'
              b': a comment\r\nevent: data\r\ndata: {"content": " is 12.", "type": "AIMessageChunk"}\r\n\r\n'
              b"event: end\r\n\r\n")
    assert langserve.reply(stream) == "Your pin is 12."
    strings = b'event: data\ndata: "Hel"\n\nevent: data\ndata: "lo"\n\nevent: end\n\n'  # a string output
    assert langserve.reply(strings) == "Hello"
    assert langserve.reply(b"data: line one\ndata: line two\n\ndata:[DONE]\n\n") == "line one\nline two"
    # LangGraph's stream: each messages/partial event holds the whole text so far, then `event: end` with null; the
    # null was joined as text ("NotedNoted, thaNoted, thanks.null") and a correct bot FAILed unanswered (bot hunt 14)
    langgraph = ChatContract(reply_format="sse", reply_field="0.content")
    partial = b"".join(b"event: messages/partial\ndata: " + json.dumps([{"content": text, "type": "ai"}]).encode()
                       + b"\n\n" for text in ("Noted", "Noted, tha", "Noted, thanks."))
    assert langgraph.reply(b'event: metadata\ndata: {"run_id": "r1"}\n\n' + partial + b"event: end\ndata: null\n\n") \
        == "Noted, thanks."
    # token events, then a done event repeating the whole text: it was journaled twice over; and --reply-where
    # event=token looked at the data, which has no event field, so no piece was kept (bot hunt 16)
    typed = (b'event: metadata\ndata: {"id": "m1"}\n\nevent: token\ndata: {"text": "Your postcode "}\n\n'
             b'event: token\ndata: {"text": "is 2775-01DT."}\n\nevent: done\ndata: {"text": "Your postcode is '
             b'2775-01DT."}\n\ndata: [DONE]\n\n')
    assert ChatContract(reply_format="sse", reply_field="text").reply(typed) == "Your postcode is 2775-01DT."
    for where, reply in (("event=token", "Your postcode is 2775-01DT."), ("event=done", "Your postcode is 2775-01DT."),
                         ("event!=done", "Your postcode is 2775-01DT.")):
        assert ChatContract(reply_format="sse", reply_field="text", reply_where=where).reply(typed) == reply, where
    own = b'event: token\ndata: {"event": "delta", "text": "a"}\n\n'  # the data's own field decides
    assert ChatContract(reply_format="sse", reply_field="text", reply_where="event=delta").reply(own) == "a"
    assert langserve.reply(b'event: data\ndata: "ha"\n\nevent: data\ndata: "ha"\n\n') == "haha"  # deltas alike
    with pytest.raises(NoReply, match="error event: .*boom"):
        langserve.reply(b'event: data\ndata: "a"\n\nevent: error\ndata: {"status_code": 500, "message": "boom"}\n\n')
    with pytest.raises(NoReply, match="no piece of the stream's 1 has reply field 'content'"):
        langserve.reply(b'data: {"other": 1}\n\n')
    with pytest.raises(NoReply, match="the stream holds no data"):
        langserve.reply(b"")
    with pytest.raises(NoReply, match="the stream holds no data"):
        langserve.reply(b"data: [DONE]\n\n")
    ollama = ChatContract(reply_format="ndjson", reply_field="message.content")
    assert ollama.reply(b'{"message": {"content": "No"}}\n\n{"message": {"content": "ted."}, "done": true}') == "Noted."
    with pytest.raises(NoReply, match="line 2 of the stream is not JSON"):
        ollama.reply(b'{"message": {"content": "No"}}\nnope\n')
    # a JSON array of chunks (Gemini's streamGenerateContent without alt=sse, pretty-printed) is a stream of its
    # items, joined with nothing (bot hunt 8: gemini_array; with --reply-field '*.candidates...' the value was split)
    gemini = ChatContract(reply_format="ndjson", reply_field="candidates.0.content.parts.0.text")
    chunks = [{"candidates": [{"content": {"parts": [{"text": piece}], "role": "model"}}]}
              for piece in ("Your order n", "umber is 675", "9-LM37.")]
    assert gemini.reply(json.dumps(chunks, indent=2).encode()) == "Your order number is 6759-LM37."
    assert ChatContract(reply_format="text", reply_field="").reply("ünï\ud800".encode("utf-8", "surrogatepass")) \
        == "ünï\ufffd\ufffd\ufffd"
    # a text body's line end is no part of the reply: journaled with it, every stored reply differed from its
    # journaled one, and replies stored twice or behind the next turn PASSed
    assert ChatContract(reply_format="text").reply(b"  Your pin is 12.\r\n\r\n") == "Your pin is 12."


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
    for dash in "\u2010\u2011\u2013\u2014\u2212\uff0d":  # typeset: the value recalled, its hyphen a dash
        assert recall(f"Your x is 1111{dash}aaaa.", "1111-AAAA"), dash
        assert crosstalk(f"Your x is 2222{dash}BBBB.", other, plants) == [me], dash
    assert recall("Your x is 1111 AAAA.", "1111-AAAA") and not recall("Your x is 1111_AAAA.", "1111-AAAA")


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
    O.max_probe_amnesia = "1%"  # as --gate writes a rate: it was "not a number"
    assert str(Settings.from_options(O).gates.limits["probe_amnesia"]) == "1%"
    O.max_probe_amnesia = "0.01"
    s = Settings.from_options(O)
    assert s.headers == {"Authorization": "Bearer x"} and s.public()["headers"] == {"Authorization": "***"}
    assert s.run_dir.startswith("results/") and str(s.gates.limits["probe_amnesia"]) == "1%"
    assert s.gates.spec == "strict,probe_amnesia=1%" and s.public()["gates"] == s.gates.spec
    assert parse_gates(s.public()["gate_limits"]).limits == s.gates.limits  # as the run had them: a re-audit's
    O.http_url, O.http_header = "http://127.0.0.1:1/h/{session}", ["Authorization: Bearer s3cret"]  # run.json: masked
    assert Settings.from_options(O).public()["store"]["http_headers"] == [["Authorization", "***"]]
    assert "s3cret" not in json.dumps(Settings.from_options(O).public())
    O.gate = "lenient,lost=nope"
    with pytest.raises(OptionError, match="--gate .lost=nope.: .nope. is not a limit"):
        Settings.from_options(O)
    O.header = ["no colon"]
    with pytest.raises(OptionError, match="--header"):
        Settings.from_options(O)


@pytest.mark.parametrize("options,what", [
    ({"body": "{nope"}, "--body: not JSON"),
    ({"body": "[1, 2]"}, "--body: '\\[1, 2\\]' is not a JSON object"),
    ({"body": '{"input": "x"}', "message_field": "input.text"}, "--message-field: 'input.text': 'text' is inside a str"),
    ({"body": '{"c": 1}', "session_field": "c.id"}, "--session-field: 'c.id': 'id' is inside a int value.*in --body"),
    ({"reply_format": "yaml"}, "--reply-format: 'yaml' is not one of json, text, sse, ndjson, xml"),
    ({"chat_path": "/chat/{sesion}"}, "--chat-path: .*the only placeholder is {session}"),
    ({"session_field": ""}, "set --session-field or --session-header, or put {session} in --chat-path"),
])
def test_contract_options_that_cannot_work_are_refused_by_name(options, what):
    class O:
        chat_path, message_field, session_field, reply_field = "/chat", "message", "session_id", "reply"

    for name, value in options.items():
        setattr(O, name, value)
    with pytest.raises(OptionError, match=what):
        Settings.from_options(O)


def test_contract_options_for_a_streaming_bot_with_the_session_in_its_path():
    class O:
        chat_path, message_field, session_field, reply_field = "/v1/chats/{session}", "messages.0.content", "", "text"
        reply_format, body = "sse", '{"model": "m", "api_key": "sk-123", "nested": {"token": "t"}}'

    s = Settings.from_options(O)
    assert (s.reply_format, s.chat_path) == ("sse", "/v1/chats/{session}")
    assert s.public()["body"] == {"model": "m", "api_key": "***", "nested": {"token": "***"}}
    O.reply_format, O.reply_field = "json", ""  # a body that is a JSON string
    assert Settings.from_options(O).reply_field == ""
    # a conversation a request starts: its id may then be in the path, and a text reply is fine (the start's is JSON)
    O.start_path, O.start_body, O.session_from, O.reply_format = "/v1/chats", '{"secret": "s3"}', "reply:id", "text"
    s = Settings.from_options(O)
    assert (s.start_path, s.session_from) == ("/v1/chats", "reply:id") and s.public()["start_body"] == {"secret": "***"}


def test_an_xml_reply_is_the_text_of_its_elements():
    twiml = ChatContract(reply_format="xml", reply_field="Message")
    assert twiml.reply(b'<?xml version="1.0"?><Response><Message>Your order number is &lt;7&gt;.</Message></Response>') \
        == "Your order number is <7>."
    assert twiml.reply(b"<Response>\n  <Message><Body> a </Body><Media>x.png</Media></Message>\n"
                       b"  <Message>b</Message></Response>") == "a x.png\nb"
    assert ChatContract(reply_format="xml", reply_field="*").reply(b'<r xmlns="urn:x"><m>a</m></r>') == "a"
    assert ChatContract(reply_format="xml", reply_field="m").reply(b'<r xmlns="urn:x"><m>a</m></r>') == "a"
    for bad, what in ((b"<Response/>", "no reply element 'Message'"), (b"not xml", "reply is not XML"),
                      (b'<!DOCTYPE r [<!ENTITY e SYSTEM "file:///etc/passwd">]><r><Message>&e;</Message></r>',
                       "reply is not XML")):
        with pytest.raises(NoReply, match=what):
            twiml.reply(bad)


def test_a_reply_in_several_messages_is_all_of_them():
    rasa = ChatContract(reply_field="*.text")
    assert rasa.reply(b'[{"recipient_id": "a", "text": "Noted."}, {"image": "x"}, {"text": "Anything else?"}]') == \
        "Noted.\nAnything else?"
    for none in (b"[]", b'[{"image": "x"}]', b'{"text": "not a list"}'):
        with pytest.raises(NoReply, match="no text at reply field"):
            rasa.reply(none)
    assert ChatContract(reply_field="data.*.parts.*").reply(b'{"data": [{"parts": ["a", "b"]}, {"parts": ["c"]}]}') == \
        "a\nb\nc"


def test_a_jobs_poll_path_is_filled_from_the_turns_answer():
    jobs = ChatContract(poll_path="/v1/{session}/jobs/{reply.job.id}?from={reply.n}")
    assert jobs.poll_target(b'{"job": {"id": "j 1/2"}, "n": 7}', "gf1") == "/v1/gf1/jobs/j%201%2F2?from=7"
    for answer in (b'{"job": {}}', b'{"job": {"id": ""}, "n": 7}', b'{"job": {"id": {}}, "n": 7}', b"not json"):
        assert jobs.poll_target(answer, "gf1") is None, answer  # nothing to poll: the turn is indeterminate
    headers = {"location": " /jobs/j%207 ", "x-job": "j 8"}.get
    assert ChatContract(poll_path="{header.location}").poll_target(b"", "gf1", headers) == "/jobs/j%207"
    assert ChatContract(poll_path="/v1/{session}/jobs/{header.x-job}").poll_target(b"", "gf1", headers) == \
        "/v1/gf1/jobs/j%208"
    for path in ("{header.location}", "/jobs/{header.x-job}"):  # the response has no such header: nothing to poll
        assert ChatContract(poll_path=path).poll_target(b"{}", "gf1") is None
    assert ChatContract(poll_path="{header.location}").poll_target(b"", "gf1", {"location": "//evil/x"}.get) is None
    assert ChatContract(reply_field="output.text").has_reply(b'{"output": {"text": ""}}')
    assert not ChatContract(reply_field="output.text").has_reply(b'{"status": "running", "output": null}')


def test_the_session_id_a_bot_issues_is_found_where_the_contract_says():
    reply = ChatContract(session_from="reply:data.conversation_id", reply_field="answer")
    assert reply.issued_session(b'{"answer": "a", "data": {"conversation_id": "c-1"}}') == "c-1"
    assert reply.issued_session(b'{"answer": "a", "data": {"conversation_id": 42}}') == "42"
    for unusable in (b'{"answer": "a"}', b'{"data": {"conversation_id": ""}}', b'{"data": {"conversation_id": true}}',
                     b'{"data": {"conversation_id": "a\\nb"}}', b"not json",
                     b'{"data": {"conversation_id": "%s"}}' % (b"x" * 4097)):
        assert reply.issued_session(unusable) is None, unusable
    stream = ChatContract(session_from="reply:conversation_id", reply_format="sse", reply_field="answer")
    events = b'data: {"event": "message", "conversation_id": ""}\n\ndata: {"answer": "a", "conversation_id": "c-2"}\n\n'
    assert stream.issued_session(events) == "c-2"  # the first event that names one
    headers = {"x-session": "h-1"}
    assert ChatContract(session_from="header:X-Session").issued_session(b"", headers.get) is None  # the name as given: Locust's headers are case-blind
    assert ChatContract(session_from="header:x-session").issued_session(b"", headers.get) == "h-1"
    assert ChatContract(session_from="cookie:sid").issued_session(b"", cookie={"sid": "k-1"}.get) == "k-1"
    located = ChatContract(session_from="header:Location")  # a 201 Created: the id is the URL's last segment
    for url in ("/v1/sessions/s-9", "https://bot.example/v1/sessions/s-9/?x=1#top", "s-9", " /sessions/s%2D9 "):
        assert located.issued_session(b"", {"Location": url}.get) == "s-9", url
    assert located.issued_session(b"", {"Location": "https://bot.example/"}.get) is None  # no segment: no id
    dify = ChatContract(session_from="reply:conversation_id", session_field="conversation_id", message_field="query",
                        body='{"inputs": {}, "conversation_id": ""}')
    assert dify.request(None, "hi") == ({"inputs": {}, "conversation_id": "", "query": "hi"}, None)  # the first turn
    assert dify.request("c-1", "hi")[0]["conversation_id"] == "c-1"
    assert ChatContract(session_from="cookie:sid").request(None, "hi") == ({"message": "hi"}, None)
    threads = ChatContract(session_from="reply:id", start_path="/threads", start_body='{"meta": {"a": 1}}',
                           reply_format="text")
    first = threads.start_request()
    first["meta"]["a"] = 2
    assert threads.start_request() == {"meta": {"a": 1}}  # a fresh copy per conversation
    assert threads.issued_session(b'{"id": "th 1"}', reply_format="json") == "th 1"  # a start reply is JSON


def test_journal_appends_lines_and_readers_skip_a_torn_last_line(tmp_path):
    forwarded = []
    j = Journal(tmp_path / "j" / "local-1.jsonl", forward=forwarded.append)
    j.record(Turn(session="gf0", turn=0, reply="ünïcode", outcome="ok", sent=1.0))
    j.record(Turn(session="gf0", turn=1, sent=2.0, outcome="info"))
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

def test_the_command_that_finishes_an_interrupted_audit_names_the_runs_own_store_options():
    """`interrupted.finish_with` said --store-url URL for every run: a run audited through --http-url, with its
    own role and text fields, could not be finished by the command it was given."""
    from locustfiles.endofrun import store_arguments
    from oracle.store import StoreOptions

    assert store_arguments(None) == ""
    assert store_arguments(StoreOptions(url="redis://:pw@127.0.0.1:6379/0")) == " --store-url URL"
    got = store_arguments(StoreOptions(http_url="http://u:secret@127.0.0.1:8/history/{session}", role_field="role",
                                       content_field="content", assistant_roles=("bot",)))
    assert got == (" --http-url 'http://u:***@127.0.0.1:8/history/{session}' --role-field role --content-field content"
                   " --assistant-role bot")
    assert "secret" not in got
    with_token = store_arguments(StoreOptions(http_url="http://127.0.0.1:8/history/{session}",
                                              http_headers=(("Authorization", "Bearer s3cret"),)))
    assert with_token == " --http-url 'http://127.0.0.1:8/history/{session}' --http-header 'Authorization: ***'"


# ---- signals after the load (locustfiles/endofrun.py) -------------------------------------------------

def _finishing_run(tmp_path, phase):
    from types import SimpleNamespace

    from locustfiles.endofrun import EndOfRun, Run

    end = EndOfRun(settings=None)
    run = Run(SimpleNamespace(run_dir=str(tmp_path), store=None))
    run.phase = phase
    end.runs.append(run)
    return end, run


@pytest.mark.parametrize("phase", ["settle", "audit", "report"])
def test_a_signal_handled_inside_a_finaliser_still_stops_the_run(tmp_path, phase):
    """A signal handler runs at any bytecode of the current greenlet, a garbage collector's ``__del__``
    included, where a raised exception is printed and dropped: the stop must land where main next waits."""
    import gevent

    end, run = _finishing_run(tmp_path, phase)

    class Finalised:
        def __del__(self):
            end.on_signal("SIGINT")

    with pytest.raises(SystemExit) as stopped:
        Finalised()  # dropped at once: its __del__ takes the signal
        gevent.sleep(0)
    assert stopped.value.code == 130 and run.interrupted == "SIGINT" and end.code == 130


def test_a_signal_during_the_report_leaves_run_json_interrupted_not_done(tmp_path, monkeypatch):
    """The report writes files and charts and never waits, so the throw lands after it: the run must still
    end as interrupted (exit code 130 in run.json, as the process exits), not be marked done over it."""
    import json
    from types import SimpleNamespace

    import gevent

    from locustfiles.endofrun import REPORT, EndOfRun

    end, run = _finishing_run(tmp_path, "load")
    run.bad = "no Locust files in this test"
    (tmp_path / "run.json").write_text(json.dumps({"run": "r", "end": None}))

    def finish_with_a_ctrl_c_in_the_report(_self, r):
        r.phase = REPORT
        end.on_signal("SIGINT")
        return 0

    monkeypatch.setattr(EndOfRun, "_finish", finish_with_a_ctrl_c_in_the_report)
    assert end.end_run(SimpleNamespace(runner=None, process_exit_code=None, parsed_options=None)) == 130
    with pytest.raises(SystemExit):
        gevent.sleep(0)
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["exit_code"] == 130 and meta["phase"] == "report" and meta["interrupted"]["signal"] == "SIGINT"


def test_a_ctrl_c_during_the_report_says_the_audits_verdict_once_and_records_it(tmp_path, monkeypatch, capsys):
    """A Ctrl-C while the report rendered said "SIGINT during report: ... no verdict", and the report went on (it
    never waits) and then printed "verdict PASS" and "PASS - 13 gate(s) held" below it (verdict hunt 9). Then it
    said only "no verdict", while summary.json and the badge said PASS and `oracle trend` pooled the run as a pass
    (verdict hunt 13). The audit had finished: its verdict is said once, with the signal, and run.json records it."""
    import json

    import gevent

    import oracle
    from locustfiles.endofrun import Stopped

    end, run = _finishing_run(tmp_path, "audit")
    (tmp_path / "run.json").write_text(json.dumps({"run": "r", "end": None}))

    def report_with_a_ctrl_c(_run_dir):
        end.on_signal("SIGINT")
        return str(tmp_path / "report.html")

    monkeypatch.setattr(oracle, "render_report", report_with_a_ctrl_c)
    held = {"result": "pass", "failed": [], "rules": [], "gates": "strict"}
    with pytest.raises(Stopped):
        end._report(run, 0, {"verdict": held})
    said = capsys.readouterr()
    text = said.out + said.err
    assert "SIGINT during report: stopped with exit code 130; the audit had finished: PASS" in text
    assert "no verdict" not in text and "PASS" not in text.split("draw its report with", 1)[1]
    assert end.code == 130
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["verdict"] == "pass" and meta["exit_code"] == 130 and meta["phase"] == "report"
    assert meta["interrupted"]["signal"] == "SIGINT" and "oracle report" in meta["interrupted"]["finish_with"]
    assert end.summary_lines()[0].startswith(f"{run.run_dir}: PASS (the audit's; SIGINT during the report)")
    with pytest.raises(SystemExit):  # the stop thrown at main's next wait, as in the process
        gevent.sleep(0)


@pytest.mark.parametrize("when", ["audit", "figures"])
def test_a_signal_while_the_audit_finishes_says_and_records_the_audits_verdict(tmp_path, monkeypatch, capsys, when):
    """A Ctrl-C as the audit finished (while it wrote its tables, or said its figures) said "SIGINT during audit:
    ... no verdict" and exit 130, while summary.json held the whole verdict, and `oracle trend`, `compare` and
    `report` read the night as a PASS (verdict hunt 14). The audit had finished: its verdict is said with the signal
    and recorded in run.json, as for a signal during the report."""
    import json
    from types import SimpleNamespace

    import gevent

    import oracle
    from locustfiles import endofrun
    from locustfiles.endofrun import Stopped

    end, run = _finishing_run(tmp_path, "settle")
    run.settings = SimpleNamespace(run_dir=str(tmp_path), store=oracle.StoreOptions(url="redis://127.0.0.1:1/0"),
                                   gates=None, settle=0.0, no_audit=False)
    (tmp_path / "run.json").write_text(json.dumps({"run": "r", "end": None}))
    held = {"result": "pass", "failed": [], "rules": [], "gates": "strict"}
    turns = dict.fromkeys(("total", "ok", "fail", "info", "probes_answered", "probes_failed", "crosstalk_replies"), 1)
    monkeypatch.setattr(oracle, "journal_verdict", lambda *_: {"turns": turns, "verdict": held, "problems": []})

    def audit_run(*_args, **_kwargs):
        if when == "audit":  # a signal that lands while the audit runs, which goes on to write summary.json
            end.on_signal("SIGINT")
        return {"verdict": held, "sessions": 1}

    said = endofrun.say

    def say(text):
        said(text)
        if when == "figures" and text.startswith("audit: "):
            end.on_signal("SIGINT")

    monkeypatch.setattr(oracle, "audit_run", audit_run)
    monkeypatch.setattr(endofrun, "say", say)
    with pytest.raises(Stopped):
        end._finish(run)
    out = capsys.readouterr()
    text = out.out + out.err
    assert "SIGINT during audit: stopped with exit code 130; the audit had finished: PASS" in text
    meta = json.loads((tmp_path / "run.json").read_text())
    assert meta["verdict"] == "pass" and meta["exit_code"] == 130 and meta["phase"] == "audit"
    assert meta["interrupted"]["signal"] == "SIGINT" and "oracle report" in meta["interrupted"]["finish_with"]
    line = end.summary_lines()[0]
    assert line.startswith(f"{run.run_dir}: PASS (the audit's; SIGINT during the audit)")
    assert f"no report.html (draw it: python -m oracle report {run.run_dir})" in line  # not "the store was not
    assert "not judged" not in line  # judged" (verdict hunt 17)
    with pytest.raises(SystemExit):  # the stop thrown at main's next wait, as in the process
        gevent.sleep(0)


def test_a_stream_is_cumulative_only_when_every_piece_extends_the_one_before():
    sse = ChatContract(reply_format="sse", reply_field="t")
    events = lambda *texts: "".join(f'data: {{"t": "{t}"}}\n\n' for t in texts).encode()  # noqa: E731
    assert sse.reply(events("Hel", "Hello", "Hello there")) == "Hello there"  # the whole text so far, each time
    assert sse.reply(events("Hel", "lo", " there")) == "Hello there"          # deltas, joined
    assert sse.reply(events("ha", "ha", "ha")) == "hahaha"                   # a piece the same as the one before
    assert sse.reply(events("Hello", "Hel")) == "HelloHel"                   # shorter: not the text so far
    # a redraw of the same text, and Gradio's final repeat of the whole text (bot hunt 8: cumul_repeat,
    # cumul_final_dup): still the text so far; before, every reply that came so was judged unanswered
    assert sse.reply(events("Hel", "Hel", "Hello", "Hello there", "Hello there")) == "Hello there"
    assert sse.reply(events("ha", "ha", "haha")) == "haha"
    assert sse.reply(events("Hel", "Help", "Hello")) == "HelHelpHello"       # a piece that does not extend the last


@pytest.mark.parametrize("status", ["queued", "IN_QUEUE", "processing", "in_progress", "generating", "streaming"])
def test_a_polled_job_whose_status_says_it_runs_is_not_done(status):
    """A job's answer may hold the text so far while it runs (Replicate's, fal's IN_PROGRESS, a bot's "generating":
    bot hunt 8 job_generating, every probe judged on a partial answer); it is polled on until its status says
    otherwise."""
    jobs = ChatContract(poll_path="/jobs/{reply.id}", reply_field="output")
    assert not jobs.job_done(json.dumps({"status": status, "output": "Your postcode is"}).encode())
    assert jobs.job_done(json.dumps({"status": "succeeded", "output": "Your postcode is X."}).encode())
    assert jobs.job_done(json.dumps({"output": "Your postcode is X."}).encode())  # no status: its answer is the reply


@pytest.mark.parametrize("target", ["closed pipe", "/dev/full"])
def test_a_line_goldfish_cannot_print_never_stops_the_run(target, monkeypatch):
    """`locust ... 2>&1 | head -2`: the pipe closed, and say() raised BrokenPipeError inside Locust's event hooks,
    which log it and go on: the journal was never opened, or the audit and verdict were skipped, and Locust exited
    0 (input hunt 10). A line that cannot be written is dropped; the run folder keeps the record."""
    import os
    import sys

    from locustfiles.endofrun import say

    if target == "closed pipe":
        read, write = os.pipe()
        os.close(read)
        stream = os.fdopen(write, "w")
    else:
        stream = open(target, "w")
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        say("verdict FAIL (gates strict):")
        say("FAIL — 6 recall probes the bot answered without the planted fact")
    finally:
        monkeypatch.undo()
        try:
            stream.close()
        except OSError:
            pass
