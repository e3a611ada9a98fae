"""Read stored histories with a user function named ``module:function``.

The function gets a batch of session ids (a list of str) and returns, in any order, one
dict per session: ``{"session": id, "exists": bool, "entries": [...], "ttl": int|None,
"key": str}``; entries oldest first, each a str/bytes (raw JSON) or an already decoded
message dict. A session it leaves out counts as not found (``exists: false``).
"""
from __future__ import annotations

import importlib
from typing import Iterable, Iterator

from oracle.store import RawSession, StoreError, StoreOptions, batches


def load_function(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise StoreError(f"--reader {spec!r} must look like package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StoreError(f"--reader {spec!r}: cannot import {module_name}: {exc}") from exc
    func = getattr(module, attr, None)
    if not callable(func):
        raise StoreError(f"--reader {spec!r}: {module_name} has no function {attr!r}")
    return func


class FunctionReader:
    def __init__(self, options: StoreOptions):
        self.options = options
        self.func = load_function(options.reader)

    def read(self, sessions: list[str]) -> Iterator[list[RawSession]]:
        for batch in batches(sessions, self.options.batch):
            try:
                got = {str(r["session"]): r for r in self.func(list(batch))}
            except StoreError:
                raise
            except Exception as exc:  # noqa: BLE001 - user code: any failure is a store failure
                raise StoreError(f"reader {self.options.reader} failed: {exc!r}") from exc
            out = []
            for session in batch:
                r = got.get(session)
                if r is None or not r.get("exists", True):
                    out.append(RawSession(session, str((r or {}).get("key") or session), False, None, [], "none"))
                else:
                    out.append(RawSession(session, str(r.get("key") or session), True, r.get("ttl"),
                                          list(r.get("entries") or []), str(r.get("type") or "list")))
            yield out

    def foreign(self, owned) -> Iterable[dict]:
        return ()

    def check(self) -> None:
        pass
