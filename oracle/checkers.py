"""The checkers: small pure functions over (journal session, decoded stored session) -> findings.

Semantics follow Jepsen (Elle's list-append and the set-full checker): each session is a
list the user appends to. An ``ok`` turn was acknowledged, so its user entry must be stored
(else *lost*) and, since the bot answered, its reply too (else *unanswered*). A ``fail``
turn never left the client, so finding it stored is an anomaly (*aborted*, Elle's G1a
"aborted read"). An ``info`` turn may or may not have been applied: its presence or absence
is never an anomaly, only counted. Only user-role entries are the user's writes: assistant
entries often quote the user and are never read as writes (no false duplicates). A user entry's
first token names its turn; a later token of this session is that turn's message merged into the entry (a bot
folding a message that arrives while the previous one is in flight into its entry): the turn is stored, so not
*lost*, and a merge is no anomaly in itself (the turn's reply is still owed: *unanswered*; a ``fail`` turn so stored
is *aborted*; it has no place of its own, so it is never *duplicated* or *reordered* by it); a later token of
another session is *cross-talk*, as that token in an entry of its own. An assistant
entry, or one of another role (system, summary, tool), is cross-talk only when it carries another
session's token and is none of this session's own replies, nor of a session they quoted (another
session's answer, or a summary of other users' messages, filed here); an assistant entry with no
token that carries a value another session planted is too, once the journal confirms whose it is
(``check_stray_values``). A reply stored twice is judged by its text and counts
(``check_duplicated_replies``).

A finding is a dict: ``{"class", "session", "turn", "time", "evidence"}``; the explanation
is added later by ``oracle.explain``.
"""
from __future__ import annotations

import bisect
import html
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from oracle.decode import ASSISTANT, OTHER, USER, Decoded
from contracts import codec
from contracts.journal import planted
from oracle.history import Turn
from oracle.store import RawSession
from contracts.tokens import NONCE_RE, TOKEN_RE, value_spellings


@dataclass
class StoredView:
    """The stored session seen through its tokens."""
    own: list = field(default_factory=list)       # [(position, turn index, entry index)] own user entries in stored order
    foreign: list = field(default_factory=list)   # [(entry index, source session, source turn, text, role)]: others' tokens
    first_position: dict = field(default_factory=dict)  # turn -> position of its first stored copy
    copies: Counter = field(default_factory=Counter)    # turn -> stored copies
    corrupt_turns: set = field(default_factory=set)     # own turns whose only trace is a corrupt entry
    strays: list = field(default_factory=list)  # [(entry index, value, text, role)]: untokened entries, another's value
    merged: dict = field(default_factory=dict)  # turn -> (entry index, position): own turns stored only merged into
    #                                             another user entry (a later token of it), none of their own

    def entry_of(self, turn: int) -> int:
        """The index of the user entry that stores ``turn``: its first copy, else the entry it is merged into."""
        return self.own[self.first_position[turn]][2] if turn in self.first_position else self.merged[turn][0]


def view(session: str, decoded: Decoded, raw: RawSession, by_turn: dict[int, Turn] | None = None) -> StoredView:
    """Find the tokens of every user entry: the first names the entry's turn, own or other sessions' (cross-talk),
    unless it names another session's or a turn stored already and a later one names a turn of this session not
    stored yet (a RAG prompt, "Context: <earlier messages> Question: <the message>", stored as the user's entry:
    the entry is that turn's); the others are own turns
    merged into it, or other sessions' messages (cross-talk) (``_later_tokens``); and
    other sessions' tokens in assistant entries that are none of this session's own journaled replies, and in entries of other
    roles, of sessions none of them quoted (what the client received was judged online): another session's
    reply, or a reply quoting its message, or a system or summary entry built from other users' messages,
    written into this history. And entries carrying a value none of this session's turns planted, in either case
    (strays): an assistant's recall answer filed here, or a system entry, a user-role note or the user's own message
    wrapped in a context of "known facts" a shared extractor built (rootcause counts the values another session of
    the run planted)."""
    v = StoredView()
    search = TOKEN_RE.search
    position = 0
    merged: dict[int, tuple[int, int]] = {}
    untokened = None  # own message without its token -> turn: a cleaned copy stored beside the message
    as_user = _replies_as_user_entries(decoded, by_turn) if by_turn else ()
    for index, text in decoded.users:
        if index in as_user:  # this session's reply stored under the user's role: no write of the user's
            continue
        m = search(text)
        if m is None:  # not a goldfish message (no token): nothing to judge it by, unless it is a turn's message
            if by_turn and untokened is None:  # with the token taken out (a copy cleaned for embeddings), stored
                untokened = _untokened(by_turn)  # besides the message itself: a second copy of that turn
            turn = untokened.get(_words(text)) if untokened else None
            if turn is not None and turn in v.copies:
                v.own.append((position, turn, index))
                v.copies[turn] += 1
                position += 1
            continue
        source, turn = m.group(1), int(m.group(2))
        scan_from = m.end()
        if (source != session or turn in v.copies) and text.count("gf") > 1:
            own = next((k for k in TOKEN_RE.finditer(text, m.end())
                        if k.group(1) == session and int(k.group(2)) not in v.copies), None)
            if own is not None:  # messages quoted before the entry's own (stored turns, others'): a prompt's context
                m, source, turn, scan_from = own, session, int(own.group(2)), 0
        if source != session:
            v.foreign.append((index, source, turn, text, USER))
        else:
            v.own.append((position, turn, index))
            v.first_position.setdefault(turn, position)
            v.copies[turn] += 1
            position += 1
        if text.count("gf") > 1:  # more tokens than the first (the entry's own): _later_tokens
            _later_tokens(session, index, text, scan_from, source, turn, position - (source == session), by_turn, v,
                          merged)
    v.merged = {turn: at for turn, at in merged.items() if turn not in v.copies}  # else stored on its own too
    whole_blob = raw.type == "string" and not decoded.messages and len(decoded.corrupt) == 1
    for bad in decoded.corrupt:
        entry = raw.entries[bad["index"]] if (raw.type != "string" or whole_blob) and bad["index"] < len(raw.entries) \
            else None
        text = entry.decode("utf-8", "replace") if isinstance(entry, (bytes, bytearray)) else str(entry or "")
        turns = [int(m.group(2)) for m in TOKEN_RE.finditer(text) if m.group(1) == session]
        if turns:  # a list's entry is one message; a blob none of which reads (a pickled history) holds them all
            turns = sorted(set(turns)) if whole_blob else turns[:1]
            bad["turn"] = turns[0]
            bad["tied_by"] = f"the tokens of {len(turns)} of the session's turns in it" if whole_blob else "its token"
            v.corrupt_turns.update(turns)
    if by_turn and any("turn" not in bad for bad in decoded.corrupt):
        _tie_by_reply(decoded, by_turn, v)
    own_replies = {t.reply for t in by_turn.values() if t.reply} if by_turn else set()
    quoted = {m.group(1) for reply in own_replies if "gf" in reply for m in TOKEN_RE.finditer(reply)}
    moved = {(source, turn) for _, source, turn, _, _ in v.foreign}  # its answer with it is the same fault
    own_values = {t.nonce.upper() for t in by_turn.values() if t.nonce} if by_turn else set()
    foreign_at = {index for index, *_ in v.foreign}  # entries already judged another session's
    for index, role, text in decoded.messages:
        if text in own_replies or index in foreign_at:
            continue
        m = next((m for m in TOKEN_RE.finditer(text) if m.group(1) not in quoted and m.group(1) != session), None) \
            if "gf" in text and role != USER else None
        if m is not None:  # another's reply, or a system or summary entry built from other users' messages
            if (m.group(1), int(m.group(2))) not in moved:
                v.foreign.append((index, m.group(1), int(m.group(2)), text, role))
        elif "-" in text:  # a value no turn of this session planted: a recall answer ("... is 8846-QANV.") filed
            value = _other_value(text, own_values)  # here, or a note of known facts a shared extractor built, in
            if value is not None:  # any entry, the user's own message with its token included ("Context: ...")
                v.strays.append((index, value, text, role))
    return v


_WRAPPER = re.compile(r"(?:\s|<[^<>]{1,40}>|[\"'`*>#-])*")  # what may stand before a message stored wrapped: tags, quotes


def _replies_as_user_entries(decoded: Decoded, by_turn: dict[int, Turn]) -> set:
    """The user-role entries that are, as a whole, one of this session's journaled replies and none of its messages:
    a bot storing its answers under the user's role (feeding them back as the user's). The reply quotes the
    message, token and all, yet it is no second copy of the message, nor (with another session's token in it) that
    session's message: it is the answer, kept under the wrong role, so its turn is ``unanswered``."""
    replies = {t.reply for t in by_turn.values() if t.reply}
    if not replies:
        return set()
    said = {t.message for t in by_turn.values()}
    return {index for index, text in decoded.users if text in replies and text not in said}


def _other_value(text: str, own_values: set) -> str | None:
    """The first value in ``text`` (in either case: a bot may lowercase what it stores) that is not one of
    ``own_values`` (upper case), upper-cased as planted; None when there is none."""
    return next((n for n in NONCE_RE.findall(text.upper()) if n not in own_values), None)


def _untokened(by_turn: dict[int, Turn]) -> dict[str, int]:
    """Each journaled message with its [gf...tN] token taken out, as ``_words`` reads it -> its turn (a text two
    turns share: neither)."""
    out: dict[str, int | None] = {}
    for t in by_turn.values():
        text = _words(TOKEN_RE.sub("", t.message or "", count=1).replace("[]", "", 1))
        if text:
            out[text] = None if text in out else t.turn
    return {text: turn for text, turn in out.items() if turn is not None}


_LABEL = re.compile(r"^\s*[^\W\d_]{1,12}\s*:\s*")  # "Q: ", "User: ", "Human:" before a message
_NOT_WORD = re.compile(r"[\W_]+")


def _words(text: str) -> str:
    """A message as a copy cleaned of its token reads alike: read as ``_bare`` does, and without a short label
    before it ("Q: ", "User: ")."""
    return _bare(_LABEL.sub("", text, count=1))


def _bare(text: str) -> str:
    """Read as ``_plain`` does (case, white space, Unicode forms, markup), without punctuation or white space: a
    text and its copy a store normalised (NFKC, lower-cased, punctuation stripped) read alike."""
    return _NOT_WORD.sub("", _plain(text))


def _later_tokens(session: str, index: int, text: str, start: int, source: str, turn: int, position: int,
                  by_turn: dict[int, Turn] | None, v: StoredView, merged: dict) -> None:
    """The tokens of a user entry from ``start`` on, but the one naming the entry's turn (its first, or the first of
    a turn not stored yet after earlier ones that are: a prompt quoting its context, ``view``). One of this session's turn is
    that turn's message, stored merged into this entry (a bot that folds a message arriving while the previous one
    is in flight into its entry): the turn is stored, not lost (``merged``). One of another session's is that
    session's message written into this user's memory: cross-talk, as if it were an entry of its own (a bot that
    appends a "previous message" kept across sessions). Tokens the client itself sent in the entry's turn (its
    journaled message) are its words, not a write; neither is the entry's own token quoted again."""
    said = by_turn[turn].message if source == session and by_turn and turn in by_turn else None
    seen = {(source, turn)} | ({(m.group(1), int(m.group(2))) for m in TOKEN_RE.finditer(said)} if said else set())
    for m in TOKEN_RE.finditer(text, start):
        other, other_turn = m.group(1), int(m.group(2))
        if (other, other_turn) in seen:
            continue
        seen.add((other, other_turn))
        if other == session:
            merged.setdefault(other_turn, (index, position))
        else:
            v.foreign.append((index, other, other_turn, text, USER))


def _tie_by_reply(decoded: Decoded, by_turn: dict[int, Turn], v: StoredView) -> None:
    """A corrupt entry whose token is unreadable belongs to the acknowledged turn whose verbatim
    reply is stored right after it, when that turn's user entry is nowhere else: one fault (the
    entry was mangled), not two (corrupt here and lost there). Turns with the same reply ("I see.") are
    tied in turn order, one each."""
    replies: dict[str, list[int]] = {}
    for t in sorted(by_turn.values(), key=lambda t: t.turn):
        if t.outcome == "ok" and t.reply and t.turn not in v.copies and t.turn not in v.corrupt_turns \
                and t.turn not in v.merged:
            replies.setdefault(t.reply, []).append(t.turn)
    indices = [index for index, _, _ in decoded.messages]
    for bad in decoded.corrupt:
        if "turn" in bad:
            continue
        at = bisect.bisect_right(indices, bad["index"])
        if at < len(indices) and decoded.messages[at][1] == ASSISTANT:
            waiting = replies.get(decoded.messages[at][2])
            turn = waiting.pop(0) if waiting else None
            if turn is not None:
                bad["turn"] = turn
                bad["tied_by"] = "the verbatim reply stored right after it"
                v.corrupt_turns.add(turn)


def finding(cls: str, session: str | None, turn: int | None, time: float | None, **evidence) -> dict:
    return {"class": cls, "session": session, "turn": turn, "time": time, "evidence": evidence}


AFTER_END = "expired after its conversation"  # a gone key that is no finding (judge.Evidence.gone_class)


def check_vanished(session: str, turns: list[Turn], raw: RawSession, gone_class) -> list[dict]:
    """The whole session key is gone although the store acknowledged turns of it; ``gone_class``
    names the likely cause from the store's own evidence (evicted, expired or vanished)."""
    if raw.exists:
        return []
    ok = [t for t in turns if t.outcome == "ok"]
    if not ok:
        return []
    last = max(ok, key=lambda t: t.received or t.sent)
    cls = gone_class(last.received or last.sent, min(t.sent for t in turns))
    return [finding(cls, session, None, last.received or last.sent, key=raw.key, ok_turns=len(ok),
                    last_ok_turn=last.turn, ttl_in_use=cls == "expired", ok_turn_numbers=[t.turn for t in ok],
                    first_ok_sent=min(t.sent for t in ok))]


def longest_pause(turns: list[Turn]) -> float:
    """The longest wait in a conversation between a turn's answer (or its send, unanswered) and the next turn,
    of those its history is not known to have outlived: one after which a recall probe passed on a fact planted
    before it did not lose the history. (The TTL it is held against is a lower bound, up to two seconds under
    the real one: a correct bot's 4 s pause under a 5 s TTL, its probes passing after it, was `expired`.)"""
    ordered = sorted(turns, key=lambda t: t.sent)
    planted: set = set()
    pauses = []
    for i, (a, b) in enumerate(zip(ordered, ordered[1:])):
        if a.outcome == "ok" and a.fact is not None and (a.kind == "plant" or a.kind == "burst"):
            planted.add(a.fact)
        outlived = any(p.kind == "probe" and p.outcome == "ok" and p.verdict == "pass" and p.fact in planted
                       for p in ordered[i + 1:])
        if not outlived:
            pauses.append(b.sent - (a.received or a.sent))
    return max(pauses, default=0.0)


def expired_after_end(turns: list[Turn], exists: bool, gone_class) -> bool:
    """The session's key is gone (not ``exists``), only because it expired after the conversation ended (AFTER_END)."""
    ok = [t for t in turns if t.outcome == "ok"]
    if exists or not ok:
        return False
    last = max(ok, key=lambda t: t.received or t.sent)
    return gone_class(last.received or last.sent, min(t.sent for t in turns), longest_pause(turns)) == AFTER_END


def check_lost(session: str, turns: list[Turn], raw: RawSession, v: StoredView) -> list[dict]:
    """An acknowledged turn whose user entry is not in the store (the key still exists). ``oldest``: every lost turn
    of the session is older than every stored one (what a window memory that keeps the last N does)."""
    if not raw.exists:
        return []
    lost = [t for t in turns if t.outcome == "ok" and t.turn not in v.copies and t.turn not in v.corrupt_turns
            and t.turn not in v.merged]
    oldest = {"oldest": True} if lost and v.copies and _oldest(lost, [t for t in turns if t.turn in v.copies]) else {}
    return [finding("lost", session, t.turn, t.sent, token=t.token, key=raw.key,
                    stored_user_entries=len(v.own), sent=t.sent, received=t.received, **oldest,
                    **({} if _overlapped(t, turns) else {"alone": True})) for t in lost]


def _oldest(lost: list[Turn], kept: list[Turn]) -> bool:
    """Every lost turn is older than every kept one, or was in flight with it (a double-send has no order: a busy
    bot stores its second message first, and a window memory keeping the last N then keeps the later turn number and
    loses the earlier; the window warning went for every session: bot hunt 14 #8)."""
    first = min(t.turn for t in kept)
    if max(t.turn for t in lost) < first:
        return True
    return all(_overlapped(t, [k]) for t in lost for k in kept if k.turn < t.turn)


def _overlapped(t: Turn, turns: list[Turn]) -> bool:
    """Another turn of the session was in flight while ``t`` was (sent before its answer, answered after its send):
    only then can two requests of it race a read-modify-write (bot hunt 17)."""
    end = t.received if t.received is not None else float("inf")
    return any(o is not t and o.sent < end and (o.received if o.received is not None else float("inf")) > t.sent
               for o in turns)


def check_facts(session: str, by_turn: dict[int, Turn], decoded: Decoded, v: StoredView, key: str) -> list[dict]:
    """An acknowledged turn whose user entry (the one its token names, ``StoredView``) does not hold the message the
    user sent: a loss of that turn, as the store's only copy of it says something else (``altered``).

    A plant stored with its token but without the value it planted (truncated, redacted, summarised): the store
    kept the message and lost the fact, so a bot that reads the history back cannot recall it. Case does not
    matter (a bot may store messages lowercased). A plant stored only merged into another entry
    (``StoredView.merged``) must have its value in that entry.

    Any other text than the user sent (``_keeps_message``): a bot that keeps each message's token but stores
    "Thanks, that helps." in place of what the user wrote, or a plant's "My order number is X." as "My [redacted] is
    X.": the context the next turn's model reads says things the user never said. Judged on the message's text after
    its token, read as ``_bare`` reads it (case, white space, punctuation, Unicode forms, markup), by containment in
    any stored copy of the turn, or the entry it is merged into: what a correct bot wraps around the message (tags, a
    context or system prefix, a time stamp, another message merged into the entry) is not judged here, and other
    sessions' tokens and values in the entry are cross-talk's (``check_crosstalk``, ``check_stray_values``).
    Indeterminate and failed turns are not judged (stored or not, no anomaly; a failed one stored is aborted)."""
    texts = dict(decoded.users)
    holding: dict[int, list[int]] = {}  # turn -> the user entries holding it, the first copy first
    for _, turn, index in v.own:
        holding.setdefault(turn, []).append(index)
    for turn, (index, _) in v.merged.items():
        holding.setdefault(turn, []).append(index)
    out = []
    for turn, entries in holding.items():
        t = by_turn.get(turn)
        if t is None or t.outcome != "ok":
            continue
        text = texts.get(entries[0])
        if not isinstance(text, str):
            continue
        if planted(t) and not any(map(text.lower().__contains__, value_spellings(t.nonce.lower()))):
            out.append(finding("lost", session, turn, t.sent, token=t.token, key=key, fact=t.fact, value=t.nonce,
                               stored=text[:160], altered=True, sent=t.sent, received=t.received))
        elif not _keeps_message(t, [texts.get(index) for index in entries]):
            out.append(finding("lost", session, turn, t.sent, token=t.token, key=key, altered=True,
                               message=_shortened(t.message), stored=_shortened(text), sent=t.sent,
                               received=t.received, **({"fact": t.fact} if planted(t) else {})))
    return out


ALTERED_CHARS = 160  # of the sent message and the stored text, in an altered finding's evidence


def _shortened(text: str) -> str:
    return text if len(text) <= ALTERED_CHARS else text[:ALTERED_CHARS - 3] + "..."


def _keeps_message(t: Turn, stored: list) -> bool:
    """Some of ``stored`` (the texts of the user entries holding turn ``t``) holds ``t``'s message: verbatim, or its
    text after its token, both read as ``_bare`` reads them (case, runs of white space, punctuation, Unicode forms
    (NFKC), HTML entities and tags, Markdown marks: a store that normalises what it keeps), inside whatever the bot
    wrapped around it (``<user_input>`` tags, "Context: ..." before it, a time stamp, a second message merged into
    the entry, a multimodal content list's text parts joined). The turn's own token is taken out of both, wherever
    the bot put it. A message with no text besides its token (or none journaled) is held by any entry."""
    message = t.message
    texts = [s for s in stored if isinstance(s, str)]
    if not message or any(message in s for s in texts):
        return True
    token = (t.token or "").casefold()
    said = _said(message, token)
    return not said or any(said in _said(s, token) for s in texts)


def _said(text: str, token: str) -> str:
    """A message's words as ``_keeps_message`` compares them: read as ``_plain`` does, without the turn's token
    (``token``, case-folded), punctuation or white space."""
    plain = _plain(text)
    return _NOT_WORD.sub("", re.sub(rf"\b{re.escape(token)}\b", " ", plain) if token else plain)


def check_aborted(session: str, by_turn: dict[int, Turn], v: StoredView) -> list[dict]:
    """A turn that definitely never reached the bot (``fail``) is stored anyway, in an entry of its own or merged
    into another (``position``: of the entry holding it among the session's own user entries)."""
    where = [(turn, position, {}) for turn, position in v.first_position.items()] + \
        [(turn, position, {"merged_into_entry": index}) for turn, (index, position) in v.merged.items()]
    return [finding("aborted", session, turn, by_turn[turn].sent, token=by_turn[turn].token,
                    status=by_turn[turn].status, position=position, **merged)
            for turn, position, merged in where if turn in by_turn and by_turn[turn].outcome == "fail"]


MAX_CROSSTALK = 100  # findings per session: many sessions sharing one key would write each other's entries squared


def check_crosstalk(session: str, v: StoredView, journal: dict[str, list[Turn]], key: str) -> list[dict]:
    """A user entry in this session carries another session's token: the source is in the token.
    The first MAX_CROSSTALK are findings, the last of them counting the rest (``more``): sessions that
    share one key (ids the bot issued that collide) hold each other's entries, n squared of them.

    ``journal`` holds the sessions judged alongside this one; a source outside it is looked up
    once the whole journal is judged (``source_journaled`` None until then: oracle/rootcause.py)."""
    out = []
    for index, source, turn, text, role in v.foreign[:MAX_CROSSTALK]:
        source_turns = journal.get(source)
        source_turn = next((t for t in source_turns or () if t.turn == turn), None)
        out.append(finding("crosstalk", session, None, source_turn.sent if source_turn else None,
                           source_session=source, source_turn=turn, entry_index=index, key=key,
                           source_journaled=True if source_turns is not None else None, excerpt=text[:120],
                           **({"role": role} if role != USER else {})))
    if len(v.foreign) > MAX_CROSSTALK:
        out[-1]["evidence"]["more"] = {"entries": len(v.foreign) - MAX_CROSSTALK,
                                       "sessions": len({f[1] for f in v.foreign[MAX_CROSSTALK:]})}
    return out


def check_stray_values(session: str, v: StoredView, key: str) -> list[dict]:
    """An entry with no token that carries a value another session planted (its nonce: "Your phone number is
    8846-QANV."): that session's recall answer, or a note of facts built from shared state, written into this
    history. Which session planted it needs the whole journal, so the finding is ``pending`` until oracle/rootcause.py finds the plant; a value
    no turn of the run planted (an LLM's "1999-2000") is dropped there, and only a found one is counted."""
    return [finding("crosstalk", session, None, None, source_session=None, source_turn=None, source_value=value,
                    entry_index=index, key=key, source_journaled=None, excerpt=text[:120], role=role,
                    pending="the session that planted the value")
            for index, value, text, role in v.strays[:MAX_CROSSTALK]]


def check_leaked_replies(session: str, turns: list[Turn], key: str) -> list[dict]:
    """A reply the client was sent that carries a value no turn of this session planted (nor its own message
    said): another user's fact told to this one. The Locust process judges replies online against the plants it
    made itself; one planted in another Locust process (``--processes``, workers) was missed, and the stored copy
    of the reply is this session's own. ``pending`` like ``check_stray_values``: counted once rootcause finds the
    plant in the whole journal. Turns already judged cross-talk online are not judged twice."""
    own = {t.nonce.upper() for t in turns if t.nonce}
    out = []
    for t in turns:
        if t.outcome != "ok" or not t.reply or t.crosstalk or "-" not in t.reply:
            continue
        value = _other_value(t.reply, own | set(NONCE_RE.findall((t.message or "").upper())))
        if value is not None and len(out) < MAX_CROSSTALK:
            out.append(finding("crosstalk", session, t.turn, t.received, source_session=None, source_turn=None,
                               source_value=value, entry_index=None, key=key, source_journaled=None,
                               excerpt=t.reply[:120], role="reply", pending="the session that planted the value"))
    return out


def pending(f: dict) -> bool:
    """The finding waits for the whole run's journal (check_stray_values): it counts once rootcause confirms it."""
    return "pending" in f["evidence"]


def counted(findings: list[dict]) -> list[dict]:
    """The findings that count now: not those ``pending``."""
    return [f for f in findings if not pending(f)]


def check_duplicated(session: str, by_turn: dict[int, Turn], v: StoredView) -> list[dict]:
    """The same user entry stored more than once (no client resends a token)."""
    return [finding("duplicated", session, turn, by_turn[turn].sent if turn in by_turn else None,
                    copies=count, positions=[p for p, t, _ in v.own if t == turn],
                    outcome=by_turn[turn].outcome if turn in by_turn else None)
            for turn, count in v.copies.items() if count > 1]


def check_duplicated_replies(session: str, by_turn: dict[int, Turn], decoded: Decoded, v: StoredView) -> list[dict]:
    """An acknowledged turn's reply stored more than once: a reply appended on the write path and again in a
    callback, or a retried write, is the same bug as a user entry stored twice.

    Replies carry no token, so this judges by count, conservatively. A bot may answer several turns with the same
    text ("OK."): a reply is duplicated only when its copies (verbatim, or decorated: ``_as_journaled``), non-empty,
    outnumber the ok turns journaled with it by more than the entries that could legitimately share its text: one
    per turn the journal cannot vouch for (an info turn, or a fail turn stored anyway, may have any reply stored),
    and one per ok turn with no copy stored that no other assistant entry answers either (check_unanswered matches
    those by count: a footer bot's stored reply may equal another turn's). Each copy goes to the latest ok turn with that
    reply whose user entry precedes it (else the first such turn); turns holding two copies or more are the
    findings, at most the surplus of them. The answers to another session's messages stored here (a misroute,
    ``_replies_to_others``) are not this session's replies and are not counted, nor is what the bot stored before
    the first user entry once (a welcome stored at the thread's creation, which may be the text of a later reply)."""
    ok = sorted((t for t in by_turn.values() if t.outcome == "ok"), key=lambda t: t.turn)
    journaled = Counter(t.reply for t in ok)
    first_user = next((index for index, role, _ in decoded.messages if role == USER), None)
    theirs = _replies_to_others(decoded, v) | _welcome(decoded, first_user)
    as_sent = _as_journaled(decoded, theirs, ok, journaled)  # index -> the journaled reply the entry is
    answers = list(as_sent.values())
    stored = Counter(text for text in answers if text in journaled)
    if not any(stored[r] > n and (r or "").strip() for r, n in journaled.items()):
        return []
    unsure = sum(1 for t in by_turn.values() if t.outcome == "info" or
                 (t.outcome == "fail" and (t.turn in v.copies or t.turn in v.corrupt_turns or t.turn in v.merged)))
    unverbatim = sum(n - stored[r] for r, n in journaled.items() if n > stored[r])
    spare = sum(1 for text in answers if text not in journaled and text.strip())
    slack = unsure + max(0, unverbatim - spare)
    surplus = {r: stored[r] - n - slack for r, n in journaled.items() if stored[r] - n > slack and (r or "").strip()}
    if not surplus:
        return []
    latest = {r: next(t.turn for t in ok if t.reply == r) for r in surplus}
    turn_of_user = {index: turn for _, turn, index in v.own}
    copies: dict[int, list[int]] = {}
    for index, role, text in decoded.messages:
        if role == USER and index in turn_of_user:
            t = by_turn.get(turn_of_user[index])
            if t is not None and t.outcome == "ok" and t.reply in surplus:
                latest[t.reply] = t.turn
        elif role == ASSISTANT and as_sent.get(index) in surplus:
            copies.setdefault(latest[as_sent[index]], []).append(index)
    return [finding("duplicated", session, t.turn, t.sent, role="assistant", reply=t.reply[:120],
                    copies=len(copies[t.turn]), positions=copies[t.turn], outcome=t.outcome,
                    turns_with_this_reply=journaled[t.reply])
            for reply, extra in surplus.items()
            for t in [t for t in ok if t.reply == reply and len(copies.get(t.turn, ())) > 1][:extra]]


def _welcome(decoded: Decoded, first_user: int | None) -> set[int]:
    """The assistant entries before the first user entry, each text once: a welcome stored when the thread was made
    (one or several bubbles). Every copy beyond was excused too, so 100,000 copies of a reply written at the old end of
    a history PASSed (fuzz hunt 18)."""
    seen, out = set(), set()
    for index, role, text in decoded.messages:
        if first_user is None or index >= first_user:
            break
        said = text if isinstance(text, str) or text is None else repr(text)
        if role == ASSISTANT and said not in seen:
            seen.add(said)
            out.add(index)
    return out


def _as_journaled(decoded: Decoded, theirs: set, ok: list[Turn], journaled: Counter) -> dict[int, str]:
    """This session's assistant entries (index -> text), each read as the journaled reply it is: itself when stored
    verbatim, else the one distinct reply of an ok turn it holds whole and answers (``_answers``: a store that adds
    a time stamp, Markdown or a footer to what it keeps), so that a decorated reply stored twice counts as twice.
    A part of a reply is never read as the reply: a bot answering in several bubbles ("Let me check.", then the
    answer) stores each as an entry of its own, and each bubble is no copy. A text that is a reply word for word once
    case, punctuation and spaces are dropped (``_bare``: a store that normalises) is that reply. A text like two
    replies, or none, stays as it is."""
    out = {index: text for index, role, text in decoded.messages if role == ASSISTANT and index not in theirs}
    unlike = [i for i, text in out.items() if text not in journaled and (text or "").strip()]
    if not unlike:
        return out
    sent = {}
    for t in ok:
        if (t.reply or "").strip():
            sent.setdefault(t.reply, (_plain(t.reply), t))
    others = [plain for plain, _ in sent.values() if len(plain) >= OTHER_REPLY_CHARS]
    bare: dict[str, str] = {}  # each reply read as ``_bare``, only when a stored text is no decorated copy
    for index in unlike:
        stored = _plain(out[index])
        like = [reply for reply, (plain, t) in sent.items() if plain in stored and _answers(stored, plain, t, others)]
        if not like:  # a store that normalises what it keeps: the reply word for word (as check_unanswered reads it)
            words = _bare(out[index])
            if not bare:
                bare.update((reply, _bare(reply)) for reply in sent)
            like = [reply for reply in sent if words and bare[reply] == words]
        if len(like) == 1:
            out[index] = like[0]
    return out


def _replies_to_others(decoded: Decoded, v: StoredView) -> set:
    """The assistant entries that answer another session's message stored here: the entry right after a user entry
    whose first token is another session's (a misrouted turn, written with its answer under this key). That answer
    is the other turn's, part of the misroute (cross-talk, counted there), never a copy of this session's reply,
    whatever its text ("I see. How else can I help?"). A user entry of this session with another's token after its
    own (a "previous message" appended) is this session's: its reply stays this session's."""
    if not v.foreign:
        return set()
    own = {index for _, _, index in v.own}
    others = {index for index, _, _, _, role in v.foreign if role == USER and index not in own}
    messages = decoded.messages
    return {messages[i + 1][0] for i in range(len(messages) - 1)
            if messages[i][0] in others and messages[i][1] == USER and messages[i + 1][1] == ASSISTANT}


def with_duplicated_replies(duplicated: list[dict], replies: list[dict]) -> list[dict]:
    """A turn whose user entry and reply are both stored twice (the pair written again) is one fault: the user
    entry's finding carries the reply's copies, and the turn is counted once."""
    users = {f["turn"]: f for f in duplicated}
    for f in replies:
        if f["turn"] in users:
            users[f["turn"]]["evidence"].update(reply_copies=f["evidence"]["copies"],
                                                reply_positions=f["evidence"]["positions"])
        else:
            duplicated.append(f)
    return duplicated


def check_reordered(session: str, by_turn: dict[int, Turn], v: StoredView) -> list[dict]:
    """B stored before A although A was acknowledged before B was sent; evidence: the closest pair.

    Turns that overlapped in time (a burst) have no real-time order, so they cannot be
    reordered. When the stored order follows send times nothing can contradict it (fast path).
    """
    order = [(t, by_turn[t]) for t in sorted(v.first_position, key=v.first_position.get) if t in by_turn]
    if all(order[i][1].sent <= order[i + 1][1].sent for i in range(len(order) - 1)):
        return []
    best, pairs = None, 0
    for i, (b_turn, b) in enumerate(order):           # b stored earlier ...
        for j in range(i + 1, len(order)):
            a_turn, a = order[j]                      # ... a stored later
            if a.outcome == "ok" and a.received is not None and a.received < b.sent:
                pairs += 1
                key = (j - i, a_turn, b_turn)
                if best is None or key < best[0]:
                    best = (key, a, b, i, j)
    if best is None:
        return []
    _, a, b, i, j = best
    return [finding("reordered", session, b.turn, b.sent, earlier_turn=a.turn, later_turn=b.turn,
                    earlier_received=a.received, later_sent=b.sent, earlier_position=j, later_position=i,
                    contradicting_pairs=pairs)]


def check_merged_late(session: str, by_turn: dict[int, Turn], v: StoredView) -> list[dict]:
    """Turns stored only merged into an earlier turn's user entry though they were sent after that turn was
    answered: the history holds the later question before the earlier answer. Merging is a bot's way with a
    message that arrives while the previous one is in flight (``_later_tokens``); a bot that folded every message
    into one entry, its answers after them all, PASSed (bot hunt 10). One finding per session, as a reorder."""
    late = []
    for turn, (index, position) in sorted(v.merged.items()):
        host = v.own[position][1] if position < len(v.own) and v.own[position][2] == index else None
        a, b = by_turn.get(host), by_turn.get(turn)
        if a is not None and b is not None and b.outcome == "ok" and a.received is not None and b.sent >= a.received:
            late.append((turn, host, a, b))
    if not late:
        return []
    turn, host, a, b = late[0]
    return [finding("reordered", session, turn, b.sent, merged_into_turn=host, earlier_received=a.received,
                    later_sent=b.sent, merged_turns=[t for t, _, _, _ in late])]


def check_unanswered(session: str, by_turn: dict[int, Turn], decoded: Decoded,
                     v: StoredView) -> tuple[list[dict], list[int]]:
    """An acknowledged turn's user entry is stored but no assistant entry after it holds its reply.

    Matching walks from the newest entry back, giving each ok user entry a distinct later
    assistant entry: its journaled reply verbatim when stored so, else a later assistant entry
    that is no ok turn's verbatim reply and is like it (``like_reply``: one holds the other, as
    when an API adds a footer to what it returns or a store cuts it short), or is it word for word
    once punctuation is dropped too (``_worded``: a store that normalises what it keeps). Any other text is no
    answer: an agent's "Let me check my notes." stored with its tool call, a placeholder such as
    "(answer streamed to the client)", an entry with no text. Indeterminate
    turns never claim an assistant entry, so they cannot make an ok turn look unanswered. Returns
    (findings, misplaced): a turn whose verbatim reply is stored, unclaimed, *before* it is not
    unanswered but out of order (``check_session`` gives it to the reorder finding: one fault, one
    count). A user entry holding turns merged into it (``StoredView.merged``) claims a reply for each.
    """
    ok_stored = [t for t in v.first_position if t in by_turn and by_turn[t].outcome == "ok"]
    ok_merged = [t for t in v.merged if t in by_turn and by_turn[t].outcome == "ok"]
    if not ok_stored and not ok_merged:
        return [], []
    if not ok_merged and _each_reply_follows(ok_stored, by_turn, decoded, v):
        return [], []
    replies = Counter(by_turn[t].reply for t in ok_stored + ok_merged)
    first_index: dict[int, list[int]] = {}
    for t in list(v.first_position) + sorted(v.merged):
        first_index.setdefault(v.entry_of(t), []).append(t)
    others = [text for text in {_plain(r or "") for r in replies} if len(text) >= OTHER_REPLY_CHARS]
    seen: Counter = Counter()  # verbatim replies of ok turns after the walk's position, unclaimed
    spare: list[str] = []      # other assistant entries' texts after it, unclaimed, read alike (_plain)
    spare_texts: list[str] = []  # the same entries as stored, for ``_worded`` (read only when _plain finds none)
    words: dict[str, str] = {}   # stored text -> its ``_bare`` reading, each read once
    claimed: dict[str, list[Turn]] = {}  # verbatim reply -> the turns that claimed a stored copy of it
    as_user = {text: index for index, text in decoded.users if text in replies} if replies else {}  # its reply
    #                                     under the user's role (a bot feeding its answers back as the user's)
    tool_texts = decoded.tool_texts
    out = []
    nearest = None  # the text of the first assistant entry after the walk's position
    for index, role, text in reversed(decoded.messages):
        if role == ASSISTANT:
            nearest = text
            if not text and index in tool_texts:  # no text, its tool call's arguments hold this reply
                text = next((a for a in tool_texts[index] if a in replies), text)
            if text in replies:
                seen[text] += 1
            else:
                spare.append(_plain(text or ""))
                spare_texts.append(text or "")
            continue
        for turn in reversed(first_index.get(index, ()) if role == USER else ()):
            if turn not in by_turn or by_turn[turn].outcome != "ok":
                continue
            t = by_turn[turn]
            reply = None if seen[t.reply] > 0 else _plain(t.reply or "")
            like = None if reply is None else next((i for i, s in enumerate(spare) if _answers(s, reply, t, others)),
                                                   None)
            if like is None and reply is not None and spare:  # stored normalised: punctuation stripped
                like = _worded(spare_texts, t.reply or "", words)
            if seen[t.reply] > 0:
                seen[t.reply] -= 1
                claimed.setdefault(t.reply, []).append(t)
            elif t.reply and any(_overlap(t, o) for o in claimed.get(t.reply, ())):
                pass  # sent before a turn of the same reply was answered: a burst answered once, one copy for both
            elif like is not None:  # stored otherwise than it was sent (a footer the API adds, cut short, normalised)
                del spare[like], spare_texts[like]
            elif t.crosstalk and spare:  # the client got another session's reply (cross-talk, counted there): the
                del spare[-1], spare_texts[-1]  # entry after its question is its own answer (API hunt 18)
            else:
                whole = nearest if isinstance(nearest, str) and t.reply and len(nearest) > len(t.reply) \
                    and nearest.startswith(t.reply) else None  # the client read the answer before it was finished
                times = None if whole is not None else repeated_pieces(t.reply, nearest)
                out.append(finding("unanswered", session, turn, t.sent, token=t.token, reply=t.reply,
                                   matched_by="reply text, then count", assistant_entries_after=sum(seen.values()),
                                   stored_instead=spare_texts[-1][:120] if spare_texts else None,
                                   **({"reply_unfinished": whole[:120]} if whole is not None else {}),
                                   **({"reply_repeated": times, "stored_answer": nearest[:120]} if times else {}),
                                   **({"reply_stored_as_user_entry": as_user[t.reply]} if t.reply in as_user else {}),
                                   **({"other_roles": sorted(map(str, decoded.other_roles))[:5]}
                                      if decoded.other_roles else {})))
    out.reverse()
    misplaced = []
    for f in out:  # the walk has seen every assistant entry: what is left unclaimed lies before its turn
        reply = f["evidence"]["reply"]
        if seen[reply] > 0:
            seen[reply] -= 1
            misplaced.append(f["turn"])
    return [f for f in out if f["turn"] not in misplaced], misplaced


def _overlap(a: Turn, b: Turn) -> bool:
    """Two turns in flight at once (each sent before the other was answered): a burst, as ``check_reordered``
    reads it. A bot answering a double-sent message together with the one in flight sends both the same reply and
    stores it once after both user entries: that one copy answers both. Turns one after the other are answered
    one by one, each reply stored for its own turn."""
    return a.received is not None and b.received is not None and a.sent < b.received and b.sent < a.received


def _worded(texts: list[str], reply: str, words: dict[str, str]) -> int | None:
    """The index in ``texts`` of the first stored text that is ``reply`` word for word, both read as ``_bare``
    reads them (as the duplicate check reads a message and a copy of it cleaned for embeddings, ``_words``; a
    reply's leading "Note: " is its own, so no label is taken off): a store that normalises what it keeps (NFKC,
    lower-cased, punctuation stripped) keeps the reply. The whole reply, nothing more or less: a part of it (one
    bubble of several), or a text holding it and more, is no such copy. None when there is none, or when the
    reply has no word to read (an empty text is no answer). ``words`` caches each stored text's reading."""
    wanted = _bare(reply)
    if not wanted:
        return None
    for i, text in enumerate(texts):
        read = words.get(text)
        if read is None:
            read = words[text] = _bare(text)
        if read == wanted:
            return i
    return None


def like_reply(stored: str, reply: str) -> bool:
    """A stored assistant text that is this reply stored otherwise, once both are read alike (``_plain``): the same,
    or both empty (a bot that answers so); or the stored text holds most of the reply (half of it, or
    ``LIKE_MIN_CHARS``: an API that adds a footer to what it returns, a store that cuts a long answer), not a
    streamed reply's last or first piece ("help?", "Your "); or it holds the whole reply and no token besides (a
    wrapper, sources), not the prompt's earlier messages with the completion."""
    return _holds(_plain(stored), _plain(reply))


LIKE_MIN_CHARS = 40
OTHER_REPLY_CHARS = 8  # a shorter reply ("Noted.") may be part of any text


def _answers(stored: str, reply: str, t: Turn, others: list[str]) -> bool:
    """``_holds``, and the stored text keeps what the answer said: the value the turn's reply carried (a reply
    of several bubbles stored as its first, an acknowledgement without the recalled value, is not its answer),
    and no other reply of the session (a buffer of every reply so far, stored again each turn, is not). The
    tokens of the turn's own message may stand beside the reply (``_holds``' ``quoted``: a reasoning block or a
    {question, answer} object quoting the message it answers); and a short part of the reply that holds the value
    the turn's reply carried is its answer (``_recalls``: a recall answer stored without the footer, reasoning
    block or quoted question the API added to what it returned)."""
    value = (t.nonce or "").casefold()
    if not (_holds(stored, reply, _own_tokens(t)) or _recalls(stored, reply, value)):
        return False
    if value and value in reply and value not in stored:
        return False
    return not any(other in stored and other not in reply for other in others)


def _holds(stored: str, reply: str, quoted: frozenset = frozenset()) -> bool:
    """``like_reply`` of two texts already read alike (each spare text is read so once, not once per turn). A
    text holding the whole reply holds no token besides, but those in ``quoted`` (the tokens of the message the
    turn sent: an assistant entry quoting the message it answers, in a reasoning block or a {question, answer}
    object, still keeps the answer; earlier messages' tokens are a prompt stored with its completion, another
    session's cross-talk)."""
    if not stored or not reply:
        return stored == reply
    if stored in reply:
        return 2 * len(stored) >= len(reply) or len(stored) >= LIKE_MIN_CHARS
    at = stored.find(reply)
    if at < 0:
        return False
    if quoted and _SPEAKER.search(stored, 0, at):  # a transcript, "[..t0] Hi AI: <reply>": the prompt and it
        quoted = frozenset()
    return all(m.group(0) in quoted for m in TOKEN_RE.finditer(stored[:at] + " " + stored[at + len(reply):]))


_SPEAKER = re.compile(r"[^\W\d_]{1,12}\s*:\s*$")  # "AI: ", "assistant:" right before the reply: a speaker's label


def _own_tokens(t: Turn) -> frozenset:
    """The tokens of the turn's own message (its journaled token, and any its message carried), as ``_plain``
    reads them."""
    return frozenset([t.token.casefold()] if t.token else []) | \
        frozenset(m.group(0).casefold() for m in TOKEN_RE.finditer(t.message or ""))


_WORD = re.compile(r"[^\W\d_]{2,}")


def _recalls(stored: str, reply: str, value: str) -> bool:
    """A stored text that is a part of the reply, too short for ``_holds``, yet holds the value the reply carried
    (``value``, the turn's fact value, read alike) and a word besides: a recall answer ("Your order number is
    9284-9RPG.") kept without what the API added around it (a footer, a reasoning block, the question quoted
    first). A generic short text ("OK.", "Noted.") holds no value, and the value alone is no answer."""
    return bool(value) and value in stored and value in reply and stored in reply and \
        _WORD.search(stored.replace(value, " ")) is not None


_BLOCK_TAG = re.compile(r"<\s*/?\s*(?:p|div|br|li|ul|ol|h[1-6]|tr|td|th|table|blockquote|pre|hr)\b[^<>]*>", re.I)
_TAG = re.compile(r"<[^<>]*>")  # inline (<strong>): the text goes on; a block's tag parts words as a line end does
_MARKUP = str.maketrans("", "", "*_`#")
_SPACE_BEFORE_MARK = re.compile(r" ([.,;:!?])")  # text blocks joined by a line end (`*` of --reply-field) or none


def _plain(text: str) -> str:
    """Read alike: HTML entities and tags, Markdown's emphasis, code and heading marks (a page renders the stored
    Markdown), Unicode forms, case, runs of white space and white space before a punctuation mark (an answer's
    text blocks, "1237-JPWT" then ".", joined by the client with a line end and by the store with nothing), and
    lone surrogates (a reply cut inside an emoji, which the client journals as "?"); and a JSON object stored as
    the text (``{"answer": ..., "sources": [...]}``) as its string values, escapes read (a quote is stored ``\\"``)."""
    text = _TAG.sub("", _BLOCK_TAG.sub(" ", html.unescape(_json_strings(text)))).translate(_MARKUP)
    text = unicodedata.normalize("NFKC", text.encode("utf-8", "replace").decode("utf-8")).casefold()
    return _SPACE_BEFORE_MARK.sub(r"\1", " ".join(text.split()))


def _json_strings(text: str) -> str:
    """The string values of a JSON object stored as a message's text, in order, joined by spaces; else the text."""
    if not (text.startswith("{") and text.endswith("}")):
        return text
    try:
        document = codec.loads(text)
    except codec.DecodeError:
        return text
    strings, todo = [], [document]
    while todo:
        value = todo.pop()
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, (dict, list)):
            todo += reversed(list(value.values()) if isinstance(value, dict) else value)
    return " ".join(strings)


def _each_reply_follows(ok_stored, by_turn, decoded: Decoded, v: StoredView) -> bool:
    """Fast path: every ok user entry is directly followed by its journaled reply (the usual case).

    When this holds, the full matching below would also succeed, so skipping it is exact.
    """
    messages = decoded.messages
    position = {index: i for i, (index, _, _) in enumerate(messages)} if len(messages) and \
        messages[-1][0] != len(messages) - 1 else None
    for turn in ok_stored:
        index = v.own[v.first_position[turn]][2]
        i = position[index] if position is not None else index
        if i + 1 >= len(messages):
            return False
        _, role, text = messages[i + 1]
        if role != ASSISTANT or text != by_turn[turn].reply:
            return False
    return True


def _corrupt_replies(unanswered: list[dict], decoded: Decoded, v: StoredView) -> list[dict]:
    """An unanswered turn whose next stored entry is corrupt (with no token of its own, or that turn's: a reply
    that quotes its message, mangled) was answered: the corrupt entry is its reply. One fault (a mangled reply),
    counted once, as corrupt."""
    at = {bad["index"]: bad for bad in decoded.corrupt}
    kept = []
    for f in unanswered:
        bad = at.pop(v.entry_of(f["turn"]) + 1, None)
        if bad is None or bad.get("turn", f["turn"]) != f["turn"]:
            kept.append(f)
            continue
        bad["turn"] = f["turn"]
        bad.setdefault("tied_by", f"its place right after turn {f['turn']}'s user entry, where that turn's reply belongs")
    return kept


def with_misplaced_replies(reordered: list[dict], misplaced: list[int], by_turn: dict[int, Turn],
                           session: str) -> list[dict]:
    """Replies stored before their own turn are part of the session's reorder (one finding)."""
    if not misplaced:
        return reordered
    if not reordered:
        t = by_turn[misplaced[0]]
        reordered = [finding("reordered", session, t.turn, t.sent, reply_before_turn=t.turn, token=t.token,
                             reply=t.reply)]
    reordered[0]["evidence"]["replies_before_their_turn"] = misplaced
    return reordered


def late_replies(by_turn: dict[int, Turn], decoded: Decoded, v: StoredView) -> list[list[int]]:
    """[turn, later turn]: a turn whose reply is stored after the user entry of a later turn that was sent once
    that reply had reached the client (a reply written behind, by a background task): the later turn was answered
    from a context without it. Replies carry no token, so only a reply no other ok turn of the session shares is
    placed, by its first stored copy; a burst's turns overlap in time and never count."""
    by_reply: dict = {}
    for t in by_turn.values():
        if t.outcome == "ok" and t.reply and t.received is not None:
            by_reply[t.reply] = None if t.reply in by_reply else t
    entry_of = {turn: v.own[position][2] for turn, position in v.first_position.items() if turn in by_turn}
    out, seen = [], set()
    for index, role, text in decoded.messages:
        t = by_reply.get(text) if role == ASSISTANT and text not in seen else None
        seen.add(text)  # a later copy is a duplicate, or an indeterminate turn's reply of the same text
        if t is None or t.turn not in entry_of or entry_of[t.turn] > index:
            continue  # not placed, or stored before its own turn (with_misplaced_replies)
        later = [j for j, at in entry_of.items() if entry_of[t.turn] < at < index and by_turn[j].sent > t.received]
        if later:
            out.append([t.turn, min(later)])
    return out


def with_late_replies(reordered: list[dict], late: list[list[int]], by_turn: dict[int, Turn],
                      session: str) -> list[dict]:
    """Replies stored after a later turn are part of the session's reorder (one finding)."""
    if not late:
        return reordered
    if not reordered:
        t = by_turn[late[0][0]]
        reordered = [finding("reordered", session, t.turn, t.sent, token=t.token, reply=t.reply)]
    reordered[0]["evidence"]["replies_after_a_later_turn"] = late[:MAX_CROSSTALK]
    return reordered


def check_corrupt(session: str, by_turn: dict[int, Turn], decoded: Decoded, raw: RawSession) -> list[dict]:
    """An entry that does not decode: invalid JSON, a pickle, not utf-8, or the wrong shape."""
    out = []
    for bad in decoded.corrupt:
        turn = bad.get("turn")
        t = by_turn.get(turn) if turn is not None else None
        out.append(finding("corrupt", session, turn, t.sent if t else None, key=raw.key, index=bad["index"],
                           reason=bad["reason"], excerpt=bad["excerpt"], length=bad["length"],
                           tied_by=bad.get("tied_by")))
    return out


CHECKERS = ("vanished", "lost", "aborted", "crosstalk", "duplicated", "reordered", "unanswered", "corrupt")


@dataclass
class SessionResult:
    findings: list
    stats: dict
    lost_turns: list  # ok turns the store cannot give back (lost, or gone with the key); a corrupt one is corrupt
    order: str | tuple | None = None  # how the key holds the session's turns (``layout``)


def check_session(session: str, turns: list[Turn], raw: RawSession, decoded: Decoded,
                  journal: dict[str, list[Turn]], gone_class=lambda last_ack, first_write=None, longest_pause=None: "vanished") -> SessionResult:
    """Every checker over one session, and the counts its row in sessions.csv needs.

    Checkers that cannot fire are skipped (no foreign entries: no cross-talk; one copy of each
    turn's user entry: no duplicated user entries). Sessions oracle/clean.py proves clean never get here
    (``journal_stats``): one holding a reply twice has more entries than 2 x its ok turns, so it does.
    """
    by_turn = {t.turn: t for t in turns}
    v = view(session, decoded, raw, by_turn)
    after_end = expired_after_end(turns, raw.exists, gone_class)  # by design, and too late to judge: no finding
    if not raw.exists:
        findings = [] if after_end else check_vanished(session, turns, raw, gone_class)
    else:
        findings = check_lost(session, turns, raw, v)
        altered = check_facts(session, by_turn, decoded, v, raw.key)
        findings += altered + check_aborted(session, by_turn, v)
        if v.foreign:
            findings += check_crosstalk(session, v, journal, raw.key)
        if v.strays:
            findings += check_stray_values(session, v, raw.key)
        duplicated = check_duplicated(session, by_turn, v) if len(v.own) != len(v.copies) else []
        findings += with_duplicated_replies(duplicated, check_duplicated_replies(session, by_turn, decoded, v))
        unanswered, misplaced = check_unanswered(session, by_turn, decoded, v)
        if decoded.corrupt and unanswered:
            unanswered = _corrupt_replies(unanswered, decoded, v)
        reordered = with_late_replies(with_misplaced_replies(check_reordered(session, by_turn, v), misplaced, by_turn,
                                                             session), late_replies(by_turn, decoded, v), by_turn, session)
        findings += reordered or (check_merged_late(session, by_turn, v) if v.merged else [])
        findings += unanswered
        if decoded.corrupt:
            findings += check_corrupt(session, by_turn, decoded, raw)
    gone = not raw.exists and bool(findings)
    altered_turns = {f["turn"] for f in altered} if raw.exists else set()
    lost_turns = [t.turn for t in turns if t.outcome == "ok" and
                  (gone or t.turn in altered_turns or
                   (raw.exists and t.turn not in v.copies and t.turn not in v.corrupt_turns
                    and t.turn not in v.merged))]
    stored = v.copies.keys() | v.merged.keys() if v.merged else v.copies
    return SessionResult(findings, session_stats(turns, stored, v.corrupt_turns, counted(findings),
                                                 len(lost_turns), raw.exists, after_end), lost_turns,
                         layout(session, raw, [by_turn.get(t) for _, t, _ in v.own], decoded))


REPLY_IN_ENTRY_CHARS = 12  # a reply this long found inside an entry is that reply, not a word that happens to be there


def layout(session: str, raw: RawSession, turns: list, decoded: Decoded) -> str | tuple | None:
    """How the key holds the session's turns (oracle/keys.py check_layout: every session so means the options
    do not fit the store). Its own user entries' turns in stored order (None: not journaled), by the majority of
    neighbouring pairs in real-time order (one acknowledged before the other was sent; a burst's pair has no
    order, as in ``check_reordered``): "ordered" (ascending) or "reversed" (descending: a list read with the wrong
    --direction) or "blob reversed" (a JSON blob newest first) or "http reversed" (an HTTP history API's default
    order, newest first); no such pair: "held". "reply roles" and their names when no entry is of an assistant role
    but replies the client got are in entries of other roles (the wrong --assistant-role); "replies inside" when
    no entry is of an assistant role but the replies are inside the stored entries (one entry per exchange, the
    reply in a field of the user's entry); "no messages" when no
    entry holds a text (no role at --role-field). None of its own: "roles"
    and their names when its tokens are in entries of roles neither user nor assistant (the wrong --user-role);
    "untokened" when it has user entries but none carries any token (the bot rewrites messages); "undecodable"
    when no entry decodes and none is a pickle (another format than JSON); "pickled" when every entry is a pickle
    (goldfish never unpickles: oracle/keys.py check_layout weighs the run's recall probes, as pickle drift, a release
    that cannot unpickle its predecessor's entries, forgets); "swapped" when no user entry holds its own
    message's token (after tags, quote marks: ``_WRAPPER``) while some assistant entry does (the role options the
    other way round; a user entry wrapped in tags, <user_input>[gf..t0] ...</user_input>, beside replies that quote the message first, is not);
    else None. Replies stored as entries of the user's role (a bot feeding its answers back as the user's) are no "replies
    inside": they are judged, every turn unanswered."""
    own = f"[{session}t"
    replies = {t.reply for t in turns if t is not None and t.reply}
    if decoded.users and not any(_WRAPPER.sub("", text, 1).startswith(own) for _, text in decoded.users) and \
            any(kind == ASSISTANT and text.startswith(own) for _, kind, text in decoded.messages):
        return "swapped"
    if decoded.messages and not any(text for _, _, text in decoded.messages):
        return "no messages"  # every entry an item with no role at --role-field (a field the entries lack)
    if replies and not any(kind == ASSISTANT for _, kind, _ in decoded.messages):
        if decoded.other_roles and any(kind == OTHER and text in replies for _, kind, text in decoded.messages):
            return "reply roles", tuple(sorted(map(str, decoded.other_roles)))
        long = [reply for reply in replies if len(reply) >= REPLY_IN_ENTRY_CHARS]
        entries = [_json_strings(e.decode("utf-8", "replace") if isinstance(e, (bytes, bytearray)) else e)
                   for e in raw.entries if isinstance(e, (str, bytes, bytearray))] if long else []
        if any(reply in e for e in entries for reply in long) and \
                not _replies_as_user_entries(decoded, dict(enumerate(t for t in turns if t is not None))):
            return "replies inside"  # one entry per exchange: {"role": "user", "content": ..., "response": ...}
    if not turns:
        if decoded.other_roles and any(kind == OTHER and own in text for _, kind, text in decoded.messages):
            return "roles", tuple(sorted(map(str, decoded.other_roles)))
        if decoded.users and not any(TOKEN_RE.search(text) for _, text in decoded.users):
            return "untokened"
        if decoded.corrupt and not decoded.messages:
            pickles = sum("pickle" in c["reason"] for c in decoded.corrupt)
            if not pickles:
                return "undecodable"
            if pickles == len(decoded.corrupt):
                return "pickled"
        return None
    if raw.type not in ("list", "string", "http"):
        return "held"
    up = down = 0
    for a, b in zip(turns, turns[1:]):
        if a is None or b is None:
            continue
        up += a.received is not None and a.received <= b.sent
        down += b.received is not None and b.received <= a.sent
    if down > up:
        return {"list": "reversed", "string": "blob reversed"}.get(raw.type, f"{raw.type} reversed")
    return "ordered" if up > down else "held"


_CLASSES = ("lost", "crosstalk", "reordered", "duplicated", "corrupt", "vanished", "expired", "evicted",
            "unanswered", "aborted")


def journal_stats(turns: list[Turn]) -> dict:
    """The row of a session proven clean: every acknowledged turn stored once, nothing else."""
    return session_stats(turns, {t.turn for t in turns if t.outcome == "ok"}, (), [], 0, True)


def session_stats(turns: list[Turn], copies, corrupt_turns, findings: list[dict], lost_turns: int,
                  exists: bool, after_end: bool = False) -> dict:
    counts = dict.fromkeys(_CLASSES, 0)
    for f in findings:
        counts[f["class"]] += 1
    ok = fail = info = info_stored = probes = answered = failed = online = 0
    first_sent = last_received = None
    for t in turns:
        outcome = t.outcome
        if outcome == "ok":
            ok += 1
        elif outcome == "fail":
            fail += 1
        else:
            info += 1
            if t.turn in copies or t.turn in corrupt_turns:
                info_stored += 1
        if t.kind == "probe":
            probes += 1
            if outcome == "ok" and t.verdict in ("pass", "amnesia"):
                answered += 1
                failed += t.verdict == "amnesia"
        if t.crosstalk:
            online += 1
        if first_sent is None or t.sent < first_sent:
            first_sent = t.sent
        if t.received is not None and (last_received is None or t.received > last_received):
            last_received = t.received
    return {
        "turns": len(turns), "ok": ok, "fail": fail, "info": info, "info_stored": info_stored,
        "probes": probes, "probes_answered": answered, "probes_failed": failed,
        "lost": counts["lost"], "crosstalk": counts["crosstalk"], "reordered": counts["reordered"],
        "duplicated": counts["duplicated"], "corrupt": counts["corrupt"],
        "vanished": counts["vanished"] + counts["expired"] + counts["evicted"], "unanswered": counts["unanswered"],
        "anomalous": int(bool(findings) or failed > 0 or online > 0),
        "first_sent": first_sent, "last_received": last_received,
        "expired": counts["expired"], "aborted": counts["aborted"], "lost_turns": lost_turns,
        "crosstalk_online": online, "exists": exists, "evicted": counts["evicted"],
        "expired_after_end": int(after_end),
    }


MIN_REPEATED = 8  # characters: a shorter answer held k times over by a reply may be chance ("ok" in "look ok")


def repeated_pieces(reply, stored) -> int | None:
    """k when the client's reply holds every character of the stored answer exactly k >= 2 times and nothing else: a
    stream that carried each piece k times (LangChain's astream_events, one event per level of the chain, read
    without --reply-where), so the answer stored is the one sent, read k times over (LangChain hunt 17). None
    otherwise."""
    if not isinstance(reply, str) or not isinstance(stored, str) or len(stored.strip()) < MIN_REPEATED:
        return None
    times, left = divmod(len(reply), len(stored))
    if times < 2 or left:
        return None
    want = Counter(stored)
    return times if Counter(reply) == Counter({c: n * times for c, n in want.items()}) else None
