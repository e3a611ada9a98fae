"""`python -m refbot demo` (interim): up, a short scripted conversation through HAProxy, down.

A later issue replaces this with the full Locust + chaos + audit run. The stack is always
taken down, also on Ctrl-C and errors.
"""
from __future__ import annotations

import json
import secrets
import tempfile
import urllib.request

from refbot import stack

_no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post_chat(url: str, session_id: str, message: str, timeout: float = 10.0) -> tuple[str, str]:
    """One turn; returns (reply, the replica that answered)."""
    body = json.dumps({"session_id": session_id, "message": message}).encode()
    request = urllib.request.Request(f"{url}/chat", data=body, headers={"Content-Type": "application/json"})
    with _no_proxy.open(request, timeout=timeout) as response:
        return json.loads(response.read())["reply"], response.headers.get("X-Refbot-Replica", "?")


def conversation(url: str, say=print) -> bool:
    """Two users each plant a fact, chat, and ask for it back; True when both are remembered."""
    remembered = True
    users = [("gf" + secrets.token_hex(8), fact, f"{secrets.randbelow(10000):04d}-{secrets.token_hex(2).upper()}")
             for fact in ("order number", "locker code")]
    for session, fact, nonce in users:
        script = [f"My {fact} is {nonce}.", "I am going to ask you about it later.", f"What is my {fact}?"]
        for turn, text in enumerate(script):
            message = f"[{session}t{turn}] {text}"
            reply, replica = post_chat(url, session, message)
            say(f"  {session} via {replica:<6} > {message}\n  {' ' * len(session)}            < {reply}")
        ok = nonce in reply
        remembered &= ok
        say(f"  {session}: {'REMEMBERED' if ok else 'AMNESIA'} its {fact} ({nonce})\n")
    return remembered


def demo(opts: stack.StackOptions, say=print) -> bool:
    temporary = None
    if opts.state_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="refbot-demo-")
        opts.state_dir = temporary.name
    try:
        st = stack.up(opts, say=say)
        try:
            say(f"\nconversation through HAProxy at {st['url']} (mode {opts.mode}):\n")
            ok = conversation(st["url"], say)
            say("every fact remembered" if ok else "the bot forgot: see docs/refbot.md for what this mode does")
            return ok
        finally:
            stack.down(opts.state_dir, say=say)
    finally:
        if temporary:
            temporary.cleanup()
