"""Run one function over several parts of the sessions in forked processes (``--jobs``).

Forked, not spawned: the journal the parent loaded is shared copy-on-write instead of being
pickled to each process, and the function may be a closure. The parent starts no threads
(a pipe per process, read in order), so this also works from a gevent-patched Locust
process. A process that dies without answering is reported with its exit code.
"""
from __future__ import annotations

import multiprocessing
import traceback
from typing import Callable


class WorkerError(Exception):
    """A worker process crashed or raised something it could not report as a result."""


def run_parts(work: Callable[[int, list], object], parts: list[list], here: bool = False) -> list:
    """``[work(0, parts[0]), work(1, parts[1]), ...]``, each call in its own forked process.

    With ``here``, part 0 runs in this process while the others run in theirs (its result
    needs no pickling, and this process would only have waited).
    """
    ctx = multiprocessing.get_context("fork")
    started = []
    try:
        for k, part in enumerate(parts):
            if here and k == 0:
                continue
            receive, send = ctx.Pipe(duplex=False)
            process = ctx.Process(target=_worker, args=(send, work, k, part), name=f"oracle-part-{k}", daemon=True)
            process.start()
            send.close()
            started.append((process, receive))
        results = [work(0, parts[0])] if here and parts else []
        for k, (process, receive) in enumerate(started, len(results)):
            try:
                result = receive.recv()
            except EOFError:
                process.join(10)
                raise WorkerError(f"audit worker {k} died without a result (exit code {process.exitcode})") from None
            if isinstance(result, _Failed):
                raise WorkerError(f"audit worker {k} failed:\n{result.traceback}")
            results.append(result)
        return results
    finally:
        for process, receive in started:
            receive.close()
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(5)


class _Failed:
    """What a worker sends instead of its result when ``work`` raised."""

    def __init__(self, traceback_text: str):
        self.traceback = traceback_text


def _worker(send, work, k: int, part: list) -> None:
    try:
        result = work(k, part)
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        result = _Failed(traceback.format_exc())
    send.send(result)
    send.close()


def split(items: list, parts: int) -> list[list]:
    """Contiguous, nearly equal slices (order kept, so the parts concatenate to the whole)."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + size + (k < extra)
        out.append(items[start:end])
        start = end
    return out
