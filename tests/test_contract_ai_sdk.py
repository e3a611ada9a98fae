"""--reply-format ai-sdk: a bot that answers in the Vercel AI SDK's data stream (``0:"piece"`` lines among
``f:``/``e:``/``d:`` parts), which neither ndjson (not JSON lines) nor text (the raw lines) can read."""
from __future__ import annotations

import json

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


def test_reply_where_keeps_the_model_s_pieces_of_a_langserve_event_stream(tmp_path):
    """LangServe's /stream_events sends each token once per level of the chain: --reply-field data.chunk.content
    alone reads every answer three times over, so a bot that remembers fails as unanswered, which is said NOT TRUSTED
    (exit 3) naming the option (LangChain hunt 17: it was a plain FAIL blaming the bot);
    --reply-where event=on_chat_model_stream keeps the model's pieces, and it passes."""
    options = ("--reply-format", "sse", "--reply-field", "data.chunk.content")
    garbled = run(tmp_path / "garbled", "stream-events", *options)
    assert garbled.returncode == 3 and verdict(garbled) == "fail", garbled.output[-3000:]
    assert "3 times over" in garbled.output and "--reply-where event=on_chat_model_stream" in garbled.output
    assert any(r["reply"] == "NotNotNoted.ed.ed." for r in garbled.records() if r["outcome"] == "ok")
    kept = run(tmp_path / "kept", "stream-events", *options, "--reply-where", "event=on_chat_model_stream")
    assert kept.returncode == 0 and verdict(kept) == "pass", kept.output[-3000:]
    probes = [r for r in kept.records() if r["kind"] == "probe" and r["outcome"] == "ok"]
    assert probes and all(r["reply"] == f"Your {r['fact']} is {r['nonce']}." for r in probes)


def test_reply_where_picks_pieces_or_items_and_says_when_none_is_kept():
    """A stream's pieces (OpenAI Responses' typed events), the items at a * (a bot answering with its new
    messages, a tool's among them), a JSON value written as JSON (true); none kept is NoReply naming the option."""
    responses = ChatContract(reply_format="sse", reply_field="delta", reply_where="type=response.output_text.delta")
    stream = b"".join(b"event: %s\ndata: %s\n\n" % (kind.encode(), json.dumps(data).encode()) for kind, data in [
        ("response.created", {"type": "response.created", "response": {"id": "r"}}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hel"}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "lo"}),
        ("response.output_text.done", {"type": "response.output_text.done", "text": "Hello", "delta": "Hello"})])
    assert responses.reply(stream) == "Hello"
    items = ChatContract(reply_field="messages.*.content", reply_where="role=assistant")
    assert items.reply(b'{"messages": [{"role": "tool", "content": "42"}, {"role": "assistant", "content": "Hi"}]}') \
        == "Hi"
    gemini = ChatContract(reply_field="candidates.0.content.parts.*.text", reply_where="thought!=true")
    assert gemini.reply(b'{"candidates": [{"content": {"parts": [{"text": "Let me think.", "thought": true}, '
                        b'{"text": "Your pin is 12."}]}}]}') == "Your pin is 12."  # its answer has no "thought"
    final = ChatContract(reply_format="ndjson", reply_field="text", reply_where="final=true")
    assert final.reply(b'{"text": "Hel", "final": false}\n{"text": "Hello", "final": true}\n') == "Hello"
    with pytest.raises(NoReply, match="no piece that --reply-where 'type=x' keeps of the stream's 4 has reply field"):
        ChatContract(reply_format="sse", reply_field="delta", reply_where="type=x").reply(stream)
    with pytest.raises(NoReply, match="in the items --reply-where 'role=bot' keeps"):
        ChatContract(reply_field="messages.*.content", reply_where="role=bot").reply(b'{"messages": []}')
