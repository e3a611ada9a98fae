"""The verdict: gate specs, evaluation, and one root cause counted once (misroute, swap, mangled entries).

The audits here run on run folders with a store/ snapshot (no Redis needed: the checkers and the
root-cause pass are what is under test); tests/test_verdict_runs.py drives real Locust runs.
"""
from __future__ import annotations

import json
import math
import re

import pytest

from oracle.audit import audit_run
from oracle.verdict import (FAIL, GATES, OFF, PASS, UNMEASURED, GateError, Limit, evaluate, headline,
                            legacy_overrides, parse_gates, parse_limit, require_measured, trusted_exit_code)
from support_oracle import (RUN, TurnSpec, build_world, finding_keys, lc, read_findings, simple_specs, write_journal,
                            write_snapshot)


# ---- gate specs ----------------------------------------------------------------------------------

def test_strict_is_the_default_and_every_gate_allows_nothing():
    gates = parse_gates(None)
    assert gates.spec == "strict"
    assert set(gates.limits) == {g.name for g in GATES} and all(str(v) == "0" for v in gates.limits.values())


@pytest.mark.parametrize("text, limit", [
    ("0", Limit(count=0)), ("3", Limit(count=3)), ("1%", Limit(rate=0.01)), ("0.5%", Limit(rate=0.005)),
    ("0.01", Limit(rate=0.01)), ("1e-3", Limit(rate=0.001)), ("off", Limit()), ("OFF", Limit()), ("100%", Limit(rate=1.0)),
])
def test_limits_are_counts_rates_or_off(text, limit):
    assert parse_limit(text, "x") == limit


@pytest.mark.parametrize("text", ["nan", "inf", "-1", "-0.5%", "101%", "1.5", "lots", "", "1 %x", "nan%"])
def test_bad_limits_are_refused_with_where(text):
    with pytest.raises(GateError, match="^where: "):
        parse_limit(text, "where")


def test_items_change_the_profile_given_first_and_aliases_resolve():
    gates = parse_gates("lenient,lost=0,amnesia=2%,cross-talk=1")
    assert str(gates.limits["stored_loss"]) == "0" and str(gates.limits["probe_amnesia"]) == "2%"
    assert str(gates.limits["crosstalk"]) == "1" and str(gates.limits["reordered"]) == "1%"  # from lenient


@pytest.mark.parametrize("spec, refusal", [
    # a profile after an item reset it: stored_loss=0,lenient allowed 0.1% lost, looser than asked
    ("stored_loss=0,lenient", "'lenient' sets every gate (the profile lenient) after 'stored_loss=0', which it would "
                              "reset: give it first, 'lenient,stored_loss=0'"),
    ("errors=off,strict,crosstalk=1", "'strict' sets every gate (the profile strict) after 'errors=off', which it "
                                      "would reset: give it first, 'strict,errors=off,crosstalk=1'"),
    ("probe_amnesia=1,probe_amnesia=2", "'probe_amnesia=2' sets the probe_amnesia gate, which 'probe_amnesia=1' sets "
                                        "already: keep one"),  # the last won, as a gates file's twice is refused
    ("lost=0,stored_loss=5%", "'stored_loss=5%' sets the stored_loss gate, which 'lost=0' sets already: keep one"),
])
def test_a_profile_after_an_item_or_a_gate_set_twice_is_refused(spec, refusal):
    with pytest.raises(GateError, match=re.escape(f"--gate '{spec}': {refusal}")):
        parse_gates(spec)


def test_a_gates_file_naming_a_profile_goes_first_and_sets_no_gate_an_item_sets(tmp_path):
    (tmp_path / "g.yaml").write_text("profile: lenient\nerrors: off\n")
    assert parse_gates(f"{tmp_path / 'g.yaml'},corrupt=2").limits["errors"].off
    with pytest.raises(GateError, match="the profile lenient.*which it would reset"):
        parse_gates(f"stored_loss=0,{tmp_path / 'g.yaml'}")
    (tmp_path / "errors.yaml").write_text("errors: off\n")
    with pytest.raises(GateError, match="sets the errors gate, which 'errors=1' sets already: keep one"):
        parse_gates(f"strict,errors=1,{tmp_path / 'errors.yaml'}")


def test_a_gates_file_whose_path_holds_a_comma_is_one_item(tmp_path):
    """`--gate 'results/nightly,v2/gates.yaml'` was split at the comma: "neither a profile ... nor a gates file"."""
    folder = tmp_path / "nightly,v2"
    folder.mkdir()
    (folder / "gates.yaml").write_text("errors: off\n")
    assert parse_gates(str(folder / "gates.yaml")).limits["errors"].off
    gates = parse_gates(f"{folder / 'gates.yaml'},corrupt=2")
    assert gates.limits["errors"].off and str(gates.limits["corrupt"]) == "2"
    assert parse_gates(f"corrupt=2,{folder / 'gates.yaml'}").limits["errors"].off
    with pytest.raises(GateError, match="is a folder, not a gates file"):
        parse_gates(str(tmp_path))


def test_unknown_gate_names_its_item_and_the_known_ones():
    with pytest.raises(GateError, match=r"--gate 'lots=1': unknown gate 'lots' \(known: probe_amnesia, stored_loss"):
        parse_gates("lots=1")


def test_gates_file_with_profile_and_line_numbered_errors(tmp_path):
    good = tmp_path / "gates.yaml"
    good.write_text("profile: lenient\nprobe_amnesia: 0\nerrors: off\n")
    gates = parse_gates(f"{good},corrupt=2")
    assert str(gates.limits["probe_amnesia"]) == "0" and gates.limits["errors"].off
    assert str(gates.limits["stored_loss"]) == "0.1%" and str(gates.limits["corrupt"]) == "2"
    bad = tmp_path / "bad.yaml"
    bad.write_text("probe_amnesia: 1%\nduplicated: many\n")
    with pytest.raises(GateError, match=f"^{bad}:2: duplicated: 'many' is not a limit"):
        parse_gates(str(bad))
    (tmp_path / "alias.yaml").write_text("probe_amnesia: 0\nerrors: 1%\namnesia: 5%\n")  # one gate, two names
    with pytest.raises(GateError, match=f"alias.yaml:3: 'amnesia' sets the probe_amnesia gate, which line 1 sets"):
        parse_gates(str(tmp_path / "alias.yaml"))
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(GateError, match="list.yaml:1: a gates file is a mapping"):
        parse_gates(str(tmp_path / "list.yaml"))
    (tmp_path / "bin.yaml").write_bytes(b"\x80\x81\xff")
    with pytest.raises(GateError, match="bin.yaml:1: not UTF-8 text"):
        parse_gates(str(tmp_path / "bin.yaml"))
    (tmp_path / "deep.yaml").write_text("a: " + "[" * 100_000 + "\n")  # bounded: no RecursionError
    with pytest.raises(GateError, match="deep.yaml.*nested too deeply"):
        parse_gates(str(tmp_path / "deep.yaml"))
    (tmp_path / "tag.yaml").write_text("probe_amnesia: !!python/object/apply:os.system [true]\n")
    with pytest.raises(GateError, match="tag.yaml:1: "):
        parse_gates(str(tmp_path / "tag.yaml"))
    with pytest.raises(GateError, match="'nope.yaml' is neither a profile"):
        parse_gates("nope.yaml")


def test_legacy_options_are_rates_and_a_count():
    over = legacy_overrides(max_probe_amnesia=0.01, max_stored_loss=0.0, max_crosstalk=2)
    assert over == {"probe_amnesia": Limit(rate=0.01), "stored_loss": Limit(rate=0.0), "crosstalk": Limit(count=2)}
    with pytest.raises(GateError, match="--max-probe-amnesia 1.0 is a rate of 100%: the gate could never fail"):
        legacy_overrides(max_probe_amnesia=1.0)  # --gate probe_amnesia=1 allows one failed probe; this allowed all


# ---- evaluation ----------------------------------------------------------------------------------

def test_evaluation_counts_rates_off_and_not_measured():
    observed = {"probe_amnesia": {"count": 5, "total": 1000}, "stored_loss": {"count": 2, "total": 5000},
                "crosstalk": {"count": 0, "total": 100}, "errors": {"count": 9, "total": 900}}
    v = evaluate(observed, parse_gates("probe_amnesia=1%,stored_loss=1,errors=off"))
    result = {r["gate"]: r["result"] for r in v["rules"]}
    assert result["probe_amnesia"] == PASS and result["crosstalk"] == PASS and result["errors"] == OFF
    assert result["stored_loss"] == FAIL and result["duplicated"] == UNMEASURED
    assert v["result"] == FAIL and v["failed"] == [
        "stored_loss: 2 acknowledged turns lost by the store of 5,000 acknowledged turns (0.04%, 95% CI "
        "0.01%-0.15%) > allowed 1"]
    rule = next(r for r in v["rules"] if r["gate"] == "probe_amnesia")
    assert rule["rate"] == 0.005 and 0 < rule["low"] < 0.005 < rule["high"] and rule["limit"] == "1%"
    assert headline(v).startswith("FAIL — stored_loss: 2")


def test_a_rate_gate_passes_on_an_empty_denominator_and_a_run_with_nothing_found_passes():
    v = evaluate({"probe_amnesia": {"count": 0, "total": 0}}, parse_gates("probe_amnesia=1%"))
    assert v["result"] == PASS and headline(v) == "PASS — 1 gate(s) held, 12 not measured"
    assert math.isnan(float("nan"))  # (NaN never reaches a limit: parse_limit refuses it)


# ---- one root cause, one count ---------------------------------------------------------------------

def _world(sessions: int = 3, turns: int = 4, seed: int = 5):
    return build_world([[TurnSpec("chatter", "ok") for _ in range(turns)] for _ in range(sessions)], seed=seed)


def _audit(tmp_path, world, gates: str = "strict"):
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    return audit_run(tmp_path, gates=parse_gates(gates))


def test_a_turn_stored_under_another_session_is_one_misroute_not_a_store_loss(tmp_path):
    world = _world()
    a, b, _ = world.order
    moved = [(t, m) for t, m in world.stored[a] if t == 2]
    world.stored[a] = [(t, m) for t, m in world.stored[a] if t != 2]
    world.stored[b] = world.stored[b] + moved
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("lost", a, 2), ("crosstalk", b, None)}
    lost, cross = sorted(read_findings(tmp_path), key=lambda f: f["class"] != "lost")
    assert lost["cause"] == cross["cause"] == "misroute"
    assert lost["evidence"]["stored_under"] == {"session": b, "key": f"message_store:{b}", "finding": cross["id"]}
    assert "written under session" in lost["explanation"] and "the store itself lost nothing" in lost["explanation"]
    assert "the bot misrouted it" in cross["explanation"]
    # the user's memory lacks the turn (the metric), but the store lost nothing (the gate counts it as cross-talk)
    assert summary["metrics"]["stored_loss"]["count"] == 1
    rules = {r["gate"]: r for r in summary["verdict"]["rules"]}
    assert rules["stored_loss"]["count"] == 0 and rules["stored_loss"]["result"] == PASS
    assert rules["crosstalk"]["result"] == FAIL
    assert summary["verdict"]["root_causes"][0] == {
        "cause": "misroute", "count": 1, "findings": 2, "text": pytest.approx(summary["verdict"]["root_causes"][0]["text"])}
    sessions = {r["session"]: r for r in _csv(tmp_path / "audit" / "sessions.csv")}
    assert sessions[a]["lost"] == "1" and sessions[b]["crosstalk"] == "1"


def test_a_reply_stored_under_another_session_is_one_misroute_not_also_unanswered(tmp_path):
    """The reply of a turn whose user entry is at home, written into another user's history (a reply saved under
    a "current session" another request changed meanwhile): it was counted twice, unanswered at home and
    cross-talk where it landed."""
    world = _world()
    _, a, b = world.order  # the world's replies quote session 0's token: these two are quoted by none
    reply = [(t, m) for t, m in world.stored[a] if t == 2 and m["type"] == "ai"]
    world.stored[a] = [(t, m) for t, m in world.stored[a] if (t, m) not in reply]
    world.stored[b] = world.stored[b] + reply
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("unanswered", a, 2), ("crosstalk", b, None)}
    unanswered, cross = sorted(read_findings(tmp_path), key=lambda f: f["class"] != "unanswered")
    assert unanswered["cause"] == cross["cause"] == "misroute"
    assert unanswered["evidence"]["reply_stored_under"] == {"session": b, "key": f"message_store:{b}",
                                                            "finding": cross["id"]}
    assert "its reply was written under session" in unanswered["explanation"]
    assert "That reply is missing from its own session" in cross["explanation"]
    rules = {r["gate"]: r for r in summary["verdict"]["rules"]}
    assert rules["unanswered"]["count"] == 0 and rules["crosstalk"]["result"] == FAIL
    assert [(r["cause"], r["count"], r["findings"]) for r in summary["verdict"]["root_causes"]] == [("misroute", 1, 2)]


@pytest.mark.parametrize("middle", [False, True])
def test_losses_that_are_every_sessions_oldest_turns_name_a_window_memory(tmp_path, middle):
    """A bot that keeps the last N exchanges (LTRIM) FAILed as "lost by the store", saying nothing about windows:
    the losses stand, and a warning says what they look like. One loss that is not among the oldest: no warning."""
    world = _world(sessions=3, turns=6)
    for session in world.order:
        world.stored[session] = world.stored[session][-8:]  # the last 4 exchanges
    if middle:
        a = world.order[1]
        world.stored[a] = [(t, m) for t, m in world.stored[a] if t != 4]
    summary = _audit(tmp_path, world)
    assert summary["verdict"]["result"] == FAIL and summary["anomalies"]["lost"] == 6 + middle
    warned = [p for p in summary["problems"] if "window memory" in p]
    assert warned == ([] if middle else [
        "in each of the 3 sessions with lost turns, the lost turns are its oldest and its key holds exactly 4 user "
        "entries: the bot seems to keep only its last 4 exchanges (a window memory, LTRIM, or the older ones replaced "
        "by a summary). That forgets by design: if it is meant to, judge recall by probes inside the window and gate "
        "stored_loss off (--gate stored_loss=off); if not, the trimming is the bug"])


def test_a_session_whose_turns_all_went_elsewhere_vanished_by_misroute(tmp_path):
    world = _world()
    a, b, c = world.order
    world.stored[b] += world.stored[a][:4]   # turns 0, 1 under b
    world.stored[c] += world.stored[a][4:]   # turns 2, 3 under c
    world.stored[a] = []
    world.gone.add(a)
    summary = _audit(tmp_path, world)
    gone = next(f for f in read_findings(tmp_path) if f["class"] == "vanished")
    assert gone["cause"] == "misroute" and gone["evidence"]["misrouted_turns"] == 4
    assert "written under other sessions' keys" in gone["explanation"] and "restart" not in gone["explanation"]
    rules = {r["gate"]: r for r in summary["verdict"]["rules"]}
    assert rules["vanished"]["count"] == 0 and rules["crosstalk"]["count"] == 2
    assert rules["stored_loss"]["count"] == 0 and summary["metrics"]["stored_loss"]["count"] == 4


def test_a_swapped_pair_is_one_reorder_not_also_unanswered(tmp_path):
    world = _world(sessions=1, turns=4)
    (s,) = world.order
    entries = world.stored[s]  # u0 a0 u1 a1 u2 a2 u3 a3: swap u2 and u1 -> u0 a0 u2 a1 u1 a2 ...
    entries[2], entries[4] = entries[4], entries[2]
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("reordered", s, 2)}
    (f,) = read_findings(tmp_path)
    assert f["evidence"]["replies_before_their_turn"] == [1]
    assert "part of this reorder, not missing" in f["explanation"]
    assert summary["anomalies"] == {"reordered": 1}


@pytest.mark.parametrize("call_text", ["", "Let me check my notes.", "(answer streamed to the client)"])
def test_an_agent_that_stores_its_tool_call_but_not_its_answer_is_unanswered(tmp_path, call_text):
    """A LangChain agent stores, per turn, the question, an AI message with tool calls and the tool's result; its
    final answer went to the user but not into the history. No stored text is a reply, so matching fell back to
    counting assistant entries, and the tool-call entry counted as the answer: PASS, with no text (fixed first)
    and then with a preamble ("Let me check my notes.") or a placeholder a streaming bot stores (a real LangChain
    agent and app). An assistant entry is an answer only when it is like the reply (one holds the other)."""
    world = _world(sessions=2, turns=3)
    for s in world.order:
        kept = []
        for turn, message in world.stored[s]:
            if message["type"] == "ai":
                call = {"type": "ai", "data": {**message["data"], "content": call_text, "type": "ai",
                                               "tool_calls": [{"name": "lookup", "args": {}, "id": f"c{turn}"}]}}
                tool = {"type": "tool", "data": {"content": "42", "type": "tool", "tool_call_id": f"c{turn}"}}
                kept += [(turn, call), (turn, tool)]
            else:
                kept.append((turn, message))
        world.stored[s] = kept
    summary = _audit(tmp_path, world)
    assert summary["anomalies"] == {"unanswered": 6} and summary["verdict"]["result"] == FAIL
    assert {f["evidence"]["assistant_entries_after"] for f in read_findings(tmp_path)} == {0}
    answered = _world(sessions=1, turns=2)  # the agent that stores its answer after the tool call: nothing to find
    (s,) = answered.order
    with_calls = []
    for turn, message in answered.stored[s]:
        if message["type"] == "ai":
            with_calls.append((turn, {"type": "ai", "data": {"content": "", "type": "ai"}}))
        with_calls.append((turn, message))
    answered.stored[s] = with_calls
    assert _audit(tmp_path / "answered", answered)["anomalies"] == {}


@pytest.mark.parametrize("stored_as", ["cut short", "with a prefix", "html-escaped", "spaced and cased"])
def test_a_reply_stored_otherwise_than_sent_is_still_its_answer(tmp_path, stored_as):
    """What a correct bot's store may do to a reply: keep its first 40 characters, prefix it, escape it for HTML,
    re-space or re-case it. Each stored text still holds the reply, or is held by it, once both are read alike."""
    world = build_world([[TurnSpec("chatter", "ok") for _ in range(3)] for _ in range(2)], seed=5)
    replies = {(r["session"], r["turn"]): r for r in world.records}
    for r in replies.values():
        r["reply"] = f"Sure & thanks: {r['reply']} <ok>"
    for s in world.order:
        for turn, message in world.stored[s]:
            if message["type"] == "ai":
                reply = replies[s, turn]["reply"]
                message["data"]["content"] = {
                    "cut short": reply[:40], "with a prefix": f"Assistant: {reply}",
                    "html-escaped": reply.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"),
                    "spaced and cased": "  " + reply.upper().replace(" ", "\n ")}[stored_as]
    assert _audit(tmp_path, world)["anomalies"] == {}


@pytest.mark.parametrize("sent_as", ["html", "cut inside an emoji"])
def test_a_reply_sent_otherwise_than_stored_is_still_its_answer(tmp_path, sent_as):
    """An HTMX page's bot stores the model's Markdown and returns it rendered as HTML; a reply cut inside an emoji
    is stored with its lone surrogate, which the client journals as "?". Both FAILed a correct bot: unanswered."""
    world = build_world([[TurnSpec("chatter", "ok") for _ in range(3)] for _ in range(2)], seed=5)
    replies = {(r["session"], r["turn"]): r for r in world.records}
    for s in world.order:
        for turn, message in world.stored[s]:
            if message["type"] == "ai":
                r = replies[s, turn]
                if sent_as == "html":
                    message["data"]["content"] = f"**Noted.**\n\nYou said: `{r['message']}`"
                    r["reply"] = f'<div class="msg"><p><strong>Noted.</strong></p><p>You said: <code>{r["message"]}</code></p></div>'
                else:
                    message["data"]["content"] = r["reply"] + " \ud83d"
                    r["reply"] += " ?"
    assert _audit(tmp_path, world)["anomalies"] == {}


@pytest.mark.parametrize("stored_as", ["its last piece", "its first piece", "the whole prompt and it"])
def test_a_reply_stored_as_a_piece_of_it_or_inside_the_prompt_is_unanswered(tmp_path, stored_as):
    """A streaming bot that keeps one chunk (``text = chunk`` for ``text += chunk``), or one that stores the model's
    whole output with the prompt (return_full_text: every earlier message again), PASSed: one text held the other.
    A piece must be most of the reply; a text holding the reply must hold no other message's token."""
    world = _world(sessions=2, turns=3)
    replies = {(r["session"], r["turn"]): r["reply"] for r in world.records}
    for s in world.order:
        said = ""
        for turn, message in world.stored[s]:
            if message["type"] == "human":
                said += message["data"]["content"] + "\n"
            else:
                reply = replies[s, turn]
                message["data"]["content"] = {"its last piece": reply[-6:], "its first piece": reply[:7],
                                              "the whole prompt and it": f"{said}AI: {reply}"}[stored_as]
    summary = _audit(tmp_path, world)
    assert summary["anomalies"] == {"unanswered": 6} and summary["verdict"]["result"] == FAIL


def test_an_answer_in_text_blocks_joined_otherwise_by_the_client_is_its_answer(tmp_path):
    """Anthropic's citations split an answer into text blocks ("Your order number is ", "1237-JPWT", "."): read
    with --reply-field content.*.text the client joins them with line ends, the store keeps them joined with
    nothing, and a correct bot FAILed with every probe unanswered."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(2)], seed=5)
    for r in world.records:
        if r["kind"] == "probe":
            r["reply"] = f"Your {r['fact']} is \n{r['nonce']}\n."
    for s in world.order:
        for turn, message in world.stored[s]:
            r = next(r for r in world.records if r["session"] == s and r["turn"] == turn)
            if message["type"] == "ai" and r["kind"] == "probe":
                message["data"]["content"] = r["reply"].replace("\n", "")
    assert _audit(tmp_path, world)["anomalies"] == {}


def test_a_buffer_of_every_reply_so_far_is_no_turn_s_answer(tmp_path):
    """A bot that appends each reply to one growing text and stores that text each turn PASSed: the text held the
    whole reply and no token besides. A stored text that also holds another reply of the session is not this one."""
    world = _world(sessions=2, turns=3)
    for r in world.records:
        r["reply"] = f"Answer number {r['turn']} of this chat."
    for s in world.order:
        so_far = []
        for turn, message in world.stored[s]:
            if message["type"] == "ai":
                so_far.append(f"Answer number {turn} of this chat.")
                message["data"]["content"] = "\n".join(so_far)
    summary = _audit(tmp_path, world)
    assert summary["anomalies"] == {"unanswered": 4} and summary["verdict"]["result"] == FAIL  # turns 1 and 2


def test_a_reply_of_two_bubbles_stored_as_the_first_without_the_recalled_value_is_unanswered(tmp_path):
    """An API answering in bubbles (an acknowledgement, then "Your postcode is X.") whose bot stores the first
    only PASSed: the first bubble was over 40 characters, so it counted as the reply cut short. A stored text
    without the value the reply carried is not its answer."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(2)], seed=5)
    ack = "Thanks for waiting, I have looked through our conversation so far."
    for r in world.records:
        if r["kind"] == "probe":
            r["reply"] = f"{ack}\nYour {r['fact']} is {r['nonce']}."
    probes = {(r["session"], r["turn"]) for r in world.records if r["kind"] == "probe"}
    for s in world.order:
        for turn, message in world.stored[s]:
            if message["type"] == "ai" and (s, turn) in probes:
                message["data"]["content"] = ack
    summary = _audit(tmp_path, world)
    assert summary["anomalies"] == {"unanswered": 2} and summary["verdict"]["result"] == FAIL
    kept = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")]], seed=5)  # the value kept: an answer
    for r in kept.records:
        if r["kind"] == "probe":
            stored = f"Your {r['fact']} is {r['nonce']}."
            r["reply"] = f"{stored} (recalled)"
            (s,) = kept.order
            kept.stored[s] = [(t, {**m, "data": {**m["data"], "content": stored}} if m["type"] == "ai" and
                               t == r["turn"] else m) for t, m in kept.stored[s]]
    assert _audit(tmp_path / "kept", kept)["anomalies"] == {}


def test_replies_stored_without_the_footer_the_api_adds_are_answers(tmp_path):
    """A bot whose API adds a footer to some replies (its probes' sources) stores them without it. One verbatim
    reply switched the whole session to matching by text, so each footed turn was 'unanswered': a correct bot
    FAILed. Now each turn is matched verbatim where it can be, else by count among the other assistant entries."""
    world = _world(sessions=2, turns=4)
    for r in world.records:
        if r["turn"] % 2:
            r["reply"] += "\n\nSources: the knowledge base."
    assert _audit(tmp_path, world)["anomalies"] == {}
    dropped = _world(sessions=1, turns=4)  # one reply not stored at all: still found, and only that one
    (s,) = dropped.order
    dropped.stored[s] = [(t, m) for t, m in dropped.stored[s] if not (t == 1 and m["type"] == "ai")]
    for r in dropped.records:
        if r["turn"] % 2:
            r["reply"] += " (footer)"
    _audit(tmp_path / "dropped", dropped)
    assert finding_keys(tmp_path / "dropped") == {("unanswered", s, 1)}


@pytest.mark.parametrize("damage", ["truncated", "redacted", "lowercased", "dash stripped", "dash a space"])
def test_a_plant_stored_without_its_value_is_lost(damage, tmp_path):
    """A bot that stores each message cut to 32 characters, or with its digits masked (a PII scrub), keeps every
    token and no planted fact; it answered its probes from a cache, so nothing failed online: PASS. A stored plant
    must hold the value it planted (in any case: a bot may lowercase what it stores; and spelt as a recall may
    spell it, with a space or nothing for the dash: a store that strips punctuation keeps the fact, and its every
    plant was 'lost' while every probe was answered)."""
    world = build_world(simple_specs(3), seed=5)
    plants = {(r["session"], r["turn"]): r["nonce"] for r in world.records if r["kind"] == "plant"}
    for s in world.order:
        for turn, message in world.stored[s]:
            if message["type"] == "human" and (s, turn) in plants:
                text = message["data"]["content"]
                value = plants[s, turn]
                message["data"]["content"] = {"truncated": text[:32], "redacted": text.replace(value, re.sub(r"[0-9]", "#", value)),
                                              "lowercased": text.lower(),
                                              "dash stripped": text.replace(value, value.replace("-", "").lower()),
                                              "dash a space": text.replace(value, value.replace("-", " "))}[damage]
    ok = {(r["session"], r["turn"]) for r in world.records if r["outcome"] == "ok"}
    summary = _audit(tmp_path, world)
    if damage in ("lowercased", "dash stripped", "dash a space"):
        assert summary["anomalies"] == {}
        return
    assert summary["anomalies"] == {"lost": len(plants.keys() & ok)} and summary["verdict"]["result"] == FAIL
    f = read_findings(tmp_path)[0]
    assert f["evidence"]["altered"] and "lost the fact" in f["explanation"]


def test_sessions_sharing_one_key_give_bounded_cross_talk_findings(tmp_path):
    """A bot whose issued ids collide files many conversations under one key: each session's history holds every
    other's entries, one cross-talk finding each, n squared (207,528 findings and a 137 MB anomalies.jsonl from a
    20-s run). A session gives at most MAX_CROSSTALK of them, the last counting the rest; the verdict is the same."""
    from oracle.checkers import MAX_CROSSTALK

    world = _world(sessions=40, turns=4)
    shared = [entry for s in world.order for entry in world.stored[s]]
    for s in world.order:
        world.stored[s] = list(shared)
    summary = _audit(tmp_path, world)
    found = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    per_session = {s: [f for f in found if f["session"] == s] for s in world.order}
    assert all(len(fs) == MAX_CROSSTALK for fs in per_session.values())
    others = 39  # four user entries each, in order: the first MAX_CROSSTALK are findings
    assert per_session[world.order[0]][-1]["evidence"]["more"] == {"entries": others * 4 - MAX_CROSSTALK,
                                                                   "sessions": others - MAX_CROSSTALK // 4}
    assert "hold each other's whole histories" in per_session[world.order[0]][-1]["explanation"]
    assert summary["verdict"]["result"] == FAIL
    assert next(r for r in summary["verdict"]["rules"] if r["gate"] == "crosstalk")["count"] == 40


@pytest.mark.parametrize("scripted, result", [(2, FAIL), (0, "pass"), (None, "pass"), ("two", "pass")])
def test_a_run_that_sent_none_of_its_scripts_probes_is_no_pass(tmp_path, scripted, result):
    """The audit reads run.json's script_probes (written at the start of a Locust run): a script with probes of which
    none was sent measured nothing of memory (exit 2); a script without any, or a run.json that does not say (an
    older goldfish, a damaged value), is judged on the rest as before."""
    from oracle.verdict import NO_PROBE_SENT, exit_code

    (tmp_path / "run.json").write_text(json.dumps({"run": RUN, **({} if scripted is None else
                                                                  {"script_probes": scripted})}))
    summary = _audit(tmp_path, _world())
    assert summary["verdict"]["result"] == result, summary["verdict"]["failed"]
    if result == FAIL:
        assert summary["verdict"]["failed"] == [NO_PROBE_SENT] and exit_code(summary["verdict"]) == 2
        probe_rule = next(r for r in summary["verdict"]["rules"] if r["gate"] == "probe_amnesia")
        assert probe_rule["result"] == "not measured"  # not a PASS of 0 of 0 beside the line saying so
        assert audit_run(tmp_path, gates=parse_gates("strict,probe_amnesia=off"))["verdict"]["result"] == "pass"


def test_expiry_allowed_by_its_gate_is_not_also_a_stored_loss(tmp_path):
    """A bot that sets a TTL on histories by design: `--gate strict,expired=off` still FAILed, on stored_loss, since
    the expired sessions' turns counted as lost too (and the headline named the expiry just allowed). With the
    expired (or evicted) gate off, those turns are not counted again; any other loss still is."""
    world = _world(sessions=4, turns=3)
    a, b, c, _ = world.order
    world.ttl[c] = 3600  # the store's keys carry TTLs: a gone key expired
    world.gone.update({a, b})
    strict = _audit(tmp_path / "strict", world)
    assert strict["anomalies"] == {"expired": 2}
    assert {r["gate"] for r in strict["verdict"]["rules"] if r["result"] == FAIL} == {"expired", "stored_loss"}
    allowed = _audit(tmp_path / "allowed", world, gates="strict,expired=off")
    assert allowed["verdict"]["result"] == "pass", allowed["verdict"]["failed"]
    assert allowed["observed"]["stored_loss"]["count"] == 6  # kept as measured: the rule subtracts what is allowed
    world.stored[c] = world.stored[c][2:]  # and a real loss on top of it still fails
    lost = _audit(tmp_path / "lost", world, gates="strict,expired=off")
    rule = next(r for r in lost["verdict"]["rules"] if r["gate"] == "stored_loss")
    assert rule["result"] == FAIL and rule["count"] == 1


def test_a_reply_stored_before_its_question_is_a_reorder(tmp_path):
    world = _world(sessions=1, turns=3)
    (s,) = world.order
    entries = world.stored[s]
    entries[2], entries[3] = entries[3], entries[2]  # a1 before u1
    _audit(tmp_path, world)
    (f,) = read_findings(tmp_path)
    assert (f["class"], f["turn"]) == ("reordered", 1) and f["evidence"]["reply_before_turn"] == 1
    assert "the reply comes first" in f["explanation"]


def test_a_mangled_user_entry_is_tied_to_its_turn_by_the_reply_after_it(tmp_path):
    world = _world(sessions=1, turns=3)
    (s,) = world.order
    world.stored[s][2] = (None, b"\x80\x04\x95 mangled, token unreadable")  # u1's place
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("corrupt", s, 1)}  # not also lost
    (f,) = read_findings(tmp_path)
    assert f["evidence"]["tied_by"] == "the verbatim reply stored right after it"
    assert "It belongs to turn 1 (identified by the verbatim reply stored right after it)" in f["explanation"]
    assert summary["metrics"]["stored_loss"]["count"] == 0


def test_mangled_entries_followed_by_the_same_reply_are_tied_one_each(tmp_path):
    """A bot that answers "I see." to most turns: two mangled user entries each followed by "I see." were tied to
    one turn, the other counted corrupt AND lost (one fault, two counts: 23 extra 'lost' in a real run)."""
    world = _world(sessions=1, turns=4)
    (s,) = world.order
    for r in world.records:
        r["reply"] = "I see."
    world.stored[s] = [(t, {**m, "data": {**m["data"], "content": "I see."}}) if m["type"] == "ai" else (t, m)
                       for t, m in world.stored[s]]
    world.stored[s][2] = (None, b"\x80\x04\x95 mangled one")  # u1's place
    world.stored[s][4] = (None, b"\x80\x04\x95 mangled two")  # u2's place
    summary = _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("corrupt", s, 1), ("corrupt", s, 2)}  # neither also lost
    assert summary["metrics"]["stored_loss"]["count"] == 0


def test_another_session_s_answer_stored_in_a_history_is_cross_talk(tmp_path):
    """A bot that writes some answers through a shared pointer files session A's answer in session B's history: B's
    own entries are all there, A's turn is unanswered, and B's extra assistant entry went unseen (assistant entries
    were never read), so `--gate lenient` (no cross-talk allowed) PASSed. An assistant entry carrying another
    session's token that is none of this session's own replies is cross-talk; the session's own replies (which
    quote its own messages, or were judged online) never are."""
    world = _world(sessions=2, turns=3)
    b, a = world.order  # b's own replies quote no other session (some of the world's replies do)
    answer = next(m for t, m in world.stored[a] if t == 1 and m["type"] == "ai")
    world.stored[a] = [(t, m) for t, m in world.stored[a] if m is not answer]
    world.stored[b] = world.stored[b] + [(None, answer)]
    summary = _audit(tmp_path, world, gates="lenient")
    assert finding_keys(tmp_path) == {("unanswered", a, 1), ("crosstalk", b, None)}
    (f,) = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert f["evidence"]["role"] == "assistant" and f["evidence"]["source_session"] == a
    assert "another session's answer" in f["explanation"]
    assert summary["verdict"]["result"] == FAIL


def test_a_summary_entry_built_from_other_users_messages_is_cross_talk(tmp_path):
    """A bot that keeps a running "Summary so far" system entry built from one list shared by every user: other
    sessions' messages sat in entries of role system, which were never read (only user and assistant entries
    were), and strict PASSed. A token of another session in an entry of any role is cross-talk."""
    world = _world(sessions=2, turns=3)
    b, a = world.order
    theirs = next(m for t, m in world.stored[a] if t == 1 and m["type"] == "human")["data"]["content"]
    world.stored[b] = world.stored[b] + [(None, lc("system", f"Summary so far: {theirs}"))]
    summary = _audit(tmp_path, world)
    (f,) = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert (f["session"], f["evidence"]["role"], f["evidence"]["source_session"]) == (b, "other", a)
    assert "neither user nor assistant role" in f["explanation"] and summary["verdict"]["result"] == FAIL
    own = next(m for t, m in world.stored[b] if m["type"] == "human")["data"]["content"]
    world.stored[b] = world.stored[b][:-1] + [(None, lc("system", f"Summary so far: {own}"))]  # its own: nothing
    assert _audit(tmp_path, world)["anomalies"] == {}


def _rows(run_dir) -> dict:
    return {row["session"]: row for row in _csv(run_dir / "audit" / "sessions.csv")}


def _recall_world():
    """Two sessions that plant a fact and ask for it back; replies carry no token (an LLM's)."""
    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")]
                         for _ in range(2)], seed=5)
    plants = {r["session"]: r for r in world.records if r["kind"] == "plant"}
    for r in world.records:
        if r["kind"] == "probe":  # asks for the planted fact back, and is answered with it
            r.update(fact=plants[r["session"]]["fact"], nonce=plants[r["session"]]["nonce"])
        r["reply"] = f"Your {r['fact']} is {r['nonce']}." if r["kind"] == "probe" else "Noted."
    for s in world.order:
        replies = {r["turn"]: r["reply"] for r in world.records if r["session"] == s}
        world.stored[s] = [(t, lc("ai", replies[t]) if m["type"] == "ai" else m) for t, m in world.stored[s]]
    return world


@pytest.mark.parametrize("gates", ["strict", "lenient"])
def test_another_session_s_recall_answer_stored_in_a_history_is_cross_talk(gates, tmp_path):
    """A shared memory object swapped between the question and the answer files A's answer to its recall probe
    ("Your phone number is 8846-QANV.") in B's history. It carries no token, so only A's unanswered turn was
    seen, and `--gate lenient` (0.1% unanswered allowed) PASSed B's memory holding A's phone number. The value
    is A's plant's: cross-talk from A's plant turn, counted in B's row and in the sessions with cross-talk."""
    world = _recall_world()
    a, b = world.order
    answer = next(m for t, m in world.stored[a] if t == 2 and m["type"] == "ai")
    world.stored[a] = [(t, m) for t, m in world.stored[a] if m is not answer]
    world.stored[b] = world.stored[b] + [(None, answer)]
    summary = _audit(tmp_path, world, gates=gates)
    (f,) = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    plant = next(r for r in world.records if r["session"] == a and r["kind"] == "plant")
    assert f["session"] == b and f["time"] == plant["sent"] and "pending" not in f["evidence"]
    assert (f["evidence"]["source_session"], f["evidence"]["source_turn"]) == (a, plant["turn"])
    assert f["evidence"]["source_value"] == plant["nonce"] and "the value session" in f["explanation"]
    assert summary["metrics"]["crosstalk"]["count"] == 1 and summary["anomalies"]["crosstalk"] == 1
    assert (_rows(tmp_path)[b]["crosstalk"], _rows(tmp_path)[b]["anomalous"]) == ("1", "1")
    assert summary["verdict"]["result"] == FAIL and any(line.startswith("crosstalk: 1 ")
                                                        for line in summary["verdict"]["failed"])


@pytest.mark.parametrize("entry", [("system", "Known facts about the user: {fact} = {value}."),
                                   ("human", "(note) The user's {fact} is {value}.")])
def test_another_session_s_value_in_a_note_of_known_facts_is_cross_talk(tmp_path, entry):
    """A shared extractor writes the facts it saw into each history as a "known facts" system entry, or a user-role
    note with no token: another user's value there PASSed (only assistant entries were read for values)."""
    world = _recall_world()
    a, b = world.order
    plant = next(r for r in world.records if r["session"] == a and r["kind"] == "plant")
    role, text = entry
    world.stored[b] = [(None, lc(role, text.format(fact=plant["fact"], value=plant["nonce"])))] + world.stored[b]
    summary = _audit(tmp_path, world)
    (f,) = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert f["session"] == b and (f["evidence"]["source_session"], f["evidence"]["source_turn"]) == (a, plant["turn"])
    assert "known facts" in f["explanation"] and summary["verdict"]["result"] == FAIL


@pytest.mark.parametrize("how", ["user entry wrapped", "user entry appended", "note quoting the message",
                                 "note lower-cased"])
def test_another_session_s_value_beside_this_session_s_own_token_is_cross_talk(tmp_path, how):
    """One module-level facts dict shared by every user, its note stored in each history around the user's own
    message ("Context: known facts ... Question: [token] ..."), after it, or in a system note that quotes the
    user's last message: the entry carries the session's own token, so it was never read for values: 366 of 366
    sessions held other users' values and the run PASSed. Lower-cased, the values were not even seen."""
    world = _recall_world()
    a, b = world.order
    plant = next(r for r in world.records if r["session"] == a and r["kind"] == "plant")
    note = f"Known facts: {plant['fact']}: {plant['nonce']}."
    at, entry = next((i, m) for i, (t, m) in enumerate(world.stored[b]) if m["type"] == "human")
    text = entry["data"]["content"]
    if how == "user entry wrapped":
        world.stored[b][at] = (world.stored[b][at][0], lc("human", f"Context: {note}\nQuestion: {text}"))
    elif how == "user entry appended":
        world.stored[b][at] = (world.stored[b][at][0], lc("human", f"{text}\n{note}"))
    else:
        wrote = f"{note} The user just said: {text}"
        world.stored[b].insert(at + 2, (None, lc("system", wrote.lower() if how == "note lower-cased" else wrote)))
    summary = _audit(tmp_path, world)
    (f,) = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert f["session"] == b and (f["evidence"]["source_session"], f["evidence"]["source_turn"]) == (a, plant["turn"])
    assert f["evidence"]["source_value"] == plant["nonce"] and summary["verdict"]["result"] == FAIL


def test_a_reply_telling_another_session_s_value_in_lower_case_is_cross_talk(tmp_path):
    """The reply as the client got it, lower-cased by the bot: the value pattern read upper case only."""
    world = _recall_world()
    a, b = world.order
    plant = next(r for r in world.records if r["session"] == a and r["kind"] == "plant")
    turn = next(r for r in world.records if r["session"] == b and r["outcome"] == "ok" and r["kind"] == "chatter")
    turn["reply"] = f"by the way, {plant['nonce'].lower()} is on file."
    world.stored[b] = [(t, lc("ai", turn["reply"]) if t == turn["turn"] and m["type"] == "ai" else m)
                       for t, m in world.stored[b]]
    _audit(tmp_path, world, gates="lenient")
    found = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert [f["evidence"]["source_value"] for f in found] == [plant["nonce"]], found


@pytest.mark.parametrize("text", ["Between 1999-2000 we shipped 4821-ABCD.", "Your {fact} is {own}."])
def test_a_value_no_other_session_planted_is_no_cross_talk(text, tmp_path):
    """A value-shaped string in an extra assistant entry that no turn of the run planted (an LLM's year range),
    or that the session planted itself, is nobody else's data: no finding, nothing counted."""
    world = _recall_world()
    _, b = world.order
    plant = next(r for r in world.records if r["session"] == b and r["kind"] == "plant")
    world.stored[b] = world.stored[b] + [(None, lc("ai", text.format(fact=plant["fact"], own=plant["nonce"])))]
    summary = _audit(tmp_path, world, gates="lenient")
    assert not [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert summary["metrics"]["crosstalk"]["count"] == 0 and "crosstalk" not in summary["anomalies"]
    assert _rows(tmp_path)[b]["crosstalk"] == "0"


def test_a_plant_moved_with_its_answer_is_one_cross_talk(tmp_path):
    """A's plant and its answer ("Noted: your phone number is 1000-X0Q0.") both filed in B: one fault, found by the
    token of the user entry; the answer carrying the value is not a second finding."""
    world = _recall_world()
    a, b = world.order
    moved = [(t, m) for t, m in world.stored[a] if t == 0]
    plant = next(r for r in world.records if r["session"] == a and r["kind"] == "plant")
    moved = [(t, lc("ai", f"Noted: your {plant['fact']} is {plant['nonce']}.") if m["type"] == "ai" else m)
             for t, m in moved]
    world.stored[a] = [(t, m) for t, m in world.stored[a] if t != 0]
    world.stored[b] = world.stored[b] + moved
    _audit(tmp_path, world, gates="lenient")
    crosstalk = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert len(crosstalk) == 1 and "source_value" not in crosstalk[0]["evidence"], crosstalk


def test_an_unrelated_corrupt_entry_still_leaves_a_lost_turn_lost(tmp_path):
    world = _world(sessions=1, turns=3)
    (s,) = world.order
    world.stored[s] = [e for e in world.stored[s] if e[0] != 1] + [(None, b"{garbage")]
    _audit(tmp_path, world)
    assert finding_keys(tmp_path) == {("lost", s, 1), ("corrupt", s, None)}


def _csv(path):
    import csv

    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_summary_verdict_is_written_and_gates_recorded(tmp_path):
    world = _world(sessions=2)
    world.stored[world.order[0]].append((None, lc("human", "an entry without a token")))
    summary = _audit(tmp_path, world, gates="lenient")
    saved = json.loads((tmp_path / "audit" / "summary.json").read_text())
    assert saved["verdict"]["result"] == PASS == summary["verdict"]["result"] and saved["verdict"]["gates"] == "lenient"
    assert saved["thresholds"]["probe_amnesia"] == "1%" and saved["breaches"] == []


# ---- attribution: blamed only above the quiet baseline; a fault that touched nothing is ineffective ----

def _timeline(run_dir, kind: str, start: float, end: float, detail: dict | None = None) -> None:
    rec = {"fault": "f#0", "kind": kind, "target": "x", "instance": "x", "backend": "local", "outcome": "ok"}
    with open(run_dir / "chaos.jsonl", "w") as fh:
        fh.write(json.dumps({**rec, "event": "apply", "time": start, **({"detail": detail} if detail else {})}) + "\n")
        fh.write(json.dumps({**rec, "event": "recover", "time": end}) + "\n")


def _lose(world, keep) -> None:
    for s in world.order:
        world.stored[s] = [(t, m) for t, m in world.stored[s] if keep(s, t)]


def test_a_loss_at_the_same_rate_without_the_fault_is_not_charged_to_it(tmp_path):
    """Memory in a per-process dict: every turn is lost, before the kill and after it alike."""
    world = _world(sessions=12, turns=4, seed=3)
    _lose(world, lambda s, t: t == 0)  # every session keeps only its first turn
    middle = sorted(r["sent"] for r in world.records)[len(world.records) // 2]
    write_journal(tmp_path, world.records)
    _timeline(tmp_path, "kill", middle, middle + 0.5)
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path, recovery_s=0.0)
    (kill,) = summary["by_fault"]
    assert kill["lost_after"]["count"] > 0 and kill["charged"] == 0 and not kill["lost_after"]["above_baseline"]
    assert summary["baseline"]["uncharged"] == summary["metrics"]["stored_loss"]["count"] > 0


def test_a_loss_only_before_the_crash_is_charged_to_the_crash(tmp_path):
    world = _world(sessions=12, turns=4, seed=3)
    sent = sorted(r["sent"] for r in world.records)
    crash = sent[len(sent) // 2]
    acked = {(r["session"], r["turn"]): r["received"] for r in world.records}
    _lose(world, lambda s, t: acked[(s, t)] > crash + 0.5)  # what was acknowledged before it is gone
    write_journal(tmp_path, world.records)
    _timeline(tmp_path, "redis-restart", crash, crash + 0.5)
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path, recovery_s=0.0)
    (restart,) = summary["by_fault"]
    assert restart["charged"] == summary["metrics"]["stored_loss"]["count"] > 0
    assert restart["lost_after"]["above_baseline"] and restart["lost_after"]["p"] < 0.05


def test_a_fault_that_touched_nothing_is_ineffective_not_survived(tmp_path):
    world = _world(sessions=4, seed=3)
    t0 = min(r["sent"] for r in world.records)
    write_journal(tmp_path, world.records)
    _timeline(tmp_path, "redis-client-kill", t0 + 0.5, t0 + 0.51, detail={"killed": 0, "touched": 0})
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path)
    (row,) = summary["by_fault"]
    assert row["ineffective"] and row["effective_occurrences"] == 0 and row["touched"] == 0
    windows = _csv(tmp_path / "audit" / "windows.csv")
    assert all(w["faults"] == "" for w in windows)  # no window is marked as under a fault
    from oracle.report import information

    assert any("redis-client-kill was ineffective" in line for line in information(summary))


def test_the_headline_names_leaks_in_replies_and_failed_requests_beside_the_stored_findings(tmp_path):
    """A shared-memory bot answers one user with another's data: the journal's cross-talk. The headline (the
    line CI shows) names it, and the failed requests no finding explains, beside a loss the store shows."""
    world = build_world([[TurnSpec("chatter", "ok"), TurnSpec("chatter", "ok"), TurnSpec("chatter", "fail")]
                         for _ in range(3)], seed=8)
    a, b, c = world.order
    world.stored[a] = [(t, m) for t, m in world.stored[a] if t != 1]  # a loss the store shows
    reply = next(r for r in world.records if r["session"] == b and r["outcome"] == "ok")
    reply["crosstalk"] = [c]  # b's reply carried c's data
    summary = _audit(tmp_path, world)
    causes = {r["cause"]: r["count"] for r in summary["verdict"]["root_causes"]}
    assert causes == {"lost": 1, "leak": 1}
    line = headline(summary["verdict"])
    assert "1 sessions answered with another session's data" in line and "1 acknowledged turns the store lost" in line
    assert "3 failed requests no fault was in force to explain" in line


def test_a_session_whose_lines_come_in_pieces_is_judged_whole(tmp_path):
    """A's lines, then B's (the same user), then the rest of A's: the grouper sees A complete twice. Both pieces
    are judged as one session, nothing of A is dropped (the second piece replaced the first before), and the
    problem is named."""
    world = _world(sessions=2, turns=4)
    a, b = world.order
    for r in world.records:
        r["user"] = "u1"
    first_a = [r for r in world.records if r["session"] == a][:3]
    rest = [r for r in world.records if r not in first_a and r["session"] == a]
    world.records[:] = first_a + [r for r in world.records if r["session"] == b] + rest
    summary = _audit(tmp_path, world)
    assert summary["anomalies"] == {} and summary["turns"]["total"] == 8 and summary["sessions"] == 2
    assert any(f"session {a}'s lines are not together" in p for p in summary["problems"])


def test_a_journal_shard_whose_name_is_not_utf8_is_named_and_the_tables_are_written_as_a_set(tmp_path):
    """A shard named with a byte that is not UTF-8, holding a bad line: the problem that names it crashed the
    summary's write (a lone surrogate), after the new tables had replaced the old ones beside the old verdict.
    Now the name shows the byte as \\xff, and the tables are replaced together, the verdict last."""
    import os

    world = _world(sessions=2, turns=2)
    summary = _audit(tmp_path, world)
    assert summary["verdict"]["result"] == PASS
    shard = os.path.join(os.fsencode(tmp_path / "journal"), b"local-\xff.jsonl")
    with open(shard, "wb") as fh:
        fh.write(b"garbage\n")
    summary = audit_run(tmp_path)
    assert summary["verdict"]["result"] == FAIL and summary["observed"]["unreadable"]["count"] == 1
    assert any("local-\\xff.jsonl:1: " in p for p in summary["problems"]), summary["problems"]
    assert json.loads((tmp_path / "audit" / "summary.json").read_text())["verdict"]["result"] == FAIL
    assert not list((tmp_path / "audit").glob("*.tmp"))


@pytest.mark.parametrize("sent", [0.0, 1.9e9, 9e10])
def test_a_turn_dated_years_away_is_bad_input_not_gigabytes_of_windows(sent, tmp_path, capsys):
    """sent = 0 (1970) or 2030 is a valid journal time, and the per-window tables covered every window between
    it and the run: a MemoryError (60 GB) or the machine's swap. Now exit 2 naming the span and what to look for."""
    from oracle.audit_cli import main

    world = _world(sessions=2, turns=2)
    record = world.records[-1]
    record["sent"], record["received"] = sent, sent + 0.1
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "some turn's sent or received time lies far from the others" in err
    assert not (tmp_path / "audit" / "summary.json").exists()


@pytest.mark.parametrize("damage", ["garbage-recover", "applied-at-0", "recovered-in-4000"])
def test_a_damaged_chaos_timeline_never_excuses_failed_requests(damage, tmp_path, capsys):
    """Refused turns no fault explains fail the strict verdict. A chaos.jsonl whose recover line is garbage (the
    fault then lasts to the end), or whose fault lies decades from the run, excused every one of them: PASS.
    Now the audit stops on it, exit 2, naming the line or the fault."""
    from oracle.audit_cli import main

    world = build_world([[TurnSpec("chatter", "ok"), TurnSpec("chatter", "fail")] for _ in range(3)], seed=2)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    first = min(r["sent"] for r in world.records)
    apply = {"fault": "f1#0", "kind": "kill", "target": "bot", "instance": "bot-1", "event": "apply",
             "time": first + 1000, "outcome": "ok"}
    recover = {**apply, "event": "recover"}
    assert main([str(tmp_path)]) == 1 and "errors" in capsys.readouterr().out  # no fault: the refusals fail it
    lines = {"garbage-recover": [json.dumps({**apply, "time": first - 1}), "{garbage"],
             "applied-at-0": [json.dumps({**apply, "time": 0.0})],
             "recovered-in-4000": [json.dumps({**apply, "time": first - 1}),
                                   json.dumps({**recover, "time": 6.4e10})]}[damage]
    (tmp_path / "chaos.jsonl").write_text("\n".join(lines) + "\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "chaos.jsonl" in err and ("repair the line" in err or "lies far outside the run's turns" in err), err


@pytest.mark.parametrize("field", ["turn", "outcome", "sent"])
def test_a_journal_line_without_a_required_field_is_unreadable_not_a_default(field, tmp_path):
    """A line with its "turn" deleted decoded as turn 0 (then "journaled twice", its loss hidden: PASS); without
    "outcome" it was an indeterminate turn, whose loss nothing counts. A line lacking a required field is not a
    turn: unreadable, named by file and line, and the strict verdict fails."""
    world = _world(sessions=2, turns=3)
    world.records[4].pop(field)
    summary = _audit(tmp_path, world)
    assert summary["observed"]["unreadable"]["count"] == 1 and summary["verdict"]["result"] == FAIL
    assert any(f"local-0.jsonl:5: missing field {field!r}" in p for p in summary["problems"]), summary["problems"]


@pytest.mark.parametrize("damage", ["garbage-recover", "applied-at-0"])
def test_the_online_verdict_refuses_a_damaged_chaos_timeline_too(damage, tmp_path):
    """A run with no store audited (``--no-audit``, or no ``--store-url``) is judged from the journal alone: its
    errors gate trusted chaos.jsonl as it was, so a garbage recover line excused every refused turn (PASS).
    Now it stops as the audit does (TimelineError: exit 2 at the end of a Locust run)."""
    from oracle.audit import journal_verdict
    from oracle.timeline import TimelineError

    world = build_world([[TurnSpec("chatter", "ok"), TurnSpec("chatter", "fail")] for _ in range(3)], seed=2)
    write_journal(tmp_path, world.records)
    first = min(r["sent"] for r in world.records)
    assert journal_verdict(tmp_path)["verdict"]["result"] == FAIL  # no fault: the refusals fail it
    apply = {"fault": "f1#0", "kind": "kill", "target": "bot", "instance": "bot-1", "event": "apply",
             "time": first - 1, "outcome": "ok"}
    lines = {"garbage-recover": [json.dumps(apply), "{garbage"], "applied-at-0": [json.dumps({**apply, "time": 0.0})]}
    (tmp_path / "chaos.jsonl").write_text("\n".join(lines[damage]) + "\n")
    with pytest.raises(TimelineError, match="chaos.jsonl"):
        journal_verdict(tmp_path)


@pytest.mark.parametrize("damage", ["a-session-twice", "journal-lost-a-session"])
def test_a_snapshot_that_disagrees_with_the_journal_is_refused(damage, tmp_path):
    """A session's line twice in the snapshot (the last one silently won: a gone copy before the real one
    passed, after it failed), or snapshot sessions the journal no longer has (they were silently skipped, and
    the re-audit passed on what was left): the re-audit stops, naming the file."""
    from oracle.snapshot import SnapshotError

    world = _world(sessions=3, turns=2)
    _audit(tmp_path, world)
    part = next(p for p in sorted((tmp_path / "store").glob("sessions*.jsonl")) if p.read_bytes())
    lines = part.read_bytes().splitlines(keepends=True)
    if damage == "a-session-twice":
        gone = json.loads(lines[0]) | {"exists": False, "entries": []}
        part.write_bytes(json.dumps(gone).encode() + b"\n" + b"".join(lines))
        match = "twice|no journaled session asked for"
    else:
        session = json.loads(lines[0])["session"]
        write_journal(tmp_path, [r for r in world.records if r["session"] != session])
        (tmp_path / "audit" / "summary.json").unlink()  # else the shrunk journal is refused first (JournalError)
        match = "no journaled session asked for"
    with pytest.raises(SnapshotError, match=match):
        audit_run(tmp_path)


def test_a_failed_heal_ends_no_fault_and_a_fault_never_healed_fails_the_run(tmp_path, capsys):
    """A recover that errored (its port still taken) closed the fault's interval, so the requests that failed
    while the target stayed down were no fault's, and a correct bot failed; a fault no recover ever healed
    left a broken stack behind a PASS. Now the interval runs to the first recover that succeeded, and a fault
    never healed fails the verdict, saying which."""
    from oracle.audit_cli import main
    from oracle.timeline import load_faults

    world = build_world([[TurnSpec("chatter", "ok"), TurnSpec("chatter", "fail")] for _ in range(3)], seed=2)
    first = min(r["sent"] for r in world.records)
    last = max(r["received"] or r["sent"] for r in world.records)
    later = build_world([[TurnSpec("chatter", "ok")] * 4], start=last + 100, seed=3)  # quiet turns, after it
    world.records += later.records
    world.stored.update(later.stored)
    world.order += later.order
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    apply = {"fault": "f1#0", "kind": "kill", "target": "bot", "instance": "bot-2", "event": "apply",
             "time": first - 1, "outcome": "ok"}
    failed = {**apply, "event": "recover", "time": first, "outcome": "error", "error": "port taken", "via": "schedule"}
    healed = {**apply, "event": "recover", "time": last + 1, "via": "test_stop"}
    (tmp_path / "chaos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (apply, failed, healed)))
    assert [(f.start, f.end, f.via) for f in load_faults(tmp_path)] == [(first - 1, last + 1, "test_stop")]
    assert main([str(tmp_path)]) == 0  # the refusals happened while bot-2 was down: excused
    (tmp_path / "chaos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (apply, failed)))
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "chaos: fault f1#0 (kill on bot-2) was never healed" in out


# ---- a plan that leaves no quiet time cannot excuse every failed request -----------------------------------

def _fails_every_other_turn(tmp_path):
    world = build_world([[TurnSpec("chatter", "ok"), TurnSpec("chatter", "fail")] * 3 for _ in range(4)], seed=4)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    return world, min(r["sent"] for r in world.records), max(r["received"] or r["sent"] for r in world.records)


@pytest.mark.parametrize("how", ["audit", "online"])
def test_faults_covering_the_whole_run_do_not_excuse_a_bot_that_fails_half_its_turns(how, tmp_path):
    """redis-client-kill every 4 s with a 5-s recovery margin overlaps every turn: the errors gate counted the
    failed requests of turns no fault overlapped, none, so a bot refusing half its turns PASSed (strict and
    lenient). With no quiet turn to measure on and requests failing, the verdict FAILs and says why."""
    from oracle.audit import journal_verdict

    _, first, last = _fails_every_other_turn(tmp_path)
    _timeline(tmp_path, "redis-client-kill", first - 1, last + 1)
    judge = (lambda gates: audit_run(tmp_path, gates=parse_gates(gates))) if how == "audit" else \
        (lambda gates: journal_verdict(tmp_path, parse_gates(gates)))
    for gates in ("strict", "lenient"):
        v = judge(gates)["verdict"]
        assert v["result"] == FAIL, v
        assert any(line.startswith("errors: not measured: the faults and their recovery margins overlapped 24 of 24 "
                                   "turns (100%), so the 12 failed request(s)") and "(5s unless `oracle audit "
                   "--recovery` says otherwise)" in line for line in v["failed"]), v["failed"]  # an option that exists
    assert judge("strict,errors=off")["verdict"]["result"] == PASS  # allowed by name


def test_faults_that_leave_quiet_turns_measure_the_errors_gate_there(tmp_path):
    """A fault over the first part of the run only: the refusals after it are measured (and fail the gate), the
    ones under it are excused; no "not measured" line."""
    world, first, last = _fails_every_other_turn(tmp_path)
    _timeline(tmp_path, "kill", first - 1, first + (last - first) / 4)
    summary = audit_run(tmp_path, recovery_s=0.0)
    observed = summary["observed"]["errors"]
    assert 0 < observed["total"] < 24 and observed["count"] > 0
    assert not any("not measured" in line for line in summary["verdict"]["failed"])


def test_a_verdict_evaluated_again_under_other_gates_keeps_what_no_limit_decides():
    """``compare --gate lenient`` evaluated the candidate's observations afresh: a run that acknowledged nothing,
    or left a fault never healed, came back PASS. The requirements of its own verdict stay; a gate turned off
    waives its own (no probe answered: probe_amnesia=off; no quiet turn: errors=off)."""
    from oracle.verdict import NO_PROBE_ANSWERED, NO_QUIET, NOTHING_ACKNOWLEDGED, of_summary, require_measured, \
        require_quiet

    observed = {"probe_amnesia": {"count": 0, "total": 0}, "errors": {"count": 0, "total": 0}}
    strict = parse_gates("strict")
    v = require_quiet(require_measured(evaluate(observed, strict), 0, 5, 0, strict), 7, 0, 0, 10, strict)
    assert v["failed"][0] == NOTHING_ACKNOWLEDGED and v["failed"][1].startswith(NO_QUIET.split("{")[0])
    summary = {"observed": observed, "verdict": v}
    again = of_summary(summary, parse_gates("lenient"))
    assert again["result"] == FAIL and again["failed"] == v["failed"]
    assert of_summary(summary, parse_gates("lenient,errors=off"))["failed"] == [NOTHING_ACKNOWLEDGED]
    answered = require_measured(evaluate(observed, strict), 3, 5, 0, strict)
    assert answered["failed"] == [NO_PROBE_ANSWERED.format(sent=5)]
    assert of_summary({"observed": observed, "verdict": answered}, parse_gates("probe_amnesia=off"))["result"] == PASS


def test_a_summary_of_a_journal_that_changed_since_is_no_verdict(tmp_path, capsys):
    """`oracle audit` run while the load went on PASSes what was journaled so far; the run then stopped with no
    verdict of its own, and compare, trend and report took the mid-run PASS as the run's verdict (exit 0). An
    audit/ left in a reused run folder did the same. A summary records the size of the journal it judged."""
    from oracle import compare, report, trend

    world = build_world(simple_specs(4), seed=3)
    base, cand = tmp_path / "base", tmp_path / "cand"
    for run in (base, cand):
        write_journal(run, world.records)
        write_snapshot(run, world)
        audit_run(run, gates=parse_gates("lenient,errors=off"))
    assert compare.main([str(base), str(cand)]) in (0, 1)  # a verdict
    with open(next((cand / "journal").glob("*.jsonl")), "a") as shard:
        shard.write(json.dumps({**world.records[0], "turn": 99}) + "\n")  # the run went on after the audit
    capsys.readouterr()
    assert compare.main([str(base), str(cand)]) == 2
    assert trend.main([str(base), str(cand)]) == 2
    assert report.main([str(cand)]) == 2
    said = capsys.readouterr()
    assert "the journal has grown since this audit" in said.out + said.err
    audit_run(cand)  # audited again: the verdict of the journal as it is
    assert compare.main([str(base), str(cand)]) in (0, 1)


@pytest.mark.parametrize("where", ["journal/local-9.jsonl", "workers/worker-x.jsonl"])
def test_another_runs_journal_in_the_folder_is_never_judged_with_this_one(tmp_path, where, capsys):
    """Another run's shard copied into journal/ (or workers/, read as a worker's copy of a shard this run never
    had) was judged with this run's turns, silently: a dead bot's run could PASS on them. Exit 2 naming both."""
    from oracle import audit_cli

    world, other = build_world(simple_specs(3), seed=3), build_world(simple_specs(3), seed=4)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    (tmp_path / where).parent.mkdir(exist_ok=True)
    (tmp_path / where).write_text("".join(json.dumps({**r, "run": "last-night"}) + "\n" for r in other.records))
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "the journal holds more than one run" in err and f"{where} is run 'last-night'" in err


def test_a_journal_of_another_run_than_run_json_s_is_never_judged_live(tmp_path, capsys, redis_server):
    """Run A's journal in run B's folder (B's run.json): compared with each other its shards agreed, so a live
    audit judged A's turns against B's store and chaos, PASSed, and replaced B's snapshot and summary (input hunt
    10). Exit 2 naming both runs; nothing replaced."""
    from oracle import audit_cli

    world = build_world(simple_specs(3), seed=3)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    snapshot = (tmp_path / "store" / "meta.json").read_text()
    (tmp_path / "run.json").write_text(json.dumps({"run": "B", "start": 1.0, "end": 2.0}))
    assert audit_cli.main([str(tmp_path), "--store-url", redis_server.url, "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert f"is run {world.records[0]['run']!r}, but {tmp_path / 'run.json'} is run 'B'" in err, err
    assert not (tmp_path / "audit" / "summary.json").exists()
    assert (tmp_path / "store" / "meta.json").read_text() == snapshot


def test_a_chaos_plan_that_applied_no_fault_is_said(tmp_path, capsys):
    """A plan whose faults were all due after the load (`kill at 1000s`, `-t 6s`) gave an unqualified PASS."""
    from oracle import audit_cli

    world = build_world(simple_specs(3), seed=3)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    (tmp_path / "run.json").write_text(json.dumps({"run": RUN, "plan": "plans/nightly.yaml", "start": 1.0}))
    audit_cli.main([str(tmp_path), "--jobs", "1"])
    said = "chaos: the plan plans/nightly.yaml applied no fault during the run"
    assert said in capsys.readouterr().out
    assert any(p.startswith(said) for p in json.loads((tmp_path / "audit" / "summary.json").read_text())["problems"])


def test_a_chaos_run_whose_faults_did_not_apply_is_no_pass(tmp_path, capsys):
    """bot-2 was down before the run and the plan killed bot-2: the Locust run PASSed with two warnings, exit 0,
    while `python -m chaos run` of the same plan exits 1 ("this run tested less than its plan") (verdict hunt 10).
    An occurrence the plan's own rules skipped (max_concurrent, an instance under another fault) is no failure."""
    from oracle import audit_cli

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok")] for _ in range(3)], seed=3)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    start = min(r["sent"] for r in world.records)
    (tmp_path / "run.json").write_text(json.dumps({"run": world.records[0]["run"], "plan": "plan.yaml",
                                                   "start": start}))
    skipped = {"fault": "k2#0", "kind": "kill", "target": "bot", "instance": "bot", "backend": "local",
               "event": "apply", "time": start + 0.5, "outcome": "error",
               "error": "skipped: every instance of the target is already under a fault"}
    (tmp_path / "chaos.jsonl").write_text(json.dumps(skipped) + "\n")
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 0
    failed = {**skipped, "fault": "k1#0", "instance": "bot-2", "target": "bot-2",
              "error": "NotApplied: bot-2 is not running (no process)"}
    (tmp_path / "chaos.jsonl").write_text(json.dumps(skipped) + "\n" + json.dumps(failed) + "\n")
    capsys.readouterr()
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 1
    out = capsys.readouterr().out
    assert "chaos: 1 fault occurrence(s) of the plan did not apply (first: k1#0 (kill on bot-2): NotApplied" in out, out
    summary = json.loads((tmp_path / "audit" / "summary.json").read_text())
    assert summary["verdict"]["result"] == "fail"


def test_a_second_audit_of_the_same_run_at_once_stops_saying_so(tmp_path, capsys):
    """Two `oracle audit` of one folder at once: the second failed on the first's half-written files ("cannot read
    store.reading/meta.json"). The audit holds the folder's lock; the second is exit 2 and says why."""
    from contracts.runfolder import RunFolder
    from oracle import audit_cli

    world = build_world(simple_specs(3), seed=3)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    with RunFolder(tmp_path).audit_lock():  # the first audit, still running
        assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 2
        assert "another audit of this run is running" in capsys.readouterr().err
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) in (0, 1)  # once it is done


def test_a_reply_written_after_the_next_turn_is_a_reorder(tmp_path):
    """A bot writing its reply in a background task (FastAPI BackgroundTasks, 0.4 s late) stored Q0 Q1 A0 ...: the
    client had A0 before it sent Q1, so Q1 was answered without it. Every reply was stored after its turn, so
    nothing was found: PASS. A burst's turns overlap in time: their replies may be stored either way."""
    world = _world(sessions=1, turns=4)
    (s,) = world.order
    stored = world.stored[s]
    a0 = next(i for i, (t, m) in enumerate(stored) if t == 0 and m["type"] == "ai")
    q1 = next(i for i, (t, m) in enumerate(stored) if t == 1 and m["type"] == "human")
    stored.insert(q1, stored.pop(a0))  # Q0 Q1 A0 A1 ...
    summary = _audit(tmp_path, world)
    assert summary["anomalies"] == {"reordered": 1} and summary["verdict"]["result"] == FAIL
    (found,) = read_findings(tmp_path)
    assert found["evidence"]["replies_after_a_later_turn"] == [[0, 1]]
    assert "The reply to turn 0 reached the client before turn 1 was sent" in found["explanation"]
    burst = build_world([[TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"), TurnSpec("chatter", "ok")]],
                        seed=5)
    (b,) = burst.order
    stored = burst.stored[b]
    a0 = next(i for i, (t, m) in enumerate(stored) if t == 0 and m["type"] == "ai")
    q1 = next(i for i, (t, m) in enumerate(stored) if t == 1 and m["type"] == "human")
    if a0 < q1:
        stored.insert(q1, stored.pop(a0))  # the burst's Q0 Q1 A0: sent together, no order between them
    assert _audit(tmp_path / "burst", burst)["anomalies"] == {}


def test_a_reply_telling_a_value_another_locust_process_planted_is_crosstalk(tmp_path):
    """A reply leaking another user's fact ("I also have the postcode 8478-JF0T on file for another customer.") is
    judged online against the plants of the Locust process that sent it; one planted in another process was
    missed (--processes 2: about half the leaks), and the stored copy is this session's own reply. The audit
    checks every reply against the whole journal's plants."""
    world = build_world(simple_specs(4), seed=7)
    a, b = world.order[0], world.order[1]
    value = next(r["nonce"] for r in world.records if r["session"] == b and r["kind"] == "plant" and r["nonce"])
    leak = next(r for r in world.records if r["session"] == a and r["outcome"] == "ok" and r["kind"] == "chatter")
    told = f"Sure. I also have {value} on file for another customer."
    for turn, message in world.stored[a]:
        if turn == leak["turn"] and message["type"] == "ai" and message["data"]["content"] == leak["reply"]:
            message["data"]["content"] = told
    leak["reply"] = told
    write_journal(tmp_path, world.records, shards=2)  # two Locust processes
    write_snapshot(tmp_path, world)
    summary = audit_run(tmp_path, gates=parse_gates("strict,errors=off"))
    assert summary["anomalies"].get("crosstalk") == 1 and summary["verdict"]["result"] == FAIL
    (found,) = [f for f in read_findings(tmp_path) if f["class"] == "crosstalk"]
    assert (found["session"], found["turn"], found["evidence"]["source_session"]) == (a, leak["turn"], b)
    assert f"carries {value!r}, the value session {b}" in found["explanation"]


CUT_SHORT = {"user_exceptions": {"count": 2, "first": "KeyError: 'reply'"}}
STREAMED = {"streamed_replies": {"count": 40, "first": '{"type": "token", "reply": "Note"}'}}


@pytest.mark.parametrize("forgot,acknowledged,run,code,untrusted", [
    (0, 10, {}, 0, False),
    (0, 10, CUT_SHORT, 3, True),
    (1, 10, CUT_SHORT, 1, False),  # a finding stands, cut short or not
    (0, 0, {"workers_lost": {"all": True, "count": 2}}, 3, True),  # measured nothing: it was cut short
    (0, 0, {}, 2, False),
    (1, 10, STREAMED, 3, True),  # each turn took a piece of a streamed answer: the FAIL may be goldfish's misreading
    (1, 10, {"streamed_replies": "junk"}, 3, True),  # damaged: it said such frames came
    (0, 10, STREAMED, 0, False),  # a PASS stays a PASS: each turn's frame held the reply, and recall passed on it
    (0, 0, STREAMED, 2, False),
])
def test_a_verdict_of_a_run_cut_short_is_trusted_only_when_it_found_something(forgot, acknowledged, run, code,
                                                                               untrusted):
    gates = parse_gates(None)
    v = require_measured(evaluate({"probe_amnesia": {"count": forgot, "total": 5}}, gates), acknowledged, 5, 5, gates)
    got, why = trusted_exit_code(v, run)
    assert (got, why is not None) == (code, untrusted)


def test_a_re_audit_draws_the_report_again_so_its_badge_follows_the_new_verdict(tmp_path, capsys):
    """A run PASSed with `--gate probe_amnesia=off`; `oracle audit RUN` (strict) then wrote a FAIL summary.json, and
    report.html's badge still said PASS (verdict hunt 10). A re-audit draws the report again when there is one."""
    from oracle import audit_cli, report

    world = build_world([[TurnSpec("plant", "ok"), TurnSpec("probe", "ok", verdict_amnesia=True)]
                         for _ in range(3)], seed=8)
    write_journal(tmp_path, world.records)
    write_snapshot(tmp_path, world)
    assert audit_cli.main([str(tmp_path), "--gate", "strict,probe_amnesia=off", "--jobs", "1"]) == 0
    report.render(tmp_path)
    assert '<div class="badge ok">PASS</div>' in (tmp_path / "report.html").read_text()
    capsys.readouterr()
    assert audit_cli.main([str(tmp_path), "--jobs", "1"]) == 1
    assert f"report: {tmp_path / 'report.html'} (drawn again for this audit)" in capsys.readouterr().out
    assert '<div class="badge fail">FAIL</div>' in (tmp_path / "report.html").read_text()


def test_an_earlier_summary_that_acknowledged_nothing_still_measured_nothing():
    """The line's wording changed (a bot that answered every turn, its replies unread, was said unreachable: bot hunts
    15, 16); an earlier audit's summary says it the old way, and it is still exit 2, not a FAIL of 1."""
    from oracle.verdict import NOTHING_ACKNOWLEDGED, NOTHING_ACKNOWLEDGED_BEFORE, exit_code, unmeasured

    assert "answered without a reply the options read" in NOTHING_ACKNOWLEDGED
    for line in (NOTHING_ACKNOWLEDGED, NOTHING_ACKNOWLEDGED_BEFORE):
        v = {"result": FAIL, "failed": [line], "rules": []}
        assert unmeasured(v) == line and exit_code(v) == 2
