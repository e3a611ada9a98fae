"""A plain web app that knows nothing of goldfish: the example target of hello-targets.yaml.

Run it yourself (from this folder) and let chaos kill, pause and restart it:
    python -m uvicorn hello_app:app --host 127.0.0.1 --port 8011 & echo $! > hello.pid
"""
import os

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route


async def hello(request):
    return JSONResponse({"hello": "world", "pid": os.getpid()})


async def healthz(request):
    return JSONResponse({"ok": True, "pid": os.getpid()})


app = Starlette(routes=[Route("/", hello), Route("/healthz", healthz)])
