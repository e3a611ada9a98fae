"""--reply-format ai-sdk: a bot that answers in the Vercel AI SDK's data stream (``0:"piece"`` lines among
``f:``/``e:``/``d:`` parts), which neither ndjson (not JSON lines) nor text (the raw lines) can read."""
from __future__ import annotations

import pytest

from locustfiles.contract import ChatContract, NoReply
from test_contract_paths_cookies import run, verdict


def test_an_ai_sdk_data_stream_reply_is_its_text_parts_joined(tmp_path):
    """The bot streams each answer three characters a part: the reply is the parts' text, so the probes of a
    bot that remembers pass and the audit finds what it stored."""
    done = run(tmp_path, "ai-sdk", "--reply-format", "ai-sdk")
    assert done.returncode == 0 and verdict(done) == "pass", done.output[-3000:]
    probes = [r for r in done.records() if r["kind"] == "probe" and r["outcome"] == "ok"]
    assert probes and all(r["reply"] == f"Your {r['fact']} is {r['nonce']}." for r in probes)


def test_an_ai_sdk_stream_without_text_or_with_an_error_part_is_no_reply():
    """Said with what is wrong: an error part (3:"..."), a stream with no text part, a line of another shape."""
    contract = ChatContract(reply_format="ai-sdk")
    assert contract.reply(b'f:{"messageId":"m"}\n0:"Hel"\n0:"lo"\n2:[{"x":1}]\nd:{"finishReason":"stop"}\n') == "Hello"
    with pytest.raises(NoReply, match="the stream sent an error part: 'rate limited'"):
        contract.reply(b'0:"Hel"\n3:"rate limited"\n')
    with pytest.raises(NoReply, match=r'no text part \(0:"..."\) in the AI SDK data stream'):
        contract.reply(b'f:{"messageId":"m"}\nd:{"finishReason":"stop"}\n')
    with pytest.raises(NoReply, match="line 1 of the stream is not an AI SDK data-stream part"):
        contract.reply(b"data: {}\n")
    issued = ChatContract(reply_format="ai-sdk", session_from="reply:0.chatId")
    assert issued.issued_session(b'0:"Hi"\n2:[{"chatId":"c-7"}]\n') == "c-7"  # an id in a data part
