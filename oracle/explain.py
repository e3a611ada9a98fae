"""One plain-English paragraph per finding, with its evidence, in the manner of Elle.

The explanation must stand alone in a report: what was expected, what the store held, and
why that is (or is not) a bug, with the times and positions that prove it.
"""
from __future__ import annotations

import time as _time

from contracts.tokens import NONCE_RE, TOKEN_RE


def _t(epoch) -> str:
    if epoch is None:
        return "an unknown time"
    return _time.strftime("%H:%M:%S", _time.gmtime(epoch)) + f".{int((epoch % 1) * 1000):03d} UTC"


def explain(f: dict) -> str:
    e, s, turn = f["evidence"], f["session"], f["turn"]
    cls = f["class"]
    if cls == "lost" and e.get("altered") and "message" in e:
        plant = (f" It planted {e['fact']}: the value may still be there, but not the message that planted it."
                 if e.get("fact") else "")
        return (f"Session {s} turn {turn} (token {e['token']}) sent {e['message']!r} and the bot acknowledged it at "
                f"{_t(e['received'])}. The user entry with this turn's token in {e['key']} holds other text than the "
                f"user sent: {e['stored']!r}. The bot stored something the user never said, so every later turn's "
                "context reads it as the user's words (case, white space, punctuation, Unicode forms and text around "
                f"the message, such as tags, a context or a time stamp, do not count: the message is not there).{plant}")
    if cls == "lost" and e.get("altered"):
        return (f"Session {s} turn {turn} (token {e['token']}) planted {e['fact']} = {e['value']!r} and the bot "
                f"acknowledged it at {_t(e['received'])}. Its user entry is stored in {e['key']}, but without that "
                f"value: {e['stored']!r}. The store kept the message and lost the fact (truncated, redacted or "
                "summarised), so a bot that reads this history back cannot recall it.")
    if cls == "lost":
        head = (f"Session {s} sent turn {turn} (token {e['token']}) at {_t(e['sent'])} and the bot acknowledged it "
                f"at {_t(e['received'])}, so the user's message must be in the stored history. The key {e['key']} "
                f"exists and holds {e['stored_user_entries']} of this session's user entries, but none carries "
                f"{e['token']}")
        went = e.get("stored_under")
        if went:
            return (f"{head}. It was written under session {went['session']}'s key {went['key']} instead (finding "
                    f"{went['finding']}): the bot misrouted this turn to another user's memory. One fault, counted "
                    "once, as cross-talk; the store itself lost nothing.")
        down = e.get("store_down")
        if down:
            return (f"{head}. The turn was sent and answered while the store was down (a {down['kind']} fault from "
                    f"{_t(down['from'])} to {_t(down['to'])}): the bot acknowledged a write it could not make then, "
                    "answering as if it was saved (a store error swallowed). The store did not lose it; it never had "
                    "it.")
        if e.get("expired_in_pause"):
            x = e["expired_in_pause"]
            return (f"{head}, nor any of the session's turns before turn {x['before_turn']}, which came after a "
                    f"{x['pause_s']:g} s pause. Keys under the template carry a TTL (at least {x['ttl_floor']:g} s) and "
                    "the store expired keys meanwhile: the key most likely expired in that pause and the next turn made "
                    "a new one, so the bot forgot the conversation so far. By design if the TTL is meant to end idle "
                    "conversations (these turns are no `expired` session: --gate stored_loss judges them); if not, "
                    "give the history a TTL longer than users pause.")
        if e.get("expired_unrenewed"):
            x = e["expired_unrenewed"]
            return (f"{head}, nor any of the session's turns before turn {x['before_turn']}, though no pause was as "
                    f"long as the TTL keys under the template carry (at least {x['ttl_floor']:g} s) and no turn was in "
                    f"flight with another. The key was {x['age_s']:g} s old when turn {x['before_turn']} came and the "
                    "store expired keys meanwhile: the key most likely expired while the conversation went on, and "
                    "the next turn made a new one. A TTL set when the key is made and not renewed by each write "
                    "(EXPIRE ... NX, SET ... EX on creation only) ends every conversation longer than it: renew it "
                    "at each write.")
        restart = e.get("store_restarted_at")
        if restart:
            by = f"a {restart['kind']} fault" if restart.get("kind") else "its uptime says"
            return (f"{head}, nor any of the session's turns before the ones it holds. It was acknowledged before the "
                    f"store restarted at {_t(restart['at'])} ({by}): the restart kept none of it (no or too little "
                    "persistence), and the turns after it made a new key. The store lost an acknowledged write.")
        if e.get("other_key_names"):
            k = e["other_key_names"]
            return (f"{head}. {k['found']} of the {k['looked_for']} gone sessions of this run looked for are under "
                    f"other key names ({', '.join(k['keys'])}): the bot files histories under a key the template does "
                    "not name, and a name changed during the run (a key prefix a release renamed) splits a history, "
                    "its later turns kept there. Look for this turn's token in such a key before taking it for a race "
                    "or a trim.")
        if e.get("read_after_s") is not None:
            return (f"{head}: the store lost an acknowledged write, or has not made it yet: it was acknowledged only "
                    f"{e['read_after_s']} s before the store was read. A bot that writes after it replies "
                    "(write-behind) needs longer than that; a longer --settle tells the two apart.")
        if e.get("alone"):
            return (f"{head}: the store lost an acknowledged write, or the bot never made it. No other turn of the "
                    "session was in flight while this one was, so it is no race between its requests: the bot dropped "
                    "the write (one made after the reply that failed, a store error swallowed) or rewrote the history "
                    "without it (a summary or a trim).")
        return (f"{head}: the store lost an acknowledged write, or the bot never made it (a race between concurrent "
                "turns of the session, a history rewritten without it: a summary or a trim).")
    if cls in ("vanished", "expired"):
        head = (f"Session {s} had {e['ok_turns']} acknowledged turns, the last (turn {e['last_ok_turn']}) at "
                f"{_t(f['time'])}, yet its key {e['key']} does not exist at all: the whole conversation is gone.")
        if e.get("misrouted_turns"):
            where = ", ".join(f"turn {w['turn']} under {w['key']}" for w in e["stored_under"])
            return (f"{head} {e['misrouted_turns']} of its turns were written under other sessions' keys ({where}"
                    f"{', ...' if e['misrouted_turns'] > len(e['stored_under']) else ''}): the bot misrouted this "
                    "session's memory, so its own key was never written. Counted once, as cross-talk.")
        if e.get("found_in_shared"):
            return (f"{head} Its messages are in {e['found_in_shared']}, a key under the template that holds other "
                    "sessions' messages too: the bot files conversations under one shared key instead of one per "
                    "session, so every user's history is everyone's (cross-talk).")
        if e.get("shared_keys"):
            k = e["shared_keys"]
            return (f"{head} {k['found']} of the {k['looked_for']} gone sessions looked for are in "
                    f"{', '.join(k['keys'])}, key(s) under the template that hold many sessions' messages: the bot "
                    "files conversations under a shared key instead of one per session, so every user's history is "
                    "everyone's (cross-talk). This session was not looked for (only a sample is); its messages are "
                    "most likely there too.")
        if e.get("found_under"):
            return (f"{head} Its session id is in another key of the store ({', '.join(e['found_under'])}): the bot "
                    "stored this session under a different key than the others.")
        if e.get("other_key_names"):
            k = e["other_key_names"]
            return (f"{head} {k['found']} of the {k['looked_for']} gone sessions looked for are under other key names "
                    f"({', '.join(k['keys'])}): the bot files histories under a key the template does not name (a "
                    "key prefix a release renamed, or a --key-template that is not the bot's). This session was not "
                    "looked for (only a sample is); it is most likely there too.")
        if cls == "expired":
            return f"{head} Keys under the key template carry a TTL, so the most likely cause is key expiry."
        if cls == "evicted":
            return (f"{head} The store evicted keys after this session's last acknowledged turn (its evicted_keys "
                    "counter grew): a Redis with maxmemory and an eviction policy dropped the history under memory "
                    "pressure.")
        if e.get("bot_forgot"):
            return (f"{head} The bot also failed most recall probes, and no key of the store holds this run's "
                    "sessions: it does not keep the conversation in this store at all (memory in a process, "
                    "built per request, or written somewhere else).")
        down = e.get("store_down")
        if down:
            return (f"{head} Every acknowledged turn of it was sent and answered while the store was down (a "
                    f"{down['kind']} fault from {_t(down['from'])} to {_t(down['to'])}): the bot acknowledged writes "
                    "it could not make then, answering as if they were saved (a store error swallowed). The store did "
                    "not lose the conversation; it never had it.")
        if e.get("store_restarted"):
            return (f"{head} The Redis server restarted after this session's turns were acknowledged (when: "
                    "summary.json information.missing_keys) and did not keep them: a restart without (enough) "
                    "persistence.")
        return (f"{head} No TTL was seen on any key, so the key was deleted or never persisted (a store restart "
                "without persistence, an eviction, or a flush).")
    if cls == "aborted":
        return (f"Session {s} turn {turn} (token {e['token']}) failed before it left the client (connection "
                f"refused at {_t(f['time'])}), so it definitely did not reach the bot; yet its user entry is stored "
                f"at position {e['position']}. A write that never happened is in the history: the journal and the "
                f"store disagree (a replay, a shared client, or a mis-recorded outcome).")
    if cls == "crosstalk":
        where = "" if e["source_journaled"] else " (that session is not in this run's journal)"
        moved = (f" That {'reply' if e.get('role') == 'assistant' else 'turn'} is missing from its own session: the "
                 "bot misrouted it (one fault, counted once)." if e.get("missing_from_own_session") else "")
        more = e.get("more")
        rest = (f" It holds {more['entries']:,} more such entries, of {more['sessions']:,} session(s), not listed one "
                "by one: sessions that share one key (ids that collide) hold each other's whole histories."
                if more else "")
        if e.get("key_read_for_count"):
            rest += (f" This key was read as the history of {e['key_read_for_count']} of this run's conversations "
                     f"({', '.join(e['key_read_for'])}): the bot gave them one id, so it holds all of their turns.")
        source = f"session {e['source_session']} turn {e['source_turn']}"
        if e.get("role") == "reply":
            return (f"Session {s} turn {turn} was answered with {e['excerpt']!r}, which carries {e['source_value']!r}, "
                    f"the value {source} planted: another user's fact was told to this one (the reply as the client "
                    f"got it; the Locust process that sent it had not planted that value): cross-talk.")
        if e.get("source_value") and e.get("role") == "assistant":
            what, carrying = "an assistant entry", f"{e['source_value']!r}, the value {source} planted"
            why = (", and it is none of the replies this session was sent: that session's answer (a recall of its "
                   "fact) was written into this user's memory")
        elif e.get("source_value"):
            what = ("an entry of neither user nor assistant role (a system, summary or tool entry)"
                    if e.get("role") == "other" else "a user entry with no token (written by the bot, not the client)")
            carrying = f"{e['source_value']!r}, the value {source} planted"
            why = (": another user's fact went into what the bot keeps for this user (a note of known facts or a "
                   "summary built from shared state)")
        elif e.get("role") == "other":
            what, carrying = "an entry of neither user nor assistant role (a system, summary or tool entry)", \
                f"the token of {source}{where}"
            why = (": another user's message went into what the bot keeps for this user (a summary or context built "
                   "from shared state)")
        elif e.get("role") == "assistant":
            what, carrying = "an assistant entry", f"the token of {source}{where}"
            why = (", and it is none of the replies this session was sent: another session's answer (or an answer "
                   "quoting its message) was written into this user's memory")
        else:
            what, carrying = "a user entry", f"the token of {source}{where}"
            why = (". Tokens are unique to one session, so another user's message was written into this user's "
                   "memory")
        return (f"The stored history of session {s} holds {what} (entry {e['entry_index']}) carrying {carrying}{why}: "
                f"cross-talk.{moved} Entry: {e['excerpt']!r}.{rest}")
    if cls == "duplicated" and e.get("role") == "assistant":
        return (f"Session {s} turn {turn} was answered once with {e['reply']!r}, but that reply is stored "
                f"{e['copies']} times, at entries {e['positions']} of the history ({e['turns_with_this_reply']} "
                f"acknowledged turn(s) of the session were answered with that text, and it is stored more often than "
                f"that). The bot wrote the same answer twice (a retried write, or the reply appended on the write "
                f"path and again in a callback), so every later turn's context repeats it.{_anyones(e['reply'])}")
    if cls == "duplicated":
        reply = (f" Its reply is stored {e['reply_copies']} times too (entries {e['reply_positions']}): the whole "
                 "exchange was written again." if e.get("reply_copies") else "")
        return (f"Session {s} turn {turn} was sent once (outcome {e['outcome']}), but its user entry is stored "
                f"{e['copies']} times, at positions {e['positions']} of the session's user entries. The client "
                f"never resends a token, so the store or the bot wrote the same message twice.{reply}")
    if cls == "reordered":
        misplaced, late = e.get("replies_before_their_turn") or [], e.get("replies_after_a_later_turn") or []
        tail = (f" The bot's reply to turn(s) {', '.join(map(str, misplaced))} is stored before the turn itself; "
                "those replies are part of this reorder, not missing." if misplaced else "")
        tail += (" " + "; ".join(f"The reply to turn {k} reached the client before turn {j} was sent, yet it is stored "
                                 f"after turn {j}'s message" for k, j in late[:5]) +
                 ": written behind (a background task), so those later turns were answered without it." if late else "")
        if e.get("merged_into_turn") is not None:
            more = len(e.get("merged_turns") or []) - 1
            return (f"In session {s}, turn {turn} was sent at {_t(e['later_sent'])}, after turn {e['merged_into_turn']} "
                    f"was answered at {_t(e['earlier_received'])}, yet the bot stored its message inside turn "
                    f"{e['merged_into_turn']}'s user entry, before that turn's answer: the history reads the later "
                    f"question before the earlier answer"
                    + (f" ({more} more turn(s) of this session likewise)." if more > 0 else "."))
        if e.get("reply_before_turn") is None and e.get("earlier_turn") is None and late:
            return f"In session {s}, the history holds the replies out of order.{tail}"
        if e.get("earlier_turn") is None:
            return (f"In session {s}, the bot acknowledged turn {turn} (token {e['token']}) with its reply, and both "
                    f"are stored, but the reply comes first: the history reads the answer before the question, so "
                    f"the next turn's context is out of order.{tail}")
        return (f"In session {s}, turn {e['earlier_turn']} was acknowledged at {_t(e['earlier_received'])}, before "
                f"turn {e['later_turn']} was sent at {_t(e['later_sent'])}; real time orders them, yet the store "
                f"holds turn {e['later_turn']} at user position {e['later_position']}, before turn "
                f"{e['earlier_turn']} at position {e['earlier_position']}. This is the closest of "
                f"{e['contradicting_pairs']} contradicting pair(s).{tail}")
    if cls == "unanswered":
        went = e.get("reply_stored_under")
        if went:
            return (f"Session {s} turn {turn} (token {e['token']}) was acknowledged with a reply, and its user entry "
                    f"is stored, but its reply was written under session {went['session']}'s key {went['key']} "
                    f"instead (finding {went['finding']}): the bot misrouted this answer to another user's memory. One "
                    "fault, counted once, as cross-talk.")
        head = (f"Session {s} turn {turn} (token {e['token']}) was acknowledged with a reply, and its user entry is "
                f"stored, but no assistant entry after it holds that reply, verbatim or otherwise.")
        as_user = e.get("reply_stored_as_user_entry")
        if as_user is not None:
            return (f"{head} Its reply is stored verbatim as entry {as_user} under the user's role: the bot keeps its "
                    "answers as the user's messages, so the next turn's context reads them as what the user said."
                    + _other_roles(e.get("other_roles")))
        whole = e.get("reply_unfinished")
        if whole:
            return (f"{head} An assistant entry after it begins with what the client was answered, "
                    f"{str(e.get('reply') or '')[:120]!r}, and goes on: {whole!r}. The client read the answer before the "
                    "bot finished it (a poll that took a message still being written, a stream cut short), so the "
                    "store may hold the whole answer: the run is NOT TRUSTED. Keep only finished replies "
                    "(--reply-where status=completed, say, or the field of the finished message).")
        times = e.get("reply_repeated")
        if times:
            return (f"{head} The client was answered {str(e.get('reply') or '')[:120]!r}, which holds every piece of "
                    f"the answer stored after it, {str(e.get('stored_answer') or '')[:120]!r}, {times} times over: the "
                    "stream carries each piece more than once (one event per level of a chain, as LangChain's "
                    "astream_events does), so the store may hold the very answer sent: the run is NOT TRUSTED. Keep "
                    "only the model's pieces (--reply-where event=on_chat_model_stream, say).")
        instead = e.get("stored_instead")
        if instead:
            return (f"{head} The nearest assistant entry after it that answers no other turn holds {instead!r}, where "
                    f"the user was answered {str(e.get('reply') or '')[:120]!r}: the bot stores its answers otherwise "
                    "than it sent them (masked, rewritten, or another answer), so the next turn's context is not what "
                    "the user saw." + _other_roles(e.get("other_roles")))
        return (f"{head} The bot answered the user without keeping its answer, so the next turn's context is missing "
                "half of this exchange." + _other_roles(e.get("other_roles")))
    if cls == "corrupt":
        whose = f" It belongs to turn {turn} (identified by {e['tied_by']})." if turn is not None else ""
        return (f"Entry {e['index']} of {e['key']} cannot be read: {e['reason']}. Excerpt: {e['excerpt']!r}."
                f"{whose} A bot reading this history either crashes or silently drops the entry.")
    return f"{cls} in session {s}: {e}"


def _other_roles(roles) -> str:
    """The roles of the session's entries that are neither the user's nor the assistant's, when there are any:
    a bot that keeps its answers under one of them is not unanswered, its role needs naming."""
    if not roles:
        return ""
    names = ", ".join(map(str, roles))
    return (f" The history also holds entries of other roles ({names}), which are not judged: if the bot keeps its "
            f"answers under one of them, pass --assistant-role {roles[0]} (repeatable).")


NOT_SCANNED = ("the store was not scanned for keys under the key template that are not this run's (--no-scan): "
               "keys of other runs or applications, and a bot writing under ids the journal does not know, were not "
               "looked for")


def journal_copy_line(copy: dict) -> str:
    """summary.information.journal_copies, in words (oracle/history.py journal_files)."""
    where = copy["master"] or "the master's journal (it had no copy of this worker's lines)"
    return (f"the journal of {copy['shard']} was read from the worker's own copy {copy['read']}: it holds "
            f"{copy['lines_added']} line(s) more than {where} (the master stopped before they reached it)")


def _anyones(reply) -> str:
    """The other story of a reply stored once too often, when nothing in it is this session's own (bot hunt 14 #9): a
    generic answer ("Noted.") appended to the wrong conversation's key looks the same in this history."""
    if not isinstance(reply, str) or TOKEN_RE.search(reply) or NONCE_RE.search(reply):
        return ""
    return (" The reply carries no token or fact of this session, so the extra copy may also be another conversation's "
            "answer of the same text written into this user's memory (a reply sent to the wrong key: cross-talk); the "
            "history alone cannot tell the two apart.")
