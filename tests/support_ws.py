"""A chat bot served over a WebSocket, as a chat page talks to it (for --websocket tests).

    ws://<host>/ws     each text frame {"session_id": ..., "message": ...} is answered by a typing frame,
                       {"type": "typing"}, then {"type": "message", "reply": <the answer>}
    GET /history/<id>  what it stored: {"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}]}
    any other path     404 (also the handshake)

Modes: ``memory`` answers from the session's facts; ``forget`` from none (every probe is amnesia); ``drop``
remembers, but closes each connection at its fourth frame, stored and unanswered.
Run one: ``python tests/support_ws.py --port P --mode memory``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from http import HTTPStatus

from support_locust import answer


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
        async for frame in socket:
            frames += 1
            body = json.loads(frame)
            session, message = body["session_id"], body["message"]
            text = answer({} if mode == "forget" else memory.setdefault(session, {}), message)
            histories.setdefault(session, []).extend([{"role": "user", "content": message},
                                                      {"role": "assistant", "content": text}])
            if mode == "drop" and frames == 4:
                await socket.close()
                return
            await socket.send(json.dumps({"type": "typing"}))
            await socket.send(json.dumps({"type": "message", "reply": text}))

    async with serve(chat, "127.0.0.1", port, process_request=http):
        await asyncio.Future()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", default="memory", choices=("memory", "forget", "drop"))
    a = p.parse_args()
    asyncio.run(main(a.port, a.mode))
