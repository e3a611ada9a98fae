"""A chat bot served over a WebSocket, as a chat page talks to it (for --websocket tests), and how tests run it.

    ws://<host>/ws     each text frame {"session_id": ..., "message": ...} is answered by a typing frame,
                       {"type": "typing"}, then {"type": "message", "reply": <the answer>}
    GET /history/<id>  what it stored: {"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}
    any other path     404 (also the handshake)

Modes: ``memory`` answers from the session's facts; ``forget`` from none (every probe is amnesia); ``drop``
remembers, but closes each connection at its fourth frame, stored and unanswered. Frames that are no turn's reply
(tests/test_websocket_frames.py): ``greet`` sends a welcome on connect; ``echo`` sends the user's own message back
before the answer (a chat room's); ``stream`` sends the answer in token frames ({"type": "token"}) before the
whole of it; ``parrot`` answers with the message itself; ``chatty-forget`` greets and echoes, and remembers nothing;
``close-each`` closes the connection right after each answer; ``greet-late`` sends its welcome ({"type": "greeting"})
50 ms after the connection opened, after the first turn has left (and delays its answers to come after it);
``tokens`` streams the answer in token frames, then {"type": "end"}: no frame holds the whole of it.
``issue-id`` issues the conversation's id on connect ({"type": "session", "session_id": "ws_..."}, as chat widgets
do), and keys its memory by it, not by the frames' session_id.
Run one: ``python tests/support_ws.py --port P --mode memory``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path

from support_locust import answer

GREETING = "Hi! I am the delivery assistant. How can I help?"
MODES = ("memory", "forget", "drop", "greet", "echo", "stream", "parrot", "chatty-forget", "close-each", "greet-late",
         "tokens", "issue-id")


async def main(port: int, mode: str) -> None:
    from websockets.asyncio.server import serve

    memory: dict[str, dict] = {}
    histories: dict[str, list] = {}

    def http(connection, request):
        if request.path.startswith("/history/"):
            stored = histories.get(request.path[len("/history/"):], [])
            return connection.respond(HTTPStatus.OK, json.dumps({"messages": stored}))
        if request.path != "/ws":
            return connection.respond(HTTPStatus.NOT_FOUND, "no such path\n")
        return None  # the handshake goes on

    async def chat(socket):
        frames = 0
        issued = f"ws_{uuid.uuid4().hex[:12]}"
        if mode == "issue-id":  # the connection is the conversation: its id comes in the welcome
            await socket.send(json.dumps({"type": "session", "session_id": issued}))
        if mode in ("greet", "chatty-forget"):  # a chat widget's welcome, before any turn
            await socket.send(json.dumps({"type": "message", "reply": GREETING}))
        if mode == "greet-late":  # the welcome after a lookup, once the first turn has left
            async def greet():
                await asyncio.sleep(0.05)
                await socket.send(json.dumps({"type": "greeting", "reply": GREETING}))
            asyncio.get_running_loop().create_task(greet())
        async for frame in socket:
            frames += 1
            body = json.loads(frame)
            session, message = issued if mode == "issue-id" else body["session_id"], body["message"]
            text = answer({} if mode in ("forget", "chatty-forget") else memory.setdefault(session, {}), message)
            if mode == "parrot":
                text = message  # answers with the message itself (a correct echo bot has no memory to test)
            if mode == "greet-late" and frames == 1:  # thinking: the welcome goes first
                await asyncio.sleep(0.1)
            histories.setdefault(session, []).extend([{"role": "user", "content": message},
                                                      {"role": "assistant", "content": text}])
            if mode == "drop" and frames == 4:
                await socket.close()
                return
            if mode in ("echo", "chatty-forget"):  # a chat room's broadcast of the user's own message
                await socket.send(json.dumps({"type": "message", "reply": message}))
            await socket.send(json.dumps({"type": "typing"}))
            if mode == "stream":  # the answer in token frames, then the whole of it
                for i in range(0, len(text), 4):
                    await socket.send(json.dumps({"type": "token", "reply": text[i:i + 4]}))
            if mode == "tokens":  # a LangServe-/Chainlit-like stream: tokens, then an end frame without text
                for i in range(0, len(text), 4):
                    await socket.send(json.dumps({"type": "token", "reply": text[i:i + 4]}))
                await socket.send(json.dumps({"type": "end"}))
                continue
            await socket.send(json.dumps({"type": "message", "reply": text}))
            if mode == "close-each":  # one answer per connection: closed cleanly right behind it
                await socket.close()
                return

    async with serve(chat, "127.0.0.1", port, process_request=http):
        await asyncio.Future()


@contextmanager
def ws_bot(mode: str = "memory"):
    """This bot in ``mode`` on a free loopback port; yields its base URL; always stopped."""
    from conftest import free_port
    from support_locust import serve_program

    port = free_port()
    with serve_program([sys.executable, __file__, "--port", str(port), "--mode", mode], port, f"ws bot {mode}") as url:
        yield url


def ws_run(url: str, tmp_path, *extra, time_s: str = "3s"):
    """A Locust run over the bot's WebSocket, audited through its /history/<id>."""
    from support_locust import quick_script, run_locust

    return run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--websocket", "--chat-path", "/ws",
                      "--http-url", f"{url}/history/{{session}}", "--role-field", "role", "--content-field", "content",
                      "--settle", "0", *extra, time_s=time_s)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", default="memory", choices=MODES)
    a = p.parse_args()
    asyncio.run(main(a.port, a.mode))
