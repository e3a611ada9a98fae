"""A reply the client read before the bot finished it (a poll that took a message still being written, as OpenAI's
Assistants API lists a run's message while it is in progress): the stored answer begins with what the client got
and goes on. A correct bot FAILed '83% probe amnesia, 158 turns unanswered' (bot hunt 16); the audit now names the
unfinished read, and a FAIL with it is NOT TRUSTED, exit 3."""
from __future__ import annotations

import json

from oracle.verdict import of_summary, parse_gates, trusted_exit_code, untrusted
from support_oracle import build_world, oracle_main, read_findings, simple_specs, write_journal, write_snapshot


def run_with_half_read_replies(tmp_path, cut: bool):
    world = build_world(simple_specs(4), seed=11)
    first = world.order[0]
    for r in world.records:
        if cut and r["session"] == first and r["outcome"] == "ok" and len(r["reply"] or "") > 4:
            r["reply"] = r["reply"][:len(r["reply"]) // 2]  # the client's half; the store keeps the whole answer
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
