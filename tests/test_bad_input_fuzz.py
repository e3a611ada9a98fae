"""Property-based fuzzing (hypothesis) of the parsers of what users and crashes write: chaos plans,
conversation scripts, journal lines and the other run-folder records, and the redaction of URLs.

The property: whatever the input, the only exception is the documented one (PlanError, ScriptError,
RecordError), and what is accepted can be used (a decoded turn can be written and read back).
"""
from __future__ import annotations

import json
import math

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from chaos.plan import PlanError, parse_plan
from contracts import redact
from contracts.journal import RecordError, decode_chunk, decode_line, encode_line
from contracts.timeline import RecordError as TimelineRecordError, chaos_event, load_step
from locustfiles.script import ScriptError, parse_script

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# values a hand-written file may hold where a number, a word or a list belongs
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10 ** 300, max_value=10 ** 400),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.sampled_from(["1s", "500ms", "1m30s", "nan", "inf", "-1", "2h", "50%", "all", "bot", "redis",
                                     "kill", "pause", "redis-stall", "lb-drop", "toxic", "latency", "0.2-1.0",
                                     "order number", "1000000000s", "1ms", ".nan", "1e400"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                      st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
PLAN_FIELDS = ["id", "kind", "target", "at", "every", "start", "until", "duration", "count", "grace", "mode", "type",
               "release", "env", "pause", "toxic", "stream", "toxicity", "latency", "jitter", "timeout", "bogus"]
faults = st.dictionaries(st.sampled_from(PLAN_FIELDS), values, max_size=7)
plans = st.fixed_dictionaries({"faults": st.lists(faults, max_size=4)}, optional={
    "duration": values, "max_concurrent": values, "max_blast": values, "seed": values, "name": values,
    "toxiproxy": values})


def dump(value) -> str:
    return yaml.safe_dump(value, allow_unicode=True, sort_keys=False)


@FUZZ
@given(st.text(max_size=300))
def test_any_text_is_a_plan_or_a_plan_error(text):
    try:
        parse_plan(text, "p.yaml")
    except PlanError as exc:
        assert all(p.startswith("p.yaml") for p in exc.problems), exc.problems


@FUZZ
@given(plans)
def test_any_plan_shaped_document_is_a_plan_or_a_plan_error(doc):
    try:
        plan = parse_plan(dump(doc), "p.yaml")
    except PlanError as exc:
        assert all(p.startswith("p.yaml") and len(p) < 2000 for p in exc.problems), exc.problems
        return
    for t, f, _ in plan.schedule():  # an accepted plan has a finite, bounded schedule
        assert math.isfinite(t) and (f.duration is None or math.isfinite(f.duration))


STEP_KINDS = ["plant", "probe", "chatter", "burst", "think", "dance"]
steps = st.one_of(st.sampled_from(STEP_KINDS),
                  st.dictionaries(st.sampled_from(STEP_KINDS), values, min_size=1, max_size=2))
scripts = st.fixed_dictionaries({"steps": st.lists(steps, max_size=6)},
                                optional={"chatter": values, "repeat": values, "name": values, "bogus": values})


@FUZZ
@given(st.text(max_size=300))
def test_any_text_is_a_script_or_a_script_error(text):
    try:
        parse_script(text, "s.yaml")
    except ScriptError as exc:
        assert str(exc).startswith("s.yaml")


@FUZZ
@given(scripts)
def test_any_script_shaped_document_is_a_script_or_a_script_error(doc):
    try:
        script = parse_script(dump(doc), "s.yaml")
    except ScriptError as exc:
        assert str(exc).startswith("s.yaml") and len(str(exc)) < 2000
        return
    assert script.turns <= 1_000_000 and all(math.isfinite(s.think[1]) for s in script.steps)


TURN_FIELDS = ["run", "session", "turn", "kind", "token", "message", "fact", "nonce", "sent", "received", "outcome",
               "status", "reply", "error", "verdict", "crosstalk", "step", "user"]
records = st.dictionaries(st.sampled_from(TURN_FIELDS), values, max_size=12)
required = st.fixed_dictionaries({"session": st.text(min_size=1, max_size=20), "turn": values,
                                  "outcome": st.sampled_from(["ok", "fail", "info"]), "sent": values})


def json_line(record: dict) -> bytes:
    return json.dumps(record, allow_nan=True).encode() + b"\n"


def usable(turn) -> None:
    """An accepted turn can be written and read back unchanged (what the audit and the writer rely on)."""
    assert decode_line(encode_line(turn)) == turn


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_are_a_turn_or_a_record_error(raw):
    assert decode_chunk([raw]) is None or len(decode_chunk([raw])) == 1
    try:
        usable(decode_line(raw))
    except RecordError:
        pass


@FUZZ
@given(st.one_of(records, st.builds(lambda a, b: {**a, **b}, records, required)))
def test_any_record_shaped_line_is_a_turn_or_a_record_error(record):
    line = json_line(record)
    fast = decode_chunk([line])
    try:
        turn = decode_line(line)
    except RecordError:
        assert fast is None  # the fast path never accepts what the exact path refuses
        return
    usable(turn)
    if fast is not None:
        assert fast == [turn]


@FUZZ
@given(st.one_of(st.binary(max_size=100), st.dictionaries(st.sampled_from(
    ["event", "time", "fault", "kind", "instance", "outcome", "detail", "planned", "step", "users", "start", "end"]),
    values, max_size=8).map(json_line)))
def test_any_timeline_or_step_line_is_a_record_or_a_record_error(raw):
    for decode, names in ((chaos_event, ("time", "planned")), (load_step, ("start", "end"))):
        try:
            record = decode(raw)
        except TimelineRecordError:
            continue
        for name in names:  # the times each kind of line is read for (a step line's "time" is read by nothing)
            if record.get(name) is not None:
                float(record[name])  # what the audit and the report do with it


# ---- redaction: a password never survives, whatever it holds ------------------------------------
secrets_ = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs")), min_size=1, max_size=12)
hosts = st.sampled_from(["redis", "127.0.0.1", "[::1]", "h1:26379,h2:26379", "bot.example.com"])


@FUZZ
@given(st.sampled_from(["redis", "rediss", "http", "https", "redis+sentinel", "unix"]), st.text(
    alphabet="abcdefgh", max_size=5), secrets_, hosts, st.sampled_from(["", ":6379"]), st.sampled_from(
    ["", "/0", "/history/{session}", "/m/0?db=1"]))
def test_a_password_in_a_url_never_survives_redaction(scheme, user, password, host, port, path):
    secret = "Zq" + password
    port = "" if "," in host else port
    url = f"{scheme}://{user}:{secret}@{host}{port}{path}"
    assert secret not in redact.url(url)
    assert secret not in redact.text(f"error: cannot reach {url} (refused)")
    query = f"{scheme}://{host}{port}/x?a=1&password={secret.replace('&', '').replace('#', '')}&b=2"
    assert "Zq" not in redact.url(query)


@FUZZ
@given(st.text(max_size=80))
def test_redaction_takes_any_text(text):
    assert isinstance(redact.url(text), str) and isinstance(redact.text(text), str)


# ---- what a bot answers and what a store holds -----------------------------------------------------
json_bodies = values.map(lambda v: json.dumps(v, allow_nan=True).encode())
stream_bodies = st.lists(st.one_of(json_bodies, st.binary(max_size=30)), max_size=5).map(
    lambda pieces: b"".join(b"data: " + p + b"\n\n" for p in pieces))
bodies = st.one_of(st.binary(max_size=200), json_bodies, stream_bodies, st.just(b"[" * 5000 + b"]" * 5000))


@FUZZ
@given(st.one_of(bodies, st.binary(max_size=60).map(lambda b: b"<r><m>" + b + b"</m></r>")),
       st.sampled_from(["json", "text", "sse", "ndjson", "xml"]),
       st.sampled_from(["reply", "", "choices.0.delta.content", "a.b", "0", "*.text", "*"]))
def test_any_response_body_is_a_reply_or_no_reply(body, reply_format, field):
    """A bot may answer anything: the turn's reply is text or NoReply (the turn is then info), never another
    exception (which would kill the Locust user before the turn is journaled); the same for the id it issues."""
    from locustfiles.contract import ChatContract, NoReply

    contract = ChatContract(reply_format=reply_format, reply_field=field, session_from="reply:" + (field or "id"))
    try:
        assert isinstance(contract.reply(body), str)
    except NoReply:
        pass
    issued = contract.issued_session(body)
    assert issued is None or (isinstance(issued, str) and issued.isprintable())


entries = st.one_of(st.binary(max_size=60), st.text(max_size=30), values.map(lambda v: json.dumps(v).encode()),
                    st.fixed_dictionaries({"type": st.sampled_from(["human", "ai", "system", 3, None]),
                                           "data": st.one_of(values, st.fixed_dictionaries({"content": values}))})
                    .map(lambda m: json.dumps(m).encode()))


@FUZZ
@given(st.lists(entries, max_size=6), st.sampled_from(["list", "string"]), st.booleans())
def test_any_stored_history_is_judged_into_findings(stored, kind, exists):
    """Whatever a key holds (garbage bytes, JSON of any shape, messages with odd roles or contents), the batch
    proof and the exact checkers judge it into findings of the taxonomy, never an exception."""
    from contracts.journal import Turn
    from oracle.checkers import _CLASSES, check_session
    from oracle.clean import prove_clean
    from oracle.decode import Shape, decode_session
    from oracle.store import RawSession, StoreOptions

    session = "gf00000000000000aa"
    turns = [Turn(session=session, turn=n, token=f"{session}t{n}", message=f"[{session}t{n}] hi", sent=1.0 + n,
                  received=1.5 + n, outcome="ok", reply="Noted.") for n in range(2)]
    raw = RawSession(session, "message_store:" + session, exists, None, stored[:1] if kind == "string" else stored, kind)
    shape = Shape(StoreOptions())
    proof = prove_clean([raw], {session: turns}, shape)
    if not proof.clean[0]:
        found = check_session(session, turns, raw, decode_session(raw, shape, proof.elements[0]), {session: turns})
        assert {f["class"] for f in found.findings} <= set(_CLASSES)
