"""The client-side history: the journal shards of a run folder, grouped by session.

The record is ``contracts.journal.Turn`` and the file reading is ``contracts.jsonl`` (one
torn-last-line rule): a crash loses at most the line being written, which is skipped silently;
every other malformed line is reported as ``file:line`` and skipped, and the rest of the journal
is still audited. Jepsen's outcomes: ``ok`` (acknowledged), ``fail`` (definitely not applied),
``info`` (indeterminate).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from contracts.journal import Turn, decode_chunk, decode_line, one_per_turn
from contracts.jsonl import read_chunks
from contracts.runfolder import RunFolder


class JournalError(Exception):
    """The run folder has no usable journal (nothing to audit)."""


@dataclass
class Journal:
    run: str | None
    sessions: dict[str, list[Turn]]
    problems: list[str] = field(default_factory=list)
    shards: list[Path] = field(default_factory=list)
    lines: int = 0  # turns read


def load_journal(run_dir: str | Path) -> Journal:
    """Every shard under ``run_dir/journal``; turns sorted by index within each session."""
    folder = RunFolder(run_dir)
    if not folder.path.is_dir():
        raise JournalError(f"{folder.path} is not a run folder (no such directory)")
    shards = folder.shards()
    if not shards:
        raise JournalError(f"{folder.path} has no journal: expected {folder.journal}/*.jsonl "
                           "(is this a run folder?)")
    sessions: dict[str, list[Turn]] = defaultdict(list)  # a plain dict again before it is handed out
    problems: list[str] = []
    run = None
    for shard in shards:
        for _, turns in read_chunks(shard, decode_chunk, decode_line, problems):
            for turn in turns:
                sessions[turn.session].append(turn)
            if run is None:
                run = next((t.run for t in turns if t.run), None)
    if not sessions:
        detail = f"; first problem: {problems[0]}" if problems else ""
        raise JournalError(f"{folder.journal} holds no valid journal records (in {len(shards)} shard(s)){detail}")
    for session, turns in sessions.items():
        sessions[session], repeated = one_per_turn(turns)  # an outcome supersedes its in-flight record
        problems += [f"journal: session {session} turn {n} journaled twice; kept the first" for n in repeated]
    return Journal(run=run or folder.name, sessions=dict(sessions), problems=problems, shards=shards,
                   lines=sum(len(turns) for turns in sessions.values()))
