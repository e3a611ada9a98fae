"""A reply the client read before the bot finished it (a poll that took a message still being written, as OpenAI's
Assistants API lists a run's message while it is in progress): the stored answer begins with what the client got
and goes on. A correct bot FAILed '83% probe amnesia, 158 turns unanswered' (bot hunt 16); the audit now names the
unfinished read, and a FAIL with it is NOT TRUSTED, exit 3."""
from __future__ import annotations

import json
import re

from oracle.verdict import of_summary, parse_gates, trusted_exit_code, untrusted
from support_oracle import build_world, oracle_main, read_findings, simple_specs, write_journal, write_snapshot


def run_with_half_read_replies(tmp_path, cut: bool, misread=lambda reply: reply[:len(reply) // 2]):
    world = build_world(simple_specs(4), seed=11)
    first = world.order[0]
    for r in world.records:
        if cut and r["session"] == first and r["outcome"] == "ok" and len(r["reply"] or "") > 4:
            r["reply"] = misread(r["reply"])  # the client's half; the store keeps the whole answer
    run = tmp_path / "run"
    write_journal(run, world.records)
    write_snapshot(run, world)
    (run / "run.json").write_text(json.dumps({"options": {"gates": "probe_amnesia=50%,errors=off"}}))
    return run, first


def test_a_fail_on_replies_read_unfinished_is_not_trusted(tmp_path, capsys):
    run, first = run_with_half_read_replies(tmp_path, cut=True)
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 3, out
    assert "NOT TRUSTED — on " in out and "the client read answers before the bot finished them" in out, out
    summary = json.loads((run / "audit" / "summary.json").read_text())
    seen = summary["verdict"]["unfinished_replies"]
    assert seen["count"] >= 1 and seen["stored"].startswith(seen["reply"]) and len(seen["stored"]) > len(seen["reply"])
    again = of_summary(summary, parse_gates("lenient"))  # compare --gate: judged afresh, the replies still half read
    assert again["unfinished_replies"] == seen
    unanswered = [f for f in read_findings(run) if f["class"] == "unanswered"]
    assert unanswered and {f["session"] for f in unanswered} == {first}
    assert all("reply_unfinished" in f["evidence"] and "before the bot finished it" in f["explanation"]
               for f in unanswered)


def test_whole_replies_pass_and_a_pass_is_never_made_untrusted_by_it(tmp_path, capsys):
    run, _ = run_with_half_read_replies(tmp_path, cut=False)
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 0 and "NOT TRUSTED" not in out, out
    seen = {"unfinished_replies": {"count": 2, "reply": "Your order numb", "stored": "Your order number is 1."}}
    assert untrusted(0, {}, seen) is None and untrusted(1, {}, seen) is not None
    assert trusted_exit_code({"result": "pass", **seen}, {}) == (0, None)


def each_piece_4_times(reply: str) -> str:
    """A reply read from astream_events without --reply-where: every token once per level of the chain."""
    return "".join(piece * 4 for piece in re.findall(r"\S+\s*", reply))


def test_a_fail_on_replies_holding_each_streamed_piece_several_times_is_not_trusted(tmp_path, capsys):
    """A correct LangChain bot streaming astream_events as ndjson, read without --reply-where, FAILed '400 of 400
    unanswered' with the bot blamed (LangChain hunt 17): each reply was the stored answer, every piece 4 times."""
    run, first = run_with_half_read_replies(tmp_path, cut=True, misread=each_piece_4_times)
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 3, out
    assert "NOT TRUSTED — on " in out and "4 times over" in out and "--reply-where event=on_chat_model_stream" in out
    seen = json.loads((run / "audit" / "summary.json").read_text())["verdict"]["unfinished_replies"]
    assert seen["repeated"] == 4 and seen["count"] >= 1
    unanswered = [f for f in read_findings(run) if f["class"] == "unanswered"]
    assert unanswered and all(f["evidence"]["reply_repeated"] == 4 and "4 times over" in f["explanation"]
                              for f in unanswered)


def test_a_reply_that_only_shares_the_stored_answer_s_letters_is_no_repetition():
    from oracle.checkers import repeated_pieces

    stored = "Noted. You said: hello there."
    assert repeated_pieces(each_piece_4_times(stored), stored) == 4
    assert repeated_pieces(stored + stored[::-1], stored) == 2  # the same letters twice: the count is the rule
    assert repeated_pieces(each_piece_4_times(stored) + "!", stored) is None
    assert repeated_pieces(stored, stored) is None and repeated_pieces("okok", "ok") is None  # once; too short


def run_with_one_reply_read(tmp_path, reply: str, every: bool = True):
    """Every acknowledged turn's reply read as ``reply`` (the options read a field that is always the same, or an
    empty body beside a reply sent in a header), the store holding the real answers; or only one session's."""
    world = build_world(simple_specs(4), seed=11)
    first = world.order[0]
    for r in world.records:
        if r["outcome"] == "ok" and (every or r["session"] == first):
            r["reply"] = reply
    run = tmp_path / "run"
    write_journal(run, world.records)
    write_snapshot(run, world)
    return run


def test_a_fail_on_one_reply_read_for_every_turn_is_not_trusted(tmp_path, capsys):
    """A correct bot answering in a header, its body empty, read with --reply-format text (or --reply-field naming
    a field that is always 'ok') FAILed '100% unanswered, 100% probe amnesia', its storage blamed (API hunt 18)."""
    for reply in ("", "ok"):
        run = run_with_one_reply_read(tmp_path / repr(reply), reply)
        code, out, _ = oracle_main(capsys, "audit", run)
        assert code == 3, out
        assert f"the reply the client read was {reply!r} on every one of them" in out, out
        assert "point --reply-field / --reply-format at the answer" in out, out
        seen = json.loads((run / "audit" / "summary.json").read_text())["verdict"]["unfinished_replies"]
        assert seen["same"] is True and seen["reply"] == reply and seen["count"] >= 10


def test_one_session_answered_a_constant_text_is_a_fail_that_stands(tmp_path, capsys):
    """A bot that answered 'Sorry, try again' on some turns while storing another answer misled its user: a FAIL,
    not the options' misreading."""
    run = run_with_one_reply_read(tmp_path, "Sorry, try again.", every=False)
    code, out, _ = oracle_main(capsys, "audit", run)
    assert code == 1 and "NOT TRUSTED" not in out, out
