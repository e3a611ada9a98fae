"""Read the next batch while the current one is judged: the store works while we compute.

A single background thread runs the reader's iterator one batch ahead (bounded queue, so
memory stays at two batches). A store error raised in the thread is re-raised in the caller
at the point the failed batch would have arrived, so progress messages stay exact.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator

_END = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetched(iterator: Iterator, depth: int = 1) -> Iterator:
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in iterator:
                if not put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_Failure(exc))
            return
        put(_END)

    thread = threading.Thread(target=produce, name="oracle-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        thread.join(30)
