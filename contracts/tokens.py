"""Tokens: the word each user message carries, so any stored text names its true session and turn.

A session id is ``gf`` + 16 hex digits (64 random bits); a token is the session id + ``t`` +
the turn index, e.g. ``gf3fa90c1d2e4b5a6ct12``. The oracle finds tokens with ``TOKEN_RE``
anywhere in stored text, with no journal needed to say whose they are.
"""
from __future__ import annotations

import random
import re
import secrets
import string

SESSION_RE = re.compile(r"^gf[0-9a-f]{16}$")
TOKEN_RE = re.compile(r"\b(gf[0-9a-f]{16})t([0-9]{1,6})\b")
_NONCE_LETTERS = string.ascii_uppercase + string.digits


def new_session_id() -> str:
    """A fresh session id with 64 random bits."""
    return "gf" + secrets.token_hex(8)


def make_token(session_id: str, turn: int) -> str:
    return f"{session_id}t{turn}"


def new_nonce(rng: random.Random | None = None) -> str:
    """A fact value such as ``8892-X7Q4``: 4 digits, a dash, 4 letters/digits (~34 bits)."""
    rng = rng or random
    return f"{rng.randrange(10000):04d}-" + "".join(rng.choices(_NONCE_LETTERS, k=4))  # one call: a Locust hot path


NONCE_RE = re.compile(r"\b[0-9]{4}-[A-Z0-9]{4}\b")


def value_spellings(value: str) -> tuple[str, ...]:
    """How a fact's value may be written back and still be the value: as planted, or with a space or nothing in
    place of its dash ("8892 X7Q4", "8892X7Q4": a model's, or a store's that strips punctuation). Compare in one
    case: the caller lower-cases both sides."""
    return (value, value.replace("-", " ", 1), value.replace("-", "", 1)) if "-" in value else (value,)
