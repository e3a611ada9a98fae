"""Turns over a WebSocket (``--websocket``), as a chat page talks to its bot: one connection per conversation,
opened at its first turn; a turn is a text frame (the body the contract builds), answered by the first frame
that holds the reply (--reply-field). Other frames (typing, acknowledgements) are skipped.

Outcomes follow Jepsen's rule as HTTP turns do (locustfiles/outcome.py), where a socket allows more: a turn
whose connection could not be opened (refused, a handshake the bot rejected) never left, so it is ``fail``;
once the frame is sent, a closed connection or no reply by --timeout is ``info``, and the connection is
dropped so that a late reply can never be taken for the next turn's (the next turn opens a new one).
"""
from __future__ import annotations

from time import monotonic

import websocket
from gevent.lock import Semaphore

from locustfiles.outcome import NotSent, classify_error


class SocketTurns:
    """One conversation's connection. Turns take it one at a time (a burst's turns go one after the other:
    a reply frame names no turn, so two turns in flight on one connection could take each other's)."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.socket: websocket.WebSocket | None = None
        self.lock = Semaphore()

    def exchange(self, url: str, frame: bytes, headers: dict, has_reply) -> tuple:
        """Send ``frame`` (opening the connection to ``url`` with ``headers`` first when there is none); (200, the
        reply frame, None) once one ``has_reply``, else (0, None, the error)."""
        with self.lock:
            deadline = monotonic() + self.timeout
            try:
                if self.socket is None:
                    self.socket = websocket.create_connection(
                        url, timeout=self.timeout, header=[f"{name}: {value}" for name, value in headers.items()])
            except websocket.WebSocketBadStatusException as exc:
                return 0, None, NotSent(f"not sent: the WebSocket handshake was answered HTTP {exc.status_code}")
            except Exception as exc:  # noqa: BLE001 - every other way a connection fails to open
                return 0, None, NotSent(f"not sent: the WebSocket did not open ({classify_error(exc)[1]})")
            try:
                self.socket.send(frame.decode("utf-8"))
                while True:
                    left = deadline - monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no reply frame within {self.timeout:g}s")
                    self.socket.settimeout(left)
                    try:
                        data = self.socket.recv()
                    except websocket.WebSocketTimeoutException:
                        raise TimeoutError(f"no reply frame within {self.timeout:g}s") from None
                    data = data.encode("utf-8") if isinstance(data, str) else data
                    if has_reply(data):
                        return 200, data, None
            except Exception as exc:  # noqa: BLE001 - sent: whatever happens now, the bot may have it
                self.close()
                return 0, None, exc
            except BaseException:  # the stop: its reply would come to nobody
                self.close()
                raise

    def close(self) -> None:
        """Say goodbye (a close frame) and drop the connection, without waiting for the bot's: websocket-client's
        own ``close`` waits for it inside a bare ``except``, which swallowed the stop's GreenletExit, and the
        user went on holding conversations while Locust waited for it to stop."""
        if self.socket is not None:
            try:
                self.socket.send_close()
            except Exception:  # noqa: BLE001 - already gone
                pass
            finally:
                self.socket.shutdown()
                self.socket = None
