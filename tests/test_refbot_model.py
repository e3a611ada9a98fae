"""The reference bot's model and settings: pure functions, no servers."""
from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from refbot.config import Config, ConfigError, parse_mode
from refbot.memory import stored_message_class
from refbot.model import Model, answer, facts_in


def test_probe_answers_with_the_latest_value_stated_by_the_user():
    context = [HumanMessage("[gf00t0] My order number is 1111-AAAA."), AIMessage("Noted."),
               HumanMessage("[gf00t1] My order number is 2222-BBBB. My locker code is 9-9."),
               AIMessage('Noted. You said: "My order number is 3333-CCCC."')]  # an echo is not the user
    assert answer(context, "[gf00t2] What is my order number?") == "Your order number is 2222-BBBB."
    assert answer(context, "What is my locker code?") == "Your locker code is 9-9."
    assert answer(context, "What is my shoe size?") == "I don't know your shoe size."
    assert answer([], "What is my order number?") == "I don't know your order number."


def test_other_messages_are_acknowledged_with_a_short_quote():
    assert answer([], "[gf00t0] hello") == 'Noted. You said: "[gf00t0] hello"'
    long = "x" * 500
    assert len(answer([], long)) < 120


def test_facts_in_reads_only_user_entries():
    assert facts_in([AIMessage("My pin is 1234.")]) == {}
    assert facts_in([HumanMessage("My pin is 1234.")]) == {"pin": "1234"}


def test_model_thinks_without_blocking_the_event_loop():
    model = Model(think_ms=100, jitter_ms=0)

    async def many():
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.gather(*(model.respond([], "hi") for _ in range(10)))
        return loop.time() - start

    assert asyncio.run(many()) < 0.5  # ten 100 ms thinks overlap


@pytest.mark.parametrize("text, parsed", [("correct", ("correct", None)), ("window:3", ("window", 3)),
                                          ("ttl:60", ("ttl", 60)), ("ttl", ("ttl", None))])
def test_parse_mode(text, parsed):
    assert parse_mode(text) == parsed


@pytest.mark.parametrize("text, words", [("nope", "unknown memory mode"), ("correct:3", "takes no parameter"),
                                         ("window:x", "whole number"), ("ttl:0", "at least 1"),
                                         ("window:", "nothing follows ':'"), ("ttl:", "nothing follows ':'")])
def test_parse_mode_rejects(text, words):
    with pytest.raises(ConfigError, match=words):
        parse_mode(text)


def test_config_from_env():
    config = Config.from_env({"REFBOT_MODE": "ttl:7", "REFBOT_RELEASE": "v9", "REFBOT_THINK_MS": "0"})
    assert (config.mode_name, config.ttl, config.release, config.think_ms) == ("ttl", 7, "v9", 0.0)
    assert Config.from_env({"REFBOT_MODE": "window", "REFBOT_WINDOW": "5"}).window == 5
    with pytest.raises(ConfigError, match="REFBOT_THINK_MS"):
        Config.from_env({"REFBOT_THINK_MS": "soon"})


def test_each_release_pickles_its_own_class():
    assert stored_message_class("v1") is not stored_message_class("v2")
    assert stored_message_class("v1").__qualname__ == "StoredMessage_v1"
    assert stored_message_class("2024.05").__qualname__ == "StoredMessage_2024_05"
