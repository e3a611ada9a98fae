"""Read stored histories with a user function named ``module:function``.

The function gets a batch of session ids (a list of str) and returns, in any order, one
dict per session: ``{"session": id, "exists": bool, "entries": [...], "ttl": int|None,
"key": str}``; entries oldest first, each a str/bytes (raw JSON) or an already decoded
message dict. A session it leaves out counts as not found (``exists: false``).
"""
from __future__ import annotations

import importlib
from typing import Iterable, Iterator

from contracts import codec
from oracle.store import RAW_TYPES, RawSession, StoreError, StoreOptions, batches

RECORD = '{"session": id, "exists": bool, "entries": [...], "ttl": int|None, "key": str}'


def load_function(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise StoreError(f"--reader {spec!r} must look like package.module:function")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code: a syntax error or a raise at import too
        raise StoreError(f"--reader {spec!r}: cannot import {module_name}: {_said(exc)}") from exc
    func = getattr(module, attr, None)
    if not callable(func):
        raise StoreError(f"--reader {spec!r}: {module_name} has no function {attr!r}")
    return func


def _said(exc: BaseException) -> str:
    """What user code raised, as a line: a sys.exit(0) in a reader is no audit that passed (it exited 0)."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    if isinstance(exc, SyntaxError):
        return f"{exc.msg} ({exc.filename}:{exc.lineno})"
    return repr(exc)


class FunctionReader:
    def __init__(self, options: StoreOptions):
        self.options = options
        self.func = load_function(options.reader)

    def read(self, sessions: list[str]) -> Iterator[list[RawSession]]:
        for batch in batches(sessions, self.options.batch):
            try:
                got = {}
                for r in self.func(list(batch)):
                    self._check(r)
                    got[r["session"]] = r
            except StoreError:
                raise
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code: any failure is a store failure, a
                raise StoreError(f"reader {self.options.reader} failed: {_said(exc)}") from exc  # sys.exit(0) too
            out = []
            for session in batch:
                r = got.get(session)
                if r is None or not r["exists"]:
                    out.append(RawSession(session, str((r or {}).get("key") or session), False, None, [], "none"))
                else:
                    kind = r.get("type")  # undocumented; a type no reader gives would damage the snapshot
                    out.append(RawSession(session, str(r.get("key") or session), True, r.get("ttl"),
                                          list(r["entries"]), kind if kind in RAW_TYPES and kind != "none" else "list"))
            yield out

    def _check(self, r) -> None:
        """A record the audit can use, or StoreError naming the field, the session and the function: a wrong
        shape was a traceback (``entries: 5``) or, with ``exists`` left out, a verdict of lost turns."""
        where = f"--reader {self.options.reader}"
        if not isinstance(r, dict):
            raise StoreError(f"{where} returned {codec.short(r)} ({type(r).__name__}) as a record: each must be a "
                             f"dict {RECORD} (docs/oracle.md \"Readers\")")
        session = r.get("session")
        if not isinstance(session, str):
            raise StoreError(f"{where} returned a record whose \"session\" is {codec.short(session)}, not a session "
                             f"id (str): each record is {RECORD}")
        wrong = None
        if not isinstance(r.get("exists"), bool):
            wrong = "exists", "true or false"
        elif r["exists"] and not isinstance(r.get("entries"), (list, tuple)):
            wrong = "entries", "a list of entries (oldest first)"
        elif r.get("ttl") is not None and (not isinstance(r["ttl"], int) or isinstance(r["ttl"], bool)):
            wrong = "ttl", "a whole number of seconds or null"
        if wrong:
            field, want = wrong
            has = f'has "{field}": {codec.short(r[field])} ({type(r[field]).__name__})' if field in r \
                else f'has no "{field}"'
            raise StoreError(f"{where}: the record of session {session} {has}, which must be {want}; each record "
                             f"is {RECORD} (docs/oracle.md \"Readers\")")

    def foreign(self, owned) -> Iterable[dict]:
        return ()

    def check(self) -> None:
        pass
