"""The reference chatbot's HTTP API (FastAPI): chat, history, health.

Build it with ``create_app()`` (settings from REFBOT_* env vars, see refbot.config) and serve
it with uvicorn, one worker per replica: ``python -m refbot serve`` or
``uvicorn --factory refbot.app:create_app``.
"""
from __future__ import annotations

import logging
import os
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from refbot.config import Config
from refbot.memory import NotReplicated, build_memory
from refbot.model import Model


class ChatRequest(BaseModel):
    session_id: str = Field(min_length=1)
    message: str


def create_app(config: Config | None = None) -> FastAPI:
    config = config or Config.from_env()
    memory = build_memory(config)
    model = Model(config.think_ms, config.jitter_ms)

    @asynccontextmanager
    async def lifespan(_app):
        await memory.start()
        yield
        await memory.stop()

    app = FastAPI(title="refbot", lifespan=lifespan)
    app.state.config = config
    app.state.memory = memory

    @app.post("/chat")
    async def chat(request: ChatRequest, response: Response) -> dict:
        response.headers["X-Refbot-Replica"] = config.replica  # shows HAProxy's routing to tests and humans
        reply = await memory.turn(request.session_id, request.message, model)
        return {"reply": reply}

    @app.exception_handler(NotReplicated)
    async def not_replicated(_request: Request, exc: NotReplicated) -> JSONResponse:
        """--wait-replicas: an honest bot does not acknowledge a turn the replicas have not confirmed."""
        return JSONResponse({"error": str(exc)}, status_code=503, headers={"X-Refbot-Replica": config.replica})

    @app.get("/sessions/{session_id}/history")
    async def history(session_id: str, response: Response) -> dict:
        """What this replica's memory holds for the session, oldest first (before prompt building)."""
        response.headers["X-Refbot-Replica"] = config.replica
        messages = await memory.history(session_id)
        return {"session_id": session_id,
                "messages": [{"type": m.type, "content": m.content} for m in messages]}

    @app.get("/healthz")
    async def healthz(response: Response) -> dict:
        """Liveness of this process only: a Redis outage must show as failed turns, not a dead replica."""
        response.headers["X-Refbot-Replica"] = config.replica
        return {"replica": config.replica, "release": config.release, "mode": config.mode, "pid": os.getpid()}

    logging.getLogger("refbot").setLevel(logging.INFO)
    return app
