"""The run folder's paths (docs/CONTRACTS.md "Run folder"): every part names a file through here.

    results/<run>/
      run.json          what ran, its phase, verdict and exit code
      journal/*.jsonl   the client history (one shard per Locust process or worker)
      workers/*.jsonl   workers' own copies of their shards
      steps.jsonl       load step boundaries
      chaos.jsonl       the fault timeline; chaos/outstanding.json: faults not yet recovered
      telemetry.jsonl   store INFO and Locust processes' RSS, sampled during the load
      store/            the snapshot of the final reads
      audit/            anomalies.jsonl, sessions.csv, windows.csv, summary.json
      audit/rolling/    the rolling audit's progress and judgements (--audit-every); follow.log its output
      locust/           Locust's own CSV and HTML
      report.html, charts/
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable


class AuditBusy(RuntimeError):
    """Another audit of the same run folder holds its lock."""


@dataclass(frozen=True)
class RunFolder:
    path: Path

    def __init__(self, path: str | Path):
        object.__setattr__(self, "path", Path(path))

    @property
    def name(self) -> str:
        return self.path.name

    run_json = property(lambda self: self.path / "run.json")
    journal = property(lambda self: self.path / "journal")
    workers = property(lambda self: self.path / "workers")
    steps = property(lambda self: self.path / "steps.jsonl")
    chaos = property(lambda self: self.path / "chaos.jsonl")
    telemetry = property(lambda self: self.path / "telemetry.jsonl")
    outstanding = property(lambda self: self.path / "chaos" / "outstanding.json")
    store = property(lambda self: self.path / "store")
    store_reading = property(lambda self: self.path / "store.reading")  # a read in progress (oracle/snapshot.py)
    audit = property(lambda self: self.path / "audit")
    anomalies = property(lambda self: self.path / "audit" / "anomalies.jsonl")
    summary = property(lambda self: self.path / "audit" / "summary.json")
    sessions_csv = property(lambda self: self.path / "audit" / "sessions.csv")
    windows_csv = property(lambda self: self.path / "audit" / "windows.csv")
    rolling_progress = property(lambda self: self.path / "audit" / "rolling" / "progress.json")
    locust = property(lambda self: self.path / "locust")
    report = property(lambda self: self.path / "report.html")
    charts = property(lambda self: self.path / "charts")
    hangup_log = property(lambda self: self.path / "hangup.log")  # the output once the terminal closed

    def snapshot_part(self, partition: int, reading: bool = False) -> Path:
        """The snapshot's sessions of one partition of the audit (oracle/judge.py); ``reading``: of the read in
        progress, which replaces the snapshot when it completes."""
        return (self.store_reading if reading else self.store) / f"sessions.{partition:02d}.jsonl"

    def audit_part(self, partition: int, name: str) -> Path:
        """A file one partition of the audit writes before they are put together (``audit/parts/``)."""
        (self.audit / "parts").mkdir(parents=True, exist_ok=True)
        return self.audit / "parts" / f"{name}.{partition:02d}"

    def rolling_part(self, partition: int, name: str) -> Path:
        """What the rolling audit wrote of one partition (``audit/rolling/``): its judgements and snapshot lines."""
        (self.audit / "rolling").mkdir(parents=True, exist_ok=True)
        return self.audit / "rolling" / f"{name}.{partition:02d}.jsonl"

    def shards(self) -> list[Path]:
        """The journal's shards, in name order; OSError when journal/ cannot be listed (``jsonl_files``)."""
        return jsonl_files(self.journal)

    def worker_copies(self) -> list[Path]:
        """The workers' own copies of their shards (``workers/*.jsonl``), in name order; as ``shards``."""
        return jsonl_files(self.workers)

    def journal_bytes(self) -> int:
        """The size of every journal file (the shards and the workers' copies), as the audit records it in its
        summary: a summary of a journal that changed since (audited while the run went on, a journal replaced)
        is not the run's verdict. Sizes, not times: a copied or downloaded folder keeps sizes, not times."""
        return sum(p.stat().st_size for p in self.shards() + self.worker_copies() if p.is_file())

    def journal_shard(self, name: str) -> Path:
        return self.journal / f"{name}.jsonl"

    def worker_shard(self, worker_id: str) -> Path:
        return self.workers / f"{worker_id}.jsonl"

    @contextlib.contextmanager
    def audit_lock(self):
        """Held while an audit writes audit/ and store/: a second audit of the run at the same time stops at once
        (``AuditBusy``), where it failed on the first one's half-written files ("cannot read store.reading/
        meta.json"). A folder where no lock file can be made (read-only) is audited unlocked, as before."""
        try:
            self.audit.mkdir(exist_ok=True)  # never the run folder itself: a mistyped path is no run
            lock = open(self.audit / ".lock", "a+b")
        except OSError:
            yield
            return
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AuditBusy(f"{self.path}: another audit of this run is running; wait for it to finish, "
                                "then audit again if need be") from None
            yield

    @property
    def running_lock(self) -> Path:
        return self.path / ".running.lock"

    def hold_running(self) -> BinaryIO | None:
        """The lock the Locust process holds while this run goes on (close the file to let go; the kernel lets go
        of a killed one's): so a run.json with no end can be told from a run that ended without recording it (killed,
        or its disk full), which a nightly trend skipped as still going. None where no lock can be made."""
        try:
            lock = open(self.running_lock, "a+b")
        except OSError:
            return None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            return None
        return lock

    def running(self) -> bool | None:
        """True while the process that holds the run (``hold_running``) goes on, False once it let go or died; None
        when nothing can tell (no lock file: an older run, or a folder where none could be made)."""
        try:
            lock = open(self.running_lock, "rb")
        except OSError:
            return None
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                return None
            return False

    def is_run(self) -> bool:
        """run.json, a journal or an audit: a folder holding any is a run's (a new run there would be judged with
        it, or an audit left there taken for its verdict)."""
        return self.run_json.is_file() or self.journal.is_dir() or self.summary.is_file()

    def enclosing_run(self) -> Path | None:
        """The run folder this folder lies inside (an ancestor holding run.json, journal/ or an audit), or None.
        A run made in another's store/ or journal/ is lost or misread: a live re-audit of that run replaces its
        store/, and its journal/ reads the new run's files as its own shards."""
        here = Path(os.path.realpath(self.path))  # a link into another run is inside it too
        for parent in [*Path(self.path).absolute().parents, *here.parents]:
            if RunFolder(parent).is_run():
                return parent
        return None


class CannotList(OSError):
    """A folder of the run that is there but cannot be listed (no read permission): said as such, where Path.glob
    returned nothing and a journal/ without read permission was "no journal" or "a journal that has shrunk"."""

    def __str__(self) -> str:
        return f"cannot list {self.filename}: {self.strerror}"


def jsonl_files(directory: Path) -> list[Path]:
    """The ``*.jsonl`` files in ``directory`` (not hidden ones, as glob), in name order; none when it is not there
    or not a directory; CannotList (an OSError naming it) when it cannot be listed."""
    try:
        with os.scandir(directory) as entries:
            return sorted(directory / e.name for e in entries if e.name.endswith(".jsonl") and e.name[0] != ".")
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise CannotList(exc.errno, exc.strerror or str(exc), str(directory)) from None


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str | None:
    """What a file that is neither regular nor a directory is ("a FIFO"); None for those two."""
    return next((name for test, name in _KINDS if test(mode)), None)


def special_kind(path: str | Path) -> str | None:
    """What ``path`` is when it is neither a regular file nor a directory ("a FIFO", "a character device"), else
    None; OSError when it cannot be looked at (FileNotFoundError: not there)."""
    return _kind(os.stat(path).st_mode)


def open_regular(path: str | Path) -> BinaryIO:
    """A run-folder file opened for reading; OSError (with the file name) when it is not a regular file:
    a FIFO never opens without a writer, and a link to /dev/zero never ends. (A directory fails in open.)"""
    kind = special_kind(path)
    if kind is not None:
        raise OSError(errno.EINVAL, f"not a regular file but {kind}", str(path))
    return open(path, "rb")


def open_append(path: str | Path) -> BinaryIO:
    """``path`` opened to append, only as a regular file (a symlink is followed, as ``open_regular`` does);
    OSError naming the path otherwise. O_NONBLOCK, because a plain open of a FIFO waits for a reader forever
    (without one the open fails with ENXIO; with one, or for a device, fstat of what was opened refuses it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        mode = os.stat(path).st_mode
    else:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            return os.fdopen(fd, "ab")
        os.close(fd)
    raise OSError(errno.EINVAL, f"not a regular file but {_kind(mode) or 'some other file'}", str(path))


def detach_output(path: str | Path) -> None:
    """The terminal is gone (SIGHUP): stdout and stderr go on in ``path`` (appended; /dev/null when it cannot be
    opened), where a write cannot fail with EIO and stop whatever was printing half way (a heal, the audit)."""
    for std in (sys.stdout, sys.stderr):
        try:
            std.flush()
        except (OSError, ValueError):  # the dead terminal, or a closed stream: what it held is lost anyway
            pass
    try:
        fh = open_append(path)
    except OSError:
        fh = open(os.devnull, "ab")
    with fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)


def read_regular(path: str | Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of a regular file (one more than allowed says it is too long, without reading
    it all); OSError as ``open_regular``'s for a FIFO or a device."""
    with open_regular(path) as fh:
        return fh.read(limit + 1)


def write_file(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` whole or not at all: ``write`` fills a new file beside it, which is renamed over it once
    complete, so a full device or a crash leaves the earlier file as it was (a report's chart truncated in place
    was lost) and no temporary behind. A directory, FIFO or device at ``path`` is refused, never opened (opening
    a FIFO waits for a reader forever). Through a symbolic link, the file it points to is replaced. OSError always
    names ``path`` (a full device's names no file, a temporary's the wrong one): the user's path that cannot be
    written, which the CLIs report as bad input (exit 2)."""
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    if stat.S_ISDIR(mode):  # as open() says it
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    kind = _kind(mode)
    if kind is not None:
        raise OSError(errno.EINVAL, f"not a regular file but {kind}; not replaced", str(path))
    tmp = target.with_name(f"{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as fh:  # umask applies
            write(fh)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    return Path(path)


def write_text(path: str | Path, text: str) -> None:
    """``text`` as UTF-8 into ``path``, through ``write_file``: whole or not at all, named when it fails."""
    write_file(path, lambda fh: fh.write(text.encode("utf-8")))


# A write the device refused: full, over quota, read-only, a file too big, failing. Socket errors never carry these.
LOCAL_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO})


class CannotWrite(Exception):
    """The run folder's device refused a write (full, read-only): exit 2, the user's disk, never the store's
    failure nor a bug. Raised once the half-written files are removed; what was recorded before stands."""


def cannot_write(exc: BaseException, what: str | Path) -> CannotWrite | None:
    """``exc`` as ``CannotWrite`` when it is a write the device refused (``what``: what was being written, when
    the error names no file), else None."""
    if isinstance(exc, OSError) and exc.errno in LOCAL_WRITE_ERRNOS:
        return CannotWrite(f"cannot write the run folder: {exc.strerror or exc} (writing {exc.filename or what})")
    return None
