"""Proving a whole batch of stored sessions clean at C speed: the audit's fast path.

Almost every session of a healthy run is clean: the key exists, it holds exactly the
acknowledged turns' messages as they were sent, in turn order (a plant's with the value it
planted), each followed by its journaled reply, and nothing else. ``prove_clean`` checks that for a whole
batch with a few C-level list operations over all of its messages (msgspec decodes each entry to role and text, then lists
are compared), and only the sessions it cannot prove go through the exact decoder and
checkers. It is conservative: anything unusual (an undecodable or oddly shaped entry, a stored
``info`` or ``fail`` turn, a stranger's token, a user entry that is not the message sent (a message
merged into it, another user's appended, a context of other users' facts wrapped around it), ok turns
sent out of turn order) is just "not proven", and the exact path decides, so a proof
never changes a result (tests/test_oracle_fastpaths.py runs both ways on damaged worlds).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

from oracle.decode import ASSISTANT, USER, Shape, decode_elements
from contracts.journal import Turn, planted
from oracle.store import RawSession
from contracts.tokens import SESSION_RE

SENT, TURN, REPLY, MESSAGE, ROLE = (operator.attrgetter(name) for name in ("sent", "turn", "reply", "message",
                                                                          "role"))
MAX_TURN = 1_000_000  # a "[<session>t<n>]" prefix is exactly the token regex's first match below this


@dataclass(slots=True)
class BatchProof:
    clean: list       # per session: proven clean
    elements: list    # per session: its entries decoded to (role, content) structs, or None

    @property
    def decoded(self) -> list[bool]:
        """Per session: every entry decoded as a message (so it is valid JSON)."""
        return [e is not None for e in self.elements]


def prove_clean(batch: list[RawSession], journal: dict[str, list[Turn]], shape: Shape) -> BatchProof:
    clean = [False] * len(batch)
    decoded: list = [None] * len(batch)  # per session: its elements, or None
    if shape.decoder is None:
        return BatchProof(clean, decoded)
    roles: list = []
    texts: list = []
    want_replies: list = []
    want_messages: list = []
    want_prefixes: list = []
    candidates: list = []  # (batch index, first message, ok turns)
    plants: list = []      # (candidate, its user entry's place among the users, the value it planted)
    for i, raw in enumerate(batch):
        if not raw.exists or raw.type != "list":
            continue
        elements = decoded[i] = decode_elements(raw.entries, shape)
        turns = journal.get(raw.session)
        if elements is None or turns is None or not SESSION_RE.match(raw.session):
            continue
        ok = [t for t in turns if t.outcome == "ok"]
        if 2 * len(ok) != len(elements):
            continue
        sent = list(map(SENT, ok))
        numbers = list(map(TURN, ok))
        if ok and (sent != sorted(sent) or min(numbers) < 0 or max(numbers) >= MAX_TURN):
            continue
        plants += [(len(candidates), len(roles) // 2 + k, t.nonce) for k, t in enumerate(ok) if planted(t)]
        candidates.append((i, len(roles), len(ok)))
        roles += map(ROLE, elements)
        texts += map(shape.text_of, elements)
        want_replies += map(REPLY, ok)
        want_messages += map(MESSAGE, ok)
        want_prefixes += [f"[{raw.session}t{n}]" for n in numbers]
    if not candidates:
        return BatchProof(clean, decoded)
    kinds = list(map(shape.roles.get, roles))
    users, answers = kinds[0::2], kinds[1::2]
    user_texts, answer_texts = texts[0::2], texts[1::2]
    altered = {c for c, at, value in plants if not isinstance(user_texts[at], str)
               or value.lower() not in user_texts[at].lower()}  # a fact the store no longer holds
    if altered:
        candidates = [c for n, c in enumerate(candidates) if n not in altered]
    if users == [USER] * len(users) and answers == [ASSISTANT] * len(answers) and answer_texts == want_replies \
            and user_texts == want_messages and all(map(str.startswith, user_texts, want_prefixes)) and \
            _one_token_each(user_texts):
        for i, _, _ in candidates:
            clean[i] = True
        return BatchProof(clean, decoded)
    for i, first, count in candidates:  # some session is not clean: find which, one by one
        a, b = first // 2, first // 2 + count
        prefixes = want_prefixes[a:b]
        clean[i] = users[a:b] == [USER] * count and answers[a:b] == [ASSISTANT] * count and \
            answer_texts[a:b] == want_replies[a:b] and user_texts[a:b] == want_messages[a:b] and \
            all(map(str.startswith, user_texts[a:b], prefixes)) and _one_token_each(user_texts[a:b])
    return BatchProof(clean, decoded)


def _one_token_each(user_texts: list) -> bool:
    """No user text holds a token after the one it starts with (each holds "gf" once: a token is "gf" + hex, so
    a text that holds "gf" in another word is not proven either, and the exact path decides). The texts all start
    with their token, so the whole batch holds "gf" once per text exactly when each does; the separator makes no
    "gf" across two texts."""
    return "\x00".join(user_texts).count("gf") == len(user_texts)
