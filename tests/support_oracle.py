"""Helpers for the oracle tests and benchmark: build journals and correct stored histories, then damage them.

A ``World`` is a run's client history (journal records) plus the history a correct store
would hold for it (LangChain message dicts, oldest first), built deterministically from small
specs so hypothesis can shrink them. ``inject`` applies one known anomaly to one session and
returns the finding the oracle must report for it.
"""
from __future__ import annotations

import json
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path

from contracts.tokens import make_token

RUN = "run-test"
FACTS = ("order number", "pet name", "city")


def session_id(i: int, salt: int = 0) -> str:
    return f"gf{(0x3fa90c1d00000000 + i * 7919 + salt * 104729):016x}"


def lc(role: str, content: str) -> dict:
    """A message as LangChain's message_to_dict writes it (human/ai)."""
    return {"type": role, "data": {"content": content, "additional_kwargs": {}, "response_metadata": {},
                                   "type": role, "name": None, "id": None, "example": False}}


@dataclass
class TurnSpec:
    kind: str          # plant | probe | chatter
    outcome: str       # ok | fail | info
    burst: int = 1     # >1: this and the next burst-1 turns are sent at once
    info_store: str = "both"  # for info turns: both | user | none
    verdict_amnesia: bool = False


@dataclass
class World:
    records: list = field(default_factory=list)           # journal records (dicts)
    stored: dict = field(default_factory=dict)            # session -> [(turn|None, message dict)] oldest first
    order: list = field(default_factory=list)             # sessions in creation order
    ttl: dict = field(default_factory=dict)               # session -> ttl seconds (expired-capable store)
    gone: set = field(default_factory=set)                # sessions whose key is absent
    foreign: list = field(default_factory=list)

    def turns(self, session):
        return [r for r in self.records if r["session"] == session]


def build_world(specs: list[list[TurnSpec]], start: float = 1_700_000_000.0, seed: int = 0) -> World:
    """Journal + the stored history of a correct store (bursts may be stored in any order)."""
    rng = random.Random(seed)
    world = World()
    for si, turns in enumerate(specs):
        session = session_id(si, seed)
        world.order.append(session)
        blocks: list[tuple[list, list]] = []  # groups of overlapping turns: [(turn, [entries])]
        t = start + si * 0.37
        i = 0
        while i < len(turns):
            size = max(1, min(turns[i].burst, len(turns) - i))
            group = []
            for k in range(size):
                spec, index = turns[i + k], i + k
                token = make_token(session, index)
                fact = FACTS[index % len(FACTS)]
                nonce = f"{1000 + index:04d}-X{si % 10}Q{index % 10}"
                if spec.kind == "plant":
                    message = f"[{token}] My {fact} is {nonce}."
                elif spec.kind == "probe":
                    message = f"[{token}] What is my {fact}?"
                else:
                    message = f"[{token}] Tell me something about turn {index}."
                sent = t + k * 0.001
                received = sent + 0.5 + rng.random() * 0.2 if size > 1 else sent + 0.05 + rng.random() * 0.1
                if spec.outcome == "fail":
                    received = sent + 0.001
                reply = None
                if spec.outcome == "ok":
                    # the assistant often quotes the user, tokens included (must not count as writes)
                    reply = f"Noted. You said: {message}"
                    if rng.random() < 0.3 and si > 0:
                        reply += f" Someone else once said [{make_token(session_id(0, seed), 0)}]."
                verdict = None
                if spec.kind == "probe" and spec.outcome == "ok":
                    verdict = "amnesia" if spec.verdict_amnesia else "pass"
                world.records.append({
                    "run": RUN, "session": session, "turn": index, "kind": "burst" if size > 1 else spec.kind,
                    "token": token, "message": message, "fact": fact if spec.kind != "chatter" else None,
                    "nonce": nonce if spec.kind != "chatter" else None, "sent": sent,
                    "received": None if spec.outcome == "info" and rng.random() < 0.5 else received,
                    "outcome": spec.outcome, "status": 200 if spec.outcome == "ok" else (None if spec.outcome == "fail" else 502),
                    "reply": reply, "error": None if spec.outcome == "ok" else spec.outcome,
                    "verdict": verdict, "crosstalk": [], "step": 0, "user": f"u{si % 4}"})
                if spec.kind == "probe" and size > 1:
                    world.records[-1]["kind"] = "probe"
                entries = []
                if spec.outcome == "ok" or (spec.outcome == "info" and spec.info_store != "none"):
                    entries.append((index, lc("human", message)))
                    if spec.outcome == "ok" or spec.info_store == "both":
                        entries.append((index, lc("ai", reply or f"Noted. You said: {message}")))
                group.append((index, entries))
            rng.shuffle(group)  # overlapping turns have no real-time order: any storage order is correct
            blocks.append(group)
            t = max(r["received"] or r["sent"] + 1.0 for r in world.records[-size:]) + 0.2 + rng.random()
            i += size
        world.stored[session] = [e for group in blocks for _, entries in group for e in entries]
        if not world.stored[session]:
            world.gone.add(session)
    return world


# --- injections: each returns the (class, session, turn) the oracle must report --------------------

def _by_turn(world, session):
    return {r["turn"]: r for r in world.turns(session)}


def inject(world: World, session: str, kind: str, rng: random.Random) -> set:
    """Damage one session with one anomaly class; return the expected findings (empty if impossible)."""
    turns = _by_turn(world, session)
    stored = world.stored[session]
    users = [(i, t) for i, (t, m) in enumerate(stored) if m["type"] == "human"]
    ok_stored = [t for _, t in users if turns[t]["outcome"] == "ok"]
    if kind == "lost" and ok_stored:
        turn = rng.choice(ok_stored)
        world.stored[session] = [(t, m) for t, m in stored if t != turn]
        if not world.stored[session]:
            world.gone.add(session)
            return {("vanished", session, None)}
        return {("lost", session, turn)}
    if kind == "vanished" and ok_stored:
        world.gone.add(session)
        world.stored[session] = []
        return {("vanished", session, None)}
    if kind == "unanswered" and ok_stored:
        turn = rng.choice(ok_stored)
        # An indeterminate turn's stored reply could be credited to the ok turn (replies carry no
        # token, and the oracle gives acknowledged turns the benefit of the doubt), so the damage
        # also drops those: an info turn stored without its reply is no anomaly.
        world.stored[session] = [(t, m) for t, m in stored
                                 if not (m["type"] == "ai" and (t == turn or turns[t]["outcome"] != "ok"))]
        return {("unanswered", session, turn)}
    if kind == "duplicated" and users:
        pos, turn = rng.choice(users)
        at = rng.randint(pos + 1, len(stored))
        stored.insert(at, (turn, stored[pos][1]))
        return {("duplicated", session, turn)}
    if kind == "crosstalk":
        other = rng.choice([s for s in world.order if s != session] or [session_id(999)])
        if other == session:
            return set()
        token = make_token(other, 99)
        stored.insert(rng.randint(0, len(stored)), (None, lc("human", f"[{token}] My pet name is 9999-ZZZZ.")))
        world.gone.discard(session)
        return {("crosstalk", session, None)}
    if kind == "corrupt":
        garbage = rng.choice([b"\x80\x04\x95" + pickle.dumps({"x": 1})[3:], b"{not json", b"\xff\xfe\x00bad",
                              json.dumps([1, 2]).encode(), json.dumps({"type": "human"}).encode(),
                              json.dumps({"data": {"content": "no role"}}).encode()])
        stored.insert(rng.randint(0, len(stored)), (None, garbage))
        world.gone.discard(session)
        return {("corrupt", session, None)}
    if kind == "truncated" and ok_stored:  # an ok turn's user entry cut short: corrupt, attributed to the turn
        turn = rng.choice(ok_stored)
        for i, (t, m) in enumerate(stored):
            if t == turn and isinstance(m, dict) and m["type"] == "human":
                stored[i] = (t, json.dumps(m).encode()[:-7])
                break
        return {("corrupt", session, turn)}
    if kind == "aborted":
        fails = [t for t, r in turns.items() if r["outcome"] == "fail"]
        if not fails:
            return set()
        turn = rng.choice(fails)
        # put it where a correct store would have: after every turn sent before it
        at = sum(1 for t, _ in stored if t is not None and t < turn)
        stored[at:at] = [(turn, lc("human", turns[turn]["message"])), (turn, lc("ai", "Noted."))]
        world.gone.discard(session)
        return {("aborted", session, turn)}
    if kind == "reordered":
        firsts: dict[int, int] = {}
        for i, (t, m) in enumerate(stored):
            if isinstance(m, dict) and m["type"] == "human":
                firsts.setdefault(t, i)
        pairs = [(a, b) for a in firsts for b in firsts
                 if firsts[a] < firsts[b] and turns[a]["outcome"] == "ok"
                 and turns[a]["received"] is not None and turns[a]["received"] < turns[b]["sent"]]
        if not pairs:
            return set()
        a, b = rng.choice(pairs)
        block = [(t, m) for t, m in stored if t == b]
        rest = [(t, m) for t, m in stored if t != b]
        at = next(i for i, (t, m) in enumerate(rest) if t == a)
        # b's block goes right before a's: (b, a) are adjacent user entries, the closest contradicting pair
        world.stored[session] = rest[:at] + block + rest[at:]
        return {("reordered", session, b)}
    return set()


ANOMALY_KINDS = ("lost", "vanished", "unanswered", "duplicated", "crosstalk", "corrupt", "truncated",
                 "aborted", "reordered")


# --- writing a run folder -------------------------------------------------------------------------

def write_journal(run_dir: Path, records: list[dict], shards: int = 1, extra_lines: dict | None = None,
                  by_user: bool = False) -> None:
    """Journal shards (sessions dealt round-robin, or users with ``by_user``: one Locust process holds a
    user's sessions); ``extra_lines`` {shard index: [raw lines]} appended."""
    journal = Path(run_dir) / "journal"
    journal.mkdir(parents=True, exist_ok=True)
    files = [open(journal / f"local-{i}.jsonl", "w") for i in range(shards)]
    shard_of: dict = {}  # a session's turns are in one shard, as one Locust process writes them
    for record in records:
        owner = record.get("user") if by_user else record.get("session")
        shard = shard_of.setdefault(owner, len(shard_of) % shards)
        files[shard].write(json.dumps(record) + "\n")
    for i, lines in (extra_lines or {}).items():
        for line in lines:
            files[i].write(line)
    for fh in files:
        fh.close()


def raw_entries(world: World, session: str) -> list:
    out = []
    for _, m in world.stored[session]:
        out.append(m if isinstance(m, bytes) else json.dumps(m).encode())
    return out


def write_snapshot(run_dir: Path, world: World, entries_as_json: bool = False) -> None:
    """A complete store/ snapshot of the world's stored histories, as a live read would write it: one
    file per partition of the audit (``entries_as_json``: the entries that decode are embedded as JSON)."""
    from contracts.runfolder import RunFolder
    from oracle.clean import prove_clean
    from oracle.decode import Shape
    from oracle.history import PARTITIONS, partition_of
    from oracle.snapshot import SnapshotWriter, session_lines
    from oracle.store import RawSession, StoreOptions
    opts = StoreOptions(url="redis://snapshot-only")
    folder = RunFolder(run_dir)
    writer = SnapshotWriter(folder.path, opts, {"ttl_in_use": any(world.ttl.values())}, PARTITIONS)
    users = {}
    for r in world.records:
        users.setdefault(r["session"], r.get("user") or r["session"])
    by_partition: dict = {}
    for s in world.order:
        if s in world.gone:
            raw = RawSession(s, opts.key(s), False, None, [], "none")
        else:
            raw = RawSession(s, opts.key(s), True, world.ttl.get(s), raw_entries(world, s), "list")
        by_partition.setdefault(partition_of(users.get(s, s)), []).append(raw)
    for p, raws in by_partition.items():
        decoded = prove_clean(raws, {}, Shape(opts)).decoded if entries_as_json else None
        folder.snapshot_part(p, reading=True).write_bytes(session_lines(raws, decoded))
    for record in world.foreign:
        writer.write_foreign(record)
    writer.close(True, len(world.order))


def fill_redis(client, world: World, key_template: str = "message_store:{session}") -> None:
    """Store the world in Redis in LangChain's layout (LPUSH, newest first), pipelined."""
    pipe = client.pipeline(transaction=False)
    for s in world.order:
        if s in world.gone:
            continue
        key = key_template.replace("{session}", s)
        pipe.lpush(key, *raw_entries(world, s))
        if world.ttl.get(s):
            pipe.expire(key, world.ttl[s])
    pipe.execute()


def read_findings(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "audit" / "anomalies.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def finding_keys(run_dir: Path) -> set:
    return {(f["class"], f["session"], f["turn"]) for f in read_findings(run_dir)}


def store_with_langchain(url: str, world: World, ttl: int | None = None, streamed: bool = False) -> None:
    """Write the world's stored histories with LangChain's own RedisChatMessageHistory (bytes raw);
    ``streamed``: the answers as a streamed RunnableWithMessageHistory stores them (AIMessageChunk)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_community.chat_message_histories import RedisChatMessageHistory
        from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
    for s in world.order:
        if s in world.gone:
            continue
        history = RedisChatMessageHistory(s, url=url, ttl=ttl)
        for _, m in world.stored[s]:
            if isinstance(m, bytes):
                history.redis_client.lpush(history.key, m)
            elif m["type"] == "human":
                history.add_message(HumanMessage(content=m["data"]["content"]))
            else:
                history.add_message((AIMessageChunk if streamed else AIMessage)(content=m["data"]["content"]))
        history.redis_client.close()


def simple_specs(sessions: int = 6) -> list[list[TurnSpec]]:
    """Sessions with every outcome and a burst, so every anomaly class has something to damage."""
    return [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
             TurnSpec("chatter", "info", info_store="both"), TurnSpec("chatter", "fail"),
             TurnSpec("probe", "ok", verdict_amnesia=(i % 3 == 0)), TurnSpec("chatter", "ok")]
            for i in range(sessions)]


# a user-supplied reader for --reader tests: serves FUNCTION_STORE {session: [entries]}
FUNCTION_STORE: dict = {}


def function_reader(sessions: list[str]) -> list[dict]:
    return [{"session": s, "exists": True, "entries": FUNCTION_STORE[s]} for s in sessions if s in FUNCTION_STORE]


def oracle_main(capsys, *args):
    """``python -m oracle ...`` through its main(), in this process: (exit code, stdout, stderr)."""
    from oracle.__main__ import main

    try:
        code = main([*map(str, args)])
    except SystemExit as exc:  # argparse refusing an option
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
