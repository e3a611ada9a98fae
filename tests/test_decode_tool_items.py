"""Tool calling as real SDKs store it is a correct history, not corrupt entries.

OpenAI chat completions (``message.model_dump()``) store an assistant entry with ``content: null`` beside
``tool_calls``; the OpenAI Agents SDK stores items with no role at all (reasoning, function_call,
function_call_output). Both were reported as corrupt (a correct bot FAILed); truly malformed entries stay corrupt.
"""
from __future__ import annotations

import json
import time

import pytest

from oracle.audit import audit_run
from oracle.decode import Shape, decode_session
from oracle.store import RawSession, StoreOptions
from support_oracle import TurnSpec, build_world, read_findings, write_journal

OPENAI = dict(direction="rpush", role_field="role", content_field="content")


def chat_completions(messages: list[dict]) -> list[dict]:
    """A LangChain-shaped history as an OpenAI tool-calling bot stores it: system, user, tool call, tool, answer."""
    out = [{"role": "system", "content": "You are a support bot."}]
    for m in messages:
        if m["type"] == "human":
            out.append({"role": "user", "content": m["data"]["content"]})
            continue
        out += [{"role": "assistant", "content": None, "refusal": None, "function_call": None,
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "lookup_account", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "ok"}'},
                {"role": "assistant", "content": m["data"]["content"], "tool_calls": None}]
    return out


def agents_items(messages: list[dict]) -> list[dict]:
    """The same as OpenAI Agents SDK session items: reasoning and function-call items carry a type, no role."""
    out = []
    for m in messages:
        if m["type"] == "human":
            out.append({"role": "user", "content": m["data"]["content"]})
            continue
        out += [{"id": "rs_1", "summary": [], "type": "reasoning"},
                {"type": "function_call", "name": "lookup_account", "arguments": "{}", "call_id": "c1", "id": "fc_1"},
                {"type": "function_call_output", "call_id": "c1", "output": '{"status": "ok"}'},
                {"id": "msg_1", "role": "assistant", "type": "message", "status": "completed",
                 "content": [{"type": "output_text", "text": m["data"]["content"], "annotations": []}]}]
    return out


@pytest.mark.parametrize("layout", [chat_completions, agents_items])
def test_a_tool_calling_bot_stored_by_its_sdk_passes(layout, tmp_path, redis_server):
    """824 stored entries 'that do not decode' (chat completions) and corrupt 60% (Agents SDK) failed a correct bot."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
              TurnSpec("probe", "ok")] for _ in range(4)]
    world = build_world(specs, start=time.time() - 60, seed=3)
    client = redis_server.client()
    for s in world.order:
        if s not in world.gone:
            client.rpush(f"chat:{s}", *[json.dumps(e) for e in layout([m for _, m in world.stored[s]])])
    write_journal(tmp_path, world.records)
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url, key_template="chat:{session}", **OPENAI))
    assert not read_findings(tmp_path), read_findings(tmp_path)[:3]
    assert summary["verdict"]["result"] == "pass", summary["verdict"]


def llama_blocks(messages: list[dict]) -> list[dict]:
    """The same as llama-index 0.14's RedisChatStore keeps a ChatMessage: its text in a list of blocks."""
    return [{"role": "user" if m["type"] == "human" else "assistant", "additional_kwargs": {},
             "blocks": [{"block_type": "text", "text": m["data"]["content"]}]} for m in messages]


def test_a_text_inside_a_list_is_found_by_its_number_in_the_path(tmp_path, redis_server):
    """--content-field blocks.0.text (bot hunt 8: llama_ok_blocks): the path stopped at the list, every entry was
    "wrong shape: no text", and a correct llama-index bot got no verdict (exit 2)."""
    specs = [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok"), TurnSpec("probe", "ok")] for _ in range(3)]
    world = build_world(specs, start=time.time() - 60, seed=4)
    client = redis_server.client()
    for s in world.order:
        if s not in world.gone:
            client.rpush(s, *[json.dumps(e) for e in llama_blocks([m for _, m in world.stored[s]])])
    write_journal(tmp_path, world.records)
    summary = audit_run(tmp_path, StoreOptions(url=redis_server.url, key_template="{session}", direction="rpush",
                                               role_field="role", content_field="blocks.0.text"))
    assert not read_findings(tmp_path), read_findings(tmp_path)[:3]
    assert summary["verdict"]["result"] == "pass", summary["verdict"]


def test_tool_call_entries_decode_as_messages_without_text_and_malformed_ones_stay_corrupt():
    entries = [json.dumps(e) for e in (
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},   # a message without text
        {"role": "assistant", "content": None, "function_call": {"name": "f"}},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},     # an item: another role
        {"role": "assistant", "content": None},                               # no text and no call: corrupt
        {"content": "hi"},                                                    # neither role nor type: corrupt
        {"type": 3, "content": "hi"})]                                        # a type that is no name: corrupt
    decoded = decode_session(RawSession("gf0", "k", True, None, entries), Shape(StoreOptions(**OPENAI)))
    assert decoded.messages == [(0, "assistant", ""), (1, "assistant", ""), (2, "other", "")]
    assert [c["index"] for c in decoded.corrupt] == [3, 4, 5]
    assert decoded.other_roles == {"function_call_output"}
