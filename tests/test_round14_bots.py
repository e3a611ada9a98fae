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


def test_an_express_session_cookie_is_read_as_the_id_inside_its_signature():
    """express-session + connect-redis: the cookie is `s%3A<id>.<HMAC>`, the history at `sess:<id>`. The journaled
    id was the whole signed, percent-encoded value, which names no key: exit 2, only --reader could read it."""
    import base64
    import hashlib
    import hmac
    from urllib.parse import quote

    from locustfiles.contract import cookie_id

    sid = "Xq3-v_9ZkGmA1bC2dE3fG4hI5jK6lM7n"
    signature = base64.b64encode(hmac.new(b"keyboard cat", sid.encode(), hashlib.sha256).digest()).decode().rstrip("=")
    assert cookie_id(quote(f"s:{sid}.{signature}", safe="")) == sid
    assert cookie_id(f"s:{sid}.{signature}") == sid
    assert cookie_id('"r/B1+ZLQ=="') == "r/B1+ZLQ=="  # quoted: as before
    assert cookie_id("s:short.sig") == "s:short.sig"  # no HMAC there: the value as it is
    assert cookie_id("s%3Aabc") == "s%3Aabc"
