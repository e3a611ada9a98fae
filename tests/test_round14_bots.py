"""Bot hunt 14: stores of bots that issue their own session ids (--session-from) get the same advice as goldfish's."""
from __future__ import annotations

import json
import uuid

from oracle.redis_reader import sample_undecodable
from oracle.store import StoreOptions


def test_why_nothing_decodes_is_sampled_under_ids_the_bot_issued(redis_server):
    """One hash per conversation, one field per message id: exit 2 is right, but with --session-from the sample of
    why nothing decodes looked only at keys named by goldfish ids, found none, and the advice was the generic one
    about --role-field / --content-field, which were right. The bot's ids are sampled as its keys."""
    client = redis_server.client()
    client.flushall()
    for conversation in ("c-1", "c-2", "c-3"):
        client.hset(f"chat:{conversation}", mapping={
            uuid.uuid4().hex: json.dumps({"role": "user", "content": "[gf0000000000000001t0] hi"}),
            "title": "Support chat"})
    options = StoreOptions(url=redis_server.url, key_template="chat:{session}")
    assert sample_undecodable(options) == {}  # goldfish's own ids: none of these keys names one
    kinds = sample_undecodable(options, any_id=True)
    assert kinds and sum(kind["keys"] for kind in kinds.values()) == 3, kinds
