"""Turns over a WebSocket (``--websocket``), as a chat page talks to its bot: one connection per conversation,
opened at its first turn; a turn is a text frame (the body the contract builds), answered by the first frame
that holds the reply (--reply-field) and came after it was sent. Other frames (typing, acknowledgements) are skipped,
and so are, as no turn's reply:
- the frames already waiting when a turn is sent: a greeting the bot sends on connect, the rest of an earlier reply
  streamed in several frames. A new connection is first pinged and read up to the pong, so that a greeting sent
  with the handshake is read before the first turn leaves; later turns take what is waiting without blocking.
- a frame whose reply is the very message just sent: a chat room's echo of the user's own message. It is the reply
  only when nothing else comes by --timeout (a bot that answers with the message itself).
- with --reply-where (``type=done``: a streamed answer's final frame), a frame it does not keep.
A bot that closes the connection after each answer is read so too: the next turn opens another. A turn sent right
after a reply waits until the connection has been quiet a few milliseconds, so that it is not sent into that close.

Outcomes follow Jepsen's rule as HTTP turns do (locustfiles/outcome.py), where a socket allows more: a turn
whose connection could not be opened (refused, a handshake the bot rejected) never left, so it is ``fail``;
once the frame is sent, a closed connection or no reply by --timeout is ``info``, and the connection is
dropped so that a late reply can never be taken for the next turn's (the next turn opens a new one).
"""
from __future__ import annotations

import select
from time import monotonic

import websocket
from gevent.lock import Semaphore

from locustfiles.contract import NoReply
from locustfiles.outcome import NotSent, classify_error

SETTLE_S = 0.005  # a connection is quiet this long after a reply before the next turn goes on it (SocketTurns.drained)
BARRIER = b"goldfish"  # the ping a new connection is read up to (frames the bot sent with its handshake: a greeting)


class SocketTurns:
    """One conversation's connection. Turns take it one at a time (a burst's turns go one after the other:
    a reply frame names no turn, so two turns in flight on one connection could take each other's)."""

    def __init__(self, timeout: float, on_streamed=None):
        self.timeout = timeout
        self.on_streamed = on_streamed  # called with a frame holding a reply that came after a turn's reply
        self.socket: websocket.WebSocket | None = None
        self.replied = 0.0  # when the last reply came (monotonic)
        self.replies = 0  # replies on the open connection
        self.greetings: list[bytes] = []  # the data frames the open connection brought before its first turn
        self.lock = Semaphore()

    def exchange(self, url: str, frame: bytes, headers: dict, contract, message: str = "") -> tuple:
        """Send ``frame`` (opening the connection to ``url`` with ``headers`` first when there is none, or when the
        bot closed it between turns); (200, the reply frame, None) once one has a reply where ``contract`` says
        (and, with --reply-where on a lone --reply-field, is a frame it keeps) that is not ``message`` echoed back,
        else (0, None, the error)."""
        with self.lock:
            deadline = monotonic() + self.timeout
            try:
                if self.socket is not None and not self.drained(deadline, contract):
                    self.close()  # the bot closed it after the last turn: this one has not left, it opens another
                if self.socket is None:
                    self.socket = websocket.create_connection(
                        url, timeout=self.timeout, header=[f"{name}: {value}" for name, value in headers.items()])
                    self.socket.ping(BARRIER)
                    self.read_to_pong(deadline)
                    self.replies = 0
            except websocket.WebSocketBadStatusException as exc:
                return 0, None, NotSent(f"not sent: the WebSocket handshake was answered HTTP {exc.status_code}")
            except Exception as exc:  # noqa: BLE001 - every other way a connection fails to open
                self.close()
                return 0, None, NotSent(f"not sent: the WebSocket did not open ({classify_error(exc)[1]})")
            echo = None
            try:
                self.socket.send(frame.decode("utf-8"))
                while True:
                    left = deadline - monotonic()
                    if left <= 0:
                        if echo is not None:
                            return 200, echo, None
                        raise TimeoutError(f"no reply frame within {self.timeout:g}s")
                    self.socket.settimeout(left)
                    try:
                        data = self.socket.recv()
                    except websocket.WebSocketTimeoutException:
                        if echo is not None:  # nothing but the message itself came back: that is the answer
                            return 200, echo, None
                        raise TimeoutError(f"no reply frame within {self.timeout:g}s") from None
                    data = data.encode("utf-8") if isinstance(data, str) else data
                    try:
                        text = contract.reply(data)  # with --reply-where, a streamed answer's final frame only
                    except NoReply:
                        continue
                    if text == message and echo is None:
                        echo = data  # the user's own message echoed back (a chat room's): the answer comes next
                        continue
                    self.replied, self.replies = monotonic(), self.replies + 1
                    return 200, data, None
            except Exception as exc:  # noqa: BLE001 - sent: whatever happens now, the bot may have it
                self.close()
                return 0, None, exc
            except BaseException:  # the stop: its reply would come to nobody
                self.close()
                raise

    def waiting(self, within: float = 0.0) -> bool:
        """Whether a frame (or the start of one) is waiting to be read, or comes ``within`` seconds. websocket-client
        reads a frame's bytes and no more, so the socket's (and TLS's decrypted) buffer holds exactly what is unread."""
        sock = self.socket.sock
        if sock is None:
            return False
        pending = getattr(sock, "pending", None)
        return bool(pending and pending()) or bool(select.select([sock], [], [], within)[0])

    def drained(self, deadline: float, contract) -> bool:
        """Read and drop the frames waiting before a turn is sent: they answer no turn of this one (the rest of an
        earlier reply streamed in frames, a greeting). False when the bot closed the connection meanwhile. A turn
        right after a reply (a burst, --think 0) waits until the connection has been quiet SETTLE_S since it: a bot
        that closes after each answer sends its close right behind it, and a turn sent into that close was lost."""
        within = max(self.replied + SETTLE_S - monotonic(), 0.0)
        streamed = False  # a turn's reply counts once, however many frames of it are left over
        while self.waiting(within):
            within = 0.0
            self.socket.settimeout(max(deadline - monotonic(), 0.001))  # a frame half-way in: read it to its end
            try:
                opcode, data = self.socket.recv_data(control_frame=True)
            except (websocket.WebSocketConnectionClosedException, OSError):
                return False
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                return False
            if not streamed and opcode in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY) and \
                    contract.has_reply(data):
                streamed = True
                self.streamed(contract, data)
        return True

    def streamed(self, contract, frame: bytes) -> None:
        """A frame holding the reply came after a turn's reply: each turn took the first such frame, so its recall
        was judged on a piece of the answer (or a late greeting). Warned once a process, and counted
        (``on_streamed``) into run.json's ``streamed_replies``, which makes a FAIL of the run NOT TRUSTED."""
        from locustfiles.conversation import warn_once

        warn_once("streamed", "--websocket: a frame holding reply field %r came after a turn's reply, before "
                  "the next turn: the bot answers in several frames (a streamed answer?)%s; each turn takes "
                  "the first, whose text its recall is judged on: name the frame that holds the whole answer "
                  "with --reply-where (type=done, say); without it a FAIL of such a bot is not to be trusted",
                  contract.reply_field, "" if self.replies > 1 else ", or it greets a new connection after "
                  "the first turn has left (then that turn took the greeting, and every reply came a turn "
                  "late): a greeting with a field of its own is left out with --reply-where (type!=greeting)")
        if self.on_streamed is not None:
            self.on_streamed(frame)

    def read_to_pong(self, deadline: float) -> None:
        """Set aside the frames a new connection brings before the pong of its first ping: a greeting sent with the
        handshake, which no turn asked for, and which may issue the conversation's id (``greetings``)."""
        self.greetings = []
        while True:
            self.socket.settimeout(max(deadline - monotonic(), 0.001))
            opcode, data = self.socket.recv_data(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_PONG and data == BARRIER:
                return
            if opcode in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY) and len(self.greetings) < 8:
                self.greetings.append(data)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                raise ConnectionError("the bot closed the connection before the first turn")

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
