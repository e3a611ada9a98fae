"""The snapshot of the final reads, ``store/`` in the run folder (format in docs/CONTRACTS.md).

Written while the read streams, so a store that dies mid-read leaves what was read, marked
``complete: false`` in meta.json. Re-auditing from a complete snapshot needs no store.

A session whose entries are all JSON messages (the usual case) is written with
``"entries_as": "json"``: its entries are embedded as the JSON values they are, byte for byte,
instead of being escaped into strings. That costs a join, not an escape of every quote, and
reads back as the same bytes (msgspec hands out each element's raw span).
"""
from __future__ import annotations

import base64
import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Annotated, Iterator, Literal, Optional

import msgspec

from contracts import codec
from contracts.jsonl import LINE_BYTES, JsonlError, line_chunks, read_jsonl
from contracts.runfolder import RunFolder, cannot_write, write_text
from oracle.history import PARTITIONS
from oracle.store import RAW_TYPES, RawSession, StoreOptions, own_ids_template


class SnapshotError(Exception):
    """No usable snapshot (missing, incomplete or unreadable)."""


def _raw_entry(entry):
    if isinstance(entry, str):
        return entry
    if isinstance(entry, (bytes, bytearray)):
        try:
            return bytes(entry).decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(entry).decode("ascii")}
    return codec.dumps(entry).decode()  # an already decoded message (HTTP, user function)


def _entries_for_snapshot(entries: list) -> list:
    """The entries as the snapshot stores them: text when they are utf-8, else base64 / JSON.

    Fast path: join the session's entries, decode once and split again (two C calls, not one
    per message). It is exact only when no entry holds the separator, which the part count
    tells: each separator inside an entry would add a part.
    """
    try:
        parts = b"\n".join(entries).decode("utf-8").split("\n")
        if len(parts) == len(entries):
            return parts
    except (UnicodeDecodeError, TypeError):
        pass
    return [_raw_entry(e) for e in entries]


def _json_line(r: RawSession) -> bytes | None:
    """The session's line with its entries embedded as JSON, or None when they cannot be (a newline
    between tokens would split the line; bytes that are not utf-8 would spoil it)."""
    try:
        joined = b",".join(r.entries)
    except TypeError:  # str entries (a user's reader function): written as text
        return None
    if b"\n" in joined or b"\r" in joined or not (joined.isascii() or _utf8(joined)):
        return None
    head = codec.dumps_line({**_head(r), "entries_as": "json"})
    return head[:-2] + b',"entries":[' + joined + b"]}\n"


def _text_line(r: RawSession) -> bytes:
    """The session's line with its entries as strings (base64 / JSON where they are not text)."""
    return codec.dumps_line({**_head(r), "entries": _entries_for_snapshot(r.entries)})


def _head(r: RawSession) -> dict:
    return {"session": r.session, "key": r.key, "exists": r.exists, "ttl": r.ttl, "type": r.type}


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def session_lines(raws: list[RawSession], decoded: list[bool] | None = None) -> bytes:
    """The snapshot lines of a batch (``decoded[i]``: every entry of ``raws[i]`` is bytes that decoded
    as a message, so it can be embedded as the JSON it is)."""
    lines = [_json_line(r) if decoded and decoded[i] else None for i, r in enumerate(raws)]
    return b"".join(line or _text_line(r) for line, r in zip(lines, raws))


class SnapshotWriter:
    """meta.json and foreign.jsonl; the sessions are written by the audit's partitions, one file each
    (``RunFolder.snapshot_part(p, reading=True)``), in the order each judged them.

    A read is written beside the snapshot (``store.reading/``) and replaces it when it completes, or when
    it failed and there was no complete snapshot to keep: a re-audit whose store has since been flushed,
    or died mid-read, never destroys the evidence an earlier audit kept."""

    def __init__(self, run_dir: Path, options: StoreOptions, evidence: dict, partitions: int):
        folder = self.folder = RunFolder(run_dir)
        self.dir = folder.store_reading
        if folder.store.is_symlink() and not folder.store.exists():  # the read could never take its place (it
            raise SnapshotError(dangling(folder.store))  # said "cannot read store.reading: Not a directory")
        shutil.rmtree(self.dir, ignore_errors=True)  # a killed read's
        self.kept_earlier = False  # closed: a failed read left the earlier complete snapshot in place
        self.meta = {
            "reader": options.name(), "url": options.where(), "key_template": options.given_template(),
            "format": options.format, "direction": options.direction,
            "shape": {"role_field": options.role_field, "content_field": options.content_field,
                      "user_roles": list(options.user_roles), "assistant_roles": list(options.assistant_roles),
                      "messages_field": options.messages_field},
            "read_start": time.time(), "read_end": None, "complete": False, "sessions_read": 0,
            "foreign_keys": 0, "error": None, "partitions": partitions,
            "files": [folder.snapshot_part(p).name for p in range(partitions)], "evidence": evidence,
        }
        self.closed = False
        self.foreign_file = None
        try:
            self.dir.mkdir(parents=True)
            self._write_meta()
            self.foreign_file = open(self.dir / "foreign.jsonl", "wb")
        except OSError as exc:  # a full device: this read goes, the snapshot before it stands
            self.discard()
            raise cannot_write(exc, self.dir / "meta.json") or exc

    def _write_meta(self) -> None:
        write_text(self.dir / "meta.json", codec.dumps_document(self.meta))

    def discard(self) -> None:
        """Remove this read (``store.reading/``), leaving ``store/`` as it was: the device refused a write, so
        there is nothing this read could keep."""
        self.closed = True
        with contextlib.suppress(OSError):
            if self.foreign_file is not None:
                self.foreign_file.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def write_foreign(self, record: dict) -> None:
        self.foreign_file.write(codec.dumps_line(record))
        self.meta["foreign_keys"] += 1

    def close(self, complete: bool, sessions: int | None = None, error: str | None = None) -> None:
        """``sessions``: how many were read (None: count the partitions' lines, after a failure). A complete read
        by the HTTP or function reader that found none of the sessions raises TemplateMismatch, leaving this writer
        open for the audit to close as incomplete."""
        if complete and sessions and self.meta["reader"] != "redis":
            self._found_some(sessions)
        self.closed = True
        try:
            self.foreign_file.close()
            if sessions is None:
                sessions = sum(sum(1 for _ in open(self.dir / name, "rb")) for name in self.meta["files"]
                               if (self.dir / name).exists())
            self.meta.update(complete=complete, error=error, read_end=time.time(), sessions_read=sessions)
            self._write_meta()
        except OSError:  # a full device: no meta.json to say what this read is, so it goes
            self.discard()
            raise
        store = self.folder.store
        if not complete and _complete(store):  # the earlier snapshot stands; this read's part goes
            shutil.rmtree(self.dir, ignore_errors=True)
            self.kept_earlier = True
            return
        old = store.with_name("store.replaced")
        shutil.rmtree(old, ignore_errors=True)
        if store.exists():
            store.rename(old)
        self.dir.rename(store)
        shutil.rmtree(old, ignore_errors=True)

    def _found_some(self, sessions: int) -> None:
        """TemplateMismatch when no session read has a history: the URL or function does not read where the bot
        writes, which a verdict would call a total loss. Redis has its own diagnosis (oracle/keys.py
        ``diagnose_missing_keys``); these readers cannot look elsewhere, so every session gone is enough. Stops at
        the first session found, so a healthy read costs a line."""
        from oracle.keys import TemplateMismatch

        example = None
        for name in self.meta["files"]:
            for session, raw in snapshot_lines(self.folder.path, self.dir / name):
                if _decode_head(raw).exists:
                    return
                example = example or session
        if example is None:  # no session line at all: nothing was read to judge by
            return
        url = self.meta["url"]
        if self.meta["reader"] == "http":
            said = (f"--http-url {url} answered 404/410 (no history) for every one of the {sessions} sessions of this "
                    f"run (for example session {example}: GET {url.replace('{session}', example)})")
        else:
            said = (f"--reader {url} returned no history for any of the {sessions} sessions of this run (each left "
                    f"out or \"exists\": false; for example session {example})")
        raise TemplateMismatch(f"{said}: it reads somewhere the bot does not write, so the options are wrong (or "
                               "the store was emptied). Nothing was judged.")


def dangling(store: Path) -> str:
    """What to say of a ``store`` that is a symbolic link to nothing (its target gone or never there)."""
    try:
        to = os.readlink(store)
    except OSError:
        to = "?"
    return (f"{store} is a dangling symbolic link (to {to}, which does not exist): the store's snapshot is not there "
            f"and a new read cannot replace it; remove the link (or restore what it points to) and audit again")


def _complete(store: Path) -> bool:
    """``store`` holds a snapshot whose read completed."""
    try:
        return codec.load_document(store / "meta.json").get("complete") is True
    except (OSError, codec.DecodeError, AttributeError):
        return False


def read_meta(run_dir: Path) -> dict:
    store = RunFolder(run_dir).store
    path = store / "meta.json"
    if store.is_symlink() and not store.exists():  # named as what it is, not as a meta.json missing
        raise SnapshotError(f"{run_dir} has no store snapshot: {dangling(store)} (with --store-url, --http-url or "
                            "--reader to read the store again)")
    if not path.exists():
        raise SnapshotError(f"{run_dir} has no store snapshot ({path} missing): "
                            "pass --store-url (or --http-url / --reader) to read the store, "
                            "or re-run inside the run")
    try:
        meta = codec.load_document(path)
        msgspec.convert(meta, _Meta)  # the fields a re-audit uses, of the types it uses them as
    except codec.DecodeError as exc:
        raise SnapshotError(str(exc)) from None
    except msgspec.ValidationError as exc:
        raise SnapshotError(f"{path}: {exc}: not a goldfish snapshot's meta.json") from None
    wrong = _meta_disagrees(meta, RunFolder(run_dir))
    if wrong:
        raise SnapshotError(f"{path}: {wrong}: not a goldfish snapshot's meta.json (damaged or edited). Read the store "
                            "again: pass --store-url (or --http-url / --reader)")
    return meta


def _meta_disagrees(meta: dict, folder: RunFolder) -> str | None:
    """What of meta.json no goldfish writes, beyond its types: a key template without ``{session}`` (a re-audit's
    messages would name keys that never were), ``files`` other than the partitions' files (``../../../etc/passwd``,
    or ``[]``: ignored by the judge, which reads every partition's file), or a ``shape`` of null (the re-audit
    decoded the entries with the defaults, whatever shape the store was read with)."""
    template = meta.get("key_template")
    if template is not None and "{session}" not in own_ids_template(template)[0]:
        return f"`$.key_template` {codec.short(template)} does not contain {{session}} (or {{conversation}})"
    files = meta.get("files")
    if files is not None and isinstance(meta.get("partitions"), int):
        expected = [folder.snapshot_part(p).name for p in range(meta["partitions"])]
        if files != expected:
            return (f"`$.files` is {codec.short(files)}, not the snapshot's {len(expected)} session files "
                    f"({expected[0]} ... {expected[-1]})")
    if "shape" in meta and meta["shape"] is None:
        return "`$.shape` is null: the element shape the store was read with is unknown"
    return None


class _Shape(msgspec.Struct):
    role_field: str = ""  # given, a field is text (null was a traceback)
    content_field: str = ""
    user_roles: list[str] = []
    assistant_roles: list[str] = []
    messages_field: str = ""


class _Evidence(msgspec.Struct):
    ttl_in_use: bool = False
    evictions: list[tuple[float, int]] = []
    expiries: list[tuple[float, int]] = []
    ttl_floor: Optional[Annotated[float, msgspec.Meta(ge=0)]] = None
    ttl_at: Optional[float] = None
    missing_keys: Optional[dict] = None


class _Meta(msgspec.Struct):
    """What ``read_meta`` checks of meta.json (the writer is ``SnapshotWriter``)."""
    complete: bool = False
    partitions: Optional[Literal[PARTITIONS]] = None  # none: an older goldfish's; another number: damage
    sessions_read: Optional[int] = None
    key_template: Optional[str] = None  # given, it holds {session} (_meta_disagrees)
    files: Optional[list[str]] = None  # given, the partitions' files in order (_meta_disagrees)
    format: Optional[Literal["auto", "list", "blob"]] = None  # what StoreOptions.validate accepts
    direction: Optional[Literal["lpush", "rpush"]] = None
    shape: Optional[_Shape] = None
    evidence: Optional[_Evidence] = None


def options_from_meta(meta: dict) -> StoreOptions:
    """The element shape the snapshot was read with, so a re-audit decodes it the same way."""
    shape = meta.get("shape") or {}
    key_template, own_ids = own_ids_template(meta.get("key_template") or "message_store:{session}")
    options = StoreOptions(key_template=key_template, own_ids=own_ids,
                           format=meta.get("format") or "auto", direction=meta.get("direction") or "lpush")
    options.role_field = shape.get("role_field", options.role_field)
    options.content_field = shape.get("content_field", options.content_field)
    options.user_roles = tuple(shape.get("user_roles", options.user_roles))
    options.assistant_roles = tuple(shape.get("assistant_roles", options.assistant_roles))
    options.messages_field = shape.get("messages_field", options.messages_field)
    return options


def _from_snapshot(entry):
    if isinstance(entry, dict) and set(entry) == {"b64"}:
        try:
            return base64.b64decode(entry["b64"], validate=True)
        except (TypeError, ValueError) as exc:  # binascii.Error is a ValueError
            raise ValueError(f"entry {codec.short(entry)} is not base64 ({exc})") from None
    return entry


class _Fields(msgspec.Struct):
    """A snapshot line's fields but its entries, of the types and values goldfish writes (checked on every line by
    ``snapshot_lines``, which names the file and line; ``snapshot_session`` checks them again)."""
    session: str
    exists: bool
    key: str = ""
    ttl: Optional[int] = None
    type: Optional[Literal[RAW_TYPES]] = None
    entries_as: Literal["json", "text"] = "text"


class _Line(_Fields):
    """A snapshot line with its entries left as raw JSON spans (decoded below as the line says)."""
    entries: Optional[list[msgspec.Raw]] = None  # null or missing: the exact path below says if that is allowed


_decode_line = msgspec.json.Decoder(_Line).decode


def snapshot_session(line: bytes) -> RawSession:
    """One snapshot line as the live reader would have returned it; ValueError if unreadable."""
    try:
        r = _decode_line(line)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        r = None
    if r is not None and r.entries and not r.exists:
        raise ValueError(f"not a snapshot session (exists is false, but it holds {len(r.entries)} entries)")
    if r is not None and r.entries_as == "json" and r.entries is not None:
        return RawSession(r.session, r.key, r.exists, r.ttl, [bytes(e) for e in r.entries],
                          r.type or ("list" if r.exists else "none"))
    r = codec.loads(line)  # written as text (or by an older goldfish, or by hand): the exact path
    try:
        msgspec.convert(r, _Fields)  # a ValueError: a field of the wrong type or value
        entries = r.get("entries")
        if entries and not r["exists"]:  # a missing key holds nothing: which of the two is the store's?
            raise ValueError(f"exists is false, but it holds {len(entries)} entries")
        if entries is None and r["exists"]:  # goldfish writes [] (and exists: false for a missing key)
            raise TypeError("entries is null or missing, but exists is true")
        if entries is not None and not isinstance(entries, list):  # a string or an object: read as its characters
            raise TypeError(f"entries is {type(entries).__name__}, not a list")
        return RawSession(str(r["session"]), str(r.get("key", "")), bool(r["exists"]), r.get("ttl"),
                          [_from_snapshot(e) for e in entries or []],
                          r.get("type") or ("list" if r["exists"] else "none"))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"not a snapshot session ({type(exc).__name__}: {exc})") from None


def _why_not_json(raw: bytes, exc: Exception) -> str:
    """codec.loads's reason when it refuses the line too (a byte that is not UTF-8 is named with its offset, where
    msgspec said "invalid character (byte 0)", read as a NUL: input hunt 14), else msgspec's."""
    try:
        codec.loads(raw)
    except codec.DecodeError as why:
        return str(why)
    return f"not JSON ({exc})"


def snapshot_lines(run_dir: Path, path: Path) -> Iterator[tuple[str, bytes]]:
    """(session, raw line) of one file of the snapshot (a partition's), in the order the audit wrote it."""
    if not path.exists() and not path.is_symlink():  # a link that leads nowhere (a loop) is opened: its error names it
        return
    # one line is one session's whole stored history, as the audit held it: no line of its own is too long
    for before, lines, _ in line_chunks(path, limit=max(LINE_BYTES, path.stat().st_size)):
        for i, raw in enumerate(lines):
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte order mark (an editor's save), skipped as every
            if not raw.strip():                      # reader of a run folder's .jsonl skips it (input hunt 16)
                continue
            try:
                head = _decode_head(raw)
                first = bytes(memoryview(head.entries)[:1])  # b"": no entries at all
                if first not in (b"[", b"n", b""):
                    raise msgspec.ValidationError("Expected `array | null` - at `$.entries`")
                if head.type == "none" and head.exists:  # as "exists is false, but it holds N entries" (input hunt 16)
                    raise SnapshotError(f"{path}:{before + i + 1}: not a snapshot session (type is \"none\", no such "
                                        "key, but exists is true): the snapshot is damaged. Read the store again: pass "
                                        "--store-url (or --http-url / --reader)")
                if first != b"[" and head.exists:  # a key that exists holds a list; a missing one says exists: false
                    raise msgspec.ValidationError("`$.entries` is null or missing, but `$.exists` is true: "
                                                  "a key that exists holds a list of entries")
                if not head.exists and first == b"[" and bytes(head.entries)[1:].lstrip()[:1] != b"]":
                    raise SnapshotError(f"{path}:{before + i + 1}: not a snapshot session (exists is false, but it "
                                        f"holds {len(msgspec.json.decode(head.entries))} entries): the snapshot is "
                                        "damaged. Read the store again: pass --store-url (or --http-url / --reader)")
                if b'"b64"' in raw:  # a non-utf-8 entry: its base64 is checked here, where the line is known
                    _check_session(path, before + i + 1, raw)
                yield head.session, raw
            except msgspec.ValidationError as exc:
                raise SnapshotError(f"{path}:{before + i + 1}: not a snapshot line: {exc}") from None
            except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                raise SnapshotError(f"{path}:{before + i + 1}: {_why_not_json(raw, exc)}") from None
            except RecursionError:
                raise SnapshotError(f"{path}:{before + i + 1}: not JSON: nested too deeply") from None


def _check_session(path: Path, number: int, raw: bytes) -> None:
    """SnapshotError at ``path:number`` when the line does not read back as a session (an entry whose base64 does
    not decode was a traceback in the judge, which has the line but not its place)."""
    try:
        snapshot_session(raw)
    except ValueError as exc:
        raise SnapshotError(f"{path}:{number}: {exc}: the snapshot is damaged. Read the store again: pass "
                            "--store-url (or --http-url / --reader)") from None


class _Head(_Fields):
    entries: msgspec.Raw = msgspec.Raw(b"")  # its span only (empty: no entries key): checked where the line is known


_decode_head = msgspec.json.Decoder(_Head).decode


def read_foreign(run_dir: Path) -> Iterator[dict]:
    path = RunFolder(run_dir).store / "foreign.jsonl"
    if path.exists():
        try:
            yield from read_jsonl(path)
        except JsonlError as exc:
            raise SnapshotError(f"unreadable snapshot: {exc}") from None
